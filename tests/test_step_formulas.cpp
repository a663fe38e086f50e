// AMP's own arithmetic (Note [Step formulas] in core/step_formulas.h): the scale-update rule, the
// unscale and inf check, and each optimizer's update are one formula each, so the CPU reference
// loops, the fast CPU loops and the CUDA kernels give the same bits; and the formulas are what
// PyTorch computes, to float32 rounding, against float64.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <functional>

#include <ampgrad/core/fused_kernels.h>
#include <ampgrad/core/step_formulas.h>

#include "common.h"

namespace ag = ampgrad;
namespace sf = ag::step_formulas;

namespace {

// The bytes of a tensor's values, for bitwise comparison.
std::vector<uint8_t> bytes_of(const ag::Tensor& t) {
  const ag::Tensor c = t.cpu().contiguous();
  std::vector<uint8_t> out(c.nbytes());
  std::memcpy(out.data(), c.data_ptr(), c.nbytes());
  return out;
}

// One optimizer step's tensors on a device: parameters (float32 masters or the parameters
// themselves), gradients, state, step counters, working copies, the scaler's flag and inverse.
struct Step {
  ag::FusedStep s;
  std::vector<ag::Tensor> a, b, c, steps;  // SGD: momentum in a; Adam: exp_avg, exp_avg_sq, max_exp_avg_sq
  // Everything the step writes, in order.
  std::vector<ag::Tensor> written() const {
    std::vector<ag::Tensor> all = s.params;
    for (const auto* v : {&s.working, &a, &b, &c, &steps})
      for (const ag::Tensor& t : *v)
        if (t.defined()) all.push_back(t);
    return all;
  }
};

// Draws a step: sizes of every shape a launch takes (4-element groups, tails, a large one), a
// gradient dtype, working copies of `copy` dtype (none when float32), a first step or a later one.
Step make_step(ag::Device dev, ag::DType grad_dtype, ag::DType copy, bool later, bool adam, bool amsgrad,
               double inv_scale, uint64_t seed) {
  ag::manual_seed(seed);
  Step st;
  const auto f32 = ag::TensorOptions(ag::kFloat32);
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{64}, int64_t{4099}, int64_t{70001}}) {
    st.s.params.push_back((ag::rand({n}, f32) - 0.5).to(dev));
    st.s.grads.push_back(((ag::randn({n}, f32) * 3.0) * (1.0 / inv_scale)).to(grad_dtype).to(dev));
    if (copy != ag::kFloat32) st.s.working.push_back(ag::zeros({n}, ag::TensorOptions(copy)).to(dev));
    st.a.push_back((ag::randn({n}, f32) * 0.1).to(dev));
    st.b.push_back((ag::rand({n}, f32) * 0.01).to(dev));
    if (amsgrad) st.c.push_back((ag::rand({n}, f32) * 0.02).to(dev));
    st.steps.push_back(ag::full({1}, later ? 41.0 : 0.0, f32).to(dev));
  }
  if (!adam) st.b.clear();
  st.s.found_inf = ag::zeros({}, f32).to(dev);
  st.s.inv_scale = ag::full({}, inv_scale, f32).to(dev);
  return st;
}

// The bytes a step wrote, run by `run` on `dev` from the draw `seed`.
std::vector<std::vector<uint8_t>> stepped(ag::Device dev, const std::function<void(Step&)>& run, ag::DType grad_dtype,
                                          ag::DType copy, bool later, bool adam, bool amsgrad, uint64_t seed) {
  Step st = make_step(dev, grad_dtype, copy, later, adam, amsgrad, 1.0 / 1024, seed);
  run(st);
  std::vector<std::vector<uint8_t>> out;
  for (const ag::Tensor& t : st.written()) out.push_back(bytes_of(t));
  return out;
}

struct Case {
  const char* name;
  bool adam;
  ag::SgdHyper sgd;
  ag::AdamHyper adam_h;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  ag::SgdHyper s;
  s.lr = 0.05;
  s.momentum = 0.9;
  out.push_back({"SGD momentum", false, s, {}});
  s.dampening = 0.1;
  s.weight_decay = 1e-2;
  out.push_back({"SGD momentum, dampening, weight decay", false, s, {}});
  ag::SgdHyper n;
  n.lr = 0.05;
  n.momentum = 0.8;
  n.nesterov = true;
  n.maximize = true;
  out.push_back({"SGD Nesterov, maximize", false, n, {}});
  ag::SgdHyper plain;
  plain.lr = 0.1;
  out.push_back({"SGD plain", false, plain, {}});
  ag::AdamHyper a;
  a.lr = 1e-3;
  out.push_back({"Adam", true, {}, a});
  a.weight_decay = 0.1;
  out.push_back({"Adam, L2 weight decay", true, {}, a});
  a.decoupled_weight_decay = true;
  a.beta2 = 0.95;
  out.push_back({"AdamW", true, {}, a});
  a.amsgrad = true;
  a.maximize = true;
  out.push_back({"AdamW amsgrad, maximize", true, {}, a});
  return out;
}

std::function<void(Step&)> runner(const Case& c, ag::Device dev, bool reference) {
  return [c, dev, reference](Step& st) {
    if (c.adam) {
      if (reference) ag::kernel::adam_step.reference(st.s, st.a, st.b, st.c, st.steps, c.adam_h);
      else ag::kernel::adam_step(dev, st.s, st.a, st.b, st.c, st.steps, c.adam_h);
    } else {
      if (reference) ag::kernel::sgd_step.reference(st.s, st.a, st.steps, c.sgd);
      else ag::kernel::sgd_step(dev, st.s, st.a, st.steps, c.sgd);
    }
  };
}

}  // namespace

TEST_CASE("step formulas: the fast CPU optimizer steps equal the reference loops bit for bit", "[optim]") {
  const ag::Device cpu(ag::kCPU);
  for (const Case& c : cases()) {
    for (ag::DType g : {ag::kFloat32, ag::kFloat16, ag::kBFloat16}) {
      for (ag::DType copy : {ag::kFloat32, ag::kFloat16, ag::kBFloat16}) {
        for (bool later : {false, true}) {
          CAPTURE(c.name, ag::dtype_name(g), ag::dtype_name(copy), later);
          const bool ams = c.adam && c.adam_h.amsgrad;
          const auto ref = stepped(cpu, runner(c, cpu, true), g, copy, later, c.adam, ams, 7);
          const auto fast = stepped(cpu, runner(c, cpu, false), g, copy, later, c.adam, ams, 7);
          REQUIRE(ref.size() == fast.size());
          for (size_t i = 0; i < ref.size(); ++i) {
            CAPTURE(i);
            CHECK(ref[i] == fast[i]);
          }
        }
      }
    }
  }
}

TEST_CASE("step formulas: CUDA's optimizer steps equal the CPU reference bit for bit", "[optim][cuda]") {
  if (skip_without_cuda()) return;
  const ag::Device cpu(ag::kCPU), cuda(ag::kCUDA);
  for (const Case& c : cases()) {
    for (ag::DType g : {ag::kFloat32, ag::kFloat16, ag::kBFloat16}) {
      for (ag::DType copy : {ag::kFloat32, ag::kFloat16, ag::kBFloat16}) {
        if (copy != ag::kFloat32 && g != ag::kFloat32 && copy != g) continue;  // a launch takes one working dtype
        for (bool later : {false, true}) {
          CAPTURE(c.name, ag::dtype_name(g), ag::dtype_name(copy), later);
          const bool ams = c.adam && c.adam_h.amsgrad;
          const auto ref = stepped(cpu, runner(c, cpu, true), g, copy, later, c.adam, ams, 11);
          const auto got = stepped(cuda, runner(c, cuda, false), g, copy, later, c.adam, ams, 11);
          REQUIRE(ref.size() == got.size());
          for (size_t i = 0; i < ref.size(); ++i) {
            CAPTURE(i);
            CHECK(ref[i] == got[i]);
          }
        }
      }
    }
  }
}

// One Adam(W) step of float32 parameters against the same formula in float64 (PyTorch's
// torch.optim.AdamW, with std::pow for the bias corrections): float32 rounding apart.
TEST_CASE("step formulas: AdamW is PyTorch's AdamW to float32 rounding", "[optim]") {
  ag::AdamHyper h;
  h.lr = 3e-3;
  h.beta2 = 0.95;
  h.weight_decay = 0.1;
  h.decoupled_weight_decay = true;
  const int64_t step = 17;
  const auto c = sf::adam_corrections<float>(h, step);
  ag::manual_seed(3);
  const std::vector<double> gs = ag::randn({200}).to_vector<double>(), xs = ag::randn({200}).to_vector<double>(),
                            ms = (ag::randn({200}) * 0.1).to_vector<double>(), vs = (ag::rand({200}) * 0.01).to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < gs.size(); ++i) {
    float m = static_cast<float>(ms[i]), v = static_cast<float>(vs[i]), vmax = 0;
    const float got = sf::adam_update<float>(static_cast<float>(gs[i]), static_cast<float>(xs[i]), m, v, vmax, h, c,
                                             1.0f);
    // float64, with the inputs as float32 holds them.
    const double g = static_cast<float>(gs[i]), x0 = static_cast<float>(xs[i]);
    const double x = x0 * (1 - h.lr * h.weight_decay);
    const double m64 = h.beta1 * static_cast<float>(ms[i]) + (1 - h.beta1) * g;
    const double v64 = h.beta2 * static_cast<float>(vs[i]) + (1 - h.beta2) * g * g;
    const double bc1 = 1 - std::pow(h.beta1, step), bc2 = 1 - std::pow(h.beta2, step);
    const double want = x - h.lr / bc1 * m64 / (std::sqrt(v64) / std::sqrt(bc2) + h.eps);
    // A few roundings of float32 at the parameter's size, and a little of the update's own.
    const double allowed = 4 * std::ldexp(1.0, -24) * std::abs(want) + 1e-5 * std::abs(x0 - want);
    worst = std::max(worst, std::abs(got - want) / allowed);
  }
  CHECK(worst <= 1.0);
  CHECK(worst > 0.0);  // float32 does round somewhere: the comparison is not vacuous
}

// Every branch of the rule, against values worked out by hand.
TEST_CASE("step formulas: the scale update's every branch", "[amp]") {
  ag::ScaleRule r;
  r.growth_interval = 3;
  r.hysteresis = 2;
  r.min_scale = 16;
  r.max_scale = 1e6;
  sf::ScaleState s{1024.0f, 0, 2};
  s = sf::next_scale_state(s, true, r);  // first overflow: tolerated (hysteresis 2)
  CHECK(s.scale == 1024.0f);
  CHECK(s.hysteresis_left == 1);
  s = sf::next_scale_state(s, true, r);  // second: back off, hysteresis reset
  CHECK(s.scale == 512.0f);
  CHECK(s.hysteresis_left == 2);
  CHECK(s.growth_tracker == 0);
  s = sf::next_scale_state(s, false, r);
  s = sf::next_scale_state(s, false, r);
  CHECK(s.scale == 512.0f);
  CHECK(s.growth_tracker == 2);
  s = sf::next_scale_state(s, false, r);  // the third clean step grows
  CHECK(s.scale == 1024.0f);
  CHECK(s.growth_tracker == 0);
  sf::ScaleState low{20.0f, 0, 1};
  CHECK(sf::next_scale_state(low, true, r).scale == 16.0f);  // backoff stops at min_scale
  sf::ScaleState high{8e5f, 2, 2};
  CHECK(sf::next_scale_state(high, false, r).scale == 1e6f);  // growth stops at max_scale
  ag::ScaleRule unbounded;
  unbounded.growth_interval = 1;
  sf::ScaleState top{3e38f, 0, 1};
  CHECK(sf::next_scale_state(top, false, unbounded).scale == 3e38f);  // never grows into inf
  bool found = false;
  CHECK(sf::unscale(8.0f, 0.25f, found) == 2.0f);
  CHECK_FALSE(found);
  sf::unscale(std::numeric_limits<float>::quiet_NaN(), 1.0f, found);
  CHECK(found);
}

// The update kernel on each device: the rule's state, the records, 1 / scale; equal on CPU and CUDA.
TEST_CASE("step formulas: the scale update kernel is the rule, on every device", "[amp][cuda]") {
  std::vector<ag::Device> devs{ag::Device(ag::kCPU)};
  if (ag::cuda::is_available()) devs.emplace_back(ag::kCUDA);
  std::vector<std::vector<double>> per_device;
  for (ag::Device dev : devs) {
    INFO(dev.str());
    const auto f32 = ag::TensorOptions(ag::kFloat32).device(dev), i32 = ag::TensorOptions(ag::kInt32).device(dev);
    ag::ScaleUpdate u;
    u.scale = ag::full({}, 65536.0, f32);
    u.growth_tracker = ag::zeros({}, i32);
    u.hysteresis_left = ag::full({}, 1.0, i32);
    u.rule.growth_interval = 2;
    u.rec.inv_scale = ag::empty({}, f32);
    u.rec.clear_found = true;
    std::vector<double> trace;
    sf::ScaleState want{65536.0f, 0, 1};
    for (bool found : {false, false, true, false, true, false, false}) {
      ag::Tensor flag = ag::full({}, found ? 1.0 : 0.0, f32);
      u.rec.last_scale = ag::empty({}, f32);
      u.rec.last_found = ag::empty({}, f32);
      ag::kernel::amp_update_scale(dev, u, flag);
      want = sf::next_scale_state(want, found, u.rule);
      CHECK(u.scale.item<double>() == want.scale);
      CHECK(u.growth_tracker.item<double>() == want.growth_tracker);
      CHECK(u.rec.inv_scale.item<double>() == static_cast<double>(1.0f / want.scale));
      CHECK(u.rec.last_found.item<double>() == (found ? 1 : 0));
      CHECK(flag.item<double>() == 0);  // cleared for the next step
      trace.push_back(u.scale.item<double>());
      trace.push_back(u.rec.inv_scale.item<double>());
    }
    per_device.push_back(trace);
  }
  for (size_t d = 1; d < per_device.size(); ++d) CHECK(per_device[d] == per_device[0]);
}

// The inf check and unscale (scaler.unscale_) on each device, float16, bfloat16, float32 and
// float64 gradients: the same bits, the same flag.
TEST_CASE("step formulas: unscale and the inf check agree on every device", "[amp][cuda]") {
  if (skip_without_cuda()) return;
  for (ag::DType dt : {ag::kFloat16, ag::kBFloat16, ag::kFloat32, ag::kFloat64}) {
    for (bool bad : {false, true}) {
      CAPTURE(ag::dtype_name(dt), bad);
      std::vector<std::vector<uint8_t>> results;
      std::vector<double> flags;
      for (ag::Device dev : {ag::Device(ag::kCPU), ag::Device(ag::kCUDA)}) {
        ag::manual_seed(4);
        std::vector<ag::Tensor> grads;
        for (int64_t n : {int64_t{3}, int64_t{4096}, int64_t{5001}})
          grads.push_back((ag::randn({n}) * 300.0).to(dt).to(dev));
        if (bad) grads[2].narrow(0, 5000, 1).fill_(INFINITY);
        const ag::Tensor flag = ag::zeros({}, ag::TensorOptions(ag::kFloat32).device(dev));
        const ag::Tensor inv = ag::full({}, 1.0 / 3.0, ag::TensorOptions(ag::kFloat32).device(dev));
        ag::kernel::amp_check_and_unscale(dev, grads, flag, inv, /*write_back=*/true);
        flags.push_back(flag.item<double>());
        std::vector<uint8_t> all;
        for (const ag::Tensor& g : grads) {
          const auto b = bytes_of(g);
          all.insert(all.end(), b.begin(), b.end());
        }
        results.push_back(all);
      }
      CHECK(flags[0] == (bad ? 1 : 0));
      CHECK(flags[1] == flags[0]);
      CHECK(results[1] == results[0]);
    }
  }
}
