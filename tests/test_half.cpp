// Tests of core/half.h: float16 and bfloat16 conversion against independent references, and
// 16-bit tensors storing the rounded values.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>

#include "common.h"

namespace {

// ---- Independent references for 16-bit floats ---------------------------------------
// Values are computed from the bit fields with exact double arithmetic (ldexp), and
// float -> 16-bit rounding searches the sorted list of representable magnitudes; neither
// calls ampgrad's conversion code.

uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }
float float_of(uint32_t u) { return std::bit_cast<float>(u); }

// A 16-bit float format: `mant_bits` stored mantissa bits, exponent bias `bias`.
struct Format16 {
  int mant_bits;
  int exp_bits;
  int bias;
  uint16_t max_finite;  // bit pattern of the largest finite magnitude
  uint16_t inf;         // bit pattern of +inf
};
constexpr Format16 kHalfFmt{10, 5, 15, 0x7bff, 0x7c00};
constexpr Format16 kBf16Fmt{7, 8, 127, 0x7f7f, 0x7f80};

bool is_nan16(const Format16& f, uint16_t b) {
  return (b & 0x7fff) > f.inf;
}

// Exact value of a non-NaN 16-bit pattern.
double value16(const Format16& f, uint16_t b) {
  const bool neg = (b & 0x8000) != 0;
  const int e = (b >> f.mant_bits) & ((1 << f.exp_bits) - 1);
  const int m = b & ((1 << f.mant_bits) - 1);
  double v;
  if (e == (1 << f.exp_bits) - 1) {
    v = std::numeric_limits<double>::infinity();
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), 1 - f.bias - f.mant_bits);
  } else {
    v = std::ldexp(static_cast<double>((1 << f.mant_bits) + m), e - f.bias - f.mant_bits);
  }
  return neg ? -v : v;
}

// The magnitude just above max finite that IEEE rounding uses to decide overflow:
// max_finite + one ulp (65536 for fp16, 2^128 for bf16).
double overflow_value(const Format16& f) {
  return std::ldexp(1.0, (1 << f.exp_bits) - 1 - f.bias);
}

// Round-to-nearest-even of a finite or infinite non-NaN float to the 16-bit format.
uint16_t round16_ref(const Format16& f, float x) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(x));
  const double top = overflow_value(f);
  if (a >= top) return sign | f.inf;
  // Largest lo in [0, max_finite] with value(lo) <= a (magnitudes are monotonic in the bits).
  uint32_t lo = 0, hi = f.max_finite;
  while (lo < hi) {
    const uint32_t mid = (lo + hi + 1) / 2;
    if (value16(f, static_cast<uint16_t>(mid)) <= a) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const double vlo = value16(f, static_cast<uint16_t>(lo));
  const double vhi = lo == f.max_finite ? top : value16(f, static_cast<uint16_t>(lo + 1));
  const double dlo = a - vlo, dhi = vhi - a;
  uint32_t r;
  if (dlo < dhi) {
    r = lo;
  } else if (dhi < dlo) {
    r = lo + 1;
  } else {
    r = (lo & 1u) ? lo + 1 : lo;  // tie: the even pattern
  }
  return static_cast<uint16_t>(sign | r);  // r == max_finite + 1 is the inf pattern
}

uint16_t to_half_bits(float x) { return ag::Half(x).x; }
uint16_t to_bf16_bits(float x) { return ag::BFloat16(x).x; }
float from_half_bits(uint16_t b) { return static_cast<float>(ag::Half(b, ag::FromBits{})); }
float from_bf16_bits(uint16_t b) { return static_cast<float>(ag::BFloat16(b, ag::FromBits{})); }

template <class To16, class From16>
void check_all_patterns(const Format16& f, To16 to16, From16 from16) {
  int mismatches = 0;
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const auto h = static_cast<uint16_t>(b);
    const float v = from16(h);
    if (is_nan16(f, h)) {
      if (!std::isnan(v) || !is_nan16(f, to16(v))) {
        ++mismatches;
        UNSCOPED_INFO(fmt::format("NaN pattern {:#06x} -> {} -> {:#06x}", b, v, to16(v)));
      }
      continue;
    }
    // Exact widening, then a bit-exact round trip.
    if (static_cast<double>(v) != value16(f, h) || to16(v) != h) {
      ++mismatches;
      if (mismatches < 10)
        UNSCOPED_INFO(fmt::format("pattern {:#06x}: to float {} (expected {}), back {:#06x}", b, v, value16(f, h),
                                  to16(v)));
    }
  }
  CHECK(mismatches == 0);
}

// Compares the conversion with the reference on x; returns true on agreement.
template <class To16> bool agrees(const Format16& f, To16 to16, float x) {
  const uint16_t got = to16(x), want = round16_ref(f, x);
  if (got == want) return true;
  UNSCOPED_INFO(fmt::format("float {:.9g} (bits {:#010x}) -> {:#06x}, expected {:#06x}", x, bits_of(x), got, want));
  return false;
}

// Midpoints between all neighbouring patterns (exact in float), one float ulp either side,
// and a sweep over float bit patterns.
template <class To16> void check_rounding(const Format16& f, To16 to16) {
  int bad = 0;
  for (uint32_t b = 0; b < f.max_finite && bad < 10; ++b) {
    const double mid = (value16(f, static_cast<uint16_t>(b)) + value16(f, static_cast<uint16_t>(b + 1))) / 2;
    const auto m = static_cast<float>(mid);
    REQUIRE(static_cast<double>(m) == mid);
    for (float x : {m, std::nextafter(m, 0.f), std::nextafter(m, INFINITY)})
      for (float s : {x, -x}) bad += !agrees(f, to16, s);
  }
  {  // midpoint between max finite and the overflow threshold rounds to even: inf
    const double mid = (value16(f, f.max_finite) + overflow_value(f)) / 2;
    const auto m = static_cast<float>(mid);
    for (float x : {m, std::nextafter(m, 0.f), std::nextafter(m, INFINITY)})
      for (float s : {x, -x}) bad += !agrees(f, to16, s);
  }
  // Every 4099th float bit pattern (both signs, all exponents), NaNs excluded.
  for (uint64_t u = 0; u <= 0xffffffffull && bad < 10; u += 4099) {
    const float x = float_of(static_cast<uint32_t>(u));
    if (std::isnan(x)) continue;
    bad += !agrees(f, to16, x);
  }
  // Random floats with values in the 16-bit range.
  std::mt19937 rng(1234);
  for (int i = 0; i < 200000 && bad < 10; ++i) {
    const float x = float_of(static_cast<uint32_t>(rng()));
    if (std::isnan(x)) continue;
    bad += !agrees(f, to16, x);
  }
  CHECK(bad == 0);
}

}  // namespace

// ---- fp16 ------------------------------------------------------------------------------
TEST_CASE("fp16: every bit pattern widens exactly and round-trips", "[core][half]") {
  check_all_patterns(kHalfFmt, to_half_bits, from_half_bits);
}

TEST_CASE("fp16: float -> half rounds to nearest, ties to even", "[core][half]") {
  SECTION("against the independent reference") { check_rounding(kHalfFmt, to_half_bits); }
  SECTION("named cases") {
    // ties between normals, both parities
    CHECK(to_half_bits(1.0f + 0x1p-11f) == 0x3c00);        // 1 | 1+2^-10: even is 1.0
    CHECK(to_half_bits(1.0f + 3 * 0x1p-11f) == 0x3c02);    // 1+2^-10 (odd) | 1+2^-9: even is up
    CHECK(to_half_bits(-(1.0f + 0x1p-11f)) == 0xbc00);
    CHECK(to_half_bits(1.0f + 0x1p-11f + 0x1p-23f) == 0x3c01);  // just above the tie
    // range
    CHECK(to_half_bits(65504.f) == 0x7bff);
    CHECK(to_half_bits(65519.99f) == 0x7bff);
    CHECK(to_half_bits(65520.f) == 0x7c00);
    CHECK(to_half_bits(-65520.f) == 0xfc00);
    CHECK(to_half_bits(1e10f) == 0x7c00);
    CHECK(to_half_bits(INFINITY) == 0x7c00);
    CHECK(to_half_bits(-INFINITY) == 0xfc00);
    CHECK(from_half_bits(0x7bff) == 65504.f);
    // subnormals
    CHECK(to_half_bits(0x1p-24f) == 0x0001);
    CHECK(from_half_bits(0x0001) == 0x1p-24f);
    CHECK(to_half_bits(0x1p-25f) == 0x0000);         // tie with 0: even is 0
    CHECK(to_half_bits(-0x1p-25f) == 0x8000);        // keeps its sign
    CHECK(to_half_bits(1.5f * 0x1p-25f) == 0x0001);  // above the tie
    CHECK(to_half_bits(3 * 0x1p-25f) == 0x0002);     // 1.5 * 2^-24: tie between 1 (odd) and 2
    CHECK(to_half_bits(5 * 0x1p-25f) == 0x0002);     // 2.5 * 2^-24: tie between 2 (even) and 3
    CHECK(to_half_bits(1023.5f * 0x1p-24f) == 0x0400);  // largest subnormal (odd) | 2^-14
    CHECK(to_half_bits(0x1p-14f) == 0x0400);
    CHECK(to_half_bits(0x1p-26f) == 0x0000);
    CHECK(to_half_bits(-0.0f) == 0x8000);
    CHECK(to_half_bits(0.0f) == 0x0000);
  }
  SECTION("NaN stays NaN") {
    for (uint32_t nan_bits : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fa00000u, 0x7f802000u}) {
      INFO(fmt::format("float bits {:#010x}", nan_bits));
      const uint16_t h = to_half_bits(float_of(nan_bits));
      CHECK(is_nan16(kHalfFmt, h));
      CHECK(std::isnan(from_half_bits(h)));
    }
  }
}

// ---- bf16 ------------------------------------------------------------------------------
TEST_CASE("bf16: every bit pattern widens exactly and round-trips", "[core][bf16]") {
  check_all_patterns(kBf16Fmt, to_bf16_bits, from_bf16_bits);
}

TEST_CASE("bf16: float -> bfloat16 rounds to nearest, ties to even", "[core][bf16]") {
  SECTION("against the independent reference") { check_rounding(kBf16Fmt, to_bf16_bits); }
  SECTION("named cases") {
    CHECK(to_bf16_bits(1.0f + 0x1p-8f) == 0x3f80);      // tie, 1.0 is even
    CHECK(to_bf16_bits(1.0f + 3 * 0x1p-8f) == 0x3f82);  // tie, 1+2^-7 is odd: up
    CHECK(to_bf16_bits(1.0f + 0x1p-8f + 0x1p-23f) == 0x3f81);
    CHECK(from_bf16_bits(0x7f7f) == Approx(3.3895e38).epsilon(1e-4));
    CHECK(static_cast<double>(from_bf16_bits(0x7f7f)) == std::ldexp(255.0, 120));
    CHECK(to_bf16_bits(3.3895e38f) == 0x7f7f);
    CHECK(to_bf16_bits(std::numeric_limits<float>::max()) == 0x7f80);  // above the midpoint: inf
    CHECK(to_bf16_bits(-std::numeric_limits<float>::max()) == 0xff80);
    CHECK(to_bf16_bits(INFINITY) == 0x7f80);
    CHECK(to_bf16_bits(-0.0f) == 0x8000);
    CHECK(to_bf16_bits(0x1p-133f) == 0x0001);  // smallest bf16 subnormal
  }
  SECTION("NaN stays NaN, even with payload only in the dropped bits") {
    for (uint32_t nan_bits : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7f80ffffu}) {
      INFO(fmt::format("float bits {:#010x}", nan_bits));
      const uint16_t b = to_bf16_bits(float_of(nan_bits));
      CHECK(is_nan16(kBf16Fmt, b));
      CHECK(std::isnan(from_bf16_bits(b)));
    }
  }
}

TEST_CASE("16-bit tensors store the rounded values", "[core][half][bf16]") {
  ag::manual_seed(11);
  const ag::Tensor x = ag::randn({257});
  const std::vector<float> xs = x.to_vector<float>();
  for (ag::DType dt : {ag::kFloat16, ag::kBFloat16}) {
    INFO(ag::dtype_name(dt));
    const Format16& f = dt == ag::kFloat16 ? kHalfFmt : kBf16Fmt;
    const ag::Tensor y = x.to(dt);
    REQUIRE(y.dtype() == dt);
    REQUIRE(y.element_size() == 2);
    std::vector<uint16_t> raw(static_cast<size_t>(y.numel()));
    std::memcpy(raw.data(), y.data_ptr(), raw.size() * 2);
    std::vector<double> want;
    for (size_t i = 0; i < xs.size(); ++i) {
      CHECK(raw[i] == round16_ref(f, xs[i]));
      want.push_back(value16(f, round16_ref(f, xs[i])));
    }
    check_close(y.to(ag::kFloat32), want, 0, 0);  // widening back is exact
    check_close(y.to(ag::kFloat64), want, 0, 0);
  }
}

