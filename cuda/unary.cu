// CUDA unary elementwise kernels (core/kernel_kinds.h formulas): contiguous and strided paths.
#include "cuda/common.cuh"
#include "cuda/launch.cuh"
#include "cuda/kernels.h"

namespace ampgrad::cuda {

namespace {

template <UnaryKind K> using UnaryConst = std::integral_constant<UnaryKind, K>;

template <class F> void visit_unary_kind(UnaryKind k, F&& f) {
  using U = UnaryKind;
  switch (k) {
    case U::Neg: return f(UnaryConst<U::Neg>{});
    case U::Exp: return f(UnaryConst<U::Exp>{});
    case U::Log: return f(UnaryConst<U::Log>{});
    case U::Log1p: return f(UnaryConst<U::Log1p>{});
    case U::Sqrt: return f(UnaryConst<U::Sqrt>{});
    case U::Rsqrt: return f(UnaryConst<U::Rsqrt>{});
    case U::Reciprocal: return f(UnaryConst<U::Reciprocal>{});
    case U::Abs: return f(UnaryConst<U::Abs>{});
    case U::Sign: return f(UnaryConst<U::Sign>{});
    case U::Relu: return f(UnaryConst<U::Relu>{});
    case U::Gelu: return f(UnaryConst<U::Gelu>{});
    case U::GeluGrad: return f(UnaryConst<U::GeluGrad>{});
    case U::Tanh: return f(UnaryConst<U::Tanh>{});
    case U::Sigmoid: return f(UnaryConst<U::Sigmoid>{});
    case U::Softplus: return f(UnaryConst<U::Softplus>{});
    case U::Clamp: return f(UnaryConst<U::Clamp>{});
    case U::ClampMask: return f(UnaryConst<U::ClampMask>{});
    case U::PowScalar: return f(UnaryConst<U::PowScalar>{});
    case U::AddScalar: return f(UnaryConst<U::AddScalar>{});
    case U::MulScalar: return f(UnaryConst<U::MulScalar>{});
    case U::RSubScalar: return f(UnaryConst<U::RSubScalar>{});
    case U::RDivScalar: return f(UnaryConst<U::RDivScalar>{});
    case U::NotEqualZero: return f(UnaryConst<U::NotEqualZero>{});
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
  return from_acc<T>(unary_op<K, dacc_t<T>>(to_acc(x), a, b));
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

}  // namespace

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
        AG_CHECK(false, "unary op {} on cuda: dtype {} is not supported", static_cast<int>(K), dtype_name(out.dtype()));
      }
    });
  });
}

}  // namespace ampgrad::cuda
