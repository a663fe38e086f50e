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
  if (!last_block_done(&g_ce_blocks_done)) return;
  // The last block adds the partials: thread t the blocks t, t + threads, ... in order, then
  // the threads' sums pairwise in a fixed order (deterministic, as the serial sum it replaced).
  const int t = tx + ty * blockDim.x, threads = blockDim.x * by;
  A total = 0, counted = 0;
  for (unsigned int b = t; b < gridDim.x; b += threads) {
    total += partial[2 * b];
    counted += partial[2 * b + 1];
  }
  rows_sum[t] = total;
  rows_cnt[t] = static_cast<float>(counted);  // block counts: integers, exact in float below 2^24
  __syncthreads();
  for (int w = threads / 2; w > 0; w >>= 1) {
    if (t < w) {
      rows_sum[t] += rows_sum[t + w];
      rows_cnt[t] += rows_cnt[t + w];
    }
    __syncthreads();
  }
  if (t == 0) {
    *loss = from_acc<O>(rows_sum[0] / static_cast<A>(rows_cnt[0]));
    *count = rows_cnt[0];
  }
}

// grad_x[i, j] = grad / count * (exp(x[i, j] - lse[i]) - [j == target[i]]) for counted rows
// with a target in range, 0 elsewhere, written in x's dtype. Rows over the block's y threads
// and blockIdx.y, each row's columns over blockIdx.x and the x threads (as many as a row has
// vectors, up to 256), 16 bytes a load and a store where the rows allow (a flat loop with a
// 64-bit division per element ran at 13 % of the H200's bandwidth on [4096, 4096] bfloat16).
template <class T, class O>
__global__ void cross_entropy_backward_kernel(const O* grad, const T* x, const int64_t* target, const dacc_t<O>* lse,
                                              const float* count, int64_t n, int64_t c, int64_t ignore, bool vec,
                                              T* gx) {
  using A = dacc_t<O>;
  constexpr int V = kVecSize<T>;
  const A scale = static_cast<A>(to_acc(*grad)) / static_cast<A>(*count);
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; i < n;
       i += static_cast<int64_t>(gridDim.y) * blockDim.y) {
    const int64_t t = target[i];
    const bool counted = t != ignore && t >= 0 && t < c;
    const A l = lse[i];
    auto value = [&](T xv, int64_t j) {
      return from_acc<T>(counted ? scale * (math::exp(static_cast<A>(to_acc(xv)) - l) - (j == t ? A(1) : A(0)))
                                 : A(0));
    };
    const T* xr = x + i * c;
    T* gr = gx + i * c;
    if (vec) {
      for (int64_t k = first; k < c / V; k += stride) {
        const Vec<T, V> in = reinterpret_cast<const Vec<T, V>*>(xr)[k];
        Vec<T, V> o;
#pragma unroll
        for (int e = 0; e < V; ++e) o.v[e] = value(in.v[e], k * V + e);
        reinterpret_cast<Vec<T, V>*>(gr)[k] = o;
      }
    } else {
      for (int64_t j = first; j < c; j += stride) gr[j] = value(xr[j], j);
    }
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
  // At most 128 threads a row, two rows a block for wide rows: a thread then has four 16-byte
  // loads in flight for a row of 4096 16-bit logits (accumulate_row), not two.
  const int bx = std::min(row_threads(c), 128), by = kBlockSize / bx;
  // Eight blocks per SM at most (a block's rows run one after another: with two, a [4096, 4096]
  // forward ran at 6 % of the H200's bandwidth); the last block adds their partials.
  const unsigned grid = static_cast<unsigned>(
      std::clamp<int64_t>((n + by - 1) / by, 1, 8 * static_cast<int64_t>(ctx.sm_count)));
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
    constexpr int V = kVecSize<T>;
    const int64_t n = x.size(0), c = x.size(1);
    const bool vec = c % V == 0 && reinterpret_cast<uintptr_t>(ptr<const T>(x)) % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(ptr<T>(grad_x)) % 16 == 0;
    const int64_t per_row = vec ? c / V : c;
    const int bx = pow2_at_least(per_row, kBlockSize), by = kBlockSize / bx;  // a GPT's 256 logits: 32 x 8
    const dim3 grid(static_cast<unsigned>(std::clamp<int64_t>(ceil_div(per_row, bx), 1, 64)),
                    static_cast<unsigned>(std::clamp<int64_t>(ceil_div(n, by), 1, 65535)));
    launch(ctx, cross_entropy_backward_kernel<T, O>, grid, dim3(bx, by), 0, ptr<const O>(grad), ptr<const T>(x), ptr<const int64_t>(target), ptr<const A>(lse), ptr<const float>(count), n, c, ignore_index, vec, ptr<T>(grad_x));
  });
}

AG_REGISTER_KERNEL(kernel::nll_loss_forward, kCUDA, nll_loss_forward);
AG_REGISTER_KERNEL(kernel::nll_loss_backward, kCUDA, nll_loss_backward);
AG_REGISTER_KERNEL(kernel::cross_entropy_forward, kCUDA, cross_entropy_forward);
AG_REGISTER_KERNEL(kernel::cross_entropy_backward, kCUDA, cross_entropy_backward);

}  // namespace ampgrad::cuda
