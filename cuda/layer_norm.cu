// CUDA layer norm and add_layer_norm (Note [Fused layer norm] and Note [Add and layer norm] in
// ops/norm.cpp): a warp per row; rows of up to 1024 float32 elements in registers (Note [Layer
// norm kernels]: forward in one launch, backward in two), longer ones in loops (forward in one,
// backward in three: the input gradient; per-column partial sums of the weight and bias
// gradients over chunks of rows; their sums, in chunk order).
#include <algorithm>
#include <iterator>
#include <type_traits>

#include <ampgrad/cuda/common.cuh>
#include <ampgrad/cuda/launch.cuh>
#include <ampgrad/core/kernels.h>

namespace ampgrad::cuda {

namespace {

// ---- Layer norm -------------------------------------------------------------------------------

constexpr int kLnRows = 8;          // rows (one warp each) per block of 256 threads
constexpr int kLnChunk = 256;       // rows per partial sum of the loop kernels' weight gradients
constexpr int kLnFinishWarps = 32;  // warps of the register kernels' finishing block

template <class A> __device__ __forceinline__ A ln_warp_sum(A v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// a + b rounded once, an add of its own (never contracted into a multiply before it): the
// engine's adds' bits (Note [Backward speed-ups] in speedups/backward.cpp).
template <class T> __device__ __forceinline__ T ln_add(T a, T b) {
  if constexpr (std::is_same_v<T, double>) return __dadd_rn(a, b);
  else return __fadd_rn(a, b);
}

// The output's gradient at i: dy's and dy_low's (the 16-bit copy's, Note [Cast speed-ups] in
// speedups/casts.cpp), each optional.
template <class T, class L> __device__ __forceinline__ T ln_dy(const T* dy, const L* dy_low, int64_t i) {
  T d = dy ? dy[i] : T(0);
  if (dy_low) d += static_cast<T>(to_acc(dy_low[i]));
  return d;
}

// The input gradient's store: with `acc`, added to `prev`, what gx held (an add of its own,
// never contracted into the multiply before it: the engine's add's bits, Note [Backward
// speed-ups] in speedups/backward.cpp), and rounded into gx_low too when it is not null.
template <class T, class L>
__device__ __forceinline__ void ln_store_gx(T* gx, L* gx_low, bool acc, int64_t i, T v, T prev) {
  if (acc) v = ln_add(prev, v);
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
    p = ln_add(p, dsum[i]);
  }
  return p;
}

// x[i] + res[i] (add_layer_norm's sum, the widening add's bits: Note [Widening arithmetic] in
// ops/binary.cpp), or x[i] without res.
template <class T, class R> __device__ __forceinline__ T ln_in(const T* x, const R* res, int64_t i) {
  return res ? ln_add(x[i], static_cast<T>(to_acc(res[i]))) : x[i];
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
// Adds lane's V elements of a row to what `out` holds (each with ln_add), or with `add` false
// loads them into it.
template <int V, int G, class S, class D>
__device__ __forceinline__ void ln_add_row(const S* row, D (&out)[V], bool add, int lane, int n) {
  if (!add) return ln_load_row<V, G>(row, out, lane, n);
  D t[V];
  ln_load_row<V, G>(row, t, lane, n);
#pragma unroll
  for (int i = 0; i < V; ++i)
    if (ln_col<G>(i, lane) < n) out[i] = ln_add(out[i], t[i]);
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
  if (res) ln_add_row<V, G>(res + at, v, true, lane, n);  // ln_in's add
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
  // Short rows keep the weight in registers and load the warp's next row before working on
  // this one (its loads wait while this row computes and stores; each warp takes about two of
  // the small GPT's rows). Longer ones (float32 rows over 512, float64 over 256) read the
  // weight from the cache at each row and load a row at a time, or their registers spill.
  constexpr bool kShort = V * sizeof(T) <= 64;
  T sw[V], sb[V], wv[kShort ? V : 1];
#pragma unroll
  for (int i = 0; i < V; ++i) sw[i] = sb[i] = T(0);
  if constexpr (kShort) {
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
    if (dy_low) ln_add_row<V, G>(dy_low + at, d, dy != nullptr, lane, n);
    if (acc) ln_load_row<V, G>(gx + at, prev, lane, n);
    if (dsum) ln_add_row<V, G>(dsum + at, prev, acc, lane, n);
  };
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kLnRows;
  int64_t r = static_cast<int64_t>(blockIdx.x) * kLnRows + threadIdx.y;
  T xv[V], d[V], prev[V], mu = 0, inv = 0;
  if (r < rows) load(r, xv, d, prev, mu, inv);
  for (; r < rows; r += stride) {
    const int64_t at = r * n, next = r + stride;
    T nx[kShort ? V : 1], nd[kShort ? V : 1], np[kShort ? V : 1], nmu = 0, ninv = 0;
    if constexpr (kShort) {
      if (next < rows) load(next, nx, nd, np, nmu, ninv);
    }
    T xh[V], g[V];
    T a = 0, c = 0;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      xh[i] = g[i] = T(0);
      if (ln_col<G>(i, lane) < n) {
        xh[i] = (xv[i] - mu) * inv;
        if constexpr (kShort) g[i] = w ? d[i] * wv[i] : d[i];
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
        if (acc || dsum) o[i] = ln_add(prev[i], o[i]);  // as ln_store_gx
      }
      ln_store_row<V, G>(gx + at, o, lane, n);
      if (gx_low) ln_store_row<V, G>(gx_low + at, o, lane, n);
    }
    if (next >= rows) break;
    if constexpr (kShort) {
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

// f(TypeTag<L>{}) for the 16-bit copy's dtype (Note [Cast speed-ups]); __half when there is none.
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

AG_REGISTER_KERNEL(kernel::layer_norm_forward, kCUDA, layer_norm_forward);
AG_REGISTER_KERNEL(kernel::layer_norm_backward, kCUDA, layer_norm_backward);

}  // namespace ampgrad::cuda
