// CUDA unary elementwise kernels (core/elementwise_kinds.def), forward and backward:
// contiguous and strided paths.
#include <ampgrad/core/kernels.h>
#include <ampgrad/cuda/common.cuh>
#include <ampgrad/cuda/fast16.cuh>
#include <ampgrad/cuda/launch.cuh>

namespace ampgrad::cuda {

namespace {

template <UnaryKind K> using UnaryConst = std::integral_constant<UnaryKind, K>;

template <class F> void visit_unary_kind(UnaryKind k, F&& f) {
  switch (k) {
#define AG_UNARY(Kind, ...) \
  case UnaryKind::Kind: return f(UnaryConst<UnaryKind::Kind>{});
#include <ampgrad/core/elementwise_kinds.def>
  }
  AG_INTERNAL_ASSERT(false, "unary: unknown kind {}", static_cast<int>(k));
}

// Integer tensors reach only the kinds that take them (core/kernel_kinds.h); bool has no
// unary arithmetic (as on the CPU).
template <UnaryKind K, class T> constexpr bool unary_instantiated() {
  if constexpr (is_float_v<T>) return true;
  else return unary_takes_integers(K) && !std::is_same_v<T, bool>;
}

template <UnaryKind K, class T> __device__ __forceinline__ T apply_unary(T x, dacc_t<T> a, dacc_t<T> b) {
  if constexpr (is_reduced_v<T> && fast16::has_unary<K>) return from_acc<T>(fast16::unary<K>(to_acc(x)));
  else return from_acc<T>(unary_op<K, dacc_t<T>>(to_acc(x), a, b));
}
template <UnaryKind K, class T> __device__ __forceinline__ T apply_unary_grad(T g, T s, dacc_t<T> a, dacc_t<T> b) {
  return from_acc<T>(unary_grad<K, dacc_t<T>>(to_acc(g), to_acc(s), a, b));
}

// x and out flat together (Note [Dense fast path]), 16-byte aligned: one vector per thread per step, then a scalar tail.
template <UnaryKind K, class T>
__global__ void unary_kernel(const T* x, T* out, int64_t n, dacc_t<T> a, dacc_t<T> b) {
  constexpr int V = kVecSize<T>;
  const int64_t nvec = n / V;
  const int64_t gid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t v = gid; v < nvec; v += step) {
    Vec<T, V> in = reinterpret_cast<const Vec<T, V>*>(x)[v];
    Vec<T, V> r;
#pragma unroll
    for (int j = 0; j < V; ++j) r.v[j] = apply_unary<K>(in.v[j], a, b);
    reinterpret_cast<Vec<T, V>*>(out)[v] = r;
  }
  const int64_t t = nvec * V + gid;
  if (t < n) out[t] = apply_unary<K>(x[t], a, b);
}

// Any strides (Note [Strided geometry]); operand 0 is out, 1 is x.
template <UnaryKind K, class T>
__global__ void unary_strided_kernel(const T* x, T* out, Geometry<2> g, uint32_t n, dacc_t<T> a, dacc_t<T> b) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int64_t off[2];
  geometry_offsets(g, i, off);
  out[off[0]] = apply_unary<K>(x[off[1]], a, b);
}

// The backward: g, s and grad_x flat together, vectors then a scalar tail.
template <UnaryKind K, class T>
__global__ void unary_backward_kernel(const T* g, const T* s, T* gx, int64_t n, dacc_t<T> a, dacc_t<T> b) {
  constexpr int V = kVecSize<T>;
  const int64_t nvec = n / V;
  const int64_t gid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t v = gid; v < nvec; v += step) {
    const Vec<T, V> vg = reinterpret_cast<const Vec<T, V>*>(g)[v];
    const Vec<T, V> vs = reinterpret_cast<const Vec<T, V>*>(s)[v];
    Vec<T, V> r;
#pragma unroll
    for (int j = 0; j < V; ++j) r.v[j] = apply_unary_grad<K>(vg.v[j], vs.v[j], a, b);
    reinterpret_cast<Vec<T, V>*>(gx)[v] = r;
  }
  const int64_t t = nvec * V + gid;
  if (t < n) gx[t] = apply_unary_grad<K>(g[t], s[t], a, b);
}

// Operand 0 is grad_x, 1 g, 2 s (Note [Strided geometry]).
template <UnaryKind K, class T>
__global__ void unary_backward_strided_kernel(const T* g, const T* s, T* gx, Geometry<3> geo, uint32_t n, dacc_t<T> a,
                                              dacc_t<T> b) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int64_t off[3];
  geometry_offsets(geo, i, off);
  gx[off[0]] = apply_unary_grad<K>(g[off[1]], s[off[2]], a, b);
}

template <UnaryKind K, class T>
void launch_unary(const KernelContext& ctx, const Tensor& x, const Tensor& out, double a, double b) {
  using A = dacc_t<T>;
  const A pa = static_cast<A>(a);
  const A pb = static_cast<A>(b);
  const T* xp = ptr<const T>(x);
  T* op = ptr<T>(out);
  const int64_t n = out.numel();
  if (flat_together({&out, &x}) && is_aligned(xp, 16) && is_aligned(op, 16)) {
    launch(ctx, unary_kernel<K, T>, ctx.grid_stride_blocks(n / kVecSize<T> + 1), kBlockSize, 0, xp, op, n, pa, pb);
    return;
  }
  auto g = make_geometry<2>(out.shape(), {&out.strides(), &x.strides()});
  for_each_chunk(g, [&](const Geometry<2>& geo, uint32_t count, const std::array<int64_t, 2>& off) {
    launch(ctx, unary_strided_kernel<K, T>, blocks_for(count), kBlockSize, 0, xp + off[1], op + off[0], geo, count, pa, pb);
  });
}

template <UnaryKind K, class T>
void launch_unary_backward(const KernelContext& ctx, const Tensor& g, const Tensor& s, const Tensor& gx, double a,
                           double b) {
  using A = dacc_t<T>;
  const A pa = static_cast<A>(a);
  const A pb = static_cast<A>(b);
  const T* gp = ptr<const T>(g);
  const T* sp = ptr<const T>(s);
  T* op = ptr<T>(gx);
  const int64_t n = gx.numel();
  if (flat_together({&gx, &g, &s}) && is_aligned(gp, 16) && is_aligned(sp, 16) && is_aligned(op, 16)) {
    launch(ctx, unary_backward_kernel<K, T>, ctx.grid_stride_blocks(n / kVecSize<T> + 1), kBlockSize, 0, gp, sp, op, n,
           pa, pb);
    return;
  }
  auto geo = make_geometry<3>(gx.shape(), {&gx.strides(), &g.strides(), &s.strides()});
  for_each_chunk(geo, [&](const Geometry<3>& c, uint32_t count, const std::array<int64_t, 3>& off) {
    launch(ctx, unary_backward_strided_kernel<K, T>, blocks_for(count), kBlockSize, 0, gp + off[1], sp + off[2],
           op + off[0], c, count, pa, pb);
  });
}

void unary(UnaryKind k, const Tensor& x, const Tensor& out, double a, double b) {
  if (out.numel() == 0) return;
  KernelContext ctx(out);
  dispatch_all(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    visit_unary_kind(k, [&](auto kind) {
      constexpr UnaryKind K = decltype(kind)::value;
      if constexpr (unary_instantiated<K, T>()) {
        launch_unary<K, T>(ctx, x, out, a, b);
      } else {
        AG_CHECK(false, "unary kernel {} on cuda: dtype {} is not supported", kind_name(K), dtype_name(out.dtype()));
      }
    });
  });
}

void unary_backward(UnaryKind k, const Tensor& g, const Tensor& s, const Tensor& gx, double a, double b) {
  if (gx.numel() == 0) return;
  KernelContext ctx(gx);
  dispatch_floating(gx.dtype(), "unary_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    visit_unary_kind(k, [&](auto kind) {
      constexpr UnaryKind K = decltype(kind)::value;
      if constexpr (unary_grad_reads(K) != UnaryGrad::none && unary_grad_reads(K) != UnaryGrad::pass) {
        launch_unary_backward<K, T>(ctx, g, s, gx, a, b);
      } else {
        AG_INTERNAL_ASSERT(false, "unary_backward: kind {} has no backward kernel", kind_name(K));
      }
    });
  });
}

}  // namespace

AG_REGISTER_KERNEL(kernel::unary, kCUDA, unary);
AG_REGISTER_KERNEL(kernel::unary_backward, kCUDA, unary_backward);

}  // namespace ampgrad::cuda
