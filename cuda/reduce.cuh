// The reduction operators of the CUDA reductions and softmax: a state, its identity, how one
// element joins it, how two states combine (deterministically), and how the result is written.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cuda/std/limits>
#include <type_traits>

#include <ampgrad/cuda/common.cuh>

namespace ampgrad::cuda {

template <class A> __device__ __forceinline__ bool is_nan(A x) { return x != x; }

// Sum and Mean (Mean divides by r when writing). Accumulates in float (double for f64,
// int64 for integers).
template <class T> struct SumOp {
  using Elem = T;
  using A = dacc_t<T>;
  using State = A;
  int64_t mean;  // 0 or 1; not a bool, whose padding would enter the launch's key (Note [Kernel graphs])
  int64_t r;
  __device__ State identity() const { return A(0); }
  __device__ State accumulate(State s, A x, int64_t) const { return s + x; }
  __device__ State combine(State a, State b) const { return a + b; }
  __device__ void write(State s, void* out, int64_t*, int64_t pos) const {
    static_cast<T*>(out)[pos] = from_acc<T>(mean ? s / static_cast<A>(r) : s);
  }
};

template <class T> struct ProdOp {
  using Elem = T;
  using A = dacc_t<T>;
  using State = A;
  __device__ State identity() const { return A(1); }
  __device__ State accumulate(State s, A x, int64_t) const { return s * x; }
  __device__ State combine(State a, State b) const { return a * b; }
  __device__ void write(State s, void* out, int64_t*, int64_t pos) const { static_cast<T*>(out)[pos] = from_acc<T>(s); }
};

template <class A> struct ArgState {
  A v;
  int64_t i;
};

// Max/Min with the index of the first occurrence; NaN wins (its first occurrence). Comparing
// indices on ties makes the result independent of the order states are combined in.
// index_only: Argmax/Argmin, whose out is Int64; otherwise out gets values and `indices`
// (when not null) the positions.
template <class T, bool kMax> struct MinMaxOp {
  using Elem = T;
  using A = dacc_t<T>;
  using State = ArgState<A>;
  bool index_only;
  __device__ State identity() const {
    using L = ::cuda::std::numeric_limits<A>;
    A worst = L::has_infinity ? (kMax ? -L::infinity() : L::infinity()) : (kMax ? L::lowest() : L::max());
    return {worst, INT64_MAX};
  }
  __device__ State combine(State a, State b) const {
    const bool an = is_nan(a.v), bn = is_nan(b.v);
    if (an || bn) return (an && bn) ? (a.i <= b.i ? a : b) : (an ? a : b);
    if (a.v == b.v) return a.i <= b.i ? a : b;
    return (kMax ? b.v > a.v : b.v < a.v) ? b : a;
  }
  __device__ State accumulate(State s, A x, int64_t j) const { return combine(s, State{x, j}); }
  __device__ void write(State s, void* out, int64_t* indices, int64_t pos) const {
    if (index_only) {
      static_cast<int64_t*>(out)[pos] = s.i;
    } else {
      static_cast<T*>(out)[pos] = from_acc<T>(s.v);
      if (indices) indices[pos] = s.i;
    }
  }
};

template <class A> struct WelfordState {
  A mean;
  A m2;  // sum of squared deviations from the mean
  int64_t n;
};

// Var with a correction (Bessel's is 1): Welford per thread, Chan et al.'s merge across
// threads, so one pass reads the data and large means do not cancel.
template <class T> struct VarOp {
  using Elem = T;
  using A = dacc_t<T>;
  using State = WelfordState<A>;
  double correction;
  __device__ State identity() const { return {A(0), A(0), 0}; }
  __device__ State accumulate(State s, A x, int64_t) const {
    s.n += 1;
    const A delta = x - s.mean;
    s.mean += delta / static_cast<A>(s.n);
    s.m2 += delta * (x - s.mean);
    return s;
  }
  __device__ State combine(State a, State b) const {
    if (b.n == 0) return a;
    if (a.n == 0) return b;
    const int64_t n = a.n + b.n;
    const A delta = b.mean - a.mean;
    const A fb = static_cast<A>(b.n) / static_cast<A>(n);
    return {a.mean + delta * fb, a.m2 + b.m2 + delta * delta * static_cast<A>(a.n) * fb, n};
  }
  __device__ void write(State s, void* out, int64_t*, int64_t pos) const {
    const double denom = static_cast<double>(s.n) - correction;  // as the CPU: NaN when <= 0
    const A v = denom > 0 ? s.m2 / static_cast<A>(denom) : ::cuda::std::numeric_limits<A>::quiet_NaN();
    static_cast<T*>(out)[pos] = from_acc<T>(v);
  }
};

// The p-norm (ReduceKind::Norm, core/kernel_kinds.h's math::norm_*) of mode M (and power P
// for integer p), accumulated in float (double for f64).
template <class T, math::NormMode M, int P> struct NormOp {
  using Elem = T;
  using A = dacc_t<T>;
  using State = A;
  A p, inv_p;  // no padding (Note [Kernel graphs])
  __device__ State identity() const { return math::norm_identity<M, A>(); }
  __device__ State accumulate(State s, A x, int64_t) const { return math::norm_accumulate<M, P>(s, x, p); }
  __device__ State combine(State a, State b) const { return math::norm_combine<M>(a, b); }
  __device__ void write(State s, void* out, int64_t*, int64_t pos) const {
    static_cast<T*>(out)[pos] = from_acc<T>(math::norm_finish<M>(s, inv_p));
  }
};

template <class A> struct LseState {
  A m;  // running max (never NaN: NaN inputs poison s instead)
  A s;  // sum of exp(x - m)
};

// log(sum(exp(x))) online: the sum is rescaled whenever the max grows, so no exp overflows.
// -inf elements contribute nothing; an infinite max is the result itself (as the CPU).
template <class T> struct LseOp {
  using Elem = T;
  using A = dacc_t<T>;
  using State = LseState<A>;
  __device__ State identity() const { return {-::cuda::std::numeric_limits<A>::infinity(), A(0)}; }
  __device__ State accumulate(State st, A x, int64_t) const {
    if (x == -::cuda::std::numeric_limits<A>::infinity()) return st;
    if (x > st.m) {
      st.s = st.s * math::exp(st.m - x) + A(1);
      st.m = x;
    } else {
      st.s += x == st.m ? A(1) : math::exp(x - st.m);  // x == m: no inf - inf; NaN x makes s NaN
    }
    return st;
  }
  __device__ State combine(State a, State b) const {
    const A ninf = -::cuda::std::numeric_limits<A>::infinity();
    if (b.m == ninf && !is_nan(b.s)) return a;
    if (a.m == ninf && !is_nan(a.s)) return b;
    if (a.m == b.m) return {a.m, a.s + b.s};  // also two infinite maxima: no inf - inf
    if (a.m > b.m) return {a.m, a.s + b.s * math::exp(b.m - a.m)};
    return {b.m, b.s + a.s * math::exp(a.m - b.m)};
  }
  __device__ static A result(State st) {
    const A inf = ::cuda::std::numeric_limits<A>::infinity();
    return (st.m == inf || st.m == -inf) && !is_nan(st.s) ? st.m : st.m + math::log(st.s);
  }
  __device__ void write(State st, void* out, int64_t*, int64_t pos) const {
    static_cast<T*>(out)[pos] = from_acc<T>(result(st));
  }
};

// This thread's share of p[begin, end): the blockDim.x threads of a row stride over it,
// 16 bytes per load once past the first 16-byte boundary.
template <class Op>
__device__ typename Op::State accumulate_row(const Op& op, const typename Op::Elem* p, int64_t begin, int64_t end) {
  using T = typename Op::Elem;
  constexpr int V = kVecSize<T>;
  const int tx = threadIdx.x, bx = blockDim.x;
  typename Op::State acc = op.identity();
  // Scalar head up to a 16-byte boundary, vectors, scalar tail.
  const auto misalign = static_cast<int64_t>(reinterpret_cast<uintptr_t>(p + begin) % 16);
  const int64_t head = min(end - begin, static_cast<int64_t>((16 - misalign) % 16) / static_cast<int64_t>(sizeof(T)));
  for (int64_t j = begin + tx; j < begin + head; j += bx) acc = op.accumulate(acc, to_acc(p[j]), j);
  const int64_t vbegin = begin + head;
  const int64_t nvec = (end - vbegin) / V;
  const auto* pv = reinterpret_cast<const Vec<T, V>*>(p + vbegin);
  // Four vectors loaded before any is accumulated: with the bound checked between loads, the
  // compiler keeps one 16-byte load in flight per thread (a row of 1024 float16 per 32 threads).
  // The accumulation order is that of the one-at-a-time loop.
  int64_t k = tx;
  for (; k + 3 * bx < nvec; k += 4 * bx) {
    Vec<T, V> v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = pv[k + u * bx];
#pragma unroll
    for (int u = 0; u < 4; ++u)
#pragma unroll
      for (int e = 0; e < V; ++e) acc = op.accumulate(acc, to_acc(v[u].v[e]), vbegin + (k + u * bx) * V + e);
  }
  // Two in flight where fewer than four are left (a row of 4096 bfloat16 is two per thread).
  for (; k + bx < nvec; k += 2 * bx) {
    const Vec<T, V> v0 = pv[k], v1 = pv[k + bx];
#pragma unroll
    for (int e = 0; e < V; ++e) acc = op.accumulate(acc, to_acc(v0.v[e]), vbegin + k * V + e);
#pragma unroll
    for (int e = 0; e < V; ++e) acc = op.accumulate(acc, to_acc(v1.v[e]), vbegin + (k + bx) * V + e);
  }
  for (; k < nvec; k += bx) {
    const Vec<T, V> v = pv[k];
#pragma unroll
    for (int e = 0; e < V; ++e) acc = op.accumulate(acc, to_acc(v.v[e]), vbegin + k * V + e);
  }
  for (int64_t j = vbegin + nvec * V + tx; j < end; j += bx) acc = op.accumulate(acc, to_acc(p[j]), j);
  return acc;
}

// __shfl_down_sync and __shfl_sync of any trivially copyable value (a reduction's state), word
// by word, over the whole warp.
template <class S> __device__ S shfl_down_any(S v, unsigned delta) {
  static_assert(std::is_trivially_copyable_v<S>);
  constexpr int kWords = static_cast<int>((sizeof(S) + 3) / 4);
  unsigned w[kWords];
  memcpy(w, &v, sizeof(S));
#pragma unroll
  for (int i = 0; i < kWords; ++i) w[i] = __shfl_down_sync(0xffffffffu, w[i], delta);
  memcpy(&v, w, sizeof(S));
  return v;
}
template <class S> __device__ S shfl_any(S v, int lane) {
  constexpr int kWords = static_cast<int>((sizeof(S) + 3) / 4);
  unsigned w[kWords];
  memcpy(w, &v, sizeof(S));
#pragma unroll
  for (int i = 0; i < kWords; ++i) w[i] = __shfl_sync(0xffffffffu, w[i], lane);
  memcpy(&v, w, sizeof(S));
  return v;
}

// One whole warp's values combined in pairs, lane i with lane i + s for s = 16, 8, 4, 2, 1:
// lane 0 ends with the total (the same pairs as the shared-memory loop below).
template <class S, class Combine> __device__ S warp_combine(S v, int lane, Combine combine) {
#pragma unroll
  for (int s = 16; s > 0; s >>= 1) {
    const S other = shfl_down_any(v, s);
    if (lane < s) v = combine(v, other);
  }
  return v;
}

// Combines the blockDim.x partial values of block row threadIdx.y (each thread's `acc`)
// pairwise in a fixed order (thread t with t + s, s = blockDim.x / 2 down to 1), and returns
// the row's total to every thread of the row. blockDim.x is a power of two. The pairs down to
// s = 32 meet in smem (blockDim.x * blockDim.y entries), the last five in the row's first
// warp by shuffles, which give the same pairs without a barrier each; a row of one warp
// (blockDim.x 32, the reductions' rows of up to 1024 float16) touches no smem and no barrier.
// Every thread of the block calls it; a caller that reuses smem afterwards (a next batch of
// rows) synchronizes first.
template <class S, class Combine>
__device__ S combine_row(S* smem, S acc, Combine combine) {
  const int tx = threadIdx.x, bx = blockDim.x;
  if (bx == 32) return shfl_any(warp_combine(acc, tx, combine), 0);
  S* mine = smem + threadIdx.y * bx;
  mine[tx] = acc;
  __syncthreads();
  const int warp_from = bx > 32 ? 32 : bx;  // pairs with s >= warp_from go through smem
  for (int s = bx / 2; s >= warp_from && s > 0; s >>= 1) {
    if (tx < s) mine[tx] = combine(mine[tx], mine[tx + s]);
    __syncthreads();
  }
  if (bx > 32) {
    if (tx < 32) {  // the row's first warp, whole (bx is a multiple of 32)
      const S v = warp_combine(mine[tx], tx, combine);
      if (tx == 0) mine[0] = v;
    }
    __syncthreads();
  } else {  // rows of fewer than 32 threads: smem all the way
    for (int s = bx / 2; s > 0; s >>= 1) {
      if (tx < s) mine[tx] = combine(mine[tx], mine[tx + s]);
      __syncthreads();
    }
  }
  return mine[0];
}

// The same down block column threadIdx.x: the blockDim.y values of the column combined
// pairwise in a fixed order, the total returned to every thread of the column.
template <class S, class Combine>
__device__ S combine_col(S* smem, S acc, Combine combine) {
  const int tx = threadIdx.x, ty = threadIdx.y, bx = blockDim.x;
  smem[ty * bx + tx] = acc;
  __syncthreads();
  for (int s = blockDim.y / 2; s > 0; s >>= 1) {
    if (ty < s) smem[ty * bx + tx] = combine(smem[ty * bx + tx], smem[(ty + s) * bx + tx]);
    __syncthreads();
  }
  return smem[tx];
}

// Launch shapes of the row and column kernels (reduce, softmax, cross-entropy).
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int pow2_at_least(int64_t v, int cap) {
  int p = 1;
  while (p < v && p < cap) p *= 2;
  return p;
}
inline unsigned grid_of(int64_t blocks) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(blocks, INT32_MAX)));
}
// Threads per row (blockDim.x) for rows of r contiguous elements; kBlockSize / it rows per block.
inline int row_threads(int64_t r) { return r <= 256 ? 32 : (r <= 2048 ? 128 : 256); }
// Threads per row of a reduction: at least four 16-byte loads each (a row of 1024 float16 is
// 128 loads: 128 threads gave each one load and seven combining rounds, 0.44 of a copy).
template <class T> int reduce_row_threads(int64_t r) {
  const int64_t loads = r / kVecSize<T> / 4;
  return loads <= 32 ? 32 : (loads <= 64 ? 64 : (loads <= 128 ? 128 : 256));
}

}  // namespace ampgrad::cuda
