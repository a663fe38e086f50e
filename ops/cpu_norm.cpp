// CPU reference kernels of batch norm (Note [Fused batch norm] in ops/norm.cpp): everything in
// double, over x viewed as [outer, C, inner].
#include <cmath>
#include <type_traits>
#include <vector>

#include <ampgrad/core/kernels.h>
#include <ampgrad/ops/cpu_values.h>

namespace ampgrad::cpu {

namespace {
// Calls f(o, c, i, flat) over every element.
template <class F> void each(int64_t outer, int64_t c, int64_t inner, F&& f) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < c; ++k)
      for (int64_t i = 0; i < inner; ++i) f(k, (o * c + k) * inner + i);
}
}  // namespace

void batch_norm_stats(const Tensor& x, int64_t outer, int64_t inner, double eps, const Tensor& mean,
                      const Tensor& invstd, const Tensor& running_mean, const Tensor& running_var, double momentum) {
  const int64_t c = mean.numel();
  const std::vector<double> v = read_doubles(x);
  std::vector<double> s1(c, 0.0), s2(c, 0.0);
  each(outer, c, inner, [&](int64_t k, int64_t e) { s1[k] += v[e]; });
  const double m = static_cast<double>(outer * inner);
  std::vector<double> mu(c), var(c), inv(c);
  for (int64_t k = 0; k < c; ++k) mu[k] = s1[k] / m;
  each(outer, c, inner, [&](int64_t k, int64_t e) { s2[k] += (v[e] - mu[k]) * (v[e] - mu[k]); });
  for (int64_t k = 0; k < c; ++k) {
    var[k] = s2[k] / m;
    inv[k] = 1.0 / std::sqrt(var[k] + eps);
  }
  write_doubles(mean, mu);
  write_doubles(invstd, inv);
  if (running_mean.defined()) {
    std::vector<double> rm = read_doubles(running_mean), rv = read_doubles(running_var);
    for (int64_t k = 0; k < c; ++k) {
      rm[k] = (1 - momentum) * rm[k] + momentum * mu[k];
      rv[k] = (1 - momentum) * rv[k] + momentum * var[k] * m / (m - 1);
    }
    write_doubles(running_mean, rm);
    write_doubles(running_var, rv);
  }
}

void batch_norm_apply(const Tensor& x, int64_t outer, int64_t inner, const Tensor& mean, const Tensor& invstd,
                      const Tensor& weight, const Tensor& bias, const Tensor& y) {
  const int64_t c = mean.numel();
  const std::vector<double> v = read_doubles(x), mu = read_doubles(mean), inv = read_doubles(invstd);
  const std::vector<double> w = weight.defined() ? read_doubles(weight) : std::vector<double>(c, 1.0);
  const std::vector<double> b = bias.defined() ? read_doubles(bias) : std::vector<double>(c, 0.0);
  std::vector<double> out(v.size());
  each(outer, c, inner, [&](int64_t k, int64_t e) { out[e] = (v[e] - mu[k]) * inv[k] * w[k] + b[k]; });
  write_doubles(y, out);
}

void batch_norm_backward(const Tensor& dy, const Tensor& x, int64_t outer, int64_t inner, const Tensor& mean,
                         const Tensor& invstd, const Tensor& weight, bool training, const Tensor& grad_x,
                         const Tensor& grad_weight, const Tensor& grad_bias) {
  const int64_t c = mean.numel();
  const std::vector<double> d = read_doubles(dy), v = read_doubles(x), mu = read_doubles(mean), inv = read_doubles(invstd);
  const std::vector<double> w = weight.defined() ? read_doubles(weight) : std::vector<double>(c, 1.0);
  std::vector<double> sd(c, 0.0), sdx(c, 0.0);
  each(outer, c, inner, [&](int64_t k, int64_t e) {
    sd[k] += d[e];
    sdx[k] += d[e] * (v[e] - mu[k]) * inv[k];
  });
  if (grad_bias.defined()) write_doubles(grad_bias, sd);
  if (grad_weight.defined()) write_doubles(grad_weight, sdx);
  if (grad_x.defined()) {
    const double m = static_cast<double>(outer * inner);
    std::vector<double> gx(d.size());
    each(outer, c, inner, [&](int64_t k, int64_t e) {
      double g = d[e];
      if (training) g -= sd[k] / m + (v[e] - mu[k]) * inv[k] * sdx[k] / m;
      gx[e] = g * inv[k] * w[k];
    });
    write_doubles(grad_x, gx);
  }
}

AG_REGISTER_KERNEL(kernel::batch_norm_stats, kCPU, batch_norm_stats);
AG_REGISTER_KERNEL(kernel::batch_norm_apply, kCPU, batch_norm_apply);
AG_REGISTER_KERNEL(kernel::batch_norm_backward, kCPU, batch_norm_backward);

}  // namespace ampgrad::cpu
