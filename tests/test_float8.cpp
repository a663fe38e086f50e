// The FP8 host conversions (core/float8.h, Note [FP8 formats]): every bit pattern both ways,
// and rounding against a reference that searches all finite values for the nearest one. Then
// float8 tensors (Note [Float8 tensors] in core/dtype.h): casts on the CPU and CUDA, factories,
// views, printing, the ops that refuse them, safetensors.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <vector>

#include <ampgrad/core/float8.h>
#include <ampgrad/nn/safetensors.h>

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

// ---- float8 tensors (Note [Float8 tensors] in core/dtype.h) ----------------------------------

namespace {

// A float8 tensor holding the bytes `bits` (on the CPU, then moved to `device`).
ag::Tensor float8_tensor(ag::DType dtype, const std::vector<uint8_t>& bits, ag::Device device = ag::Device(ag::kCPU)) {
  ag::Tensor t = ag::empty({static_cast<int64_t>(bits.size())}, dtype);
  std::memcpy(t.data_ptr(), bits.data(), bits.size());
  return t.to(device);
}

std::vector<uint8_t> bytes_of(const ag::Tensor& t) {
  ag::Tensor c = t.to(ag::Device(ag::kCPU)).contiguous();
  std::vector<uint8_t> out(static_cast<size_t>(c.numel()));
  std::memcpy(out.data(), c.data_ptr(), out.size());
  return out;
}

std::vector<uint8_t> all_patterns() {
  std::vector<uint8_t> p(256);
  for (int i = 0; i < 256; ++i) p[static_cast<size_t>(i)] = static_cast<uint8_t>(i);
  return p;
}

// Values that exercise the casts: every float8 value of the format, the midpoints between
// neighbours (the ties), values past the largest finite one, infinities, NaN, and random
// values over the format's range.
template <class F8> std::vector<float> cast_inputs() {
  std::vector<float> xs;
  for (int p = 0; p < 256; ++p) xs.push_back(F8::from_bits(static_cast<uint8_t>(p)));
  for (int p = 0; p < 0x7E; ++p) {
    const double a = F8::from_bits(static_cast<uint8_t>(p)), b = F8::from_bits(static_cast<uint8_t>(p + 1));
    if (std::isfinite(a) && std::isfinite(b)) {
      xs.push_back(static_cast<float>((a + b) / 2));
      xs.push_back(-static_cast<float>((a + b) / 2));
    }
  }
  for (float x : {500.0f, 464.0f, 480.0f, 60000.0f, 61440.0f, 1e30f, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(), 1e-30f,
                  std::numeric_limits<float>::denorm_min()})
    xs.push_back(x);
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> mant(1.0, 2.0);
  std::uniform_int_distribution<int> ex(-20, 17);
  for (int i = 0; i < 20000; ++i) xs.push_back(static_cast<float>(std::ldexp(mant(rng), ex(rng)) * (i % 2 ? -1 : 1)));
  return xs;
}

template <class F8> void check_tensor_casts(ag::DType f8, ag::Device device) {
  // float8 -> wider: every pattern decodes to its value (exact in every floating dtype).
  ag::Tensor all = float8_tensor(f8, all_patterns(), device);
  for (ag::DType wide : {ag::kFloat32, ag::kFloat16, ag::kBFloat16, ag::kFloat64}) {
    INFO("float8 to " << ag::dtype_name(wide) << " on " << device.str());
    const std::vector<double> got = all.to(wide).to_vector<double>();
    int bad = 0;
    for (int p = 0; p < 256; ++p) {
      const double want = F8::from_bits(static_cast<uint8_t>(p));
      const bool same = std::isnan(want) ? std::isnan(got[p]) : got[p] == want && std::signbit(got[p]) == std::signbit(want);
      if (!same && ++bad <= 5) FAIL_CHECK("pattern " << p << ": got " << got[p] << ", want " << want);
    }
    CHECK(bad == 0);
  }
  // wider -> float8: as the host value's cast, from each source dtype (which first rounds the
  // input to itself; a double goes through float, as PyTorch's).
  const std::vector<float> xs = cast_inputs<F8>();
  ag::Tensor src = ag::tensor(xs).to(device);
  for (ag::DType from : {ag::kFloat32, ag::kFloat16, ag::kBFloat16, ag::kFloat64}) {
    INFO(ag::dtype_name(from) << " to float8 on " << device.str());
    ag::Tensor typed = src.to(from);
    const std::vector<double> rounded = typed.to_vector<double>();
    const std::vector<uint8_t> got = bytes_of(typed.to(f8));
    REQUIRE(got.size() == xs.size());
    int bad = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      const uint8_t want = F8(static_cast<float>(rounded[i])).bits;
      if (got[i] != want && ++bad <= 5) FAIL_CHECK("x " << rounded[i] << ": got " << int(got[i]) << ", want " << int(want));
    }
    CHECK(bad == 0);
  }
  // Strided and offset operands take the kernels' other paths: a transposed view, and a view
  // one element in (misaligned for the vector path).
  ag::Tensor m = ag::tensor(std::vector<float>(xs.begin(), xs.begin() + 600)).to(device).view({20, 30});
  ag::Tensor t8 = m.transpose(0, 1).to(f8);
  const std::vector<double> back = t8.to(ag::kFloat32).to_vector<double>();
  const std::vector<double> mt = m.transpose(0, 1).contiguous().to_vector<double>();
  int bad = 0;
  for (size_t i = 0; i < mt.size(); ++i) {
    const double want = F8(static_cast<float>(mt[i]));
    if (!(back[i] == want || (std::isnan(back[i]) && std::isnan(want))) && ++bad <= 5)
      FAIL_CHECK("transposed " << i << ": got " << back[i] << ", want " << want);
  }
  CHECK(bad == 0);
  ag::Tensor off = src.slice(0, 1, 1 + 4099);
  const std::vector<uint8_t> got_off = bytes_of(off.to(f8));
  for (size_t i = 0; i < got_off.size(); ++i) {
    if (got_off[i] != F8(xs[i + 1]).bits) {
      FAIL("offset cast, element " << i << ": got " << int(got_off[i]) << ", want " << int(F8(xs[i + 1]).bits));
    }
  }
  // Factories and copies keep the bytes.
  CHECK(bytes_of(ag::zeros({5}, ag::TensorOptions(f8).device(device))) == std::vector<uint8_t>(5, 0));
  CHECK(bytes_of(ag::full({3}, 1.5, ag::TensorOptions(f8).device(device))) == std::vector<uint8_t>(3, F8(1.5f).bits));
  CHECK(bytes_of(ag::full({3}, -1e6, ag::TensorOptions(f8).device(device))) == std::vector<uint8_t>(3, F8(-1e6f).bits));
  CHECK(bytes_of(all.clone()) == all_patterns());
  CHECK(bytes_of(all.to(ag::Device(ag::kCPU))) == all_patterns());
  ag::Tensor dst = ag::zeros({256}, ag::TensorOptions(f8).device(device));
  dst.copy_(all);
  CHECK(bytes_of(dst) == all_patterns());
}

}  // namespace

TEST_CASE("float8 tensors: casts both ways round as the host values, on the CPU", "[float8]") {
  check_tensor_casts<ag::Float8_e4m3fn>(ag::kFloat8_e4m3fn, ag::Device(ag::kCPU));
  check_tensor_casts<ag::Float8_e5m2>(ag::kFloat8_e5m2, ag::Device(ag::kCPU));
}

TEST_CASE("float8 tensors: casts on CUDA round bit for bit as the CPU's", "[float8][cuda]") {
  if (skip_without_cuda()) return;
  check_tensor_casts<ag::Float8_e4m3fn>(ag::kFloat8_e4m3fn, ag::Device(ag::kCUDA));
  check_tensor_casts<ag::Float8_e5m2>(ag::kFloat8_e5m2, ag::Device(ag::kCUDA));
}

TEST_CASE("float8 tensors: names, printing, views and item", "[float8]") {
  CHECK(ag::dtype_name(ag::kFloat8_e4m3fn) == "float8_e4m3fn");
  CHECK(ag::dtype_name(ag::kFloat8_e5m2) == "float8_e5m2");
  CHECK(ag::itemsize(ag::kFloat8_e4m3fn) == 1);
  CHECK(ag::is_floating(ag::kFloat8_e5m2));
  ag::Tensor t = ag::tensor(std::vector<float>{1.0f, -2.5f, 448.0f, 0.01f}).to(ag::kFloat8_e4m3fn);
  const std::string s = t.str();
  CHECK_THAT(s, Catch::Contains("dtype=torch.float8_e4m3fn"));
  CHECK_THAT(s, Catch::Contains("4.4800e+02"));  // PyTorch's scientific form: max / min > 1000
  CHECK(t.view({2, 2}).transpose(0, 1).select(0, 1).to(ag::kFloat32).to_vector<float>() ==
        std::vector<float>{-2.5f, static_cast<float>(ag::Float8_e4m3fn(0.01f))});
  CHECK(t.select(0, 2).item<double>() == 448.0);
  CHECK(t.reshape({4, 1}).squeeze(1).unsqueeze(0).expand({2, 4}).permute({1, 0}).slice(0, 1, 2).to(ag::kFloat32).to_vector<float>() ==
        std::vector<float>{-2.5f, -2.5f});
}

TEST_CASE("float8 tensors: other ops refuse them, naming the op and the tensor", "[float8]") {
  ag::Tensor a = ag::ones({2, 3}, ag::kFloat8_e4m3fn);
  ag::Tensor f = ag::ones({2, 3});
  std::string m = error_message([&] { (void)ag::add(a, a); });
  CHECK_THAT(m, Catch::Contains("add") && Catch::Contains("not implemented for float8_e4m3fn") &&
                    Catch::Contains("[2, 3]"));
  m = error_message([&] { (void)ag::matmul(a, a.transpose(0, 1)); });
  CHECK_THAT(m, Catch::Contains("matmul") && Catch::Contains("float8_e4m3fn"));
  m = error_message([&] { (void)ag::sum(ag::ones({4}, ag::kFloat8_e5m2)); });
  CHECK_THAT(m, Catch::Contains("sum") && Catch::Contains("float8_e5m2"));
  m = error_message([&] { (void)ag::mul(f, a); });
  CHECK_THAT(m, Catch::Contains("mul") && Catch::Contains("float8_e4m3fn"));
  m = error_message([&] { (void)ag::promote_types(ag::kFloat8_e4m3fn, ag::kFloat32); });
  CHECK_THAT(m, Catch::Contains("promote_types") && Catch::Contains("float8_e4m3fn") && Catch::Contains("float32"));
  CHECK(ag::promote_types(ag::kFloat8_e5m2, ag::kFloat8_e5m2) == ag::kFloat8_e5m2);
  m = error_message([] { ag::set_default_dtype(ag::kFloat8_e4m3fn); });
  CHECK_THAT(m, Catch::Contains("set_default_dtype"));
  CHECK(ag::get_default_dtype() == ag::kFloat32);
  m = error_message([] { (void)ag::randn({3}, ag::kFloat8_e4m3fn); });
  CHECK_THAT(m, Catch::Contains("randn") && Catch::Contains("float8_e4m3fn"));
}

TEST_CASE("float8 tensors: safetensors F8_E4M3 and F8_E5M2 round trip their bytes", "[float8]") {
  const std::string path = fmt::format("/tmp/ampgrad_test_float8_{}.safetensors", fresh_seed());
  ag::Tensor e4 = float8_tensor(ag::kFloat8_e4m3fn, all_patterns()).view({16, 16});
  ag::Tensor e5 = float8_tensor(ag::kFloat8_e5m2, all_patterns());
  ag::nn::save_safetensors(path, {{"e4", e4}, {"e5", e5}});
  std::ifstream in(path, std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK_THAT(file, Catch::Contains("\"F8_E4M3\"") && Catch::Contains("\"F8_E5M2\""));
  ag::nn::SafetensorsFile loaded = ag::nn::load_safetensors(path);
  std::remove(path.c_str());
  const ag::Tensor& l4 = loaded.tensors.at("e4");
  const ag::Tensor& l5 = loaded.tensors.at("e5");
  CHECK(l4.dtype() == ag::kFloat8_e4m3fn);
  CHECK(l4.shape() == ag::Shape{16, 16});
  CHECK(l5.dtype() == ag::kFloat8_e5m2);
  CHECK(bytes_of(l4) == all_patterns());
  CHECK(bytes_of(l5) == all_patterns());
}

TEST_CASE("float8 tensors: casts equal PyTorch 2.11's bit for bit (from float32, float16, bfloat16, float64)",
          "[float8]") {
  // benchmarks/float8_reference.py, run on the H200 (where PyTorch's CUDA casts were checked
  // against its CPU casts too).
  // AMPGRAD_TEST_DATA_DIR in the environment overrides the source tree's tests/data (a test
  // binary run on another machine).
  const char* dir = std::getenv("AMPGRAD_TEST_DATA_DIR");
  const std::string path = std::string(dir ? dir : AMPGRAD_TEST_DATA_DIR) + "/float8_reference.safetensors";
  ag::nn::SafetensorsFile ref = ag::nn::load_safetensors(path);
  const ag::Tensor& input = ref.tensors.at("input");
  REQUIRE(input.numel() > 8000);
  const std::vector<ag::Device> devices =
      cuda_available() ? std::vector<ag::Device>{ag::Device(ag::kCPU), ag::Device(ag::kCUDA)}
                       : std::vector<ag::Device>{ag::Device(ag::kCPU)};
  for (const ag::Device& device : devices) {
    for (auto [name, f8] : {std::pair{"e4m3fn", ag::kFloat8_e4m3fn}, std::pair{"e5m2", ag::kFloat8_e5m2}}) {
      for (auto [src, dt] : {std::pair{"f32", ag::kFloat32}, std::pair{"f16", ag::kFloat16},
                             std::pair{"bf16", ag::kBFloat16}, std::pair{"f64", ag::kFloat64}}) {
        INFO(name << " from " << src << " on " << device.str());
        const std::vector<uint8_t> want = bytes_of(ref.tensors.at(fmt::format("{}/from_{}", name, src)));
        const std::vector<uint8_t> got = bytes_of(input.to(device).to(dt).to(f8));
        REQUIRE(got.size() == want.size());
        const std::vector<float> x = input.to_vector<float>();
        // A NaN's sign is not specified: PyTorch's own casts set it differently on its CPU and
        // CUDA (from float16 and bfloat16). Any NaN pattern matches any other.
        auto is_nan = [&](uint8_t p) {
          return f8 == ag::kFloat8_e4m3fn ? (p & 0x7F) == 0x7F : (p & 0x7C) == 0x7C && (p & 0x03) != 0;
        };
        int bad = 0;
        for (size_t i = 0; i < got.size(); ++i)
          if (got[i] != want[i] && !(is_nan(got[i]) && is_nan(want[i])) && ++bad <= 5)
            FAIL_CHECK("x " << x[i] << ": got " << int(got[i]) << ", PyTorch " << int(want[i]));
        CHECK(bad == 0);
      }
      const std::vector<float> want = ref.tensors.at(fmt::format("{}/decoded", name)).to_vector<float>();
      const std::vector<float> got = float8_tensor(f8, all_patterns(), device).to(ag::kFloat32).to_vector<float>();
      for (int p = 0; p < 256; ++p) {
        INFO(name << " pattern " << p << " on " << device.str());
        if (std::isnan(want[p])) CHECK(std::isnan(got[p]));
        else CHECK(std::bit_cast<uint32_t>(got[p]) == std::bit_cast<uint32_t>(want[p]));
      }
    }
  }
}

// ---- scaled_mm (ops/float8_ops.h) --------------------------------------------------------

namespace {

struct ScaledCase {
  ag::Tensor a, b, scale_a, scale_b;  // on the CPU; b column-major
  std::vector<double> ref;             // scale_a * scale_b * a @ b in float64, row-major [M, N]
};

// Random float8 operands (values of N(0, 1) scaled into the format's range and cast) and the
// float64 product of their decoded values.
ScaledCase scaled_case(ag::DType ta, ag::DType tb, int64_t m, int64_t k, int64_t n, uint64_t seed) {
  ag::Generator gen(seed);
  ScaledCase c;
  c.a = (ag::randn({m, k}, gen) * 40.0).to(ta);
  c.b = (ag::randn({n, k}, gen) * 40.0).to(tb).transpose(0, 1);  // [K, N], column-major
  c.scale_a = ag::tensor(std::vector<float>{0.03125f});
  c.scale_b = ag::tensor(std::vector<float>{0.75f});
  const std::vector<double> a = c.a.to(ag::kFloat64).to_vector<double>();
  const std::vector<double> b = c.b.contiguous().to(ag::kFloat64).to_vector<double>();  // [K, N] row-major
  c.ref.assign(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += a[static_cast<size_t>(i * k + p)] * b[static_cast<size_t>(p * n + j)];
      c.ref[static_cast<size_t>(i * n + j)] = s * 0.03125 * 0.75;
    }
  return c;
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

void check_scaled_mm(ag::Device device) {
  const std::pair<ag::DType, ag::DType> pairs[] = {{ag::kFloat8_e4m3fn, ag::kFloat8_e4m3fn},
                                                   {ag::kFloat8_e4m3fn, ag::kFloat8_e5m2},
                                                   {ag::kFloat8_e5m2, ag::kFloat8_e4m3fn}};
  for (auto [ta, tb] : pairs) {
    const ScaledCase c = scaled_case(ta, tb, 48, 64, 80, fresh_seed());
    // to(device) makes a contiguous copy: b is moved as its row-major transpose.
    ag::Tensor a = c.a.to(device), b = c.b.t().to(device).t(), sa = c.scale_a.to(device), sb = c.scale_b.to(device);
    const double scale = max_abs(c.ref);
    for (ag::DType out : {ag::kFloat32, ag::kBFloat16, ag::kFloat16}) {
      for (bool fast : {false, true}) {
        INFO(ag::dtype_name(ta) << " @ " << ag::dtype_name(tb) << " -> " << ag::dtype_name(out) << " on "
                                << device.str() << (fast ? ", fast accumulation" : ""));
        ag::Tensor amax = ag::zeros({1}, ag::TensorOptions(ag::kFloat32).device(device));
        ag::Tensor got = ag::scaled_mm(a, b, sa, sb, ag::Tensor(), out, fast, amax);
        REQUIRE(got.dtype() == out);
        REQUIRE(got.shape() == ag::Shape{48, 80});
        // Products of float8 values are exact in float32. The CPU sums in float32 (K steps);
        // Hopper's FP8 tensor cores keep partial sums in fewer bits (about 14 of mantissa, as
        // DeepSeek-V3's report measured) even when cuBLASLt promotes them to float32 between
        // blocks: errors of ~2e-4 of the largest value at K = 64. Then one rounding to out.
        const bool tc = device.is_cuda();
        const double rtol = out == ag::kFloat32 ? (tc ? 1e-3 : 1e-5) : 2 * eps_of(out);
        const double atol = (tc ? (fast ? 4e-3 : 2e-3) : rtol * 0.05) * scale;
        check_close(got, c.ref, atol, rtol);
        // From the epilogue, before the rounding, or (where cuBLASLt does not take AMAX_D for
        // this output) of the rounded output.
        CHECK(amax.item<double>() == Approx(scale).epsilon(std::max(tc ? 4e-3 : 1e-5, 2 * eps_of(out))));
      }
    }
    // A bias of the output's dtype, added before the rounding.
    ag::Generator gen(3);
    ag::Tensor bias = ag::randn({80}, gen).to(ag::kBFloat16);
    const std::vector<double> bv = bias.to_vector<double>();
    std::vector<double> ref = c.ref;
    for (size_t i = 0; i < ref.size(); ++i) ref[i] += bv[i % 80];
    ag::Tensor got = ag::scaled_mm(a, b, sa, sb, bias.to(device), ag::kBFloat16);
    check_close(got, ref, 2 * eps_of(ag::kBFloat16) * max_abs(ref) * 0.05, 2 * eps_of(ag::kBFloat16));
  }
}

}  // namespace

TEST_CASE("scaled_mm: the CPU's FP8 product against float64, every operand pair and output", "[float8]") {
  check_scaled_mm(ag::Device(ag::kCPU));
}

TEST_CASE("scaled_mm: cuBLASLt's FP8 GEMM against float64, every operand pair and output", "[float8][cuda]") {
  if (skip_without_cuda()) return;
  check_scaled_mm(ag::Device(ag::kCUDA));
  // The device reads the scales: changing one on the device changes the next product, with no
  // new plan or host read (what a delayed-scaling recipe relies on), and a CUDA graph replays it.
  const ScaledCase c = scaled_case(ag::kFloat8_e4m3fn, ag::kFloat8_e4m3fn, 32, 32, 32, 9);
  const ag::Device cuda(ag::kCUDA);
  ag::Tensor a = c.a.to(cuda), b = c.b.t().to(cuda).t(), sa = c.scale_a.to(cuda), sb = c.scale_b.to(cuda);
  ag::Tensor first = ag::scaled_mm(a, b, sa, sb, ag::Tensor(), ag::kFloat32);
  sa.fill_(0.0625);
  ag::Tensor second = ag::scaled_mm(a, b, sa, sb, ag::Tensor(), ag::kFloat32);
  const std::vector<double> f = first.to_vector<double>(), s = second.to_vector<double>();
  for (size_t i = 0; i < f.size(); ++i) CHECK(s[i] == 2 * f[i]);
}

TEST_CASE("scaled_mm: bad input names the op and what is wrong", "[float8]") {
  const ScaledCase c = scaled_case(ag::kFloat8_e4m3fn, ag::kFloat8_e4m3fn, 16, 32, 16, 1);
  auto msg = [&](auto&& f) { return error_message(f); };
  CHECK_THAT(msg([&] { (void)ag::scaled_mm(c.a.to(ag::kFloat8_e5m2), c.b.to(ag::kFloat8_e5m2), c.scale_a, c.scale_b); }),
             Catch::Contains("scaled_mm") && Catch::Contains("not both float8_e5m2"));
  CHECK_THAT(msg([&] { (void)ag::scaled_mm(c.a, c.b.contiguous(), c.scale_a, c.scale_b); }),
             Catch::Contains("scaled_mm") && Catch::Contains("column-major"));
  CHECK_THAT(msg([&] { (void)ag::scaled_mm(c.a.to(ag::kFloat32), c.b, c.scale_a, c.scale_b); }),
             Catch::Contains("scaled_mm") && Catch::Contains("float32 [16, 32]"));
  ag::Tensor a24 = ag::zeros({16, 24}, ag::kFloat8_e4m3fn), b24 = ag::zeros({16, 24}, ag::kFloat8_e4m3fn).transpose(0, 1);
  CHECK_THAT(msg([&] { (void)ag::scaled_mm(a24, b24, c.scale_a, c.scale_b); }),
             Catch::Contains("scaled_mm") && Catch::Contains("multiples of 16"));
  CHECK_THAT(msg([&] { (void)ag::scaled_mm(c.a, c.b, c.scale_a.to(ag::kFloat64), c.scale_b); }),
             Catch::Contains("scale_a") && Catch::Contains("float64"));
  CHECK_THAT(msg([&] { (void)ag::scaled_mm(c.a, c.b, c.scale_a, ag::ones({2})); }),
             Catch::Contains("scale_b") && Catch::Contains("[2]"));
  CHECK_THAT(msg([&] { (void)ag::scaled_mm(c.a, c.b, c.scale_a, c.scale_b, ag::zeros({16}), ag::kBFloat16); }),
             Catch::Contains("bias") && Catch::Contains("float32 [16]"));
  CHECK_THAT(msg([&] { (void)ag::scaled_mm(c.a, c.b, c.scale_a, c.scale_b, ag::Tensor(), ag::kFloat8_e4m3fn); }),
             Catch::Contains("out_dtype") && Catch::Contains("float8_e4m3fn"));
  CHECK_THAT(msg([&] { (void)ag::scaled_mm(c.a, c.b.transpose(0, 1), c.scale_a, c.scale_b); }),
             Catch::Contains("expected a [M, K] and b [K, N]"));
}
