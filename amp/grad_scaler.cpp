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
// for all gradients), the gated optimizer step, and the update; and where one launch covers
// the optimizer's step, to that one launch (Note [One-launch scaled step] in
// core/fused_kernels.h). Everything else rides in those kernels: the update also writes
// 1 / scale (the next step's unscale factor, instead of a reciprocal launch per step),
// copies the scale and the flag it decided on into last_scale_ and last_found_inf_ (instead
// of two clones), and clears the found-inf flag for the next check (instead of a memset per
// step). The flag is therefore zero whenever a step begins: created zero, and cleared by
// every update (or put back by unfold(), to be cleared by the update that follows).
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
  // After a folded step (Note [One-launch scaled step]) scale_ already holds the next
  // iteration's scale; a loss scaled now (another optimizer's) takes this iteration's.
  return mul(loss, folded_ ? folded_->last_scale : scale_);
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

void GradScaler::check(PerOptimizer& st, const std::vector<Tensor>& grads, const Tensor& inv_scale, bool write_back) {
  // found_inf is zero here (Note [Scaler launches]).
  if (!grads.empty()) kernel::amp_check_and_unscale(st.found_inf.device(), grads, st.found_inf, inv_scale, write_back);
  if (const auto& reduce = found_inf_reducer()) reduce(st.found_inf);
}

void GradScaler::unscale_(optim::Optimizer& opt) {
  if (!opt_.enabled_) return;
  PerOptimizer& st = state_of(opt);
  AG_CHECK(st.stage == Stage::ready,
           "GradScaler.unscale_: unscale_() has already been called on this optimizer since the last update()");
  if (folded_) unfold();  // inv_scale_ must be this iteration's again, and this flag must count
  NoGradGuard no_grad;
  try {
    check(st, grads_of(opt), inv_scale_, /*write_back=*/true);
  } catch (...) {
    st.found_inf.zero_();  // the flag is zero whenever a step begins (Note [Scaler launches])
    throw;
  }
  st.stage = Stage::unscaled;
}

// Whether opt's step can run this iteration's update too (Note [One-launch scaled step]): the
// last update() saw one optimizer's flag (a loop with several optimizers never folds, and
// neither does the first iteration), nothing else was checked since, and opt has one
// parameter group with a gradient.
bool GradScaler::can_fold(optim::Optimizer& opt, bool has_grad) const {
  if (!opt_.fold_into_step_ || last_update_optimizers_ != 1 || folded_ || !has_grad || opt.num_groups() != 1)
    return false;
  for (const auto& [o, st] : per_opt_)
    if (o != &opt && st.stage != Stage::ready) return false;
  return true;
}

ScaleUpdate GradScaler::next_update() {
  const TensorOptions f32 = scale_.options();
  ScaleUpdate u;
  u.scale = scale_;
  u.growth_tracker = growth_tracker_;
  u.hysteresis_left = hysteresis_left_;
  u.rule = {opt_.growth_factor_, opt_.backoff_factor_, opt_.growth_interval_, opt_.hysteresis_, opt_.min_scale_,
            opt_.max_scale_};
  u.rec.inv_scale = inv_scale_;
  // Fresh each update: a handle kept by a caller stays as it was. step() makes them before the
  // optimizer writes anything (Note [A failed step] in optim/optimizer.cpp), so that update()
  // after it allocates nothing.
  const bool ahead = ahead_.first.defined() && ahead_.first.device() == scale_.device();
  u.rec.last_scale = ahead ? ahead_.first : empty({}, f32);
  u.rec.last_found = ahead ? ahead_.second : empty({}, f32);
  ahead_ = {};
  return u;
}

ScaleUpdate GradScaler::folded_update() {
  if (!last_growth_.defined() || last_growth_.device() != scale_.device()) {
    last_inv_scale_ = empty({}, scale_.options());
    last_growth_ = empty({}, growth_tracker_.options());
    last_hysteresis_ = empty({}, growth_tracker_.options());
  }
  ScaleUpdate u = next_update();
  u.rec.clear_found = true;  // the step's own flag: recorded in last_found, ready for the next check
  u.rec.last_inv_scale = last_inv_scale_;
  u.rec.last_growth = last_growth_;
  u.rec.last_hysteresis = last_hysteresis_;
  return u;
}

// A folded update must be decided again (another optimizer's flag counts too, or new_scale
// replaces it): puts back the state it started from and the folded optimizer's flag, as if
// the update had never run.
void GradScaler::unfold() {
  NoGradGuard no_grad;
  const Folded f = *folded_;
  folded_.reset();
  scale_.copy_(f.last_scale);
  inv_scale_.copy_(last_inv_scale_);
  growth_tracker_.copy_(last_growth_);
  hysteresis_left_.copy_(last_hysteresis_);
  per_opt_.at(f.opt).found_inf.copy_(f.last_found);
}

void GradScaler::step(optim::Optimizer& opt) {
  if (!opt_.enabled_) {
    opt.step();
    return;
  }
  PerOptimizer& st = state_of(opt);
  AG_CHECK(st.stage != Stage::stepped, "GradScaler.step: step() has already been called on this optimizer since the last update()");
  if (folded_) unfold();  // a second optimizer this iteration: inv_scale_ must be this iteration's again
  NoGradGuard no_grad;
  // Without unscale_, only check; the optimizer unscales on the fly (Note [Fused steps]).
  const bool checked = st.stage == Stage::unscaled;
  const Tensor inv_scale = checked ? Tensor() : inv_scale_;
  try {
    // (After unscale_, its faults are written and checked already.)
    const std::vector<Tensor> grads = checked ? std::vector<Tensor>{} : grads_of(opt);
    bool has_grad = !grads.empty();
    if (checked)
      for (const Tensor& p : opt.params()) has_grad |= p.grad().defined();
    if (can_fold(opt, has_grad)) {
      // A found-inf reducer must see the flag before the step reads it: then only the update folds.
      const bool check_in_step = !checked && !found_inf_reducer();
      if (!checked && !check_in_step) check(st, grads, Tensor(), /*write_back=*/false);
      const ScaleUpdate u = folded_update();
      opt.step_gated(st.found_inf, inv_scale, &u, check_in_step);
      folded_ = Folded{&opt, u.rec.last_scale, u.rec.last_found};
    } else {
      if (!checked) check(st, grads, Tensor(), /*write_back=*/false);
      ahead_ = {empty({}, scale_.options()), empty({}, scale_.options())};  // update()'s records
      opt.step_gated(st.found_inf, inv_scale);
    }
  } catch (...) {
    // Clear the flag this check may have set, so that a retried step is checked afresh
    // (Note [Scaler launches]).
    if (!checked) st.found_inf.zero_();
    throw;
  }
  st.stage = Stage::stepped;
}

void GradScaler::update(std::optional<double> new_scale) {
  if (!opt_.enabled_) return;
  NoGradGuard no_grad;
  if (folded_ && !new_scale) {
    // The step ran the update already, from the only flag of this iteration (any other
    // optimizer's step or unscale_ would have unfolded it): record it.
    last_found_inf_ = folded_->last_found;
    last_scale_ = folded_->last_scale;
    folded_.reset();
    last_update_optimizers_ = 1;
    for (auto& [o, st] : per_opt_) st.stage = Stage::ready;
    ++updates_;
    return;
  }
  if (folded_) unfold();
  std::vector<Tensor*> flags;
  for (auto& [o, st] : per_opt_)
    if (st.stage != Stage::ready) flags.push_back(&st.found_inf);
  AG_CHECK(!flags.empty(), "GradScaler.update: no inf checks were recorded since the last update(); call "
                           "scaler.step(optimizer) (or unscale_) first");
  // One optimizer (the usual case): its flag is read, recorded and cleared by the update
  // kernel. Several: their sum is, and each flag is cleared here.
  const bool one = flags.size() == 1;
  Tensor found = *flags[0];  // summed in place: update() allocates nothing (Note [A failed step])
  for (size_t i = 1; i < flags.size(); ++i) found.add_(*flags[i]);
  ScaleUpdate u = next_update();
  ScaleRecord& rec = u.rec;
  rec.clear_found = one;
  if (new_scale) {
    AG_CHECK(*new_scale > 0, "GradScaler.update: new_scale must be positive, got {}", *new_scale);
    rec.last_scale.copy_(scale_);
    rec.last_found.copy_(found);
    scale_.fill_(*new_scale);
    inv_scale_.fill_(1.0f / static_cast<float>(*new_scale));
    rec.clear_found = false;
  } else {
    kernel::amp_update_scale(scale_.device(), u, found);
  }
  if (!rec.clear_found)
    for (Tensor* f : flags) f->zero_();
  last_found_inf_ = rec.last_found;
  last_scale_ = rec.last_scale;
  last_update_optimizers_ = static_cast<int>(flags.size());
  for (auto& [o, st] : per_opt_) st.stage = Stage::ready;
  ++updates_;
}

double GradScaler::get_scale() const {
  if (!opt_.enabled_) return 1.0;
  if (folded_) return folded_->last_scale.item<double>();  // update() has not been called yet
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
  // Between a folded step and update(), the state before the update (as PyTorch's).
  const Tensor& scale = folded_ ? folded_->last_scale : scale_;
  const Tensor& growth = folded_ ? last_growth_ : growth_tracker_;
  const Tensor& hysteresis = folded_ ? last_hysteresis_ : hysteresis_left_;
  sd["scale"] = scale.defined() ? scale.to(kFloat64).cpu() : scalar(opt_.init_scale_);
  sd["growth_tracker"] = growth.defined() ? growth.to(kFloat64).cpu() : scalar(0);
  sd["hysteresis_left"] = hysteresis.defined() ? hysteresis.to(kFloat64).cpu() : scalar(opt_.hysteresis_);
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
  if (folded_) {
    // The loaded state replaces what the folded update started from; the flag still counts.
    per_opt_.at(folded_->opt).found_inf.copy_(folded_->last_found);
    folded_.reset();
  }
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
