// CPU reference kernels: reductions over the middle dim of [outer, r, inner], softmax, and the
// count of NaN and inf values that anomaly detection makes.
#include <cmath>
#include <limits>
#include <type_traits>

#include <ampgrad/core/exponent_bins.h>
#include <ampgrad/core/kernels.h>
#include <ampgrad/ops/cpu_values.h>

namespace ampgrad::cpu {

namespace {

// The reference accumulates in double for every floating dtype: it is the judge.
template <class T> using ref_acc_t = std::conditional_t<std::is_integral_v<T>, int64_t, double>;

template <class T>
void reduce_typed(ReduceKind k, const Tensor& x, const Tensor& out, const Tensor& indices, double param) {
  using A = ref_acc_t<T>;
  const int64_t outer = x.size(0), r = x.size(1), inner = x.size(2);
  const T* px = static_cast<const T*>(x.data_ptr());
  int64_t* pi = indices.defined() ? static_cast<int64_t*>(indices.data_ptr()) : nullptr;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t j) { return static_cast<A>(static_cast<acc_t<T>>(px[(o * r + j) * inner + i])); };
      const int64_t dst = o * inner + i;
      if (k == ReduceKind::Argmax || k == ReduceKind::Argmin || k == ReduceKind::Max || k == ReduceKind::Min) {
        const bool want_max = k == ReduceKind::Argmax || k == ReduceKind::Max;
        int64_t best = 0;
        A bv = at(0);
        for (int64_t j = 1; j < r; ++j) {
          A v = at(j);
          if (std::isnan(static_cast<double>(bv))) break;  // NaN wins, first occurrence
          if (std::isnan(static_cast<double>(v)) || (want_max ? v > bv : v < bv)) {
            bv = v;
            best = j;
          }
        }
        if (k == ReduceKind::Argmax || k == ReduceKind::Argmin) {
          static_cast<int64_t*>(out.data_ptr())[dst] = best;
        } else {
          static_cast<T*>(out.data_ptr())[dst] = static_cast<T>(static_cast<acc_t<T>>(bv));
          if (pi) pi[dst] = best;
        }
        continue;
      }
      A acc{};
      switch (k) {
        case ReduceKind::Sum:
        case ReduceKind::Mean:
          for (int64_t j = 0; j < r; ++j) acc += at(j);
          if (k == ReduceKind::Mean) acc = r ? acc / static_cast<A>(r) : std::numeric_limits<A>::quiet_NaN();
          break;
        case ReduceKind::Prod:
          acc = 1;
          for (int64_t j = 0; j < r; ++j) acc *= at(j);
          break;
        case ReduceKind::Var: {
          double mean = 0;
          for (int64_t j = 0; j < r; ++j) mean += static_cast<double>(at(j));
          mean /= static_cast<double>(r);
          double ss = 0;
          for (int64_t j = 0; j < r; ++j) ss += (static_cast<double>(at(j)) - mean) * (static_cast<double>(at(j)) - mean);
          double denom = static_cast<double>(r) - param;
          acc = static_cast<A>(denom > 0 ? ss / denom : std::numeric_limits<double>::quiet_NaN());
          break;
        }
        case ReduceKind::LogSumExp: {
          double m = -std::numeric_limits<double>::infinity();
          for (int64_t j = 0; j < r; ++j) m = std::max(m, static_cast<double>(at(j)));
          if (std::isinf(m)) {
            acc = static_cast<A>(m);  // all -inf gives -inf; +inf gives +inf
            break;
          }
          double s = 0;
          for (int64_t j = 0; j < r; ++j) s += std::exp(static_cast<double>(at(j)) - m);
          acc = static_cast<A>(m + std::log(s));
          break;
        }
        case ReduceKind::Norm:
          if constexpr (std::is_floating_point_v<A>) {
            math::visit_norm_mode(param, [&](auto mode, auto power) {
              constexpr math::NormMode M = decltype(mode)::value;
              constexpr int P = decltype(power)::value;
              acc = math::norm_identity<M, A>();
              for (int64_t j = 0; j < r; ++j) acc = math::norm_accumulate<M, P>(acc, at(j), static_cast<A>(param));
              acc = math::norm_finish<M>(acc, static_cast<A>(1.0 / param));
            });
          }
          break;
        default: break;
      }
      static_cast<T*>(out.data_ptr())[dst] = static_cast<T>(static_cast<acc_t<T>>(acc));
    }
  }
}

}  // namespace

void reduce(ReduceKind k, const Tensor& x, const Tensor& out, const Tensor& indices, double param) {
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      AG_INTERNAL_ASSERT(false, "cpu reduce on bool");
    } else {
      reduce_typed<T>(k, x, out, indices, param);
    }
  });
}


// The reference: everything in double, rounded once into out's dtype (x's, or float32 for a
// 16-bit x read into float32).
void softmax(const Tensor& x, const Tensor& out, bool log) {
  const int64_t outer = x.size(0), r = x.size(1), inner = x.size(2);
  const std::vector<double> px = read_doubles(x);
  std::vector<double> po(px.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      auto idx = [&](int64_t j) { return static_cast<size_t>((o * r + j) * inner + i); };
      double m, s;
      max_and_sum_exp(px, idx(0), r, inner, m, s);
      for (int64_t j = 0; j < r; ++j) {
        const double v = px[idx(j)] - m;
        po[idx(j)] = log ? v - std::log(s) : std::exp(v) / s;
      }
    }
  }
  write_doubles(out, po);
}

void softmax_backward(const Tensor& g, const Tensor& y, const Tensor& grad_x, bool log) {
  const int64_t outer = y.size(0), r = y.size(1), inner = y.size(2);
  const std::vector<double> pg = read_doubles(g), py = read_doubles(y);
  std::vector<double> px(pg.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      auto idx = [&](int64_t j) { return static_cast<size_t>((o * r + j) * inner + i); };
      double s = 0;
      for (int64_t j = 0; j < r; ++j) s += log ? pg[idx(j)] : pg[idx(j)] * py[idx(j)];
      for (int64_t j = 0; j < r; ++j) {
        const size_t k = idx(j);
        px[k] = log ? pg[k] - std::exp(py[k]) * s : py[k] * (pg[k] - s);
      }
    }
  }
  write_doubles(grad_x, px);
}

void anomaly_check(const Tensor& t, const Tensor& flags, int64_t check) {
  int64_t* f = static_cast<int64_t*>(flags.data_ptr());
  if (f[0] != 0 && f[0] != check) return;
  int64_t nan = 0, inf = 0;
  visit_floating(t, "anomaly_check", [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(t.data_ptr());
    for (int64_t i = 0, n = t.numel(); i < n; ++i) {
      const double v = to_double(p[i]);
      nan += std::isnan(v);
      inf += std::isinf(v);
    }
  });
  if (nan + inf == 0) return;
  f[0] = check;
  f[1] += nan;
  f[2] += inf;
}

void exponent_histogram(const Tensor& t, const Tensor& counts) {
  int64_t* c = static_cast<int64_t*>(counts.data_ptr());
  visit_floating(t, "exponent_histogram", [&](auto tag) {
    using T = decltype(tag);
    using A = std::conditional_t<std::is_same_v<T, double>, double, float>;  // 16-bit values widen exactly
    const T* p = static_cast<const T*>(t.data_ptr());
    for (int64_t i = 0, n = t.numel(); i < n; ++i) ++c[exponent_bins::bin_of(static_cast<A>(p[i]))];
  });
}

AG_REGISTER_KERNEL(kernel::reduce, kCPU, reduce);
AG_REGISTER_KERNEL(kernel::softmax, kCPU, softmax);
AG_REGISTER_KERNEL(kernel::softmax_backward, kCPU, softmax_backward);
AG_REGISTER_KERNEL(kernel::anomaly_check, kCPU, anomaly_check);
AG_REGISTER_KERNEL(kernel::exponent_histogram, kCPU, exponent_histogram);

}  // namespace ampgrad::cpu
