// Gradient statistics for `ampgrad explain`, computed with ordinary ops in float64.
#include <ampgrad/amp/grad_health.h>

#include <cmath>

#include <ampgrad/autograd/node.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad::amp {

GradHealth grad_health(const Tensor& scaled_grad, double scale) {
  AG_CHECK(scale > 0, "grad_health: the scale must be positive, got {}", scale);
  NoGradGuard no_grad;
  GradHealth h;
  h.numel = scaled_grad.numel();
  if (h.numel == 0) return h;
  Tensor a = abs(scaled_grad.to(kFloat64));
  Tensor finite = lt(a, INFINITY);  // false for inf and NaN
  Tensor nonzero = ne(a, 0.0).to(kFloat64);
  const double n = static_cast<double>(h.numel);
  h.nonfinite = sum(finite.to(kInt64)).item<int64_t>() != h.numel;
  h.zero = 1.0 - sum(nonzero).item<double>() / n;
  h.underflow_unscaled = sum(nonzero * lt(a / scale, kFp16MinNormal).to(kFloat64)).item<double>() / n;
  h.underflow_scaled = sum(nonzero * lt(a, kFp16MinNormal).to(kFloat64)).item<double>() / n;
  h.max_scaled = max(where(finite, a, zeros_like(a))).item<double>();
  return h;
}

}  // namespace ampgrad::amp
