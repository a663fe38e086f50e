// The loss scaler's and the optimizers' arithmetic, once for every device (Note [Step formulas]).
#pragma once

#include <math.h>

#include <cstdint>
#include <type_traits>

#include <ampgrad/core/fused_kernels.h>
#include <ampgrad/core/kernel_kinds.h>

namespace ampgrad::step_formulas {

// Note [Step formulas]
// What AMP does to each number, per element: unscale a gradient and check it, update a
// parameter with SGD or Adam(W), move the loss scale, derive an FP8 scale. Each is one function
// here, called by the CPU reference loops (optim/cpu_fused.cpp, ops/cpu_float8.cpp), the fast
// CPU loops (cpu/fused.cpp) and the CUDA kernels (cuda/fused.cu, cuda/float8.cu), as
// core/elementwise_kinds.def does for elementwise math. The kernels around them only load,
// store and split the work.
// A computes: float for float32, float16 and bfloat16 parameters (16-bit values are widened on
// load and rounded once on store), double for float64. Every device rounds each operation to A
// in the order written (the CUDA file is compiled without contracting a multiply and an add
// into one FMA, and so is the library's C++), and the bias corrections' powers are products in
// double (ipow), so the CPU and CUDA results are equal bit for bit (tests/test_step_formulas.cpp).
// Values kept between steps (momentum, Adam's moments) are passed as stored; SGD's momentum is
// written back through `store`, which rounds it to its dtype, and used as stored; Adam's moments
// are used as computed and stored rounded by the caller.

// base^n for n >= 0 by repeated squaring: the same products, in the same order, everywhere.
AG_HOST_DEVICE inline double ipow(double base, int64_t n) {
  double result = 1, b = base;
  for (; n > 0; n >>= 1) {
    if (n & 1) result *= b;
    b *= b;
  }
  return result;
}

template <class A> AG_HOST_DEVICE inline A square_root(A v) {
  if constexpr (std::is_same_v<A, float>) return sqrtf(v);
  else return sqrt(v);
}

template <class A> AG_HOST_DEVICE inline A larger(A a, A b) {
  if constexpr (std::is_same_v<A, float>) return fmaxf(a, b);
  else return fmax(a, b);
}

// ---- GradScaler ----------------------------------------------------------------------------

// One gradient element as GradScaler's unscale sees it: `found_inf` records an inf or NaN; the
// result is g / scale (times the scale's inverse, which the scaler keeps).
template <class A> AG_HOST_DEVICE inline A unscale(A g, A inv_scale, bool& found_inf) {
  found_inf |= !isfinite(g);
  return g * inv_scale;
}

// The scaler's state between steps.
struct ScaleState {
  float scale;
  int32_t growth_tracker;   // clean steps in a row
  int32_t hysteresis_left;  // overflows still tolerated before backing off
};

// GradScaler.update()'s rule (PyTorch's _amp_update_scale_, with hysteresis and bounds): after a
// step that found an inf or NaN, back off (once hysteresis overflows have been seen); after
// growth_interval clean steps in a row, grow, never into inf.
AG_HOST_DEVICE inline ScaleState next_scale_state(ScaleState s, bool found_inf, const ScaleRule& r) {
  if (found_inf) {
    s.growth_tracker = 0;
    if (--s.hysteresis_left <= 0) {
      s.scale = static_cast<float>(fmax(static_cast<double>(s.scale) * r.backoff_factor, r.min_scale));
      s.hysteresis_left = static_cast<int32_t>(r.hysteresis);
    }
  } else if (++s.growth_tracker >= r.growth_interval) {
    const double grown = static_cast<double>(s.scale) * r.growth_factor;
    if (isfinite(static_cast<float>(grown))) s.scale = static_cast<float>(fmin(grown, r.max_scale));
    s.growth_tracker = 0;
    s.hysteresis_left = static_cast<int32_t>(r.hysteresis);
  }
  return s;
}

// ---- Optimizers ----------------------------------------------------------------------------

// SGD (torch.optim.SGD) on one element: the gradient g (scaled by the loss scale: times
// inv_scale), the parameter x, and the momentum buffer b (as stored) -> the new parameter. On a
// parameter's first step the buffer starts as the gradient. H is SgdHyper, or a type with the
// same fields some of which are constants (the fast CPU loop's common case, so it vectorizes).
template <class A, class H, class Store>
AG_HOST_DEVICE inline A sgd_update(A g, A x, A& b, bool first_step, const H& h, A inv_scale, Store store) {
  const A lr = static_cast<A>(h.lr), momentum = static_cast<A>(h.momentum), wd = static_cast<A>(h.weight_decay);
  g = g * inv_scale;
  if (h.maximize) g = -g;
  if (wd != A(0)) g = g + wd * x;
  if (momentum != A(0)) {
    b = store(first_step ? g : momentum * b + (A(1) - static_cast<A>(h.dampening)) * g);
    g = h.nesterov ? g + momentum * b : b;
  }
  return x - lr * g;
}

// Adam's bias corrections for a parameter taking its step number `step` (1 for the first):
// lr / (1 - beta1^step) and sqrt(1 - beta2^step).
template <class A> struct AdamCorrections {
  A step_size;
  A bc2_sqrt;
};
template <class A> AG_HOST_DEVICE inline AdamCorrections<A> adam_corrections(const AdamHyper& h, int64_t step) {
  return {static_cast<A>(h.lr) / static_cast<A>(1 - ipow(h.beta1, step)),
          static_cast<A>(sqrt(1 - ipow(h.beta2, step)))};
}

// Adam and AdamW (torch.optim.Adam, AdamW) on one element: the gradient g (times inv_scale),
// the parameter x, the moments m and v (and under amsgrad the largest v so far, vmax), as
// stored, updated in place -> the new parameter. The caller stores the moments rounded to their
// dtype; the update uses them as computed. H is AdamHyper, or a type with the same fields some of
// which are constants (the fast CPU loop's common cases, so they vectorize).
template <class A, class H>
AG_HOST_DEVICE inline A adam_update(A g, A x, A& m, A& v, A& vmax, const H& h, AdamCorrections<A> c, A inv_scale) {
  const A lr = static_cast<A>(h.lr), wd = static_cast<A>(h.weight_decay), beta1 = static_cast<A>(h.beta1),
          beta2 = static_cast<A>(h.beta2), eps = static_cast<A>(h.eps);
  g = g * inv_scale;
  if (h.maximize) g = -g;
  if (wd != A(0)) {
    if (h.decoupled_weight_decay) x = x * (A(1) - lr * wd);  // AdamW
    else g = g + wd * x;                                      // Adam's L2 penalty
  }
  m = beta1 * m + (A(1) - beta1) * g;
  v = beta2 * v + (A(1) - beta2) * g * g;
  if (h.amsgrad) vmax = larger(vmax, v);
  return x - c.step_size * m / (square_root(h.amsgrad ? vmax : v) / c.bc2_sqrt + eps);
}

// ---- FP8 scaling --------------------------------------------------------------------------

// A tensor's FP8 scale from its amax (Note [FP8 scaling] in amp/fp8.h): fp8_max / amax /
// 2^margin, or the old scale where amax is zero or not finite, or the result is not finite.
AG_HOST_DEVICE inline float fp8_scale(float amax, float fp8_max, int margin, float old) {
  if (!isfinite(amax) || amax <= 0.0f) return old;
  const float s = fp8_max / amax / ldexpf(1.0f, margin);
  return isfinite(s) ? s : old;
}

}  // namespace ampgrad::step_formulas
