// The max-pooling kernels (Note [Max pooling] in ops/pool.cpp): the CPU reference in ops/,
// the CUDA kernels in cuda/pool.cu. Internal to ops/pool.cpp.
#pragma once

#include "core/conv_params.h"
#include "core/tensor.h"

namespace ampgrad {
namespace cpu {
// out [N, C, oh, ow] (any strides) = the max of each window of x [N, C, H, W] (any strides;
// padding excluded; NaN wins, then the first of equal values), indices (Int32, out's strides)
// = its position y * W + x in the plane.
void max_pool2d_forward(const Tensor& x, const Window2d& w, const Tensor& out, const Tensor& indices);
// grad_x [N, C, H, W] (any strides) = the sum of the gradients g (indices' shape and strides)
// of the outputs whose max it was; deterministic (each input gathers).
void max_pool2d_backward(const Tensor& g, const Tensor& indices, const Window2d& w, const Tensor& grad_x);
}  // namespace cpu
#if AMPGRAD_WITH_CUDA
namespace cuda {
void max_pool2d_forward(const Tensor& x, const Window2d& w, const Tensor& out, const Tensor& indices);
void max_pool2d_backward(const Tensor& g, const Tensor& indices, const Window2d& w, const Tensor& grad_x);
}  // namespace cuda
#endif
}  // namespace ampgrad
