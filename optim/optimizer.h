// Optimizer base: parameter groups with their own options, per-parameter state on the
// parameters' device, zero_grad, state_dict, fp32 master weights, and the gated step that
// GradScaler drives without a host synchronization (Note [Fused steps]).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ampgrad/core/fused_kernels.h>
#include <ampgrad/core/tensor.h>

namespace ampgrad::optim {

// Flat, ordered name -> tensor map: the form checkpoints store (scalars are 0-dim float64).
using StateDict = std::map<std::string, Tensor>;

// Note [Typed options]
// A parameter group holds its optimizer's own options struct (SGDOptions, AdamOptions), as
// libtorch's param groups do: a misspelt option is a compile error, not a silent 0 from a map.
// state_dict stores each option as "param_groups.G.NAME" (booleans 0 or 1), by the names
// values() gives; load_state_dict sets them back through set_value(), which refuses a name the
// options do not have. Each struct lists its fields once (fields(): name and member), and
// OptionsBase derives values(), set_value() and the learning rate from that list.
class OptimizerOptions {
 public:
  virtual ~OptimizerOptions() = default;
  virtual std::unique_ptr<OptimizerOptions> clone() const = 0;
  // Every option by its state_dict name, in a fixed order.
  virtual std::vector<std::pair<std::string, double>> values() const = 0;
  virtual void set_value(const std::string& name, double v) = 0;
  virtual double get_lr() const = 0;
  virtual void set_lr(double lr) = 0;
  virtual const char* kind() const = 0;  // "SGDOptions", "AdamOptions", ...
};

// One option of O: its state_dict name and its member (a number, or a flag stored as 0 or 1).
template <class O>
struct OptionField {
  const char* name;
  double O::*number = nullptr;
  bool O::*flag = nullptr;
};

// Options of concrete type O (which has `double lr_` and a static fields() list): everything
// OptimizerOptions asks, written once.
template <class O>
class OptionsBase : public OptimizerOptions {
 public:
  std::unique_ptr<OptimizerOptions> clone() const override { return std::make_unique<O>(self()); }
  std::vector<std::pair<std::string, double>> values() const override {
    std::vector<std::pair<std::string, double>> out;
    for (const OptionField<O>& f : O::fields())
      out.emplace_back(f.name, f.number ? self().*f.number : (self().*f.flag ? 1.0 : 0.0));
    return out;
  }
  void set_value(const std::string& name, double v) override {
    for (const OptionField<O>& f : O::fields()) {
      if (name != f.name) continue;
      if (f.number) self().*f.number = v;
      else self().*f.flag = v != 0;
      return;
    }
    AG_CHECK(false, "{}: no option named '{}'", kind(), name);
  }
  double get_lr() const override { return self().lr_; }
  void set_lr(double lr) override { self().lr_ = lr; }

 private:
  const O& self() const { return static_cast<const O&>(*this); }
  O& self() { return static_cast<O&>(*this); }
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Updates every parameter that has a gradient.
  void step() { step_gated(Tensor(), Tensor()); }
  // The step GradScaler runs: skipped on the device when found_inf is set, gradients
  // multiplied by inv_scale on the fly (either may be undefined). With `update` (one
  // parameter group, at least one gradient) the step ends with that scale update, and with
  // `check_grads` first checks its gradients into found_inf (Note [One-launch scaled step] in
  // core/fused_kernels.h).
  void step_gated(const Tensor& found_inf, const Tensor& inv_scale, const ScaleUpdate* update = nullptr,
                  bool check_grads = false);
  // set_to_none (the default, as PyTorch 2) drops the gradients; otherwise zeroes them.
  void zero_grad(bool set_to_none = true);

  size_t num_groups() const { return groups_.size(); }
  // Group g's options; options<AdamOptions>(g) as the optimizer's own type (an ag::Error
  // naming both types if they differ).
  OptimizerOptions& options(size_t g) { return *groups_.at(g).options; }
  const OptimizerOptions& options(size_t g) const { return *groups_.at(g).options; }
  template <class O>
  O& options(size_t g) {
    auto* o = dynamic_cast<O*>(groups_.at(g).options.get());
    AG_CHECK(o != nullptr, "optimizer: group {} holds {}, not the options type asked for", g,
             groups_.at(g).options->kind());
    return *o;
  }
  const std::vector<Tensor>& group_params(size_t g) const { return groups_.at(g).params; }
  std::vector<Tensor> params() const;
  double lr(size_t group = 0) const;
  void set_lr(double lr);  // every group
  void set_lr(size_t group, double lr);

  // Master weights: every 16-bit parameter gets a float32 master copy that the optimizer
  // updates; the 16-bit parameter is rewritten from it in the same kernel (Note [Fused steps]
  // in core/fused_kernels.h). Call before the first step.
  void use_master_weights();
  bool has_master_weights() const { return master_weights_; }
  // The float32 master of `param` (the param itself when it has none).
  Tensor master_of(const Tensor& param) const;

  StateDict state_dict() const;
  void load_state_dict(const StateDict& sd);

 protected:
  struct Group {
    std::vector<Tensor> params;
    std::vector<Tensor> masters;  // aligned with params when master weights are on
    std::unique_ptr<OptimizerOptions> options;  // the optimizer's own type (Note [Typed options])
    // Per-param state, aligned with params: name -> tensors (e.g. "exp_avg").
    std::map<std::string, std::vector<Tensor>> state;
    std::vector<Tensor> steps;  // float32 [1] per param
  };
  // Every group gets a copy of `defaults`; `group_lrs` (empty, or one per group) overrides lr.
  Optimizer(const char* name, std::vector<std::vector<Tensor>> groups, const OptimizerOptions& defaults,
            std::vector<std::string> state_names, const std::vector<double>& group_lrs = {});
  // Group g's options as the type the optimizer put there.
  template <class O>
  static const O& options_of(const Group& g) {
    return static_cast<const O&>(*g.options);
  }
  // Runs this optimizer's fused kernel (core/fused_kernels.h) on `s`, the step of group g (the
  // params at positions idx of it), on their device.
  virtual void fused_step(Group& g, const FusedStep& s, const std::vector<size_t>& idx) = 0;
  // Raises if group g's options cannot be stepped; runs for every group before any is
  // (Note [A failed step] in optim/optimizer.cpp).
  virtual void check_group(const Group& g) const {}
  // Collects the params that have gradients into a FusedStep (`idx` receives their positions in
  // the group) and makes their missing state (zeros like the master or param) into `fresh`,
  // for the caller to store (Note [A failed step] in optim/optimizer.cpp).
  struct FreshState {
    Tensor* slot;
    Tensor value;
  };
  FusedStep gather(Group& g, const Tensor& found_inf, const Tensor& inv_scale, std::vector<size_t>& idx,
                   std::vector<FreshState>& fresh);
  // After a fused step: bumps the versions of what it wrote and tells cast reuse (Note [Cast
  // reuse] in amp/cast_reuse.h).
  static void step_written(const FusedStep& s);
  std::vector<Tensor> state_at(Group& g, const std::string& name, const std::vector<size_t>& idx);
  std::vector<Tensor> steps_at(Group& g, const std::vector<size_t>& idx);

  std::vector<Group> groups_;
  std::vector<std::string> state_names_;
  bool master_weights_ = false;
};

// L2 norm of all gradients together; scales them in place so it is at most max_norm.
// Returns the norm before clipping, as a 0-dim float32 tensor on the gradients' device
// (no host synchronization). After scaler.unscale_(opt) it sees the true gradients.
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm);

}  // namespace ampgrad::optim
