// CUDA nll_loss: one block sums the picked log-probabilities in a fixed order (deterministic);
// the backward writes the whole [N, C] gradient in one pass. Neither reads anything on the host.
#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace ampgrad::cuda {

namespace {

constexpr int kLossThreads = 1024;

template <class T>
__global__ void nll_loss_forward_kernel(const T* lp, const int64_t* target, int64_t n, int64_t c, int64_t ignore,
                                        T* loss, float* count) {
  using A = dacc_t<T>;
  __shared__ A sum[kLossThreads];
  __shared__ float cnt[kLossThreads];
  A s = 0;
  float k = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int64_t t = target[i];
    if (t == ignore) continue;
    k += 1;
    if (t >= 0 && t < c) s += to_acc(lp[i * c + t]);  // an out-of-range target adds 0, as on the CPU
  }
  sum[threadIdx.x] = s;
  cnt[threadIdx.x] = k;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) {
      sum[threadIdx.x] += sum[threadIdx.x + w];
      cnt[threadIdx.x] += cnt[threadIdx.x + w];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    *loss = from_acc<T>(-sum[0] / static_cast<A>(cnt[0]));
    *count = cnt[0];
  }
}

template <class T>
__global__ void nll_loss_backward_kernel(const T* grad, const int64_t* target, const float* count, int64_t n,
                                         int64_t c, int64_t ignore, T* grad_lp) {
  using A = dacc_t<T>;
  const A scale = -to_acc(*grad) / static_cast<A>(*count);
  const int64_t total = n * c;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = e / c, j = e - i * c;
    const int64_t t = target[i];
    grad_lp[e] = from_acc<T>(t != ignore && t == j ? scale : A(0));
  }
}

}  // namespace

void nll_loss_forward(const Tensor& lp, const Tensor& target, int64_t ignore_index, const Tensor& loss,
                      const Tensor& count) {
  KernelContext ctx(loss);
  dispatch_floating(lp.dtype(), "nll_loss", [&](auto tag) {
    using T = typename decltype(tag)::type;
    nll_loss_forward_kernel<T><<<1, kLossThreads, 0, ctx.stream>>>(
        ptr<const T>(lp), ptr<const int64_t>(target), lp.size(0), lp.size(1), ignore_index, ptr<T>(loss),
        ptr<float>(count));
    AG_CUDA_CHECK_LAUNCH();
  });
}

void nll_loss_backward(const Tensor& grad, const Tensor& target, const Tensor& count, int64_t ignore_index,
                       const Tensor& grad_lp) {
  if (grad_lp.numel() == 0) return;
  KernelContext ctx(grad_lp);
  dispatch_floating(grad_lp.dtype(), "nll_loss backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    nll_loss_backward_kernel<T><<<ctx.grid_stride_blocks(grad_lp.numel()), kBlockSize, 0, ctx.stream>>>(
        ptr<const T>(grad), ptr<const int64_t>(target), ptr<const float>(count), grad_lp.size(0), grad_lp.size(1),
        ignore_index, ptr<T>(grad_lp));
    AG_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace ampgrad::cuda
