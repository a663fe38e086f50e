// CUDA batch norm (Note [Fused batch norm] in ops/norm.cpp): per-channel statistics in one
// launch, the normalization in one, and the backward in two (per-channel sums, then the input
// gradient). x is viewed as [outer, C, inner]: NCHW (outer N, inner H*W) or channels-last and
// 2-D inputs (outer N*H*W, inner 1). Sums run in the accumulation type A (float, double for
// float64) in a fixed order, so results are deterministic.
#include <algorithm>
#include <type_traits>

#include <ampgrad/cuda/common.cuh>
#include <ampgrad/cuda/launch.cuh>
#include <ampgrad/cuda/reduce.cuh>
#include <ampgrad/core/kernels.h>

namespace ampgrad::cuda {

namespace {

// Each (channel, split) block writes two partial sums; the last block of the launch to finish
// adds them per channel, in split order (Note [Last block] in cuda/common.cuh).
__device__ unsigned int g_bn_stats_done = 0;
__device__ unsigned int g_bn_grad_done = 0;

constexpr int kCols = 32, kRows = 8;  // the column layout's block: 32 channels x 8 rows

struct BnGeometry {
  int64_t outer, c, inner;
  int splits;  // blocks per channel (plane) or per 32 channels (columns)
  int unused = 0;  // no padding: kernel arguments are keyed by their bytes (Note [Kernel graphs])
};

// The rows [o0, o1) of split s.
__device__ __forceinline__ void split_rows(int64_t outer, int splits, int s, int64_t& o0, int64_t& o1) {
  const int64_t per = (outer + splits - 1) / splits;
  o0 = min(outer, s * per);
  o1 = min(outer, o0 + per);
}

template <class A> struct Sums2 {
  A s1, s2;
};

// Sums over channel c's elements in the rows of split s of f(element index): the plane layout,
// every thread of the (one-row) block on one channel. Returns the block's sums in every thread.
template <class A, class I, class F>
__device__ void plane_sums(const BnGeometry& g, int64_t c, int s, F&& f, A& r1, A& r2) {
  __shared__ Sums2<A> sh[kBlockSize];
  int64_t o0, o1;
  split_rows(g.outer, g.splits, s, o0, o1);
  A s1 = 0, s2 = 0;
  const I inner = static_cast<I>(g.inner), n = static_cast<I>((o1 - o0) * g.inner);
  for (I k = threadIdx.x; k < n; k += blockDim.x) {
    const I q = k / inner;
    f((static_cast<int64_t>(o0 + q) * g.c + c) * g.inner + (k - q * inner), c, s1, s2);
  }
  const Sums2<A> t = combine_row(sh, Sums2<A>{s1, s2}, [](Sums2<A> a, Sums2<A> b) {
    return Sums2<A>{a.s1 + b.s1, a.s2 + b.s2};
  });
  r1 = t.s1;
  r2 = t.s2;
}

// The column layout (inner 1): threadIdx.x over 32 neighbouring channels, threadIdx.y over
// rows. Returns channel (blockIdx.x * 32 + threadIdx.x)'s sums in the threads of row 0.
template <class A, class F>
__device__ void column_sums(const BnGeometry& g, int s, F&& f, A& r1, A& r2) {
  __shared__ A sh1[kRows][kCols], sh2[kRows][kCols];
  int64_t o0, o1;
  split_rows(g.outer, g.splits, s, o0, o1);
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kCols + threadIdx.x;
  A s1 = 0, s2 = 0;
  if (c < g.c)
    for (int64_t o = o0 + threadIdx.y; o < o1; o += kRows) f(o * g.c + c, c, s1, s2);
  sh1[threadIdx.y][threadIdx.x] = s1;
  sh2[threadIdx.y][threadIdx.x] = s2;
  __syncthreads();
  r1 = 0;
  r2 = 0;
  if (threadIdx.y == 0)
    for (int r = 0; r < kRows; ++r) {
      r1 += sh1[r][threadIdx.x];
      r2 += sh2[r][threadIdx.x];
    }
}

// Runs the partial sums of this block and writes them to part[(c * splits + s) * 2]; true in
// every thread of the last block of the launch to finish (after every block's partials).
template <class A, class I, class F>
__device__ bool partial_sums(const BnGeometry& g, A* part, unsigned int* done, F&& f) {
  const int s = blockIdx.y;
  A r1, r2;
  if (g.inner > 1) {
    const int64_t c = blockIdx.x;
    plane_sums<A, I>(g, c, s, f, r1, r2);
    if (threadIdx.x == 0) {
      part[(c * g.splits + s) * 2] = r1;
      part[(c * g.splits + s) * 2 + 1] = r2;
    }
  } else {
    column_sums<A>(g, s, f, r1, r2);
    const int64_t c = static_cast<int64_t>(blockIdx.x) * kCols + threadIdx.x;
    if (threadIdx.y == 0 && c < g.c) {
      part[(c * g.splits + s) * 2] = r1;
      part[(c * g.splits + s) * 2 + 1] = r2;
    }
  }
  return last_block_done(done);
}

// Channel c's sums over its splits, in split order.
template <class A> __device__ void channel_total(const A* part, int splits, int64_t c, A& t1, A& t2) {
  t1 = 0;
  t2 = 0;
  for (int s = 0; s < splits; ++s) {
    t1 += part[(c * splits + s) * 2];
    t2 += part[(c * splits + s) * 2 + 1];
  }
}

__device__ __forceinline__ int linear_tid() { return threadIdx.y * blockDim.x + threadIdx.x; }
__device__ __forceinline__ int block_threads() { return blockDim.x * blockDim.y; }

// Sums of x - K and (x - K)^2 per channel, K the channel's first element (a shift that keeps
// the variance E[(x-K)^2] - E[x-K]^2 free of cancellation for data far from 0); the last block
// writes mean, invstd = 1 / sqrt(var + eps) (biased var) and updates the running statistics
// (unbiased var, as PyTorch) when given.
template <class T, class A, class I>
__global__ void bn_stats_kernel(const T* x, BnGeometry g, A* part, A* mean, A* invstd, A* running_mean,
                                A* running_var, double momentum, double eps) {
  auto shift_of = [&](int64_t c) { return static_cast<A>(to_acc(x[c * g.inner])); };
  // This thread's channel: the block's (plane layout) or its column's (column layout).
  const int64_t c_col = static_cast<int64_t>(blockIdx.x) * kCols + threadIdx.x;
  const A k = g.inner > 1 ? shift_of(blockIdx.x) : (c_col < g.c ? shift_of(c_col) : A(0));
  const bool last = partial_sums<A, I>(g, part, &g_bn_stats_done, [&](int64_t e, int64_t, A& s1, A& s2) {
    const A v = static_cast<A>(to_acc(x[e])) - k;
    s1 += v;
    s2 += v * v;
  });
  if (!last) return;
  const A m = static_cast<A>(g.outer * g.inner);
  for (int64_t c = linear_tid(); c < g.c; c += block_threads()) {
    A t1, t2;
    channel_total(part, g.splits, c, t1, t2);
    const A d = t1 / m;
    const A var = max(t2 / m - d * d, A(0));
    const A mu = shift_of(c) + d;
    mean[c] = mu;
    invstd[c] = A(1) / sqrt(var + static_cast<A>(eps));
    if (running_mean) {
      const A mom = static_cast<A>(momentum);
      running_mean[c] = (A(1) - mom) * running_mean[c] + mom * mu;
      running_var[c] = (A(1) - mom) * running_var[c] + mom * var * m / (m - A(1));
    }
  }
}

// y = (x - mean) * invstd * weight + bias, weight and bias optional.
template <class T, class A, class I>
__global__ void bn_apply_kernel(const T* x, BnGeometry g, const A* mean, const A* invstd, const A* weight, const A* bias,
                                T* y, int64_t total) {
  const I inner = static_cast<I>(g.inner), channels = static_cast<I>(g.c);
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const I c = (static_cast<I>(e) / inner) % channels;
    A v = (static_cast<A>(to_acc(x[e])) - mean[c]) * invstd[c];
    if (weight) v *= weight[c];
    if (bias) v += bias[c];
    y[e] = from_acc<T>(v);
  }
}

// Per channel: sum(dy) and sum(dy * (x - mean)); the last block writes grad_bias = sum(dy),
// grad_weight = invstd * sum(dy * (x - mean)) (each when defined) and coef = the two means
// over the channel's elements for the input gradient.
template <class T, class A, class I>
__global__ void bn_grad_sums_kernel(const T* dy, const T* x, BnGeometry g, const A* mean, const A* invstd, A* part,
                                    A* coef, A* grad_weight, A* grad_bias) {
  const bool last = partial_sums<A, I>(g, part, &g_bn_grad_done, [&](int64_t e, int64_t c, A& s1, A& s2) {
    const A d = static_cast<A>(to_acc(dy[e]));
    s1 += d;
    s2 += d * (static_cast<A>(to_acc(x[e])) - mean[c]);
  });
  if (!last) return;
  const A m = static_cast<A>(g.outer * g.inner);
  for (int64_t c = linear_tid(); c < g.c; c += block_threads()) {
    A t1, t2;
    channel_total(part, g.splits, c, t1, t2);
    if (grad_bias) grad_bias[c] = t1;
    if (grad_weight) grad_weight[c] = t2 * invstd[c];
    coef[2 * c] = t1 / m;                 // mean of dy
    coef[2 * c + 1] = t2 * invstd[c] / m; // mean of dy * xhat
  }
}

// dx = (dy - [training] (mean(dy) + xhat * mean(dy * xhat))) * invstd * weight.
template <class T, class A, class I>
__global__ void bn_grad_input_kernel(const T* dy, const T* x, BnGeometry g, const A* mean, const A* invstd,
                                     const A* weight, const A* coef, bool training, T* dx, int64_t total) {
  const I inner = static_cast<I>(g.inner), channels = static_cast<I>(g.c);
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const I c = (static_cast<I>(e) / inner) % channels;
    A d = static_cast<A>(to_acc(dy[e]));
    if (training) {
      const A xhat = (static_cast<A>(to_acc(x[e])) - mean[c]) * invstd[c];
      d -= coef[2 * c] + xhat * coef[2 * c + 1];
    }
    d *= invstd[c];
    if (weight) d *= weight[c];
    dx[e] = from_acc<T>(d);
  }
}

// Blocks: about two per SM in all.
BnGeometry geometry_of(const KernelContext& ctx, int64_t outer, int64_t c, int64_t inner) {
  const int64_t target = 2 * static_cast<int64_t>(ctx.sm_count);
  const int64_t across = inner > 1 ? c : (c + kCols - 1) / kCols;  // blocks per split
  const int64_t rows = inner > 1 ? outer : (outer + kRows - 1) / kRows;
  const int splits = static_cast<int>(std::clamp<int64_t>(target / std::max<int64_t>(across, 1), 1, std::max<int64_t>(rows, 1)));
  return {outer, c, inner, splits};
}

dim3 grid_of(const BnGeometry& g) {
  return dim3(static_cast<unsigned>(g.inner > 1 ? g.c : (g.c + kCols - 1) / kCols), static_cast<unsigned>(g.splits));
}
dim3 block_of(const BnGeometry& g) { return g.inner > 1 ? dim3(kBlockSize) : dim3(kCols, kRows); }


// Calls f(TypeTag<T>{}, TypeTag<A>{}, TypeTag<I>{}): T x's dtype, A float (double for
// float64), I the index type: int32 when x's elements fit (64-bit division is emulated on the
// GPU, and dominated these kernels), else int64.
template <class F> void dispatch_bn(const Tensor& x, F&& f) {
  dispatch_floating(x.dtype(), "batch_norm", [&](auto tt) {
    using T = typename decltype(tt)::type;
    using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
    if (x.numel() <= INT32_MAX) f(tt, TypeTag<A>{}, TypeTag<int32_t>{});
    else f(tt, TypeTag<A>{}, TypeTag<int64_t>{});
  });
}

}  // namespace

void batch_norm_stats(const Tensor& x, int64_t outer, int64_t inner, double eps, const Tensor& mean,
                      const Tensor& invstd, const Tensor& running_mean, const Tensor& running_var, double momentum) {
  KernelContext ctx(mean);
  const int64_t c = mean.numel();
  const BnGeometry g = geometry_of(ctx, outer, c, inner);
  Tensor part = empty({c * g.splits * 2}, mean.options());
  dispatch_bn(x, [&](auto tt, auto ta, auto ti) {
    using T = typename decltype(tt)::type;
    using A = typename decltype(ta)::type;
    using I = typename decltype(ti)::type;
    launch(ctx, bn_stats_kernel<T, A, I>, grid_of(g), block_of(g), 0, ptr<const T>(x), g, ptr<A>(part), ptr<A>(mean), ptr<A>(invstd), mut_or_null<A>(running_mean), mut_or_null<A>(running_var), momentum, eps);
  });
}

void batch_norm_apply(const Tensor& x, int64_t outer, int64_t inner, const Tensor& mean, const Tensor& invstd,
                      const Tensor& weight, const Tensor& bias, const Tensor& y) {
  if (y.numel() == 0) return;
  KernelContext ctx(y);
  const BnGeometry g{outer, mean.numel(), inner, 1};
  dispatch_bn(x, [&](auto tt, auto ta, auto ti) {
    using T = typename decltype(tt)::type;
    using A = typename decltype(ta)::type;
    using I = typename decltype(ti)::type;
    launch(ctx, bn_apply_kernel<T, A, I>, ctx.grid_stride_blocks(y.numel()), kBlockSize, 0, ptr<const T>(x), g, ptr<const A>(mean), ptr<const A>(invstd), ptr_or_null<A>(weight), ptr_or_null<A>(bias), ptr<T>(y), y.numel());
  });
}

void batch_norm_backward(const Tensor& dy, const Tensor& x, int64_t outer, int64_t inner, const Tensor& mean,
                         const Tensor& invstd, const Tensor& weight, bool training, const Tensor& grad_x,
                         const Tensor& grad_weight, const Tensor& grad_bias) {
  KernelContext ctx(mean);
  const int64_t c = mean.numel();
  const BnGeometry g = geometry_of(ctx, outer, c, inner);
  const bool want_x = grad_x.defined() && grad_x.numel() > 0;
  // The sums feed grad_weight, grad_bias and, in training, the input gradient; in eval mode
  // the input gradient alone needs none.
  const bool sums = grad_weight.defined() || grad_bias.defined() || (training && want_x);
  Tensor coef = sums ? empty({2 * c}, mean.options()) : Tensor();
  dispatch_bn(x, [&](auto tt, auto ta, auto ti) {
    using T = typename decltype(tt)::type;
    using A = typename decltype(ta)::type;
    using I = typename decltype(ti)::type;
    if (sums) {
      Tensor part = empty({c * g.splits * 2}, mean.options());
      launch(ctx, bn_grad_sums_kernel<T, A, I>, grid_of(g), block_of(g), 0, ptr<const T>(dy), ptr<const T>(x), g, ptr<const A>(mean), ptr<const A>(invstd), ptr<A>(part), ptr<A>(coef), mut_or_null<A>(grad_weight), mut_or_null<A>(grad_bias));
    }
    if (want_x) {
      launch(ctx, bn_grad_input_kernel<T, A, I>, ctx.grid_stride_blocks(grad_x.numel()), kBlockSize, 0, ptr<const T>(dy), ptr<const T>(x), g, ptr<const A>(mean), ptr<const A>(invstd), ptr_or_null<A>(weight), ptr_or_null<A>(coef), training, ptr<T>(grad_x), grad_x.numel());
    }
  });
}

AG_REGISTER_KERNEL(kernel::batch_norm_stats, kCUDA, batch_norm_stats);
AG_REGISTER_KERNEL(kernel::batch_norm_apply, kCUDA, batch_norm_apply);
AG_REGISTER_KERNEL(kernel::batch_norm_backward, kCUDA, batch_norm_backward);

}  // namespace ampgrad::cuda
