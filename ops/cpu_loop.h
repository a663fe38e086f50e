// The CPU reference kernels' strided loop: visits every element of N same-shaped operands
// given by their strides, innermost dimension in a tight loop.
#pragma once

#include <array>
#include <cstdint>

#include "core/shape.h"

namespace ampgrad::cpu {

// Calls f(offsets) for each index of `sizes`, with offsets[i] (in elements) into operand i.
template <size_t N, class F>
void for_each_offset(const Shape& sizes, const std::array<const Shape*, N>& strides, F&& f) {
  const int64_t ndim = static_cast<int64_t>(sizes.size());
  if (shape_numel(sizes) == 0) return;
  std::array<int64_t, N> off{};
  if (ndim == 0) {
    f(off);
    return;
  }
  const int64_t inner = sizes[ndim - 1];
  std::array<int64_t, N> inner_stride;
  for (size_t i = 0; i < N; ++i) inner_stride[i] = (*strides[i])[ndim - 1];
  Shape idx(ndim, 0);
  while (true) {
    std::array<int64_t, N> o = off;
    for (int64_t j = 0; j < inner; ++j) {
      f(o);
      for (size_t i = 0; i < N; ++i) o[i] += inner_stride[i];
    }
    // Advance the outer dims like an odometer.
    int64_t d = ndim - 2;
    for (; d >= 0; --d) {
      for (size_t i = 0; i < N; ++i) off[i] += (*strides[i])[d];
      if (++idx[d] < sizes[d]) break;
      for (size_t i = 0; i < N; ++i) off[i] -= (*strides[i])[d] * sizes[d];
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

}  // namespace ampgrad::cpu
