// Fast CPU batch norm (Note [Fused batch norm] in ops/norm.cpp) over x viewed as [outer, C,
// inner] with inner > 1 (NCHW): one channel per task on the thread team, each channel's sums
// formed in one thread in a fixed order (float lanes per row, rows added in double), so results
// do not depend on the number of threads. x float32, bfloat16 or float16, per-channel tensors
// float32. Channels-last (inner 1) and float64 run the reference (ops/cpu_norm.cpp).
#include <algorithm>
#include <cmath>

#include <ampgrad/core/dispatch.h>
#include <ampgrad/core/kernels.h>
#include <ampgrad/cpu/parallel.h>

namespace ampgrad::cpu {

namespace {

bool fast(const Tensor& x, int64_t inner) {
  return inner > 1 && x.is_contiguous() && (x.dtype() == kFloat32 || x.dtype() == kBFloat16 || x.dtype() == kFloat16);
}
bool f32(const Tensor& t) { return !t.defined() || (t.dtype() == kFloat32 && t.is_contiguous()); }

template <class F> void visit_fast(DType d, F&& f) {
  if (d == kFloat32) f(float{});
  else if (d == kBFloat16) f(BFloat16{});
  else f(Half{});
}

constexpr int kLanes = 8;

// Sum of f(i) over [0, n) in kLanes float lanes, each lane flushed into double every
// kFlush elements (a large plane of large values would otherwise lose float's precision).
constexpr int64_t kFlush = 256;
template <class F> double row_sum(int64_t n, F&& f) {
  double s = 0;
  int64_t i = 0;
  while (i + kLanes <= n) {
    float lane[kLanes] = {};
    const int64_t stop = std::min(n - kLanes + 1, i + kFlush);
    for (; i < stop; i += kLanes)
      for (int l = 0; l < kLanes; ++l) lane[l] += f(i + l);
    for (int l = 0; l < kLanes; ++l) s += lane[l];
  }
  for (; i < n; ++i) s += f(i);
  return s;
}

const float* fptr(const Tensor& t) { return t.defined() ? static_cast<const float*>(t.data_ptr()) : nullptr; }
float* fptr_mut(const Tensor& t) { return t.defined() ? static_cast<float*>(t.data_ptr()) : nullptr; }

void batch_norm_stats(const Tensor& x, int64_t outer, int64_t inner, double eps, const Tensor& mean,
                      const Tensor& invstd, const Tensor& running_mean, const Tensor& running_var, double momentum) {
  if (!fast(x, inner) || !f32(mean) || !f32(invstd) || !f32(running_mean) || !f32(running_var))
    return kernel::batch_norm_stats.reference(x, outer, inner, eps, mean, invstd, running_mean, running_var, momentum);
  const int64_t c = mean.numel();
  float *pm = fptr_mut(mean), *pv = fptr_mut(invstd), *rm = fptr_mut(running_mean), *rv = fptr_mut(running_var);
  visit_fast(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x.data_ptr());
    parallel_for(c, 1, [&](int64_t k0, int64_t k1) {
      for (int64_t k = k0; k < k1; ++k) {
        double s1 = 0;
        for (int64_t o = 0; o < outer; ++o) {
          const T* row = px + (o * c + k) * inner;
          s1 += row_sum(inner, [&](int64_t i) { return static_cast<float>(row[i]); });
        }
        const double m = static_cast<double>(outer * inner), mu = s1 / m;
        const float muf = static_cast<float>(mu);
        double s2 = 0;
        for (int64_t o = 0; o < outer; ++o) {
          const T* row = px + (o * c + k) * inner;
          s2 += row_sum(inner, [&](int64_t i) {
            const float d = static_cast<float>(row[i]) - muf;
            return d * d;
          });
        }
        const double var = s2 / m;
        pm[k] = static_cast<float>(mu);
        pv[k] = static_cast<float>(1.0 / std::sqrt(var + eps));
        if (rm) {
          rm[k] = static_cast<float>((1 - momentum) * rm[k] + momentum * mu);
          rv[k] = static_cast<float>((1 - momentum) * rv[k] + momentum * var * m / (m - 1));
        }
      }
    });
  });
}

void batch_norm_apply(const Tensor& x, int64_t outer, int64_t inner, const Tensor& mean, const Tensor& invstd,
                      const Tensor& weight, const Tensor& bias, const Tensor& y) {
  if (!fast(x, inner) || !y.is_contiguous() || y.dtype() != x.dtype() || !f32(mean) || !f32(invstd) || !f32(weight) ||
      !f32(bias))
    return kernel::batch_norm_apply.reference(x, outer, inner, mean, invstd, weight, bias, y);
  const int64_t c = mean.numel();
  const float *pm = fptr(mean), *pv = fptr(invstd), *pw = fptr(weight), *pb = fptr(bias);
  visit_fast(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x.data_ptr());
    T* py = static_cast<T*>(y.data_ptr());
    parallel_for(outer * c, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t k = r % c;
        const float scale = pv[k] * (pw ? pw[k] : 1.0f);
        const float shift = (pb ? pb[k] : 0.0f) - pm[k] * scale;
        const T* xr = px + r * inner;
        T* yr = py + r * inner;
        for (int64_t i = 0; i < inner; ++i) yr[i] = static_cast<T>(static_cast<float>(xr[i]) * scale + shift);
      }
    });
  });
}

void batch_norm_backward(const Tensor& dy, const Tensor& x, int64_t outer, int64_t inner, const Tensor& mean,
                         const Tensor& invstd, const Tensor& weight, bool training, const Tensor& grad_x,
                         const Tensor& grad_weight, const Tensor& grad_bias) {
  if (!fast(x, inner) || !dy.is_contiguous() || dy.dtype() != x.dtype() || !f32(mean) || !f32(invstd) ||
      !f32(weight) || !f32(grad_weight) || !f32(grad_bias) ||
      (grad_x.defined() && (!grad_x.is_contiguous() || grad_x.dtype() != x.dtype())))
    return kernel::batch_norm_backward.reference(dy, x, outer, inner, mean, invstd, weight, training, grad_x,
                                                 grad_weight, grad_bias);
  const int64_t c = mean.numel();
  const float *pm = fptr(mean), *pv = fptr(invstd), *pw = fptr(weight);
  float *gw = fptr_mut(grad_weight), *gb = fptr_mut(grad_bias);
  visit_fast(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x.data_ptr());
    const T* pd = static_cast<const T*>(dy.data_ptr());
    T* pg = grad_x.defined() ? static_cast<T*>(grad_x.data_ptr()) : nullptr;
    parallel_for(c, 1, [&](int64_t k0, int64_t k1) {
      for (int64_t k = k0; k < k1; ++k) {
        const float mu = pm[k], inv = pv[k];
        double sd = 0, sdx = 0;
        for (int64_t o = 0; o < outer; ++o) {
          const T* xr = px + (o * c + k) * inner;
          const T* dr = pd + (o * c + k) * inner;
          sd += row_sum(inner, [&](int64_t i) { return static_cast<float>(dr[i]); });
          sdx += row_sum(inner, [&](int64_t i) { return static_cast<float>(dr[i]) * (static_cast<float>(xr[i]) - mu); });
        }
        sdx *= inv;
        if (gb) gb[k] = static_cast<float>(sd);
        if (gw) gw[k] = static_cast<float>(sdx);
        if (!pg) continue;
        const double m = static_cast<double>(outer * inner);
        const float w = pw ? pw[k] : 1.0f, a = inv * w;
        const float mean_d = training ? static_cast<float>(sd / m) : 0.0f;
        const float coef = training ? static_cast<float>(sdx / m) * inv : 0.0f;  // per (x - mu)
        for (int64_t o = 0; o < outer; ++o) {
          const T* xr = px + (o * c + k) * inner;
          const T* dr = pd + (o * c + k) * inner;
          T* gr = pg + (o * c + k) * inner;
          for (int64_t i = 0; i < inner; ++i) {
            const float g = static_cast<float>(dr[i]) - mean_d - (static_cast<float>(xr[i]) - mu) * coef;
            gr[i] = static_cast<T>(g * a);
          }
        }
      }
    });
  });
}

}  // namespace

AG_REGISTER_FAST_KERNEL(kernel::batch_norm_stats, batch_norm_stats);
AG_REGISTER_FAST_KERNEL(kernel::batch_norm_apply, batch_norm_apply);
AG_REGISTER_FAST_KERNEL(kernel::batch_norm_backward, batch_norm_backward);

}  // namespace ampgrad::cpu
