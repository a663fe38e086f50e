// The multi-tensor kernels behind the loss scaler and the optimizers (Note [Fused steps]),
// their argument structs, and their declarations (CPU: optim/cpu_fused.cpp, CUDA: cuda/fused.cu).
#pragma once

#include <limits>
#include <vector>

#include <ampgrad/core/dispatch.h>
#include <ampgrad/core/tensor.h>

namespace ampgrad {

// Note [Fused steps]
// A mixed-precision optimizer step is three memory passes in PyTorch: unscale the gradients
// in place (read + write), check them for inf/NaN, then update. ampgrad does at most two,
// and never waits for the host:
//  1. amp_check_and_unscale reads every gradient once and sets found_inf (a float on the
//     device) if any value is inf or NaN. It writes the unscaled gradients back only when
//     asked (scaler.unscale_, so that a user can clip them); otherwise the optimizer
//     unscales on the fly.
//  2. The optimizer kernel reads found_inf first and skips the update if it is set; else it
//     updates each parameter with grad * inv_scale, and with master weights also writes the
//     16-bit working copy. Step counters are device tensors advanced by the same kernel.
// Every pointer list is processed in chunks by one launch (multi-tensor apply). The arithmetic
// of each element is core/step_formulas.h's (Note [Step formulas]).
//
// Note [One-launch scaled step]
// A small network's step is bound by the host's launch time, and the scaler's own launches
// (the inf check and the scale update, about 6 us of host time each) are most of what an AMP
// step pays over a float32 one. GradScaler::step_and_update(opt) asks for the whole scaled step
// in one launch where one launch covers the optimizer's step (one parameter group, one dtype
// run, at most 64 tensors): the step kernel is launched cooperatively, checks its gradients,
// waits at a grid barrier, then reads found_inf and updates (or skips); its last block to
// finish advances the step counters and runs the scale update (FusedStep::update, with
// check_grads). Only the update rides in the launch (no barrier) after unscale_ (the check ran
// already), with a found-inf reducer (DDP: the all-reduce goes between check and step), for
// steps over 2^20 elements (device-bound, where a launch saved is worth nothing and a grid
// capped to what fits at once may cost), and while a CudaGraph captures (cooperative launches
// are kept out of whole-step captures). Where one launch does not cover the step, the check and
// the update run as launches of their own around it. The results are those of step() then
// update(), bit for bit; what it saves is measured in docs/benchmarks.md ("Speed-ups").

struct SgdHyper {
  double lr = 0.01;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  bool maximize = false;
  // Spelled out: a kernel's arguments are keyed by their bytes (Note [Kernel graphs] in cuda/launch.cuh).
  bool unused[6] = {};
};

struct AdamHyper {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  bool decoupled_weight_decay = false;  // AdamW
  bool amsgrad = false;
  bool maximize = false;
  bool unused[5] = {};  // as SgdHyper's
};

// The parameters of GradScaler.update()'s rule (step_formulas::next_scale_state in
// core/step_formulas.h).
struct ScaleRule {
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  int64_t hysteresis = 1;
  double min_scale = 0;
  double max_scale = std::numeric_limits<double>::infinity();
};

// What GradScaler's update records besides the rule's own state, written by the kernel that
// runs the update so that a step costs no extra launches (Note [Scaler launches] in
// amp/grad_scaler.cpp): float32 [] tensors of the scale's device.
struct ScaleRecord {
  Tensor inv_scale;   // 1 / the new scale: the next step's unscale factor
  Tensor last_scale;  // the scale the step used
  Tensor last_found;  // found_inf of the step
  bool clear_found = false;  // then found_inf = 0, ready for the next step's check
};

// One scale update: the rule, its state (scale float32 [], growth_tracker and hysteresis_left
// int32 [], all updated in place) and what it records.
struct ScaleUpdate {
  Tensor scale;
  Tensor growth_tracker;
  Tensor hysteresis_left;
  ScaleRecord rec;
  ScaleRule rule;
};

// The tensors of one fused optimizer step. `params` are what the optimizer updates (float32
// masters when `working` is given, else the parameters themselves, any floating dtype);
// `grads` are aligned with them (16-bit grads of the working copies under master weights).
// `found_inf` and `inv_scale` are float32 [1] device tensors, or undefined (no scaler).
struct FusedStep {
  std::vector<Tensor> params;
  std::vector<Tensor> grads;
  // Empty, or aligned with params: the 16-bit copies to write after the update (the
  // parameters of master weights, or copies autocast reuses, Note [Cast reuse] in
  // amp/cast_reuse.h); an undefined entry has none.
  std::vector<Tensor> working;
  bool masters = false;  // working holds the 16-bit parameters of float32 masters
  Tensor found_inf;
  Tensor inv_scale;
  // GradScaler's whole scaled step (Note [One-launch scaled step]): with `update`, the step
  // ends with that scale update, decided on found_inf (which it clears); with `check_grads`
  // too, found_inf is zero on entry and the step first sets it from its own gradients.
  const ScaleUpdate* update = nullptr;
  bool check_grads = false;
};

}  // namespace ampgrad

namespace ampgrad::kernel {

// The fused kernels, declared once (Note [Kernel dispatch] in core/dispatch.h): CPU reference
// versions in optim/cpu_fused.cpp, CUDA ones in cuda/fused.cu. Dispatched on the device of
// the tensors they update.

// Zeroes every tensor of `ts` (one device; contiguous; on CUDA 16-byte aligned) in one launch
// (Optimizer::zero_grad(set_to_none=false)).
AG_DECLARE_KERNEL(zero_tensors, void(const std::vector<Tensor>& ts));
// found_inf = 1 if any element of `grads` is inf or NaN (found_inf is never cleared here).
// When `write_back`, also grads *= inv_scale in place (inv_scale is not read otherwise).
AG_DECLARE_KERNEL(amp_check_and_unscale, void(const std::vector<Tensor>& grads, const Tensor& found_inf,
                                              const Tensor& inv_scale, bool write_back));
// GradScaler's update: u.scale and its state by u.rule, decided on found_inf (float32 [1]);
// u.rec is written as ScaleRecord describes.
AG_DECLARE_KERNEL(amp_update_scale, void(const ScaleUpdate& u, const Tensor& found_inf));
// `steps` holds one float32 [1] tensor per param (PyTorch's state['step']): read before the
// update, advanced by one after it when the step is taken (not when found_inf is set).
// SGD: momentum buffers of the params' (master) dtype, one per param when momentum != 0
// (else empty); on a param's first step (its step is 0) the buffer is set to the gradient.
AG_DECLARE_KERNEL(sgd_step, void(const FusedStep& s, const std::vector<Tensor>& momentum_bufs,
                                 const std::vector<Tensor>& steps, const SgdHyper& h));
// Adam/AdamW; bias corrections use the advanced step (step + 1). max_exp_avg_sqs is empty
// unless amsgrad. Both steps run s.update (and s.check_grads) as FusedStep describes.
AG_DECLARE_KERNEL(adam_step, void(const FusedStep& s, const std::vector<Tensor>& exp_avgs,
                                  const std::vector<Tensor>& exp_avg_sqs, const std::vector<Tensor>& max_exp_avg_sqs,
                                  const std::vector<Tensor>& steps, const AdamHyper& h));

}  // namespace ampgrad::kernel
