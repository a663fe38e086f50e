// scaled_mm: the FP8 GEMM with per-tensor scales, as torch._scaled_mm (ops/float8_ops.h).
#include <ampgrad/core/float8_kernels.h>
#include <ampgrad/ops/float8_ops.h>
#include <ampgrad/ops/internal.h>
#include <ampgrad/ops/op_scope.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad {

namespace {
const OpInfo kScaledMm{"scaled_mm", amp::Category::passthrough, false,
                       "its inputs are float8 already, with their scales: autocast has nothing to cast", {}, false,
                       kMovesFloat8};

void check_scale(const Tensor& s, const Tensor& a, const char* what) {
  AG_CHECK(s.defined() && s.dtype() == kFloat32 && s.numel() == 1 && s.device() == a.device(),
           "scaled_mm: {} must be a float32 tensor of one element on {} (a per-tensor scale), got {}", what,
           a.device().str(), s.defined() ? s.desc() : std::string("an undefined tensor"));
}
}  // namespace

Tensor scaled_mm(const Tensor& a0, const Tensor& b0, const Tensor& scale_a0, const Tensor& scale_b0,
                 const Tensor& bias0, std::optional<DType> out_dtype, bool use_fast_accum, const Tensor& amax0) {
  Tensor a = a0, b = b0, scale_a = scale_a0, scale_b = scale_b0, bias = bias0, amax = amax0;
  OpScope scope(kScaledMm, a, b, scale_a, scale_b, bias, amax);
  check_defined(kScaledMm, a, "a");
  check_defined(kScaledMm, b, "b");
  check_same_device(kScaledMm, a, b);
  // 2-D as torch._scaled_mm; 3-D (one batch of equal products, strided) is ampgrad's batched form.
  const bool batched = a.dim() == 3;
  AG_CHECK((a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0)) ||
               (batched && b.dim() == 3 && a.size(0) == b.size(0) && a.size(2) == b.size(1)),
           "scaled_mm: expected a [M, K] and b [K, N] (or a [B, M, K] and b [B, K, N]), got a {} and b {}", a.desc(),
           b.desc());
  AG_CHECK(is_float8(a.dtype()) && is_float8(b.dtype()) &&
               !(a.dtype() == kFloat8_e5m2 && b.dtype() == kFloat8_e5m2),
           "scaled_mm: a and b must be float8_e4m3fn or float8_e5m2, not both float8_e5m2, got a {} and b {}",
           a.desc(), b.desc());
  const int64_t d = batched ? 1 : 0;  // the first matrix dim
  const int64_t m = a.size(d), k = a.size(d + 1), n = b.size(d + 1);
  AG_CHECK((a.stride(d + 1) == 1 || k == 1) && (b.stride(d) == 1 || k == 1),
           "scaled_mm: a must be row-major and b column-major (b.t() contiguous, as torch._scaled_mm), got a {} with "
           "strides {} and b {} with strides {}",
           a.desc(), shape_str(a.strides()), b.desc(), shape_str(b.strides()));
  AG_CHECK(k % 16 == 0 && n % 16 == 0 && a.stride(d) % 16 == 0 && b.stride(d + 1) % 16 == 0 &&
               (!batched || (a.stride(0) % 16 == 0 && b.stride(0) % 16 == 0)),
           "scaled_mm: K ({}) and N ({}) and the leading dimensions ({}, {}){} must be multiples of 16 (FP8 tensor "
           "cores), got a {} and b {}",
           k, n, a.stride(d), b.stride(d + 1),
           batched ? fmt::format(" and batch strides ({}, {})", a.stride(0), b.stride(0)) : std::string(), a.desc(),
           b.desc());
  check_scale(scale_a, a, "scale_a");
  check_scale(scale_b, a, "scale_b");
  const DType out_t = out_dtype.value_or(kBFloat16);
  AG_CHECK(out_t == kBFloat16 || out_t == kFloat16 || out_t == kFloat32,
           "scaled_mm: out_dtype must be bfloat16, float16 or float32, got {}", dtype_name(out_t));
  if (bias.defined()) {
    AG_CHECK(!batched, "scaled_mm: the batched form takes no bias, got a {} and bias {}", a.desc(), bias.desc());
    AG_CHECK(out_t != kFloat32 && bias.dtype() == out_t && bias.dim() == 1 && bias.size(0) == n &&
                 bias.device() == a.device(),
             "scaled_mm: bias must be [{}] of out_dtype {} (a 16-bit output) on {}, got {}", n, dtype_name(out_t),
             a.device().str(), bias.desc());
  }
  if (amax.defined()) check_scale(amax, a, "amax");

  Tensor out = batched ? empty({a.size(0), m, n}, TensorOptions(out_t).device(a.device()))
                       : empty({m, n}, TensorOptions(out_t).device(a.device()));
  if (a.is_cuda()) {
    Tensor bias_c = bias.defined() ? bias.contiguous() : bias;
    scope.note_path([] { return std::string("cuBLASLt FP8 GEMM"); });
    const bool amax_written =
        kernel::scaled_gemm(a.device(), a, b, scale_a, scale_b, bias_c, Tensor(), amax, use_fast_accum, /*relu=*/false, out);
    // Where the epilogue does not take AMAX_D, one reduction of the rounded output.
    if (amax.defined() && !amax_written) amax.copy_(max(abs(out)).to(kFloat32).reshape(amax.shape()));
    return scope.finish(out);
  }
  // The CPU: float32 values, one float32 product, scaled; the reference of the CUDA path.
  Tensor r = (batched ? bmm(a.to(kFloat32), b.to(kFloat32)) : mm(a.to(kFloat32), b.to(kFloat32))) *
             (scale_a * scale_b).reshape({});
  if (bias.defined()) r = r + bias.to(kFloat32);
  if (amax.defined()) amax.copy_(max(r.abs()).reshape(amax.shape()));
  out.copy_(r);
  return scope.finish(out);
}

}  // namespace ampgrad
