// Adam and AdamW: options per group, and the step through the fused kernel of the device.
#include <ampgrad/optim/adam.h>


namespace ampgrad::optim {

namespace {
std::map<std::string, double> adam_defaults(const AdamOptions& o, bool decoupled) {
  AG_CHECK(o.lr_ >= 0, "Adam: invalid learning rate {}", o.lr_);
  AG_CHECK(o.beta1_ >= 0 && o.beta1_ < 1 && o.beta2_ >= 0 && o.beta2_ < 1, "Adam: invalid betas ({}, {})", o.beta1_,
           o.beta2_);
  AG_CHECK(o.eps_ >= 0, "Adam: invalid eps {}", o.eps_);
  return {{"lr", o.lr_},
          {"beta1", o.beta1_},
          {"beta2", o.beta2_},
          {"eps", o.eps_},
          {"weight_decay", o.weight_decay_},
          {"amsgrad", o.amsgrad_ ? 1.0 : 0.0},
          {"maximize", o.maximize_ ? 1.0 : 0.0},
          {"decoupled_weight_decay", decoupled ? 1.0 : 0.0}};
}
std::vector<std::string> adam_state(const AdamOptions& o) {
  if (o.amsgrad_) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}
}  // namespace

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : Adam(std::vector<std::vector<Tensor>>{std::move(params)}, options, {}, false) {}
Adam::Adam(std::vector<std::vector<Tensor>> groups, AdamOptions options, std::vector<double> group_lrs)
    : Adam(std::move(groups), options, std::move(group_lrs), false) {}
Adam::Adam(std::vector<std::vector<Tensor>> groups, AdamOptions options, std::vector<double> group_lrs, bool decoupled)
    : Optimizer(std::move(groups), adam_defaults(options, decoupled), adam_state(options)) {
  AG_CHECK(group_lrs.empty() || group_lrs.size() == groups_.size(), "Adam: {} group learning rates for {} groups",
           group_lrs.size(), groups_.size());
  for (size_t i = 0; i < group_lrs.size(); ++i) groups_[i].options["lr"] = group_lrs[i];
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : Adam(std::vector<std::vector<Tensor>>{std::move(params)}, options, {}, true) {}
AdamW::AdamW(std::vector<std::vector<Tensor>> groups, AdamWOptions options, std::vector<double> group_lrs)
    : Adam(std::move(groups), options, std::move(group_lrs), true) {}

void Adam::fused_step(Group& g, const FusedStep& s, const std::vector<size_t>& idx) {
  AdamHyper h;
  h.lr = g.options["lr"];
  h.beta1 = g.options["beta1"];
  h.beta2 = g.options["beta2"];
  h.eps = g.options["eps"];
  h.weight_decay = g.options["weight_decay"];
  h.amsgrad = g.options["amsgrad"] != 0;
  h.maximize = g.options["maximize"] != 0;
  h.decoupled_weight_decay = g.options["decoupled_weight_decay"] != 0;
  std::vector<Tensor> m = state_at(g, "exp_avg", idx), v = state_at(g, "exp_avg_sq", idx);
  std::vector<Tensor> vmax = h.amsgrad ? state_at(g, "max_exp_avg_sq", idx) : std::vector<Tensor>{};
  std::vector<Tensor> steps = steps_at(g, idx);
  kernel::adam_step(s.params[0].device(), s, m, v, vmax, steps, h);
}

}  // namespace ampgrad::optim
