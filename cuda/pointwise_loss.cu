// CUDA pointwise losses (core/loss_kinds.def; Note [Pointwise losses] in ops/pointwise_loss.cpp):
// the losses of each element, their sum in one pass, and both gradients in one pass. Inputs are
// contiguous (the op makes them so): flat loops, 16-byte vector loads, a scalar tail.
#include <algorithm>

#include <ampgrad/core/kernels.h>
#include <ampgrad/cuda/common.cuh>
#include <ampgrad/cuda/fast16.cuh>
#include <ampgrad/cuda/launch.cuh>
#include <ampgrad/cuda/reduce.cuh>

namespace ampgrad::cuda {

namespace {

template <LossKind K> using LossConst = std::integral_constant<LossKind, K>;

template <class F> void visit_loss_kind(LossKind k, F&& f) {
  switch (k) {
#define AG_LOSS(Kind, ...) \
  case LossKind::Kind: return f(LossConst<LossKind::Kind>{});
#include <ampgrad/core/loss_kinds.def>
  }
  AG_INTERNAL_ASSERT(false, "pointwise loss: unknown kind {}", static_cast<int>(k));
}

template <LossKind K, class T, class A> __device__ __forceinline__ A element_loss(T x, T y, A a, A b) {
  if constexpr (is_reduced_v<T> && fast16::has_loss<K>) return fast16::loss<K>(to_acc(x), to_acc(y));
  else return loss_op<K, A>(to_acc(x), to_acc(y), a, b);
}

// V: the elements of a vector load, kVecSize<T> when every pointer is 16-byte aligned, else 1.
template <LossKind K, class T, int V>
__global__ void loss_kernel(const T* x, const T* y, T* out, int64_t n, dacc_t<T> a, dacc_t<T> b) {
  const int64_t nvec = n / V;
  const int64_t gid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t v = gid; v < nvec; v += step) {
    const Vec<T, V> vx = reinterpret_cast<const Vec<T, V>*>(x)[v];
    const Vec<T, V> vy = reinterpret_cast<const Vec<T, V>*>(y)[v];
    Vec<T, V> r;
#pragma unroll
    for (int j = 0; j < V; ++j) r.v[j] = from_acc<T>(element_loss<K>(vx.v[j], vy.v[j], a, b));
    reinterpret_cast<Vec<T, V>*>(out)[v] = r;
  }
  const int64_t t = nvec * V + gid;
  if (t < n) out[t] = from_acc<T>(element_loss<K>(x[t], y[t], a, b));
}

// Each thread sums its share (vectors in grid-stride order, then the tail), each block its
// threads pairwise into partial[block], and the last block to finish adds the partials into
// out (Note [Last block] in cuda/common.cuh): one pass, a fixed order.
__device__ unsigned int g_loss_blocks_done = 0;

template <LossKind K, class T, int V>
__global__ void loss_sum_kernel(const T* x, const T* y, int64_t n, dacc_t<T> a, dacc_t<T> b, dacc_t<T> scale,
                                dacc_t<T>* partial, T* out) {
  using A = dacc_t<T>;
  __shared__ A smem[kBlockSize];
  const int64_t nvec = n / V;
  const int64_t gid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  A acc = 0;
#pragma unroll 2
  for (int64_t v = gid; v < nvec; v += step) {
    const Vec<T, V> vx = reinterpret_cast<const Vec<T, V>*>(x)[v];
    const Vec<T, V> vy = reinterpret_cast<const Vec<T, V>*>(y)[v];
#pragma unroll
    for (int j = 0; j < V; ++j) acc += element_loss<K>(vx.v[j], vy.v[j], a, b);
  }
  const int64_t t = nvec * V + gid;
  if (t < n) acc += element_loss<K>(x[t], y[t], a, b);
  const A block_sum = combine_row(smem, acc, [](A p, A q) { return p + q; });
  if (threadIdx.x == 0) partial[blockIdx.x] = block_sum;
  if (!last_block_done(&g_loss_blocks_done)) return;
  // The last block adds the partials: each thread a strided share, then pairwise (a fixed
  // order; one thread adding ~1000 partials in turn cost 20 us).
  A share = 0;
  for (unsigned int blk = threadIdx.x; blk < gridDim.x; blk += blockDim.x) share += partial[blk];
  __syncthreads();  // smem is reused
  const A total = combine_row(smem, share, [](A p, A q) { return p + q; });
  if (threadIdx.x == 0) *out = from_acc<T>(total * scale);
}

// g is 0-dim (kReduced: one value for every element) or flat with x.
template <LossKind K, class T, int V, bool kReduced>
__global__ void loss_backward_kernel(const T* g, const T* x, const T* y, T* gx, T* gy, int64_t n, dacc_t<T> a,
                                     dacc_t<T> b, dacc_t<T> scale) {
  using A = dacc_t<T>;
  const int64_t nvec = n / V;
  const int64_t gid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const A g0 = kReduced ? to_acc(g[0]) * scale : A(0);
  auto one = [&](A vg, T vx, T vy, T& ox, T& oy) {
    const A ax = to_acc(vx), ay = to_acc(vy);
    if (gx) ox = from_acc<T>(loss_grad_x<K, A>(vg, ax, ay, a, b));
    if (gy) oy = from_acc<T>(loss_grad_y<K, A>(vg, ax, ay, a, b));
  };
  for (int64_t v = gid; v < nvec; v += step) {
    const Vec<T, V> vx = reinterpret_cast<const Vec<T, V>*>(x)[v];
    const Vec<T, V> vy = reinterpret_cast<const Vec<T, V>*>(y)[v];
    Vec<T, V> vg, rx, ry;
    if constexpr (!kReduced) vg = reinterpret_cast<const Vec<T, V>*>(g)[v];
#pragma unroll
    for (int j = 0; j < V; ++j) one(kReduced ? g0 : to_acc(vg.v[j]) * scale, vx.v[j], vy.v[j], rx.v[j], ry.v[j]);
    if (gx) reinterpret_cast<Vec<T, V>*>(gx)[v] = rx;
    if (gy) reinterpret_cast<Vec<T, V>*>(gy)[v] = ry;
  }
  const int64_t t = nvec * V + gid;
  if (t < n) {
    T ox, oy;
    one(kReduced ? g0 : to_acc(g[t]) * scale, x[t], y[t], ox, oy);
    if (gx) gx[t] = ox;
    if (gy) gy[t] = oy;
  }
}

// The vector loops read whole 16-byte vectors from each pointer's start.
bool vector_aligned(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (t->defined() && !is_aligned(ampgrad::detail::address(*t), 16)) return false;
  return true;
}

}  // namespace

// Calls f(std::integral_constant<int, V>) with V = kVecSize<T> when every defined tensor's
// data is 16-byte aligned (a contiguous view may start anywhere), else 1.
template <class T, class F> void with_vector_size(std::initializer_list<const Tensor*> ts, F&& f) {
  if (vector_aligned(ts)) f(std::integral_constant<int, kVecSize<T>>{});
  else f(std::integral_constant<int, 1>{});
}

void pointwise_loss(LossKind k, const Tensor& x, const Tensor& y, const Tensor& out, double a, double b) {
  const int64_t n = x.numel();
  if (n == 0) return;
  KernelContext ctx(out);
  dispatch_floating(x.dtype(), "pointwise loss", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = dacc_t<T>;
    visit_loss_kind(k, [&](auto kind) {
      with_vector_size<T>({&x, &y, &out}, [&](auto vec) {
        launch(ctx, loss_kernel<kind.value, T, vec.value>, ctx.grid_stride_blocks(n / vec.value + 1), kBlockSize, 0, ptr<const T>(x), ptr<const T>(y), ptr<T>(out), n, static_cast<A>(a), static_cast<A>(b));
      });
    });
  });
}

void pointwise_loss_sum(LossKind k, const Tensor& x, const Tensor& y, const Tensor& out, double a, double b,
                        double scale) {
  const int64_t n = x.numel();
  KernelContext ctx(out);
  dispatch_floating(x.dtype(), "pointwise loss", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = dacc_t<T>;
    // Eight blocks per SM fill it (2048 threads); the last block adds one partial per block.
    const unsigned grid = static_cast<unsigned>(
        std::clamp<int64_t>((n / kVecSize<T> + kBlockSize) / kBlockSize, 1, 8 * static_cast<int64_t>(ctx.sm_count)));
    Tensor partial = empty({static_cast<int64_t>(grid)}, TensorOptions(x.dtype() == kFloat64 ? kFloat64 : kFloat32).device(out.device()));
    visit_loss_kind(k, [&](auto kind) {
      with_vector_size<T>({&x, &y}, [&](auto vec) {
        launch(ctx, loss_sum_kernel<kind.value, T, vec.value>, grid, kBlockSize, 0, ptr<const T>(x), ptr<const T>(y), n, static_cast<A>(a), static_cast<A>(b), static_cast<A>(scale), ptr<A>(partial), ptr<T>(out));
      });
    });
  });
}

void pointwise_loss_backward(LossKind k, const Tensor& g, const Tensor& x, const Tensor& y, const Tensor& gx,
                             const Tensor& gy, double a, double b, double scale) {
  const int64_t n = x.numel();
  if (n == 0) return;
  KernelContext ctx(gx.defined() ? gx : gy);
  const bool reduced = g.dim() == 0;
  const Tensor none;
  dispatch_floating(x.dtype(), "pointwise loss backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = dacc_t<T>;
    T* pgx = gx.defined() ? ptr<T>(gx) : nullptr;
    T* pgy = gy.defined() ? ptr<T>(gy) : nullptr;
    visit_loss_kind(k, [&](auto kind) {
      with_vector_size<T>({&x, &y, &gx, &gy, reduced ? &none : &g}, [&](auto vec) {
        const unsigned blocks = ctx.grid_stride_blocks(n / vec.value + 1);
        if (reduced)
          launch(ctx, loss_backward_kernel<kind.value, T, vec.value, true>, blocks, kBlockSize, 0, ptr<const T>(g), ptr<const T>(x), ptr<const T>(y), pgx, pgy, n, static_cast<A>(a), static_cast<A>(b), static_cast<A>(scale));
        else
          launch(ctx, loss_backward_kernel<kind.value, T, vec.value, false>, blocks, kBlockSize, 0, ptr<const T>(g), ptr<const T>(x), ptr<const T>(y), pgx, pgy, n, static_cast<A>(a), static_cast<A>(b), static_cast<A>(scale));
      });
    });
  });
}

AG_REGISTER_KERNEL(kernel::pointwise_loss, kCUDA, pointwise_loss);
AG_REGISTER_KERNEL(kernel::pointwise_loss_sum, kCUDA, pointwise_loss_sum);
AG_REGISTER_KERNEL(kernel::pointwise_loss_backward, kCUDA, pointwise_loss_backward);

}  // namespace ampgrad::cuda
