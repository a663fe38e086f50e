// Adam and AdamW: options per group, and the step through the fused kernel of the device.
#include <ampgrad/optim/adam.h>

#include <algorithm>


namespace ampgrad::optim {

namespace {
// torch.optim.Adam's and AdamW's checks, with their messages; at construction, and before
// every step (a group's options may be changed afterwards).
const AdamOptions& checked(const AdamOptions& o) {
  const char* name = o.decoupled_weight_decay_ ? "AdamW" : "Adam";
  AG_CHECK(o.lr_ >= 0, "{}: invalid learning rate: {} (must be >= 0)", name, o.lr_);
  AG_CHECK(o.eps_ >= 0, "{}: invalid epsilon value: {} (must be >= 0)", name, o.eps_);
  AG_CHECK(o.beta1_ >= 0 && o.beta1_ < 1, "{}: invalid beta parameter at index 0: {} (must be in [0, 1))", name,
           o.beta1_);
  AG_CHECK(o.beta2_ >= 0 && o.beta2_ < 1, "{}: invalid beta parameter at index 1: {} (must be in [0, 1))", name,
           o.beta2_);
  AG_CHECK(o.weight_decay_ >= 0, "{}: invalid weight_decay value: {} (must be >= 0)", name, o.weight_decay_);
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
    : Optimizer("Adam", std::move(groups), checked(options), adam_state(options), group_lrs) {}

AdamW::AdamW(std::vector<Tensor> params, const AdamWOptions& options)
    : Adam(std::vector<std::vector<Tensor>>{std::move(params)}, options) {}
AdamW::AdamW(std::vector<std::vector<Tensor>> groups, const AdamWOptions& options, std::vector<double> group_lrs)
    : Adam(std::move(groups), options, std::move(group_lrs)) {}

const std::vector<OptionField<AdamOptions>>& AdamOptions::fields() {
  static const std::vector<OptionField<AdamOptions>> f = {{"lr", &AdamOptions::lr_},
                                                          {"beta1", &AdamOptions::beta1_},
                                                          {"beta2", &AdamOptions::beta2_},
                                                          {"eps", &AdamOptions::eps_},
                                                          {"weight_decay", &AdamOptions::weight_decay_},
                                                          {"amsgrad", nullptr, &AdamOptions::amsgrad_},
                                                          {"maximize", nullptr, &AdamOptions::maximize_},
                                                          {"decoupled_weight_decay", nullptr,
                                                           &AdamOptions::decoupled_weight_decay_}};
  return f;
}

void Adam::check_group(const Group& g) const {
  checked(options_of<AdamOptions>(g));
  // The state is made for the amsgrad the optimizer was built with (Note [Typed options]).
  AG_CHECK(!options_of<AdamOptions>(g).amsgrad_ ||
               std::find(state_names_.begin(), state_names_.end(), "max_exp_avg_sq") != state_names_.end(),
           "Adam: amsgrad was turned on after the optimizer was built (by its options or a state dict); build it "
           "with AdamOptions().amsgrad(true)");
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
  std::vector<Tensor> m = state_at(g, "exp_avg", idx), v = state_at(g, "exp_avg_sq", idx);
  std::vector<Tensor> vmax = h.amsgrad ? state_at(g, "max_exp_avg_sq", idx) : std::vector<Tensor>{};
  std::vector<Tensor> steps = steps_at(g, idx);
  kernel::adam_step(s.params[0].device(), s, m, v, vmax, steps, h);
}

}  // namespace ampgrad::optim
