// The GPT of `ampgrad train --model gpt` (cli/gpt.h) against PyTorch: the same weights and batch
// give the same loss and the same gradient of every parameter. The reference
// (tests/data/gpt_reference.safetensors) comes from benchmarks/gpt_reference.py, PyTorch's
// model with cli/gpt.h's module tree and parameter names, run in float64.
#include <algorithm>
#include <cmath>
#include <cstdio>
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

// The model in `dtype` on `dev` against the reference's loss and gradients named with `prefix`:
// "" PyTorch's float64 on the CPU, "fp32/" its float32 on the H200, "fp16/" its fp16 autocast
// there (float32 weights; the loss times 1024 before backward, the gradients divided after, as
// both sides do here); `amp`: ampgrad's side under fp16 autocast (the same scaling). Returns the
// largest gradient error.
double check_against_reference(ag::Device dev, ag::DType dtype, double tol, const std::string& prefix = "",
                               double loss_tol = 0, bool amp = false) {
  const ag::nn::SafetensorsFile ref = ag::nn::load_safetensors(kReference);
  auto model = reference_model(ref, dev, dtype);
  ag::Tensor loss;
  {
    ag::amp::AutocastGuard autocast(dev.type, ag::kFloat16, amp);
    const ag::Tensor logits = (*model)(ref.tensors.at("input").to(dev));
    loss = ag::cross_entropy(logits.reshape({-1, 64}), ref.tensors.at("target").to(dev));
  }
  INFO(ag::dtype_name(dtype) << " on " << dev.str() << ", reference " << (prefix.empty() ? "float64" : prefix));
  REQUIRE(ref.tensors.count(prefix + "loss"));
  const double loss_err = rel_error(loss.reshape({1}), ref.tensors.at(prefix + "loss"));
  CHECK(loss_err < (loss_tol > 0 ? loss_tol : tol));
  const double scale = amp ? 1024.0 : 1.0;
  (loss * scale).backward();
  int compared = 0;
  double worst = 0;
  for (const auto& [name, p] : model->named_parameters()) {
    INFO(name);
    REQUIRE(p.grad().defined());
    const double err = rel_error(p.grad() / scale, ref.tensors.at(prefix + "grad/" + name));
    CHECK(err < tol);
    worst = std::max(worst, err);
    ++compared;
  }
  CHECK(compared == 30);
  std::printf("[gpt] %s%s on %s against %s: loss error %.2e, largest gradient error %.2e\n",
              std::string(ag::dtype_name(dtype)).c_str(), amp ? " under fp16 autocast" : "", dev.str().c_str(),
              prefix.empty() ? "float64" : prefix.c_str(), loss_err, worst);
  return worst;
}

}  // namespace

TEST_CASE("the GPT's loss and every gradient match PyTorch's for the same weights and batch", "[gpt]") {
  check_against_reference(ag::kCPU, ag::kFloat64, 1e-12);  // the same math, to rounding (~1e-15 seen)
  check_against_reference(ag::kCPU, ag::kFloat32, 1e-5);   // float32 rounding (up to 6.2e-7 seen)
}

TEST_CASE("the GPT under fp16 autocast matches PyTorch 2.11's fp16 autocast on the H200", "[gpt]") {
  // float16 rounds to 2^-11: two fp16 runs that round in different places differ by about
  // that, grown through the layers (1.4e-3 of the largest gradient seen, either way).
  const double vs_torch = check_against_reference(ag::kCPU, ag::kFloat32, 5e-3, "fp16/", 2e-4, true);
  const double vs_f64 = check_against_reference(ag::kCPU, ag::kFloat32, 5e-3, "", 1e-4, true);
  // And ampgrad's fp16 step is no further from float64 than PyTorch's own (1.5e-3 seen).
  const ag::nn::SafetensorsFile ref = ag::nn::load_safetensors(kReference);
  double torch_vs_f64 = 0;
  for (const auto& [name, t] : ref.tensors)
    if (name.rfind("fp16/grad/", 0) == 0)
      torch_vs_f64 = std::max(torch_vs_f64, rel_error(t, ref.tensors.at(name.substr(5))));
  std::printf("[gpt] PyTorch's fp16 autocast against float64: largest gradient error %.2e\n", torch_vs_f64);
  CHECK(torch_vs_f64 > 1e-4);  // the reference really is fp16's
  CHECK(vs_f64 < 1.5 * torch_vs_f64);
  CHECK(vs_torch < 3 * torch_vs_f64);
  check_against_reference(ag::kCPU, ag::kFloat32, 1e-5, "fp32/");  // PyTorch's float32 on the H200
}

TEST_CASE("the GPT on CUDA matches PyTorch's float64 reference in float32", "[gpt][cuda]") {
  if (skip_without_cuda()) return;
  check_against_reference(ag::Device(ag::kCUDA), ag::kFloat32, 1e-4);  // TF32 off; other sums
  check_against_reference(ag::Device(ag::kCUDA), ag::kFloat32, 1e-4, "fp32/");
}

TEST_CASE("the GPT on CUDA under fp16 autocast matches PyTorch 2.11's", "[gpt][cuda]") {
  if (skip_without_cuda()) return;
  check_against_reference(ag::Device(ag::kCUDA), ag::kFloat32, 5e-3, "fp16/", 2e-4, true);
}

namespace {

// Two identical GPTs on CUDA, one stepped eagerly, one by replays of a captured step: the
// losses and parameters agree. `set_to_none`: gradients set to none at the step's start (they
// come out of graph memory) or kept; `amp`: fp16 autocast with the GradScaler, the captured
// forward reading the working copies its warm-up kept and its optimizer step writing them
// (Note [Working copies] in speedups/working_copies.h). Between replays a parameter is changed
// in place on both models: the graph must cast its copy again before the next replay (Note
// [Capture attachments]). `wide`: width 256 and context 128.
void check_graphed_gpt_step(bool set_to_none, bool amp, bool wide = false) {
  // Everything the forward makes on the device (the causal mask) must be
  // made inside the graph, not copied from host memory gone by the replay (Note [Host values in
  // a capture] in cuda/runtime.cpp).
  const ag::Device cuda(ag::kCUDA);
  const ag::cli::GptConfig c = wide ? ag::cli::GptConfig{64, 128, 256, 2, 4} : ag::cli::GptConfig{64, 32, 64, 2, 4};
  ag::manual_seed(21);
  ag::cli::Gpt eager(c), graphed(c);
  graphed.load_state_dict(eager.state_dict());
  eager.to(cuda);
  graphed.to(cuda);
  const ag::TensorOptions on = ag::TensorOptions().device(cuda);
  const ag::Tensor x = (ag::rand({4, c.context}, on) * 64.0).to(ag::kInt64);
  const ag::Tensor y = (ag::rand({4 * c.context}, on) * 64.0).to(ag::kInt64);
  ag::optim::AdamW oe(eager.parameters(), ag::cli::gpt_adamw(1e-3)), og(graphed.parameters(), ag::cli::gpt_adamw(1e-3));
  ag::amp::GradScaler se(ag::amp::GradScalerOptions().enabled(amp)), sg(ag::amp::GradScalerOptions().enabled(amp));
  ag::Tensor loss_e, loss_g;
  int64_t kept_hits = -1;  // the last step's casts served by a kept working copy
  auto step = [&](ag::cli::Gpt& m, ag::optim::Optimizer& o, ag::amp::GradScaler& scaler, ag::Tensor& loss) {
    o.zero_grad(set_to_none);
    {
      ag::amp::AutocastGuard autocast(ag::kCUDA, ag::kFloat16, amp);
      const int64_t hits = ag::speedups::stats().working_copy_hits;
      loss = ag::nn::functional::cross_entropy(m(x).reshape({-1, c.vocab}), y);
      kept_hits = ag::speedups::stats().working_copy_hits - hits;
    }
    scaler.scale(loss).backward();
    scaler.step(o);
    scaler.update();
  };
  for (int i = 0; i < 2; ++i) {
    step(eager, oe, se, loss_e);
    step(graphed, og, sg, loss_g);
  }
  const int64_t copies = ag::speedups::working_copy_count();
  ag::cuda::CudaGraph graph;
  graph.capture([&] { step(graphed, og, sg, loss_g); });
  CHECK(ag::speedups::working_copy_count() == copies);  // none made in the capture
  // Under autocast the captured forward read every weight's kept copy: 2 layers of 4 weights
  // and 4 biases, and the head's 2 (the embeddings and layer norms are not cast).
  if (amp) CHECK(kept_hits == 2 * 8 + 2);
  auto pe = eager.parameters(), pg = graphed.parameters();
  const auto names = graphed.named_parameters();
  size_t w = 0;  // a weight autocast casts: the first block's attention input projection
  while (w < names.size() && names[w].first != "blocks.0.attn.in_proj_weight") ++w;
  REQUIRE(w < names.size());
  for (int i = 0; i < 4; ++i) {
    if (i == 2) {
      ag::NoGradGuard no_grad;  // an eager in-place change between replays
      pe[w].mul_(0.5);
      pg[w].mul_(0.5);
    }
    step(eager, oe, se, loss_e);
    graph.replay();
    ag::cuda::synchronize();  // raises an index the embedding found out of range
    CHECK(loss_g.item<double>() == Approx(loss_e.item<double>()).epsilon(amp ? 1e-4 : 1e-5));
  }
  for (size_t i = 0; i < pe.size(); ++i)
    check_close(pg[i].to(ag::kCPU), pe[i].to(ag::kCPU).contiguous().to_vector<double>(), amp ? 1e-4 : 1e-5, 1e-5);
}

}  // namespace

TEST_CASE("a GPT training step captured in a CUDA graph replays as the eager step does", "[gpt][cuda]") {
  if (skip_without_cuda()) return;
  SECTION("float32, gradients kept") { check_graphed_gpt_step(false, false); }
  SECTION("float32, gradients set to none") { check_graphed_gpt_step(true, false); }
  SECTION("fp16 autocast and the scaler, gradients set to none") { check_graphed_gpt_step(true, true); }
  SECTION("fp16 autocast at width 256 (layer norm's rows of 256)") { check_graphed_gpt_step(true, true, true); }
  SECTION("float32 at width 256, gradients kept") { check_graphed_gpt_step(false, false, true); }
}
