// CUDA layer norm (Note [Fused layer norm] in ops/norm.cpp): a warp per row, forward in one
// launch, backward in three (the input gradient; per-column partial sums of the weight and
// bias gradients over chunks of rows; their sums, in chunk order).
// CUDA batch norm (Note [Fused batch norm] in ops/norm.cpp): per-channel statistics in one
// launch, the normalization in one, and the backward in two (per-channel sums, then the input
// gradient). x is viewed as [outer, C, inner]: NCHW (outer N, inner H*W) or channels-last and
// 2-D inputs (outer N*H*W, inner 1). Sums run in the accumulation type A (float, double for
// float64) in a fixed order, so results are deterministic.
#include <algorithm>
#include <iterator>
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

template <class T> const T* ptr_or_null(const Tensor& t) { return t.defined() ? ptr<const T>(t) : nullptr; }
template <class T> T* mut_or_null(const Tensor& t) { return t.defined() ? ptr<T>(t) : nullptr; }

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


// ---- Layer norm -------------------------------------------------------------------------------

constexpr int kLnRows = 8;          // rows (one warp each) per block of 256 threads
constexpr int kLnChunk = 256;       // rows per partial sum of the loop kernels' weight gradients
constexpr int kLnFinishWarps = 32;  // warps of the register kernels' finishing block

template <class A> __device__ __forceinline__ A ln_warp_sum(A v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The output's gradient at i: dy's and dy_low's (the 16-bit copy's, Note [Ready casts] in
// amp/autocast.h), each optional.
template <class T, class L> __device__ __forceinline__ T ln_dy(const T* dy, const L* dy_low, int64_t i) {
  T d = dy ? dy[i] : T(0);
  if (dy_low) d += static_cast<T>(to_acc(dy_low[i]));
  return d;
}

// The input gradient's store: with `acc`, added to `prev`, what gx held (an add of its own,
// never contracted into the multiply before it: the engine's add's bits, Note [Accumulating
// formulas] in autograd/engine.cpp), and rounded into gx_low too when it is not null.
template <class T, class L>
__device__ __forceinline__ void ln_store_gx(T* gx, L* gx_low, bool acc, int64_t i, T v, T prev) {
  if (acc) {
    if constexpr (std::is_same_v<T, double>) v = __dadd_rn(prev, v);
    else v = __fadd_rn(prev, v);
  }
  gx[i] = v;
  if (gx_low) gx_low[i] = from_acc<L>(v);
}

// What the input gradient at i is added to: what gx held (with `acc`) plus the gradient of
// add_layer_norm's sum (dsum, when not null: Note [Add and layer norm] in ops/norm.cpp), each
// an add of its own, as the engine's sums of the unfused graph.
template <class T> __device__ __forceinline__ T ln_prev(const T* gx, bool acc, const T* dsum, int64_t i) {
  T p = acc ? gx[i] : T(0);
  if (dsum) {
    if (!acc) return dsum[i];
    if constexpr (std::is_same_v<T, double>) p = __dadd_rn(p, dsum[i]);
    else p = __fadd_rn(p, dsum[i]);
  }
  return p;
}

// x[i] + res[i] (add_layer_norm's sum, the widening add's bits: Note [Widening arithmetic] in
// ops/binary.cpp), or x[i] without res.
template <class T, class R> __device__ __forceinline__ T ln_in(const T* x, const R* res, int64_t i) {
  if (!res) return x[i];
  if constexpr (std::is_same_v<T, double>) return __dadd_rn(x[i], static_cast<T>(to_acc(res[i])));
  else return __fadd_rn(x[i], static_cast<T>(to_acc(res[i])));
}

// ---- The loop kernels: rows of any length -----------------------------------------------------

// With res (add_layer_norm), the row is x + res, written to sum and read back from there.
template <class T, class L, class R>
__global__ void ln_forward_kernel(const T* x, const R* res, T* sum, const T* w, const T* b, T* y, L* y_low, T* mean,
                                  T* rstd, int64_t rows, int64_t n, double eps) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kLnRows + threadIdx.y;
  if (r >= rows) return;
  T s = 0;
  if (res) {
    for (int64_t j = threadIdx.x; j < n; j += 32) {
      const T v = ln_in(x, res, r * n + j);
      sum[r * n + j] = v;  // read back below by this thread alone
      s += v;
    }
  } else {
    for (int64_t j = threadIdx.x; j < n; j += 32) s += x[r * n + j];
  }
  const T* xr = (res ? sum : x) + r * n;
  T* yr = y + r * n;
  const T mu = ln_warp_sum(s) / static_cast<T>(n);
  T v = 0;
  for (int64_t j = threadIdx.x; j < n; j += 32) {
    const T d = xr[j] - mu;
    v += d * d;
  }
  const T inv = T(1) / sqrt(ln_warp_sum(v) / static_cast<T>(n) + static_cast<T>(eps));
  for (int64_t j = threadIdx.x; j < n; j += 32) {
    T o = (xr[j] - mu) * inv;
    if (w) o *= w[j];
    if (b) o += b[j];
    yr[j] = o;
    if (y_low) y_low[r * n + j] = from_acc<L>(o);
  }
  if (threadIdx.x == 0) {
    mean[r] = mu;
    rstd[r] = inv;
  }
}

template <class T, class L>
__global__ void ln_backward_input_kernel(const T* dy, const L* dy_low, const T* x, const T* w, const T* mean,
                                         const T* rstd, T* gx, bool acc, const T* dsum, L* gx_low, int64_t rows,
                                         int64_t n) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kLnRows + threadIdx.y;
  if (r >= rows) return;
  const T* xr = x + r * n;
  const T mu = mean[r], inv = rstd[r];
  T a = 0, c = 0;
  for (int64_t j = threadIdx.x; j < n; j += 32) {
    const T d = ln_dy(dy, dy_low, r * n + j);
    const T g = w ? d * w[j] : d;
    a += g;
    c += g * (xr[j] - mu) * inv;
  }
  a = ln_warp_sum(a) / static_cast<T>(n);
  c = ln_warp_sum(c) / static_cast<T>(n);
  for (int64_t j = threadIdx.x; j < n; j += 32) {
    const T d = ln_dy(dy, dy_low, r * n + j);
    const T g = w ? d * w[j] : d;
    ln_store_gx(gx, gx_low, acc || dsum, r * n + j, inv * (g - a - (xr[j] - mu) * inv * c),
                ln_prev(gx, acc, dsum, r * n + j));
  }
}

// Block (32, 8): 32 columns, the rows of chunk blockIdx.y; part[chunk][column] = {sum dy xhat, sum dy}.
template <class T, class L>
__global__ void ln_backward_params_kernel(const T* dy, const L* dy_low, const T* x, const T* mean, const T* rstd,
                                          T* part, int64_t rows, int64_t n) {
  __shared__ T sw[kLnRows][33], sb[kLnRows][33];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kLnChunk, r1 = min(rows, r0 + kLnChunk);
  T gw = 0, gb = 0;
  if (col < n)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kLnRows) {
      const T g = ln_dy(dy, dy_low, r * n + col);
      gw += g * (x[r * n + col] - mean[r]) * rstd[r];
      gb += g;
    }
  sw[threadIdx.y][threadIdx.x] = gw;
  sb[threadIdx.y][threadIdx.x] = gb;
  __syncthreads();
  if (threadIdx.y == 0 && col < n) {
    T tw = 0, tb = 0;
#pragma unroll
    for (int k = 0; k < kLnRows; ++k) {
      tw += sw[k][threadIdx.x];
      tb += sb[k][threadIdx.x];
    }
    part[(static_cast<int64_t>(blockIdx.y) * n + col) * 2] = tw;
    part[(static_cast<int64_t>(blockIdx.y) * n + col) * 2 + 1] = tb;
  }
}

template <class T>
__global__ void ln_params_finish_kernel(const T* part, T* gw, T* gb, int64_t n, int64_t chunks) {
  const int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= n) return;
  T tw = 0, tb = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    tw += part[(c * n + col) * 2];
    tb += part[(c * n + col) * 2 + 1];
  }
  if (gw) gw[col] = tw;
  if (gb) gb[col] = tb;
}

// Note [Layer norm kernels]
// A warp per row. A row of up to 32 * V elements (V per lane, V a power of two up to 32) lives
// in registers, in groups of 4 adjacent columns where the rows are aligned for them (one
// 16-byte or 8-byte access a group: ln_col), else one by one, 32 apart; every array's loads of
// a row are issued before any is used. The forward reads x once (mean, then the variance about
// it, from registers: no E[x^2] - E[x]^2 cancellation; one by one, each lane sums its elements
// in the loop kernels' order, so the results are theirs bit for bit; in groups they may differ
// in the last bit) and writes y (and y_low). The backward reads dy (and dy_low) and x once,
// writes the input gradient, and keeps per-lane column sums of dy * xhat and dy over the rows
// its warp takes (two blocks per SM at most, the warps striding over the rows: with one, 8
// warps an SM waited on memory, row after row); each block adds its warps' sums in shared
// memory, in warp order, into part[block] = {dw[n], db[n]}, and a second kernel adds the
// blocks' rows in block order, 32 warps to a column strip. Deterministic for a given device,
// and two launches where the loop kernels took three (their weight gradient ran a block per 256
// rows and 32 columns: 2 blocks for a [256, 64] input, 10 us on the H200). Longer rows (and
// float64 rows over 512) take the loop kernels. (One by one, the backward's warps waited on
// memory 18 of every 25 cycles: 21 us for the small GPT's [4096, 256] rows on an H100, 15 % of
// its bandwidth; in groups, 9 us.)
constexpr int kLnMaxV = 32;

// Lane `lane`'s element i of a row on the register kernels: columns in groups of G
// (1 or 4), group k of the row at 32 * G * k, lane's G of them at lane * G within it. With G 4
// a lane moves its group with one 16-byte (float32) or 8-byte (16-bit) access.
template <int G> __device__ __forceinline__ int ln_col(int i, int lane) {
  return (i / G) * 32 * G + lane * G + i % G;
}

// Loads or stores lane's V elements of a row (ln_col<G>'s columns under n; n a multiple of G
// and the row aligned for G elements where G is 4): a group at a time.
template <int V, int G, class S, class D>
__device__ __forceinline__ void ln_load_row(const S* row, D (&out)[V], int lane, int n) {
#pragma unroll
  for (int k = 0; k < V / G; ++k) {
    const int c = ln_col<G>(k * G, lane);
    if (c < n) {
      const Vec<S, G> v = *reinterpret_cast<const Vec<S, G>*>(row + c);
#pragma unroll
      for (int e = 0; e < G; ++e) out[k * G + e] = static_cast<D>(to_acc(v.v[e]));
    }
  }
}
template <int V, int G, class S, class D>
__device__ __forceinline__ void ln_store_row(D* row, const S (&in)[V], int lane, int n) {
#pragma unroll
  for (int k = 0; k < V / G; ++k) {
    const int c = ln_col<G>(k * G, lane);
    if (c < n) {
      Vec<D, G> v;
#pragma unroll
      for (int e = 0; e < G; ++e) v.v[e] = from_acc<D>(in[k * G + e]);
      *reinterpret_cast<Vec<D, G>*>(row + c) = v;
    }
  }
}

// With res (add_layer_norm), the row is x + res, also written to sum. Elements in groups of G
// (ln_col), as the backward's.
template <class T, int V, int G, class L, class R>
__global__ void ln_forward_reg_kernel(const T* x, const R* res, T* sum, const T* w, const T* b, T* y, L* y_low,
                                      T* mean, T* rstd, int64_t rows, int n, double eps) {
  static_assert(V % G == 0, "a lane's elements are whole groups");
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kLnRows + threadIdx.y;
  if (r >= rows) return;
  const int lane = threadIdx.x;
  const int64_t at = r * n;
  T v[V], wv[V], bv[V];
#pragma unroll
  for (int i = 0; i < V; ++i) {
    v[i] = bv[i] = T(0);
    wv[i] = T(1);
  }
  // Every load first: the weight's and bias's overlap x's.
  ln_load_row<V, G>(x + at, v, lane, n);
  if (w) ln_load_row<V, G>(w, wv, lane, n);
  if (b) ln_load_row<V, G>(b, bv, lane, n);
  if (res) {  // ln_in's add
    T t[V];
    ln_load_row<V, G>(res + at, t, lane, n);
#pragma unroll
    for (int i = 0; i < V; ++i) {
      if (ln_col<G>(i, lane) < n) {
        if constexpr (std::is_same_v<T, double>) v[i] = __dadd_rn(v[i], t[i]);
        else v[i] = __fadd_rn(v[i], t[i]);
      }
    }
  }
  if (sum) ln_store_row<V, G>(sum + at, v, lane, n);
  T s = 0;
#pragma unroll
  for (int i = 0; i < V; ++i) s += v[i];
  const T mu = ln_warp_sum(s) / static_cast<T>(n);
  T q = 0;
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const T d = ln_col<G>(i, lane) < n ? v[i] - mu : T(0);
    q += d * d;
  }
  const T inv = T(1) / sqrt(ln_warp_sum(q) / static_cast<T>(n) + static_cast<T>(eps));
#pragma unroll
  for (int i = 0; i < V; ++i) {
    T o = (v[i] - mu) * inv;
    if (w) o *= wv[i];
    if (b) o += bv[i];
    v[i] = o;
  }
  ln_store_row<V, G>(y + at, v, lane, n);
  if (y_low) ln_store_row<V, G>(y_low + at, v, lane, n);
  if (lane == 0) {
    mean[r] = mu;
    rstd[r] = inv;
  }
}

// gx may be null (no input gradient), part too (no weight or bias gradient); dynamic shared
// memory kLnRows * 32 * V elements when part is not null. Elements in groups of G (ln_col).
template <class T, int V, int G, class L>
__global__ void ln_backward_reg_kernel(const T* dy, const L* dy_low, const T* x, const T* w, const T* mean,
                                       const T* rstd, T* gx, bool acc, const T* dsum, L* gx_low, T* part,
                                       int64_t rows, int n) {
  static_assert(V % G == 0, "a lane's elements are whole groups");
  const int lane = threadIdx.x;
  // The weight in registers for short rows; longer ones (float32 rows over 512, float64 over
  // 256) read it from the cache at each row, or their row's loads, all in flight, spilled.
  constexpr bool kWeightKept = V * sizeof(T) <= 64;
  T sw[V], sb[V], wv[kWeightKept ? V : 1];
#pragma unroll
  for (int i = 0; i < V; ++i) sw[i] = sb[i] = T(0);
  if constexpr (kWeightKept) {
#pragma unroll
    for (int i = 0; i < V; ++i) wv[i] = T(1);
    if (w) ln_load_row<V, G>(w, wv, lane, n);
  }
  // Row r's loads: x, d (the output's gradient: ln_dy's sum) and prev (what the input gradient
  // is added to: ln_prev's), each an add of its own as there, and the row's mean and rstd.
  auto load = [&](int64_t r, T(&xv)[V], T(&d)[V], T(&prev)[V], T& mu, T& inv) {
    const int64_t at = r * n;
    mu = mean[r];
    inv = rstd[r];
#pragma unroll
    for (int i = 0; i < V; ++i) xv[i] = d[i] = prev[i] = T(0);
    ln_load_row<V, G>(x + at, xv, lane, n);
    if (dy) ln_load_row<V, G>(dy + at, d, lane, n);
    if (dy_low) {
      if (!dy) {
        ln_load_row<V, G>(dy_low + at, d, lane, n);
      } else {
        T t[V];
        ln_load_row<V, G>(dy_low + at, t, lane, n);
#pragma unroll
        for (int i = 0; i < V; ++i) d[i] += t[i];
      }
    }
    if (acc) ln_load_row<V, G>(gx + at, prev, lane, n);
    if (dsum) {
      if (!acc) {
        ln_load_row<V, G>(dsum + at, prev, lane, n);
      } else {
        T t[V];
        ln_load_row<V, G>(dsum + at, t, lane, n);
#pragma unroll
        for (int i = 0; i < V; ++i) {
          if constexpr (std::is_same_v<T, double>) prev[i] = __dadd_rn(prev[i], t[i]);
          else prev[i] = __fadd_rn(prev[i], t[i]);
        }
      }
    }
  };
  // Short rows load the warp's next row before working on this one: its loads wait while this
  // row computes and stores (each warp takes about two of the small GPT's rows).
  constexpr bool kAhead = V * sizeof(T) <= 64;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kLnRows;
  int64_t r = static_cast<int64_t>(blockIdx.x) * kLnRows + threadIdx.y;
  T xv[V], d[V], prev[V], mu = 0, inv = 0;
  if (r < rows) load(r, xv, d, prev, mu, inv);
  for (; r < rows; r += stride) {
    const int64_t at = r * n, next = r + stride;
    T nx[kAhead ? V : 1], nd[kAhead ? V : 1], np[kAhead ? V : 1], nmu = 0, ninv = 0;
    if constexpr (kAhead) {
      if (next < rows) load(next, nx, nd, np, nmu, ninv);
    }
    T xh[V], g[V];
    T a = 0, c = 0;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      xh[i] = g[i] = T(0);
      if (ln_col<G>(i, lane) < n) {
        xh[i] = (xv[i] - mu) * inv;
        if constexpr (kWeightKept) g[i] = w ? d[i] * wv[i] : d[i];
        else g[i] = w ? d[i] * w[ln_col<G>(i, lane)] : d[i];
        sw[i] += d[i] * xh[i];
        sb[i] += d[i];
      }
      a += g[i];
      c += g[i] * xh[i];
    }
    a = ln_warp_sum(a) / static_cast<T>(n);
    c = ln_warp_sum(c) / static_cast<T>(n);
    if (gx) {
      T o[V];
#pragma unroll
      for (int i = 0; i < V; ++i) {
        o[i] = inv * (g[i] - a - xh[i] * c);
        if (acc || dsum) {  // an add of its own (ln_store_gx)
          if constexpr (std::is_same_v<T, double>) o[i] = __dadd_rn(prev[i], o[i]);
          else o[i] = __fadd_rn(prev[i], o[i]);
        }
      }
      ln_store_row<V, G>(gx + at, o, lane, n);
      if (gx_low) ln_store_row<V, G>(gx_low + at, o, lane, n);
    }
    if (next >= rows) break;
    if constexpr (kAhead) {
#pragma unroll
      for (int i = 0; i < V; ++i) {
        xv[i] = nx[i];
        d[i] = nd[i];
        prev[i] = np[i];
      }
      mu = nmu;
      inv = ninv;
    } else {
      load(next, xv, d, prev, mu, inv);
    }
  }
  if (!part) return;
  extern __shared__ unsigned char ln_smem[];
  T* sh = reinterpret_cast<T*>(ln_smem);  // [kLnRows][32 * V], by column
  const int tid = threadIdx.y * 32 + lane;
  T* out = part + static_cast<int64_t>(blockIdx.x) * 2 * n;
  for (int which = 0; which < 2; ++which) {
#pragma unroll
    for (int i = 0; i < V; ++i) sh[threadIdx.y * 32 * V + ln_col<G>(i, lane)] = which == 0 ? sw[i] : sb[i];
    __syncthreads();
    for (int col = tid; col < n; col += 32 * kLnRows) {
      T t = 0;
#pragma unroll
      for (int k = 0; k < kLnRows; ++k) t += sh[k * 32 * V + col];
      out[which * n + col] = t;
    }
    __syncthreads();
  }
}

// Block (32, kLnFinishWarps): 32 columns; the warps take the blocks' rows of part in turn, then
// add up in warp order.
template <class T>
__global__ void ln_reg_params_finish_kernel(const T* part, T* gw, T* gb, int n, int blocks) {
  __shared__ T s[2][kLnFinishWarps][33];
  const int col = blockIdx.x * 32 + threadIdx.x;
  T tw = 0, tb = 0;
  if (col < n)
    for (int k = threadIdx.y; k < blocks; k += kLnFinishWarps) {
      tw += part[static_cast<int64_t>(k) * 2 * n + col];
      tb += part[static_cast<int64_t>(k) * 2 * n + n + col];
    }
  s[0][threadIdx.y][threadIdx.x] = tw;
  s[1][threadIdx.y][threadIdx.x] = tb;
  __syncthreads();
  if (threadIdx.y == 0 && col < n) {
    tw = tb = 0;
#pragma unroll
    for (int k = 0; k < kLnFinishWarps; ++k) {
      tw += s[0][k][threadIdx.x];
      tb += s[1][k][threadIdx.x];
    }
    if (gw) gw[col] = tw;
    if (gb) gb[col] = tb;
  }
}

// Elements per lane for a row of n on the register kernels, 0 when the row is too long.
template <class T> int ln_lanes(int64_t n) {
  const int limit = sizeof(T) > 4 ? kLnMaxV / 2 : kLnMaxV;
  for (int v = 1; v <= limit; v *= 2)
    if (n <= 32 * v) return v;
  return 0;
}

// Calls f(std::integral_constant<int, V>) for the register kernels' V.
template <class F> void with_lanes(int v, F&& f) {
  switch (v) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 8: f(std::integral_constant<int, 8>{}); break;
    case 16: f(std::integral_constant<int, 16>{}); break;
    default: f(std::integral_constant<int, 32>{}); break;
  }
}

template <class F> void dispatch_ln(DType t, F&& f) {
  AG_CHECK(t == DType::Float32 || t == DType::Float64, "layer_norm on cuda: the fused kernels take float32 and float64, got {}",
           dtype_name(t));
  if (t == DType::Float64) f(TypeTag<double>{});
  else f(TypeTag<float>{});
}

// f(TypeTag<L>{}) for the 16-bit copy's dtype (Note [Ready casts]); __half when there is none.
template <class F> void dispatch_ln_low(const Tensor& x, const Tensor& low, F&& f) {
  if (!low.defined()) return f(TypeTag<__half>{});
  AG_INTERNAL_ASSERT(x.dtype() == DType::Float32 && (low.dtype() == DType::Float16 || low.dtype() == DType::BFloat16),
                     "layer_norm on cuda: a 16-bit copy of a float32 output, got {} for {}", dtype_name(low.dtype()),
                     dtype_name(x.dtype()));
  if (low.dtype() == DType::BFloat16) f(TypeTag<__nv_bfloat16>{});
  else f(TypeTag<__half>{});
}

// Whether the register kernels take a row of n (`lanes` elements a lane) in groups of 4
// columns (ln_col): every row of every defined array aligned for them.
template <size_t N> bool ln_grouped(int lanes, int64_t n, const Tensor* const (&arrays)[N]) {
  return lanes >= 4 && n % 4 == 0 && std::all_of(std::begin(arrays), std::end(arrays), [](const Tensor* t) {
           return !t->defined() || is_aligned(ampgrad::detail::address(*t), 4 * t->element_size());
         });
}

unsigned ln_blocks(int64_t rows) { return static_cast<unsigned>((rows + kLnRows - 1) / kLnRows); }

}  // namespace

// f(TypeTag<R>{}) for add_layer_norm's residual dtype R (T when there is none: layer_norm).
template <class T, class F> void dispatch_ln_residual(const Tensor& x, const Tensor& residual, F&& f) {
  if (!residual.defined() || residual.dtype() == x.dtype()) return f(TypeTag<T>{});
  AG_INTERNAL_ASSERT(x.dtype() == DType::Float32 &&
                         (residual.dtype() == DType::Float16 || residual.dtype() == DType::BFloat16),
                     "add_layer_norm on cuda: a residual of {} for an input of {}", dtype_name(residual.dtype()),
                     dtype_name(x.dtype()));
  if constexpr (std::is_same_v<T, float>) {
    if (residual.dtype() == DType::BFloat16) return f(TypeTag<__nv_bfloat16>{});
    return f(TypeTag<__half>{});
  }
}

void layer_norm_forward(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias, double eps,
                        const Tensor& sum, const Tensor& y, const Tensor& mean, const Tensor& rstd,
                        const Tensor& y_low) {
  const int64_t rows = mean.numel(), n = rows > 0 ? x.numel() / rows : 0;
  if (rows == 0 || n == 0) return;
  AG_INTERNAL_ASSERT(residual.defined() == sum.defined(), "add_layer_norm on cuda: a residual comes with a sum");
  KernelContext ctx(y);
  dispatch_ln(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_ln_residual<T>(x, residual, [&](auto res_tag) {
      using R = typename decltype(res_tag)::type;
      const R* res = residual.defined() ? ptr<const R>(residual) : nullptr;
      T* s = mut_or_null<T>(sum);
      dispatch_ln_low(x, y_low, [&](auto low_tag) {
        using L = typename decltype(low_tag)::type;
        L* low = y_low.defined() ? ptr<L>(y_low) : nullptr;
        if (const int lanes = ln_lanes<T>(n)) {
          const Tensor* arrays[] = {&x, &residual, &sum, &weight, &bias, &y, &y_low};
          const bool grouped = ln_grouped(lanes, n, arrays);
          with_lanes(lanes, [&](auto v) {
            constexpr int V = decltype(v)::value;
            auto go = [&](auto kernel) {
              launch(ctx, kernel, dim3(ln_blocks(rows)), dim3(32, kLnRows), 0, ptr<const T>(x), res, s,
                     ptr_or_null<T>(weight), ptr_or_null<T>(bias), ptr<T>(y), low, ptr<T>(mean), ptr<T>(rstd), rows,
                     static_cast<int>(n), eps);
            };
            if constexpr (V >= 4) {
              if (grouped) return go(ln_forward_reg_kernel<T, V, 4, L, R>);
            }
            go(ln_forward_reg_kernel<T, V, 1, L, R>);
          });
          return;
        }
        launch(ctx, ln_forward_kernel<T, L, R>, dim3(ln_blocks(rows)), dim3(32, kLnRows), 0, ptr<const T>(x), res, s,
               ptr_or_null<T>(weight), ptr_or_null<T>(bias), ptr<T>(y), low, ptr<T>(mean), ptr<T>(rstd), rows, n,
               eps);
      });
    });
  });
}

void layer_norm_backward(const Tensor& dy, const Tensor& dy_low, const Tensor& x, const Tensor& weight,
                         const Tensor& mean, const Tensor& rstd, const Tensor& grad_sum, const Tensor& grad_x,
                         bool accumulate, const Tensor& grad_x_low, const Tensor& grad_weight,
                         const Tensor& grad_bias) {
  const int64_t rows = mean.numel(), n = rows > 0 ? x.numel() / rows : 0;
  if (rows == 0 || n == 0) return;
  const bool params = grad_weight.defined() || grad_bias.defined();
  if (!params && !grad_x.defined()) return;
  KernelContext ctx(mean);
  dispatch_ln(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    AG_INTERNAL_ASSERT(!grad_x_low.defined() || !dy_low.defined() || grad_x_low.dtype() == dy_low.dtype(),
                       "layer_norm backward on cuda: 16-bit copies of two dtypes ({} and {})",
                       dtype_name(dy_low.dtype()), dtype_name(grad_x_low.dtype()));
    AG_INTERNAL_ASSERT(!grad_x_low.defined() || grad_x.defined(), "layer_norm backward on cuda: a copy of no grad_x");
    AG_INTERNAL_ASSERT(!grad_sum.defined() || (grad_x.defined() && grad_sum.dtype() == x.dtype()),
                       "add_layer_norm backward on cuda: a sum's gradient of {} for no grad_x or another dtype",
                       grad_sum.defined() ? dtype_name(grad_sum.dtype()) : "none");
    dispatch_ln_low(x, dy_low.defined() ? dy_low : grad_x_low, [&](auto low_tag) {
      using L = typename decltype(low_tag)::type;
      const T* d = ptr_or_null<T>(dy);
      const L* d_low = dy_low.defined() ? ptr<const L>(dy_low) : nullptr;
      L* gx_low = grad_x_low.defined() ? ptr<L>(grad_x_low) : nullptr;
      const T* dsum = grad_sum.defined() ? ptr<const T>(grad_sum) : nullptr;
      if (const int lanes = ln_lanes<T>(n)) {
        // Two blocks an SM where they fit (32 elements a lane take 225 registers: one).
        const int per_sm = lanes >= 32 ? 1 : 2;
        const int blocks = static_cast<int>(std::min<int64_t>(ln_blocks(rows), per_sm * ctx.sm_count));
        Tensor part = params ? empty({static_cast<int64_t>(blocks) * 2 * n}, mean.options()) : Tensor();
        const Tensor* arrays[] = {&dy, &dy_low, &x, &weight, &grad_sum, &grad_x, &grad_x_low};
        const bool grouped = ln_grouped(lanes, n, arrays);
        with_lanes(lanes, [&](auto v) {
          constexpr int V = decltype(v)::value;
          auto go = [&](auto kernel) {
            launch(ctx, kernel, dim3(static_cast<unsigned>(blocks)), dim3(32, kLnRows),
                   params ? kLnRows * 32 * V * sizeof(T) : 0, d, d_low, ptr<const T>(x), ptr_or_null<T>(weight),
                   ptr<const T>(mean), ptr<const T>(rstd), mut_or_null<T>(grad_x), accumulate, dsum, gx_low,
                   mut_or_null<T>(part), rows, static_cast<int>(n));
          };
          // (Ungrouped, rows over 512 float32 elements spill 100 bytes a thread: only where a
          // row is misaligned or n is not a multiple of 4.)
          if constexpr (V >= 4) {
            if (grouped) return go(ln_backward_reg_kernel<T, V, 4, L>);
          }
          go(ln_backward_reg_kernel<T, V, 1, L>);
        });
        if (params)
          launch(ctx, ln_reg_params_finish_kernel<T>, dim3(static_cast<unsigned>((n + 31) / 32)),
                 dim3(32, kLnFinishWarps), 0, ptr<const T>(part), mut_or_null<T>(grad_weight),
                 mut_or_null<T>(grad_bias), static_cast<int>(n), blocks);
        return;
      }
      if (grad_x.defined())
        launch(ctx, ln_backward_input_kernel<T, L>, dim3(ln_blocks(rows)), dim3(32, kLnRows), 0, d, d_low,
               ptr<const T>(x), ptr_or_null<T>(weight), ptr<const T>(mean), ptr<const T>(rstd), ptr<T>(grad_x),
               accumulate, dsum, gx_low, rows, n);
      if (params) {
        const int64_t chunks = (rows + kLnChunk - 1) / kLnChunk;
        Tensor part = empty({chunks * n * 2}, mean.options());
        launch(ctx, ln_backward_params_kernel<T, L>,
               dim3(static_cast<unsigned>((n + 31) / 32), static_cast<unsigned>(chunks)), dim3(32, kLnRows), 0, d,
               d_low, ptr<const T>(x), ptr<const T>(mean), ptr<const T>(rstd), ptr<T>(part), rows, n);
        launch(ctx, ln_params_finish_kernel<T>, dim3(static_cast<unsigned>((n + 255) / 256)), dim3(256), 0,
               ptr<const T>(part), mut_or_null<T>(grad_weight), mut_or_null<T>(grad_bias), n, chunks);
      }
    });
  });
}

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

AG_REGISTER_KERNEL(kernel::layer_norm_forward, kCUDA, layer_norm_forward);
AG_REGISTER_KERNEL(kernel::layer_norm_backward, kCUDA, layer_norm_backward);
AG_REGISTER_KERNEL(kernel::batch_norm_stats, kCUDA, batch_norm_stats);
AG_REGISTER_KERNEL(kernel::batch_norm_apply, kCUDA, batch_norm_apply);
AG_REGISTER_KERNEL(kernel::batch_norm_backward, kCUDA, batch_norm_backward);

}  // namespace ampgrad::cuda
