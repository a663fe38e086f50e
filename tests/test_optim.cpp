// Optimizers and GradScaler: the seed, PyTorch's scaling test, the update state machine,
// inf/NaN detection, state_dict round trips, fused vs reference, master weights.
#include <functional>

#include "common.h"

namespace {

std::vector<ag::Device> devices() {
  std::vector<ag::Device> d{ag::Device(ag::kCPU)};
  if (ag::cuda::is_available()) d.emplace_back(ag::kCUDA);
  return d;
}

using OptFactory = std::function<std::unique_ptr<ag::optim::Optimizer>(std::vector<ag::Tensor>)>;

std::vector<std::pair<std::string, OptFactory>> optimizers() {
  return {
      {"SGD", [](std::vector<ag::Tensor> p) {
         return std::make_unique<ag::optim::SGD>(p, ag::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-3));
       }},
      {"SGD nesterov", [](std::vector<ag::Tensor> p) {
         return std::make_unique<ag::optim::SGD>(p, ag::optim::SGDOptions(0.05).momentum(0.9).nesterov(true));
       }},
      {"Adam", [](std::vector<ag::Tensor> p) {
         return std::make_unique<ag::optim::Adam>(p, ag::optim::AdamOptions(1e-2).weight_decay(1e-3));
       }},
      {"Adam amsgrad", [](std::vector<ag::Tensor> p) {
         return std::make_unique<ag::optim::Adam>(p, ag::optim::AdamOptions(1e-2).amsgrad(true));
       }},
      {"AdamW", [](std::vector<ag::Tensor> p) { return std::make_unique<ag::optim::AdamW>(p, ag::optim::AdamWOptions(1e-2)); }},
  };
}

// A small MLP's parameters and a loss over fixed data, reproducible from a seed.
struct Model {
  std::vector<ag::Tensor> params;
  ag::Tensor x, y;
  explicit Model(ag::Device dev, uint64_t seed = 1) {
    ag::manual_seed(seed);
    auto opt = ag::TensorOptions().device(dev);
    params = {(ag::rand({8, 4}, opt) - 0.5).detach().requires_grad_(), (ag::rand({8}, opt) - 0.5).detach().requires_grad_(),
              (ag::rand({3, 8}, opt) - 0.5).detach().requires_grad_()};
    x = ag::randn({16, 4}, opt);
    y = ag::rand({16, 3}, opt);
  }
  ag::Tensor loss() const {
    ag::Tensor h = ag::tanh(ag::linear(x, params[0], params[1]));
    return ag::mean(ag::pow(ag::linear(h, params[2]) - y, 2));
  }
};

std::vector<double> values(const std::vector<ag::Tensor>& ts) {
  std::vector<double> all;
  for (const auto& t : ts) {
    auto v = t.to_vector<double>();
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

void check_all_close(const std::vector<double>& got, const std::vector<double>& want, double rtol, double atol) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::fabs(got[i] - want[i]) - rtol * std::fabs(want[i]));
  CHECK(worst <= atol);
}

}  // namespace

TEST_CASE("the seed: p^2 + 3 through the scaler and SGD", "[optim][cuda]") {
  for (ag::Device dev : devices()) {
    INFO(dev.str());
    ag::Tensor p = ag::tensor(2.f, ag::TensorOptions().device(dev)).requires_grad_();
    ag::optim::SGD opt({p}, ag::optim::SGDOptions(0.1).momentum(0));
    ag::amp::GradScaler scaler;
    ag::Tensor result = p.pow(2) + 3;
    scaler.scale(result).backward();
    CHECK(scaler.get_scale() == 65536);
    CHECK(p.grad().item<float>() == 262144);
    scaler.step(opt);
    CHECK(p.item<float>() == Approx(1.6f).epsilon(1e-6));
    scaler.update();
    CHECK(scaler.get_scale() == 65536);

    ag::Tensor q = ag::tensor(2.f, ag::TensorOptions().device(dev)).requires_grad_();
    ag::optim::SGD plain({q}, ag::optim::SGDOptions(0.1));
    (q.pow(2) + 3).backward();
    CHECK(q.grad().item<float>() == 4);
    plain.step();
    CHECK(q.item<float>() == Approx(1.6f).epsilon(1e-6));
  }
}

TEST_CASE("scaled training with an injected inf equals unscaled training that skips that step", "[optim][cuda]") {
  // Port of PyTorch's test_grad_scaling_autocast / _run_scaling_case: growth_interval 3,
  // inf injected at step 4 of 10.
  const int steps = 10, bad_step = 4;
  for (ag::Device dev : devices()) {
    for (auto& [name, make] : optimizers()) {
      INFO(name << " on " << dev.str());
      Model scaled(dev), plain(dev);
      auto opt_s = make(scaled.params);
      auto opt_p = make(plain.params);
      ag::amp::GradScaler scaler(ag::amp::GradScalerOptions().init_scale(128).growth_interval(3));
      scaler.inject_fault(scaled.params[2], bad_step, INFINITY, 5);
      for (int i = 0; i < steps; ++i) {
        opt_s->zero_grad();
        scaler.scale(scaled.loss()).backward();
        scaler.step(*opt_s);
        scaler.update();
        if (i != bad_step) {
          opt_p->zero_grad();
          plain.loss().backward();
          opt_p->step();
        }
      }
      check_all_close(values(scaled.params), values(plain.params), 1e-5, 1e-6);
      // Optimizer state agrees too.
      auto sd_s = opt_s->state_dict(), sd_p = opt_p->state_dict();
      REQUIRE(sd_s.size() == sd_p.size());
      for (const auto& [k, v] : sd_s) {
        INFO(k);
        check_all_close(v.to_vector<double>(), sd_p.at(k).to_vector<double>(), 1e-5, 1e-6);
      }
      // Clean steps that completed an interval: steps 0-2 (grow), 3 clean, 4 inf (backoff,
      // tracker reset), 5-7 (grow), 8-9 clean: 128 * 2 * 0.5 * 2.
      CHECK(scaler.get_scale() == 128.0 * 2 * 0.5 * 2);
    }
  }
}

TEST_CASE("the scale update state machine", "[optim][cuda]") {
  for (ag::Device dev : devices()) {
    INFO(dev.str());
    auto run = [&](ag::amp::GradScalerOptions o, const std::vector<double>& bad_values) {
      // One parameter, one step per entry: 0 = clean, inf or NaN = that value injected.
      ag::Tensor p = ag::tensor({1.f, 2.f, 3.f}, ag::TensorOptions().device(dev)).requires_grad_();
      ag::optim::SGD opt({p}, ag::optim::SGDOptions(0.0));
      ag::amp::GradScaler scaler(o);
      std::vector<double> scales;
      for (size_t i = 0; i < bad_values.size(); ++i) {
        if (bad_values[i] != 0) scaler.inject_fault(p, static_cast<int64_t>(i), bad_values[i], 1);
        opt.zero_grad();
        scaler.scale((p * p).sum()).backward();
        scaler.step(opt);
        scaler.update();
        scales.push_back(scaler.get_scale());
      }
      return scales;
    };
    using V = std::vector<double>;
    auto base = ag::amp::GradScalerOptions().init_scale(16).growth_interval(2);
    SECTION("growth after growth_interval clean steps, backoff on inf and on NaN, tracker reset") {
      CHECK(run(base, {0, 0, 0, INFINITY, 0, NAN, 0, 0}) == V{16, 32, 32, 16, 16, 8, 8, 16});
    }
    SECTION("hysteresis: back off only after N overflows in a row of updates") {
      CHECK(run(ag::amp::GradScalerOptions(base).hysteresis(2).growth_interval(100),
                {INFINITY, INFINITY, INFINITY, INFINITY}) == V{16, 8, 8, 4});
    }
    SECTION("min_scale and max_scale bound the scale") {
      CHECK(run(ag::amp::GradScalerOptions(base).min_scale(4), {INFINITY, INFINITY, INFINITY}) == V{8, 4, 4});
      CHECK(run(ag::amp::GradScalerOptions(base).max_scale(40).growth_interval(1), {0, 0, 0}) == V{32, 40, 40});
    }
    SECTION("update(new_scale) sets the scale") {
      ag::Tensor p = ag::tensor({1.f}, ag::TensorOptions().device(dev)).requires_grad_();
      ag::optim::SGD opt({p}, ag::optim::SGDOptions(0.1));
      ag::amp::GradScaler scaler;
      scaler.scale(p.sum()).backward();
      scaler.step(opt);
      scaler.update(1024.0);
      CHECK(scaler.get_scale() == 1024);
    }
  }
}

TEST_CASE("inf and NaN are found anywhere; 65504 is finite", "[optim][cuda]") {
  for (ag::Device dev : devices()) {
    for (ag::DType dt : {ag::kFloat32, ag::kFloat16}) {
      INFO(dev.str() << " " << ag::dtype_name(dt));
      auto opt = ag::TensorOptions(dt).device(dev);
      // Several tensors, the largest past a typical multi-tensor chunk (65536 elements); the
      // second set's sizes are multiples of 4, so the step reads 4 elements at a time.
      for (const std::vector<int64_t>& sizes : {std::vector<int64_t>{1, 7, 70001, 3}, {4, 8, 70004, 12}}) {
        for (double bad : {INFINITY, -INFINITY, NAN}) {
          for (size_t t = 0; t < sizes.size(); ++t) {
            for (int64_t where : {int64_t(0), sizes[t] / 2, sizes[t] - 1, int64_t(65535), int64_t(65536)}) {
              if (where >= sizes[t]) continue;
              std::vector<ag::Tensor> ps;
              for (int64_t n : sizes) {
                ag::Tensor p = (ag::rand({n}, opt) + 0.5).detach().requires_grad_();
                p.set_grad((ag::rand({n}, opt) + 0.5).detach());
                ps.push_back(p);
              }
              // 65504 (float16's largest finite) everywhere else in this tensor's first element.
              ps[(t + 1) % sizes.size()].grad().narrow(0, 0, 1).fill_(65504.0);
              ps[t].grad().narrow(0, where, 1).fill_(bad);
              std::vector<double> before = values(ps);
              // The check inside the step's launch, and as a launch of its own.
              for (bool fold : {true, false}) {
                ag::optim::SGD sgd(ps, ag::optim::SGDOptions(0.1));
                ag::amp::GradScaler scaler(ag::amp::GradScalerOptions().init_scale(1));
                scaler.scale(ps[0].sum() * 0);  // places the scaler on the device
                if (fold) {
                  scaler.step_and_update(sgd);
                } else {
                  scaler.step(sgd);
                  scaler.update();
                }
                INFO("bad value " << bad << " in tensor " << t << " at " << where << (fold ? ", folded" : ""));
                CHECK(scaler.get_scale() == 0.5);
                CHECK(values(ps) == before);  // the step was skipped
              }
            }
          }
        }
      }
      // All finite, 65504 included: the step is taken and the scale does not back off.
      ag::Tensor p = ag::full({5}, 1.0, opt).requires_grad_();
      p.set_grad(ag::full({5}, 65504.0, opt));
      ag::optim::SGD sgd({p}, ag::optim::SGDOptions(1e-6));
      ag::amp::GradScaler scaler(ag::amp::GradScalerOptions().init_scale(1));
      scaler.scale(p.sum() * 0);
      scaler.step(sgd);
      scaler.update();
      CHECK(scaler.get_scale() == 1);
      CHECK(p.to_vector<double>()[0] != 1.0);
    }
  }
}

TEST_CASE("unscale_ then clip, and misuse errors", "[optim]") {
  ag::Tensor p = ag::tensor({3.f, 4.f}).requires_grad_();
  ag::optim::SGD opt({p}, ag::optim::SGDOptions(1.0));
  ag::amp::GradScaler scaler(ag::amp::GradScalerOptions().init_scale(1024));
  scaler.scale((p * p).sum() * 0.5).backward();  // grad = p = [3, 4], scaled by 1024
  scaler.unscale_(opt);
  CHECK(p.grad().to_vector<float>() == std::vector<float>{3, 4});
  ag::Tensor norm = ag::optim::clip_grad_norm_({p}, 1.0);
  CHECK(norm.item<double>() == Approx(5.0));
  auto g = p.grad().to_vector<double>();
  CHECK(g[0] == Approx(0.6).epsilon(1e-5));
  CHECK(g[1] == Approx(0.8).epsilon(1e-5));
  CHECK_THROWS_WITH(scaler.unscale_(opt), Catch::Contains("unscale_() has already been called"));
  scaler.step(opt);
  CHECK_THROWS_WITH(scaler.step(opt), Catch::Contains("step() has already been called"));
  // After step (without an unscale_ of the user's), PyTorch's words: it is being called after step().
  CHECK_THROWS_WITH(scaler.unscale_(opt), Catch::Contains("unscale_() is being called after step()"));
  scaler.update();
  CHECK_THROWS_WITH(scaler.update(), Catch::Contains("no inf checks were recorded"));
  CHECK(p.to_vector<double>()[0] == Approx(3 - 0.6).epsilon(1e-5));
}

// torch.optim's checks, each naming the option and the value, at construction and before a step
// whose group was changed since; a parameter given twice is refused (it would be stepped twice).
TEST_CASE("optimizer options are checked as PyTorch checks them", "[optim]") {
  ag::Tensor w = ag::randn({3, 2}).requires_grad_(), b = ag::randn({3}).requires_grad_();
  using ag::optim::AdamOptions;
  using ag::optim::AdamWOptions;
  using ag::optim::SGDOptions;
  auto sgd = [&](SGDOptions o) { return error_message([&] { ag::optim::SGD opt({w, b}, o); }); };
  auto adam = [&](AdamOptions o) { return error_message([&] { ag::optim::Adam opt({w, b}, o); }); };
  auto adamw = [&](AdamWOptions o) { return error_message([&] { ag::optim::AdamW opt({w, b}, o); }); };
  CHECK_THAT(sgd(SGDOptions(-0.1)), Catch::Contains("SGD: invalid learning rate: -0.1"));
  CHECK_THAT(sgd(SGDOptions(0.1).momentum(-0.5)), Catch::Contains("SGD: invalid momentum value: -0.5"));
  CHECK_THAT(sgd(SGDOptions(0.1).weight_decay(-1e-4)), Catch::Contains("SGD: invalid weight_decay value: -0.0001"));
  CHECK_THAT(sgd(SGDOptions(0.1).momentum(0.9).dampening(0.1).nesterov(true)),
             Catch::Contains("Nesterov momentum requires a momentum and zero dampening (momentum 0.9, dampening 0.1)"));
  CHECK_THAT(adam(AdamOptions(-1e-3)), Catch::Contains("Adam: invalid learning rate: -0.001"));
  CHECK_THAT(adam(AdamOptions().eps(-1e-8)), Catch::Contains("Adam: invalid epsilon value: -1e-08"));
  CHECK_THAT(adam(AdamOptions().betas({1.0, 0.999})), Catch::Contains("Adam: invalid beta parameter at index 0: 1"));
  CHECK_THAT(adamw(AdamWOptions().betas({0.9, -0.1})), Catch::Contains("AdamW: invalid beta parameter at index 1: -0.1"));
  CHECK_THAT(adamw(AdamWOptions().weight_decay(-0.1)), Catch::Contains("AdamW: invalid weight_decay value: -0.1"));
  CHECK_NOTHROW(ag::optim::SGD({w, b}, SGDOptions(0.0).momentum(0.9).nesterov(true)));  // lr 0 and Nesterov are fine
  // Changed after construction: refused before the step writes anything.
  ag::optim::SGD opt({w, b}, SGDOptions(0.1));
  w.set_grad(ag::ones({3, 2}));
  const std::vector<float> before = w.to_vector<float>();
  opt.options<SGDOptions>(0).weight_decay(-1.0);
  CHECK_THROWS_WITH(opt.step(), Catch::Contains("SGD: invalid weight_decay value: -1"));
  CHECK(w.to_vector<float>() == before);
  // The same parameter twice, in two groups or in one.
  CHECK_THAT(error_message([&] { ag::optim::SGD o(std::vector<std::vector<ag::Tensor>>{{w, b}, {w}}, SGDOptions(0.1)); }),
             Catch::Contains("some parameters appear more than once in the parameter groups") &&
                 Catch::Contains("again in group 1"));
  CHECK_THAT(error_message([&] { ag::optim::Adam o({w, b, b}); }), Catch::Contains("appear more than once"));
}

TEST_CASE("several optimizers and losses share one scaler", "[optim]") {
  Model a(ag::Device(ag::kCPU), 1), b(ag::Device(ag::kCPU), 2);
  ag::optim::SGD oa(a.params, ag::optim::SGDOptions(0.1)), ob(b.params, ag::optim::SGDOptions(0.1));
  ag::amp::GradScaler scaler(ag::amp::GradScalerOptions().init_scale(8).growth_interval(1));
  scaler.inject_fault(b.params[0], 0, NAN);
  auto before_a = values(a.params), before_b = values(b.params);
  scaler.scale(a.loss() + b.loss()).backward();
  scaler.step(oa);
  scaler.step(ob);
  scaler.update();
  CHECK(values(a.params) != before_a);  // a's grads were finite: its step ran
  CHECK(values(b.params) == before_b);  // b's had a NaN: skipped
  CHECK(scaler.get_scale() == 4);       // any inf backs off the shared scale
  // update() cleared both flags: a clean step runs both optimizers and grows the scale.
  oa.zero_grad();
  ob.zero_grad();
  scaler.scale(a.loss() + b.loss()).backward();
  scaler.step(oa);
  scaler.step(ob);
  scaler.update();
  CHECK(values(b.params) != before_b);
  CHECK(scaler.get_scale() == 8);
}

TEST_CASE("the scaler's device state: flags cleared by update, 1/scale kept, decisions are snapshots",
          "[optim][cuda]") {
  for (ag::Device dev : devices()) {
    INFO(dev.str());
    ag::Tensor p = ag::tensor({1.f, 2.f, 3.f}, ag::TensorOptions().device(dev)).requires_grad_();
    ag::optim::SGD opt({p}, ag::optim::SGDOptions(0.25));
    ag::amp::GradScaler scaler(ag::amp::GradScalerOptions().init_scale(16).growth_interval(1000));
    scaler.inject_fault(p, 0, INFINITY, 2);
    auto step = [&] {
      opt.zero_grad();
      scaler.scale((p * p).sum()).backward();
      scaler.step(opt);
      scaler.update();
    };
    step();  // inf: skipped, scale 16 -> 8
    const ag::Tensor found0 = scaler.last_found_inf();
    CHECK(scaler.last_decision().scale == 16);
    CHECK(found0.item<double>() == 1);
    CHECK(p.to_vector<double>() == std::vector<double>{1, 2, 3});
    step();  // clean: the flag was cleared, so this step runs with the new scale's inverse
    CHECK(found0.item<double>() == 1);  // the first decision's handle is unchanged
    CHECK(scaler.last_found_inf().item<double>() == 0);
    CHECK(scaler.last_decision().scale == 8);
    check_close(p, {0.5, 1, 1.5}, 0, 0);  // p - 0.25 * 2p
    // unscale_ divides by the scale update() left, here and after update(new_scale).
    for (double next : {0.0, 1024.0}) {
      opt.zero_grad();
      scaler.scale((p * p).sum()).backward();
      scaler.unscale_(opt);
      const std::vector<double> pv = p.to_vector<double>();
      check_close(p.grad(), {2 * pv[0], 2 * pv[1], 2 * pv[2]}, 0, 0);
      scaler.step(opt);
      if (next > 0) scaler.update(next);
      else scaler.update();
    }
    CHECK(scaler.get_scale() == 1024);
    CHECK(scaler.last_found_inf().item<double>() == 0);
  }
}

// Installs a found-inf reducer for its scope.
struct ReducerGuard {
  explicit ReducerGuard(std::function<void(const ag::Tensor&)> r) { ag::amp::set_found_inf_reducer(std::move(r)); }
  ~ReducerGuard() { ag::amp::set_found_inf_reducer(nullptr); }
};

// Note [One-launch scaled step]: step_and_update, which runs the inf check and the scale update
// in the optimizer's launch where it can, gives the results of step() then update(). Each
// scenario runs both ways; parameters, every optimizer's state, scales and recorded flags agree
// bitwise. On CUDA the tensors are large enough for many chunks per tensor (Note [Chunks] in
// cuda/fused.cu), 4-element loads where the sizes allow, and faults at their ends.
TEST_CASE("step_and_update gives the results of step() then update()", "[optim][cuda]") {
  struct Trace {
    std::vector<double> params, scales, found, growth, hysteresis;
    std::vector<ag::optim::StateDict> states;
  };
  const std::vector<std::string> scenarios{
      "step",           "odd sizes",          "over 2^20 elements",     "unscale_ and clip", "two optimizers",
      "second optimizer joins", "clip the second optimizer only", "update(new_scale)", "state_dict round trip",
      "found-inf reducer", "70 tensors",       "two dtypes",             "master weights"};
  for (ag::Device dev : devices()) {
    const bool big = dev.is_cuda();
    for (auto& [name, make] : optimizers()) {
      for (const std::string& scenario : scenarios) {
        if (scenario == "over 2^20 elements" && !big) continue;
        INFO(name << " on " << dev.str() << ": " << scenario);
        auto run = [&](bool together) {
          ag::manual_seed(5);
          std::vector<int64_t> sizes = big ? std::vector<int64_t>{300000, 12, 70000, 8} : std::vector<int64_t>{3000, 12, 700, 8};
          if (scenario == "odd sizes") sizes = {299999, 7, 70001, 3};
          if (scenario == "over 2^20 elements") sizes = {600000, 12, 600000, 8};
          if (scenario == "70 tensors") {  // over a launch's 64: two launches, the check and update apart
            sizes.clear();
            for (int64_t k = 0; k < 70; ++k) sizes.push_back(k % 5 * 9 + 3);
          }
          std::vector<ag::Tensor> params, xs;
          for (size_t k = 0; k < sizes.size(); ++k) {
            const bool half = scenario == "master weights" || (scenario == "two dtypes" && k % 2);
            const auto opt = ag::TensorOptions(half ? ag::kFloat16 : ag::kFloat32).device(dev);
            params.push_back((ag::rand({sizes[k]}, opt) - 0.5).detach().requires_grad_());
            xs.push_back(ag::rand({sizes[k]}, opt) + 0.5);
          }
          auto loss_of = [&](size_t from, size_t to) {
            ag::Tensor l;
            for (size_t k = from; k < to; ++k) {
              ag::Tensor t = (ag::tanh(params[k]) * xs[k]).sum().to(ag::kFloat32);
              l = l.defined() ? l + t : t;
            }
            return l;
          };
          std::vector<std::unique_ptr<ag::optim::Optimizer>> opts;
          const bool split = scenario == "two optimizers" || scenario == "second optimizer joins" ||
                             scenario == "clip the second optimizer only";
          if (split) {
            opts.push_back(make({params[0], params[1]}));
            opts.push_back(make({params[2], params[3]}));
          } else {
            opts.push_back(make(params));
          }
          if (scenario == "master weights") opts[0]->use_master_weights();
          ag::amp::GradScaler scaler(ag::amp::GradScalerOptions().init_scale(512).growth_interval(2).hysteresis(2));
          scaler.inject_fault(params[1], 2, INFINITY, 1);
          scaler.inject_fault(params.back(), 3, NAN, 0);
          scaler.inject_fault(params[0], 4, INFINITY, params[0].numel() - 1);
          scaler.inject_fault(params[2], 6, -INFINITY, params[2].numel() / 2);
          int step = 0;
          std::unique_ptr<ReducerGuard> reducer;
          if (scenario == "found-inf reducer")  // another rank overflowed at step 5
            reducer = std::make_unique<ReducerGuard>([&](const ag::Tensor& f) {
              if (step == 5) ag::Tensor(f).fill_(1.0);
            });
          // The iteration's last step: with update() after it, or together.
          auto last_step = [&](ag::optim::Optimizer& o) {
            if (scenario == "update(new_scale)" && step % 3 == 1) {
              scaler.step(o);
              scaler.update(1024.0 * step);
            } else if (together) {
              scaler.step_and_update(o);
            } else {
              scaler.step(o);
              scaler.update();
            }
          };
          Trace tr;
          for (; step < 9; ++step) {
            for (auto& o : opts) o->zero_grad();
            // The second optimizer joins at step 4, after single-optimizer iterations.
            const bool joins = scenario == "second optimizer joins" || scenario == "clip the second optimizer only";
            if (split && (!joins || step >= 4)) {
              // One model after the other, as a GAN trains: the second loss is scaled and
              // back-propagated after the first optimizer's step.
              scaler.scale(loss_of(0, 2)).backward();
              scaler.step(*opts[0]);
              scaler.scale(loss_of(2, 4)).backward();
              if (scenario == "clip the second optimizer only") {
                scaler.unscale_(*opts[1]);
                ag::optim::clip_grad_norm_(opts[1]->params(), 0.5);
              }
              last_step(*opts[1]);  // not alone this iteration: step() then update()
            } else {
              scaler.scale(split ? loss_of(0, 2) : loss_of(0, params.size())).backward();
              if (scenario == "unscale_ and clip") {
                scaler.unscale_(*opts[0]);
                ag::optim::clip_grad_norm_(opts[0]->params(), 0.5);
              }
              last_step(*opts[0]);
            }
            const ag::optim::StateDict sd = scaler.state_dict();
            if (scenario == "state_dict round trip" && step % 2) scaler.load_state_dict(sd);
            tr.scales.push_back(scaler.get_scale());
            tr.growth.push_back(sd.at("growth_tracker").item<double>());
            tr.hysteresis.push_back(sd.at("hysteresis_left").item<double>());
            tr.found.push_back(scaler.last_found_inf().item<double>());
            CHECK(scaler.last_decision().found_inf == (tr.found.back() != 0));
          }
          tr.params = values(params);
          for (auto& o : opts) tr.states.push_back(o->state_dict());
          return tr;
        };
        const Trace together = run(true), apart = run(false);
        CHECK(together.params == apart.params);
        CHECK(together.scales == apart.scales);
        CHECK(together.found == apart.found);
        CHECK(together.growth == apart.growth);
        CHECK(together.hysteresis == apart.hysteresis);
        REQUIRE(together.states.size() == apart.states.size());
        for (size_t o = 0; o < together.states.size(); ++o) {
          REQUIRE(together.states[o].size() == apart.states[o].size());
          for (const auto& [k, v] : together.states[o]) {
            INFO("optimizer " << o << ": " << k);
            CHECK(v.to_vector<double>() == apart.states[o].at(k).to_vector<double>());
          }
        }
        // Steps 2, 3, 4 and 6 carried an inf or a NaN (step 5 too, with the reducer; step 3's
        // NaN went to a parameter without a gradient yet when the second optimizer joins).
        const double skipped = std::count(together.found.begin(), together.found.end(), 1.0);
        const bool joins = scenario == "second optimizer joins" || scenario == "clip the second optimizer only";
        CHECK(skipped == (scenario == "found-inf reducer" ? 5 : joins ? 3 : 4));
      }
    }
  }
}

TEST_CASE("state_dict round trips mid-run continue identically", "[optim][cuda]") {
  for (ag::Device dev : devices()) {
    for (auto& [name, make] : optimizers()) {
      INFO(name << " on " << dev.str());
      Model m1(dev), m2(dev);
      auto o1 = make(m1.params);
      ag::amp::GradScaler s1(ag::amp::GradScalerOptions().init_scale(64).growth_interval(2));
      auto train = [](Model& m, ag::optim::Optimizer& o, ag::amp::GradScaler& s, int n) {
        for (int i = 0; i < n; ++i) {
          o.zero_grad();
          s.scale(m.loss()).backward();
          s.step(o);
          s.update();
        }
      };
      train(m1, *o1, s1, 3);
      // Copy the model, optimizer and scaler state into fresh objects, then continue both.
      {
        ag::NoGradGuard ng;
        for (size_t i = 0; i < m1.params.size(); ++i) m2.params[i].copy_(m1.params[i]);
      }
      auto o2 = make(m2.params);
      o2->load_state_dict(o1->state_dict());
      ag::amp::GradScaler s2;
      s2.load_state_dict(s1.state_dict());
      s2.scale(m2.loss());  // places it on the device
      ag::amp::GradScaler s2b;
      s2b.scale(m2.loss());
      s2b.load_state_dict(s1.state_dict());
      train(m1, *o1, s1, 4);
      train(m2, *o2, s2b, 4);
      CHECK(values(m1.params) == values(m2.params));
      CHECK(s1.get_scale() == s2b.get_scale());
    }
  }
}

TEST_CASE("fused CUDA optimizers equal the CPU reference", "[optim][cuda]") {
  if (skip_without_cuda()) return;
  for (auto& [name, make] : optimizers()) {
    INFO(name);
    Model c(ag::Device(ag::kCPU)), g(ag::Device(ag::kCUDA));
    auto oc = make(c.params), og = make(g.params);
    ag::amp::GradScaler sc(ag::amp::GradScalerOptions().init_scale(256).growth_interval(2));
    ag::amp::GradScaler sg(ag::amp::GradScalerOptions().init_scale(256).growth_interval(2));
    sc.inject_fault(c.params[1], 3);
    sg.inject_fault(g.params[1], 3);
    for (int i = 0; i < 8; ++i) {
      for (auto [m, o, s] : {std::tuple{&c, oc.get(), &sc}, std::tuple{&g, og.get(), &sg}}) {
        o->zero_grad();
        s->scale(m->loss()).backward();
        s->step(*o);
        s->update();
      }
    }
    check_all_close(values(g.params), values(c.params), 1e-4, 1e-6);
    CHECK(sg.get_scale() == sc.get_scale());
  }
}

// Note [Step counters in the kernel]: 72 tensors take two launches (64 a launch), the second
// of empty tensors only, which still advances their counters; the values match the CPU
// reference.
TEST_CASE("fused CUDA steps advance every step counter once, in the update kernel", "[optim][cuda]") {
  if (skip_without_cuda()) return;
  for (auto& [name, make] : optimizers()) {
    INFO(name);
    std::vector<std::vector<double>> results;
    std::vector<ag::optim::StateDict> states;
    for (ag::Device dev : devices()) {
      ag::manual_seed(11);
      std::vector<ag::Tensor> params;
      for (int64_t i = 0; i < 72; ++i)
        params.push_back(ag::randn({i >= 64 || i % 13 == 0 ? 0 : i * 7 + 3}).to(dev).requires_grad_());
      auto opt = make(params);
      for (int step = 0; step < 3; ++step) {
        for (ag::Tensor& p : params) p.set_grad(ag::randn(p.shape()).to(dev));
        opt->step();
      }
      results.push_back(values(params));
      states.push_back(opt->state_dict());
    }
    check_all_close(results[1], results[0], 1e-5, 1e-6);
    for (int64_t i = 0; i < 72; ++i) {
      const std::string key = fmt::format("state.{}.step", i);
      REQUIRE(states[1].count(key));
      CHECK(states[1].at(key).item<double>() == 3.0);
      CHECK(states[0].at(key).item<double>() == 3.0);
    }
  }
}

// Note [Chunks] in cuda/fused.cu: launches large enough for 4 items per thread (4-element
// loads and scalar ones), odd sizes and chunk edges update every element as the CPU reference
// does, and an inf in a launch's last element is found, folded and apart.
TEST_CASE("fused CUDA steps over large and odd launches equal the CPU reference", "[optim][cuda]") {
  if (skip_without_cuda()) return;
  for (const std::vector<int64_t>& sizes : {std::vector<int64_t>{8400000, 12, 8, 400000},  // 4-element loads
                                            std::vector<int64_t>{3000001, 5, 513, 1000003}}) {
    for (const char* name : {"SGD", "Adam"}) {
      INFO(name << ", " << sizes[0] << " elements first");
      std::vector<std::vector<double>> results;
      for (ag::Device dev : devices()) {
        ag::manual_seed(21);
        std::vector<ag::Tensor> params;
        for (int64_t n : sizes) params.push_back((ag::rand({n}) - 0.5).to(dev).detach().requires_grad_());
        std::unique_ptr<ag::optim::Optimizer> opt;
        if (std::string(name) == "SGD") opt = std::make_unique<ag::optim::SGD>(params, ag::optim::SGDOptions(0.1).momentum(0.9));
        else opt = std::make_unique<ag::optim::Adam>(params, ag::optim::AdamOptions(1e-2));
        for (bool fold : {true, false}) {
          ag::amp::GradScaler scaler(ag::amp::GradScalerOptions().init_scale(4));
          for (int step = 0; step < 3; ++step) {
            for (ag::Tensor& p : params) p.set_grad(((ag::rand(p.shape()) - 0.5) * 4.0).to(dev));
            if (step == 1) params[0].grad().narrow(0, sizes[0] - 1, 1).fill_(INFINITY);  // skipped
            scaler.scale(params[0].sum());
            if (fold) {
              scaler.step_and_update(*opt);
            } else {
              scaler.step(*opt);
              scaler.update();
            }
            CHECK(scaler.last_found_inf().item<double>() == (step == 1 ? 1 : 0));
          }
        }
        results.push_back(values(params));
      }
      check_all_close(results[1], results[0], 1e-5, 1e-6);
    }
  }
}

TEST_CASE("master weights: 16-bit parameters train like float32 ones", "[optim][cuda]") {
  for (ag::Device dev : devices()) {
    for (ag::DType half : {ag::kFloat16, ag::kBFloat16}) {
      INFO(dev.str() << " " << ag::dtype_name(half));
      Model ref(dev), low(dev);
      {
        ag::NoGradGuard ng;
        for (auto& p : low.params) p = p.to(half).detach().requires_grad_();
      }
      ag::optim::Adam oref(ref.params, ag::optim::AdamOptions(1e-2));
      ag::optim::Adam olow(low.params, ag::optim::AdamOptions(1e-2));
      olow.use_master_weights();
      ag::amp::GradScaler scaler(ag::amp::GradScalerOptions().init_scale(1024));
      for (int i = 0; i < 20; ++i) {
        oref.zero_grad();
        ref.loss().backward();
        oref.step();
        olow.zero_grad();
        ag::Tensor loss;
        {
          ag::amp::AutocastGuard ac(dev.type, half);
          loss = low.loss();
        }
        scaler.scale(loss).backward();
        scaler.step(olow);
        scaler.update();
      }
      for (size_t k = 0; k < ref.params.size(); ++k) {
        CHECK(low.params[k].dtype() == half);
        ag::Tensor master = olow.master_of(low.params[k]);
        CHECK(master.dtype() == ag::kFloat32);
        // The working copy is the master rounded to 16 bits.
        CHECK(master.to(half).to_vector<double>() == low.params[k].to_vector<double>());
        check_all_close(master.to_vector<double>(), ref.params[k].to_vector<double>(), 0, 30 * eps_of(half));
      }
      // state_dict holds the masters.
      auto sd = olow.state_dict();
      CHECK(sd.count("state.0.master") == 1);
    }
  }
}

#if AMPGRAD_WITH_CUDA
TEST_CASE("a whole AMP training step captures into a CUDA graph: no host synchronization", "[optim][cuda]") {
  if (skip_without_cuda()) return;
  // Forward under autocast, scaled backward, unscale + inf check, gated Adam step, scale
  // update: captured in cudaStreamCaptureModeGlobal, where any wait for the device fails.
  Model graphed(ag::Device(ag::kCUDA)), eager(ag::Device(ag::kCUDA));
  ag::optim::Adam og(graphed.params, ag::optim::AdamOptions(1e-2));
  ag::optim::Adam oe(eager.params, ag::optim::AdamOptions(1e-2));
  auto opts = ag::amp::GradScalerOptions().init_scale(1024).growth_interval(2);
  ag::amp::GradScaler sg(opts), se(opts);
  ag::Tensor loss_g;
  auto step = [](Model& m, ag::optim::Optimizer& o, ag::amp::GradScaler& s, ag::Tensor& loss_out) {
    o.zero_grad(/*set_to_none=*/false);
    {
      ag::amp::AutocastGuard ac(ag::kCUDA);
      loss_out = m.loss();
    }
    s.scale(loss_out).backward();
    s.step(o);
    s.update();
  };
  ag::Tensor loss_e;
  step(graphed, og, sg, loss_g);  // warm-up creates gradients and optimizer/scaler state
  step(eager, oe, se, loss_e);
  ag::cuda::CudaGraph graph;
  graph.capture([&] { step(graphed, og, sg, loss_g); });
  for (int i = 0; i < 5; ++i) {
    graph.replay();
    step(eager, oe, se, loss_e);
  }
  ag::cuda::synchronize();
  check_all_close(values(graphed.params), values(eager.params), 1e-5, 1e-6);
  CHECK(loss_g.item<double>() == Approx(loss_e.item<double>()).epsilon(1e-5));
  CHECK(sg.get_scale() == se.get_scale());
  // A synchronizing call inside a capture is refused, and the stream stays usable.
  ag::cuda::CudaGraph bad;
  CHECK_THROWS_AS(bad.capture([&] { (void)sg.get_scale(); }), ag::Error);
  CHECK(ag::add(graphed.params[0], 1).sum().item<double>() != 0);
}
#endif

TEST_CASE("zero_grad(set_to_none=false) zeroes every kept gradient in place", "[optim][cuda]") {
  for (ag::Device dev : devices()) {
    INFO(dev.str());
    std::vector<ag::Tensor> params;
    for (auto [n, dt] : std::vector<std::pair<int64_t, ag::DType>>{
             {7, ag::kFloat16}, {1023, ag::kFloat32}, {5, ag::kBFloat16}, {4096, ag::kFloat64}}) {
      ag::Tensor p = ag::randn({n}, ag::TensorOptions(dt).device(dev)).requires_grad_();
      p.set_grad(ag::randn({n}, ag::TensorOptions(dt).device(dev)) + 3.0);
      params.push_back(p);
    }
    ag::Tensor strided = ag::randn({4, 3}, ag::TensorOptions().device(dev)).requires_grad_();
    strided.set_grad(ag::randn({3, 4}, ag::TensorOptions().device(dev)).t() + 3.0);  // not contiguous
    params.push_back(strided);
    ag::optim::SGD opt(params, ag::optim::SGDOptions(0.1));
    std::vector<const void*> memory;
    std::vector<uint32_t> versions;
    for (const ag::Tensor& p : params) {
      memory.push_back(p.grad().data_ptr());
      versions.push_back(p.grad().version());
    }
    opt.zero_grad(/*set_to_none=*/false);
    for (size_t i = 0; i < params.size(); ++i) {
      const ag::Tensor g = params[i].grad();
      CHECK(g.data_ptr() == memory[i]);
      CHECK(g.version() > versions[i]);
      const std::vector<double> v = g.to_vector<double>();
      CHECK(std::all_of(v.begin(), v.end(), [](double x) { return x == 0; }));
    }
  }
}

TEST_CASE("a step that throws after the inf check leaves no stale flag behind", "[optim]") {
  ag::Tensor p = ag::tensor({1.f, 2.f, 3.f, 4.f}).requires_grad_();
  ag::optim::SGD opt({p}, ag::optim::SGDOptions(0.5));
  ag::amp::GradScaler scaler(ag::amp::GradScalerOptions().init_scale(2));
  scaler.scale(p.sum()).backward();
  // A gradient with an inf that is also not contiguous: the check sets the flag, then the
  // optimizer refuses the gradient.
  p.set_grad(ag::tensor({2.f, 0.f, INFINITY, 0.f, 2.f, 0.f, 2.f, 0.f}).slice(0, 0, 8, 2));
  CHECK_THROWS_WITH_SUBSTR(scaler.step(opt), "not a contiguous tensor");
  // The caller repairs the gradient and retries: the step runs, the scale stays.
  p.set_grad(ag::full({4}, 2.0));
  scaler.step(opt);
  scaler.update();
  CHECK(p.to_vector<double>() == std::vector<double>{0.5, 1.5, 2.5, 3.5});  // p - 0.5 * 2 / 2
  CHECK(scaler.get_scale() == 2);
  CHECK_FALSE(scaler.last_decision().found_inf);
}

TEST_CASE("optimizer groups hold their optimizer's typed options; state_dict keeps PyTorch's names", "[optim]") {
  // Note [Typed options].
  ag::Tensor w = ag::full({3}, 1.0).requires_grad_(), v = ag::full({2}, 1.0).requires_grad_();
  using Groups = std::vector<std::vector<ag::Tensor>>;
  ag::optim::Adam adam(Groups{{w}, {v}}, ag::optim::AdamOptions(0.01).betas({0.8, 0.95}).amsgrad(true), {0.01, 0.002});
  CHECK(adam.options<ag::optim::AdamOptions>(0).beta1_ == 0.8);
  CHECK(adam.options<ag::optim::AdamOptions>(1).lr_ == 0.002);
  CHECK(adam.options(1).get_lr() == 0.002);
  CHECK_THAT(error_message([&] { (void)adam.options<ag::optim::SGDOptions>(0); }),
             Catch::Contains("group 0 holds AdamOptions"));
  // A change through the typed options is what the next step uses and what state_dict stores.
  adam.options<ag::optim::AdamOptions>(1).eps_ = 1e-6;
  const ag::optim::StateDict sd = adam.state_dict();
  for (const char* k : {"lr", "beta1", "beta2", "eps", "weight_decay", "amsgrad", "maximize", "decoupled_weight_decay"})
    CHECK(sd.count(std::string("param_groups.1.") + k) == 1);
  CHECK(sd.at("param_groups.1.eps").item<double>() == 1e-6);
  CHECK(sd.at("param_groups.0.amsgrad").item<double>() == 1.0);
  CHECK(sd.at("param_groups.0.decoupled_weight_decay").item<double>() == 0.0);
  ag::optim::Adam other(Groups{{w}, {v}}, ag::optim::AdamOptions(0.5).amsgrad(true));
  other.load_state_dict(sd);
  CHECK(other.options<ag::optim::AdamOptions>(1).eps_ == 1e-6);
  CHECK(other.lr(0) == 0.01);
  CHECK(other.options<ag::optim::AdamOptions>(0).beta2_ == 0.95);
  // AdamW's options decouple the weight decay; SGD's keep their own names.
  ag::optim::AdamW adamw(std::vector<ag::Tensor>{w});
  CHECK(adamw.options<ag::optim::AdamOptions>(0).decoupled_weight_decay_);
  CHECK(adamw.options<ag::optim::AdamWOptions>(0).weight_decay_ == 0.01);
  CHECK(std::string(adamw.options(0).kind()) == "AdamWOptions");
  // AdamWOptions' setters keep its type, so a chain of them builds an AdamW.
  ag::optim::AdamW chained(std::vector<ag::Tensor>{w},
                           ag::optim::AdamWOptions(3e-4).weight_decay(0.1).betas({0.9, 0.95}).eps(1e-6));
  const auto& co = chained.options<ag::optim::AdamWOptions>(0);
  CHECK((co.weight_decay_ == 0.1 && co.beta2_ == 0.95 && co.eps_ == 1e-6 && co.decoupled_weight_decay_));
  CHECK(chained.lr() == 3e-4);
  // amsgrad needs state made when the optimizer is built: turning it on later is an error.
  ag::optim::Adam plain(std::vector<ag::Tensor>{v}, ag::optim::AdamOptions(0.1));
  plain.options<ag::optim::AdamOptions>(0).amsgrad_ = true;
  v.set_grad(ag::full({2}, 0.5));
  CHECK_THAT(error_message([&] { plain.step(); }), Catch::Contains("amsgrad was turned on after the optimizer was built"));
  ag::optim::SGD sgd(std::vector<ag::Tensor>{w}, ag::optim::SGDOptions(0.1).momentum(0.9).nesterov(true));
  CHECK(sgd.state_dict().at("param_groups.0.nesterov").item<double>() == 1.0);
  CHECK_THAT(error_message([&] { sgd.options(0).set_value("momentun", 0.5); }),
             Catch::Contains("SGDOptions: no option named 'momentun'"));
}
