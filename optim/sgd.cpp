// SGD: options per group, and the step through the fused kernel of the params' device.
#include <ampgrad/optim/sgd.h>


namespace ampgrad::optim {

namespace {
// torch.optim.SGD's checks, with its messages; at construction, and before every step (a
// group's options may be changed afterwards).
const SGDOptions& checked(const SGDOptions& o) {
  AG_CHECK(o.lr_ >= 0, "SGD: invalid learning rate: {} (must be >= 0)", o.lr_);
  AG_CHECK(o.momentum_ >= 0, "SGD: invalid momentum value: {} (must be >= 0)", o.momentum_);
  AG_CHECK(o.weight_decay_ >= 0, "SGD: invalid weight_decay value: {} (must be >= 0)", o.weight_decay_);
  AG_CHECK(!o.nesterov_ || (o.momentum_ > 0 && o.dampening_ == 0),
           "SGD: Nesterov momentum requires a momentum and zero dampening (momentum {}, dampening {})", o.momentum_,
           o.dampening_);
  return o;
}
}  // namespace

void SGD::check_group(const Group& g) const { checked(options_of<SGDOptions>(g)); }

const std::vector<OptionField<SGDOptions>>& SGDOptions::fields() {
  static const std::vector<OptionField<SGDOptions>> f = {{"lr", &SGDOptions::lr_},
                                                         {"momentum", &SGDOptions::momentum_},
                                                         {"dampening", &SGDOptions::dampening_},
                                                         {"weight_decay", &SGDOptions::weight_decay_},
                                                         {"nesterov", nullptr, &SGDOptions::nesterov_},
                                                         {"maximize", nullptr, &SGDOptions::maximize_}};
  return f;
}

SGD::SGD(std::vector<Tensor> params, SGDOptions options) : SGD(std::vector<std::vector<Tensor>>{std::move(params)}, options) {}

SGD::SGD(std::vector<std::vector<Tensor>> groups, SGDOptions options, std::vector<double> group_lrs)
    : Optimizer("SGD", std::move(groups), checked(options), {"momentum_buffer"}, group_lrs) {}

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
