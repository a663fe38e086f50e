// interpolate and nn::Upsample against PyTorch's outputs and input gradients, read from
// tests/data/interpolate_reference.safetensors (benchmarks/interpolate_reference.py): every
// mode, with and without align_corners, by size and by scale factor; then gradcheck, dtypes
// under autocast, bad inputs, and CUDA against the CPU.
#include <sstream>

#include "common.h"

namespace {

using ag::InterpolateMode;

std::map<std::string, std::string> fields(const std::string& spec) {
  std::map<std::string, std::string> f;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ';')) {
    const size_t eq = item.find('=');
    f[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return f;
}

template <class T> std::vector<T> numbers(const std::string& list) {
  std::vector<T> v;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(static_cast<T>(std::stod(item)));
  return v;
}

InterpolateMode mode_of(const std::string& m) {
  const std::map<std::string, InterpolateMode> modes = {
      {"nearest", InterpolateMode::nearest},     {"nearest-exact", InterpolateMode::nearest_exact},
      {"linear", InterpolateMode::linear},       {"bilinear", InterpolateMode::bilinear},
      {"bicubic", InterpolateMode::bicubic},     {"trilinear", InterpolateMode::trilinear},
      {"area", InterpolateMode::area}};
  REQUIRE(modes.count(m) == 1);
  return modes.at(m);
}

ag::InterpolateOptions options_of(const std::string& spec) {
  auto f = fields(spec);
  ag::InterpolateOptions o;
  o.mode(mode_of(f["mode"]));
  if (!f["align"].empty()) o.align_corners(f["align"] == "1");
  if (!f["size"].empty()) o.size(numbers<int64_t>(f["size"]));
  if (!f["scale"].empty()) o.scale_factor(numbers<double>(f["scale"]));
  if (!f["recompute"].empty()) o.recompute_scale_factor(f["recompute"] == "1");
  return o;
}

const ag::nn::SafetensorsFile& reference() {
  static const ag::nn::SafetensorsFile file = [] {
    const char* dir = std::getenv("AMPGRAD_TEST_DATA_DIR");
    return ag::nn::load_safetensors(std::string(dir ? dir : AMPGRAD_TEST_DATA_DIR) + "/interpolate_reference.safetensors");
  }();
  return file;
}

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  for (const auto& [k, v] : reference().metadata)
    if (k.rfind("case", 0) == 0) names.push_back(k);
  return names;
}

}  // namespace

TEST_CASE("interpolate matches PyTorch's outputs and input gradients", "[ops][interpolate]") {
  const auto names = case_names();
  REQUIRE(names.size() >= 20);
  for (ag::Device dev : {ag::Device(ag::kCPU), ag::Device(ag::kCUDA, 0)}) {
    if (dev.is_cuda() && skip_without_cuda()) continue;
    for (const std::string& name : names) {
      const std::string spec = reference().metadata.at(name);
      INFO(name << ": " << spec << " on " << dev.str());
      const auto& t = reference().tensors;
      const ag::Tensor x = t.at(name + ".x").to(dev, ag::kFloat64).requires_grad_();
      const ag::Tensor y = ag::interpolate(x, options_of(spec));
      REQUIRE(y.shape() == t.at(name + ".y").shape());
      check_close(y, t.at(name + ".y").to_vector<double>(), 1e-12, 1e-12);
      y.backward(t.at(name + ".g").to(dev, ag::kFloat64));
      check_close(x.grad(), t.at(name + ".gx").to_vector<double>(), 1e-12, 1e-12);
      // float32 reads the same positions with the same weights, rounded in float32.
      const ag::Tensor y32 = ag::interpolate(x.detach().to(dev, ag::kFloat32), options_of(spec));
      check_close(y32, t.at(name + ".y").to_vector<double>(), 1e-5, 1e-5);
    }
  }
}

TEST_CASE("interpolate's gradients match central differences", "[ops][interpolate][autograd]") {
  ag::manual_seed(fresh_seed());
  using M = InterpolateMode;
  const std::vector<std::pair<ag::Shape, ag::InterpolateOptions>> forms = {
      {{1, 2, 5}, ag::InterpolateOptions().size({8}).mode(M::linear)},
      {{1, 2, 3, 4}, ag::InterpolateOptions().scale_factor({2.0}).mode(M::bilinear).align_corners(true)},
      {{1, 1, 4, 4}, ag::InterpolateOptions().size({6, 3}).mode(M::bicubic)},
      {{1, 1, 2, 3, 2}, ag::InterpolateOptions().size({3, 4, 3}).mode(M::trilinear)},
      {{1, 2, 3, 4}, ag::InterpolateOptions().size({5, 7})},
      {{1, 2, 3, 4}, ag::InterpolateOptions().size({5, 2}).mode(M::nearest_exact)},
  };
  for (const auto& [shape, o] : forms) {
    const ag::Tensor x = ag::randn(shape, ag::kFloat64).requires_grad_();
    const auto r = ag::autograd::gradcheck([&](const std::vector<ag::Tensor>& v) { return ag::interpolate(v[0], o); }, {x});
    INFO(r.message);
    CHECK(r.ok);
  }
}

TEST_CASE("interpolate's dtypes: 16 bits rounded once; float32 under autocast, as PyTorch's fp32 list", "[ops][interpolate][amp]") {
  const ag::Tensor x = ag::randn({1, 2, 4, 5});
  const auto o = ag::InterpolateOptions().size({7, 9}).mode(InterpolateMode::bilinear);
  const ag::Tensor h = x.to(ag::kBFloat16);
  const ag::Tensor y = ag::interpolate(h, o);
  CHECK(y.dtype() == ag::kBFloat16);
  // Resampled in float32 from the bfloat16 values, then rounded: equal to doing so by hand.
  CHECK(y.to_vector<float>() == ag::interpolate(h.to(ag::kFloat32), o).to(ag::kBFloat16).to_vector<float>());
  // Nearest moves values: exact in any dtype, integers too.
  const ag::Tensor xi = ag::arange(20, ag::kInt64).reshape({1, 1, 4, 5});
  CHECK(ag::interpolate(xi, ag::InterpolateOptions().scale_factor({2.0})).dtype() == ag::kInt64);
  ag::amp::AutocastGuard guard(ag::kCPU, ag::kBFloat16);
  CHECK(ag::interpolate(h, o).dtype() == ag::kFloat32);
  CHECK(ag::interpolate(x, o).dtype() == ag::kFloat32);
  // Area is adaptive_avg_pool2d, with that op's own category (no cast).
  CHECK(ag::interpolate(h, ag::InterpolateOptions().size({2, 2}).mode(InterpolateMode::area)).dtype() == ag::kBFloat16);
}

TEST_CASE("nn::Upsample resamples as interpolate does", "[nn][interpolate]") {
  const ag::Tensor x = ag::randn({2, 3, 4, 4});
  const auto o = ag::InterpolateOptions().scale_factor({2.0}).mode(InterpolateMode::bilinear);
  ag::nn::Upsample up(o);
  CHECK(up(x).shape() == ag::Shape{2, 3, 8, 8});
  CHECK(up(x).to_vector<float>() == ag::interpolate(x, o).to_vector<float>());
  CHECK(up.parameters().empty());
}

TEST_CASE("interpolate's bad inputs name the argument at fault", "[ops][interpolate][errors]") {
  using M = InterpolateMode;
  const ag::Tensor x = ag::randn({1, 2, 4, 5});
  auto msg = [&](const ag::Tensor& in, const ag::InterpolateOptions& o) {
    return error_message([&] { ag::interpolate(in, o); });
  };
  CHECK_THAT(msg(x, ag::InterpolateOptions()), Catch::Contains("give exactly one of size and scale_factor (got neither)"));
  CHECK_THAT(msg(x, ag::InterpolateOptions().size({2}).scale_factor({2.0})), Catch::Contains("(got both)"));
  CHECK_THAT(msg(x, ag::InterpolateOptions().size({2, 3, 4})),
             Catch::Contains("has 2 spatial dim(s), size [2, 3, 4] gives 3"));
  CHECK_THAT(msg(x, ag::InterpolateOptions().size({8}).mode(M::linear)), Catch::Contains("mode linear needs 3-D input"));
  CHECK_THAT(msg(x, ag::InterpolateOptions().size({8}).mode(M::trilinear)), Catch::Contains("mode trilinear needs 5-D input"));
  CHECK_THAT(msg(x, ag::InterpolateOptions().size({8}).align_corners(true)),
             Catch::Contains("align_corners can only be set with the interpolating modes") && Catch::Contains("not nearest"));
  CHECK_THAT(msg(x, ag::InterpolateOptions().scale_factor({0.1})),
             Catch::Contains("sizes must be greater than 0") && Catch::Contains("output size [0, 0]"));
  CHECK_THAT(msg(x, ag::InterpolateOptions().scale_factor({-2.0})), Catch::Contains("scale_factor must be positive"));
  CHECK_THAT(msg(ag::randn({4, 5}), ag::InterpolateOptions().size({8})), Catch::Contains("expected input [N, C, d1]"));
  CHECK_THAT(msg(ag::ones({1, 1, 4}, ag::kInt64), ag::InterpolateOptions().size({8}).mode(M::linear)),
             Catch::Contains("mode linear needs a floating input"));
}
