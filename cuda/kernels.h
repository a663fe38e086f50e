// The CUDA implementations of the kernel interface of core/kernels.h (same signatures,
// namespace ampgrad::cuda). Every tensor passed here lives on a CUDA device.
#pragma once

#include "core/kernel_kinds.h"
#include "core/tensor.h"

namespace ampgrad::cuda {

void unary(UnaryKind k, const Tensor& x, const Tensor& out, double a, double b);
void binary(BinaryKind k, const Tensor& x, const Tensor& y, const Tensor& out);
void where(const Tensor& cond, const Tensor& x, const Tensor& y, const Tensor& out);
void copy(const Tensor& dst, const Tensor& src);
void fill(const Tensor& dst, double value);
void accumulate(const Tensor& dst, const Tensor& src);
void reduce(ReduceKind k, const Tensor& x, const Tensor& out, const Tensor& indices, double param);
void softmax(const Tensor& x, const Tensor& out, bool log);
void softmax_backward(const Tensor& g, const Tensor& y, const Tensor& grad_x, bool log);
void gemm(const Tensor& a, const Tensor& bm, const Tensor& out, double alpha, double beta);
// out[0] = alpha * a[0] @ bm[0] + bias (bias [N] added to every row, in the GEMM's epilogue),
// then max(., 0) with relu (bias may then be undefined); false when it cannot (float64, batch
// > 1, an unaligned bias, no such epilogue): nothing ran, use gemm.
bool gemm_bias(const Tensor& a, const Tensor& bm, const Tensor& bias, const Tensor& out, double alpha,
               bool relu = false);
// out[0] = a[0] @ bm[0] and bias_grad[i] = sum over k of a[0][i, k] in one cuBLASLt call
// (EPILOGUE_BGRADB), batch 1; false when cuBLASLt declines (nothing ran).
bool gemm_bias_grad(const Tensor& a, const Tensor& bm, const Tensor& out, const Tensor& bias_grad);
void index_select(const Tensor& x, const Tensor& index, const Tensor& out);
void index_add(const Tensor& out, const Tensor& index, const Tensor& src);
void nll_loss_forward(const Tensor& lp, const Tensor& target, int64_t ignore_index, const Tensor& loss,
                      const Tensor& count);
void nll_loss_backward(const Tensor& grad, const Tensor& target, const Tensor& count, int64_t ignore_index,
                       const Tensor& grad_lp);
void batch_norm_stats(const Tensor& x, int64_t outer, int64_t inner, double eps, const Tensor& mean,
                      const Tensor& invstd, const Tensor& running_mean, const Tensor& running_var, double momentum);
void batch_norm_apply(const Tensor& x, int64_t outer, int64_t inner, const Tensor& mean, const Tensor& invstd,
                      const Tensor& weight, const Tensor& bias, const Tensor& y);
void batch_norm_backward(const Tensor& dy, const Tensor& x, int64_t outer, int64_t inner, const Tensor& mean,
                         const Tensor& invstd, const Tensor& weight, bool training, const Tensor& grad_x,
                         const Tensor& grad_weight, const Tensor& grad_bias);
void cross_entropy_forward(const Tensor& x, const Tensor& target, int64_t ignore_index, const Tensor& lse,
                           const Tensor& loss, const Tensor& count);
void cross_entropy_backward(const Tensor& grad, const Tensor& x, const Tensor& target, const Tensor& lse,
                            const Tensor& count, int64_t ignore_index, const Tensor& grad_x);

}  // namespace ampgrad::cuda

#include "core/conv_params.h"

namespace ampgrad::cuda {

void im2col(const Tensor& x, const Tensor& cols, const Window2d& w, double pad_value);
void col2im(const Tensor& cols, const Tensor& out, const Window2d& w);
void dropout_mask(const Tensor& out, double p_keep, double scale, uint64_t seed, uint64_t offset);
void max_pool2d_forward(const Tensor& x, const Window2d& w, const Tensor& out, const Tensor& indices);
void max_pool2d_backward(const Tensor& g, const Tensor& indices, const Window2d& w, const Tensor& grad_x);

// cuDNN convolution (cuda/conv.cpp). x [N, C, H, W], weight [K, C/groups, kh, kw], out
// [N, K, oh, ow]; each in NCHW or channels-last (NHWC) strides as given (out is allocated by
// the caller in x's memory format). bias [K] or undefined. f32 (TF32 only when
// allow_tf32()), f16/bf16 on tensor cores with f32 accumulation, f64.
void conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
                    const Conv2dParams& p);
void conv2d_backward_data(const Tensor& grad_out, const Tensor& weight, const Tensor& grad_in, const Conv2dParams& p);
void conv2d_backward_weight(const Tensor& x, const Tensor& grad_out, const Tensor& grad_weight, const Conv2dParams& p);
// Opt-in (off by default, like torch.backends.cudnn.benchmark): time cuDNN's candidate
// algorithms once per shape and cache the fastest; otherwise take cuDNN's heuristic choice.
void set_cudnn_benchmark(bool on);
bool cudnn_benchmark();

}  // namespace ampgrad::cuda
