// Kernel dispatch by device, and the input checks that many ops share.
#pragma once

#include "core/kernels.h"
#include "ops/op.h"
#if AMPGRAD_WITH_CUDA
#include "cuda/kernels.h"
#endif

namespace ampgrad::kernel {

[[noreturn]] void no_cuda(std::string_view what);

// Each forwards to the CPU reference kernel or the CUDA kernel by the device of `out`.
#if AMPGRAD_WITH_CUDA
#define AG_KERNEL_ON(dev, fn, ...) ((dev).is_cuda() ? ::ampgrad::cuda::fn(__VA_ARGS__) : ::ampgrad::cpu::fn(__VA_ARGS__))
#else
#define AG_KERNEL_ON(dev, fn, ...) ((dev).is_cuda() ? no_cuda(#fn) : ::ampgrad::cpu::fn(__VA_ARGS__))
#endif
inline void unary(UnaryKind k, const Tensor& x, const Tensor& out, double a = 0, double b = 0) {
  AG_KERNEL_ON(out.device(), unary, k, x, out, a, b);
}
inline void binary(BinaryKind k, const Tensor& x, const Tensor& y, const Tensor& out) {
  AG_KERNEL_ON(out.device(), binary, k, x, y, out);
}
inline void where(const Tensor& c, const Tensor& x, const Tensor& y, const Tensor& out) {
  AG_KERNEL_ON(out.device(), where, c, x, y, out);
}
inline void copy(const Tensor& dst, const Tensor& src) { AG_KERNEL_ON(dst.device(), copy, dst, src); }
inline void fill(const Tensor& dst, double v) { AG_KERNEL_ON(dst.device(), fill, dst, v); }
inline void accumulate(const Tensor& dst, const Tensor& src) { AG_KERNEL_ON(dst.device(), accumulate, dst, src); }
inline void reduce(ReduceKind k, const Tensor& x, const Tensor& out, const Tensor& idx, double param) {
  AG_KERNEL_ON(out.device(), reduce, k, x, out, idx, param);
}
inline void softmax(const Tensor& x, const Tensor& out, bool log) { AG_KERNEL_ON(out.device(), softmax, x, out, log); }
inline void softmax_backward(const Tensor& g, const Tensor& y, const Tensor& grad_x, bool log) {
  AG_KERNEL_ON(grad_x.device(), softmax_backward, g, y, grad_x, log);
}
inline void gemm(const Tensor& a, const Tensor& b, const Tensor& out, double alpha, double beta) {
  AG_KERNEL_ON(out.device(), gemm, a, b, out, alpha, beta);
}
inline void index_select(const Tensor& x, const Tensor& index, const Tensor& out) {
  AG_KERNEL_ON(out.device(), index_select, x, index, out);
}
inline void index_add(const Tensor& out, const Tensor& index, const Tensor& src) {
  AG_KERNEL_ON(out.device(), index_add, out, index, src);
}
inline void nll_loss_forward(const Tensor& lp, const Tensor& target, int64_t ignore_index, const Tensor& loss,
                             const Tensor& count) {
  AG_KERNEL_ON(loss.device(), nll_loss_forward, lp, target, ignore_index, loss, count);
}
inline void nll_loss_backward(const Tensor& grad, const Tensor& target, const Tensor& count, int64_t ignore_index,
                              const Tensor& grad_lp) {
  AG_KERNEL_ON(grad_lp.device(), nll_loss_backward, grad, target, count, ignore_index, grad_lp);
}
inline void batch_norm_stats(const Tensor& x, int64_t outer, int64_t inner, double eps, const Tensor& mean,
                             const Tensor& invstd, const Tensor& running_mean, const Tensor& running_var,
                             double momentum) {
  AG_KERNEL_ON(mean.device(), batch_norm_stats, x, outer, inner, eps, mean, invstd, running_mean, running_var,
               momentum);
}
inline void batch_norm_apply(const Tensor& x, int64_t outer, int64_t inner, const Tensor& mean, const Tensor& invstd,
                             const Tensor& weight, const Tensor& bias, const Tensor& y) {
  AG_KERNEL_ON(y.device(), batch_norm_apply, x, outer, inner, mean, invstd, weight, bias, y);
}
inline void batch_norm_backward(const Tensor& dy, const Tensor& x, int64_t outer, int64_t inner, const Tensor& mean,
                                const Tensor& invstd, const Tensor& weight, bool training, const Tensor& grad_x,
                                const Tensor& grad_weight, const Tensor& grad_bias) {
  AG_KERNEL_ON(mean.device(), batch_norm_backward, dy, x, outer, inner, mean, invstd, weight, training, grad_x,
               grad_weight, grad_bias);
}
inline void cross_entropy_forward(const Tensor& x, const Tensor& target, int64_t ignore_index, const Tensor& lse,
                                  const Tensor& loss, const Tensor& count) {
  AG_KERNEL_ON(loss.device(), cross_entropy_forward, x, target, ignore_index, lse, loss, count);
}
inline void cross_entropy_backward(const Tensor& grad, const Tensor& x, const Tensor& target, const Tensor& lse,
                                   const Tensor& count, int64_t ignore_index, const Tensor& grad_x) {
  AG_KERNEL_ON(grad_x.device(), cross_entropy_backward, grad, x, target, lse, count, ignore_index, grad_x);
}
inline void im2col(const Tensor& x, const Tensor& cols, const Window2d& w, double pad_value) {
  AG_KERNEL_ON(cols.device(), im2col, x, cols, w, pad_value);
}
inline void col2im(const Tensor& cols, const Tensor& out, const Window2d& w) {
  AG_KERNEL_ON(out.device(), col2im, cols, out, w);
}
inline void dropout_mask(const Tensor& out, double p_keep, double scale, uint64_t seed, uint64_t offset) {
  AG_KERNEL_ON(out.device(), dropout_mask, out, p_keep, scale, seed, offset);
}
inline void max_pool2d_forward(const Tensor& x, const Window2d& w, const Tensor& out, const Tensor& indices) {
  AG_KERNEL_ON(out.device(), max_pool2d_forward, x, w, out, indices);
}
inline void max_pool2d_backward(const Tensor& g, const Tensor& indices, const Window2d& w, const Tensor& grad_x) {
  AG_KERNEL_ON(grad_x.device(), max_pool2d_backward, g, indices, w, grad_x);
}
#undef AG_KERNEL_ON

}  // namespace ampgrad::kernel

namespace ampgrad {

// "add: expected all tensors on the same device, got float32 [2] on cpu and float32 [2] on cuda:0"
void check_same_device(const OpInfo& op, const Tensor& a, const Tensor& b);
void check_defined(const OpInfo& op, const Tensor& t, std::string_view what);
// Floating dtype an op computes in for `t`: its own if floating, float32 for integers/bool.
DType float_compute_dtype(DType t);
// A 0-dim tensor holding a Python-style scalar, typed so it does not upcast `like`.
DType scalar_result_dtype(DType tensor_dtype, const Scalar& s);
// A view of `t` with out's shape: broadcast dims get stride 0 (no copy).
Tensor broadcast_to(const Tensor& t, const Shape& shape);

}  // namespace ampgrad
