// The GPT of `ampgrad train --model gpt` (cli/gpt.h) against PyTorch: the same weights and batch
// give the same loss and the same gradient of every parameter. The reference
// (tests/data/gpt_reference.safetensors) comes from benchmarks/gpt_reference.py, PyTorch's
// model with cli/gpt.h's module tree and parameter names, run in float64.
#include <cmath>
#include <string>

#include "cli/gpt.h"
#include "common.h"

namespace {

const std::string kReference = std::string(AMPGRAD_TEST_DATA_DIR) + "/gpt_reference.safetensors";

// max |a - b| / max |b|, in float64.
double rel_error(const ag::Tensor& a, const ag::Tensor& b) {
  const ag::Tensor a64 = a.to(ag::kCPU).to(ag::kFloat64), b64 = b.to(ag::kFloat64);
  return ag::max((a64 - b64).abs()).item<double>() / ag::max(b64.abs()).item<double>();
}

// The reference's model (float64 on the CPU), its parameters loaded, moved to `dev` in `dtype`.
std::shared_ptr<ag::cli::Gpt> reference_model(const ag::nn::SafetensorsFile& ref, ag::Device dev, ag::DType dtype) {
  auto model = std::make_shared<ag::cli::Gpt>(ag::cli::GptConfig{64, 32, 64, 2, 4});
  ag::nn::StateDict sd;
  for (const auto& [name, t] : ref.tensors)
    if (name.rfind("param/", 0) == 0) sd[name.substr(6)] = t;
  model->to(ag::kFloat64);
  model->load_state_dict(sd);  // every parameter's name and shape must match PyTorch's
  model->to(dtype);
  model->to(dev);
  return model;
}

void check_against_reference(ag::Device dev, ag::DType dtype, double tol) {
  const ag::nn::SafetensorsFile ref = ag::nn::load_safetensors(kReference);
  auto model = reference_model(ref, dev, dtype);
  const ag::Tensor logits = (*model)(ref.tensors.at("input").to(dev));
  const ag::Tensor loss = ag::cross_entropy(logits.reshape({-1, 64}), ref.tensors.at("target").to(dev));
  INFO(ag::dtype_name(dtype) << " on " << dev.str());
  CHECK(rel_error(loss.reshape({1}), ref.tensors.at("loss")) < tol);
  loss.backward();
  int compared = 0;
  for (const auto& [name, p] : model->named_parameters()) {
    INFO(name);
    REQUIRE(p.grad().defined());
    CHECK(rel_error(p.grad(), ref.tensors.at("grad/" + name)) < tol);
    ++compared;
  }
  CHECK(compared == 30);
}

}  // namespace

TEST_CASE("the GPT's loss and every gradient match PyTorch's for the same weights and batch", "[gpt]") {
  check_against_reference(ag::kCPU, ag::kFloat64, 1e-12);  // the same math, to rounding (~1e-15 seen)
  check_against_reference(ag::kCPU, ag::kFloat32, 1e-5);   // float32 rounding (up to 6.2e-7 seen)
}

TEST_CASE("the GPT on CUDA matches PyTorch's float64 reference in float32", "[gpt][cuda]") {
  if (skip_without_cuda()) return;
  check_against_reference(ag::Device(ag::kCUDA), ag::kFloat32, 1e-4);  // TF32 off; other sums
}
