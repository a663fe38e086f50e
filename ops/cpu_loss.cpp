// CPU reference kernels of nll_loss and cross_entropy (everything in double) and of the
// pointwise losses (core/loss_kinds.def: each element in its accumulation type, as the CUDA
// kernels, the sums in double).
#include <cmath>
#include <limits>
#include <vector>

#include <ampgrad/core/kernels.h>
#include <ampgrad/ops/cpu_values.h>

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

namespace {
template <class F> void visit_loss_kind(LossKind k, F&& f) {
  switch (k) {
#define AG_LOSS(Kind, ...) \
  case LossKind::Kind: return f(std::integral_constant<LossKind, LossKind::Kind>{});
#include <ampgrad/core/loss_kinds.def>
  }
  AG_INTERNAL_ASSERT(false, "pointwise loss: unknown kind {}", static_cast<int>(k));
}
}  // namespace

void pointwise_loss(LossKind k, const Tensor& x, const Tensor& y, const Tensor& out, double a, double b) {
  visit_loss_kind(k, [&](auto kind) {
    visit_floating(x, "pointwise loss", [&](auto tag) {
      using T = decltype(tag);
      using A = acc_t<T>;
      const T* px = static_cast<const T*>(x.data_ptr());
      const T* py = static_cast<const T*>(y.data_ptr());
      T* po = static_cast<T*>(out.data_ptr());
      for (int64_t i = 0, n = x.numel(); i < n; ++i)
        po[i] = static_cast<T>(loss_op<kind.value, A>(static_cast<A>(px[i]), static_cast<A>(py[i]), static_cast<A>(a),
                                                      static_cast<A>(b)));
    });
  });
}

void pointwise_loss_sum(LossKind k, const Tensor& x, const Tensor& y, const Tensor& out, double a, double b,
                        double scale) {
  visit_loss_kind(k, [&](auto kind) {
    visit_floating(x, "pointwise loss", [&](auto tag) {
      using T = decltype(tag);
      using A = acc_t<T>;
      const T* px = static_cast<const T*>(x.data_ptr());
      const T* py = static_cast<const T*>(y.data_ptr());
      double total = 0;
      for (int64_t i = 0, n = x.numel(); i < n; ++i)
        total += static_cast<double>(
            loss_op<kind.value, A>(static_cast<A>(px[i]), static_cast<A>(py[i]), static_cast<A>(a), static_cast<A>(b)));
      *static_cast<T*>(out.data_ptr()) = from_double<T>(total * scale);
    });
  });
}

void pointwise_loss_backward(LossKind k, const Tensor& g, const Tensor& x, const Tensor& y, const Tensor& gx,
                             const Tensor& gy, double a, double b, double scale) {
  visit_loss_kind(k, [&](auto kind) {
    visit_floating(x, "pointwise loss backward", [&](auto tag) {
      using T = decltype(tag);
      using A = acc_t<T>;
      const T* pg = static_cast<const T*>(g.data_ptr());
      const T* px = static_cast<const T*>(x.data_ptr());
      const T* py = static_cast<const T*>(y.data_ptr());
      T* pgx = gx.defined() ? static_cast<T*>(gx.data_ptr()) : nullptr;
      T* pgy = gy.defined() ? static_cast<T*>(gy.data_ptr()) : nullptr;
      const bool reduced = g.dim() == 0;
      const A sa = static_cast<A>(a), sb = static_cast<A>(b), sc = static_cast<A>(scale);
      for (int64_t i = 0, n = x.numel(); i < n; ++i) {
        const A vg = static_cast<A>(pg[reduced ? 0 : i]) * sc, vx = static_cast<A>(px[i]), vy = static_cast<A>(py[i]);
        if (pgx) pgx[i] = static_cast<T>(loss_grad_x<kind.value, A>(vg, vx, vy, sa, sb));
        if (pgy) pgy[i] = static_cast<T>(loss_grad_y<kind.value, A>(vg, vx, vy, sa, sb));
      }
    });
  });
}

AG_REGISTER_KERNEL(kernel::pointwise_loss, kCPU, pointwise_loss);
AG_REGISTER_KERNEL(kernel::pointwise_loss_sum, kCPU, pointwise_loss_sum);
AG_REGISTER_KERNEL(kernel::pointwise_loss_backward, kCPU, pointwise_loss_backward);
AG_REGISTER_KERNEL(kernel::nll_loss_forward, kCPU, nll_loss_forward);
AG_REGISTER_KERNEL(kernel::nll_loss_backward, kCPU, nll_loss_backward);
AG_REGISTER_KERNEL(kernel::cross_entropy_forward, kCPU, cross_entropy_forward);
AG_REGISTER_KERNEL(kernel::cross_entropy_backward, kCPU, cross_entropy_backward);

}  // namespace ampgrad::cpu
