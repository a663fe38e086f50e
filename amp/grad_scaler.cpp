// GradScaler: scale, unscale_, step, update and their device-side state (Note [Loss scaling]).
#include <ampgrad/amp/grad_scaler.h>

#include <cmath>

#include <ampgrad/autograd/node.h>
#include <ampgrad/core/fused_kernels.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad::amp {

GradScaler::GradScaler(GradScalerOptions options) : opt_(options) {
  AG_CHECK(opt_.init_scale_ > 0, "GradScaler: init_scale must be positive, got {}", opt_.init_scale_);
  AG_CHECK(opt_.growth_factor_ > 1, "GradScaler: growth_factor must be > 1, got {}", opt_.growth_factor_);
  AG_CHECK(opt_.backoff_factor_ > 0 && opt_.backoff_factor_ < 1, "GradScaler: backoff_factor must be in (0, 1), got {}",
           opt_.backoff_factor_);
  AG_CHECK(opt_.growth_interval_ > 0, "GradScaler: growth_interval must be positive, got {}", opt_.growth_interval_);
  AG_CHECK(opt_.hysteresis_ >= 1, "GradScaler: hysteresis must be at least 1, got {}", opt_.hysteresis_);
  AG_CHECK(opt_.min_scale_ <= opt_.max_scale_, "GradScaler: min_scale {} exceeds max_scale {}", opt_.min_scale_,
           opt_.max_scale_);
}

// Note [Scaler launches]
// A scaled step adds launches to every training step, and a small network's step is bound
// by the host's launch time, so the scaler keeps them to three: the inf check (one launch
// for all gradients), the gated optimizer step, and the update; step_and_update makes them one
// where one launch covers the optimizer's step (Note [One-launch scaled step] in
// core/fused_kernels.h). Everything else rides in those kernels: the update also writes
// 1 / scale (the next step's unscale factor, instead of a reciprocal launch per step),
// copies the scale and the flag it decided on into last_scale_ and last_found_inf_ (instead
// of two clones), and clears the found-inf flag for the next check (instead of a memset per
// step). The flag is therefore zero whenever a step begins: created zero, and cleared by
// every update.
void GradScaler::lazy_init(Device device) {
  if (scale_.defined()) return;
  // Made first, stored together: running out of memory halfway leaves the scaler unmade
  // (Note [A failed step] in optim/optimizer.cpp).
  TensorOptions f32 = TensorOptions(kFloat32).device(device);
  Tensor scale = full({}, opt_.init_scale_, f32);
  Tensor inv_scale = full({}, 1.0f / static_cast<float>(opt_.init_scale_), f32);
  Tensor growth = zeros({}, TensorOptions(kInt32).device(device));
  Tensor hysteresis = full({}, opt_.hysteresis_, TensorOptions(kInt32).device(device));
  scale_ = std::move(scale);
  inv_scale_ = std::move(inv_scale);
  growth_tracker_ = std::move(growth);
  hysteresis_left_ = std::move(hysteresis);
}

Tensor GradScaler::scale(const Tensor& loss) {
  if (!opt_.enabled_) return loss;
  AG_CHECK(loss.defined() && is_floating(loss.dtype()), "GradScaler.scale: expected a floating loss, got {}",
           loss.desc());
  lazy_init(loss.device());
  if (loss.device() != scale_.device()) {
    // The state follows the loss between steps (a scaler loaded from a checkpoint starts on
    // the CPU), never in the middle of one.
    for (auto& [o, st] : per_opt_)
      AG_CHECK(st.stage == Stage::ready,
               "GradScaler.scale: loss {} is on {} but this step's gradients were checked on {}; call update() first",
               loss.desc(), loss.device().str(), scale_.device().str());
    NoGradGuard no_grad;
    const Device d = loss.device();
    Tensor scale = scale_.to(d), inv_scale = inv_scale_.to(d), growth = growth_tracker_.to(d),
           hysteresis = hysteresis_left_.to(d);
    std::vector<Tensor> flags;
    for (auto& [o, st] : per_opt_) flags.push_back(st.found_inf.to(d));
    scale_ = std::move(scale);
    inv_scale_ = std::move(inv_scale);
    growth_tracker_ = std::move(growth);
    hysteresis_left_ = std::move(hysteresis);
    size_t i = 0;
    for (auto& [o, st] : per_opt_) st.found_inf = std::move(flags[i++]);
  }
  return mul(loss, scale_);
}

namespace {
std::function<void(const Tensor&)>& found_inf_reducer() {
  static auto* r = new std::function<void(const Tensor&)>();
  return *r;
}
}  // namespace

void set_found_inf_reducer(std::function<void(const Tensor&)> reducer) { found_inf_reducer() = std::move(reducer); }

GradScaler::PerOptimizer& GradScaler::state_of(optim::Optimizer& opt) {
  auto it = per_opt_.find(&opt);
  if (it != per_opt_.end() && it->second.found_inf.defined()) return it->second;
  // The flag is made before the optimizer's entry: running out of memory leaves none.
  Device dev = scale_.defined() ? scale_.device() : opt.params().at(0).device();
  lazy_init(dev);
  Tensor flag = zeros({}, TensorOptions(kFloat32).device(dev));
  PerOptimizer& st = per_opt_[&opt];
  st.found_inf = std::move(flag);
  return st;
}

std::vector<Tensor> GradScaler::grads_of(optim::Optimizer& opt) {
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const Tensor& p : opt.params()) {
    for (const Fault& f : faults_)
      if (f.at_step == updates_ && f.param.is_same(p) && p.grad().defined()) {
        Tensor flat = p.grad().view({-1});
        flat.narrow(0, f.index, 1).fill_(f.value);
      }
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  return grads;
}

// The inf check (step_formulas::unscale on every element): sets st's flag if any gradient holds
// an inf or NaN, and with write_back also divides them by the scale in place.
void GradScaler::check(PerOptimizer& st, const std::vector<Tensor>& grads, const Tensor& inv_scale, bool write_back) {
  // found_inf is zero here (Note [Scaler launches]).
  if (!grads.empty()) kernel::amp_check_and_unscale(st.found_inf.device(), grads, st.found_inf, inv_scale, write_back);
  if (const auto& reduce = found_inf_reducer()) reduce(st.found_inf);
}

void GradScaler::unscale_(optim::Optimizer& opt) {
  if (!opt_.enabled_) return;
  PerOptimizer& st = state_of(opt);
  AG_CHECK(st.stage != Stage::stepped,
           "GradScaler.unscale_: unscale_() is being called after step() on this optimizer; call update() first");
  AG_CHECK(st.stage == Stage::ready,
           "GradScaler.unscale_: unscale_() has already been called on this optimizer since the last update()");
  NoGradGuard no_grad;
  try {
    check(st, grads_of(opt), inv_scale_, /*write_back=*/true);
  } catch (...) {
    st.found_inf.zero_();  // the flag is zero whenever a step begins (Note [Scaler launches])
    throw;
  }
  st.stage = Stage::unscaled;
}

void GradScaler::step(optim::Optimizer& opt) {
  if (!opt_.enabled_) {
    opt.step();
    return;
  }
  PerOptimizer& st = state_of(opt);
  AG_CHECK(st.stage != Stage::stepped, "GradScaler.step: step() has already been called on this optimizer since the last update()");
  NoGradGuard no_grad;
  // Without unscale_, only check: the optimizer unscales on the fly (Note [Fused steps]).
  const bool checked = st.stage == Stage::unscaled;
  try {
    if (!checked) check(st, grads_of(opt), Tensor(), /*write_back=*/false);
    next_records_ = {empty({}, scale_.options()), empty({}, scale_.options())};  // update()'s
    opt.step_gated(st.found_inf, checked ? Tensor() : inv_scale_);  // skipped where found_inf is set
  } catch (...) {
    // Clear the flag this check may have set, so that a retried step is checked afresh
    // (Note [Scaler launches]).
    if (!checked) st.found_inf.zero_();
    throw;
  }
  st.stage = Stage::stepped;
}

ScaleUpdate GradScaler::next_update() {
  ScaleUpdate u;
  u.scale = scale_;
  u.growth_tracker = growth_tracker_;
  u.hysteresis_left = hysteresis_left_;
  u.rule = {opt_.growth_factor_, opt_.backoff_factor_, opt_.growth_interval_, opt_.hysteresis_, opt_.min_scale_,
            opt_.max_scale_};
  u.rec.inv_scale = inv_scale_;
  // Fresh each update: a handle kept by a caller (last_found_inf()) stays as it was.
  const bool made = next_records_.first.defined() && next_records_.first.device() == scale_.device();
  u.rec.last_scale = made ? next_records_.first : empty({}, scale_.options());
  u.rec.last_found = made ? next_records_.second : empty({}, scale_.options());
  next_records_ = {};
  return u;
}

void GradScaler::updated(const ScaleUpdate& u) {
  last_found_inf_ = u.rec.last_found;
  last_scale_ = u.rec.last_scale;
  for (auto& [o, st] : per_opt_) st.stage = Stage::ready;
  ++updates_;
}

void GradScaler::update(std::optional<double> new_scale) {
  if (!opt_.enabled_) return;
  NoGradGuard no_grad;
  std::vector<Tensor*> flags;
  for (auto& [o, st] : per_opt_)
    if (st.stage != Stage::ready) flags.push_back(&st.found_inf);
  AG_CHECK(!flags.empty(), "GradScaler.update: no inf checks were recorded since the last update(); call "
                           "scaler.step(optimizer) (or unscale_) first");
  // One optimizer (the usual case): its flag is read, recorded and cleared by the update
  // kernel. Several: their sum is, and each flag is cleared here.
  Tensor found = *flags[0];  // summed in place: update() allocates nothing (Note [A failed step])
  for (size_t i = 1; i < flags.size(); ++i) found.add_(*flags[i]);
  ScaleUpdate u = next_update();
  u.rec.clear_found = flags.size() == 1;
  if (new_scale) {
    AG_CHECK(*new_scale > 0, "GradScaler.update: new_scale must be positive, got {}", *new_scale);
    u.rec.last_scale.copy_(scale_);
    u.rec.last_found.copy_(found);
    scale_.fill_(*new_scale);
    inv_scale_.fill_(1.0f / static_cast<float>(*new_scale));
    u.rec.clear_found = false;
  } else {
    kernel::amp_update_scale(scale_.device(), u, found);  // step_formulas::next_scale_state
  }
  if (!u.rec.clear_found)
    for (Tensor* f : flags) f->zero_();
  updated(u);
}

void GradScaler::step_and_update(optim::Optimizer& opt) {
  if (!opt_.enabled_) {
    opt.step();
    return;
  }
  PerOptimizer& st = state_of(opt);
  bool alone = opt.num_groups() == 1;  // this optimizer is the iteration's only one, with one group
  for (const auto& [o, other] : per_opt_) alone = alone && (o == &opt || other.stage == Stage::ready);
  bool has_grad = false;
  for (const Tensor& p : opt.params()) has_grad = has_grad || p.grad().defined();
  if (!alone || !has_grad || st.stage == Stage::stepped) {
    step(opt);
    update();
    return;
  }
  NoGradGuard no_grad;
  const bool checked = st.stage == Stage::unscaled;
  // (After unscale_, its faults are written and checked already.)
  const std::vector<Tensor> grads = checked ? std::vector<Tensor>{} : grads_of(opt);
  // A found-inf reducer (DistributedDataParallel's all-reduce) must see the flag before the
  // step reads it: then the check runs apart, and only the update rides in the step's launch.
  const bool check_in_step = !checked && !found_inf_reducer();
  try {
    if (!checked && !check_in_step) check(st, grads, Tensor(), /*write_back=*/false);
    ScaleUpdate u = next_update();
    u.rec.clear_found = true;
    opt.step_gated(st.found_inf, checked ? Tensor() : inv_scale_, &u, check_in_step);
    updated(u);
  } catch (...) {
    if (!checked) st.found_inf.zero_();
    throw;
  }
}

double GradScaler::get_scale() const {
  if (!opt_.enabled_) return 1.0;
  return scale_.defined() ? scale_.item<double>() : opt_.init_scale_;
}

ScalerDecision GradScaler::last_decision() const {
  AG_CHECK(last_found_inf_.defined(), "GradScaler.last_decision: update() has not run yet");
  ScalerDecision d;
  d.scale = last_scale_.item<double>();
  d.found_inf = last_found_inf_.item<double>() != 0;
  d.step_taken = !d.found_inf;
  return d;
}

optim::StateDict GradScaler::state_dict() const {
  optim::StateDict sd;
  auto scalar = [](double v) { return tensor(std::vector<double>{v}, {}); };
  sd["scale"] = scale_.defined() ? scale_.to(kFloat64).cpu() : scalar(opt_.init_scale_);
  sd["growth_tracker"] = growth_tracker_.defined() ? growth_tracker_.to(kFloat64).cpu() : scalar(0);
  sd["hysteresis_left"] = hysteresis_left_.defined() ? hysteresis_left_.to(kFloat64).cpu() : scalar(opt_.hysteresis_);
  sd["growth_factor"] = scalar(opt_.growth_factor_);
  sd["backoff_factor"] = scalar(opt_.backoff_factor_);
  sd["growth_interval"] = scalar(static_cast<double>(opt_.growth_interval_));
  sd["hysteresis"] = scalar(static_cast<double>(opt_.hysteresis_));
  sd["min_scale"] = scalar(opt_.min_scale_);
  sd["max_scale"] = scalar(opt_.max_scale_);
  sd["updates"] = scalar(static_cast<double>(updates_));
  return sd;
}

void GradScaler::load_state_dict(const optim::StateDict& sd) {
  for (const char* key : {"scale", "growth_tracker", "hysteresis_left", "growth_factor", "backoff_factor",
                          "growth_interval", "hysteresis", "min_scale", "max_scale", "updates"})
    AG_CHECK(sd.count(key) && sd.at(key).numel() == 1, "GradScaler.load_state_dict: missing or malformed '{}'", key);
  auto get = [&](const char* k) { return sd.at(k).item<double>(); };
  opt_.growth_factor_ = get("growth_factor");
  opt_.backoff_factor_ = get("backoff_factor");
  opt_.growth_interval_ = static_cast<int64_t>(get("growth_interval"));
  opt_.hysteresis_ = static_cast<int64_t>(get("hysteresis"));
  opt_.min_scale_ = get("min_scale");
  opt_.max_scale_ = get("max_scale");
  updates_ = static_cast<int64_t>(get("updates"));
  Device dev = scale_.defined() ? scale_.device() : Device(kCPU);
  scale_ = full({}, get("scale"), TensorOptions(kFloat32).device(dev));
  inv_scale_ = full({}, 1.0f / static_cast<float>(get("scale")), TensorOptions(kFloat32).device(dev));
  growth_tracker_ = full({}, get("growth_tracker"), TensorOptions(kInt32).device(dev));
  hysteresis_left_ = full({}, get("hysteresis_left"), TensorOptions(kInt32).device(dev));
}

void GradScaler::inject_fault(const Tensor& param, int64_t at_step, double value, int64_t index) {
  AG_CHECK(param.defined() && index >= 0 && index < param.numel(),
           "GradScaler.inject_fault: element {} is out of range for {}", index, param.desc());
  AG_CHECK(!std::isfinite(value), "GradScaler.inject_fault: the injected value must be inf or NaN, got {}", value);
  faults_.push_back({param, at_step, value, index});
}

}  // namespace ampgrad::amp
