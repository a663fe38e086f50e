// SGD with momentum, dampening, Nesterov and weight decay, as torch.optim.SGD.
#pragma once

#include <ampgrad/optim/optimizer.h>

namespace ampgrad::optim {

struct SGDOptions : OptionsBase<SGDOptions> {
  explicit SGDOptions(double lr) : lr_(lr) {}
  static const std::vector<OptionField<SGDOptions>>& fields();
  const char* kind() const override { return "SGDOptions"; }
  SGDOptions& momentum(double v) { momentum_ = v; return *this; }
  SGDOptions& dampening(double v) { dampening_ = v; return *this; }
  SGDOptions& weight_decay(double v) { weight_decay_ = v; return *this; }
  SGDOptions& nesterov(bool v) { nesterov_ = v; return *this; }
  SGDOptions& maximize(bool v) { maximize_ = v; return *this; }
  double lr_, momentum_ = 0, dampening_ = 0, weight_decay_ = 0;
  bool nesterov_ = false, maximize_ = false;
};

class SGD final : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, SGDOptions options);
  // Several groups; `group_lrs` (optional) overrides lr per group.
  SGD(std::vector<std::vector<Tensor>> groups, SGDOptions options, std::vector<double> group_lrs = {});

 protected:
  void fused_step(Group& g, const FusedStep& s, const std::vector<size_t>& idx) override;
  void check_group(const Group& g) const override;
};

}  // namespace ampgrad::optim
