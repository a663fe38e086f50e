// `ampgrad train --model gpt` and `ampgrad sample`: a character-level GPT on real text.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numbers>
#include <random>

#include <optional>

#include <ampgrad/ampgrad.h>
#include "cli/commands.h"
#include "cli/gpt.h"
#include "cli/models.h"
#include "cli/plot.h"

namespace ampgrad::cli {

namespace {

// Checkpoint section "gpt": the configuration and the vocabulary, so that sample needs nothing else.
optim::StateDict gpt_section(const GptConfig& c, const Corpus& corpus) {
  std::vector<int64_t> v;
  for (unsigned char ch : corpus.vocab) v.push_back(ch);
  return {{"config", tensor(std::vector<int64_t>{c.vocab, c.context, c.width, c.layers, c.heads}, {5})},
          {"vocab", tensor(v, {static_cast<int64_t>(v.size())})}};
}

// `batch` windows at random offsets of ids[lo, hi): inputs [B, T], next characters [B * T].
std::pair<Tensor, Tensor> batch_of(const std::vector<int64_t>& ids, size_t lo, size_t hi, int64_t t, int64_t b,
                                   std::mt19937_64& rng, Device dev) {
  std::vector<int64_t> x, y;
  // A window needs s + t + 1 <= hi (its last target is ids[s + t]).
  std::uniform_int_distribution<size_t> at(lo, hi - static_cast<size_t>(t) - 1);
  for (int64_t i = 0; i < b; ++i) {
    const size_t s = at(rng);
    x.insert(x.end(), ids.begin() + static_cast<std::ptrdiff_t>(s), ids.begin() + static_cast<std::ptrdiff_t>(s) + t);
    y.insert(y.end(), ids.begin() + static_cast<std::ptrdiff_t>(s) + 1,
             ids.begin() + static_cast<std::ptrdiff_t>(s) + 1 + t);
  }
  return {tensor(x, {b, t}).to(dev), tensor(y, {b * t}).to(dev)};
}

}  // namespace

void run_train_gpt(const GptTrainArgs& a) {
  const Device dev = resolve_device(a.device);
  const std::string amp = a.amp == "auto" ? (dev.is_cuda() ? "fp16" : "bf16") : a.amp;
  const bool use_amp = amp != "off";
  const DType amp_dtype = amp == "bf16" ? kBFloat16 : kFloat16;
  const Corpus corpus = read_corpus(a.data);
  // On CUDA the "small" GPT (context 128, width 256, 4 layers, 8 heads); a smaller one on the CPU.
  GptConfig c = dev.is_cuda() ? GptConfig{0, 128, 256, 4, 8} : GptConfig{0, 64, 128, 2, 4};
  c.vocab = static_cast<int64_t>(corpus.vocab.size());
  const int64_t steps = a.steps > 0 ? a.steps : (dev.is_cuda() ? 2000 : 300);
  const int64_t batch = a.batch_size > 0 ? a.batch_size : (dev.is_cuda() ? 32 : 16);
  const size_t split = corpus.ids.size() * 9 / 10, need = static_cast<size_t>(c.context) + 1;
  AG_CHECK(corpus.ids.size() - split >= need, "ampgrad train --model gpt: {} holds {} characters; its held-out tenth "
           "needs at least {} (a window of the context {} and its next character): give at least {}", a.data,
           corpus.ids.size(), need, c.context, need * 10);
  // What a model that ignores context reaches on the held-out text: "uses its context" needs
  // the validation loss 0.1 nats below it.
  const double entropy = corpus.unigram_entropy(), baseline = corpus.unigram_baseline(split);
  std::printf("ampgrad train --model gpt: %s, %zu characters (%zu distinct), unigram entropy %.3f nats/char; on the "
              "held-out tenth, the training text's character frequencies give %.3f\n",
              a.data.c_str(), corpus.ids.size(), corpus.vocab.size(), entropy, baseline);
  std::printf("GPT: context %lld, width %lld, %lld layers of %lld heads; %lld steps of %lld windows on %s, amp %s%s\n",
              (long long)c.context, (long long)c.width, (long long)c.layers, (long long)c.heads, (long long)steps,
              (long long)batch, dev.str().c_str(), amp.c_str(), dev.is_cuda() ? "" : " (a smaller model on the CPU)");

  manual_seed(a.seed);
  Gpt model(c);
  model.to(dev);
  optim::AdamW opt(model.parameters(), gpt_adamw(a.lr));
  // --amp fp8: FP8 GEMMs for every linear layer (delayed scaling), bfloat16 elsewhere, no loss
  // scaler (Note [FP8 autocast] in amp/autocast.h).
  std::unique_ptr<amp::Fp8Recipe> fp8;
  if (amp == "fp8") fp8 = std::make_unique<amp::Fp8Recipe>();
  amp::GradScaler scaler(amp::GradScalerOptions().enabled(use_amp && amp_dtype == kFloat16 && !fp8));
  std::mt19937_64 rng(a.seed + 1);
  auto loss_of = [&](const Tensor& x, const Tensor& y) {
    std::optional<amp::AutocastGuard> autocast;
    if (fp8) autocast.emplace(dev.type, kFloat8_e4m3fn, *fp8);
    else autocast.emplace(dev.type, amp_dtype, use_amp);
    return cross_entropy(model(x).reshape({-1, c.vocab}), y);
  };
  // The same 128 held-out windows at every evaluation, whatever the batch size.
  std::vector<std::pair<Tensor, Tensor>> held_out;
  {
    std::mt19937_64 r(a.seed + 2);
    for (int i = 0; i < 8; ++i) held_out.push_back(batch_of(corpus.ids, split, corpus.ids.size(), c.context, 16, r, dev));
  }
  auto validation = [&] {
    NoGradGuard no_grad;
    model.eval();
    Tensor sum = zeros({}, TensorOptions().device(dev));
    for (const auto& [x, y] : held_out) sum = sum + loss_of(x, y).to(kFloat32);
    model.train();
    return sum.item<double>() / static_cast<double>(held_out.size());
  };
  const bool csv = a.metrics.size() >= 4 && a.metrics.compare(a.metrics.size() - 4, 4, ".csv") == 0;
  std::ofstream metrics;
  if (!a.metrics.empty()) {
    metrics.open(a.metrics);
    AG_CHECK(metrics.good(), "ampgrad train: cannot write --metrics {}", a.metrics);
    if (csv) metrics << "step,train_loss,validation_loss,lr,scale\n";
  }
  const int64_t warmup = std::max<int64_t>(1, steps / 20), every = std::max<int64_t>(1, steps / 10);
  std::vector<Tensor> losses, scales;  // for --plot: device scalars, read once at the end
  double val = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < steps; ++step) {
    const double lr = step < warmup ? a.lr * static_cast<double>(step + 1) / static_cast<double>(warmup)
                                    : 0.5 * a.lr * (1 + std::cos(std::numbers::pi * static_cast<double>(step - warmup) /
                                                                 static_cast<double>(std::max<int64_t>(1, steps - warmup))));
    opt.set_lr(lr);
    auto [x, y] = batch_of(corpus.ids, 0, split, c.context, batch, rng, dev);
    opt.zero_grad();
    const Tensor loss = loss_of(x, y);
    scaler.scale(loss).backward();
    scaler.step_and_update(opt);  // step() then update(), in one launch where it can
    if (!a.plot.empty()) {
      losses.push_back(loss.detach());
      if (scaler.is_enabled()) scales.push_back(scaler.scale_tensor().clone());
    }
    if ((step + 1) % every == 0 || step + 1 == steps) {
      val = validation();
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double scale = scaler.is_enabled() ? scaler.get_scale() : 0, train_loss = loss.item<double>();
      std::printf("step %5lld/%lld  train loss %.3f  validation loss %.3f  lr %.1e  scale %g  %.0f chars/s\n",
                  (long long)step + 1, (long long)steps, train_loss, val, lr, scale,
                  static_cast<double>((step + 1) * batch * c.context) / secs);
      std::fflush(stdout);
      if (metrics.is_open() && csv)
        metrics << fmt::format("{},{:.6f},{:.6f},{:g},{:g}\n", step + 1, train_loss, val, lr, scale);
      else if (metrics.is_open())
        metrics << fmt::format(R"({{"step": {}, "train_loss": {:.6f}, "validation_loss": {:.6f}, "lr": {:g}, "scale": {:g}}})",
                               step + 1, train_loss, val, lr, scale)
                << '\n';
    }
  }
  std::printf("validation loss %.3f nats/char against %.3f without context (%.3f below): %s\n", val, baseline,
              baseline - val, val < baseline - 0.1 ? "the model uses its context" : "NOT 0.1 below the baseline");
  if (!a.save.empty()) {
    nn::save_checkpoint(a.save, {{"model", model.state_dict()}, {"optimizer", opt.state_dict()},
                                 {"scaler", scaler.state_dict()}, {"gpt", gpt_section(c, corpus)}},
                        {{"model", "gpt"}, {"steps", std::to_string(steps)}});
    std::printf("checkpoint: %s (ampgrad sample --checkpoint %s --prompt TEXT)\n", a.save.c_str(), a.save.c_str());
  }
  if (!a.plot.empty()) {
    const std::vector<double> l = stack(losses, 0).to(kFloat64).cpu().to_vector<double>();
    const std::vector<double> s = scales.empty() ? std::vector<double>(l.size(), 0)
                                                 : stack(scales, 0).to(kFloat64).cpu().to_vector<double>();
    plot_training(a.plot, l, s, fmt::format("ampgrad train --model gpt --amp {} ({})", amp, dev.str()));
    std::printf("plot: %s\n", a.plot.c_str());
  }
  // A sample from the held-out text's first character on.
  std::printf("sample: %s\n", sample_text(model, corpus, corpus.decode({corpus.ids[split]}), 120, 0.8, 10, a.seed, dev).c_str());
}

void add_sample(CLI::App& app) {
  struct Args {
    std::string checkpoint, prompt, device = "auto";
    int64_t length = 200, top_k = 10;
    double temperature = 0.8;
    uint64_t seed = 0;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("sample", "Generate text with a GPT trained by `ampgrad train --model gpt --save F`");
  cmd->add_option("--checkpoint", a->checkpoint, "the checkpoint --save wrote")->required();
  cmd->add_option("--prompt", a->prompt, "the text to continue (characters of the training text)")->required();
  cmd->add_option("--length", a->length, "characters to generate")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--temperature", a->temperature, "divides the logits: lower is more conservative")
      ->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--top-k", a->top_k, "draw from the k likeliest characters (0: all)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  cmd->add_option("--device", a->device, "auto (CUDA when present), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))->capture_default_str();
  cmd->add_option("--seed", a->seed, "seed of the draws")->capture_default_str();
  cmd->callback([a] {
    const auto ckpt = nn::load_checkpoint(a->checkpoint);
    for (const char* section : {"gpt", "model"})
      AG_CHECK(ckpt.count(section), "ampgrad sample: {} is not a checkpoint of `ampgrad train --model gpt --save` "
               "(it has no {} section)", a->checkpoint, section);
    for (const char* key : {"config", "vocab"})
      AG_CHECK(ckpt.at("gpt").count(key), "ampgrad sample: {}: its gpt section has no {}", a->checkpoint, key);
    const std::vector<int64_t> cfg = ckpt.at("gpt").at("config").to_vector<int64_t>();
    AG_CHECK(cfg.size() == 5, "ampgrad sample: {}: a gpt config of {} numbers, expected 5", a->checkpoint, cfg.size());
    Corpus vocab;
    for (int64_t ch : ckpt.at("gpt").at("vocab").to_vector<int64_t>()) vocab.vocab.push_back(static_cast<char>(ch));
    const Device dev = resolve_device(a->device);
    Gpt model(GptConfig{cfg[0], cfg[1], cfg[2], cfg[3], cfg[4]});
    model.load_state_dict(ckpt.at("model"));
    model.to(dev);
    std::printf("%s\n", sample_text(model, vocab, a->prompt, a->length, a->temperature, a->top_k, a->seed, dev).c_str());
  });
}

}  // namespace ampgrad::cli
