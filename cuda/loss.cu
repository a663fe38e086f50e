// CUDA nll_loss: one block sums the picked log-probabilities in a fixed order (deterministic);
// the backward writes the whole [N, C] gradient in one pass. cross_entropy's fused kernels
// (Note [Fused cross-entropy] in ops/loss.cpp): one forward pass over the logits, one
// backward pass writing their gradient. Nothing is read on the host.
#include <algorithm>

#include <ampgrad/cuda/common.cuh>
#include <ampgrad/cuda/device_error.cuh>
#include <ampgrad/cuda/launch.cuh>
#include <ampgrad/core/kernels.h>
#include <ampgrad/cuda/reduce.cuh>

namespace ampgrad::cuda {

namespace {

constexpr int kLossThreads = 1024;

template <class T>
__global__ void nll_loss_forward_kernel(const T* lp, const int64_t* target, int64_t n, int64_t c, int64_t ignore,
                                        T* loss, float* count, DeviceErrorRecord* err, int site) {
  using A = dacc_t<T>;
  __shared__ A sum[kLossThreads];
  __shared__ float cnt[kLossThreads];
  A s = 0;
  float k = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int64_t t = target[i];
    if (t == ignore) continue;
    k += 1;
    if (t >= 0 && t < c) [[likely]]
      s += to_acc(lp[i * c + t]);
    else
      report_out_of_range(err, site, t, i, 0, c);  // adds 0 (Note [Device-side errors])
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

// Rows of [n, c] logits: blockDim.x threads per row, blockDim.y rows per block, blocks
// striding over the rows. Each row's logsumexp goes to lse; each block sums its counted rows'
// lse - x[target] (in row order, deterministically) into partial[block], and the last block
// to finish adds the partials in block order into loss = sum / count (Note [Last block] in
// cuda/common.cuh).
__device__ unsigned int g_ce_blocks_done = 0;

template <class T, class O>
__global__ void cross_entropy_forward_kernel(const T* x, const int64_t* target, int64_t n, int64_t c, int64_t ignore,
                                             dacc_t<O>* lse, dacc_t<O>* partial, O* loss, float* count,
                                             DeviceErrorRecord* err, int site) {
  using Op = LseOp<T>;
  using A = dacc_t<O>;
  using State = typename Op::State;
  __shared__ State smem[kBlockSize];
  __shared__ A rows_sum[kBlockSize];
  __shared__ float rows_cnt[kBlockSize];
  const Op op{};
  const int tx = threadIdx.x, ty = threadIdx.y, by = blockDim.y;
  A my_sum = 0;
  float my_cnt = 0;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * by; base < n; base += static_cast<int64_t>(gridDim.x) * by) {
    const int64_t row = base + ty;
    const State st = combine_row(smem, row < n ? accumulate_row(op, x + row * c, 0, c) : op.identity(),
                                 [&](State a, State b) { return op.combine(a, b); });
    if (tx == 0 && row < n) {
      const A l = static_cast<A>(Op::result(st));
      lse[row] = l;
      const int64_t t = target[row];
      if (t != ignore) {
        my_cnt += 1;
        if (t >= 0 && t < c) [[likely]]
          my_sum += l - static_cast<A>(to_acc(x[row * c + t]));
        else
          report_out_of_range(err, site, t, row, 0, c);  // adds 0 (Note [Device-side errors])
      }
    }
    __syncthreads();  // smem is reused by the next rows
  }
  // The block's rows, in row-slot order.
  if (tx == 0) {
    rows_sum[ty] = my_sum;
    rows_cnt[ty] = my_cnt;
  }
  __syncthreads();
  if (tx == 0 && ty == 0) {
    A block_sum = 0;
    float block_cnt = 0;
    for (int r = 0; r < by; ++r) {
      block_sum += rows_sum[r];
      block_cnt += rows_cnt[r];
    }
    partial[2 * blockIdx.x] = block_sum;
    partial[2 * blockIdx.x + 1] = static_cast<A>(block_cnt);
  }
  if (!last_block_done(&g_ce_blocks_done) || tx != 0 || ty != 0) return;
  A total = 0, counted = 0;
  for (unsigned int b = 0; b < gridDim.x; ++b) {
    total += partial[2 * b];
    counted += partial[2 * b + 1];
  }
  *loss = from_acc<O>(total / counted);
  *count = static_cast<float>(counted);
}

// grad_x[i, j] = grad / count * (exp(x[i, j] - lse[i]) - [j == target[i]]) for counted rows
// with a target in range, 0 elsewhere, written in x's dtype.
template <class T, class O>
__global__ void cross_entropy_backward_kernel(const O* grad, const T* x, const int64_t* target, const dacc_t<O>* lse,
                                              const float* count, int64_t n, int64_t c, int64_t ignore, T* gx) {
  using A = dacc_t<O>;
  const A scale = static_cast<A>(to_acc(*grad)) / static_cast<A>(*count);
  const int64_t total = n * c;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = e / c, j = e - i * c;
    const int64_t t = target[i];
    A v = 0;
    if (t != ignore && t >= 0 && t < c)
      v = scale * (math::exp(static_cast<A>(to_acc(x[e])) - lse[i]) - (j == t ? A(1) : A(0)));
    gx[e] = from_acc<T>(v);
  }
}


}  // namespace

void nll_loss_forward(const Tensor& lp, const Tensor& target, int64_t ignore_index, const Tensor& loss,
                      const Tensor& count) {
  KernelContext ctx(loss);
  dispatch_floating(lp.dtype(), "nll_loss", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch(ctx, nll_loss_forward_kernel<T>, 1, kLossThreads, 0, ptr<const T>(lp), ptr<const int64_t>(target), lp.size(0), lp.size(1), ignore_index, ptr<T>(loss), ptr<float>(count), device_error_record(ctx.device), error_site("nll_loss", "target", {{"input", &lp}, {"target", &target}}));
  });
}

void nll_loss_backward(const Tensor& grad, const Tensor& target, const Tensor& count, int64_t ignore_index,
                       const Tensor& grad_lp) {
  if (grad_lp.numel() == 0) return;
  KernelContext ctx(grad_lp);
  dispatch_floating(grad_lp.dtype(), "nll_loss backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch(ctx, nll_loss_backward_kernel<T>, ctx.grid_stride_blocks(grad_lp.numel()), kBlockSize, 0, ptr<const T>(grad), ptr<const int64_t>(target), ptr<const float>(count), grad_lp.size(0), grad_lp.size(1), ignore_index, ptr<T>(grad_lp));
  });
}

void cross_entropy_forward(const Tensor& x, const Tensor& target, int64_t ignore_index, const Tensor& lse,
                           const Tensor& loss, const Tensor& count) {
  KernelContext ctx(loss);
  const int64_t n = x.size(0), c = x.size(1);
  const int bx = row_threads(c), by = kBlockSize / bx;
  // Two blocks per SM at most: the last block adds one partial per block, serially.
  const unsigned grid = static_cast<unsigned>(
      std::clamp<int64_t>((n + by - 1) / by, 1, 2 * static_cast<int64_t>(ctx.sm_count)));
  Tensor partial = empty({2 * static_cast<int64_t>(grid)}, TensorOptions(lse.dtype()).device(loss.device()));
  dispatch_widened(x.dtype(), loss.dtype(), "cross_entropy", [&](auto tt, auto to) {
    using T = typename decltype(tt)::type;
    using O = typename decltype(to)::type;
    using A = dacc_t<O>;
    launch(ctx, cross_entropy_forward_kernel<T, O>, grid, dim3(bx, by), 0, ptr<const T>(x), ptr<const int64_t>(target), n, c, ignore_index, ptr<A>(lse), ptr<A>(partial), ptr<O>(loss), ptr<float>(count), device_error_record(ctx.device), error_site("cross_entropy", "target", {{"input", &x}, {"target", &target}}));
  });
}

void cross_entropy_backward(const Tensor& grad, const Tensor& x, const Tensor& target, const Tensor& lse,
                            const Tensor& count, int64_t ignore_index, const Tensor& grad_x) {
  if (grad_x.numel() == 0) return;
  KernelContext ctx(grad_x);
  dispatch_widened(x.dtype(), grad.dtype(), "cross_entropy backward", [&](auto tt, auto to) {
    using T = typename decltype(tt)::type;
    using O = typename decltype(to)::type;
    using A = dacc_t<O>;
    launch(ctx, cross_entropy_backward_kernel<T, O>, ctx.grid_stride_blocks(grad_x.numel()), kBlockSize, 0, ptr<const O>(grad), ptr<const T>(x), ptr<const int64_t>(target), ptr<const A>(lse), ptr<const float>(count), x.size(0), x.size(1), ignore_index, ptr<T>(grad_x));
  });
}

AG_REGISTER_KERNEL(kernel::nll_loss_forward, kCUDA, nll_loss_forward);
AG_REGISTER_KERNEL(kernel::nll_loss_backward, kCUDA, nll_loss_backward);
AG_REGISTER_KERNEL(kernel::cross_entropy_forward, kCUDA, cross_entropy_forward);
AG_REGISTER_KERNEL(kernel::cross_entropy_backward, kCUDA, cross_entropy_backward);

}  // namespace ampgrad::cuda
