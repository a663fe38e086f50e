// Faults survived: running out of memory in the middle of a mixed-precision training step
// (forward, backward, the scaler's check, the optimizer's step, the scaler's update) leaves
// the parameters, the optimizer's state and the scaler's state exactly as before the step, and
// a smaller next step trains (Note [A failed step] in optim/optimizer.cpp).
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common.h"

namespace {

// The real allocator of a device type, with allocation number `fail_at` after arm() failing
// as the real one fails when memory runs out: an ag::Error saying so. Made once per device
// type and never destroyed: storages it allocated give their memory back through it.
class FailingAllocator final : public ag::Allocator {
 public:
  static FailingAllocator& of(ag::DeviceType type) {
    static std::map<ag::DeviceType, FailingAllocator*> made;
    FailingAllocator*& a = made[type];
    if (a == nullptr) a = new FailingAllocator(ag::get_allocator(type));
    return *a;
  }
  void* allocate(size_t nbytes, ag::Device device) override {
    if (armed_ && ++count_ == fail_at_)
      throw ag::Error(fmt::format("out of memory on {}: tried to allocate {} bytes (allocation {} of the step, failed "
                                  "by the test)",
                                  device.str(), nbytes, fail_at_));
    return real_->allocate(nbytes, device);
  }
  void deallocate(void* ptr, size_t nbytes, ag::Device device) noexcept override {
    real_->deallocate(ptr, nbytes, device);
  }
  ag::Allocator* real() const { return real_; }
  void arm(int64_t fail_at) {
    count_ = 0;
    fail_at_ = fail_at;
    armed_ = true;
  }
  int64_t disarm() {
    armed_ = false;
    return count_;
  }

 private:
  explicit FailingAllocator(ag::Allocator* real) : real_(real) {}
  ag::Allocator* real_;
  bool armed_ = false;
  int64_t count_ = 0, fail_at_ = 0;
};

// Installs the failing allocator for a scope.
struct Installed {
  ag::DeviceType type;
  FailingAllocator& a;
  explicit Installed(ag::DeviceType t) : type(t), a(FailingAllocator::of(t)) { ag::set_allocator(t, &a); }
  ~Installed() {
    a.disarm();
    ag::set_allocator(type, a.real());
  }
};

using Values = std::map<std::string, std::vector<double>>;

Values values_of(const ag::optim::StateDict& sd, const std::string& prefix) {
  Values v;
  for (const auto& [k, t] : sd) v[prefix + k] = t.to_vector<double>();
  return v;
}

// Everything a step may change, but for the gradients.
Values snapshot(ag::nn::Module& model, const ag::optim::Optimizer& opt, const ag::amp::GradScaler& scaler) {
  Values v;
  for (const auto& [name, p] : model.named_parameters()) v["param." + name] = p.to_vector<double>();
  Values o = values_of(opt.state_dict(), "optimizer."), s = values_of(scaler.state_dict(), "scaler.");
  v.insert(o.begin(), o.end());
  v.insert(s.begin(), s.end());
  return v;
}

enum Phase { kForward, kBackward, kScalerStep, kScalerUpdate, kPhases };
const char* const kPhaseNames[] = {"forward", "backward", "scaler.step", "scaler.update"};

void failed_steps_change_nothing(ag::Device dev, bool warm, bool adam, bool two_groups = false) {
  ag::manual_seed(fresh_seed());
  auto model = std::make_shared<ag::nn::Sequential>();
  model->push_back(std::make_shared<ag::nn::Linear>(12, 16));
  model->push_back(std::make_shared<ag::nn::ReLU>());
  model->push_back(std::make_shared<ag::nn::Linear>(16, 4));
  model->to(dev);
  std::unique_ptr<ag::optim::Optimizer> opt;
  if (two_groups) {
    // Each layer a group of its own: every group is planned before any is stepped.
    std::vector<ag::Tensor> all = model->parameters();
    std::vector<std::vector<ag::Tensor>> groups{{all[0], all[1]}, {all[2], all[3]}};
    opt = std::make_unique<ag::optim::SGD>(groups, ag::optim::SGDOptions(0.05).momentum(0.9),
                                           std::vector<double>{0.05, 0.02});
  } else if (adam) {
    opt = std::make_unique<ag::optim::AdamW>(model->parameters(), ag::optim::AdamWOptions(1e-2));
  } else {
    opt = std::make_unique<ag::optim::SGD>(model->parameters(), ag::optim::SGDOptions(0.05).momentum(0.9));
  }
  ag::amp::GradScaler scaler(ag::amp::GradScalerOptions().init_scale(1024));
  const int64_t batch = 32;
  ag::Tensor x = ag::randn({batch, 12}, ag::TensorOptions().device(dev));
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < batch; ++i) labels.push_back((i * 7) % 4);
  ag::Tensor y = ag::tensor(labels).to(dev);
  Phase phase = kForward;
  auto step = [&](int64_t b) {
    opt->zero_grad();
    phase = kForward;
    ag::Tensor loss;
    {
      ag::amp::AutocastGuard autocast(dev.type, ag::kFloat16);
      loss = ag::cross_entropy((*model)(x.narrow(0, 0, b)), y.narrow(0, 0, b));
    }
    phase = kBackward;
    scaler.scale(loss).backward();
    phase = kScalerStep;
    scaler.step(*opt);
    phase = kScalerUpdate;
    scaler.update();
    return loss;
  };
  if (warm) {
    step(batch);
    step(batch);
  }
  const Values before = snapshot(*model, *opt, scaler);
  int hits[kPhases] = {};
  int64_t failures = 0;
  bool completed = false;
  {
    Installed failing(dev.type);
    for (int64_t k = 1; k <= 4000 && !completed; ++k) {
      failing.a.arm(k);
      try {
        step(batch);
        completed = true;  // fewer than k allocations: the step ran
      } catch (const ag::Error& e) {
        failing.a.disarm();
        INFO("allocation " << k << " failed in " << kPhaseNames[phase] << ": " << e.what());
        REQUIRE_THAT(e.what(), Catch::Contains("out of memory"));
        ++hits[phase];
        ++failures;
        REQUIRE(snapshot(*model, *opt, scaler) == before);
      }
    }
  }
  REQUIRE(completed);
  INFO(failures << " failed steps: forward " << hits[kForward] << ", backward " << hits[kBackward] << ", scaler.step "
                << hits[kScalerStep] << ", scaler.update " << hits[kScalerUpdate]);
  CHECK(hits[kForward] > 0);
  CHECK(hits[kBackward] > 0);
  if (!warm) CHECK(hits[kScalerStep] > 0);  // the first step makes the optimizer's state
  // The step that got its memory trained: the parameters moved.
  const Values after = snapshot(*model, *opt, scaler);
  bool moved = false;
  for (const auto& [name, v] : after)
    if (name.rfind("param.", 0) == 0 && v != before.at(name)) moved = true;
  CHECK(moved);
  // Out of memory halfway through the backward, then a smaller batch: it trains.
  const Values mid = snapshot(*model, *opt, scaler);
  {
    Installed failing(dev.type);
    int64_t k = 1;
    for (;; ++k) {
      failing.a.arm(k);
      try {
        step(batch);
        FAIL("the step never reached its backward");
      } catch (const ag::Error&) {
        failing.a.disarm();
        if (phase == kBackward) break;
      }
      REQUIRE(k < 4000);
    }
  }
  REQUIRE(snapshot(*model, *opt, scaler) == mid);
  const ag::Tensor loss = step(batch / 4);
  CHECK(std::isfinite(loss.item<double>()));
  CHECK(snapshot(*model, *opt, scaler) != mid);
}

}  // namespace

TEST_CASE("faults: out of memory at any allocation of an AMP step leaves parameters, optimizer and scaler as they "
          "were, on the cpu",
          "[faults][optim][amp]") {
  const ag::Device cpu(ag::DeviceType::CPU);
  SECTION("SGD with momentum, its first step (the state is made then)") { failed_steps_change_nothing(cpu, false, false); }
  SECTION("SGD with momentum, a later step") { failed_steps_change_nothing(cpu, true, false); }
  SECTION("AdamW, its first step") { failed_steps_change_nothing(cpu, false, true); }
  SECTION("AdamW, a later step") { failed_steps_change_nothing(cpu, true, true); }
  SECTION("SGD with two parameter groups, its first step") { failed_steps_change_nothing(cpu, false, false, true); }
}

TEST_CASE("faults: out of memory at any allocation of an AMP step leaves parameters, optimizer and scaler as they "
          "were, on cuda",
          "[faults][optim][amp][cuda]") {
  if (skip_without_cuda()) return;
  const ag::Device cuda(ag::DeviceType::CUDA, 0);
  SECTION("SGD with momentum, its first step") { failed_steps_change_nothing(cuda, false, false); }
  SECTION("SGD with momentum, a later step") { failed_steps_change_nothing(cuda, true, false); }
  SECTION("AdamW, its first step") { failed_steps_change_nothing(cuda, false, true); }
  SECTION("AdamW, a later step") { failed_steps_change_nothing(cuda, true, true); }
  SECTION("SGD with two parameter groups, its first step") { failed_steps_change_nothing(cuda, false, false, true); }
}
