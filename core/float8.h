// The two OCP FP8 formats, as host values: float8_e4m3fn and float8_e5m2 (their DTypes, casts
// and the scaling recipes build on these conversions).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#ifdef __CUDACC__
#define AG_FLOAT8_HD __host__ __device__
#else
#define AG_FLOAT8_HD
#endif

namespace ampgrad {

// Note [FP8 formats]
// e4m3fn: 1 sign, 4 exponent (bias 7) and 3 mantissa bits; no infinities, one NaN per sign
// (S.1111.111); the largest finite value 448 (S.1111.110), the smallest subnormal 2^-9.
// e5m2: 1 sign, 5 exponent (bias 15) and 2 mantissa bits, IEEE-like: infinities
// (S.11111.00), NaNs, the largest finite 57344, the smallest subnormal 2^-16.
// From float: round to nearest, ties to even, subnormals included. What happens past the
// largest finite value depends on the use:
// - the cast (Tensor.to, as PyTorch's .to(torch.float8_*)): a value that rounds past it is
//   NaN in e4m3fn (so inf is NaN) and inf in e5m2;
// - saturated (the scaled casts of FP8 training, as cuBLASLt's and Transformer Engine's
//   satfinite): it clamps to the largest finite value, infinities included; NaN stays NaN.
namespace detail {

// The few float operations the conversions need, on the host and in CUDA kernels alike (the
// device's copy kernels convert with the same code: Note [Float8 tensors] in core/dtype.h).
AG_FLOAT8_HD inline uint32_t f8_bits_of(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  return std::bit_cast<uint32_t>(f);
#endif
}
AG_FLOAT8_HD inline float f8_float_of(uint32_t b) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(b);
#else
  return std::bit_cast<float>(b);
#endif
}
// x * 2^e for |e| < 127 (exact: a power of two), and x rounded to an integer, half to even.
AG_FLOAT8_HD inline float f8_scale(float x, int e) {
  return e >= 0 ? x * f8_float_of(static_cast<uint32_t>(127 + e) << 23)
                : x / f8_float_of(static_cast<uint32_t>(127 - e) << 23);
}
AG_FLOAT8_HD inline float f8_round_even(float x) {
#ifdef __CUDA_ARCH__
  return rintf(x);
#else
  return std::nearbyint(x);
#endif
}

template <int kExp, int kMant, bool kHasInf> struct Float8Format {
  static constexpr int kBias = (1 << (kExp - 1)) - 1;
  static constexpr uint8_t kMaxFinite = kHasInf ? uint8_t(((1 << kExp) - 2) << kMant | ((1 << kMant) - 1))
                                                : uint8_t(0x7E);  // e4m3fn: S.1111.110
  static constexpr uint8_t kNaN = 0x7F;                           // canonical NaN (either format)
  static constexpr uint8_t kInf = uint8_t(((1 << kExp) - 1) << kMant);

  AG_FLOAT8_HD static float decode(uint8_t p) {
    const bool neg = p & 0x80;
    const int e = (p >> kMant) & ((1 << kExp) - 1), m = p & ((1 << kMant) - 1);
    float v;
    if (kHasInf && e == (1 << kExp) - 1) {
      v = f8_float_of(m == 0 ? 0x7F800000u : 0x7FC00000u);
    } else if (!kHasInf && (p & 0x7F) == kNaN) {
      v = f8_float_of(0x7FC00000u);
    } else if (e == 0) {
      v = f8_scale(static_cast<float>(m), 1 - kBias - kMant);
    } else {
      v = f8_scale(static_cast<float>((1 << kMant) | m), e - kBias - kMant);
    }
    return neg ? -v : v;
  }

  AG_FLOAT8_HD static uint8_t encode(float f, bool saturate) {
    uint32_t bits = f8_bits_of(f);
    const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80);
    bits &= 0x7FFFFFFFu;
    if (bits > 0x7F800000u) return sign | kNaN;
    const int e = static_cast<int>(bits >> 23) - 127;
    uint32_t pattern;
    if (e < 1 - kBias) {
      // Below the smallest normal: a multiple of the subnormal quantum 2^(1 - bias - mant),
      // rounded half to even (exact: the scaling is by a power of two). 2^kMant, the rounding
      // up to the smallest normal, is that normal's pattern.
      const float q = f8_round_even(f8_scale(f8_float_of(bits), kBias - 1 + kMant));
      pattern = static_cast<uint32_t>(q);
    } else {
      // Keep kMant of float32's 23 mantissa bits, half to even; a carry moves into the exponent.
      constexpr int kShift = 23 - kMant;
      const uint32_t rounded = (bits + ((1u << (kShift - 1)) - 1) + ((bits >> kShift) & 1)) >> kShift;
      const int64_t exp_field = static_cast<int64_t>(rounded >> kMant) - 127 + kBias;
      pattern = exp_field > 0xFF ? 0xFFFFu
                                 : static_cast<uint32_t>(exp_field << kMant) | (rounded & ((1u << kMant) - 1));
    }
    if (pattern > kMaxFinite) return sign | (saturate ? kMaxFinite : (kHasInf ? kInf : kNaN));
    return sign | static_cast<uint8_t>(pattern);
  }
};

using E4M3FN = Float8Format<4, 3, false>;
using E5M2 = Float8Format<5, 2, true>;

}  // namespace detail

// One FP8 value of a Format: Float8(x) rounds as the cast does; saturated(x) clamps.
template <class Format> struct Float8 {
  uint8_t bits = 0;
  Float8() = default;
  AG_FLOAT8_HD explicit Float8(float f) : bits(Format::encode(f, false)) {}
  AG_FLOAT8_HD static Float8 from_bits(uint8_t b) {
    Float8 v;
    v.bits = b;
    return v;
  }
  AG_FLOAT8_HD static Float8 saturated(float f) { return from_bits(Format::encode(f, true)); }
  AG_FLOAT8_HD operator float() const { return Format::decode(bits); }
};

using Float8_e4m3fn = Float8<detail::E4M3FN>;  // largest finite 448
using Float8_e5m2 = Float8<detail::E5M2>;      // largest finite 57344

}  // namespace ampgrad
