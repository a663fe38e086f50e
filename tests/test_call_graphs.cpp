// Call graphs and kernel graphs (Note [Call graphs] in cuda/call_graph.h, Note [Kernel graphs]
// in cuda/launch.cuh): keys, the table, captures that fail, and training steps whose library
// calls and kernels launch as graphs, bitwise equal to direct launches; graphs held back and
// submitted in batches (Note [Launch batches]).
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <tuple>
#include <vector>

#include "call_graphs_kernels.h"
#include "common.h"
#include <ampgrad/core/kernels.h>
#include <ampgrad/cuda/call_graph.h>
#include <ampgrad/ops/define_op.h>

namespace {

const ag::Device kGpu(ag::kCUDA);

ag::Tensor sym(const ag::Shape& s) { return ag::rand(s) * 2.0 - 1.0; }

// Sets the process-wide switches, starting from an empty table (turning it off empties it), and
// restores them when a test leaves, also on failure. Kernels launch directly unless `kernels`
// (Note [Kernel graphs]), so that the library-call tests count library calls only, and with
// `kernels` always through run_call, whatever the device's backlog. Graphs that launched before
// are held back and submitted in batches (Note [Launch batches]) unless `batches` is false.
struct CallGraphs {
  explicit CallGraphs(bool on, bool kernels = false, ag::cuda::KernelGraphs mode = ag::cuda::KernelGraphs::always,
                      bool batches = true)
      : prev(ag::cuda::call_graphs_enabled()),
        prev_kernels(ag::cuda::kernel_graphs()),
        prev_batches(ag::cuda::launch_batches()) {
    ag::cuda::set_call_graphs_enabled(false);
    ag::cuda::set_call_graphs_enabled(on);
    ag::cuda::set_kernel_graphs(kernels ? mode : ag::cuda::KernelGraphs::off);
    ag::cuda::set_launch_batches(batches);
  }
  ~CallGraphs() {
    ag::cuda::set_call_graphs_enabled(prev);
    ag::cuda::set_kernel_graphs(prev_kernels);
    ag::cuda::set_launch_batches(prev_batches);
  }
  bool prev;
  ag::cuda::KernelGraphs prev_kernels;
  bool prev_batches;
};

TEST_CASE("cuda: call keys compare every word, in order, inline and spilled") {
  // Host-only: runs without a GPU too.
  int x = 0, y = 0;
  auto key = [](const void* p, float alpha) {
    ag::cuda::CallKey k;
    k.add(uint64_t{1}).add(p).add_bits(alpha);
    return k;
  };
  CHECK(key(&x, 1.0f) == key(&x, 1.0f));
  CHECK(key(&x, 1.0f).hash() == key(&x, 1.0f).hash());
  CHECK_FALSE(key(&x, 1.0f) == key(&y, 1.0f));
  CHECK_FALSE(key(&x, 1.0f) == key(&x, 2.0f));
  CHECK_FALSE(key(&x, 0.0f) == key(&x, -0.0f));  // bits, not values
  ag::cuda::CallKey a, b;
  a.add(uint64_t{1}).add(uint64_t{2});
  b.add(uint64_t{2}).add(uint64_t{1});
  CHECK_FALSE(a == b);
  ag::cuda::CallKey shorter;
  shorter.add(uint64_t{1});
  CHECK_FALSE(a == shorter);
  // Keys longer than the inline words (a kernel's arguments) spill to the heap and compare
  // the same way, up to their last word.
  auto long_key = [](int words, uint64_t last) {
    ag::cuda::CallKey k;
    for (int i = 0; i + 1 < words; ++i) k.add(static_cast<uint64_t>(i * 7 + 1));
    return k.add(last);
  };
  const int n = 4 * ag::cuda::CallKey::kInlineWords + 3;
  CHECK(long_key(n, 5) == long_key(n, 5));
  CHECK(long_key(n, 5).hash() == long_key(n, 5).hash());
  CHECK_FALSE(long_key(n, 5) == long_key(n, 6));
  CHECK_FALSE(long_key(n, 5).hash() == long_key(n, 6).hash());
  CHECK_FALSE(long_key(n, 5) == long_key(n + 1, 5));
  ag::cuda::CallKey copy = long_key(n, 9);
  CHECK(copy == long_key(n, 9));
  CHECK(copy.size() == n);
  // Bytes: whole words, then the tail zero-padded.
  ag::cuda::CallKey by_bytes, by_words;
  const unsigned char bytes[13] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};
  by_bytes.add_bytes(bytes, 13);
  by_words.add(uint64_t{0x0807060504030201}).add(uint64_t{0x0d0c0b0a09});
  CHECK(by_bytes == by_words);
  CHECK(by_bytes.size() == 2);
}

TEST_CASE("cuda: a repeated GEMM runs as a graph of its call, bitwise equal to the direct call", "[cuda]") {
  if (skip_without_cuda()) return;
  CallGraphs on(true);
  ag::manual_seed(fresh_seed());
  for (ag::DType dt : {ag::kFloat16, ag::kFloat32}) {
    CAPTURE(ag::dtype_name(dt));
    ag::Tensor a = sym({1, 48, 40}).to(kGpu).to(dt), b = sym({1, 40, 24}).to(kGpu).to(dt);
    ag::Tensor out = ag::empty({1, 48, 24}, ag::TensorOptions(dt).device(kGpu));
    auto reference = [&](double alpha) {  // float64, of the inputs as the GEMM reads them
      std::vector<double> r = ag::mm(a.select(0, 0).cpu().to(ag::kFloat64), b.select(0, 0).cpu().to(ag::kFloat64)).to_vector<double>();
      for (double& v : r) v *= alpha;
      return r;
    };
    // float32 accumulation of 40 products on CUDA against float64 (test_cuda's Kind::sum).
    const double rtol = 4 * eps_of(dt), atol = rtol + 4 * eps_of(ag::kFloat32) * 40;
    // Two direct calls, then the capture (which also runs), then graph launches.
    const ag::cuda::CallGraphStats s0 = ag::cuda::call_graph_stats();
    std::vector<std::vector<double>> runs;
    for (int i = 0; i < 5; ++i) {
      ag::kernel::gemm(kGpu, a, b, out, 1.0, 0.0);
      runs.push_back(out.to_vector<double>());
    }
    const ag::cuda::CallGraphStats s1 = ag::cuda::call_graph_stats();
    CHECK(s1.direct - s0.direct == 2);
    CHECK(s1.captured - s0.captured == 1);
    CHECK(s1.launched - s0.launched == 3);
    for (const auto& r : runs) CHECK(r == runs[0]);
    check_close(out, reference(1), atol, rtol);
    // The graph reads the operands' memory as it is when it runs.
    a.copy_(sym({1, 48, 40}).to(kGpu).to(dt));
    out.fill_(NAN);
    ag::kernel::gemm(kGpu, a, b, out, 1.0, 0.0);
    CHECK(ag::cuda::call_graph_stats().launched - s1.launched == 1);
    check_close(out, reference(1), atol, rtol);
    // Another alpha is another call: direct.
    const ag::cuda::CallGraphStats s2 = ag::cuda::call_graph_stats();
    ag::kernel::gemm(kGpu, a, b, out, 2.0, 0.0);
    CHECK(ag::cuda::call_graph_stats().direct - s2.direct == 1);
    check_close(out, reference(2), 2 * atol, rtol);
    // Inside a CudaGraph capture the call is captured directly, never a nested graph launch.
    const ag::cuda::CallGraphStats s3 = ag::cuda::call_graph_stats();
    ag::cuda::CudaGraph graph;
    graph.capture([&] { ag::kernel::gemm(kGpu, a, b, out, 1.0, 0.0); });
    const ag::cuda::CallGraphStats s4 = ag::cuda::call_graph_stats();
    CHECK(s4.direct - s3.direct == 1);
    CHECK(s4.launched == s3.launched);
    out.fill_(NAN);
    graph.replay();
    check_close(out, reference(1), atol, rtol);
  }
  // Turned off: every call runs directly and the table is emptied.
  ag::cuda::set_call_graphs_enabled(false);
  CHECK(ag::cuda::call_graph_stats().entries == 0);
  const ag::Tensor a = sym({1, 8, 8}).to(kGpu), b = sym({1, 8, 8}).to(kGpu), out = ag::empty({1, 8, 8}, ag::TensorOptions().device(kGpu));
  const ag::cuda::CallGraphStats s5 = ag::cuda::call_graph_stats();
  for (int i = 0; i < 4; ++i) ag::kernel::gemm(kGpu, a, b, out, 1.0, 0.0);
  CHECK(ag::cuda::call_graph_stats().direct - s5.direct == 4);
  CHECK(ag::cuda::call_graph_stats().launched == s5.launched);
  check_close(out, ag::mm(a.select(0, 0).cpu(), b.select(0, 0).cpu()).to_vector<double>(), 1e-5, 1e-5);
}

TEST_CASE("cuda: a call that cannot be captured runs directly from then on", "[cuda]") {
  if (skip_without_cuda()) return;
  CallGraphs on(true);
  ag::cuda::CallKey key;
  key.add(uint64_t{0x7e57}).add_bits(1.5);
  const int device = ag::cuda::current_device();
  // Synchronizing is not allowed while the stream captures: the third call's capture fails
  // with an error from inside it, and that call and every later one run directly.
  int synced = 0;
  auto call = [&] {
    ag::cuda::synchronize();
    ++synced;
  };
  const ag::cuda::CallGraphStats s0 = ag::cuda::call_graph_stats();
  for (int i = 0; i < 5; ++i) REQUIRE_NOTHROW(ag::cuda::run_call(device, ag::cuda::current_stream(device), key, call));
  const ag::cuda::CallGraphStats s1 = ag::cuda::call_graph_stats();
  CHECK(s1.failed - s0.failed == 1);
  CHECK(s1.captured == s0.captured);
  CHECK(s1.launched == s0.launched);
  CHECK(s1.direct - s0.direct == 5);
  // Five direct runs, plus the capture attempt's if synchronize() did not throw inside it.
  CHECK((synced == 5 || synced == 6));
  // The stream is out of capture mode and usable.
  const ag::Tensor a = sym({64}).to(kGpu);
  check_close(a * 2, (a.cpu() * 2).to_vector<double>(), 0, 0);
}

TEST_CASE("cuda: the call-graph table keeps at most its capacity of keys", "[cuda]") {
  if (skip_without_cuda()) return;
  CallGraphs on(true);
  const int64_t capacity = ag::cuda::call_graph_stats().capacity;
  REQUIRE(capacity >= 4096);
  // A small table (the default's 16384 keys would take a while under memcheck), the default
  // restored however the test ends.
  constexpr int64_t kSmall = 256;
  struct Restore {
    int64_t n;
    ~Restore() { ag::cuda::set_call_graph_capacity(n); }
  } restore{capacity};
  ag::cuda::set_call_graph_capacity(kSmall);
  CHECK(ag::cuda::call_graph_stats().capacity == kSmall);
  CHECK(ag::cuda::call_graph_stats().entries <= kSmall);
  const ag::Tensor a = sym({1, 8, 8}).to(kGpu), b = sym({1, 8, 8}).to(kGpu), out = ag::empty({1, 8, 8}, ag::TensorOptions().device(kGpu));
  // Distinct alphas are distinct keys; each runs three times (direct, direct, captured).
  const int64_t e0 = ag::cuda::call_graph_stats().evicted;
  for (int i = 0; i < kSmall + 8; ++i)
    for (int r = 0; r < 3; ++r) ag::kernel::gemm(kGpu, a, b, out, 1.0 + i / 1024.0, 0.0);
  CHECK(ag::cuda::call_graph_stats().entries == kSmall);
  CHECK(ag::cuda::call_graph_stats().evicted - e0 >= 8);
  // The oldest keys were evicted with their graphs; the newest still launch theirs.
  const ag::cuda::CallGraphStats s0 = ag::cuda::call_graph_stats();
  ag::kernel::gemm(kGpu, a, b, out, 1.0 + (kSmall + 7) / 1024.0, 0.0);
  ag::kernel::gemm(kGpu, a, b, out, 1.0, 0.0);
  const ag::cuda::CallGraphStats s1 = ag::cuda::call_graph_stats();
  CHECK(s1.launched - s0.launched == 1);
  CHECK(s1.direct - s0.direct == 1);
  std::vector<double> ref = ag::mm(a.select(0, 0).cpu(), b.select(0, 0).cpu()).to_vector<double>();
  check_close(out, ref, 1e-5, 1e-5);
}

// One training step: forward under autocast (when amp), the scaled backward, the scaler's
// step and update. Returns the loss.
ag::Tensor scaled_step(ag::nn::Sequential& net, ag::optim::SGD& opt, ag::amp::GradScaler& scaler, const ag::Tensor& x,
                       const ag::Tensor& y, bool amp) {
  opt.zero_grad();
  ag::Tensor loss;
  {
    ag::amp::AutocastGuard autocast(ag::kCUDA, ag::kFloat16, amp);
    loss = ag::nn::functional::cross_entropy(net(x), y);
  }
  scaler.scale(loss).backward();
  scaler.step_and_update(opt);  // with AMP, one cooperative launch (Note [One-launch scaled step])
  return loss;
}

// A seeded MLP (ReLU between Linear layers of these widths), a batch of 32, SGD with momentum
// and a scaler (enabled with amp): the setup of the training-step tests.
struct MlpSetup {
  MlpSetup(uint64_t seed, const std::vector<int64_t>& widths, bool amp) : amp(amp) {
    ag::manual_seed(seed);
    net = std::make_shared<ag::nn::Sequential>();
    for (size_t i = 0; i + 1 < widths.size(); ++i) {
      if (i > 0) net->push_back(std::make_shared<ag::nn::ReLU>());
      net->push_back(std::make_shared<ag::nn::Linear>(widths[i], widths[i + 1]));
    }
    net->to(kGpu);
    x = sym({32, widths.front()}).to(kGpu);
    y = (ag::rand({32}) * static_cast<double>(widths.back())).to(ag::kInt64).to(kGpu);
    opt = std::make_unique<ag::optim::SGD>(net->parameters(), ag::optim::SGDOptions(0.05).momentum(0.9));
    scaler = std::make_unique<ag::amp::GradScaler>(ag::amp::GradScalerOptions().enabled(amp));
  }
  // One step; its loss read to the host.
  double step() { return scaled_step(*net, *opt, *scaler, x, y, amp).item<double>(); }
  std::vector<double> params() const {
    std::vector<double> all;
    for (const ag::Tensor& p : net->parameters())
      for (double v : p.to_vector<double>()) all.push_back(v);
    return all;
  }
  bool amp;
  std::shared_ptr<ag::nn::Sequential> net;
  ag::Tensor x, y;
  std::unique_ptr<ag::optim::SGD> opt;
  std::unique_ptr<ag::amp::GradScaler> scaler;
};

TEST_CASE("cuda: training steps are bitwise the same with and without call and kernel graphs", "[cuda]") {
  if (skip_without_cuda()) return;
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  constexpr int kSteps = 12;
  struct Run {
    std::vector<double> losses, params;
    int64_t launched = 0, steady_direct = 0, failed = 0;
  };
  // fp32 and AMP (the scaler's check, step and update in SGD's cooperative launch), with call
  // graphs off, on for library calls, and on for kernels too.
  auto train = [&](bool amp, bool graphs, bool kernels) {
    CallGraphs mode(graphs, kernels);
    MlpSetup mlp(seed, {40, 64, 10}, amp);
    Run run;
    const ag::cuda::CallGraphStats s0 = ag::cuda::call_graph_stats();
    ag::cuda::CallGraphStats steady;
    for (int step = 0; step < kSteps; ++step) {
      if (step == kSteps - 3) steady = ag::cuda::call_graph_stats();
      run.losses.push_back(mlp.step());
    }
    const ag::cuda::CallGraphStats s1 = ag::cuda::call_graph_stats();
    run.launched = s1.launched - s0.launched;
    run.steady_direct = s1.direct - steady.direct;
    run.failed = s1.failed - s0.failed;
    run.params = mlp.params();
    return run;
  };
  for (bool amp : {false, true}) {
    CAPTURE(amp);
    const Run off = train(amp, false, false), library = train(amp, true, false), all = train(amp, true, true);
    CHECK(off.launched == 0);
    CHECK(library.launched > 0);  // the steady state repeats its GEMMs' pointers
    CHECK(all.launched > library.launched);
    // Every launch of the last steps, kernels and the cooperative step included, is a graph:
    // their keys repeat (no padding bytes in any kernel's arguments), and every capture works.
    CHECK(all.steady_direct == 0);
    CHECK(all.failed == 0);
    CHECK(library.losses == off.losses);
    CHECK(library.params == off.params);
    CHECK(all.losses == off.losses);
    CHECK(all.params == off.params);
    CHECK(off.losses.back() < off.losses.front());
  }
}

TEST_CASE("cuda: a CNN's steady-state training step launches its kernels as graphs", "[cuda]") {
  if (skip_without_cuda()) return;
  // Convolutions, batch norm, max pooling, casts, the loss, SGD: every launch of the last steps
  // is a graph launch except dropout's mask, whose random offset changes every step. The
  // kernels' results are those of direct launches (cuDNN's engines may sum in any order, so
  // the comparison is within rounding, Note [cuDNN plans]).
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  auto train = [&](bool amp, bool kernels) {
    CallGraphs mode(true, kernels);
    ag::manual_seed(seed);
    auto net = std::make_shared<ag::nn::Sequential>();
    net->push_back(std::make_shared<ag::nn::Conv2d>(1, 8, 3, ag::nn::Conv2dOptions{.padding = {1, 1}}));
    net->push_back(std::make_shared<ag::nn::BatchNorm2d>(8));
    net->push_back(std::make_shared<ag::nn::ReLU>());
    net->push_back(std::make_shared<ag::nn::MaxPool2d>(2));
    net->push_back(std::make_shared<ag::nn::Flatten>());
    net->push_back(std::make_shared<ag::nn::Linear>(8 * 6 * 6, 32));
    net->push_back(std::make_shared<ag::nn::ReLU>());
    net->push_back(std::make_shared<ag::nn::Dropout>(0.25));
    net->push_back(std::make_shared<ag::nn::Linear>(32, 10));
    net->to(kGpu);
    const ag::Tensor x = sym({16, 1, 12, 12}).to(kGpu);
    const ag::Tensor y = (ag::rand({16}) * 10.0).to(ag::kInt64).to(kGpu);
    ag::optim::SGD opt(net->parameters(), ag::optim::SGDOptions(0.05).momentum(0.9));
    ag::amp::GradScaler scaler(ag::amp::GradScalerOptions().enabled(amp));
    std::vector<double> losses;
    std::vector<int64_t> direct_per_step;
    const ag::cuda::CallGraphStats s0 = ag::cuda::call_graph_stats();
    ag::cuda::CallGraphStats steady;
    for (int step = 0; step < 12; ++step) {
      if (step == 9) steady = ag::cuda::call_graph_stats();
      const int64_t direct0 = ag::cuda::call_graph_stats().direct;
      if (std::getenv("AMPGRAD_CALL_GRAPHS_TRACE")) std::fprintf(stderr, "step %d (amp %d, kernels %d)\n", step, amp, kernels);
      const ag::Tensor loss = scaled_step(*net, opt, scaler, x, y, amp);
      losses.push_back(loss.item<double>());
      direct_per_step.push_back(ag::cuda::call_graph_stats().direct - direct0);
    }
    const ag::cuda::CallGraphStats end = ag::cuda::call_graph_stats();
    return std::make_tuple(losses, end.direct - steady.direct, end.failed - s0.failed, direct_per_step);
  };
  for (bool amp : {false, true}) {
    CAPTURE(amp);
    const auto [direct_losses, direct_calls, direct_failed, unused] = train(amp, false);
    CHECK(direct_calls == 0);  // kernels launched directly, not through run_call; every library call a graph
    const auto [losses, steady_direct, failed, per_step] = train(amp, true);
    CAPTURE(per_step);
    CHECK(steady_direct == 3);  // dropout's mask, once in each of the last three steps
    CHECK(failed == 0);
    REQUIRE(losses.size() == direct_losses.size());
    for (size_t i = 0; i < losses.size(); ++i) CHECK(losses[i] == Approx(direct_losses[i]).epsilon(amp ? 2e-2 : 1e-4));
  }
}

TEST_CASE("cuda: kernels launch as graphs only while the device keeps up with the host", "[cuda]") {
  if (skip_without_cuda()) return;
  CallGraphs mode(true, true, ag::cuda::KernelGraphs::when_host_bound);
  ag::manual_seed(fresh_seed());
  ag::Tensor a = sym({4096}).to(kGpu);
  const ag::Tensor b = sym({4096}).to(kGpu);
  const std::vector<double> a0 = a.to_vector<double>(), bv = b.to_vector<double>();
  auto adds = [&](int n) {
    const ag::cuda::CallGraphStats s0 = ag::cuda::call_graph_stats();
    for (int i = 0; i < n; ++i) a.add_(b);
    return ag::cuda::call_graph_stats().launched - s0.launched;
  };
  // A device that keeps up (the host waits for it every 10 launches, never 512 behind): the
  // repeated add runs as a graph from its third call on.
  ag::cuda::synchronize();
  adds(40);
  int64_t launched = 0;
  for (int r = 0; r < 20; ++r) {
    ag::cuda::synchronize();
    launched += adds(10);
  }
  CHECK(launched >= 190);
  // Tens of milliseconds of GEMMs queued ahead: once the probe looks at an event recorded
  // behind them (the first probe after them records one, 16 launches at most, and it is
  // looked at 512 launches later), the adds launch directly, past the table. That holds while
  // the GEMMs are still running when the adds have been asked for (an event after them says
  // so); a slow host (compute-sanitizer's) may let the device catch up first.
  const ag::Tensor m = sym({4096, 4096}).to(kGpu);
  std::vector<ag::Tensor> keep;
  for (int i = 0; i < 16; ++i) keep.push_back(ag::mm(m, m));
  cudaEvent_t gemms_done = nullptr;
  REQUIRE(cudaEventCreateWithFlags(&gemms_done, cudaEventDisableTiming) == cudaSuccess);
  REQUIRE(cudaEventRecord(gemms_done, ag::cuda::current_stream()) == cudaSuccess);
  const int64_t as_graphs = adds(600);
  const cudaError_t still_running = cudaEventQuery(gemms_done);
  (void)cudaEventDestroy(gemms_done);
  if (still_running == cudaErrorNotReady) {
    CHECK(as_graphs <= 16 + 512 + 2);
  } else {
    REQUIRE(still_running == cudaSuccess);
    WARN("the device finished the GEMMs before the host had asked for 600 adds (a slow host): the bound on "
         "graph launches is not checked; " << as_graphs << " of them launched as graphs");
  }
  ag::cuda::synchronize();
  // Either way, the same results: a + 840 b.
  std::vector<double> expect(a0.size());
  for (size_t i = 0; i < expect.size(); ++i) expect[i] = a0[i] + 840 * bv[i];
  check_close(a, expect, 1e-3, 1e-4);
}

TEST_CASE("cuda: a training step's calls are submitted as batches, bitwise equal to launching each", "[cuda]") {
  if (skip_without_cuda()) return;
  // Note [Launch batches]: with every call a graph, a step's forward is submitted as batch
  // graphs when backward() starts, and its backward and optimizer step when the step ends; results are those of graphs launched one by one, and of direct launches. (With
  // AMP a step's sequences repeat every second step: the scaler's update records the scale in
  // a fresh tensor each step, so the loss scale's product alternates between two.)
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  constexpr int kSteps = 20, kSteady = 4;
  struct Run {
    std::vector<double> losses, params;
    ag::cuda::CallGraphStats steady;  // of the last kSteady steps
  };
  auto train = [&](bool amp, bool graphs, bool batches) {
    CallGraphs mode(graphs, true, ag::cuda::KernelGraphs::always, batches);
    MlpSetup mlp(seed, {40, 64, 64, 10}, amp);
    Run run;
    const int64_t failed0 = ag::cuda::call_graph_stats().failed;
    ag::cuda::CallGraphStats s0;
    for (int step = 0; step < kSteps; ++step) {
      if (step == kSteps - kSteady) s0 = ag::cuda::call_graph_stats();
      run.losses.push_back(mlp.step());  // a copy to the host: submits what is held
    }
    const ag::cuda::CallGraphStats s1 = ag::cuda::call_graph_stats();
    run.steady.direct = s1.direct - s0.direct;
    run.steady.launched = s1.launched - s0.launched;
    run.steady.batches = s1.batches - s0.batches;
    run.steady.batched = s1.batched - s0.batched;
    run.steady.failed = s1.failed - failed0;
    run.params = mlp.params();
    return run;
  };
  for (bool amp : {false, true}) {
    CAPTURE(amp);
    const Run direct = train(amp, false, false), one_by_one = train(amp, true, false), batched = train(amp, true, true);
    const ag::cuda::CallGraphStats& s = batched.steady;
    INFO("steady state: launched " << s.launched << ", batches " << s.batches << ", batched " << s.batched
                                   << ", direct " << s.direct << ", failed " << s.failed);
    CHECK(one_by_one.steady.batches == 0);
    CHECK(s.direct == 0);
    CHECK(s.failed == 0);
    // At least two batches a step (the forward; the backward and the step, each maybe cut
    // where a call's id says so), every call inside one but what the loss's read to the host
    // asks for after the step and a phase's last call when a cut left it alone.
    CHECK(s.batches >= 2 * kSteady);
    CHECK(s.batched >= s.launched - 3 * kSteady);
    CHECK(s.launched == one_by_one.steady.launched);
    CHECK(batched.losses == direct.losses);
    CHECK(batched.params == direct.params);
    CHECK(one_by_one.losses == direct.losses);
    CHECK(direct.losses.back() < direct.losses.front());
  }
}

TEST_CASE("cuda: held-back calls reach the stream before anything else looks at it", "[cuda]") {
  if (skip_without_cuda()) return;
  CallGraphs mode(true, true, ag::cuda::KernelGraphs::always, true);
  ag::manual_seed(fresh_seed());
  const int64_t n = 3000;
  ag::Tensor b = sym({n}).to(kGpu), c = ag::empty({n}, ag::TensorOptions().device(kGpu));
  std::vector<double> expect_b = b.to_vector<double>(), expect_c(n);
  // Each round: two kernels, a byte copy and a kernel, on fixed buffers: the same four keys
  // every round, held back from the fourth round on, a batch from the sixth.
  auto round = [&] {
    b.mul_(0.75);
    b.add_(0.25);
    c.copy_(b);
    c.mul_(2.0);
    for (int64_t i = 0; i < n; ++i) {
      expect_b[i] = static_cast<double>(static_cast<float>(static_cast<float>(expect_b[i]) * 0.75f) + 0.25f);
      expect_c[i] = static_cast<double>(static_cast<float>(expect_b[i]) * 2.0f);
    }
  };
  const ag::cuda::CallGraphStats s0 = ag::cuda::call_graph_stats();
  for (int r = 0; r < 10; ++r) {
    round();
    // The host reads: what was held is submitted first.
    check_close(c, expect_c, 1e-6, 1e-6);
  }
  const ag::cuda::CallGraphStats s1 = ag::cuda::call_graph_stats();
  CHECK(s1.batches - s0.batches >= 4);
  CHECK(s1.failed == s0.failed);
  // Code outside the library queuing its own work on the stream current_stream() returns.
  round();
  std::vector<float> host(static_cast<size_t>(n));
  cudaStream_t stream = ag::cuda::current_stream();
  REQUIRE(cudaMemcpyAsync(host.data(), c.data_ptr(), n * sizeof(float), cudaMemcpyDeviceToHost, stream) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  auto host_close = [&] {
    for (int64_t i = 0; i < n; ++i) REQUIRE(host[static_cast<size_t>(i)] == Approx(expect_c[i]).epsilon(1e-6));
  };
  host_close();
  // synchronize() submits too (the address taken without data_ptr()'s submit).
  round();
  ag::cuda::synchronize();
  REQUIRE(cudaMemcpy(host.data(), ag::detail::address(c), n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  host_close();
  // Raw routes past ampgrad's stream (Note [Raw access]): data_ptr() submits what is held and
  // waits, so each sees every call asked for before it.
  // cudaDeviceSynchronize(), then a copy on the legacy default stream from data_ptr().
  auto held_now = [] { return ag::cuda::call_graph_stats().raw_waits; };
  int64_t waits = held_now();
  round();
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  REQUIRE(cudaMemcpy(host.data(), c.data_ptr(), n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  host_close();
  CHECK(held_now() == waits + 1);  // calls were held, and data_ptr() waited for them
  // A stream of one's own, non-blocking (it waits for nothing of ampgrad's by itself).
  cudaStream_t own = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking) == cudaSuccess);
  round();
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(host.data(), c.data_ptr(), n * sizeof(float), cudaMemcpyDeviceToHost, own) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(own) == cudaSuccess);
  host_close();
  // A write past ampgrad after a read it holds: the held copy c.copy_(b) reads b before the
  // memset overwrites it.
  round();
  void* pb = b.data_ptr();
  REQUIRE(cudaMemsetAsync(pb, 0, n * sizeof(float), own) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(own) == cudaSuccess);
  check_close(c, expect_c, 1e-6, 1e-6);
  check_close(b, std::vector<double>(static_cast<size_t>(n), 0.0), 0, 0);
  REQUIRE(cudaStreamDestroy(own) == cudaSuccess);
  b.copy_(sym({n}).to(kGpu));
  expect_b = b.to_vector<double>();
  // Nothing held (the read above submitted): data_ptr() does not wait.
  waits = held_now();
  (void)c.data_ptr();
  CHECK(held_now() == waits);
  // A CudaGraph capture starts after them (it runs nothing itself, and they are not part of
  // it): c holds the round's result after the capture, and each replay doubles it once.
  round();
  ag::cuda::CudaGraph graph;
  graph.capture([&] { c.mul_(2.0); });
  check_close(c, expect_c, 1e-6, 1e-6);
  graph.replay();
  for (int64_t i = 0; i < n; ++i) expect_c[i] = static_cast<double>(static_cast<float>(expect_c[i]) * 2.0f);
  check_close(c, expect_c, 1e-6, 1e-6);
  graph.replay();
  for (int64_t i = 0; i < n; ++i) expect_c[i] = static_cast<double>(static_cast<float>(expect_c[i]) * 2.0f);
  check_close(c, expect_c, 1e-6, 1e-6);
}

TEST_CASE("cuda: calls are held back until a submit, at most kMaxHeldCalls of them", "[cuda]") {
  if (skip_without_cuda()) return;
  CallGraphs mode(true, true, ag::cuda::KernelGraphs::always, true);
  ag::Tensor t = ag::full({64}, 1.5, ag::TensorOptions().device(kGpu));
  const int kCalls = 200;
  for (int i = 0; i < kCalls; ++i) t.add_(1.0);
  // The first three ran (direct, direct, captured and launched); the rest were held, and
  // submitted in batches of one length L, 8 <= L <= kMaxHeldCalls (a batch is cut after 8
  // calls where the call's id says so, or at kMaxHeldCalls: here every call is the same), so
  // 197 % 8 or 197 % 64 (both 5) are still held. The device's memory, read at an address taken
  // without data_ptr()'s submit (Note [Raw access]), shows it.
  std::vector<float> host(64);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  REQUIRE(cudaMemcpy(host.data(), ag::detail::address(t), 64 * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  const int done = static_cast<int>(host[0] - 1.5f) - 3, held = kCalls - 3 - done;
  CHECK(host == std::vector<float>(64, host[0]));
  CHECK((held == (kCalls - 3) % 8 || held == (kCalls - 3) % ag::cuda::kMaxHeldCalls));
  check_close(t, std::vector<double>(64, 1.5 + kCalls), 0, 0);  // a read submits the rest
}

TEST_CASE("cuda: turning call graphs or batches off submits the calls held back", "[cuda]") {
  if (skip_without_cuda()) return;
  CallGraphs mode(true, true, ag::cuda::KernelGraphs::always, true);
  ag::Tensor t = ag::full({64}, 1.5, ag::TensorOptions().device(kGpu));
  // Read without anything of ampgrad's that would submit (not data_ptr(): Note [Raw access]):
  // the device's memory, as it is.
  auto raw = [&] {
    std::vector<float> host(64);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    REQUIRE(cudaMemcpy(host.data(), ag::detail::address(t), 64 * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
    return host;
  };
  for (int i = 0; i < 8; ++i) t.add_(1.0);  // held back from the fourth on
  ag::cuda::set_launch_batches(false);
  CHECK(raw() == std::vector<float>(64, 9.5f));
  ag::cuda::set_launch_batches(true);
  for (int i = 0; i < 8; ++i) t.add_(1.0);
  ag::cuda::set_call_graphs_enabled(false);  // destroys the table's graphs: after submitting
  CHECK(raw() == std::vector<float>(64, 17.5f));
  ag::cuda::set_call_graphs_enabled(true);
  check_close(t, std::vector<double>(64, 17.5), 0, 0);
}

// ---- a launch that fails ---------------------------------------------------------------------

const ag::OpInfo kScaleBy{"test_scale_by", ag::amp::Category::fp32, true,
                          "test_call_graphs' own op: a kernel launched through cuda::launch"};

// x * s by launch_scale, `threads` threads a block forward and `grad_threads` in the backward.
ag::Tensor scale_by(const ag::Tensor& x0, float s, unsigned threads, unsigned grad_threads) {
  ag::Tensor x = x0;
  ag::OpScope scope(kScaleBy, x);
  ag::Tensor y = x.detach().contiguous().clone();
  launch_scale(y, s, threads);
  if (ag::autograd::any_requires_grad({&x})) {
    ag::autograd::record(kScaleBy, y, {x}, {}, [s, grad_threads](const ag::Tensor& g, const std::vector<ag::Tensor>&) {
      ag::Tensor gx = g.contiguous().clone();
      launch_scale(gx, s, grad_threads);
      return ag::autograd::Grads{gx};
    });
  }
  return scope.finish(y);
}

TEST_CASE("cuda: a launch that fails raises ag::Error at its call, naming the op; the calls held before it run",
          "[cuda]") {
  if (skip_without_cuda()) return;
  CallGraphs mode(true, true, ag::cuda::KernelGraphs::always, true);
  ag::manual_seed(fresh_seed());
  ag::Tensor t = ag::full({3000}, 1.5, ag::TensorOptions().device(kGpu));
  ag::Tensor x = sym({1000}).to(kGpu).requires_grad_();
  const std::vector<double> xv = x.to_vector<double>();
  auto times = [&](double s) {
    std::vector<double> r(xv.size());
    for (size_t i = 0; i < r.size(); ++i) r[i] = static_cast<double>(static_cast<float>(xv[i]) * static_cast<float>(s));
    return r;
  };
  for (int i = 0; i < 8; ++i) t.add_(1.0);  // held back from the fourth on
  // 2048 threads a block: the launch itself fails (CUDA 13 says cudaErrorInvalidValue), at this call.
  CHECK_THROWS_WITH(scale_by(x, 2.0f, 2048, 256),
                    Catch::Contains("CUDA error (in test_scale_by): kernel launch failed: cudaError"));
  check_close(t, std::vector<double>(3000, 9.5), 0, 0);  // what was held before it ran
  // In a backward: the error names the op whose formula launched it.
  ag::Tensor y = scale_by(x, 2.0f, 256, 2048);
  check_close(y, times(2.0), 0, 0);
  CHECK_THROWS_WITH(y.sum().backward(),
                    Catch::Contains("CUDA error (in test_scale_by's backward): kernel launch failed: cudaError"));
  // The device goes on: the same op with a good configuration, forward and backward, and
  // calls held again.
  x.set_grad(ag::Tensor());
  ag::Tensor z = scale_by(x, 3.0f, 256, 128);
  z.sum().backward();
  check_close(z, times(3.0), 0, 0);
  check_close(x.grad(), std::vector<double>(xv.size(), 3.0), 0, 0);
  for (int i = 0; i < 8; ++i) t.add_(1.0);
  check_close(t, std::vector<double>(3000, 17.5), 0, 0);
}

}  // namespace

TEST_CASE("cuda: a capture takes arange as a kernel, and refuses a copy from host memory", "[cuda]") {
  if (skip_without_cuda()) return;
  // Note [Host values in a capture] in cuda/runtime.cpp.
  const ag::TensorOptions i64 = ag::TensorOptions(ag::kInt64).device(ag::Device(ag::kCUDA));
  ag::Tensor out;
  ag::cuda::CudaGraph graph;
  graph.capture([&] { out = ag::add(ag::arange(2, 40, 3, i64), 1); });
  graph.replay();
  std::vector<double> want;
  for (int64_t v = 2; v < 40; v += 3) want.push_back(static_cast<double>(v + 1));
  check_close(out.to(ag::kCPU), want, 0, 0);
  check_close(ag::arange(0.5, 2.0, 0.25, ag::TensorOptions(ag::kFloat16).device(ag::Device(ag::kCUDA))).to(ag::kCPU),
              {0.5, 0.75, 1.0, 1.25, 1.5, 1.75}, 0, 0);
  ag::cuda::CudaGraph bad;
  REQUIRE_THROWS_WITH_SUBSTR(bad.capture([&] { (void)ag::tensor({1.f, 2.f}, ag::TensorOptions().device(ag::Device(ag::kCUDA))); }),
                             "while a CUDA graph captures");
  CHECK(ag::add(out, 1).sum().item<double>() > 0);  // the stream is usable after the refusal
}

TEST_CASE("cuda: a captured backward from the implicit seed hands the loss scale on as the gradient", "[cuda]") {
  if (skip_without_cuda()) return;
  // Note [Backward speed-ups] in speedups/backward.cpp: in a capture too, mul's backward from
  // the seed of ones is the other factor itself (scaler.scale(loss)'s product costs no multiply); the replay
  // reads that factor as it is then.
  const ag::Device cuda(ag::kCUDA);
  ag::Tensor c = ag::full({}, 3.0, ag::TensorOptions().device(cuda));
  ag::Tensor w = ag::tensor({1.5f, -2.0f}, {2}).to(cuda).detach().requires_grad_(true);
  (ag::sum(w * w) * c).backward();  // eager first: w.grad exists before the capture adds into it
  check_close(w.grad().to(ag::kCPU), {9.0, -12.0}, 0, 0);
  ag::cuda::CudaGraph graph;
  graph.capture([&] { (ag::sum(w * w) * c).backward(); });
  {
    ag::NoGradGuard no_grad;
    w.grad().zero_();
  }
  graph.replay();
  check_close(w.grad().to(ag::kCPU), {9.0, -12.0}, 0, 0);
  {
    ag::NoGradGuard no_grad;
    w.grad().zero_();
    c.fill_(5.0);
  }
  graph.replay();
  check_close(w.grad().to(ag::kCPU), {15.0, -20.0}, 0, 0);
  CHECK(c.item<double>() == 5.0);  // the factor handed on as a gradient is left alone
  // Eager again after the capture: the same values.
  {
    ag::NoGradGuard no_grad;
    w.grad().zero_();
  }
  (ag::sum(w * w) * c).backward();
  check_close(w.grad().to(ag::kCPU), {15.0, -20.0}, 0, 0);
}
