// examples/fp8_autocast.cpp: training with FP8 autocast. An MLP learns a fixed random linear
// map under AutocastGuard(device, kFloat8_e4m3fn, recipe): its Linear layers run as FP8 GEMMs
// forward and backward (e4m3 activations and weights, e5m2 gradients: the HYBRID format), with
// per-tensor scales from a DelayedScaling recipe that keeps each tensor's amax history on the
// device; everything else runs in bfloat16, the optimizer steps the float32 weights, and no
// loss scaler is needed. Prints each tensor's amax and scale at the end (Fp8Recipe::stats()).
//
//   ./fp8_autocast [cpu|cuda] [steps]   exits 1 unless the loss falls to a fifth of its start
//                                       (the CPU emulates the FP8 GEMMs; CUDA needs sm_89+)
#include <ampgrad/ampgrad.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <string>

namespace ag = ampgrad;
namespace nn = ampgrad::nn;

int main(int argc, char** argv) {
  const bool cuda = argc > 1 && std::strcmp(argv[1], "cuda") == 0;
  const int steps = argc > 2 ? std::stoi(argv[2]) : 200;
  if (cuda && !ag::cuda::is_available()) {
    std::printf("fp8_autocast: no CUDA device here\n");
    return 0;
  }
  const ag::Device dev = cuda ? ag::Device(ag::kCUDA) : ag::Device(ag::kCPU);
  ag::manual_seed(0);
  // FP8 GEMMs need in_features, out_features and the batch (for the weight gradient) to be
  // multiples of 16; a layer that is not runs in bfloat16, and `ampgrad explain` says so.
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Linear>(64, 256));
  net->push_back(std::make_shared<nn::ReLU>());
  net->push_back(std::make_shared<nn::Linear>(256, 32));
  net->to(dev);
  const ag::Tensor map = ag::randn({64, 32}, ag::TensorOptions().device(dev)) * 0.3;
  ag::optim::AdamW opt(net->parameters(), ag::optim::AdamWOptions(2e-3));

  ag::amp::DelayedScaling config;  // Transformer Engine's defaults: HYBRID, margin 0, max of 1024 amaxes
  config.amax_history_len = 16;
  ag::amp::Fp8Recipe recipe(config);
  double first = 0, last = 0;
  for (int step = 0; step < steps; ++step) {
    const ag::Tensor x = ag::randn({128, 64}, ag::TensorOptions().device(dev));
    const ag::Tensor y = ag::matmul(x, map);
    opt.zero_grad();
    ag::Tensor loss;
    {
      // Entering the guard updates every scale from the amaxes the last step recorded.
      ag::amp::AutocastGuard autocast(dev.type, ag::kFloat8_e4m3fn, recipe);
      loss = ag::nn::functional::mse_loss((*net)(x).to(ag::kFloat32), y);
    }
    loss.backward();
    opt.step();
    const double l = loss.item<double>();
    if (step == 0) first = l;
    last = l;
    if (step % 50 == 0) std::printf("step %4d  loss %.4f\n", step, l);
  }
  std::map<const ag::TensorImpl*, std::string> names;
  for (const auto& [name, p] : net->named_parameters()) names[p.unsafe_impl()] = name;
  std::printf("\n%-10s %-12s %-14s %10s %12s\n", "parameter", "tensor", "dtype", "amax", "scale");
  for (const ag::amp::Fp8TensorStats& s : recipe.stats())
    std::printf("%-10s %-12s %-14s %10.4g %12.4g\n", names[s.parameter].c_str(),
                std::string(ag::amp::fp8_role_name(s.role)).c_str(), std::string(ag::dtype_name(s.dtype)).c_str(),
                s.history_max, s.scale);
  std::printf("\nloss %.4f -> %.4f over %d steps on %s under FP8 autocast\n", first, last, steps, dev.str().c_str());
  return last < first / 5 ? 0 : 1;
}
