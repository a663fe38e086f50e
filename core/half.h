// Host fp16 and bf16 storage types with exact round-to-nearest-even conversion.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

namespace ampgrad {

namespace detail {
inline uint32_t float_bits(float f) { return std::bit_cast<uint32_t>(f); }
inline float bits_float(uint32_t u) { return std::bit_cast<float>(u); }

// IEEE binary16 from binary32, round to nearest, ties to even.
inline uint16_t float_to_half_bits(float f) {
  uint32_t x = float_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t mag = x & 0x7fffffffu;
  if (mag >= 0x7f800000u) {  // inf or NaN: keep NaN quiet and non-zero
    return static_cast<uint16_t>(sign | 0x7c00u | (mag > 0x7f800000u ? 0x200u | ((mag >> 13) & 0x3ffu) : 0u));
  }
  if (mag >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520 -> inf
  if (mag < 0x38800000u) {  // result is subnormal or zero (|f| < 2^-14)
    if (mag < 0x33000000u) return static_cast<uint16_t>(sign);  // below half the smallest subnormal
    uint32_t exp = mag >> 23;
    uint32_t mant = (mag & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - exp;  // 14 - (exp - 127) + 13 - 1 + 1
    uint32_t half_mant = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_mant & 1u))) ++half_mant;
    return static_cast<uint16_t>(sign | half_mant);
  }
  // normal: rebias exponent and round the 13 dropped bits
  uint32_t h = ((mag - 0x38000000u) >> 13);
  uint32_t rem = mag & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

inline float half_bits_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return bits_float(sign);
    // subnormal: value = mant * 2^-24, exact in float
    float v = static_cast<float>(mant) * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

inline uint16_t float_to_bfloat16_bits(float f) {
  uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

inline float bfloat16_bits_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }
}  // namespace detail

struct FromBits {};

// 16-bit IEEE half precision. Arithmetic happens in float; the type only stores.
struct Half {
  uint16_t x = 0;
  Half() = default;
  Half(uint16_t bits, FromBits) : x(bits) {}
  Half(float f) : x(detail::float_to_half_bits(f)) {}  // NOLINT: implicit like c10::Half
  operator float() const { return detail::half_bits_to_float(x); }  // NOLINT
};

// bfloat16: float's exponent range, 8 bits of mantissa.
struct BFloat16 {
  uint16_t x = 0;
  BFloat16() = default;
  BFloat16(uint16_t bits, FromBits) : x(bits) {}
  BFloat16(float f) : x(detail::float_to_bfloat16_bits(f)) {}  // NOLINT
  operator float() const { return detail::bfloat16_bits_to_float(x); }  // NOLINT
};

}  // namespace ampgrad
