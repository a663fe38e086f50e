// SGD: options per group, and the step through the fused kernel of the params' device.
#include <ampgrad/optim/sgd.h>


namespace ampgrad::optim {

namespace {
std::map<std::string, double> sgd_defaults(const SGDOptions& o) {
  AG_CHECK(o.lr_ >= 0, "SGD: invalid learning rate {}", o.lr_);
  AG_CHECK(o.momentum_ >= 0, "SGD: invalid momentum {}", o.momentum_);
  AG_CHECK(!o.nesterov_ || (o.momentum_ > 0 && o.dampening_ == 0),
           "SGD: Nesterov momentum requires a momentum and zero dampening");
  return {{"lr", o.lr_},
          {"momentum", o.momentum_},
          {"dampening", o.dampening_},
          {"weight_decay", o.weight_decay_},
          {"nesterov", o.nesterov_ ? 1.0 : 0.0},
          {"maximize", o.maximize_ ? 1.0 : 0.0}};
}
}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions options) : SGD(std::vector<std::vector<Tensor>>{std::move(params)}, options) {}

SGD::SGD(std::vector<std::vector<Tensor>> groups, SGDOptions options, std::vector<double> group_lrs)
    : Optimizer(std::move(groups), sgd_defaults(options), {"momentum_buffer"}) {
  AG_CHECK(group_lrs.empty() || group_lrs.size() == groups_.size(), "SGD: {} group learning rates for {} groups",
           group_lrs.size(), groups_.size());
  for (size_t i = 0; i < group_lrs.size(); ++i) groups_[i].options["lr"] = group_lrs[i];
}

void SGD::fused_step(Group& g, const FusedStep& s, const std::vector<size_t>& idx) {
  SgdHyper h;
  h.lr = g.options["lr"];
  h.momentum = g.options["momentum"];
  h.dampening = g.options["dampening"];
  h.weight_decay = g.options["weight_decay"];
  h.nesterov = g.options["nesterov"] != 0;
  h.maximize = g.options["maximize"] != 0;
  std::vector<Tensor> bufs = h.momentum != 0 ? state_at(g, "momentum_buffer", idx) : std::vector<Tensor>{};
  std::vector<Tensor> steps = steps_at(g, idx);
  kernel::sgd_step(s.params[0].device(), s, bufs, steps, h);
}

}  // namespace ampgrad::optim
