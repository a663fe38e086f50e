// Fast CPU max pooling (Note [Max pooling] in ops/pool.cpp): contiguous NCHW planes of float32,
// bfloat16 or float16, one plane per task on the thread team, values compared in float (exact:
// every 16-bit value is a float). Other layouts and dtypes run the reference (ops/cpu_pool.cpp).
#include <cmath>
#include <vector>

#include <ampgrad/core/dispatch.h>
#include <ampgrad/core/kernels.h>
#include <ampgrad/cpu/parallel.h>

namespace ampgrad::cpu {

namespace {

bool fast(const Tensor& t) {
  return t.is_contiguous() && (t.dtype() == kFloat32 || t.dtype() == kBFloat16 || t.dtype() == kFloat16);
}

template <class F> void visit_fast(DType d, F&& f) {
  if (d == kFloat32) f(float{});
  else if (d == kBFloat16) f(BFloat16{});
  else f(Half{});
}

// One plane of windows that all lie inside it (no padding, no dilation): the first of equal
// values wins, NaN wins over numbers (the first NaN).
template <class T>
void pool_plane_interior(const T* xp, T* op, int32_t* ip, int64_t wd, int64_t oh, int64_t ow, int64_t kh, int64_t kw,
                         int64_t sh, int64_t sw) {
  // A row of outputs at a time, the window's taps outermost: each tap is one pass over the
  // row with selects, not branches (which value wins is data, and a branch on it
  // mispredicts half the time), and the passes vectorize.
  thread_local std::vector<float> best_row;
  best_row.resize(static_cast<size_t>(ow));
  float* best = best_row.data();
  for (int64_t oy = 0; oy < oh; ++oy) {
    const T* row0 = xp + oy * sh * wd;
    int32_t* arg = ip + oy * ow;
    const int32_t base = static_cast<int32_t>(oy * sh * wd);
    for (int64_t ox = 0; ox < ow; ++ox) {
      best[ox] = static_cast<float>(row0[ox * sw]);
      arg[ox] = base + static_cast<int32_t>(ox * sw);
    }
    for (int64_t i = 0; i < kh; ++i)
      for (int64_t j = 0; j < kw; ++j) {
        if (i == 0 && j == 0) continue;
        const T* tap = row0 + i * wd + j;
        const int32_t off = base + static_cast<int32_t>(i * wd + j);
        for (int64_t ox = 0; ox < ow; ++ox) {
          const float v = static_cast<float>(tap[ox * sw]), b = best[ox];
          const bool take = (v > b) | ((v != v) & (b == b));
          best[ox] = take ? v : b;
          arg[ox] = take ? off + static_cast<int32_t>(ox * sw) : arg[ox];
        }
      }
    T* out = op + oy * ow;
    for (int64_t ox = 0; ox < ow; ++ox) out[ox] = static_cast<T>(best[ox]);
  }
}

void max_pool2d_forward(const Tensor& x, const Window2d& w, const Tensor& out, const Tensor& indices) {
  if (!fast(x) || !out.is_contiguous() || !indices.is_contiguous() || out.dtype() != x.dtype())
    return kernel::max_pool2d_forward.reference(x, w, out, indices);
  const int64_t planes = x.size(0) * x.size(1), h = x.size(2), wd = x.size(3), oh = out.size(2), ow = out.size(3);
  const int64_t kh = w.kh, kw = w.kw, sh = w.sh, sw = w.sw;
  // No padding or dilation: every window lies inside the plane.
  const bool interior = w.ph == 0 && w.pw == 0 && w.dh == 1 && w.dw == 1;
  int32_t* pi = static_cast<int32_t*>(indices.data_ptr());
  visit_fast(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x.data_ptr());
    T* po = static_cast<T*>(out.data_ptr());
    parallel_for(planes, 4, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        const T* xp = px + p * h * wd;
        T* op = po + p * oh * ow;
        int32_t* ip = pi + p * oh * ow;
        if (interior) {
          pool_plane_interior(xp, op, ip, wd, oh, ow, kh, kw, sh, sw);
          continue;
        }
        for (int64_t oy = 0; oy < oh; ++oy)
          for (int64_t ox = 0; ox < ow; ++ox) {
            float best = -INFINITY;
            int64_t arg = -1;
            for (int64_t i = 0; i < kh; ++i) {
              const int64_t iy = oy * sh - w.ph + i * w.dh;
              if (iy < 0 || iy >= h) continue;
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t ix = ox * sw - w.pw + j * w.dw;
                if (ix < 0 || ix >= wd) continue;
                const float v = static_cast<float>(xp[iy * wd + ix]);
                if (arg < 0 || v > best || (v != v && best == best)) {
                  best = v;
                  arg = iy * wd + ix;
                }
              }
            }
            op[oy * ow + ox] = static_cast<T>(best);
            ip[oy * ow + ox] = static_cast<int32_t>(arg);
          }
      }
    });
  });
}

// Each output's gradient goes to the input its index names. Windows that cannot overlap (the
// stride at least the dilated kernel) leave one gradient per input, stored as is; overlapping
// ones sum into a float plane in output order, rounded once.
void max_pool2d_backward(const Tensor& g, const Tensor& indices, const Window2d& w, const Tensor& grad_x) {
  if (!fast(g) || !indices.is_contiguous() || !grad_x.is_contiguous() || grad_x.dtype() != g.dtype())
    return kernel::max_pool2d_backward.reference(g, indices, w, grad_x);
  const int64_t planes = grad_x.size(0) * grad_x.size(1), hw = grad_x.size(2) * grad_x.size(3);
  const int64_t ohw = g.size(2) * g.size(3);
  const bool disjoint = w.sh >= (w.kh - 1) * w.dh + 1 && w.sw >= (w.kw - 1) * w.dw + 1;
  const int32_t* pi = static_cast<const int32_t*>(indices.data_ptr());
  visit_fast(g.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pg = static_cast<const T*>(g.data_ptr());
    T* px = static_cast<T*>(grad_x.data_ptr());
    parallel_for(planes, 4, [&](int64_t p0, int64_t p1) {
      std::vector<float> acc;
      for (int64_t p = p0; p < p1; ++p) {
        const T* gp = pg + p * ohw;
        const int32_t* ip = pi + p * ohw;
        T* xp = px + p * hw;
        if (disjoint) {
          for (int64_t i = 0; i < hw; ++i) xp[i] = static_cast<T>(0.0f);
          for (int64_t o = 0; o < ohw; ++o)
            if (ip[o] >= 0) xp[ip[o]] = gp[o];
        } else {
          acc.assign(static_cast<size_t>(hw), 0.0f);
          for (int64_t o = 0; o < ohw; ++o)
            if (ip[o] >= 0) acc[ip[o]] += static_cast<float>(gp[o]);
          for (int64_t i = 0; i < hw; ++i) xp[i] = static_cast<T>(acc[i]);
        }
      }
    });
  });
}

}  // namespace

AG_REGISTER_FAST_KERNEL(kernel::max_pool2d_forward, max_pool2d_forward);
AG_REGISTER_FAST_KERNEL(kernel::max_pool2d_backward, max_pool2d_backward);

}  // namespace ampgrad::cpu
