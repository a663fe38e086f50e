// The CUDA versions of the multi-tensor loss-scaler and optimizer kernels of
// core/fused_kernels.h (same signatures, namespace ampgrad::cuda; Note [Fused steps]).
#pragma once

#include "core/fused_kernels.h"

namespace ampgrad::cuda {

void zero_tensors(const std::vector<Tensor>& ts);
void amp_check_and_unscale(const std::vector<Tensor>& grads, const Tensor& found_inf, const Tensor& inv_scale,
                           bool write_back);
void amp_update_scale(const ScaleUpdate& u, const Tensor& found_inf);
void sgd_step(const FusedStep& s, const std::vector<Tensor>& momentum_bufs, const std::vector<Tensor>& steps,
              const SgdHyper& h);
void adam_step(const FusedStep& s, const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
               const std::vector<Tensor>& max_exp_avg_sqs, const std::vector<Tensor>& steps, const AdamHyper& h);

}  // namespace ampgrad::cuda
