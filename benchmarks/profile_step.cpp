// One training step (forward, backward, scaled SGD step) between cudaProfilerStart and
// cudaProfilerStop, after warm-ups, for per-kernel profiles:
//   ncu --profile-from-start off --metrics gpu__time_duration.sum --csv profile_step wide 4096 amp
// With a fourth argument, a file path, it instead samples where the host's time goes over
// 20,000 steps (benchmarks/host_sampler.h) and writes the samples there, for
// benchmarks/host_profile.py:
//   profile_step mlp 64 amp samples.txt
// Models: mlp (784-512-512-10), wide (4x Linear(4096)) and cnn (the Fashion-MNIST CNN of
// `ampgrad train`, cli/models.cpp), lstm and lstm_cells (the char models of `ampgrad bench
// step`, BATCH sequences of 64; Adam); precision: fp32 or amp (fp16 + GradScaler). It prints
// the call-graph counters of one step (Note [Call graphs] in cuda/call_graph.h): how many calls
// ran directly, were captured, launched as graphs and ran inside batch graphs.
// gpt and gpt_tiny are the GPTs of `ampgrad bench step` (cli/gpt.h; AdamW; BATCH sequences).
// With `graph` as the fourth argument the step is captured whole in a CUDA graph (kept
// gradients, as bench step's graphed rows), eager and graphed steps are timed with events
// (medians of 20), and the profiled step is one replay of the graph:
//   ncu --profile-from-start off --graph-profiling node --metrics gpu__time_duration.sum --csv \
//       profile_step gpt 32 fp32 graph
#include <cuda_profiler_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>
#include <string>

#include <optional>

#include <ampgrad/ampgrad.h>

#include "benchmarks/host_sampler.h"
#include "cli/bench_timer.h"
#include "cli/gpt.h"
#include "cli/models.h"
#include <ampgrad/cuda/call_graph.h>
#include <ampgrad/cuda/check.h>

namespace ag = ampgrad;

namespace {
int run(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr,
                 "usage: profile_step mlp|wide|cnn|lstm|lstm_cells|gpt|gpt_tiny BATCH fp32|amp|fp8 [SAMPLES_FILE|graph]\n");
    return 2;
  }
  if (!ag::cuda::is_available()) {
    std::printf("profile_step: no CUDA device\n");
    return 0;
  }
  const std::string model = argv[1], prec = argv[3];
  const int64_t batch = std::atoll(argv[2]);
  const bool fp8 = prec == "fp8", amp_on = prec == "amp" || fp8;  // fp8: FP8 autocast, delayed scaling
  const ag::Device dev(ag::kCUDA);
  ag::manual_seed(0);
  auto net = std::make_shared<ag::nn::Sequential>();
  const int64_t in = model == "wide" ? 4096 : 784, classes = model == "wide" ? 4096 : 10;
  const bool recurrent = model == "lstm" || model == "lstm_cells";
  const bool gpt = model == "gpt" || model == "gpt_tiny";
  const bool graphed = argc == 5 && std::string(argv[4]) == "graph";
  const ag::cli::GptConfig gc = model == "gpt" ? ag::cli::GptConfig{256, 128, 256, 4, 8}
                                               : ag::cli::GptConfig{64, 32, 64, 2, 4};
  std::shared_ptr<ag::nn::Module> root = net;
  if (gpt) {
    root = std::make_shared<ag::cli::Gpt>(gc);
  } else if (recurrent) {
    root = std::make_shared<ag::cli::CharLstm>(96, 64, 256, model == "lstm_cells", dev);
  } else if (model == "cnn") {
    namespace nn = ag::nn;
    nn::Conv2dOptions same;
    same.padding = {1, 1};
    for (auto [cin, cout] : {std::pair<int64_t, int64_t>{1, 32}, {32, 64}}) {
      net->push_back(std::make_shared<nn::Conv2d>(cin, cout, 3, same));
      net->push_back(std::make_shared<nn::BatchNorm2d>(cout));
      net->push_back(std::make_shared<nn::ReLU>());
      net->push_back(std::make_shared<nn::MaxPool2d>(2));
    }
    net->push_back(std::make_shared<nn::Flatten>());
    net->push_back(std::make_shared<nn::Linear>(64 * 7 * 7, 128));
    net->push_back(std::make_shared<nn::ReLU>());
    net->push_back(std::make_shared<nn::Dropout>(0.25));
    net->push_back(std::make_shared<nn::Linear>(128, 10));
  } else {
    const std::vector<int64_t> widths = model == "wide" ? std::vector<int64_t>{4096, 4096, 4096, 4096, 4096}
                                                        : std::vector<int64_t>{784, 512, 512, 10};
    for (size_t i = 0; i + 1 < widths.size(); ++i) {
      net->push_back(std::make_shared<ag::nn::Linear>(widths[i], widths[i + 1]));
      if (i + 2 < widths.size()) net->push_back(std::make_shared<ag::nn::ReLU>());
    }
  }
  root->to(dev);
  const ag::TensorOptions on = ag::TensorOptions().device(dev);
  ag::Tensor x, y;
  std::unique_ptr<ag::optim::Optimizer> optp;
  if (gpt) {
    x = (ag::rand({batch, gc.context}, on) * static_cast<double>(gc.vocab)).to(ag::kInt64);
    y = (ag::rand({batch * gc.context}, on) * static_cast<double>(gc.vocab)).to(ag::kInt64);
    optp = std::make_unique<ag::optim::AdamW>(root->parameters(), ag::cli::gpt_adamw(1e-3));
  } else if (recurrent) {
    x = (ag::rand({64, batch}, on) * 96.0).to(ag::kInt64);
    y = (ag::rand({64 * batch}, on) * 96.0).to(ag::kInt64);
    optp = std::make_unique<ag::optim::Adam>(root->parameters(), ag::optim::AdamOptions(1e-3));
  } else {
    x = model == "cnn" ? ag::randn({batch, 1, 28, 28}, on) : ag::randn({batch, in}, on);
    y = (ag::rand({batch}, on) * static_cast<double>(classes)).to(ag::kInt64);
    optp = std::make_unique<ag::optim::SGD>(root->parameters(), ag::optim::SGDOptions(0.01).momentum(0.9));
  }
  ag::optim::Optimizer& opt = *optp;
  ag::amp::GradScaler scaler(ag::amp::GradScalerOptions().enabled(amp_on && !fp8));
  ag::amp::Fp8Recipe recipe;
  auto logits = [&] {
    ag::Tensor out = (*root)(x);
    return gpt ? out.reshape({-1, out.size(-1)}) : out;  // the GPT's [B, T, vocab]
  };
  auto step = [&] {
    opt.zero_grad();  // as ampgrad bench step: set to none, eager and graphed
    ag::Tensor loss;
    {
      std::optional<ag::amp::AutocastGuard> autocast;
      if (fp8) autocast.emplace(dev.type, ag::kFloat8_e4m3fn, recipe);
      else autocast.emplace(dev.type, ag::kFloat16, amp_on);
      loss = ag::nn::functional::cross_entropy(logits(), y);
    }
    scaler.scale(loss).backward();
    scaler.step_and_update(opt);  // as ampgrad bench step
  };
  for (int i = 0; i < 5; ++i) step();
  ag::cuda::synchronize();
  for (int k = 0; k < 3; ++k) {
    const ag::cuda::CallGraphStats a = ag::cuda::call_graph_stats();
    step();
    ag::cuda::synchronize();
    const ag::cuda::CallGraphStats b = ag::cuda::call_graph_stats();
    std::printf("profile_step %s batch %lld %s: one step's calls: %lld direct, %lld captured, %lld launched as graphs "
                "(%lld of them in %lld batch graphs, %lld batches composed), %lld failed; %lld keys in the table\n",
                model.c_str(), static_cast<long long>(batch), prec.c_str(), static_cast<long long>(b.direct - a.direct),
                static_cast<long long>(b.captured - a.captured), static_cast<long long>(b.launched - a.launched),
                static_cast<long long>(b.batched - a.batched), static_cast<long long>(b.batches - a.batches),
                static_cast<long long>(b.batches_composed - a.batches_composed),
                static_cast<long long>(b.failed - a.failed), static_cast<long long>(b.entries));
  }
  // Host time of the parts of a step, averaged over 200 steps (no sync inside a step).
  const int n = 200;
  double fwd_us = 0, bwd_us = 0, opt_us = 0;
  for (int i = 0; i < n; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    opt.zero_grad();
    ag::Tensor loss;
    {
      std::optional<ag::amp::AutocastGuard> autocast;
      if (fp8) autocast.emplace(dev.type, ag::kFloat8_e4m3fn, recipe);
      else autocast.emplace(dev.type, ag::kFloat16, amp_on);
      loss = ag::nn::functional::cross_entropy(logits(), y);
    }
    auto t1 = std::chrono::steady_clock::now();
    scaler.scale(loss).backward();
    auto t2 = std::chrono::steady_clock::now();
    scaler.step_and_update(opt);
    auto t3 = std::chrono::steady_clock::now();
    fwd_us += std::chrono::duration<double, std::micro>(t1 - t0).count();
    bwd_us += std::chrono::duration<double, std::micro>(t2 - t1).count();
    opt_us += std::chrono::duration<double, std::micro>(t3 - t2).count();
  }
  ag::cuda::synchronize();
  std::printf("profile_step %s batch %lld %s: host us per step: zero_grad+forward %.1f, backward %.1f, "
              "scaler step+update %.1f\n",
              model.c_str(), static_cast<long long>(batch), prec.c_str(), fwd_us / n, bwd_us / n, opt_us / n);
  if (graphed) {
    // Device ms per step, eager and as one graph: medians of 20 event-timed samples of 5 steps.
    auto median_ms = [&](const std::function<void()>& fn) { return ag::cli::median_ms(dev, fn, 3, 20, 5); };
    const double eager = median_ms(step);
    ag::cuda::CudaGraph g;
    g.capture(step);
    for (int i = 0; i < 3; ++i) g.replay();
    const double replay = median_ms([&] { g.replay(); });
    std::printf("profile_step %s batch %lld %s: ms per step: eager %.3f, CUDA graph %.3f\n", model.c_str(),
                static_cast<long long>(batch), prec.c_str(), eager, replay);
    ag::cuda::synchronize();
    AG_CUDA_CHECK(cudaProfilerStart());
    g.replay();
    ag::cuda::synchronize();
    AG_CUDA_CHECK(cudaProfilerStop());
    return 0;
  }
  if (argc == 5) {
    const int steps = recurrent ? 400 : 20000;
    auto t0 = std::chrono::steady_clock::now();
    host_sampler::Sampler sampler(100);
    for (int i = 0; i < steps; ++i) step();
    sampler.stop();
    ag::cuda::synchronize();
    auto t1 = std::chrono::steady_clock::now();
    const bool ok = sampler.write(argv[4]);
    std::printf("profile_step: %zu samples of %d steps (%.1f us per step) written to %s%s\n", sampler.taken(), steps,
                std::chrono::duration<double, std::micro>(t1 - t0).count() / steps, argv[4], ok ? "" : " FAILED");
    return ok ? 0 : 1;
  }
  AG_CUDA_CHECK(cudaProfilerStart());
  step();
  ag::cuda::synchronize();
  AG_CUDA_CHECK(cudaProfilerStop());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "profile_step: %s\n", e.what());
    return 1;
  }
}
