// The CPU reference kernels' loops: the strided loop, which visits every element of N
// same-shaped operands given by their strides, innermost dimension in a tight loop; and the
// gather of a sliding window's backward (col2im, max pooling).
#pragma once

#include <array>
#include <cstdint>

#include <ampgrad/core/conv_params.h>
#include <ampgrad/core/shape.h>

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

// Calls f(i, j, oy, ox) for each tap (i, j) of each position (oy, ox) of an oh x ow output
// whose window reads input pixel (y, x): oy * sh - ph + i * dh == y, and likewise in x. Taps
// come in row-major order, so a sum over them has one fixed order.
template <class F>
void for_each_window_reading(const Window2d& w, int64_t y, int64_t x, int64_t oh, int64_t ow, F&& f) {
  for (int64_t i = 0; i < w.kh; ++i) {
    const int64_t ty = y + w.ph - i * w.dh;
    if (ty < 0 || ty % w.sh != 0 || ty / w.sh >= oh) continue;
    for (int64_t j = 0; j < w.kw; ++j) {
      const int64_t tx = x + w.pw - j * w.dw;
      if (tx < 0 || tx % w.sw != 0 || tx / w.sw >= ow) continue;
      f(i, j, ty / w.sh, tx / w.sw);
    }
  }
}

}  // namespace ampgrad::cpu
