// The FP8 GEMM's kernel (CUDA: cuda/matmul.cpp, Note [FP8 GEMM] in cuda/blas_lt.cpp); the op
// is ops/scaled_mm.cpp.
#pragma once

#include <ampgrad/core/dispatch.h>
#include <ampgrad/core/tensor.h>

namespace ampgrad::kernel {

// out = scale_a * scale_b * (a @ b) [+ bias], times scale_result for a float8 out; amax (when
// defined) = max |scale_a * scale_b * (a @ b) [+ bias]|. a [M, K] row-major and b [K, N]
// column-major float8 (not both e5m2), K and N multiples of 16; scale_a, scale_b,
// scale_result and amax float32 [1] tensors on a's device; out contiguous [M, N]; bias [N]
// of out's 16-bit dtype or undefined. ops/scaled_mm.cpp checks all of it first.
// Returns whether amax was written (cuBLASLt's AMAX_D epilogue does not take every output
// dtype; the op then reduces out itself).
AG_DECLARE_KERNEL(scaled_gemm, bool(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                                    const Tensor& bias, const Tensor& scale_result, const Tensor& amax,
                                    bool fast_accum, const Tensor& out));

}  // namespace ampgrad::kernel
