// The two OCP FP8 formats, as host values: float8_e4m3fn and float8_e5m2 (issue #26's first
// step; their DTypes, casts and the scaling recipe build on these conversions).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

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

template <int kExp, int kMant, bool kHasInf> struct Float8Format {
  static constexpr int kBias = (1 << (kExp - 1)) - 1;
  static constexpr uint8_t kMaxFinite = kHasInf ? uint8_t(((1 << kExp) - 2) << kMant | ((1 << kMant) - 1))
                                                : uint8_t(0x7E);  // e4m3fn: S.1111.110
  static constexpr uint8_t kNaN = 0x7F;                           // canonical NaN (either format)
  static constexpr uint8_t kInf = uint8_t(((1 << kExp) - 1) << kMant);

  static float decode(uint8_t p) {
    const bool neg = p & 0x80;
    const int e = (p >> kMant) & ((1 << kExp) - 1), m = p & ((1 << kMant) - 1);
    float v;
    if (kHasInf && e == (1 << kExp) - 1) {
      v = m == 0 ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
    } else if (!kHasInf && (p & 0x7F) == kNaN) {
      v = std::numeric_limits<float>::quiet_NaN();
    } else if (e == 0) {
      v = std::ldexp(static_cast<float>(m), 1 - kBias - kMant);
    } else {
      v = std::ldexp(static_cast<float>((1 << kMant) | m), e - kBias - kMant);
    }
    return neg ? -v : v;
  }

  static uint8_t encode(float f, bool saturate) {
    uint32_t bits = std::bit_cast<uint32_t>(f);
    const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80);
    bits &= 0x7FFFFFFFu;
    if (bits > 0x7F800000u) return sign | kNaN;
    const int e = static_cast<int>(bits >> 23) - 127;
    uint32_t pattern;
    if (e < 1 - kBias) {
      // Below the smallest normal: a multiple of the subnormal quantum 2^(1 - bias - mant),
      // rounded half to even (exact: the scaling is by a power of two). 2^kMant, the rounding
      // up to the smallest normal, is that normal's pattern.
      const float q = std::nearbyint(std::ldexp(std::bit_cast<float>(bits), kBias - 1 + kMant));
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
  explicit Float8(float f) : bits(Format::encode(f, false)) {}
  static Float8 from_bits(uint8_t b) {
    Float8 v;
    v.bits = b;
    return v;
  }
  static Float8 saturated(float f) { return from_bits(Format::encode(f, true)); }
  operator float() const { return Format::decode(bits); }
};

using Float8_e4m3fn = Float8<detail::E4M3FN>;  // largest finite 448
using Float8_e5m2 = Float8<detail::E5M2>;      // largest finite 57344

}  // namespace ampgrad
