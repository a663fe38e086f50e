// GPT-2 124M written the way a user writes it from scratch against the public API (nanoGPT's
// model: tied embedding and head, pre-norm blocks, GELU tanh, causal attention), timed per
// training step on CUDA. Only the public API, so the same file builds against an older
// ampgrad to compare the two in turns on one card (docs/developing.md).
//
//   gpt2_step [--batch 16] [--context 1024] [--steps 30] [--warmup 5] [--amp bf16|fp16|fp32]
//
// Prints one line: ms/step (median, min, max of the timed steps), tokens/s and peak memory.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <ampgrad/ampgrad.h>

namespace ag = ampgrad;
namespace F = ag::nn::functional;

namespace {

struct Config {
  int64_t vocab = 50304, context = 1024, width = 768, layers = 12, heads = 12;
};

class CausalSelfAttention : public ag::nn::Module {
 public:
  CausalSelfAttention(const Config& c) : ag::nn::Module("CausalSelfAttention"), heads_(c.heads) {
    c_attn = register_module("c_attn", std::make_shared<ag::nn::Linear>(c.width, 3 * c.width));
    c_proj = register_module("c_proj", std::make_shared<ag::nn::Linear>(c.width, c.width));
  }
  ag::Tensor forward(const ag::Tensor& x) override {
    const int64_t b = x.size(0), t = x.size(1), c = x.size(2);
    const ag::Tensor qkv = (*c_attn)(x);
    auto head_view = [&](int64_t i) {  // [B, heads, T, C / heads]
      return ag::narrow(qkv, 2, i * c, c).reshape({b, t, heads_, c / heads_}).transpose(1, 2);
    };
    const ag::Tensor y = F::scaled_dot_product_attention(head_view(0), head_view(1), head_view(2), ag::Tensor(), 0.0,
                                                         /*is_causal=*/true);
    return (*c_proj)(y.transpose(1, 2).reshape({b, t, c}));
  }
  std::shared_ptr<ag::nn::Linear> c_attn, c_proj;

 private:
  int64_t heads_;
};

class Block : public ag::nn::Module {
 public:
  explicit Block(const Config& c) : ag::nn::Module("Block") {
    ln_1 = register_module("ln_1", std::make_shared<ag::nn::LayerNorm>(ag::Shape{c.width}));
    attn = register_module("attn", std::make_shared<CausalSelfAttention>(c));
    ln_2 = register_module("ln_2", std::make_shared<ag::nn::LayerNorm>(ag::Shape{c.width}));
    c_fc = register_module("c_fc", std::make_shared<ag::nn::Linear>(c.width, 4 * c.width));
    c_proj = register_module("c_proj", std::make_shared<ag::nn::Linear>(4 * c.width, c.width));
  }
  ag::Tensor forward(const ag::Tensor& x0) override {
    ag::Tensor x = x0 + (*attn)((*ln_1)(x0));
    return x + (*c_proj)(F::gelu((*c_fc)((*ln_2)(x)), "tanh"));
  }
  std::shared_ptr<ag::nn::LayerNorm> ln_1, ln_2;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<ag::nn::Linear> c_fc, c_proj;
};

class Gpt2 : public ag::nn::Module {
 public:
  explicit Gpt2(const Config& c) : ag::nn::Module("Gpt2") {
    wte = register_module("wte", std::make_shared<ag::nn::Embedding>(c.vocab, c.width));
    wpe = register_module("wpe", std::make_shared<ag::nn::Embedding>(c.context, c.width));
    for (int64_t i = 0; i < c.layers; ++i)
      blocks.push_back(register_module("h." + std::to_string(i), std::make_shared<Block>(c)));
    ln_f = register_module("ln_f", std::make_shared<ag::nn::LayerNorm>(ag::Shape{c.width}));
  }
  ag::Tensor forward(const ag::Tensor& idx) override {
    const int64_t t = idx.size(1);
    ag::Tensor x = (*wte)(idx) + ag::narrow(wpe->weight, 0, 0, t);
    for (auto& b : blocks) x = (*b)(x);
    return F::linear((*ln_f)(x), wte->weight);  // the head shares the token embedding
  }
  std::shared_ptr<ag::nn::Embedding> wte, wpe;
  std::vector<std::shared_ptr<Block>> blocks;
  std::shared_ptr<ag::nn::LayerNorm> ln_f;
};

}  // namespace

int main(int argc, char** argv) {
  Config c;
  int64_t batch = 16, steps = 30, warmup = 5;
  std::string amp = "bf16";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--batch") batch = std::atoll(argv[i + 1]);
    else if (k == "--context") c.context = std::atoll(argv[i + 1]);
    else if (k == "--steps") steps = std::atoll(argv[i + 1]);
    else if (k == "--warmup") warmup = std::atoll(argv[i + 1]);
    else if (k == "--amp") amp = argv[i + 1];
    else {
      std::fprintf(stderr, "gpt2_step: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (!ag::cuda::is_available()) {
    std::printf("gpt2_step: no CUDA device; nothing timed\n");
    return 0;
  }
  ag::manual_seed(0);
  const ag::Device dev(ag::kCUDA, 0);
  auto model = std::make_shared<Gpt2>(c);
  model->to(dev);
  {
    // GPT-2's initialization, drawn on the device: N(0, 0.02) weights, zero biases.
    ag::NoGradGuard no_grad;
    for (auto& [name, p] : model->named_parameters()) {
      if (p.dim() == 2) ag::Tensor(p).copy_(ag::randn(p.shape(), ag::TensorOptions().device(dev)) * 0.02);
      else if (name.find("bias") != std::string::npos) ag::Tensor(p).zero_();
    }
  }
  // AdamW as nanoGPT: weight decay for the 2-D weights only.
  std::vector<ag::Tensor> decay, no_decay;
  for (auto& [name, p] : model->named_parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  ag::optim::AdamW opt({decay, no_decay}, ag::optim::AdamWOptions(6e-4).betas({0.9, 0.95}).weight_decay(0.1));
  opt.options<ag::optim::AdamWOptions>(1).weight_decay(0.0);
  const bool fp16 = amp == "fp16", autocast = amp != "fp32";
  ag::amp::GradScaler scaler(ag::amp::GradScalerOptions().enabled(fp16));
  const ag::TensorOptions on = ag::TensorOptions().device(dev);
  const ag::Tensor x = (ag::rand({batch, c.context}, on) * static_cast<double>(c.vocab)).to(ag::kInt64);
  const ag::Tensor y = (ag::rand({batch * c.context}, on) * static_cast<double>(c.vocab)).to(ag::kInt64);

  auto step = [&] {
    opt.zero_grad();
    ag::Tensor loss;
    {
      ag::amp::AutocastGuard guard(ag::kCUDA, fp16 ? ag::kFloat16 : ag::kBFloat16, autocast);
      const ag::Tensor logits = (*model)(x);
      loss = F::cross_entropy(logits.reshape({-1, c.vocab}), y);
    }
    scaler.scale(loss).backward();
    scaler.unscale_(opt);
    ag::optim::clip_grad_norm_(model->parameters(), 1.0);
    scaler.step(opt);
    scaler.update();
    return loss;
  };
  std::vector<double> ms;
  ag::Tensor loss;
  for (int64_t i = 0; i < warmup + steps; ++i) {
    ag::cuda::synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    loss = step();
    ag::cuda::synchronize();
    const auto t1 = std::chrono::steady_clock::now();
    if (i >= warmup) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  const double median = ms[ms.size() / 2];
  const double peak_mb = static_cast<double>(ag::cuda::memory_stats(0).peak_allocated) / (1 << 20);
  std::printf("gpt2_step %s B=%lld T=%lld: ms/step %.2f (min %.2f, max %.2f) tokens/s %.0f peak_mb %.0f loss %.4f\n",
              amp.c_str(), static_cast<long long>(batch), static_cast<long long>(c.context), median, ms.front(), ms.back(),
              static_cast<double>(batch * c.context) / median * 1e3, peak_mb, loss.item<double>());
  return 0;
}
