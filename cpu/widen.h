// Float16 on the fast CPU path (Note [Float16 on the CPU]).
#pragma once

#include <memory>

#include <ampgrad/core/kernels.h>
#include <ampgrad/core/shape.h>
#include <ampgrad/core/storage.h>
#include <ampgrad/core/tensor.h>

namespace ampgrad::cpu {

// Note [Float16 on the CPU]
// oneDNN 2.6 has no float16 convolution or matmul on this CPU (it has no AVX512-FP16), and
// OpenBLAS none at all. A float16 convolution or GEMM on the fast path therefore widens its
// operands to float32, runs the float32 kernel and rounds the result to float16 once: float
// math, one rounding on store, as ampgrad computes 16-bit dtypes everywhere and as the reference does
// (which also widens), at float32's speed plus the copies.

// A contiguous float32 tensor of t's shape on the CPU, uninitialized.
inline Tensor float32_like(const Tensor& t) {
  auto storage = std::make_shared<Storage>(static_cast<size_t>(t.numel()) * sizeof(float), Device(kCPU));
  return make_tensor(storage, t.shape(), contiguous_strides(t.shape()), 0, kFloat32);
}
// t's values in float32 (undefined stays undefined).
inline Tensor widened(const Tensor& t) {
  if (!t.defined()) return t;
  Tensor w = float32_like(t);
  kernel::copy(Device(kCPU), w, t);
  return w;
}

}  // namespace ampgrad::cpu
