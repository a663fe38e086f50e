// examples/errors_and_inplace.cpp: what ampgrad says when a program gets something wrong, and
// what it lets through. Three mistakes, each caught with an ag::Error that names the op:
//  1. a class target out of range in cross_entropy. On the CPU the op raises at once; on CUDA
//     the kernel records it on the device and the next read of a value raises it (no sync is
//     added for the check; ag::cuda::set_sync_debug(true) makes the op itself raise), and the
//     CUDA context stays usable, so training goes on;
//  2. an in-place op on a tensor that was saved for backward (y = p.exp(); y.mul_(2)): allowed,
//     as in PyTorch, and backward says which saved tensor was changed;
//  3. an in-place op on a parameter outside NoGradGuard: refused;
//  4. a float16 gradient that overflows: under ag::autograd::DetectAnomalyGuard the first op
//     whose gradient holds inf is named, and run again in float32 to say by how much.
// And one in-place op that is fine: h = p * 3; h.add_(q) is recorded like h = h + q.
//
//   ./errors_and_inplace [cpu|cuda]     exits 1 if any of it does not behave as described
#include <ampgrad/ampgrad.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace ag = ampgrad;

namespace {
int failures = 0;

// Runs f, which must throw an ag::Error containing `expect`; prints the message.
template <class F> void expect_error(const char* what, F&& f, const char* expect) {
  try {
    f();
    std::printf("%s: no error (expected one)\n", what);
    ++failures;
  } catch (const ag::Error& e) {
    const bool ok = std::strstr(e.what(), expect) != nullptr;
    std::printf("%s:\n  %s\n", what, e.what());
    if (!ok) ++failures;
  }
}
}  // namespace

int main(int argc, char** argv) {
  const bool want_cuda = argc > 1 ? std::strcmp(argv[1], "cuda") == 0 : ag::cuda::is_available();
  const ag::Device dev = want_cuda ? ag::Device(ag::kCUDA) : ag::Device(ag::kCPU);
  const ag::TensorOptions on = ag::TensorOptions().device(dev);
  ag::manual_seed(0);

  // 1. A target out of range: 10 classes, a target of 12.
  ag::Tensor w = ag::randn({3, 10}, on).requires_grad_();
  const ag::Tensor x = ag::randn({4, 3}, on);
  const ag::Tensor bad = ag::tensor(std::vector<int64_t>{1, 12, 3, 4}).to(dev);
  const ag::Tensor good = ag::tensor(std::vector<int64_t>{1, 9, 3, 4}).to(dev);
  expect_error("cross_entropy with a target of 12 for 10 classes", [&] {
    // On CUDA the op returns; reading the loss is where the device's finding is raised.
    std::printf("  loss = %g\n", ag::cross_entropy(ag::matmul(x, w), bad).item<double>());
  }, "target 12 is out of range");
  if (dev.is_cuda()) {
    ag::cuda::set_sync_debug(true);  // now the op itself raises
    expect_error("the same with set_sync_debug(true)", [&] { (void)ag::cross_entropy(ag::matmul(x, w), bad); },
                 "cross_entropy: target 12 is out of range");
    ag::cuda::set_sync_debug(false);
  }
  // The device is fine: a training step with good targets.
  ag::optim::SGD opt(std::vector<ag::Tensor>{w}, ag::optim::SGDOptions(0.1));
  double first = 0, last = 0;
  for (int step = 0; step < 20; ++step) {
    opt.zero_grad();
    ag::Tensor loss = ag::cross_entropy(ag::matmul(x, w), good);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  std::printf("training after the error: loss %.4f -> %.4f\n", first, last);
  if (!(last < first)) ++failures;

  // 2. A saved tensor changed in place.
  ag::Tensor p = ag::randn({5}, on).requires_grad_();
  ag::Tensor y = p.exp();  // exp saves its output for backward
  y.mul_(2.0);             // allowed: y's history now ends in the mul
  expect_error("backward after y = p.exp(); y.mul_(2)", [&] { y.sum().backward(); },
               "was modified by an in-place operation");

  // 3. A parameter changed in place where autograd records.
  expect_error("p.add_(1) outside NoGradGuard", [&] { p.add_(1.0); }, "in-place operation on a leaf that requires grad");

  // Fine: in place on a tensor nothing saved. d(sum(p * 3 + q))/dp = 3, /dq = 1.
  ag::Tensor q = ag::randn({5}, on).requires_grad_();
  ag::Tensor h = p * 3.0;
  h.add_(q);
  h.sum().backward();
  const double gp = p.grad().sum().item<double>(), gq = q.grad().sum().item<double>();
  std::printf("h = p * 3; h.add_(q): sum of p.grad %.1f (want 15), of q.grad %.1f (want 5)\n", gp, gq);
  if (gp != 15 || gq != 5) ++failures;

  // 4. A float16 backward that overflows: x * x is finite (40000 < 65504), its gradient is not.
  const ag::Tensor x16 = ag::tensor({200.0f, 150.0f, 100.0f, 50.0f}, ag::TensorOptions(ag::kFloat16)).to(dev);
  x16.requires_grad_();
  const ag::Tensor seed = ag::full({}, 4000.0, ag::TensorOptions(ag::kFloat16).device(dev));
  {
    ag::autograd::DetectAnomalyGuard guard;  // checks every op's output and every gradient
    try {
      ag::Tensor m = (x16 * x16).mean();
      m.backward(seed);  // mean's backward hands 1000 to each element; mul's: 1000 * 200 = 2e5
      std::printf("no anomaly (expected one)\n");
      ++failures;
    } catch (const ag::autograd::AnomalyError& e) {
      const ag::autograd::Anomaly& a = e.anomaly();
      std::printf("a float16 gradient past 65504:\n  %s\n", e.what());
      if (a.op != "mul" || !a.backward || !a.recomputed || a.wide_max_abs != 200000.0) ++failures;
    }
  }

  std::printf("%s on %s\n", failures == 0 ? "all as described" : "NOT as described", dev.str().c_str());
  return failures == 0 ? 0 : 1;
}
