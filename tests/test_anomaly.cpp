// Anomaly detection (Note [Anomaly detection] in autograd/anomaly.h): crafted networks that
// overflow in a known op, forward and backward, on the CPU and on CUDA.
#include <cmath>
#include <vector>

#include "common.h"

namespace {

using ag::autograd::Anomaly;
using ag::autograd::DetectAnomalyGuard;

// The anomaly `fn` raises; fails the test when it raises nothing or something else.
template <class F> Anomaly anomaly_of(F&& fn) {
  try {
    fn();
  } catch (const ag::autograd::AnomalyError& e) {
    INFO(e.what());
    CHECK(std::string(e.what()) == e.anomaly().message());
    return e.anomaly();
  } catch (const std::exception& e) {
    FAIL("expected AnomalyError, got: " << e.what());
  }
  FAIL("expected AnomalyError, nothing was thrown");
  return {};
}

ag::Tensor on(ag::Device d, std::vector<double> v, ag::DType dt) {
  const int64_t n = static_cast<int64_t>(v.size());
  return ag::tensor(v, {n}, ag::TensorOptions(dt)).to(d);
}

void forward_overflow(ag::Device dev) {
  ag::Tensor x = on(dev, {1.0, 2.0, 100.0}, ag::kFloat32).requires_grad_();
  DetectAnomalyGuard guard;  // after the inputs are made: the forward's ops count from here
  const Anomaly a = anomaly_of([&] {
    ag::Tensor y = x * 2.0;  // op 1
    ag::Tensor z = y.exp();  // op 2: exp(200) is inf in float32
    ag::Tensor loss = z.sum();
    loss.backward();  // on CUDA the forward's checks are read here
  });
  CHECK(a.op == "exp");
  CHECK_FALSE(a.backward);
  CHECK(a.position == 2);
  CHECK(a.inf == 1);
  CHECK(a.nan == 0);
  CHECK(a.numel == 3);
  CHECK(a.tensor == "float32 [3]");
  CHECK(a.device == dev);
  CHECK_THAT(a.message(), Catch::StartsWith("anomaly detected: exp (op 2 of the forward) returned 1 inf value in its "
                                            "output (float32 [3], 3 elements)"));
}

void backward_overflow(ag::Device dev) {
  // float16 throughout: the forward is finite (x*x <= 40000 < 65504), the backward is not.
  ag::Tensor x = on(dev, {200.0, 150.0, 100.0, 50.0}, ag::kFloat16).requires_grad_();
  const ag::Tensor seed = ag::full({}, 4000.0, ag::TensorOptions(ag::kFloat16).device(dev));
  DetectAnomalyGuard guard;
  const Anomaly a = anomaly_of([&] {
    ag::Tensor y = x * x;     // op 1
    ag::Tensor m = y.mean();  // op 2; its backward (node 1) hands 4000 / 4 = 1000 to each element
    m.backward(seed);
  });
  CHECK(a.op == "mul");
  CHECK(a.backward);
  CHECK(a.position == 1);
  CHECK(a.node == 2);
  CHECK(a.input == 0);
  CHECK(a.inf == 3);  // 1000 * 200, 150 and 100 overflow; 1000 * 50 does not
  CHECK(a.nan == 0);
  CHECK(a.tensor == "float16 [4]");
  REQUIRE(a.recomputed);
  CHECK(a.wide_dtype == ag::kFloat32);
  CHECK(a.wide_max_abs == 200000.0);
  CHECK_THAT(a.message(), Catch::StartsWith("anomaly detected: mul's backward (node 2 of the backward; mul was op 1 of "
                                            "the forward) returned 3 inf values in its gradient for input 0 (float16 "
                                            "[4], 4 elements); run again in float32, that gradient's largest magnitude "
                                            "is 2e+05, 3.05x float16's largest finite value 65504"));
}

void backward_inf_everywhere(ag::Device dev) {
  ag::Tensor x = on(dev, {0.0, 4.0}, ag::kFloat64).requires_grad_();
  DetectAnomalyGuard guard;
  const Anomaly a = anomaly_of([&] { ag::sqrt(x).sum().backward(); });  // d sqrt(x) / dx = inf at 0
  CHECK(a.op == "sqrt");
  CHECK(a.backward);
  CHECK(a.position == 1);
  CHECK(a.node == 2);  // after sum's
  CHECK(a.inf == 1);
  CHECK_FALSE(a.recomputed);  // float64 has nothing wider
}

// Under float16 autocast, a loss scale far too large: the first 16-bit gradient overflows in
// cross_entropy's backward, and the op's position is its row in the trace.
void scaled_amp_overflow(ag::Device dev) {
  ag::manual_seed(fresh_seed());
  ag::nn::Linear fc(8, 5);
  fc.to(dev);
  ag::Tensor x = ag::randn({4, 8}, ag::TensorOptions().device(dev));
  ag::Tensor y = ag::tensor(std::vector<int64_t>{0, 1, 2, 3}).to(dev);
  ag::amp::GradScaler scaler(ag::amp::GradScalerOptions().init_scale(1e8));
  DetectAnomalyGuard guard;
  std::vector<ag::amp::OpRecord> records;
  const Anomaly a = anomaly_of([&] {
    ag::Tensor loss;
    {
      ag::amp::Trace trace;
      ag::amp::AutocastGuard autocast(dev.type, ag::kFloat16);
      loss = ag::cross_entropy(fc(x), y);
      records = trace.records();
    }
    scaler.scale(loss).backward();
  });
  CHECK(a.op == "cross_entropy");
  CHECK(a.backward);
  CHECK(a.input == 0);
  CHECK(a.dtype == ag::kFloat16);
  REQUIRE(a.position >= 1);
  REQUIRE(a.position <= static_cast<int64_t>(records.size()));
  CHECK(records[static_cast<size_t>(a.position - 1)].op == "cross_entropy");
  REQUIRE(a.recomputed);
  CHECK(a.wide_max_abs > 65504.0);
  CHECK(std::isfinite(a.wide_max_abs));
  CHECK_THAT(a.message(), Catch::Contains("x float16's largest finite value 65504"));
}

// A clean step under the guard gives the gradients of one without it, and an anomaly leaves the
// guard ready for the next step; positions count from each forward.
void clean_steps(ag::Device dev) {
  ag::manual_seed(fresh_seed());
  ag::Tensor w = ag::randn({6, 3}, ag::TensorOptions().device(dev)).requires_grad_();
  ag::Tensor x = ag::randn({5, 6}, ag::TensorOptions().device(dev));
  auto step = [&] {
    w.set_grad(ag::Tensor());
    ag::tanh(ag::mm(x, w)).pow(2.0).sum().backward();
  };
  step();
  const std::vector<float> plain = w.grad().to_vector<float>();
  DetectAnomalyGuard guard;
  CHECK(ag::autograd::anomaly_mode_enabled());
  step();
  CHECK(w.grad().to_vector<float>() == plain);
  // Each lambda runs a clean step first: the next forward's ops count from 1 after its backward.
  const Anomaly a = anomaly_of([&] {
    step();
    ag::Tensor y = ag::mm(x, w);           // op 1
    ag::Tensor bad = ag::log(y - 1000.0);  // op 3 (op 2 is the subtraction): log of negatives is NaN
    bad.sum().backward();
  });
  CHECK(a.op == "log");
  CHECK(a.position == 3);
  CHECK(a.nan == 15);
  step();  // the flags were cleared
  CHECK(w.grad().to_vector<float>() == plain);
  const Anomaly b = anomaly_of([&] {
    step();
    ag::Tensor z = ag::exp(ag::mm(x, w) * 1000.0);  // op 3 again
    z.sum().backward();
  });
  CHECK(b.op == "exp");
  CHECK(b.position == 3);
  step();
  CHECK(w.grad().to_vector<float>() == plain);
}

void seed_and_off(ag::Device dev) {
  ag::Tensor x = on(dev, {1.0, 2.0}, ag::kFloat32).requires_grad_();
  // Made outside the guard (its copy would be flagged), and float64: the engine's cast of it to
  // the root's dtype is not a forward op.
  const ag::Tensor seed = on(dev, {1.0, NAN}, ag::kFloat64);
  {
    DetectAnomalyGuard guard;
    const Anomaly a = anomaly_of([&] { (x * 2.0).backward(seed); });
    CHECK(a.input == -1);
    CHECK(a.nan == 1);
    CHECK_THAT(a.message(), Catch::StartsWith("anomaly detected: the gradient given to backward() holds 1 NaN value"));
  }
  {
    DetectAnomalyGuard guard(/*check_nan=*/false);
    CHECK_FALSE(ag::autograd::anomaly_mode_enabled());
    ag::Tensor z = (x * 1e30).exp();
    CHECK_NOTHROW(z.sum().backward());
    CHECK_NOTHROW(DetectAnomalyGuard::check());
  }
  CHECK_FALSE(ag::autograd::anomaly_mode_enabled());
  ag::Tensor z = (x * 1e30).exp();  // no guard: nothing is checked
  CHECK_NOTHROW(z.sum().backward());
  forward_overflow(dev);  // an anomaly raised where a backward begins leaves the next guard whole
}


// The seed given to a leaf: the engine's root is the leaf's own accumulator.
void leaf_root(ag::Device dev) {
  ag::Tensor x = on(dev, {1.0, 2.0}, ag::kFloat32).requires_grad_();
  const ag::Tensor seed = on(dev, {3.0, 4.0}, ag::kFloat32);
  DetectAnomalyGuard guard;
  x.backward(seed);
  CHECK(x.grad().to_vector<double>() == std::vector<double>{3.0, 4.0});
}

// Two finite float16 gradients of one leaf add up to inf where the engine sums them.
void summed_overflow(ag::Device dev) {
  ag::Tensor x = on(dev, {1.0, 2.0}, ag::kFloat16).requires_grad_();
  const ag::Tensor seed = ag::full({2}, 40000.0, ag::TensorOptions(ag::kFloat16).device(dev));
  DetectAnomalyGuard guard;
  const Anomaly a = anomaly_of([&] { (x * 1.0 + x * 1.0).backward(seed); });
  CHECK(a.sum);
  CHECK(a.backward);
  CHECK(a.op == "AccumulateGrad");
  CHECK(a.inf == 2);
  CHECK_THAT(a.message(), Catch::StartsWith("anomaly detected: a leaf's accumulated gradient (node 4 of the backward)"));
}

// A broadcast input's gradient overflows in its float16 reduction, not in the formula: the
// magnitude is the reduced one.
void broadcast_overflow(ag::Device dev) {
  ag::Tensor x = ag::full({1000, 3}, 1.0, ag::TensorOptions(ag::kFloat16).device(dev));
  ag::Tensor b = on(dev, {1.0, 2.0, 3.0}, ag::kFloat16).requires_grad_();
  const ag::Tensor seed = ag::full({1000, 3}, 100.0, ag::TensorOptions(ag::kFloat16).device(dev));
  DetectAnomalyGuard guard;
  const Anomaly a = anomaly_of([&] { (x + b).backward(seed); });
  CHECK(a.op == "add");
  CHECK(a.input == 1);
  CHECK(a.inf == 3);
  REQUIRE(a.recomputed);
  CHECK(a.wide_max_abs == 100000.0);
}

// An op with several outputs: its outputs' nodes pass a marker (the forward's values) on, which
// is not a gradient and is not checked; the forward's inf is left alone with check_forward off.
void several_outputs(ag::Device dev) {
  ag::Tensor x = on(dev, {INFINITY, 1.0, 2.0, 3.0}, ag::kFloat32).reshape({2, 2});
  x.requires_grad_();
  DetectAnomalyGuard guard(/*check_nan=*/true, /*check_forward=*/false);
  std::vector<ag::Tensor> parts = ag::unbind(x, 0);
  CHECK_NOTHROW((parts[1] * 2.0).sum().backward());
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0.0, 0.0, 2.0, 2.0});
}

}  // namespace

TEST_CASE("anomaly detection: the first op whose output overflows, forward and backward, on the cpu",
          "[autograd][anomaly]") {
  const ag::Device cpu(ag::DeviceType::CPU);
  SECTION("forward") { forward_overflow(cpu); }
  SECTION("backward, float16, with the magnitude run again in float32") { backward_overflow(cpu); }
  SECTION("backward, inf in float64 too") { backward_inf_everywhere(cpu); }
  SECTION("float16 autocast with too large a loss scale") { scaled_amp_overflow(cpu); }
  SECTION("clean steps are unchanged; steps after an anomaly run") { clean_steps(cpu); }
  SECTION("the seed, check_nan = false, no guard") { seed_and_off(cpu); }
  SECTION("a leaf as the root") { leaf_root(cpu); }
  SECTION("gradients that overflow where they are summed") { summed_overflow(cpu); }
  SECTION("a broadcast input's gradient") { broadcast_overflow(cpu); }
  SECTION("an op with several outputs") { several_outputs(cpu); }
  SECTION("positions after a backward's anomaly") {
    backward_overflow(cpu);
    forward_overflow(cpu);
  }
}

TEST_CASE("anomaly detection on cuda: device flags, read where the forward and the backward end",
          "[autograd][anomaly][cuda]") {
  if (skip_without_cuda()) return;
  const ag::Device cuda(ag::DeviceType::CUDA, 0);
  SECTION("forward") { forward_overflow(cuda); }
  SECTION("backward, float16, with the magnitude run again in float32") { backward_overflow(cuda); }
  SECTION("backward, inf in float64 too") { backward_inf_everywhere(cuda); }
  SECTION("float16 autocast with too large a loss scale") { scaled_amp_overflow(cuda); }
  SECTION("clean steps are unchanged; steps after an anomaly run") { clean_steps(cuda); }
  SECTION("the seed, check_nan = false, no guard") { seed_and_off(cuda); }
  SECTION("a leaf as the root") { leaf_root(cuda); }
  SECTION("gradients that overflow where they are summed") { summed_overflow(cuda); }
  SECTION("a broadcast input's gradient") { broadcast_overflow(cuda); }
  SECTION("an op with several outputs") { several_outputs(cuda); }
  SECTION("positions after a backward's anomaly") {
    backward_overflow(cuda);
    forward_overflow(cuda);
  }
  SECTION("a forward with no backward: check() reads the flags") {
    ag::Tensor x = on(cuda, {1.0, 1e30}, ag::kFloat32);
    DetectAnomalyGuard guard;
    ag::Tensor y = x * x;  // op 1: inf, found on the device, raised by nothing yet
    CHECK(y.numel() == 2);
    const Anomaly a = anomaly_of([] { DetectAnomalyGuard::check(); });
    CHECK(a.op == "mul");
    CHECK(a.position == 1);
    CHECK_NOTHROW(DetectAnomalyGuard::check());  // read once
  }
}
