// The speed-ups (Note [Speed-ups] in speedups/speedups.h): each does what its Note says where it
// applies, and gives the plain path's values bit for bit, on and off.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <memory>

#include <ampgrad/speedups/offered_copies.h>
#include <ampgrad/speedups/working_copies.h>

#include "common.h"

namespace ag = ampgrad;

namespace {

std::vector<ag::Device> devices() {
  std::vector<ag::Device> d{ag::Device(ag::kCPU)};
  if (ag::cuda::is_available()) d.emplace_back(ag::kCUDA);
  return d;
}

// Bitwise comparison of two tensors' values (NaN-safe: compares the bytes).
bool bitwise_equal(const ag::Tensor& a, const ag::Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  ag::Tensor x = a.cpu().contiguous(), y = b.cpu().contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

// Puts every switch back as it found it.
struct Switches {
  bool backward = ag::speedups::backward_speedups(), copies = ag::speedups::working_copies(),
       ready = ag::speedups::ready_casts();
  ~Switches() {
    ag::speedups::set_backward_speedups(backward);
    ag::speedups::set_working_copies(copies);
    ag::speedups::set_ready_casts(ready);
  }
};

std::vector<double> values(const std::vector<ag::Tensor>& ps) {
  std::vector<double> all;
  for (const ag::Tensor& p : ps)
    for (double v : p.to_vector<double>()) all.push_back(v);
  return all;
}

// A pre-norm residual network as a transformer's: x + linear(gelu(linear(layer_norm(x)))),
// twice, then a head, on tokens of width 64.
struct Net {
  explicit Net(ag::Device dev) {
    for (int i = 0; i < 2; ++i) {
      norms.push_back(std::make_shared<ag::nn::LayerNorm>(ag::Shape{64}));
      ups.push_back(std::make_shared<ag::nn::Linear>(64, 128));
      downs.push_back(std::make_shared<ag::nn::Linear>(128, 64));
    }
    head = std::make_shared<ag::nn::Linear>(64, 10);
    for (auto* ms : {&norms}) for (auto& m : *ms) m->to(dev);
    for (auto* ms : {&ups, &downs}) for (auto& m : *ms) m->to(dev);
    head->to(dev);
  }
  ag::Tensor operator()(const ag::Tensor& x0) {
    ag::Tensor x = x0;
    for (size_t i = 0; i < norms.size(); ++i)
      x = x + (*downs[i])(ag::gelu((*ups[i])((*norms[i])(x)), "tanh"));
    return (*head)(x);
  }
  std::vector<ag::Tensor> parameters() const {
    std::vector<ag::Tensor> ps;
    for (const auto& m : norms) for (const ag::Tensor& p : m->parameters()) ps.push_back(p);
    for (const auto* ms : {&ups, &downs}) for (const auto& m : *ms) for (const ag::Tensor& p : m->parameters()) ps.push_back(p);
    for (const ag::Tensor& p : head->parameters()) ps.push_back(p);
    return ps;
  }
  std::vector<std::shared_ptr<ag::nn::LayerNorm>> norms;
  std::vector<std::shared_ptr<ag::nn::Linear>> ups, downs;
  std::shared_ptr<ag::nn::Linear> head;
};

}  // namespace

// The whole set: a few AMP training steps of a pre-norm network (AdamW, fp16 with the scaler on
// CUDA, bf16 on the CPU, an overflow injected at one step) with every speed-up on and with every
// one off. The losses and parameters agree bit for bit; on, each speed-up that applies on the
// device took effect.
TEST_CASE("the speed-ups change a training step's cost, never its values", "[speedups][cuda]") {
  Switches restore;
  for (ag::Device dev : devices()) {
    INFO(dev.str());
    const bool cuda = dev.is_cuda();
    const ag::DType ac = cuda ? ag::kFloat16 : ag::kBFloat16;
    struct Run {
      std::vector<double> losses, params;
      ag::speedups::Stats counted;
    };
    auto train = [&](bool on) {
      ag::speedups::set_all(on);
      ag::manual_seed(31);
      Net net(dev);
      const std::vector<ag::Tensor> ps = net.parameters();
      ag::optim::AdamW opt(ps, ag::optim::AdamWOptions(1e-2).weight_decay(0.1));
      ag::amp::GradScaler scaler(ag::amp::GradScalerOptions().init_scale(1024).enabled(cuda));
      scaler.inject_fault(ps[2], 2, INFINITY);
      const ag::TensorOptions on_dev = ag::TensorOptions().device(dev);
      const ag::Tensor x = ag::randn({4, 12, 64}, on_dev), y = (ag::rand({48}, on_dev) * 10.0).to(ag::kInt64);
      Run r;
      const ag::speedups::Stats s0 = ag::speedups::stats();
      for (int step = 0; step < 5; ++step) {
        opt.zero_grad();
        ag::Tensor loss;
        {
          ag::amp::AutocastGuard autocast(dev.type, ac);
          loss = ag::cross_entropy(net(x).reshape({48, 10}), y);
        }
        scaler.scale(loss).backward();
        scaler.step_and_update(opt);
        r.losses.push_back(loss.item<double>());
      }
      const ag::speedups::Stats s1 = ag::speedups::stats();
      r.counted = {s1.running_sums - s0.running_sums, s1.roundings_taken - s0.roundings_taken,
                   s1.seeds_reused - s0.seeds_reused, s1.working_copy_hits - s0.working_copy_hits,
                   s1.ready_cast_hits - s0.ready_cast_hits};
      r.params = values(ps);
      return r;
    };
    const Run on = train(true), off = train(false);
    CHECK(on.losses == off.losses);
    CHECK(on.params == off.params);
    CHECK(off.counted.running_sums + off.counted.roundings_taken + off.counted.seeds_reused +
              off.counted.working_copy_hits + off.counted.ready_cast_hits == 0);
    CHECK(on.counted.seeds_reused == 4);  // every backward but the first
    CHECK(on.counted.working_copy_hits > 0);
    if (cuda) {  // the fused layer norm's speed-ups (the CPU runs the composite)
      CHECK(on.counted.running_sums > 0);
      CHECK(on.counted.roundings_taken > 0);
      CHECK(on.counted.ready_cast_hits > 0);
    }
  }
}

// The seed (Note [Backward speed-ups]): backward()'s gradient of ones is kept from one backward
// to the next, and the loss scale's product passes the scale on as it is; written into by a
// hook, or held by someone, it is made afresh.
TEST_CASE("backward's seed is kept, and loss * scale passes the scale on", "[speedups]") {
  Switches restore;
  for (bool on : {true, false}) {
    CAPTURE(on);
    ag::speedups::set_backward_speedups(on);
    ag::Tensor w = ag::tensor({1.5f, -2.f}).requires_grad_();
    const ag::Tensor scale = ag::tensor(256.f);
    std::vector<double> grads;
    ((w * w).sum() * scale).backward();  // a seed of this shape, kept when on
    w.set_grad(ag::Tensor());
    const int64_t reused = ag::speedups::stats().seeds_reused;
    for (int i = 0; i < 3; ++i) {
      w.set_grad(ag::Tensor());
      ((w * w).sum() * scale).backward();
      for (double g : w.grad().to_vector<double>()) grads.push_back(g);
    }
    CHECK(ag::speedups::stats().seeds_reused - reused == (on ? 3 : 0));
    CHECK(grads == std::vector<double>{768, -1024, 768, -1024, 768, -1024});
  }
}

// speedups/offered_copies.h: the list behind ready casts and gradient roundings (Note [Cast
// speed-ups], Note [Backward speed-ups]).
TEST_CASE("offered copies serve while source and copy are unchanged", "[speedups]") {
  ag::speedups::OfferedCopies offers(2);
  const ag::Tensor a = ag::tensor({1.f, 2.f, 3.f}), a16 = a.to(ag::kBFloat16);
  CHECK(offers.empty());
  offers.offer(a, a16);
  CHECK(offers.find(a, ag::kBFloat16).unsafe_impl() == a16.unsafe_impl());
  CHECK(offers.find(a, ag::kBFloat16).defined());     // found, not taken
  CHECK_FALSE(offers.find(a, ag::kFloat16).defined());  // another dtype
  CHECK_FALSE(offers.find(a.clone(), ag::kBFloat16).defined());  // another tensor
  a.bump_version();
  CHECK_FALSE(offers.find(a, ag::kBFloat16).defined());  // the source changed since
  // A newer offer for the same source replaces the stale one; taking ends it.
  const ag::Tensor a16b = a.to(ag::kBFloat16);
  offers.offer(a, a16b);
  CHECK(offers.find(a, ag::kBFloat16, /*take=*/true).unsafe_impl() == a16b.unsafe_impl());
  CHECK_FALSE(offers.find(a, ag::kBFloat16).defined());
  CHECK(offers.empty());
  // A changed copy does not serve; the bound drops the oldest; an offer ends with its source.
  const ag::Tensor b = ag::tensor({4.f}), b16 = b.to(ag::kBFloat16), c = ag::tensor({5.f});
  offers.offer(b, b16);
  b16.bump_version();
  CHECK_FALSE(offers.find(b, ag::kBFloat16).defined());
  offers.offer(c, c.to(ag::kBFloat16));
  offers.offer(a, a.to(ag::kBFloat16));  // the third: b's offer goes
  CHECK(offers.find(c, ag::kBFloat16).defined());
  CHECK(offers.find(a, ag::kBFloat16).defined());
  {
    const ag::Tensor d = ag::tensor({6.f});
    offers.offer(d, d.to(ag::kBFloat16));
  }
  offers.offer(c, c.to(ag::kBFloat16));  // drops the dead source's offer, keeps a's
  CHECK(offers.find(a, ag::kBFloat16).defined());
  CHECK(offers.find(c, ag::kBFloat16).defined());
}

// Ready casts (Note [Cast speed-ups]): under autocast, layer_norm on CUDA writes its output in
// the autocast dtype too, and linear takes that copy instead of casting: no cast kernel either
// way, and the same bits as the cast written out (both round one float32 result; the backward
// adds the copy's gradient in float32 as the cast's backward would), and as with ready casts
// off. Mode 0: linear(layer_norm(x)); the reference: the cast written out; mode 2: the output
// is also used in float32, so both gradients reach layer_norm's backward; mode 3: the output is
// changed in place before linear reads it, so the copy is stale and not used.
TEST_CASE("ready casts: layer_norm's 16-bit copy feeds linear bit for bit as the cast would", "[speedups][cuda]") {
  if (skip_without_cuda()) return;
  const ag::Device cuda(ag::kCUDA);
  for (ag::DType low : {ag::kFloat16, ag::kBFloat16}) {
    CAPTURE(ag::dtype_name(low));
    ag::manual_seed(8);
    ag::nn::LayerNorm ln({96});
    ag::nn::Linear lin(96, 40);
    ag::nn::init::normal_(ln.weight, 1.0, 0.3);
    ag::nn::init::normal_(ln.bias, 0.0, 0.3);
    ln.to(cuda);
    lin.to(cuda);
    const ag::Tensor x0 = (ag::randn({3, 50, 96}) * 2.0 + 0.5).to(cuda);
    const ag::Tensor g = ag::randn({3, 50, 40}).to(cuda);
    struct Run {
      std::vector<double> out, gx, gw, gb, glin;
      int64_t ready = 0, casts = 0;
    };
    auto run = [&](int mode, bool reference, bool on = true) {
      ag::speedups::set_ready_casts(on);
      ln.zero_grad();
      lin.zero_grad();
      ag::Tensor x = x0.clone().requires_grad_();
      ag::Tensor loss;
      Run r;
      {
        ag::amp::Trace trace;
        ag::amp::AutocastGuard guard(ag::kCUDA, low);
        const int64_t ready0 = ag::speedups::stats().ready_cast_hits;
        ag::Tensor h = ln(x);
        if (mode == 3) h.mul_(1.5);
        ag::Tensor out = lin(reference ? h.to(low) : h);
        r.out = out.to_vector<double>();
        loss = (out * g).sum();
        if (mode == 2) loss = loss + (h * h).sum() * 0.25;
        r.ready = ag::speedups::stats().ready_cast_hits - ready0;
        for (const auto& rec : trace.records()) r.casts += rec.casts;
      }
      loss.backward();
      r.gx = x.grad().to_vector<double>();
      r.gw = ln.weight.grad().to_vector<double>();
      r.gb = ln.bias.grad().to_vector<double>();
      r.glin = lin.weight.grad().to_vector<double>();
      return r;
    };
    Switches restore;
    run(0, false);  // linear's weight casts kept from here on (Note [Working copies])
    for (int mode : {0, 2, 3}) {
      CAPTURE(mode);
      const Run got = run(mode, false), ref = run(mode, true), off = run(mode, false, /*on=*/false);
      CHECK(got.ready == (mode == 3 ? 0 : 1));
      CHECK(ref.ready == 0);
      CHECK(off.ready == 0);
      CHECK(got.out == off.out);
      CHECK(got.gx == off.gx);
      CHECK(got.glin == off.glin);
      // The cast autocast would make of h: none when the copy served, as for the reference.
      CHECK(got.casts - ref.casts == (mode == 3 ? 1 : 0));
      CHECK(got.out == ref.out);
      CHECK(got.gx == ref.gx);
      CHECK(got.gw == ref.gw);
      CHECK(got.gb == ref.gb);
      CHECK(got.glin == ref.glin);
    }
  }
}
// Running sums and gradient roundings (Note [Backward speed-ups]): a pre-norm residual block,
// y = z + linear(layer_norm(z)) with z = x + b (b 16-bit), as a GPT's. The layer norm's
// backward adds its input gradient into the residual's (the engine adds nothing) and writes its
// rounding, which z's add hands to b instead of a cast. Against the pieces computed apart (the
// branch's gradient alone, then the engine's add and the cast) and against the speed-ups off,
// bit for bit. Rows of 96 take the register kernels, rows of 1500 the loop kernels; fp32 has no
// rounding.
TEST_CASE("layer_norm's backward adds into the residual gradient and rounds it for the add below", "[speedups][cuda]") {
  if (skip_without_cuda()) return;
  const ag::Device cuda(ag::kCUDA);
  Switches restore;
  for (int64_t e : {int64_t{96}, int64_t{1500}}) {
    for (std::optional<ag::DType> low : {std::optional<ag::DType>(ag::kFloat16),
                                         std::optional<ag::DType>(ag::kBFloat16), std::optional<ag::DType>()}) {
      for (bool on : {true, false}) {
        ag::speedups::set_backward_speedups(on);
        CAPTURE(e, low ? ag::dtype_name(*low) : "fp32", on);
        ag::manual_seed(12);
        ag::nn::LayerNorm ln({e});
        ag::nn::Linear lin(e, e);
        ag::nn::init::normal_(ln.weight, 1.0, 0.3);
        ag::nn::init::normal_(ln.bias, 0.0, 0.3);
        ln.to(cuda);
        lin.to(cuda);
        const ag::DType bt = low ? *low : ag::kFloat32;
        const ag::Tensor x0 = (ag::randn({3, 7, e}) * 2.0 + 0.5).to(cuda);
        const ag::Tensor b0 = ag::randn({3, 7, e}).to(cuda).to(bt);
        const ag::Tensor g = ag::randn({3, 7, e}).to(cuda);
        auto guard = [&] { return ag::amp::AutocastGuard(ag::kCUDA, low.value_or(ag::kFloat16), low.has_value()); };
        // Fused: the whole block.
        ln.zero_grad();
        lin.zero_grad();
        ag::Tensor x = x0.clone().requires_grad_(), b = b0.clone().requires_grad_();
        ag::Tensor loss;
        {
          auto ac = guard();
          const ag::Tensor z = x + b;
          const ag::Tensor y = z + lin(ln(z));
          loss = (y * g).sum();
        }
        const ag::speedups::Stats before = ag::speedups::stats();
        loss.backward();
        const ag::speedups::Stats after = ag::speedups::stats();
        CHECK(after.roundings_taken - before.roundings_taken == (on && low ? 1 : 0));
        CHECK(after.running_sums - before.running_sums == (on ? 1 : 0));  // the norm added into z's sum
        const std::vector<double> gx = x.grad().to_vector<double>(), gb = b.grad().to_vector<double>(),
                                  glnw = ln.weight.grad().to_vector<double>(),
                                  glin = lin.weight.grad().to_vector<double>();
        CHECK(b.grad().dtype() == bt);
        // Apart: the branch's gradient at z, then the sum and its rounding.
        ln.zero_grad();
        lin.zero_grad();
        ag::Tensor zl;
        {
          auto ac = guard();
          zl = (x0 + b0).detach().requires_grad_();
          loss = (lin(ln(zl)) * g).sum();
        }
        loss.backward();
        const ag::Tensor total = g + zl.grad();
        CHECK(gx == total.to_vector<double>());
        CHECK(gb == total.to(bt).to_vector<double>());
        CHECK(glnw == ln.weight.grad().to_vector<double>());
        CHECK(glin == lin.weight.grad().to_vector<double>());
        double norm = 0;
        for (double v : gb) norm += std::abs(v);
        CHECK(norm > 0);
      }
    }
  }
}
// Two norms add into the same sum in turn, and the first one's copy goes untaken (sub's
// backward negates the sum for its 16-bit input): the second norm's copy, of the sum as it is
// then, must be the one z's add hands to b (an older offer for the same tensor is dropped).
TEST_CASE("gradient roundings: a sum added to again gets a fresh rounding", "[speedups][cuda]") {
  if (skip_without_cuda()) return;
  const ag::Device cuda(ag::kCUDA);
  for (ag::DType low : {ag::kFloat16, ag::kBFloat16}) {
    CAPTURE(ag::dtype_name(low));
    ag::manual_seed(14);
    ag::nn::LayerNorm ln_a({64}), ln_b({64});
    ag::nn::Linear lin_a(64, 64), lin_b(64, 64);
    for (ag::nn::Module* m : std::vector<ag::nn::Module*>{&ln_a, &ln_b, &lin_a, &lin_b}) m->to(cuda);
    const ag::Tensor e0 = ag::randn({4, 9, 64}).to(cuda), b0 = ag::randn({4, 9, 64}).to(cuda).to(low);
    const ag::Tensor g = ag::randn({4, 9, 64}).to(cuda);
    auto block = [&](const ag::Tensor& x0) {
      const ag::Tensor x1 = x0 - lin_a(ln_a(x0));
      return x1 + lin_b(ln_b(x1));
    };
    ag::Tensor e = e0.clone().requires_grad_(), b = b0.clone().requires_grad_(), loss;
    {
      ag::amp::AutocastGuard ac(ag::kCUDA, low);
      loss = (block(e + b) * g).sum();
    }
    const int64_t sums = ag::speedups::stats().running_sums;
    loss.backward();
    CHECK(ag::speedups::stats().running_sums - sums == 2);
    ag::Tensor x0;
    {
      ag::amp::AutocastGuard ac(ag::kCUDA, low);
      x0 = (e0 + b0).detach().requires_grad_();
      loss = (block(x0) * g).sum();
    }
    loss.backward();
    CHECK(e.grad().to_vector<double>() == x0.grad().to_vector<double>());
    CHECK(b.grad().to_vector<double>() == x0.grad().to(low).to_vector<double>());
  }
}
TEST_CASE("working copies: kept across regions, refreshed by the fused step, dropped when stale", "[speedups][cuda]") {
  for (ag::Device dev : devices()) {
    INFO(dev.str());
    const ag::DType ac = dev.is_cuda() ? ag::kFloat16 : ag::kBFloat16;
    ag::manual_seed(5);
    auto opt = ag::TensorOptions().device(dev);
    ag::Tensor w = (ag::rand({6, 5}, opt) - 0.5).detach().requires_grad_();
    ag::Tensor b = (ag::rand({6}, opt) - 0.5).detach().requires_grad_();
    ag::Tensor x = ag::randn({4, 5}, opt);
    ag::optim::SGD sgd({w, b}, ag::optim::SGDOptions(0.1).momentum(0.9));
    ag::amp::GradScaler scaler(ag::amp::GradScalerOptions().init_scale(256));
    // The step's casts served by a kept copy.
    auto step = [&] {
      sgd.zero_grad();
      const int64_t hits = ag::speedups::stats().working_copy_hits;
      {
        ag::amp::AutocastGuard autocast(dev.type, ac);
        ag::Tensor loss = ag::mean(ag::pow(ag::linear(x, w, b).to(ag::kFloat32), 2));
        scaler.scale(loss).backward();
      }
      const int64_t served = ag::speedups::stats().working_copy_hits - hits;
      scaler.step(sgd);
      scaler.update();
      return served;
    };
    // The kept copy equals a fresh cast of the parameter's current values, bit for bit.
    auto kept_is_current = [&](const ag::Tensor& p) {
      const ag::Tensor kept = ag::speedups::detail::current_working_copy(p, ac);
      REQUIRE(kept.defined());
      CHECK(bitwise_equal(kept, p.detach().to(ac)));
    };
    CHECK(step() == 0);  // first region: both cast
    kept_is_current(w);
    kept_is_current(b);
    CHECK(step() == 2);  // the step refreshed them: no cast
    kept_is_current(w);
    scaler.inject_fault(w, 2, INFINITY);  // a skipped step writes neither
    const std::vector<double> before = w.to_vector<double>();
    CHECK(step() == 2);
    CHECK(w.to_vector<double>() == before);
    kept_is_current(w);
    {
      ag::NoGradGuard no_grad;
      w.mul_(0.5);  // changed outside the optimizer: stale
    }
    CHECK_FALSE(ag::speedups::detail::current_working_copy(w, ac).defined());
    CHECK(step() == 1);  // w cast afresh, b reused
    kept_is_current(w);
    kept_is_current(b);
  }
}

TEST_CASE("working copies: training is bit-identical with and without them", "[speedups][cuda]") {
  for (ag::Device dev : devices()) {
    INFO(dev.str());
    const ag::DType ac = dev.is_cuda() ? ag::kFloat16 : ag::kBFloat16;
    auto train = [&](bool keep, bool adam) {
      ag::speedups::set_working_copies(keep);
      ag::manual_seed(9);
      auto opt = ag::TensorOptions().device(dev);
      std::vector<ag::Tensor> ps{(ag::rand({16, 8}, opt) - 0.5).detach().requires_grad_(),
                                 (ag::rand({16}, opt) - 0.5).detach().requires_grad_(),
                                 (ag::rand({3, 16}, opt) - 0.5).detach().requires_grad_()};
      ag::Tensor x = ag::randn({32, 8}, opt), y = (ag::rand({32}, opt) * 3.0).to(ag::kInt64);
      std::unique_ptr<ag::optim::Optimizer> o;
      if (adam) o = std::make_unique<ag::optim::Adam>(ps, ag::optim::AdamOptions(1e-2));
      else o = std::make_unique<ag::optim::SGD>(ps, ag::optim::SGDOptions(0.1).momentum(0.9));
      ag::amp::GradScaler scaler(ag::amp::GradScalerOptions().init_scale(1024));
      scaler.inject_fault(ps[0], 3, NAN);
      for (int i = 0; i < 8; ++i) {
        o->zero_grad(i % 2 == 0);  // kept and freed gradients
        ag::Tensor loss;
        {
          ag::amp::AutocastGuard autocast(dev.type, ac);
          ag::Tensor h = ag::relu(ag::linear(x, ps[0], ps[1]));
          loss = ag::cross_entropy(ag::linear(h, ps[2]), y);
        }
        scaler.scale(loss).backward();
        scaler.step(*o);
        scaler.update();
      }
      std::vector<double> out;
      for (const ag::Tensor& p : ps) {
        auto v = p.to_vector<double>();
        out.insert(out.end(), v.begin(), v.end());
      }
      return out;
    };
    Switches restore;
    for (bool adam : {false, true}) {
      INFO((adam ? "Adam" : "SGD"));
      const std::vector<double> with = train(true, adam), without = train(false, adam);
      CHECK(with == without);
    }
  }
}

TEST_CASE("working copies: new memory, live graphs and freed parameters", "[speedups]") {
  const ag::DType ac = ag::kBFloat16;
  ag::manual_seed(17);
  SECTION("set_data gives a parameter new memory: its copy is not reused, whatever the versions") {
    ag::Tensor w = (ag::rand({3, 4}) - 0.5).detach().requires_grad_();
    ag::Tensor x = ag::randn({2, 4});
    {
      ag::amp::AutocastGuard autocast(ag::kCPU, ac);
      ag::linear(x, w);
    }
    REQUIRE(ag::speedups::detail::current_working_copy(w, ac).defined());
    w.set_data(ag::rand({3, 4}) + 1.0);  // fresh storage: its version counter starts again
    CHECK_FALSE(ag::speedups::detail::current_working_copy(w, ac).defined());
    ag::Tensor y;
    {
      ag::amp::AutocastGuard autocast(ag::kCPU, ac);
      y = ag::linear(x, w);
    }
    CHECK(bitwise_equal(y, ag::linear(x.to(ac), w.detach().to(ac))));
    w.set_data(ag::rand({5, 4}));  // a new shape too
    {
      ag::amp::AutocastGuard autocast(ag::kCPU, ac);
      CHECK(ag::linear(x, w).shape() == ag::Shape{2, 5});
    }
  }
  SECTION("a copy a live graph saved is not written by the step: that graph's backward still works") {
    Switches restore;
    auto run = [&](bool keep) {
      ag::speedups::set_working_copies(keep);
      ag::manual_seed(3);
      ag::Tensor w = (ag::rand({4, 4}) - 0.5).detach().requires_grad_();
      ag::Tensor a = ag::randn({2, 4}), b = ag::randn({2, 4});
      ag::optim::SGD opt({w}, ag::optim::SGDOptions(0.5));
      for (int i = 0; i < 2; ++i) {  // the second iteration finds kept copies
        ag::Tensor la, lb;
        {
          ag::amp::AutocastGuard autocast(ag::kCPU, ac);
          la = ag::linear(a, w).to(ag::kFloat32).pow(2).sum();
          lb = ag::linear(b, w).to(ag::kFloat32).pow(2).sum();
        }
        opt.zero_grad();
        la.backward();
        opt.step();   // lb's graph still holds w's 16-bit copy
        lb.backward();  // a GAN's generator loss after the discriminator's step
        opt.step();
      }
      return w.to_vector<double>();
    };
    const std::vector<double> with = run(true), without = run(false);
    CHECK(with == without);
  }
  SECTION("a freed parameter's copy is freed at the next count") {
    ag::Tensor w = ag::rand({8, 8}).requires_grad_();
    {
      ag::amp::AutocastGuard autocast(ag::kCPU, ac);
      ag::linear(ag::randn({2, 8}), w);
    }
    std::weak_ptr<ag::Storage> memory = ag::speedups::detail::current_working_copy(w, ac).storage();
    REQUIRE_FALSE(memory.expired());
    w = ag::Tensor();
    ag::speedups::working_copy_count();
    CHECK(memory.expired());
  }
}
