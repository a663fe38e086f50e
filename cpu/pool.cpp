// Fast CPU max pooling (Note [Max pooling] in ops/pool.cpp): contiguous NCHW planes of float32,
// bfloat16 or float16, one plane per task on the thread team, values compared in float (exact:
// every 16-bit value is a float). Other layouts and dtypes run the reference (ops/cpu_pool.cpp).
#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>
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
// One tap of a running maximum, with masks rather than branches or selects (the compiler
// turns a select on data into a branch, which mispredicts half the time on real activations:
// 13 ns an output against ~3): v replaces the best (bits) when greater, or NaN over a number;
// the first of equal values stays. arg follows.
inline void take_max(uint32_t& best, int32_t& arg, float v, int32_t at) {
  const float cur = std::bit_cast<float>(best);
  const uint32_t m = -static_cast<uint32_t>((v > cur) | ((v != v) & (cur == cur)));
  best ^= (best ^ std::bit_cast<uint32_t>(v)) & m;
  arg ^= (arg ^ at) & static_cast<int32_t>(m);
}

// A value read from T as float, stored back as T: exact, so bfloat16 keeps its top 16 bits
// without the rounding step.
template <class T> T from_float_bits(uint32_t bits) {
  if constexpr (std::is_same_v<T, float>) return std::bit_cast<float>(bits);
  else if constexpr (std::is_same_v<T, BFloat16>) return BFloat16(static_cast<uint16_t>(bits >> 16), FromBits{});
  else return static_cast<T>(std::bit_cast<float>(bits));
}

// The common 2x2 window of stride 2: one output row from two input rows, the taps in
// row-major order.
template <class T>
void pool_plane_2x2(const T* xp, T* op, int32_t* ip, int64_t wd, int64_t oh, int64_t ow) {
  const int32_t w32 = static_cast<int32_t>(wd);
  for (int64_t oy = 0; oy < oh; ++oy) {
    const T* __restrict__ r0 = xp + 2 * oy * wd;
    const T* __restrict__ r1 = r0 + wd;
    T* __restrict__ out = op + oy * ow;
    int32_t* __restrict__ arg = ip + oy * ow;
    const int32_t base = static_cast<int32_t>(2 * oy * wd);
    for (int64_t ox = 0; ox < ow; ++ox) {
      const int32_t at = base + static_cast<int32_t>(2 * ox);
      uint32_t best = std::bit_cast<uint32_t>(static_cast<float>(r0[2 * ox]));
      int32_t where = at;
      take_max(best, where, static_cast<float>(r0[2 * ox + 1]), at + 1);
      take_max(best, where, static_cast<float>(r1[2 * ox]), at + w32);
      take_max(best, where, static_cast<float>(r1[2 * ox + 1]), at + w32 + 1);
      out[ox] = from_float_bits<T>(best);
      arg[ox] = where;
    }
  }
}

// Any window that lies inside the plane (no padding, no dilation).
template <class T>
void pool_plane_interior(const T* xp, T* op, int32_t* ip, int64_t wd, int64_t oh, int64_t ow, int64_t kh, int64_t kw,
                         int64_t sh, int64_t sw) {
  for (int64_t oy = 0; oy < oh; ++oy)
    for (int64_t ox = 0; ox < ow; ++ox) {
      const int32_t base = static_cast<int32_t>(oy * sh * wd + ox * sw);
      uint32_t best = std::bit_cast<uint32_t>(static_cast<float>(xp[base]));
      int32_t where = base;
      for (int64_t i = 0; i < kh; ++i)
        for (int64_t j = 0; j < kw; ++j) {
          const int32_t at = base + static_cast<int32_t>(i * wd + j);
          if (at != base) take_max(best, where, static_cast<float>(xp[at]), at);
        }
      op[oy * ow + ox] = from_float_bits<T>(best);
      ip[oy * ow + ox] = where;
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
        if (interior && kh == 2 && kw == 2 && sh == 2 && sw == 2) {
          pool_plane_2x2(xp, op, ip, wd, oh, ow);
          continue;
        }
        if (interior) {
          pool_plane_interior(xp, op, ip, wd, oh, ow, kh, kw, sh, sw);
          continue;
        }
        // Padding or dilation: the taps inside the plane (the bounds tests predict well), the
        // first taken as is, the others through take_max.
        for (int64_t oy = 0; oy < oh; ++oy)
          for (int64_t ox = 0; ox < ow; ++ox) {
            uint32_t best = std::bit_cast<uint32_t>(-INFINITY);
            int32_t where = -1;
            for (int64_t i = 0; i < kh; ++i) {
              const int64_t iy = oy * sh - w.ph + i * w.dh;
              if (iy < 0 || iy >= h) continue;
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t ix = ox * sw - w.pw + j * w.dw;
                if (ix < 0 || ix >= wd) continue;
                const int32_t at = static_cast<int32_t>(iy * wd + ix);
                const float v = static_cast<float>(xp[at]);
                if (where < 0) {
                  best = std::bit_cast<uint32_t>(v);
                  where = at;
                } else {
                  take_max(best, where, v, at);
                }
              }
            }
            op[oy * ow + ox] = from_float_bits<T>(best);
            ip[oy * ow + ox] = where;
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
