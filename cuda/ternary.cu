// CUDA ternary elementwise kernels (core/elementwise_kinds.def: addcmul, addcdiv, lerp) with
// broadcasting, and their three gradients in one pass.
#include <ampgrad/core/kernels.h>
#include <ampgrad/cuda/common.cuh>
#include <ampgrad/cuda/launch.cuh>

namespace ampgrad::cuda {

namespace {

template <TernaryKind K> using TernaryConst = std::integral_constant<TernaryKind, K>;

template <class F> void visit_ternary_kind(TernaryKind k, F&& f) {
  switch (k) {
#define AG_TERNARY(Kind, ...) \
  case TernaryKind::Kind: return f(TernaryConst<TernaryKind::Kind>{});
#include <ampgrad/core/elementwise_kinds.def>
  }
  AG_INTERNAL_ASSERT(false, "ternary: unknown kind {}", static_cast<int>(k));
}

// As on the CPU: floating dtypes, and the integers too for the arith kinds.
template <TernaryKind K, class T> constexpr bool ternary_instantiated() {
  if constexpr (ternary_computes_in_float(K)) return is_float_v<T>;
  else return !std::is_same_v<T, bool>;
}

template <TernaryKind K, class T> __device__ __forceinline__ T apply_ternary(T x, T y, T z, dacc_t<T> a) {
  return from_acc<T>(ternary_op<K, dacc_t<T>>(to_acc(x), to_acc(y), to_acc(z), a));
}

// x, y, z, out flat together (Note [Dense fast path]) and 16-byte aligned: vectors, then a tail.
template <TernaryKind K, class T>
__global__ void ternary_kernel(const T* x, const T* y, const T* z, T* out, int64_t n, dacc_t<T> a) {
  constexpr int V = kVecSize<T>;
  const int64_t nvec = n / V;
  const int64_t gid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t v = gid; v < nvec; v += step) {
    const Vec<T, V> vx = reinterpret_cast<const Vec<T, V>*>(x)[v];
    const Vec<T, V> vy = reinterpret_cast<const Vec<T, V>*>(y)[v];
    const Vec<T, V> vz = reinterpret_cast<const Vec<T, V>*>(z)[v];
    Vec<T, V> r;
#pragma unroll
    for (int j = 0; j < V; ++j) r.v[j] = apply_ternary<K>(vx.v[j], vy.v[j], vz.v[j], a);
    reinterpret_cast<Vec<T, V>*>(out)[v] = r;
  }
  const int64_t t = nvec * V + gid;
  if (t < n) out[t] = apply_ternary<K>(x[t], y[t], z[t], a);
}

// Broadcast or strided operands (Note [Strided geometry]): 0 out, 1 x, 2 y, 3 z.
template <TernaryKind K, class T>
__global__ void ternary_strided_kernel(const T* x, const T* y, const T* z, T* out, Geometry<4> g, uint32_t n,
                                       dacc_t<T> a) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int64_t off[4];
  geometry_offsets(g, i, off);
  out[off[0]] = apply_ternary<K>(x[off[1]], y[off[2]], z[off[3]], a);
}

// 0 g, 1 x, 2 y, 3 z, 4-6 the gradients (null: not computed).
template <TernaryKind K, class T>
__global__ void ternary_backward_kernel(const T* g, const T* x, const T* y, const T* z, T* gx, T* gy, T* gz,
                                        Geometry<7> geo, uint32_t n, dacc_t<T> a) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int64_t off[7];
  geometry_offsets(geo, i, off);
  using A = dacc_t<T>;
  const A vg = to_acc(g[off[0]]), vx = to_acc(x[off[1]]), vy = to_acc(y[off[2]]), vz = to_acc(z[off[3]]);
  if (gx) gx[off[4]] = from_acc<T>(ternary_grad<K, 0, A>(vg, vx, vy, vz, a));
  if (gy) gy[off[5]] = from_acc<T>(ternary_grad<K, 1, A>(vg, vx, vy, vz, a));
  if (gz) gz[off[6]] = from_acc<T>(ternary_grad<K, 2, A>(vg, vx, vy, vz, a));
}

}  // namespace

void ternary(TernaryKind k, const Tensor& x, const Tensor& y, const Tensor& z, const Tensor& out, double a) {
  const int64_t n = out.numel();
  if (n == 0) return;
  KernelContext ctx(out);
  dispatch_all(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    visit_ternary_kind(k, [&](auto kind) {
      if constexpr (!ternary_instantiated<kind.value, T>()) {
        AG_INTERNAL_ASSERT(false, "ternary {} on cuda: dtype {} reaches the kernel", kind_name(kind.value), dtype_name(out.dtype()));
      } else {
        using A = dacc_t<T>;
        const T *xp = ptr<const T>(x), *yp = ptr<const T>(y), *zp = ptr<const T>(z);
        T* op = ptr<T>(out);
        if (flat_together({&out, &x, &y, &z}) && is_aligned(xp, 16) && is_aligned(yp, 16) && is_aligned(zp, 16) &&
            is_aligned(op, 16)) {
          launch(ctx, ternary_kernel<kind.value, T>, ctx.grid_stride_blocks(n / kVecSize<T> + 1), kBlockSize, 0, xp, yp, zp, op, n, static_cast<A>(a));
          return;
        }
        auto g = make_geometry<4>(out.shape(), {&out.strides(), &x.strides(), &y.strides(), &z.strides()});
        for_each_chunk(g, [&](const Geometry<4>& geo, uint32_t count, const std::array<int64_t, 4>& off) {
          launch(ctx, ternary_strided_kernel<kind.value, T>, blocks_for(count), kBlockSize, 0, xp + off[1], yp + off[2], zp + off[3], op + off[0], geo, count, static_cast<A>(a));
        });
      }
    });
  });
}

void ternary_backward(TernaryKind k, const Tensor& g, const Tensor& x, const Tensor& y, const Tensor& z,
                      const std::array<Tensor, 3>& grads, double a) {
  if (g.numel() == 0) return;
  KernelContext ctx(g);
  dispatch_floating(g.dtype(), "ternary backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = dacc_t<T>;
    const Shape none(g.dim(), 0);
    T* gp[3];
    std::array<const Shape*, 7> strides{&g.strides(), &x.strides(), &y.strides(), &z.strides(), &none, &none, &none};
    for (int i = 0; i < 3; ++i) {
      gp[i] = grads[i].defined() ? ptr<T>(grads[i]) : nullptr;
      if (gp[i]) strides[4 + i] = &grads[i].strides();
    }
    visit_ternary_kind(k, [&](auto kind) {
      auto geo = make_geometry<7>(g.shape(), strides);
      for_each_chunk(geo, [&](const Geometry<7>& gm, uint32_t count, const std::array<int64_t, 7>& off) {
        auto at = [&](int i) { return gp[i] ? gp[i] + off[4 + i] : nullptr; };
        launch(ctx, ternary_backward_kernel<kind.value, T>, blocks_for(count), kBlockSize, 0, ptr<const T>(g) + off[0], ptr<const T>(x) + off[1], ptr<const T>(y) + off[2], ptr<const T>(z) + off[3], at(0), at(1), at(2), gm, count, static_cast<A>(a));
      });
    });
  });
}

AG_REGISTER_KERNEL(kernel::ternary, kCUDA, ternary);
AG_REGISTER_KERNEL(kernel::ternary_backward, kCUDA, ternary_backward);

}  // namespace ampgrad::cuda
