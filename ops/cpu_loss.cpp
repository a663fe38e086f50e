// CPU reference kernels of nll_loss and cross_entropy: everything in double.
#include <cmath>
#include <limits>
#include <vector>

#include "core/kernels.h"
#include "ops/cpu_values.h"

namespace ampgrad::cpu {

namespace {

// A counted row whose target lies outside [0, C) contributes 0 (CUDA cannot raise from a
// kernel; the op checks targets on the CPU before it gets here).
bool in_range(int64_t t, int64_t c) { return t >= 0 && t < c; }

}  // namespace

void nll_loss_forward(const Tensor& lp, const Tensor& target, int64_t ignore_index, const Tensor& loss,
                      const Tensor& count) {
  const int64_t n = lp.size(0), c = lp.size(1);
  const int64_t* t = static_cast<const int64_t*>(target.data_ptr());
  visit_floating(lp, "nll_loss", [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(lp.data_ptr());
    double total = 0, counted = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (t[i] == ignore_index) continue;
      counted += 1;
      if (in_range(t[i], c)) total += to_double(p[i * c + t[i]]);
    }
    *static_cast<T*>(loss.data_ptr()) = from_double<T>(-total / counted);
    *static_cast<float*>(count.data_ptr()) = static_cast<float>(counted);
  });
}

void nll_loss_backward(const Tensor& grad, const Tensor& target, const Tensor& count, int64_t ignore_index,
                       const Tensor& grad_lp) {
  const int64_t n = grad_lp.size(0), c = grad_lp.size(1);
  const int64_t* t = static_cast<const int64_t*>(target.data_ptr());
  visit_floating(grad_lp, "nll_loss backward", [&](auto tag) {
    using T = decltype(tag);
    const double g = to_double(*static_cast<const T*>(grad.data_ptr()));
    const double scale = -g / static_cast<double>(*static_cast<const float*>(count.data_ptr()));
    T* out = static_cast<T*>(grad_lp.data_ptr());
    for (int64_t i = 0; i < n * c; ++i) out[i] = from_double<T>(0.0);
    for (int64_t i = 0; i < n; ++i)
      if (t[i] != ignore_index && in_range(t[i], c)) out[i * c + t[i]] = from_double<T>(scale);
  });
}


void cross_entropy_forward(const Tensor& x, const Tensor& target, int64_t ignore_index, const Tensor& lse,
                           const Tensor& loss, const Tensor& count) {
  const int64_t n = x.size(0), c = x.size(1);
  const int64_t* t = static_cast<const int64_t*>(target.data_ptr());
  const std::vector<double> v = read_doubles(x);
  double total = 0, counted = 0;
  for (int64_t i = 0; i < n; ++i) {
    double m, s;
    max_and_sum_exp(v, static_cast<size_t>(i * c), c, 1, m, s);
    const double l = m + std::log(s);
    store_double(lse, i, l);
    if (t[i] == ignore_index) continue;
    counted += 1;
    if (in_range(t[i], c)) total += l - v[i * c + t[i]];
  }
  store_double(loss, 0, total / counted);
  *static_cast<float*>(count.data_ptr()) = static_cast<float>(counted);
}

void cross_entropy_backward(const Tensor& grad, const Tensor& x, const Tensor& target, const Tensor& lse,
                            const Tensor& count, int64_t ignore_index, const Tensor& grad_x) {
  const int64_t n = x.size(0), c = x.size(1);
  const int64_t* t = static_cast<const int64_t*>(target.data_ptr());
  const std::vector<double> v = read_doubles(x), l = read_doubles(lse);
  const double scale = read_doubles(grad)[0] / static_cast<double>(*static_cast<const float*>(count.data_ptr()));
  for (int64_t i = 0; i < n; ++i) {
    const bool counted = t[i] != ignore_index && in_range(t[i], c);
    for (int64_t j = 0; j < c; ++j) {
      const double p = std::exp(v[i * c + j] - l[i]);
      store_double(grad_x, i * c + j, counted ? scale * (p - (j == t[i] ? 1.0 : 0.0)) : 0.0);
    }
  }
}

AG_REGISTER_KERNEL(kernel::nll_loss_forward, kCPU, nll_loss_forward);
AG_REGISTER_KERNEL(kernel::nll_loss_backward, kCPU, nll_loss_backward);
AG_REGISTER_KERNEL(kernel::cross_entropy_forward, kCPU, cross_entropy_forward);
AG_REGISTER_KERNEL(kernel::cross_entropy_backward, kCPU, cross_entropy_backward);

}  // namespace ampgrad::cpu
