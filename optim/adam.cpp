// Adam and AdamW: options per group, and the step through the fused kernel of the device.
#include <ampgrad/optim/adam.h>

#include <algorithm>


namespace ampgrad::optim {

namespace {
const AdamOptions& checked(const AdamOptions& o) {
  AG_CHECK(o.lr_ >= 0, "Adam: invalid learning rate {}", o.lr_);
  AG_CHECK(o.beta1_ >= 0 && o.beta1_ < 1 && o.beta2_ >= 0 && o.beta2_ < 1, "Adam: invalid betas ({}, {})", o.beta1_,
           o.beta2_);
  AG_CHECK(o.eps_ >= 0, "Adam: invalid eps {}", o.eps_);
  return o;
}
std::vector<std::string> adam_state(const AdamOptions& o) {
  if (o.amsgrad_) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}
}  // namespace

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options)
    : Adam(std::vector<std::vector<Tensor>>{std::move(params)}, options) {}
Adam::Adam(std::vector<std::vector<Tensor>> groups, const AdamOptions& options, std::vector<double> group_lrs)
    : Optimizer(std::move(groups), checked(options), adam_state(options)) {
  AG_CHECK(group_lrs.empty() || group_lrs.size() == groups_.size(), "Adam: {} group learning rates for {} groups",
           group_lrs.size(), groups_.size());
  for (size_t i = 0; i < group_lrs.size(); ++i) groups_[i].options->set_lr(group_lrs[i]);
}

AdamW::AdamW(std::vector<Tensor> params, const AdamWOptions& options)
    : Adam(std::vector<std::vector<Tensor>>{std::move(params)}, options) {}
AdamW::AdamW(std::vector<std::vector<Tensor>> groups, const AdamWOptions& options, std::vector<double> group_lrs)
    : Adam(std::move(groups), options, std::move(group_lrs)) {}

std::vector<std::pair<std::string, double>> AdamOptions::values() const {
  return {{"lr", lr_},
          {"beta1", beta1_},
          {"beta2", beta2_},
          {"eps", eps_},
          {"weight_decay", weight_decay_},
          {"amsgrad", amsgrad_ ? 1.0 : 0.0},
          {"maximize", maximize_ ? 1.0 : 0.0},
          {"decoupled_weight_decay", decoupled_weight_decay_ ? 1.0 : 0.0}};
}

void AdamOptions::set_value(const std::string& name, double v) {
  if (name == "lr") lr_ = v;
  else if (name == "beta1") beta1_ = v;
  else if (name == "beta2") beta2_ = v;
  else if (name == "eps") eps_ = v;
  else if (name == "weight_decay") weight_decay_ = v;
  else if (name == "amsgrad") amsgrad_ = v != 0;
  else if (name == "maximize") maximize_ = v != 0;
  else if (name == "decoupled_weight_decay") decoupled_weight_decay_ = v != 0;
  else AG_CHECK(false, "AdamOptions: no option named '{}'", name);
}

void Adam::fused_step(Group& g, const FusedStep& s, const std::vector<size_t>& idx) {
  const AdamOptions& o = options_of<AdamOptions>(g);
  AdamHyper h;
  h.lr = o.lr_;
  h.beta1 = o.beta1_;
  h.beta2 = o.beta2_;
  h.eps = o.eps_;
  h.weight_decay = o.weight_decay_;
  h.amsgrad = o.amsgrad_;
  h.maximize = o.maximize_;
  h.decoupled_weight_decay = o.decoupled_weight_decay_;
  // The state is made for the amsgrad the optimizer was built with (Note [Typed options]).
  AG_CHECK(!h.amsgrad || std::find(state_names_.begin(), state_names_.end(), "max_exp_avg_sq") != state_names_.end(),
           "Adam: amsgrad was turned on after the optimizer was built (by its options or a state dict); build it "
           "with AdamOptions().amsgrad(true)");
  std::vector<Tensor> m = state_at(g, "exp_avg", idx), v = state_at(g, "exp_avg_sq", idx);
  std::vector<Tensor> vmax = h.amsgrad ? state_at(g, "max_exp_avg_sq", idx) : std::vector<Tensor>{};
  std::vector<Tensor> steps = steps_at(g, idx);
  kernel::adam_step(s.params[0].device(), s, m, v, vmax, steps, h);
}

}  // namespace ampgrad::optim
