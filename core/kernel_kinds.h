// The elementwise, reduction and scalar formulas shared by the CPU reference kernels (ops/)
// and the CUDA kernels (cuda/): one formula, both devices, so the two agree to rounding.
#pragma once

#include <math.h>

#include <cstdint>
#include <type_traits>

#ifdef __CUDACC__
#define AG_HOST_DEVICE __host__ __device__
#else
#define AG_HOST_DEVICE
#endif

namespace ampgrad {

// Note [Elementwise kinds]
// Every elementwise kernel is a kind: a row of core/elementwise_kinds.def with its forward
// formula, its backward formula and what the backward reads. This header makes the enums and
// the formula functions from the rows; ops/cpu_elementwise.cpp and cuda/unary.cu,
// cuda/binary.cu make their switches over the kinds from them too. The formulas are templates
// over the type they compute in (float for 16-bit tensors, which are rounded once on store), so
// the CPU and the CUDA kernels evaluate the same expression. An op's record names its kind
// (ops/unary_ops.def, ops/binary_ops.def); adding an elementwise op is a row there, a row in
// the .def, and a row in tests/op_table.cpp (docs/architecture.md walks through one).

enum class UnaryKind : uint8_t {
#define AG_UNARY(Kind, ...) Kind,
#include <ampgrad/core/elementwise_kinds.def>
};
enum class BinaryKind : uint8_t {
#define AG_BINARY(Kind, ...) Kind,
#include <ampgrad/core/elementwise_kinds.def>
};
enum class TernaryKind : uint8_t {
#define AG_TERNARY(Kind, ...) Kind,
#include <ampgrad/core/elementwise_kinds.def>
};
enum class LossKind : uint8_t {
#define AG_LOSS(Kind, ...) Kind,
#include <ampgrad/core/loss_kinds.def>
};
// Norm: the vector p-norm, param = p (any p; 0 counts nonzeros, +-inf the largest/smallest |x|).
enum class ReduceKind : uint8_t { Sum, Mean, Prod, Max, Min, Argmax, Argmin, Var, LogSumExp, Norm };

// What a kind's backward reads (the `reads` column).
enum class UnaryGrad : uint8_t { x, y, g, pass, none };
struct BinaryGrad {
  bool differentiable;  // false for comparisons
  bool kernel;          // false: the record composes its backward from ops
  bool dx_x, dx_y;      // which operands the dx formula reads
  bool dy_x, dy_y;      // and the dy formula
};

namespace detail {
constexpr UnaryGrad kUnaryGrad[] = {
#define AG_UNARY(Kind, types, forward, backward, reads) UnaryGrad::reads,
#include <ampgrad/core/elementwise_kinds.def>
};
constexpr bool kUnaryInts[] = {
#define AG_UNARY(Kind, types, ...) AG_KIND_TYPES_##types,
#define AG_KIND_TYPES_ints true
#define AG_KIND_TYPES_floats false
#include <ampgrad/core/elementwise_kinds.def>
#undef AG_KIND_TYPES_ints
#undef AG_KIND_TYPES_floats
};
constexpr const char* kUnaryNames[] = {
#define AG_UNARY(Kind, ...) #Kind,
#include <ampgrad/core/elementwise_kinds.def>
};
// A reads token as (kernel, reads x, reads y).
#define AG_BINARY_READS_x true, true, false
#define AG_BINARY_READS_y true, false, true
#define AG_BINARY_READS_xy true, true, true
#define AG_BINARY_READS_g true, false, false
#define AG_BINARY_READS_ops false, false, false
#define AG_BINARY_READS_none false, false, false
constexpr bool kBinaryReads[][2][3] = {
#define AG_BINARY(Kind, types, forward, dx, dy, dx_reads, dy_reads) {{AG_BINARY_READS_##dx_reads}, {AG_BINARY_READS_##dy_reads}},
#include <ampgrad/core/elementwise_kinds.def>
};
constexpr bool kBinaryDifferentiable[] = {
#define AG_BINARY(Kind, types, forward, dx, dy, dx_reads, dy_reads) AG_BINARY_DIFF_##dx_reads,
#define AG_BINARY_DIFF_x true
#define AG_BINARY_DIFF_y true
#define AG_BINARY_DIFF_xy true
#define AG_BINARY_DIFF_g true
#define AG_BINARY_DIFF_ops true
#define AG_BINARY_DIFF_none false
#include <ampgrad/core/elementwise_kinds.def>
#undef AG_BINARY_DIFF_x
#undef AG_BINARY_DIFF_y
#undef AG_BINARY_DIFF_xy
#undef AG_BINARY_DIFF_g
#undef AG_BINARY_DIFF_ops
#undef AG_BINARY_DIFF_none
};
#undef AG_BINARY_READS_x
#undef AG_BINARY_READS_y
#undef AG_BINARY_READS_xy
#undef AG_BINARY_READS_g
#undef AG_BINARY_READS_ops
#undef AG_BINARY_READS_none
// 0 arith, 1 floats, 2 compare
constexpr int kBinaryTypes[] = {
#define AG_BINARY(Kind, types, ...) AG_KIND_TYPES_##types,
#define AG_KIND_TYPES_arith 0
#define AG_KIND_TYPES_floats 1
#define AG_KIND_TYPES_compare 2
#include <ampgrad/core/elementwise_kinds.def>
#undef AG_KIND_TYPES_arith
#undef AG_KIND_TYPES_floats
#undef AG_KIND_TYPES_compare
};
constexpr const char* kTernaryNames[] = {
#define AG_TERNARY(Kind, ...) #Kind,
#include <ampgrad/core/elementwise_kinds.def>
};
constexpr bool kTernaryFloats[] = {
#define AG_TERNARY(Kind, types, ...) AG_KIND_TYPES_##types,
#define AG_KIND_TYPES_arith false
#define AG_KIND_TYPES_floats true
#include <ampgrad/core/elementwise_kinds.def>
#undef AG_KIND_TYPES_arith
#undef AG_KIND_TYPES_floats
};
constexpr const char* kLossNames[] = {
#define AG_LOSS(Kind, ...) #Kind,
#include <ampgrad/core/loss_kinds.def>
};
constexpr const char* kBinaryNames[] = {
#define AG_BINARY(Kind, ...) #Kind,
#include <ampgrad/core/elementwise_kinds.def>
};
}  // namespace detail

constexpr UnaryGrad unary_grad_reads(UnaryKind k) { return detail::kUnaryGrad[static_cast<int>(k)]; }
// Which unary kinds accept integer tensors; the others promote integers to float32 first.
constexpr bool unary_takes_integers(UnaryKind k) { return detail::kUnaryInts[static_cast<int>(k)]; }
constexpr const char* kind_name(UnaryKind k) { return detail::kUnaryNames[static_cast<int>(k)]; }
constexpr BinaryGrad binary_grad(BinaryKind k) {
  const auto& r = detail::kBinaryReads[static_cast<int>(k)];
  return BinaryGrad{detail::kBinaryDifferentiable[static_cast<int>(k)], r[0][0], r[0][1], r[0][2], r[1][1], r[1][2]};
}
constexpr bool is_comparison(BinaryKind k) { return detail::kBinaryTypes[static_cast<int>(k)] == 2; }
// Integer operands are computed in float32 (div, pow), as PyTorch's true division.
constexpr bool binary_computes_in_float(BinaryKind k) { return detail::kBinaryTypes[static_cast<int>(k)] == 1; }
constexpr const char* kind_name(BinaryKind k) { return detail::kBinaryNames[static_cast<int>(k)]; }
constexpr const char* kind_name(TernaryKind k) { return detail::kTernaryNames[static_cast<int>(k)]; }
// Integer operands are computed in float32 (addcdiv, lerp), as by PyTorch's.
constexpr bool ternary_computes_in_float(TernaryKind k) { return detail::kTernaryFloats[static_cast<int>(k)]; }
constexpr const char* kind_name(LossKind k) { return detail::kLossNames[static_cast<int>(k)]; }

namespace math {
AG_HOST_DEVICE inline float exp(float x) { return ::expf(x); }
AG_HOST_DEVICE inline double exp(double x) { return ::exp(x); }
AG_HOST_DEVICE inline float log(float x) { return ::logf(x); }
AG_HOST_DEVICE inline double log(double x) { return ::log(x); }
AG_HOST_DEVICE inline float log1p(float x) { return ::log1pf(x); }
AG_HOST_DEVICE inline double log1p(double x) { return ::log1p(x); }
AG_HOST_DEVICE inline float sqrt(float x) { return ::sqrtf(x); }
AG_HOST_DEVICE inline double sqrt(double x) { return ::sqrt(x); }
AG_HOST_DEVICE inline float tanh(float x) { return ::tanhf(x); }
AG_HOST_DEVICE inline double tanh(double x) { return ::tanh(x); }
AG_HOST_DEVICE inline float erf(float x) { return ::erff(x); }
AG_HOST_DEVICE inline double erf(double x) { return ::erf(x); }
AG_HOST_DEVICE inline float pow(float x, float y) { return ::powf(x, y); }
AG_HOST_DEVICE inline double pow(double x, double y) { return ::pow(x, y); }
AG_HOST_DEVICE inline float abs(float x) { return ::fabsf(x); }
AG_HOST_DEVICE inline double abs(double x) { return ::fabs(x); }
AG_HOST_DEVICE inline int64_t abs(int64_t x) { return x < 0 ? -x : x; }
AG_HOST_DEVICE inline int64_t pow(int64_t x, int64_t y) {
  int64_t r = 1;
  for (; y > 0; --y) r *= x;
  return r;
}
AG_HOST_DEVICE inline float sin(float x) { return ::sinf(x); }
AG_HOST_DEVICE inline double sin(double x) { return ::sin(x); }
AG_HOST_DEVICE inline float cos(float x) { return ::cosf(x); }
AG_HOST_DEVICE inline double cos(double x) { return ::cos(x); }
AG_HOST_DEVICE inline float tan(float x) { return ::tanf(x); }
AG_HOST_DEVICE inline double tan(double x) { return ::tan(x); }
AG_HOST_DEVICE inline float asin(float x) { return ::asinf(x); }
AG_HOST_DEVICE inline double asin(double x) { return ::asin(x); }
AG_HOST_DEVICE inline float acos(float x) { return ::acosf(x); }
AG_HOST_DEVICE inline double acos(double x) { return ::acos(x); }
AG_HOST_DEVICE inline float atan(float x) { return ::atanf(x); }
AG_HOST_DEVICE inline double atan(double x) { return ::atan(x); }
AG_HOST_DEVICE inline float atan2(float y, float x) { return ::atan2f(y, x); }
AG_HOST_DEVICE inline double atan2(double y, double x) { return ::atan2(y, x); }
AG_HOST_DEVICE inline float sinh(float x) { return ::sinhf(x); }
AG_HOST_DEVICE inline double sinh(double x) { return ::sinh(x); }
AG_HOST_DEVICE inline float cosh(float x) { return ::coshf(x); }
AG_HOST_DEVICE inline double cosh(double x) { return ::cosh(x); }
AG_HOST_DEVICE inline float expm1(float x) { return ::expm1f(x); }
AG_HOST_DEVICE inline double expm1(double x) { return ::expm1(x); }
AG_HOST_DEVICE inline float log2(float x) { return ::log2f(x); }
AG_HOST_DEVICE inline double log2(double x) { return ::log2(x); }
AG_HOST_DEVICE inline float log10(float x) { return ::log10f(x); }
AG_HOST_DEVICE inline double log10(double x) { return ::log10(x); }
// Rounding: integers are already whole (floor, ceil, trunc and round return them as they are).
AG_HOST_DEVICE inline float floor(float x) { return ::floorf(x); }
AG_HOST_DEVICE inline double floor(double x) { return ::floor(x); }
AG_HOST_DEVICE inline int64_t floor(int64_t x) { return x; }
AG_HOST_DEVICE inline float ceil(float x) { return ::ceilf(x); }
AG_HOST_DEVICE inline double ceil(double x) { return ::ceil(x); }
AG_HOST_DEVICE inline int64_t ceil(int64_t x) { return x; }
AG_HOST_DEVICE inline float trunc(float x) { return ::truncf(x); }
AG_HOST_DEVICE inline double trunc(double x) { return ::trunc(x); }
AG_HOST_DEVICE inline int64_t trunc(int64_t x) { return x; }
// Half to even, as PyTorch's round (nearbyint in the default rounding mode).
AG_HOST_DEVICE inline float rint(float x) { return ::rintf(x); }
AG_HOST_DEVICE inline double rint(double x) { return ::rint(x); }
AG_HOST_DEVICE inline int64_t rint(int64_t x) { return x; }
// The remainder of truncated division, with the dividend's sign (C's fmod). Integer division
// by zero gives 0 (PyTorch raises on the CPU; a kernel cannot).
AG_HOST_DEVICE inline float fmod(float x, float y) { return ::fmodf(x, y); }
AG_HOST_DEVICE inline double fmod(double x, double y) { return ::fmod(x, y); }
AG_HOST_DEVICE inline int64_t fmod(int64_t x, int64_t y) { return y == 0 ? 0 : x % y; }
// The remainder of floored division, with the divisor's sign (Python's %, PyTorch's remainder).
template <class T> AG_HOST_DEVICE inline T remainder(T x, T y) {
  const T r = fmod(x, y);
  return r != T(0) && ((r < T(0)) != (y < T(0))) ? r + y : r;
}
template <class T> AG_HOST_DEVICE inline bool isnan(T x) { return x != x; }
template <class T> AG_HOST_DEVICE inline T sign(T x) { return T((x > T(0)) - (x < T(0))); }
template <class T> AG_HOST_DEVICE inline T sigmoid(T x) { return T(1) / (T(1) + exp(-x)); }
// The standard normal's distribution function and density (gelu and its derivative).
template <class T> AG_HOST_DEVICE inline T normal_cdf(T x) {
  return T(0.5) * (T(1) + erf(x * T(0.70710678118654752440)));
}
template <class T> AG_HOST_DEVICE inline T normal_pdf(T x) { return exp(T(-0.5) * x * x) * T(0.39894228040143267794); }
// gelu(approximate="tanh"): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), and its derivative
// as PyTorch's GeluBackward computes it.
template <class T> AG_HOST_DEVICE inline T gelu_tanh(T x) {
  const T beta = T(0.79788456080286535588), kappa = T(0.044715);
  return T(0.5) * x * (T(1) + tanh(beta * (x + kappa * x * x * x)));
}
template <class T> AG_HOST_DEVICE inline T gelu_tanh_grad(T x) {
  const T beta = T(0.79788456080286535588), kappa = T(0.044715);
  const T x2 = x * x, t = tanh(beta * (x + kappa * x2 * x));
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * beta * (T(1) + T(3) * kappa * x2);
}
// erf's inverse: Giles' single-precision approximation ("Approximating the erfinv function",
// 2012), then Newton steps on erf(x) = y in T (one for float, two for double); +-1 give +-inf,
// values outside [-1, 1] NaN. The same code on both devices, so they agree to erf's rounding.
template <class T> AG_HOST_DEVICE inline T erfinv(T y) {
#ifdef __CUDA_ARCH__
  // On the device, CUDA's own erfinv (a few ulp, the same cases): 2.5x faster than the
  // approximation and its Newton step, which made erfinv compute-bound at 0.37 of a copy.
  if constexpr (sizeof(T) == 4) return ::erfinvf(y);
  else return ::erfinv(y);
#endif
  if (!(y > T(-1) && y < T(1))) return y == T(1) ? T(INFINITY) : (y == T(-1) ? T(-INFINITY) : T(NAN));
  T w = -log((T(1) - y) * (T(1) + y)), p;
  if (w < T(5)) {
    w -= T(2.5);
    p = T(2.81022636e-08);
    p = T(3.43273939e-07) + p * w;
    p = T(-3.5233877e-06) + p * w;
    p = T(-4.39150654e-06) + p * w;
    p = T(0.00021858087) + p * w;
    p = T(-0.00125372503) + p * w;
    p = T(-0.00417768164) + p * w;
    p = T(0.246640727) + p * w;
    p = T(1.50140941) + p * w;
  } else {
    w = sqrt(w) - T(3);
    p = T(-0.000200214257);
    p = T(0.000100950558) + p * w;
    p = T(0.00134934322) + p * w;
    p = T(-0.00367342844) + p * w;
    p = T(0.00573950773) + p * w;
    p = T(-0.0076224613) + p * w;
    p = T(0.00943887047) + p * w;
    p = T(1.00167406) + p * w;
    p = T(2.83297682) + p * w;
  }
  T x = p * y;
  for (int i = 0; i < (sizeof(T) == 8 ? 2 : 1); ++i) {
    const T d = T(1.12837916709551257390) * exp(-x * x);  // erf'(x)
    if (d == T(0)) break;
    x -= (erf(x) - y) / d;
  }
  return x;
}
// Rounds to decimals, half to even, as PyTorch's round(x, decimals): p = 10^|decimals| and
// s = its sign are worked out once by the op (a pow per element made round 0.4 of a copy).
template <class T> AG_HOST_DEVICE inline T round_decimals(T x, T p, T s) {
  if (s == T(0)) return rint(x);
  return s > T(0) ? rint(x * p) / p : rint(x / p) * p;
}
AG_HOST_DEVICE inline int64_t round_decimals(int64_t x, int64_t, int64_t) { return x; }
// tanh(softplus(x)) from one exp: with e = e^x, tanh(log(1 + e)) = e (e + 2) / (e (e + 2) + 2);
// 1 from x > 20 on (e^2x overflows float; the exact value is 1 to 17 digits there).
template <class T> AG_HOST_DEVICE inline T tanh_softplus(T x) {
  if (x > T(20)) return T(1);
  const T e = exp(x), n = e * (e + T(2));
  return n / (n + T(2));
}
template <class T> AG_HOST_DEVICE inline T mish(T x) { return x * tanh_softplus(x); }
// d/dx mish(x) = tanh(softplus(x)) + x sigmoid(x) (1 - tanh(softplus(x))^2), as PyTorch's.
template <class T> AG_HOST_DEVICE inline T mish_grad(T x) {
  const T t = tanh_softplus(x);
  return t + x * sigmoid(x) * (T(1) - t * t);
}
// The p-norm's cases (ReduceKind::Norm): how |x| joins the state and how states combine.
// integer: p a whole number from 3 to 8, |x|^p by P - 1 multiplications unrolled at compile
// time (powf per element ran at 0.22 of a copy, a runtime loop at 0.65).
enum class NormMode : int64_t { two, one, inf, neg_inf, zero, integer, other };
AG_HOST_DEVICE inline NormMode norm_mode(double p) {
  return p == 2 ? NormMode::two : p == 1 ? NormMode::one : p == INFINITY ? NormMode::inf
       : p == -INFINITY ? NormMode::neg_inf : p == 0 ? NormMode::zero
       : (p >= 3 && p <= 8 && p == static_cast<double>(static_cast<int>(p))) ? NormMode::integer : NormMode::other;
}
template <NormMode M, int P, class T> AG_HOST_DEVICE inline T norm_accumulate(T s, T x, T p) {
  const T a = abs(x);
  if constexpr (M == NormMode::two) return s + a * a;
  else if constexpr (M == NormMode::one) return s + a;
  else if constexpr (M == NormMode::inf) return (a > s || isnan(a)) && !isnan(s) ? a : s;
  else if constexpr (M == NormMode::neg_inf) return (a < s || isnan(a)) && !isnan(s) ? a : s;
  else if constexpr (M == NormMode::zero) return s + (x != T(0) ? T(1) : T(0));
  else if constexpr (M == NormMode::integer) {
    T r = a;
    for (int k = 1; k < P; ++k) r *= a;  // P is a constant: the compilers unroll it
    return s + r;
  } else return s + pow(a, p);
}
template <NormMode M, class T> AG_HOST_DEVICE inline T norm_combine(T s, T t) {
  if constexpr (M == NormMode::inf || M == NormMode::neg_inf) return norm_accumulate<M, 0>(s, t, T(0));
  else return s + t;
}
template <NormMode M, class T> AG_HOST_DEVICE inline T norm_identity() { return M == NormMode::neg_inf ? T(INFINITY) : T(0); }
template <NormMode M, class T> AG_HOST_DEVICE inline T norm_finish(T s, T inv_p) {
  if constexpr (M == NormMode::two) return sqrt(s);
  else if constexpr (M == NormMode::integer || M == NormMode::other) return pow(s, inv_p);
  else return s;
}
// f(mode, power) with std::integral_constants: the mode of p and, for integer mode, p itself
// (0 otherwise).
template <class F> inline void visit_norm_mode(double p, F&& f) {
  using M = NormMode;
  auto with = [&](auto mode) { f(mode, std::integral_constant<int, 0>{}); };
  switch (norm_mode(p)) {
    case M::two: return with(std::integral_constant<M, M::two>{});
    case M::one: return with(std::integral_constant<M, M::one>{});
    case M::inf: return with(std::integral_constant<M, M::inf>{});
    case M::neg_inf: return with(std::integral_constant<M, M::neg_inf>{});
    case M::zero: return with(std::integral_constant<M, M::zero>{});
    case M::other: return with(std::integral_constant<M, M::other>{});
    case M::integer: break;
  }
  const std::integral_constant<M, M::integer> integer;
  switch (static_cast<int>(p)) {
    case 3: return f(integer, std::integral_constant<int, 3>{});
    case 4: return f(integer, std::integral_constant<int, 4>{});
    case 5: return f(integer, std::integral_constant<int, 5>{});
    case 6: return f(integer, std::integral_constant<int, 6>{});
    case 7: return f(integer, std::integral_constant<int, 7>{});
    default: return f(integer, std::integral_constant<int, 8>{});
  }
}
// PyTorch's lerp: start + w (end - start) below w = 0.5, end - (end - start)(1 - w) above.
template <class T> AG_HOST_DEVICE inline T lerp(T start, T end, T w) {
  return abs(w) < T(0.5) ? start + w * (end - start) : end - (end - start) * (T(1) - w);
}
template <class T> AG_HOST_DEVICE inline T max0(T x) { return x > T(0) ? x : T(0); }
// smooth_l1_loss of a difference d with beta a (l1 when a == 0), and its derivative in d.
// (1 / a is loop-invariant in a kernel: a multiply per element instead of a divide.)
template <class T> AG_HOST_DEVICE inline T smooth_l1(T d, T a) {
  return abs(d) < a ? T(0.5) * d * d * (T(1) / a) : abs(d) - T(0.5) * a;
}
template <class T> AG_HOST_DEVICE inline T smooth_l1_grad(T d, T a) { return abs(d) < a ? d * (T(1) / a) : sign(d); }
// huber_loss of d with delta a, and its derivative in d.
template <class T> AG_HOST_DEVICE inline T huber(T d, T a) {
  return abs(d) <= a ? T(0.5) * d * d : a * (abs(d) - T(0.5) * a);
}
template <class T> AG_HOST_DEVICE inline T huber_grad(T d, T a) { return abs(d) <= a ? d : a * sign(d); }
// Stirling's approximation of log(y!) less its log-rate part, y log y - y + log(2 pi y) / 2,
// where y > 1 (poisson_nll_loss's full term; on = 0 turns it off), and its derivative.
template <class T> AG_HOST_DEVICE inline T stirling(T y, T on) {
  return on != T(0) && y > T(1) ? y * log(y) - y + T(0.5) * log(T(6.28318530717958647693) * y) : T(0);
}
template <class T> AG_HOST_DEVICE inline T stirling_grad(T y, T on) {
  return on != T(0) && y > T(1) ? log(y) + T(0.5) / y : T(0);
}
}  // namespace math

// Each kind's formulas as functions of the type T they compute in. A backward names only the
// value its kind reads: the other parameter has no name there.
namespace formulas {
#define AG_GRAD_ARG_x x
#define AG_GRAD_ARG_y y
#define AG_GRAD_ARG_g
#define AG_GRAD_ARG_pass
#define AG_GRAD_ARG_none
#define AG_UNARY(Kind, types, forward, backward, reads)                                                   \
  template <class T> AG_HOST_DEVICE inline T Kind##_forward(T x, [[maybe_unused]] T a, [[maybe_unused]] T b) { \
    return forward;                                                                                      \
  }                                                                                                      \
  template <class T>                                                                                     \
  AG_HOST_DEVICE inline T Kind##_backward([[maybe_unused]] T g, [[maybe_unused]] T AG_GRAD_ARG_##reads,  \
                                          [[maybe_unused]] T a, [[maybe_unused]] T b) {                  \
    return backward;                                                                                     \
  }
#include <ampgrad/core/elementwise_kinds.def>
#define AG_GRAD_X_x x
#define AG_GRAD_X_y
#define AG_GRAD_X_xy x
#define AG_GRAD_X_g
#define AG_GRAD_X_ops x
#define AG_GRAD_X_none
#define AG_GRAD_Y_x
#define AG_GRAD_Y_y y
#define AG_GRAD_Y_xy y
#define AG_GRAD_Y_g
#define AG_GRAD_Y_ops y
#define AG_GRAD_Y_none
#define AG_BINARY(Kind, types, forward, dx, dy, dx_reads, dy_reads)                                       \
  template <class T> AG_HOST_DEVICE inline auto Kind##_forward(T x, T y) { return forward; }              \
  template <class T>                                                                                      \
  AG_HOST_DEVICE inline T Kind##_dx([[maybe_unused]] T g, [[maybe_unused]] T AG_GRAD_X_##dx_reads,        \
                                    [[maybe_unused]] T AG_GRAD_Y_##dx_reads) {                            \
    return dx;                                                                                            \
  }                                                                                                       \
  template <class T>                                                                                      \
  AG_HOST_DEVICE inline T Kind##_dy([[maybe_unused]] T g, [[maybe_unused]] T AG_GRAD_X_##dy_reads,        \
                                    [[maybe_unused]] T AG_GRAD_Y_##dy_reads) {                            \
    return dy;                                                                                            \
  }
#include <ampgrad/core/elementwise_kinds.def>
#undef AG_GRAD_ARG_x
#undef AG_GRAD_ARG_y
#undef AG_GRAD_ARG_g
#undef AG_GRAD_ARG_pass
#undef AG_GRAD_ARG_none
#undef AG_GRAD_X_x
#undef AG_GRAD_X_y
#undef AG_GRAD_X_xy
#undef AG_GRAD_X_g
#undef AG_GRAD_X_ops
#undef AG_GRAD_X_none
#undef AG_GRAD_Y_x
#undef AG_GRAD_Y_y
#undef AG_GRAD_Y_xy
#undef AG_GRAD_Y_g
#undef AG_GRAD_Y_ops
#undef AG_GRAD_Y_none
#define AG_TERNARY(Kind, types, forward, dx, dy, dz)                                                       \
  template <class T> AG_HOST_DEVICE inline T Kind##_forward(T x, T y, T z, [[maybe_unused]] T a) { return forward; } \
  template <class T>                                                                                       \
  AG_HOST_DEVICE inline T Kind##_dx([[maybe_unused]] T g, [[maybe_unused]] T x, [[maybe_unused]] T y,       \
                                    [[maybe_unused]] T z, [[maybe_unused]] T a) {                          \
    return dx;                                                                                             \
  }                                                                                                        \
  template <class T>                                                                                       \
  AG_HOST_DEVICE inline T Kind##_dy([[maybe_unused]] T g, [[maybe_unused]] T x, [[maybe_unused]] T y,       \
                                    [[maybe_unused]] T z, [[maybe_unused]] T a) {                          \
    return dy;                                                                                             \
  }                                                                                                        \
  template <class T>                                                                                       \
  AG_HOST_DEVICE inline T Kind##_dz([[maybe_unused]] T g, [[maybe_unused]] T x, [[maybe_unused]] T y,       \
                                    [[maybe_unused]] T z, [[maybe_unused]] T a) {                          \
    return dz;                                                                                             \
  }
#include <ampgrad/core/elementwise_kinds.def>
#define AG_LOSS(Kind, loss, dx, dy)                                                                        \
  template <class T> AG_HOST_DEVICE inline T Kind##_loss(T x, T y, [[maybe_unused]] T a, [[maybe_unused]] T b) { \
    return loss;                                                                                           \
  }                                                                                                        \
  template <class T>                                                                                       \
  AG_HOST_DEVICE inline T Kind##_loss_dx([[maybe_unused]] T g, [[maybe_unused]] T x, [[maybe_unused]] T y,  \
                                         [[maybe_unused]] T a, [[maybe_unused]] T b) {                     \
    return dx;                                                                                             \
  }                                                                                                        \
  template <class T>                                                                                       \
  AG_HOST_DEVICE inline T Kind##_loss_dy([[maybe_unused]] T g, [[maybe_unused]] T x, [[maybe_unused]] T y,  \
                                         [[maybe_unused]] T a, [[maybe_unused]] T b) {                     \
    return dy;                                                                                             \
  }
#include <ampgrad/core/loss_kinds.def>
}  // namespace formulas

// y = f(x) for one element, computed in T (float for 16-bit inputs). `a`, `b` are the op's
// scalar parameters (clamp bounds, the exponent, the scalar operand).
template <UnaryKind K, class T> AG_HOST_DEVICE inline T unary_op(T x, T a, T b) {
#define AG_UNARY(Kind, ...) \
  if constexpr (K == UnaryKind::Kind) return formulas::Kind##_forward<T>(x, a, b); else
#include <ampgrad/core/elementwise_kinds.def>
  return x;
}
// The gradient of x from the gradient g of y and the saved value s (x or y, as the kind reads).
template <UnaryKind K, class T> AG_HOST_DEVICE inline T unary_grad(T g, T s, T a, T b) {
#define AG_UNARY(Kind, ...) \
  if constexpr (K == UnaryKind::Kind) return formulas::Kind##_backward<T>(g, s, a, b); else
#include <ampgrad/core/elementwise_kinds.def>
  return g;
}

template <BinaryKind K, class T> AG_HOST_DEVICE inline T binary_op(T x, T y) {
#define AG_BINARY(Kind, ...) \
  if constexpr (K == BinaryKind::Kind) return static_cast<T>(formulas::Kind##_forward<T>(x, y)); else
#include <ampgrad/core/elementwise_kinds.def>
  return x;
}
template <BinaryKind K, class T> AG_HOST_DEVICE inline bool compare_op(T x, T y) {
#define AG_BINARY(Kind, ...) \
  if constexpr (K == BinaryKind::Kind) return static_cast<bool>(formulas::Kind##_forward<T>(x, y)); else
#include <ampgrad/core/elementwise_kinds.def>
  return false;
}
template <BinaryKind K, class T> AG_HOST_DEVICE inline T binary_grad_x(T g, T x, T y) {
#define AG_BINARY(Kind, ...) \
  if constexpr (K == BinaryKind::Kind) return formulas::Kind##_dx<T>(g, x, y); else
#include <ampgrad/core/elementwise_kinds.def>
  return g;
}
template <BinaryKind K, class T> AG_HOST_DEVICE inline T binary_grad_y(T g, T x, T y) {
#define AG_BINARY(Kind, ...) \
  if constexpr (K == BinaryKind::Kind) return formulas::Kind##_dy<T>(g, x, y); else
#include <ampgrad/core/elementwise_kinds.def>
  return g;
}

template <TernaryKind K, class T> AG_HOST_DEVICE inline T ternary_op(T x, T y, T z, T a) {
#define AG_TERNARY(Kind, ...) \
  if constexpr (K == TernaryKind::Kind) return formulas::Kind##_forward<T>(x, y, z, a); else
#include <ampgrad/core/elementwise_kinds.def>
  return x;
}
// The gradient of operand I (0 x, 1 y, 2 z).
template <TernaryKind K, int I, class T> AG_HOST_DEVICE inline T ternary_grad(T g, T x, T y, T z, T a) {
#define AG_TERNARY(Kind, ...)                                              \
  if constexpr (K == TernaryKind::Kind) {                                  \
    if constexpr (I == 0) return formulas::Kind##_dx<T>(g, x, y, z, a);    \
    else if constexpr (I == 1) return formulas::Kind##_dy<T>(g, x, y, z, a); \
    else return formulas::Kind##_dz<T>(g, x, y, z, a);                     \
  } else
#include <ampgrad/core/elementwise_kinds.def>
  return g;
}

// The loss of one element (input x, target y) and its gradients, computed in T; a, b the op's scalars.
template <LossKind K, class T> AG_HOST_DEVICE inline T loss_op(T x, T y, T a, T b) {
#define AG_LOSS(Kind, ...) \
  if constexpr (K == LossKind::Kind) return formulas::Kind##_loss<T>(x, y, a, b); else
#include <ampgrad/core/loss_kinds.def>
  return x;
}
template <LossKind K, class T> AG_HOST_DEVICE inline T loss_grad_x(T g, T x, T y, T a, T b) {
#define AG_LOSS(Kind, ...) \
  if constexpr (K == LossKind::Kind) return formulas::Kind##_loss_dx<T>(g, x, y, a, b); else
#include <ampgrad/core/loss_kinds.def>
  return g;
}
template <LossKind K, class T> AG_HOST_DEVICE inline T loss_grad_y(T g, T x, T y, T a, T b) {
#define AG_LOSS(Kind, ...) \
  if constexpr (K == LossKind::Kind) return formulas::Kind##_loss_dy<T>(g, x, y, a, b); else
#include <ampgrad/core/loss_kinds.def>
  return g;
}

}  // namespace ampgrad

namespace ampgrad {

// A counter-based random number: element i of stream `seed` (splitmix64 of seed and i),
// identical on the CPU and in CUDA kernels, so dropout masks match across devices.
AG_HOST_DEVICE inline uint64_t hash_random(uint64_t seed, uint64_t i) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + i + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
// Uniform in [0, 1) with 24 random bits.
AG_HOST_DEVICE inline float hash_uniform(uint64_t seed, uint64_t i) {
  return static_cast<float>(hash_random(seed, i) >> 40) * (1.0f / 16777216.0f);
}

}  // namespace ampgrad
