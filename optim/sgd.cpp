// SGD: options per group, and the step through the fused kernel of the params' device.
#include <ampgrad/optim/sgd.h>


namespace ampgrad::optim {

namespace {
const SGDOptions& checked(const SGDOptions& o) {
  AG_CHECK(o.lr_ >= 0, "SGD: invalid learning rate {}", o.lr_);
  AG_CHECK(o.momentum_ >= 0, "SGD: invalid momentum {}", o.momentum_);
  AG_CHECK(!o.nesterov_ || (o.momentum_ > 0 && o.dampening_ == 0),
           "SGD: Nesterov momentum requires a momentum and zero dampening");
  return o;
}
}  // namespace

std::vector<std::pair<std::string, double>> SGDOptions::values() const {
  return {{"lr", lr_},
          {"momentum", momentum_},
          {"dampening", dampening_},
          {"weight_decay", weight_decay_},
          {"nesterov", nesterov_ ? 1.0 : 0.0},
          {"maximize", maximize_ ? 1.0 : 0.0}};
}

void SGDOptions::set_value(const std::string& name, double v) {
  if (name == "lr") lr_ = v;
  else if (name == "momentum") momentum_ = v;
  else if (name == "dampening") dampening_ = v;
  else if (name == "weight_decay") weight_decay_ = v;
  else if (name == "nesterov") nesterov_ = v != 0;
  else if (name == "maximize") maximize_ = v != 0;
  else AG_CHECK(false, "SGDOptions: no option named '{}'", name);
}

SGD::SGD(std::vector<Tensor> params, SGDOptions options) : SGD(std::vector<std::vector<Tensor>>{std::move(params)}, options) {}

SGD::SGD(std::vector<std::vector<Tensor>> groups, SGDOptions options, std::vector<double> group_lrs)
    : Optimizer(std::move(groups), checked(options), {"momentum_buffer"}) {
  AG_CHECK(group_lrs.empty() || group_lrs.size() == groups_.size(), "SGD: {} group learning rates for {} groups",
           group_lrs.size(), groups_.size());
  for (size_t i = 0; i < group_lrs.size(); ++i) groups_[i].options->set_lr(group_lrs[i]);
}

void SGD::fused_step(Group& g, const FusedStep& s, const std::vector<size_t>& idx) {
  const SGDOptions& o = options_of<SGDOptions>(g);
  SgdHyper h;
  h.lr = o.lr_;
  h.momentum = o.momentum_;
  h.dampening = o.dampening_;
  h.weight_decay = o.weight_decay_;
  h.nesterov = o.nesterov_;
  h.maximize = o.maximize_;
  std::vector<Tensor> bufs = h.momentum != 0 ? state_at(g, "momentum_buffer", idx) : std::vector<Tensor>{};
  std::vector<Tensor> steps = steps_at(g, idx);
  kernel::sgd_step(s.params[0].device(), s, bufs, steps, h);
}

}  // namespace ampgrad::optim
