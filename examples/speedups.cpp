// examples/speedups.cpp: the speed-ups change what a step costs, never what it computes. A
// small pre-norm transformer block stack trains under AMP twice from the same seed: with every
// speed-up on (the default) and with every one off (the plain reference path), and with
// scaler.step_and_update against scaler.step + scaler.update. The losses and the weights agree
// bit for bit; what each speed-up did is counted, and each run's host time per step printed.
//
//   ./speedups [cpu|cuda] [steps]
//   exits 1 if the runs disagree
#include <ampgrad/ampgrad.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

namespace ag = ampgrad;
namespace nn = ampgrad::nn;
namespace F = ampgrad::nn::functional;

namespace {

// x + mlp(layer_norm(x)), twice, then a head: the shape of a transformer's residual stream.
class Net : public nn::Module {
 public:
  Net() : nn::Module("Net") {
    for (int i = 0; i < 2; ++i) {
      const std::string n = std::to_string(i);
      norms.push_back(register_module("norm" + n, std::make_shared<nn::LayerNorm>(ag::Shape{64})));
      ups.push_back(register_module("up" + n, std::make_shared<nn::Linear>(64, 256)));
      downs.push_back(register_module("down" + n, std::make_shared<nn::Linear>(256, 64)));
    }
    head = register_module("head", std::make_shared<nn::Linear>(64, 16));
  }
  ag::Tensor forward(const ag::Tensor& x0) override {
    ag::Tensor x = x0;
    for (size_t i = 0; i < norms.size(); ++i) x = x + (*downs[i])(F::gelu((*ups[i])((*norms[i])(x)), "tanh"));
    return (*head)(x);
  }
  std::vector<std::shared_ptr<nn::LayerNorm>> norms;
  std::vector<std::shared_ptr<nn::Linear>> ups, downs;
  std::shared_ptr<nn::Linear> head;
};

struct Run {
  std::vector<double> losses, weights;
  ag::speedups::Stats did;
  double host_ms = 0;
};

Run train(ag::Device dev, int steps, bool speedups, bool one_launch) {
  ag::speedups::set_all(speedups);
  ag::manual_seed(0);
  auto net = std::make_shared<Net>();
  net->to(dev);
  ag::optim::AdamW opt(net->parameters(), ag::optim::AdamWOptions(3e-3).weight_decay(0.1));
  const bool cuda = dev.is_cuda();
  ag::amp::GradScaler scaler(ag::amp::GradScalerOptions().enabled(cuda));  // float16 on CUDA, bfloat16 on the CPU
  const ag::TensorOptions on = ag::TensorOptions().device(dev);
  const ag::Tensor x = ag::randn({8, 32, 64}, on);
  const ag::Tensor y = (ag::rand({8 * 32}, on) * 16.0).to(ag::kInt64);
  Run r;
  const ag::speedups::Stats before = ag::speedups::stats();
  const auto t0 = std::chrono::steady_clock::now();
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad();
    ag::Tensor loss;
    {
      ag::amp::AutocastGuard autocast(dev.type, cuda ? ag::kFloat16 : ag::kBFloat16);
      loss = F::cross_entropy((*net)(x).reshape({-1, 16}), y);
    }
    scaler.scale(loss).backward();
    if (one_launch) {
      scaler.step_and_update(opt);
    } else {
      scaler.step(opt);
      scaler.update();
    }
    r.losses.push_back(loss.item<double>());
  }
  r.host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / steps;
  const ag::speedups::Stats after = ag::speedups::stats();
  r.did = {after.running_sums - before.running_sums, after.roundings_taken - before.roundings_taken,
           after.seeds_reused - before.seeds_reused, after.working_copy_hits - before.working_copy_hits,
           after.ready_cast_hits - before.ready_cast_hits};
  for (const ag::Tensor& p : net->parameters())
    for (double v : p.to_vector<double>()) r.weights.push_back(v);
  ag::speedups::set_all(true);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const bool cuda = argc > 1 && std::strcmp(argv[1], "cuda") == 0;
  if (cuda && !ag::cuda::is_available()) {
    std::printf("speedups: no CUDA device here\n");
    return 0;
  }
  const int steps = argc > 2 ? std::atoi(argv[2]) : 20;
  const ag::Device dev = cuda ? ag::Device(ag::kCUDA) : ag::Device(ag::kCPU);
  train(dev, 2, true, true);  // warm-up: kernels, plans, the allocator's cache
  const Run fast = train(dev, steps, true, true), plain = train(dev, steps, false, false);
  std::printf("%d AMP steps on %s, loss %.4f -> %.4f\n", steps, dev.str().c_str(), fast.losses.front(),
              fast.losses.back());
  std::printf("  speed-ups on, step_and_update:    %.3f ms of host time a step\n", fast.host_ms);
  std::printf("  speed-ups off, step then update:  %.3f ms\n", plain.host_ms);
  std::printf("what the speed-ups did over the run:\n");
  std::printf("  %lld gradients added into the engine's running sum by a formula's own kernel\n",
              static_cast<long long>(fast.did.running_sums));
  std::printf("  %lld casts of a gradient served by the formula's own 16-bit rounding\n",
              static_cast<long long>(fast.did.roundings_taken));
  std::printf("  %lld backward seeds of ones kept from the step before\n", static_cast<long long>(fast.did.seeds_reused));
  std::printf("  %lld casts of a weight served by its working copy, written by the optimizer\n",
              static_cast<long long>(fast.did.working_copy_hits));
  std::printf("  %lld casts of a layer norm's output served by its ready cast\n",
              static_cast<long long>(fast.did.ready_cast_hits));
  const bool same = fast.losses == plain.losses && fast.weights == plain.weights;
  std::printf("losses and weights %s bit for bit\n", same ? "agree" : "DIFFER");
  return same ? 0 : 1;
}
