// Fast CPU softmax, log_softmax and cross-entropy over rows (the last dim: [outer, r, 1] and
// [N, C] contiguous), float32, bfloat16 and float16: each row on one thread, its maximum and
// its exponentials in float, its sums in double, rounded once on store, as the reference
// (ops/cpu_reduce.cpp, ops/cpu_loss.cpp) which does everything in double. Softmax over a
// middle dim (inner > 1) and float64 run the reference.
#include <cmath>
#include <vector>

#include <ampgrad/core/dispatch.h>
#include <ampgrad/core/kernels.h>
#include <ampgrad/cpu/parallel.h>

namespace ampgrad::cpu {

namespace {

constexpr int64_t kGrain = 16384;  // elements per chunk

bool half_or_float(DType d) { return d == kFloat32 || d == kBFloat16 || d == kFloat16; }

template <class F> void visit_fast(DType d, F&& f) {
  if (d == kFloat32) f(float{});
  else if (d == kBFloat16) f(BFloat16{});
  else f(Half{});
}

// Max and sum of exp(v - max) of a row, in float (the sum in double).
template <class T> void row_stats(const T* v, int64_t r, float& m, double& s) {
  m = -INFINITY;
  for (int64_t j = 0; j < r; ++j) m = std::max(m, static_cast<float>(v[j]));
  s = 0;
  for (int64_t j = 0; j < r; ++j) s += std::exp(static_cast<float>(v[j]) - m);
}

void softmax(const Tensor& x, const Tensor& out, bool log) {
  if (x.size(2) != 1 || !half_or_float(x.dtype()) || (out.dtype() != x.dtype() && out.dtype() != kFloat32) ||
      !x.is_contiguous() || !out.is_contiguous())
    return kernel::softmax.reference(x, out, log);
  const int64_t rows = x.size(0), r = x.size(1);
  visit_fast(x.dtype(), [&](auto xtag) {
    using X = decltype(xtag);
    auto run = [&](auto otag) {
      using O = decltype(otag);
      const X* px = static_cast<const X*>(x.data_ptr());
      O* po = static_cast<O*>(out.data_ptr());
      parallel_for(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(r, 1)), [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const X* v = px + i * r;
          O* o = po + i * r;
          float m;
          double s;
          row_stats(v, r, m, s);
          // All -inf: NaN, as the reference's exp(-inf - -inf).
          const float ls = static_cast<float>(std::log(s)), inv = static_cast<float>(1.0 / s);
          for (int64_t j = 0; j < r; ++j) {
            const float d = static_cast<float>(v[j]) - m;
            o[j] = static_cast<O>(log ? d - ls : std::exp(d) * inv);
          }
        }
      });
    };
    if (out.dtype() == kFloat32) run(float{});
    else run(X{});
  });
}

void softmax_backward(const Tensor& g, const Tensor& y, const Tensor& grad_x, bool log) {
  if (y.size(2) != 1 || !half_or_float(y.dtype()) || g.dtype() != y.dtype() || !g.is_contiguous() ||
      !y.is_contiguous() || !grad_x.is_contiguous() || (grad_x.dtype() != y.dtype() && !half_or_float(grad_x.dtype())))
    return kernel::softmax_backward.reference(g, y, grad_x, log);
  const int64_t rows = y.size(0), r = y.size(1);
  visit_fast(y.dtype(), [&](auto ytag) {
    using Y = decltype(ytag);
    visit_fast(grad_x.dtype(), [&](auto gtag) {
      using G = decltype(gtag);
      const Y* pg = static_cast<const Y*>(g.data_ptr());
      const Y* py = static_cast<const Y*>(y.data_ptr());
      G* px = static_cast<G*>(grad_x.data_ptr());
      parallel_for(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(r, 1)), [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const Y* gr = pg + i * r;
          const Y* yr = py + i * r;
          G* xr = px + i * r;
          double s = 0;
          for (int64_t j = 0; j < r; ++j)
            s += log ? static_cast<double>(static_cast<float>(gr[j]))
                     : static_cast<double>(static_cast<float>(gr[j])) * static_cast<float>(yr[j]);
          const float sf = static_cast<float>(s);
          for (int64_t j = 0; j < r; ++j) {
            const float gv = static_cast<float>(gr[j]), yv = static_cast<float>(yr[j]);
            xr[j] = static_cast<G>(log ? gv - std::exp(yv) * sf : yv * (gv - sf));
          }
        }
      });
    });
  });
}

bool in_range(int64_t t, int64_t c) { return t >= 0 && t < c; }

void cross_entropy_forward(const Tensor& x, const Tensor& target, int64_t ignore_index, const Tensor& lse,
                           const Tensor& loss, const Tensor& count) {
  if (!half_or_float(x.dtype()) || lse.dtype() != kFloat32 || !x.is_contiguous())
    return kernel::cross_entropy_forward.reference(x, target, ignore_index, lse, loss, count);
  const int64_t n = x.size(0), c = x.size(1);
  const int64_t* t = static_cast<const int64_t*>(target.data_ptr());
  float* pl = static_cast<float*>(lse.data_ptr());
  std::vector<double> term(static_cast<size_t>(n), 0.0);  // each row's share, summed in order below
  visit_fast(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x.data_ptr());
    parallel_for(n, std::max<int64_t>(1, kGrain / std::max<int64_t>(c, 1)), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        float m;
        double s;
        row_stats(px + i * c, c, m, s);
        const double l = static_cast<double>(m) + std::log(s);
        pl[i] = static_cast<float>(l);
        if (t[i] != ignore_index && in_range(t[i], c)) term[i] = l - static_cast<float>(px[i * c + t[i]]);
      }
    });
  });
  double total = 0, counted = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (t[i] == ignore_index) continue;
    counted += 1;
    total += term[i];
  }
  const double mean = total / counted;
  visit_fast(loss.dtype(), [&](auto tag) {
    using L = decltype(tag);
    *static_cast<L*>(loss.data_ptr()) = static_cast<L>(static_cast<float>(mean));
  });
  *static_cast<float*>(count.data_ptr()) = static_cast<float>(counted);
}

void cross_entropy_backward(const Tensor& grad, const Tensor& x, const Tensor& target, const Tensor& lse,
                            const Tensor& count, int64_t ignore_index, const Tensor& grad_x) {
  if (!half_or_float(x.dtype()) || !half_or_float(grad.dtype()) || lse.dtype() != kFloat32 || !x.is_contiguous() ||
      !grad_x.is_contiguous() || grad_x.dtype() != x.dtype())
    return kernel::cross_entropy_backward.reference(grad, x, target, lse, count, ignore_index, grad_x);
  const int64_t n = x.size(0), c = x.size(1);
  const int64_t* t = static_cast<const int64_t*>(target.data_ptr());
  const float* pl = static_cast<const float*>(lse.data_ptr());
  double g0 = 0;
  visit_fast(grad.dtype(), [&](auto tag) {
    using G = decltype(tag);
    g0 = static_cast<float>(*static_cast<const G*>(grad.data_ptr()));
  });
  const float scale = static_cast<float>(g0 / static_cast<double>(*static_cast<const float*>(count.data_ptr())));
  visit_fast(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x.data_ptr());
    T* pg = static_cast<T*>(grad_x.data_ptr());
    parallel_for(n, std::max<int64_t>(1, kGrain / std::max<int64_t>(c, 1)), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const bool counted = t[i] != ignore_index && in_range(t[i], c);
        for (int64_t j = 0; j < c; ++j) {
          const float p = std::exp(static_cast<float>(px[i * c + j]) - pl[i]);
          pg[i * c + j] = static_cast<T>(counted ? scale * (p - (j == t[i] ? 1.0f : 0.0f)) : 0.0f);
        }
      }
    });
  });
}

}  // namespace

AG_REGISTER_FAST_KERNEL(kernel::softmax, softmax);
AG_REGISTER_FAST_KERNEL(kernel::softmax_backward, softmax_backward);
AG_REGISTER_FAST_KERNEL(kernel::cross_entropy_forward, cross_entropy_forward);
AG_REGISTER_FAST_KERNEL(kernel::cross_entropy_backward, cross_entropy_backward);

}  // namespace ampgrad::cpu
