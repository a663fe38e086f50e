// Faster float math for kinds whose float formula is compute-bound at the byte rate of
// float16/bfloat16 storage (Note [16-bit fast math]).
#pragma once

#include <cuda_runtime.h>

#include <ampgrad/core/kernel_kinds.h>
#include <ampgrad/cuda/common.cuh>

namespace ampgrad::cuda::fast16 {

// Note [16-bit fast math]
// A float16 element moves in half the time of a float32 one, so at a copy's byte rate an
// H200 has about 40 issue slots per float16 element. CUDA's accurate expm1f, atan2f, logf and
// log1pf cost about that on their own: expm1, mish, atan2, kl_div, soft_margin and
// binary_cross_entropy_with_logits ran at 0.64-0.79 of a copy in float16 and at 0.90-1.03 in
// float32 (bench_ops's memory-bound table, benchmarks/bench_ops.cpp). For 16-bit storage only,
// these kinds compute in float with the special-function unit (ex2.approx, lg2.approx,
// rcp.approx) and short polynomials where those lose accuracy (expm1 and log1p of small
// arguments, log near 1).
// Every formula here is within 2^-17 relative error of its float value (bounds at each
// function), far below float16's rounding (2^-11) and bfloat16's (2^-8): each function's
// stored result is the correctly rounded one or its neighbour, as the accurate one's is (a
// loss whose terms cancel, kl_div's y log y - y x near 0, carries its terms' errors, as the
// float formula carries theirs). Edge values (zeros, infinities, NaN, bfloat16's huge and
// subnormal ranges) take the accurate function where the fast one would be wrong. Where an argument range needs a polynomial, both values are computed
// and one selected: a branch diverges in most warps when the range is common (kl_div's
// targets near 1 took both sides and a reconvergence per element: 0.67 of a copy).
// float32 and float64 storage never come here; backward formulas do not either (that table
// times forwards only; they stay as written in core/*.def). The formulas restate
// their kind's row with these functions; test_cuda's CPU≡CUDA rows check both agree.

// e^x - 1. |x| < 1/4: degree-5 Taylor (truncation x^5/720 < 2^-19.4 relative); otherwise
// __expf(x) - 1 (ex2.approx: 2^-22 relative, plus |x| 2^-24 from the argument's rounding;
// the subtraction loses at most a factor 1/(1 - e^-1/4) = 4.5, 2^-19).
__device__ __forceinline__ float expm1(float x) {
  const float near = x * (1.0f + x * (0.5f + x * (1.0f / 6 + x * (1.0f / 24 + x * (1.0f / 120)))));
  const float far = __expf(x) - 1.0f;
  return fabsf(x) < 0.25f ? near : far;
}

// log(1 + t). |t| < 1/16: degree-6 Taylor (truncation t^6/7 < 2^-26.8); otherwise
// __logf(1 + t) (lg2.approx: 2^-22 absolute; log(1 + t) >= 0.06 there: 2^-18 relative).
__device__ __forceinline__ float log1p_near0(float t) {
  return t * (1.0f + t * (-0.5f + t * (1.0f / 3 + t * (-0.25f + t * (0.2f + t * (-1.0f / 6))))));
}
__device__ __forceinline__ float log1p(float t) {
  const float near = log1p_near0(t), far = __logf(1.0f + t);
  return fabsf(t) < 0.0625f ? near : far;
}

// log(y): near 1 as log1p of the exact y - 1 (Sterbenz); elsewhere __logf (3 ulp; subnormal
// inputs are handled: ampgrad builds without -ftz; 0 gives -inf and y < 0 NaN, as logf).
__device__ __forceinline__ float log(float y) {
  const float t = y - 1.0f;
  const float near = log1p_near0(t), far = __logf(y);
  return fabsf(t) < 0.0625f ? near : far;
}

// atan2(y, x) from atan(t), t = min/max of |x| and |y| in [0, 1]: t P(t^2), P a degree-6
// polynomial fitted to atan(t)/t (8.4e-7 = 2^-20 relative in float arithmetic), then the
// octant. Zeros, infinities, NaN and divisors outside __fdividef's range [2^-126, 2^126]
// (bfloat16 reaches both ends; float16 neither) take atan2f.
__device__ __forceinline__ float atan2(float y, float x) {
  const float ax = fabsf(x), ay = fabsf(y), mx = fmaxf(ax, ay), mn = fminf(ax, ay);
  if (!(mx >= 1.17549435e-38f && mx < 8.5e37f) || x != x || y != y) return ::atan2f(y, x);
  const float t = __fdividef(mn, mx), s = t * t;
  float r = 0.008091427385807037f;
  r = r * s - 0.03773253411054611f;
  r = r * s + 0.08473548293113708f;
  r = r * s - 0.13536196947097778f;
  r = r * s + 0.1989458203315735f;
  r = r * s - 0.33327919244766235f;
  r = r * s + 0.9999997019767761f;
  r *= t;
  if (ay > ax) r = 1.57079632679489662f - r;
  if (x < 0.0f) r = 3.14159265358979324f - r;
  return copysignf(r, y);
}

// tanh(softplus(x)) as math::tanh_softplus, with __expf and __fdividef (n + 2 <= 2^58 for
// x <= 20: inside __fdividef's range).
__device__ __forceinline__ float tanh_softplus(float x) {
  if (x > 20.0f) return 1.0f;
  const float e = __expf(x), n = e * (e + 2.0f);
  return __fdividef(n, n + 2.0f);
}

// The forward formulas of the kinds above for 16-bit storage (computed in float). `has`
// says whether a kind has one; kinds without keep their row's formula.
template <UnaryKind K> inline constexpr bool has_unary = K == UnaryKind::Expm1 || K == UnaryKind::Mish;
template <UnaryKind K> __device__ __forceinline__ float unary(float x) {
  if constexpr (K == UnaryKind::Expm1) return expm1(x);
  else return x * tanh_softplus(x);  // Mish
}

template <BinaryKind K> inline constexpr bool has_binary = K == BinaryKind::Atan2;
template <BinaryKind K> __device__ __forceinline__ float binary(float x, float y) { return atan2(x, y); }

template <LossKind K>
inline constexpr bool has_loss = K == LossKind::KlDiv || K == LossKind::SoftMargin || K == LossKind::BceWithLogits;
template <LossKind K> __device__ __forceinline__ float loss(float x, float y) {
  if constexpr (K == LossKind::KlDiv) return (y == 0.0f ? 0.0f : y * log(y)) - y * x;
  else if constexpr (K == LossKind::SoftMargin) return log1p(__expf(-y * x));
  else return (x > 0.0f ? x : 0.0f) - x * y + log1p(__expf(-fabsf(x)));  // BceWithLogits
}

}  // namespace ampgrad::cuda::fast16
