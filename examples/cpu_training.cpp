// examples/cpu_training.cpp: training on the CPU, fast. A small CNN's training step timed on
// the fast CPU kernels (oneDNN convolutions, OpenBLAS/oneDNN GEMMs, vectorized loops on one
// OpenMP team) and on the plain reference loops they stand in for, in float32 and under
// bfloat16 autocast, at the thread counts you give; then the loss of a few steps on each path,
// which agree to rounding.
//
//   ./cpu_training [steps] [threads...]     e.g. ./cpu_training 20 1 2
//   exits 1 if the fast path's losses stray from the reference's
#include <ampgrad/ampgrad.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace ag = ampgrad;

namespace {

std::shared_ptr<ag::nn::Sequential> cnn() {
  ag::manual_seed(1);
  ag::nn::Conv2dOptions same;
  same.padding = {1, 1};
  auto net = std::make_shared<ag::nn::Sequential>();
  net->push_back(std::make_shared<ag::nn::Conv2d>(1, 16, 3, same));
  net->push_back(std::make_shared<ag::nn::BatchNorm2d>(16));
  net->push_back(std::make_shared<ag::nn::ReLU>());
  net->push_back(std::make_shared<ag::nn::MaxPool2d>(2));
  net->push_back(std::make_shared<ag::nn::Flatten>());
  net->push_back(std::make_shared<ag::nn::Linear>(16 * 14 * 14, 10));
  return net;
}

// Mean ms per step over `steps` steps (after two warm-ups), and the losses of the steps.
double train(int steps, bool bf16, std::vector<double>* losses) {
  auto net = cnn();
  ag::optim::SGD opt(net->parameters(), ag::optim::SGDOptions(0.05).momentum(0.9));
  ag::manual_seed(2);
  const ag::Tensor x = ag::randn({64, 1, 28, 28}), y = (ag::rand({64}) * 10.0).to(ag::kInt64);
  double ms = 0;
  for (int i = 0; i < steps + 2; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    opt.zero_grad();
    ag::Tensor loss;
    {
      ag::amp::AutocastGuard autocast(ag::kCPU, ag::kBFloat16, bf16);  // bf16: no loss scaler needed
      loss = ag::nn::functional::cross_entropy(net->forward(x), y);
    }
    loss.backward();
    opt.step();
    if (i >= 2) ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (losses) losses->push_back(loss.item<double>());
  }
  return ms / steps;
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 20;
  std::vector<int> threads;
  for (int i = 2; i < argc; ++i) threads.push_back(std::atoi(argv[i]));
  if (threads.empty()) threads = {ag::get_num_threads()};
  std::printf("| threads | precision | fast kernels, ms/step | reference loops, ms/step | speed-up |\n|---|---|---|---|---|\n");
  for (int t : threads) {
    ag::set_num_threads(t);  // the team of every fast kernel (as torch.set_num_threads)
    for (bool bf16 : {false, true}) {
      ag::set_fast_cpu_kernels(true);
      const double fast = train(steps, bf16, nullptr);
      ag::set_fast_cpu_kernels(false);  // every CPU kernel runs its plain reference loop
      const double ref = train(std::max(1, steps / 10), bf16, nullptr);
      ag::set_fast_cpu_kernels(true);
      std::printf("| %d | %s | %.2f | %.2f | %.1fx |\n", t, bf16 ? "bf16 autocast" : "fp32", fast, ref, ref / fast);
    }
  }
  // The same steps on both paths: the losses agree to rounding (bf16 to its precision).
  bool ok = true;
  for (bool bf16 : {false, true}) {
    std::vector<double> fast, ref;
    train(3, bf16, &fast);
    ag::set_fast_cpu_kernels(false);
    train(3, bf16, &ref);
    ag::set_fast_cpu_kernels(true);
    double worst = 0;
    for (size_t i = 0; i < fast.size(); ++i) worst = std::max(worst, std::abs(fast[i] - ref[i]) / std::abs(ref[i]));
    const double tol = bf16 ? 5e-2 : 1e-4;
    std::printf("%s: losses of 5 steps, fast against reference: worst relative difference %.2e (%s)\n",
                bf16 ? "bf16 autocast" : "fp32", worst, worst <= tol ? "agree" : "DIFFER");
    ok = ok && worst <= tol;
  }
  return ok ? 0 : 1;
}
