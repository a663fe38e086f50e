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
// of out's 16-bit dtype or undefined. Batched: a [B, M, K], b [B, K, N] (each matrix laid out
// as above, any batch strides of 16s), out contiguous [B, M, N], no bias.
// ops/scaled_mm.cpp checks all of it first. relu: out = max(..., 0), in the GEMM's epilogue
// where cuBLASLt takes it (EPILOGUE_RELU[_BIAS]), else as a kernel on out (2-D only; FP8
// autocast's linear_relu, ops/fp8_gemm.cpp).
// Returns whether amax was written (cuBLASLt's AMAX_D epilogue does not take every output
// dtype; the op then reduces out itself).
AG_DECLARE_KERNEL(scaled_gemm, bool(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                                    const Tensor& bias, const Tensor& scale_result, const Tensor& amax,
                                    bool fast_accum, bool relu, const Tensor& out));

}  // namespace ampgrad::kernel

namespace ampgrad::kernel {

// One quantization of FP8 autocast (Note [FP8 scaling] in amp/fp8.h): how x's scale is found
// and where its statistics go.
struct Fp8Quantize {
  // float32 [1]. Delayed scaling: read. Current scaling (current = true): written, from amax.
  Tensor scale;
  // float32 [1], max'd with max |x| (NaN wins). Current scaling: reduced first (reset to 0),
  // then the scale is fp8_max / amax / 2^margin (kept where amax is 0 or not finite).
  Tensor amax;
  // float32 [1]: written 1 / scale, the scale this quantization used (the GEMMs' dequantization
  // scale travels with its tensor, so a later update cannot change it).
  Tensor scale_inv;
  // int64 [2] or undefined: += the count of values saturated (|x * scale| past the largest
  // finite value, infinities included) and flushed (x non-zero, quantized to zero).
  Tensor counts;
  // bfloat16 [R, C] (any strides) or undefined: x is zero where mask <= 0 and quantized
  // elsewhere, a NaN mask included (relu's backward, as PyTorch's threshold_backward), amax and
  // counts taken after masking. FP8 autocast's linear_relu passes its output, so the relu's
  // backward rides on the gradient's quantization.
  Tensor mask;
  // float32 [C] or undefined: written, the column sums of (masked) x, unquantized, summed in
  // float32 in a fixed order (deterministic): linear's bias gradient, in the same pass.
  Tensor col_sums;
  bool current = false;
  float fp8_max = 0;
  int margin = 0;
};

// The checks every backend's fp8_quantize makes of q's optional tensors against x [R, C].
inline void check_fp8_quantize(const Tensor& x, const Fp8Quantize& q) {
  AG_CHECK(!q.mask.defined() || (q.mask.dtype() == kBFloat16 && q.mask.shape() == x.shape()),
           "fp8 quantization: the mask must be bfloat16 {}, got {}", shape_str(x.shape()), q.mask.desc());
  AG_CHECK(!q.col_sums.defined() || (q.col_sums.dtype() == kFloat32 && q.col_sums.numel() == x.size(1) &&
                                     q.col_sums.is_contiguous() && q.col_sums.device() == x.device()),
           "fp8 quantization: col_sums must be contiguous float32 [{}] on {}, got {}", x.size(1), x.device().str(),
           q.col_sums.desc());
}

// out = saturated(x * scale) in out's float8 dtype, round to nearest even; out_t (when
// defined) the same values transposed. x [R, C] float32/float16/bfloat16, any strides; out
// [R, C] and out_t [C, R] contiguous float8 of one dtype. CUDA: R at most 65535 * 64.
AG_DECLARE_KERNEL(fp8_quantize, void(const Tensor& x, const Fp8Quantize& q, const Tensor& out, const Tensor& out_t));

// The delayed-scaling update of metas [0, n) (Note [FP8 scaling] in amp/fp8.h): amax [C]
// (read, then zeroed), history [C, L] (row i's column pos[i] written, then pos[i] advanced
// mod L), fp8_max, scale and scale_inv [C] (float32; pos int32 [C]), all on one device.
struct Fp8Update {
  Tensor amax, history, pos, fp8_max, scale, scale_inv;
  int64_t n = 0;
  int margin = 0;
  bool most_recent = false;
};
AG_DECLARE_KERNEL(fp8_update_scales, void(const Fp8Update& u));

}  // namespace ampgrad::kernel
