// The FP8 host conversions (core/float8.h, Note [FP8 formats]): every bit pattern both ways,
// and rounding against a reference that searches all finite values for the nearest one.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <ampgrad/core/float8.h>

#include "common.h"

namespace {

// The nearest finite value's pattern by exhaustive search (ties to the even mantissa), in
// float64; past the largest finite value, the cast's overflow rule (round to nearest with a
// virtual next value one step above the largest) or, saturating, the largest.
template <class F8> uint8_t reference(double x, bool saturate, bool has_inf) {
  if (std::isnan(x)) return 0x7F | (std::signbit(x) ? 0x80 : 0);
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs(x);
  const uint8_t max_bits = has_inf ? 0x7B : 0x7E;
  const double max = F8::from_bits(max_bits), step = max - F8::from_bits(max_bits - 1);
  if (a > max) {
    // The cast rounds to the virtual value max + step when a is past the midpoint, or at the
    // midpoint (max's mantissa is odd for e5m2, so the tie goes up; even for e4m3fn: down).
    const double mid = max + step / 2;
    const bool up = a > mid || (a == mid && (max_bits & 1));
    if (saturate || !up) return sign | max_bits;
    return sign | (has_inf ? 0x7C : 0x7F);
  }
  uint8_t best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (int p = 0; p <= max_bits; ++p) {
    const double v = F8::from_bits(static_cast<uint8_t>(p)), d = std::fabs(v - a);
    if (d < best_d || (d == best_d && (p & 1) == 0)) best = static_cast<uint8_t>(p), best_d = d;
  }
  return sign | best;
}

template <class F8> void check_all_patterns(bool has_inf) {
  int finite = 0;
  for (int p = 0; p < 256; ++p) {
    const auto b = static_cast<uint8_t>(p);
    const float v = F8::from_bits(b);
    INFO("pattern " << p << " value " << v);
    if (std::isnan(v)) {
      CHECK(F8(v).bits == (0x7F | (b & 0x80)));  // any NaN casts to the canonical one
    } else {
      CHECK(F8(v).bits == b);  // every value casts back to its own pattern (-0 included)
      CHECK(F8::saturated(v).bits == (std::isinf(v) ? ((b & 0x80) | (has_inf ? 0x7B : 0x7E)) : b));
      if (std::isfinite(v)) ++finite;
    }
  }
  CHECK(finite == (has_inf ? 248 : 254));
}

template <class F8> void check_rounding(bool has_inf, int lo_exp, int hi_exp) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> mant(1.0, 2.0);
  std::uniform_int_distribution<int> ex(lo_exp, hi_exp);
  std::vector<float> xs;
  for (int i = 0; i < 200000; ++i) {
    const float x = static_cast<float>(std::ldexp(mant(rng), ex(rng)) * (i % 2 ? -1.0 : 1.0));
    xs.push_back(x);
  }
  // The midpoints between neighbours, exactly representable in float32: the ties.
  for (int p = 0; p < 0x7F; ++p) {
    const double a = F8::from_bits(static_cast<uint8_t>(p)), b = F8::from_bits(static_cast<uint8_t>(p + 1));
    if (std::isfinite(a) && std::isfinite(b)) xs.push_back(static_cast<float>((a + b) / 2));
  }
  for (float x : {0.0f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max()})
    xs.push_back(x);
  int bad = 0;
  for (float x : xs) {
    for (bool sat : {false, true}) {
      const uint8_t got = sat ? F8::saturated(x).bits : F8(x).bits, want = reference<F8>(x, sat, has_inf);
      if (got != want && ++bad <= 5) FAIL_CHECK("x " << x << (sat ? " saturated" : "") << ": got " << int(got) << ", want " << int(want));
    }
  }
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("float8_e4m3fn: all 256 patterns both ways, rounding, overflow and saturation", "[float8]") {
  using ag::Float8_e4m3fn;
  CHECK(float(Float8_e4m3fn::from_bits(0x7E)) == 448.0f);
  CHECK(float(Float8_e4m3fn::from_bits(0x08)) == std::ldexp(1.0f, -6));  // smallest normal
  CHECK(float(Float8_e4m3fn::from_bits(0x01)) == std::ldexp(1.0f, -9));  // smallest subnormal
  CHECK(std::isnan(float(Float8_e4m3fn::from_bits(0x7F))));
  CHECK(std::isnan(float(Float8_e4m3fn::from_bits(0xFF))));
  check_all_patterns<Float8_e4m3fn>(false);
  check_rounding<Float8_e4m3fn>(false, -12, 10);
  // PyTorch's .to(torch.float8_e4m3fn): 464 is the tie between 448 and the NaN slot (to 448),
  // anything above it is NaN, infinity too; saturated, they are 448.
  CHECK(Float8_e4m3fn(464.0f).bits == 0x7E);
  CHECK(std::isnan(float(Float8_e4m3fn(465.0f))));
  CHECK(std::isnan(float(Float8_e4m3fn(std::numeric_limits<float>::infinity()))));
  CHECK(float(Float8_e4m3fn::saturated(1e30f)) == 448.0f);
  CHECK(float(Float8_e4m3fn::saturated(-std::numeric_limits<float>::infinity())) == -448.0f);
  CHECK(std::isnan(float(Float8_e4m3fn::saturated(std::nanf("")))));
  CHECK(float(Float8_e4m3fn(0.1f)) == 0.1015625f);  // 13 * 2^-7, the nearest
}

TEST_CASE("float8_e5m2: all 256 patterns both ways, rounding, overflow and saturation", "[float8]") {
  using ag::Float8_e5m2;
  CHECK(float(Float8_e5m2::from_bits(0x7B)) == 57344.0f);
  CHECK(float(Float8_e5m2::from_bits(0x04)) == std::ldexp(1.0f, -14));  // smallest normal
  CHECK(float(Float8_e5m2::from_bits(0x01)) == std::ldexp(1.0f, -16));  // smallest subnormal
  CHECK(std::isinf(float(Float8_e5m2::from_bits(0x7C))));
  CHECK(std::isnan(float(Float8_e5m2::from_bits(0x7D))));
  check_all_patterns<Float8_e5m2>(true);
  check_rounding<Float8_e5m2>(true, -19, 17);
  // 61440 is the tie between 57344 (odd mantissa) and infinity: it goes to infinity.
  CHECK(Float8_e5m2(61439.0f).bits == 0x7B);
  CHECK(std::isinf(float(Float8_e5m2(61440.0f))));
  CHECK(float(Float8_e5m2::saturated(1e30f)) == 57344.0f);
  CHECK(float(Float8_e5m2::saturated(std::numeric_limits<float>::infinity())) == 57344.0f);
}
