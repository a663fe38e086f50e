// Adam and AdamW (decoupled weight decay), with bias correction and optional AMSGrad.
#pragma once

#include <utility>

#include <ampgrad/optim/optimizer.h>

namespace ampgrad::optim {

struct AdamOptions : OptionsBase<AdamOptions> {
  explicit AdamOptions(double lr = 1e-3) : lr_(lr) {}
  static const std::vector<OptionField<AdamOptions>>& fields();
  const char* kind() const override { return "AdamOptions"; }
  // AdamW's weight decay (decoupled from the gradient), as torch.optim.Adam's argument.
  AdamOptions& decoupled_weight_decay(bool v) { decoupled_weight_decay_ = v; return *this; }
  AdamOptions& betas(std::pair<double, double> b) { beta1_ = b.first; beta2_ = b.second; return *this; }
  AdamOptions& eps(double v) { eps_ = v; return *this; }
  AdamOptions& weight_decay(double v) { weight_decay_ = v; return *this; }
  AdamOptions& amsgrad(bool v) { amsgrad_ = v; return *this; }
  AdamOptions& maximize(bool v) { maximize_ = v; return *this; }
  double lr_, beta1_ = 0.9, beta2_ = 0.999, eps_ = 1e-8, weight_decay_ = 0;
  bool amsgrad_ = false, maximize_ = false, decoupled_weight_decay_ = false;
};

// AdamW's default weight decay is 0.01, as in PyTorch.
struct AdamWOptions : AdamOptions {
  explicit AdamWOptions(double lr = 1e-3) : AdamOptions(lr) {
    weight_decay_ = 1e-2;
    decoupled_weight_decay_ = true;
  }
  std::unique_ptr<OptimizerOptions> clone() const override { return std::make_unique<AdamWOptions>(*this); }
  const char* kind() const override { return "AdamWOptions"; }
  // The setters again, returning AdamWOptions&, so that AdamWOptions(3e-4).weight_decay(0.1)
  // stays an AdamWOptions (AdamW's constructor takes nothing else).
  AdamWOptions& betas(std::pair<double, double> b) { AdamOptions::betas(b); return *this; }
  AdamWOptions& eps(double v) { AdamOptions::eps(v); return *this; }
  AdamWOptions& weight_decay(double v) { AdamOptions::weight_decay(v); return *this; }
  AdamWOptions& amsgrad(bool v) { AdamOptions::amsgrad(v); return *this; }
  AdamWOptions& maximize(bool v) { AdamOptions::maximize(v); return *this; }
};

class Adam : public Optimizer {
 public:
  // The options are copied as their own type (an AdamWOptions stays one).
  Adam(std::vector<Tensor> params, const AdamOptions& options = AdamOptions());
  Adam(std::vector<std::vector<Tensor>> groups, const AdamOptions& options, std::vector<double> group_lrs = {});

 protected:
  void fused_step(Group& g, const FusedStep& s, const std::vector<size_t>& idx) override;
  void check_group(const Group& g) const override;
};

class AdamW final : public Adam {
 public:
  AdamW(std::vector<Tensor> params, const AdamWOptions& options = AdamWOptions());
  AdamW(std::vector<std::vector<Tensor>> groups, const AdamWOptions& options, std::vector<double> group_lrs = {});
};

}  // namespace ampgrad::optim
