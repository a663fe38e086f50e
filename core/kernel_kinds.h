// The elementwise, reduction and scalar formulas shared by the CPU reference kernels (ops/)
// and the CUDA kernels (cuda/): one formula, both devices, so the two agree to rounding.
#pragma once

#include <math.h>

#include <cstdint>

#ifdef __CUDACC__
#define AG_HOST_DEVICE __host__ __device__
#else
#define AG_HOST_DEVICE
#endif

namespace ampgrad {

enum class UnaryKind : uint8_t {
  Neg, Exp, Log, Log1p, Sqrt, Rsqrt, Reciprocal, Abs, Sign, Relu, Gelu, GeluGrad,
  Tanh, Sigmoid, Softplus, Clamp, ClampMask, PowScalar, AddScalar, MulScalar, RSubScalar,
  RDivScalar, NotEqualZero,
};
// ReluBackward(g, x) = x > 0 ? g : 0: relu's backward in one pass (PyTorch's threshold_backward).
enum class BinaryKind : uint8_t { Add, Sub, Mul, Div, Pow, Maximum, Minimum, ReluBackward, Eq, Ne, Lt, Le, Gt, Ge };
enum class ReduceKind : uint8_t { Sum, Mean, Prod, Max, Min, Argmax, Argmin, Var, LogSumExp };

constexpr bool is_comparison(BinaryKind k) { return k >= BinaryKind::Eq; }

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
template <class T> AG_HOST_DEVICE inline bool isnan(T x) { return x != x; }
}  // namespace math

// y = f(x) for one element, computed in T (float for 16-bit inputs). `a`, `b` are the op's
// scalar parameters (clamp bounds, the exponent, the scalar operand).
template <UnaryKind K, class T> AG_HOST_DEVICE inline T unary_op(T x, T a, T b) {
  if constexpr (K == UnaryKind::Neg) return -x;
  else if constexpr (K == UnaryKind::Exp) return math::exp(x);
  else if constexpr (K == UnaryKind::Log) return math::log(x);
  else if constexpr (K == UnaryKind::Log1p) return math::log1p(x);
  else if constexpr (K == UnaryKind::Sqrt) return math::sqrt(x);
  else if constexpr (K == UnaryKind::Rsqrt) return T(1) / math::sqrt(x);
  else if constexpr (K == UnaryKind::Reciprocal) return T(1) / x;
  else if constexpr (K == UnaryKind::Abs) return math::abs(x);
  else if constexpr (K == UnaryKind::Sign) return T((x > T(0)) - (x < T(0)));
  else if constexpr (K == UnaryKind::Relu) return (x > T(0) || math::isnan(x)) ? x : T(0);  // NaN propagates (PyTorch)
  else if constexpr (K == UnaryKind::Gelu) return T(0.5) * x * (T(1) + math::erf(x * T(0.70710678118654752440)));
  else if constexpr (K == UnaryKind::GeluGrad) {  // d/dx gelu(x) = Phi(x) + x * phi(x)
    T cdf = T(0.5) * (T(1) + math::erf(x * T(0.70710678118654752440)));
    T pdf = math::exp(T(-0.5) * x * x) * T(0.39894228040143267794);
    return cdf + x * pdf;
  } else if constexpr (K == UnaryKind::Tanh) return math::tanh(x);
  else if constexpr (K == UnaryKind::Sigmoid) return T(1) / (T(1) + math::exp(-x));
  else if constexpr (K == UnaryKind::Softplus) {  // log(1 + e^x), stable for large |x| (threshold 20 as PyTorch)
    return x > T(20) ? x : math::log1p(math::exp(x));
  } else if constexpr (K == UnaryKind::Clamp) return math::isnan(x) ? x : (x < a ? a : (x > b ? b : x));
  else if constexpr (K == UnaryKind::ClampMask) return (x >= a && x <= b) ? T(1) : T(0);
  else if constexpr (K == UnaryKind::PowScalar) return math::pow(x, a);
  else if constexpr (K == UnaryKind::AddScalar) return x + a;
  else if constexpr (K == UnaryKind::MulScalar) return x * a;
  else if constexpr (K == UnaryKind::RSubScalar) return a - x;
  else if constexpr (K == UnaryKind::RDivScalar) return a / x;
  else if constexpr (K == UnaryKind::NotEqualZero) return x != T(0) ? T(1) : T(0);
  else return x;
}

template <BinaryKind K, class T> AG_HOST_DEVICE inline T binary_op(T x, T y) {
  if constexpr (K == BinaryKind::Add) return x + y;
  else if constexpr (K == BinaryKind::Sub) return x - y;
  else if constexpr (K == BinaryKind::Mul) return x * y;
  else if constexpr (K == BinaryKind::Div) return x / y;
  else if constexpr (K == BinaryKind::Pow) return math::pow(x, y);
  else if constexpr (K == BinaryKind::Maximum) return (math::isnan(x) || x > y) ? x : y;  // NaN propagates
  else if constexpr (K == BinaryKind::Minimum) return (math::isnan(x) || x < y) ? x : y;
  else if constexpr (K == BinaryKind::ReluBackward) return y > T(0) ? x : T(0);
  else return x;
}

template <BinaryKind K, class T> AG_HOST_DEVICE inline bool compare_op(T x, T y) {
  if constexpr (K == BinaryKind::Eq) return x == y;
  else if constexpr (K == BinaryKind::Ne) return x != y;
  else if constexpr (K == BinaryKind::Lt) return x < y;
  else if constexpr (K == BinaryKind::Le) return x <= y;
  else if constexpr (K == BinaryKind::Gt) return x > y;
  else return x >= y;
}

// Which unary kinds accept integer tensors; the others promote integers to float32 first.
constexpr bool unary_takes_integers(UnaryKind k) {
  return k == UnaryKind::Neg || k == UnaryKind::Abs || k == UnaryKind::Sign || k == UnaryKind::Relu ||
         k == UnaryKind::Clamp || k == UnaryKind::AddScalar || k == UnaryKind::MulScalar ||
         k == UnaryKind::RSubScalar;
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
