// The operand layout both fused attention paths take (cuDNN's graphs, cuda/attention.cpp, and
// the one-tile kernels, cuda/attention_tile.cu).
#pragma once

#include <cstdint>

#include <ampgrad/core/tensor.h>

namespace ampgrad::cuda {

// Whether t is 4-D with a last stride of 1, its other strides multiples of 8 elements and its
// start 16-byte aligned: every row of it then loads and stores 16 bytes at a time.
inline bool sdpa_operand_fits(const Tensor& t) {
  if (t.dim() != 4 || t.stride(3) != 1) return false;
  for (int d = 0; d < 3; ++d)
    if (t.stride(d) % 8 != 0) return false;
  return reinterpret_cast<uintptr_t>(ampgrad::detail::address(t)) % 16 == 0;
}

}  // namespace ampgrad::cuda
