// GradScaler: dynamic loss scaling whose state lives on the device (Note [Loss scaling]).
#pragma once

#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include <ampgrad/optim/optimizer.h>

namespace ampgrad::amp {

// Note [Loss scaling]
// float16 gradients below 6e-8 flush to zero. Multiplying the loss by a large scale S moves
// the gradients up into float16's range; the optimizer step divides them by S again. If S
// is too large some gradient overflows to inf: that step is skipped and S shrinks
// (backoff); after growth_interval clean steps in a row S grows. A training step:
//   scaler.scale(loss).backward();  // gradients of S * loss
//   scaler.step(opt);               // unscale by 1/S and check for inf/NaN; step, or skip
//   scaler.update();                // grow or back off S
// (scaler.unscale_(opt) between backward and step lets a user clip the true gradients). Each
// is a short function of amp/grad_scaler.cpp; the arithmetic is core/step_formulas.h's. The
// scale, the growth tracker and the found-inf flags are device tensors; scale, unscale_, step
// and update queue kernels and never wait for the device, so a whole training step can be
// captured in a CUDA graph. Only get_scale() (and state_dict()) read a value back to the host.
struct GradScalerOptions {
  double init_scale_ = 65536.0;
  double growth_factor_ = 2.0;
  double backoff_factor_ = 0.5;
  int64_t growth_interval_ = 2000;
  bool enabled_ = true;
  // Extra policies, off by default: back off only after `hysteresis` overflows
  // (DeepSpeed/Megatron), and keep the scale within [min_scale, max_scale].
  int64_t hysteresis_ = 1;
  double min_scale_ = 0.0;
  double max_scale_ = std::numeric_limits<double>::infinity();

  GradScalerOptions& init_scale(double v) { init_scale_ = v; return *this; }
  GradScalerOptions& growth_factor(double v) { growth_factor_ = v; return *this; }
  GradScalerOptions& backoff_factor(double v) { backoff_factor_ = v; return *this; }
  GradScalerOptions& growth_interval(int64_t v) { growth_interval_ = v; return *this; }
  GradScalerOptions& enabled(bool v) { enabled_ = v; return *this; }
  GradScalerOptions& hysteresis(int64_t v) { hysteresis_ = v; return *this; }
  GradScalerOptions& min_scale(double v) { min_scale_ = v; return *this; }
  GradScalerOptions& max_scale(double v) { max_scale_ = v; return *this; }
};

// What scaler.step() did, for teaching and for `ampgrad explain`; reading it synchronizes.
struct ScalerDecision {
  double scale = 0;
  bool found_inf = false;
  bool step_taken = false;
};

// Called by every GradScaler on its found-inf flag (a float32 0-dim device tensor) after the
// inf check and before the optimizer is gated on it. distributed::init_process_group installs
// an all-reduce with MAX, so that all ranks skip the same steps (Note [Process group]);
// nullptr removes it.
void set_found_inf_reducer(std::function<void(const Tensor&)> reducer);

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // loss * scale (differentiable). The first call places the scaler's state on loss's device.
  Tensor scale(const Tensor& loss);
  // Divides opt's gradients by the scale in place and records whether any is inf/NaN. At most
  // once per optimizer between update() calls.
  void unscale_(optim::Optimizer& opt);
  // Runs opt's step, gated on the device by the found-inf flag (unscaling on the fly if
  // unscale_ was not called). At most once per optimizer between update() calls.
  void step(optim::Optimizer& opt);
  // Grows or backs off the scale from all optimizers' flags since the last update; with
  // new_scale, sets it instead.
  void update(std::optional<double> new_scale = std::nullopt);
  // step(opt) then update(), for a loop whose iterations step one optimizer: the check, the
  // step and the scale update in one launch where one launch covers the step (Note [One-launch
  // scaled step] in core/fused_kernels.h), else as step() and update() would. The same
  // results, bit for bit, in fewer launches.
  void step_and_update(optim::Optimizer& opt);

  double get_scale() const;  // synchronizes; the scale of this iteration until update()
  // The device tensors behind the scaler, for logging without a synchronization: the
  // current scale (float32 []), and the combined found-inf flag of the last update().
  const Tensor& scale_tensor() const { return scale_; }
  const Tensor& last_found_inf() const { return last_found_inf_; }
  bool is_enabled() const { return opt_.enabled_; }
  const GradScalerOptions& options() const { return opt_; }
  // Whether the last update saw an inf/NaN (synchronizes).
  ScalerDecision last_decision() const;

  optim::StateDict state_dict() const;
  void load_state_dict(const optim::StateDict& sd);

  // Fault injection: before the unscale of scaler step `at_step` (counting update() calls
  // from 0), writes `value` (inf or NaN) into element `index` of `param`'s gradient.
  void inject_fault(const Tensor& param, int64_t at_step, double value = std::numeric_limits<double>::infinity(),
                    int64_t index = 0);
  int64_t steps_seen() const { return updates_; }

 private:
  enum class Stage { ready, unscaled, stepped };
  struct PerOptimizer {
    Stage stage = Stage::ready;
    Tensor found_inf;  // float32 [1]
  };
  struct Fault {
    Tensor param;
    int64_t at_step;
    double value;
    int64_t index;
  };
  void lazy_init(Device device);
  PerOptimizer& state_of(optim::Optimizer& opt);
  // opt's gradients, with the faults due at this step written into them.
  std::vector<Tensor> grads_of(optim::Optimizer& opt);
  void check(PerOptimizer& st, const std::vector<Tensor>& grads, const Tensor& inv_scale, bool write_back);
  // This iteration's update as the kernels take it, its records made now (Note [A failed step]).
  ScaleUpdate next_update();
  // An update ran: its records become the last ones, and every optimizer's stage starts over.
  void updated(const ScaleUpdate& u);

  GradScalerOptions opt_;
  Tensor scale_;            // float32 []
  Tensor growth_tracker_;   // int32 []
  Tensor hysteresis_left_;  // int32 []
  Tensor inv_scale_;        // float32 []: 1 / scale_, kept by update() (Note [Scaler launches])
  Tensor last_found_inf_;   // float32 []: the flags of the last update, combined
  Tensor last_scale_;       // the scale that update used
  // The next update's records (ScaleRecord's last_scale and last_found), made by step() before
  // the optimizer writes anything, so that update() allocates nothing (Note [A failed step]).
  std::pair<Tensor, Tensor> next_records_;
  std::map<optim::Optimizer*, PerOptimizer> per_opt_;
  std::vector<Fault> faults_;
  int64_t updates_ = 0;
};

}  // namespace ampgrad::amp
