// The numerics monitor's parts: exponent histograms against binades computed on the host in
// float64, the formats' shares of a histogram, the update-cancellation meter.
#include <cmath>
#include <limits>

#include "common.h"

namespace {

// The bin of v by the definition (Note [Exponent histograms] in core/exponent_bins.h), on the
// host in float64 with ilogb: an independent reading of the rule the kernels follow.
int host_bin(double v) {
  if (std::isnan(v)) return ag::amp::kExponentBins - 1;
  if (std::isinf(v)) return ag::amp::kExponentBins - 2;
  if (v == 0) return 0;
  const int e = std::clamp(std::ilogb(v), -149, 127);
  return 1 + (e + 149);
}

// Values over float32's whole line, subnormals and the edges of each binade included, with
// zeros, infinities and NaN.
std::vector<double> spread_values() {
  std::vector<double> v = {0.0, -0.0, std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                           std::numeric_limits<double>::quiet_NaN(), 1.0, -1.0, 0.75, 65504.0, 65520.0};
  for (int e = -149; e <= 127; e += 3) {
    v.push_back(std::ldexp(1.0, e));
    v.push_back(-std::ldexp(1.5, e));
    if (e < 127) v.push_back(std::nextafter(static_cast<float>(std::ldexp(1.0, e + 1)), 0.0f));  // the binade's top
  }
  std::mt19937 gen(7);
  std::uniform_real_distribution<double> ex(-40, 20);
  for (int i = 0; i < 500; ++i) v.push_back(std::ldexp(1.0 + (i % 7) / 7.0, static_cast<int>(ex(gen))));
  return v;
}

}  // namespace

TEST_CASE("exponent histograms count each value in its binade, on every floating dtype", "[numerics]") {
  const std::vector<double> values = spread_values();
  for (ag::DType dt : {ag::kFloat32, ag::kFloat16, ag::kBFloat16, ag::kFloat64}) {
    INFO(ag::dtype_name(dt));
    const ag::Tensor t = ag::tensor(values, {static_cast<int64_t>(values.size())}).to(dt);
    // The values as stored in dt (16-bit ones rounded, some to 0 or inf), binned on the host.
    std::vector<int64_t> want(ag::amp::kExponentBins, 0);
    for (double v : t.to_vector<double>()) ++want[static_cast<size_t>(host_bin(v))];
    const ag::Tensor got = ag::amp::exponent_histogram(t);
    CHECK(got.dtype() == ag::kInt64);
    CHECK(got.to_vector<int64_t>() == want);
    // Strided: a transpose's elements, the same counts.
    const ag::Tensor m = t.narrow(0, 0, 500).reshape({20, 25}).t();
    std::vector<int64_t> want_m(ag::amp::kExponentBins, 0);
    for (double v : m.to_vector<double>()) ++want_m[static_cast<size_t>(host_bin(v))];
    CHECK(ag::amp::exponent_histogram(m).to_vector<int64_t>() == want_m);
  }
  // float64 values beyond float32's line land in its end binades.
  const ag::Tensor far = ag::tensor(std::vector<double>{1e-300, 1e300}, {2}, ag::kFloat64);
  const std::vector<int64_t> c = ag::amp::exponent_histogram(far).to_vector<int64_t>();
  CHECK(c[1] == 1);
  CHECK(c[ag::amp::kExponentBins - 3] == 1);
  // add_exponent_histogram adds into a row.
  ag::Tensor rows = ag::zeros({2, ag::amp::kExponentBins}, ag::kInt64);
  ag::amp::add_exponent_histogram(ag::ones({5}), ag::select(rows, 0, 1));
  ag::amp::add_exponent_histogram(ag::ones({3}), ag::select(rows, 0, 1));
  CHECK(ag::select(rows, 0, 1).to_vector<int64_t>()[static_cast<size_t>(host_bin(1.0))] == 8);
  CHECK(ag::sum(ag::select(rows, 0, 0)).item<int64_t>() == 0);
  CHECK_THAT(error_message([] { ag::amp::exponent_histogram(ag::ones({2}, ag::kInt64)); }),
             Catch::Contains("exponent_histogram: expected a floating tensor"));
  CHECK_THAT(error_message([] { ag::amp::add_exponent_histogram(ag::ones({2}), ag::zeros({3}, ag::kInt64)); }),
             Catch::Contains("expected counts int64 [280]"));
}

TEST_CASE("exponent histograms on CUDA equal the CPU's", "[numerics][cuda]") {
  if (skip_without_cuda()) return;
  const std::vector<double> values = spread_values();
  for (ag::DType dt : {ag::kFloat32, ag::kFloat16, ag::kBFloat16, ag::kFloat64}) {
    INFO(ag::dtype_name(dt));
    const ag::Tensor t = ag::tensor(values, {static_cast<int64_t>(values.size())}).to(dt);
    CHECK(ag::amp::exponent_histogram(t.to(ag::Device(ag::kCUDA, 0))).to_vector<int64_t>() ==
          ag::amp::exponent_histogram(t).to_vector<int64_t>());
    // Many blocks: the blocks' counts add up.
    const ag::Tensor big = ag::randn({1 << 22}).to(dt);
    CHECK(ag::amp::exponent_histogram(big.to(ag::Device(ag::kCUDA, 0))).to_vector<int64_t>() ==
          ag::amp::exponent_histogram(big).to_vector<int64_t>());
  }
}

TEST_CASE("a format's shares of a histogram, shifted by a scale", "[numerics]") {
  // 2^-30: below float16's smallest subnormal (2^-24), a bfloat16 normal; 2^-20: a float16
  // subnormal; 1: normal everywhere; 2^20: past float16's largest binade (15).
  const ag::Tensor t = ag::tensor(std::vector<double>{0.0, std::ldexp(1.0, -30), std::ldexp(1.0, -20), 1.0,
                                                      std::ldexp(1.0, 20), std::numeric_limits<double>::infinity()},
                                  {6});
  std::vector<int64_t> c = ag::amp::exponent_histogram(t).to_vector<int64_t>();
  const auto fp16 = ag::amp::format_shares(c, ag::amp::format_range(ag::kFloat16));
  CHECK(fp16.count == 6);
  CHECK(fp16.zero == Approx(1.0 / 6));
  CHECK(fp16.flushed == Approx(1.0 / 6));
  CHECK(fp16.subnormal == Approx(1.0 / 6));
  CHECK(fp16.normal == Approx(1.0 / 6));
  CHECK(fp16.overflow == Approx(1.0 / 6));
  CHECK(fp16.nonfinite == Approx(1.0 / 6));
  const auto bf16 = ag::amp::format_shares(c, ag::amp::format_range(ag::kBFloat16));
  CHECK(bf16.flushed == 0);
  CHECK(bf16.normal == Approx(4.0 / 6));
  // Scaled by 2^15: 2^-30 becomes 2^-15, a float16 subnormal (2^-14 is its smallest normal);
  // 2^-20 and 1 become normal (2^15 is float16's largest binade); 2^20 overflows.
  const auto scaled = ag::amp::format_shares(c, ag::amp::format_range(ag::kFloat16), 15);
  CHECK(scaled.flushed == 0);
  CHECK(scaled.subnormal == Approx(1.0 / 6));
  CHECK(scaled.normal == Approx(2.0 / 6));
  CHECK(scaled.overflow == Approx(1.0 / 6));
  // By 2^16 the smallest lands on 2^-14, a normal, and 1 on 2^16, past the largest binade.
  const auto by16 = ag::amp::format_shares(c, ag::amp::format_range(ag::kFloat16), 16);
  CHECK(by16.subnormal == 0);
  CHECK(by16.normal == Approx(2.0 / 6));
  CHECK(by16.overflow == Approx(2.0 / 6));
  CHECK(ag::amp::format_ranges().size() == 4);
  CHECK(ag::amp::format_range(ag::kFloat8_e4m3fn).max_finite == 448.0);
  CHECK_THAT(error_message([] { ag::amp::format_range(ag::kFloat32); }), Catch::Contains("float32 is not a 16- or 8-bit"));
}

TEST_CASE("the update-cancellation meter: updates a 16-bit weight cannot hold", "[numerics]") {
  // Weights near 1: bfloat16's spacing there is 2^-7 (half of it 2^-8 = 0.0039), float16's 2^-10.
  // An update of 1e-3 is lost in bfloat16 and kept in float16; 0.01 is kept by both; 1e-4 is
  // lost in both; a zero update is not counted.
  const ag::Tensor w = ag::full({8}, 1.0);
  const ag::Tensor u = ag::tensor({1e-3f, 1e-3f, 1e-3f, 1e-3f, 0.01f, 0.01f, 1e-4f, 0.0f});
  CHECK(ag::amp::update_cancellation(w, u, ag::kBFloat16).item<double>() == Approx(5.0 / 7));
  CHECK(ag::amp::update_cancellation(w, u, ag::kFloat16).item<double>() == Approx(1.0 / 7));
  // Against a host count in float64 on random weights and updates.
  ag::manual_seed(fresh_seed());
  const ag::Tensor wr = ag::randn({4096}), ur = ag::randn({4096}) * 1e-3;
  const std::vector<float> wv = wr.to_vector<float>(), uv = ur.to_vector<float>();
  int64_t lost = 0, moved = 0;
  for (size_t i = 0; i < wv.size(); ++i) {
    if (uv[i] == 0) continue;
    ++moved;
    lost += static_cast<float>(ag::BFloat16(wv[i] + uv[i])) == static_cast<float>(ag::BFloat16(wv[i]));
  }
  CHECK(ag::amp::update_cancellation(wr, ur, ag::kBFloat16).item<double>() ==
        Approx(static_cast<double>(lost) / static_cast<double>(moved)));
  CHECK_THAT(error_message([&] { ag::amp::update_cancellation(w, u, ag::kFloat32); }),
             Catch::Contains("storage must be float16 or bfloat16"));
  CHECK_THAT(error_message([&] { ag::amp::update_cancellation(w, ag::ones({3}), ag::kFloat16); }),
             Catch::Contains("of one shape"));
}
