// The FP8 ops: scaled_mm, the FP8 GEMM with per-tensor scales, as torch._scaled_mm.
#pragma once

#include <optional>

#include <ampgrad/core/tensor.h>

namespace ampgrad {

// out = scale_a * scale_b * (a @ b) [+ bias], summed in float32 and rounded once to out_dtype
// (bfloat16 unless given: float16, bfloat16 or float32), as torch._scaled_mm(a, b, scale_a,
// scale_b, bias, out_dtype=..., use_fast_accum=...). a [M, K] row-major and b [K, N]
// column-major (b.t() contiguous: torch's layout, Hopper's "TN"), float8_e4m3fn or
// float8_e5m2 (not both e5m2); K and N multiples of 16. scale_a and scale_b: float32 tensors
// of one element on a's device, the dequantization scales (a's real values are a * scale_a);
// the device reads them, the host never does. bias: [N] of out_dtype (16-bit outputs). amax,
// when given (float32, one element, on the device), receives max |out| before rounding,
// from cuBLASLt's epilogue on CUDA where it takes AMAX_D for the output dtype (else one
// reduction of the rounded output): what a delayed-scaling recipe needs. CUDA
// (compute capability 8.9+) runs cuBLASLt's FP8 kernels (Note [FP8 GEMM] in
// cuda/blas_lt.cpp); the CPU decodes to float32 and multiplies, the reference the CUDA path is
// tested against. Not differentiable (neither is torch._scaled_mm). Batched (ampgrad's
// extension; torch has no batched _scaled_mm): a [B, M, K] and b [B, K, N], each matrix laid
// out as above, batch strides multiples of 16, one scale for each operand's whole batch, no
// bias; out [B, M, N]. FP8 autocast's bmm and batched matmul run on it.
Tensor scaled_mm(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                 const Tensor& bias = Tensor(), std::optional<DType> out_dtype = std::nullopt,
                 bool use_fast_accum = false, const Tensor& amax = Tensor());

}  // namespace ampgrad
