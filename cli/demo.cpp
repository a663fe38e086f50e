// `ampgrad demo`: an MLP learns a synthetic 3-class problem with plain SGD, on CPU or CUDA.
#include <chrono>
#include <cstdio>

#include <ampgrad/ampgrad.h>
#include "cli/commands.h"

namespace ampgrad::cli {

namespace {

struct DemoArgs {
  int steps = 300;
  int batch = 128;
  double lr = 0.5;
  std::string device = "cpu";
  std::string amp = "off";
  bool trace = false;
  uint64_t seed = 0;
};

// Cross-entropy of logits [N, C] against one-hot targets [N, C].
Tensor cross_entropy_onehot(const Tensor& logits, const Tensor& onehot) {
  return -(onehot * log_softmax(logits, 1)).sum() / static_cast<double>(logits.size(0));
}

void run_demo(const DemoArgs& a) {
  Device dev(a.device);
  AG_CHECK(!dev.is_cuda() || cuda::is_available(), "demo: --device cuda asked for, but no CUDA device is available");
  manual_seed(a.seed);
  const int64_t in = 20, hidden = 64, classes = 3;
  TensorOptions opt = TensorOptions().device(dev);
  // A fixed random "teacher" labels the data: the class is argmax(x @ teacher).
  Tensor teacher = randn({in, classes}, opt);
  auto batch = [&](int64_t n) {
    Tensor x = randn({n, in}, opt);
    Tensor y = argmax(mm(x, teacher), 1);
    Tensor onehot = eq(y.unsqueeze(1), arange(classes, TensorOptions(kInt64).device(dev)).unsqueeze(0)).to(kFloat32);
    return std::make_tuple(x, y, onehot);
  };
  auto init = [&](int64_t fan_in, const Shape& shape) {
    Tensor w = (rand(shape, opt) * 2 - 1) * (1.0 / std::sqrt(static_cast<double>(fan_in)));
    return w.requires_grad_();
  };
  Tensor w1 = init(in, {hidden, in}), b1 = init(in, {hidden});
  Tensor w2 = init(hidden, {classes, hidden}), b2 = init(hidden, {classes});
  std::vector<Tensor> params{w1, b1, w2, b2};

  std::printf("demo: MLP %lld-%lld-%lld on synthetic data, %d SGD steps of batch %d, lr %g, on %s\n",
              static_cast<long long>(in), static_cast<long long>(hidden), static_cast<long long>(classes), a.steps,
              a.batch, a.lr, dev.str().c_str());
  const bool use_amp = a.amp != "off";
  const DType amp_dtype = a.amp == "fp16" ? kFloat16 : kBFloat16;
  if (use_amp) std::printf("demo: autocast to %s on %s\n", std::string(dtype_name(amp_dtype)).c_str(), dev.str().c_str());
  auto t0 = std::chrono::steady_clock::now();
  for (int step = 1; step <= a.steps; ++step) {
    auto [x, y, onehot] = batch(a.batch);
    std::optional<amp::Trace> trace;
    if (a.trace && step == 1) trace.emplace();
    Tensor loss;
    {
      amp::AutocastGuard autocast(dev.type, amp_dtype, use_amp);
      Tensor logits = linear(relu(linear(x, w1, b1)), w2, b2);
      loss = cross_entropy_onehot(logits, onehot);
    }
    if (trace) {
      std::printf("demo: the ops of step 1's forward pass, as autocast saw them:\n%s",
                  amp::format_trace(trace->records()).c_str());
      trace.reset();
    }
    for (Tensor& p : params) p.set_grad(Tensor());
    loss.backward();
    {
      NoGradGuard no_grad;
      for (Tensor& p : params) p.add_(p.grad(), -a.lr);
    }
    if (step == 1 || step % 50 == 0) std::printf("  step %4d  loss %.4f\n", step, loss.item<double>());
  }
  auto [x, y, onehot] = batch(2000);
  NoGradGuard no_grad;
  amp::AutocastGuard autocast(dev.type, amp_dtype, use_amp);
  Tensor pred = argmax(linear(relu(linear(x, w1, b1)), w2, b2), 1);
  double acc = eq(pred, y).to(kFloat32).mean().item<double>();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("demo: held-out accuracy %.1f%% (chance 33.3%%) after %.2f s\n", 100 * acc, secs);
}

}  // namespace

void add_demo(CLI::App& app) {
  auto args = std::make_shared<DemoArgs>();
  CLI::App* cmd = app.add_subcommand("demo", "Train a small MLP on synthetic data (a first look at the engine)");
  cmd->add_option("--steps", args->steps, "SGD steps")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--batch-size", args->batch, "examples per step")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--lr", args->lr, "learning rate")->capture_default_str();
  cmd->add_option("--device", args->device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  cmd->add_option("--seed", args->seed, "random seed")->capture_default_str();
  cmd->add_option("--amp", args->amp, "autocast the forward pass: fp16, bf16 or off")
      ->check(CLI::IsMember({"fp16", "bf16", "off"}))
      ->capture_default_str();
  cmd->add_flag("--trace", args->trace, "print what autocast did to each op of the first step");
  cmd->callback([args] { run_demo(*args); });
}

}  // namespace ampgrad::cli
