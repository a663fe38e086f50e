// CUDA binary elementwise kernels (core/elementwise_kinds.def: arithmetic and comparisons, with
// broadcasting), their backward in one pass, accumulate and where.
#include <ampgrad/core/kernels.h>
#include <ampgrad/cuda/common.cuh>
#include <ampgrad/cuda/fast16.cuh>
#include <ampgrad/cuda/launch.cuh>

namespace ampgrad::cuda {

namespace {

template <BinaryKind K> using BinaryConst = std::integral_constant<BinaryKind, K>;

template <class F> void visit_binary_kind(BinaryKind k, F&& f) {
  switch (k) {
#define AG_BINARY(Kind, ...) \
  case BinaryKind::Kind: return f(BinaryConst<BinaryKind::Kind>{});
#include <ampgrad/core/elementwise_kinds.def>
  }
  AG_INTERNAL_ASSERT(false, "binary: unknown kind {}", static_cast<int>(k));
}

// As on the CPU: comparisons take every dtype, arithmetic every dtype but bool, and the kinds
// that compute in float (the op casts integers first) floating dtypes.
template <BinaryKind K, class T> constexpr bool binary_instantiated() {
  if constexpr (binary_computes_in_float(K)) return is_float_v<T>;
  else return is_comparison(K) || !std::is_same_v<T, bool>;
}

template <BinaryKind K, class T> using binary_out_t = std::conditional_t<is_comparison(K), bool, T>;

template <BinaryKind K, class T> __device__ __forceinline__ binary_out_t<K, T> apply_binary(T x, T y) {
  using A = dacc_t<T>;
  if constexpr (is_comparison(K)) return compare_op<K, A>(to_acc(x), to_acc(y));
  else if constexpr (is_reduced_v<T> && fast16::has_binary<K>) return from_acc<T>(fast16::binary<K>(to_acc(x), to_acc(y)));
  else return from_acc<T>(binary_op<K, A>(to_acc(x), to_acc(y)));
}

// x, y, out flat together (Note [Dense fast path]) and aligned to their vector size:
// vectors, then a scalar tail.
template <BinaryKind K, class T>
__global__ void binary_kernel(const T* x, const T* y, binary_out_t<K, T>* out, int64_t n) {
  using O = binary_out_t<K, T>;
  constexpr int V = kVecSize<T>;
  const int64_t nvec = n / V;
  const int64_t gid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t v = gid; v < nvec; v += step) {
    Vec<T, V> a = reinterpret_cast<const Vec<T, V>*>(x)[v];
    Vec<T, V> b = reinterpret_cast<const Vec<T, V>*>(y)[v];
    Vec<O, V> r;
#pragma unroll
    for (int j = 0; j < V; ++j) r.v[j] = apply_binary<K>(a.v[j], b.v[j]);
    reinterpret_cast<Vec<O, V>*>(out)[v] = r;
  }
  const int64_t t = nvec * V + gid;
  if (t < n) out[t] = apply_binary<K>(x[t], y[t]);
}

// Broadcast or strided operands (Note [Strided geometry]): operand 0 is out, 1 x, 2 y.
template <BinaryKind K, class T>
__global__ void binary_strided_kernel(const T* x, const T* y, binary_out_t<K, T>* out, Geometry<3> g, uint32_t n) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int64_t off[3];
  geometry_offsets(g, i, off);
  out[off[0]] = apply_binary<K>(x[off[1]], y[off[2]]);
}

template <BinaryKind K, class T>
void launch_binary(const KernelContext& ctx, const Tensor& x, const Tensor& y, const Tensor& out) {
  using O = binary_out_t<K, T>;
  constexpr int V = kVecSize<T>;
  const T* xp = ptr<const T>(x);
  const T* yp = ptr<const T>(y);
  O* op = ptr<O>(out);
  const int64_t n = out.numel();
  if (flat_together({&out, &x, &y}) && is_aligned(xp, 16) && is_aligned(yp, 16) && is_aligned(op, sizeof(O) * V)) {
    launch(ctx, binary_kernel<K, T>, ctx.grid_stride_blocks(n / V + 1), kBlockSize, 0, xp, yp, op, n);
    return;
  }
  auto g = make_geometry<3>(out.shape(), {&out.strides(), &x.strides(), &y.strides()});
  for_each_chunk(g, [&](const Geometry<3>& geo, uint32_t count, const std::array<int64_t, 3>& off) {
    launch(ctx, binary_strided_kernel<K, T>, blocks_for(count), kBlockSize, 0, xp + off[1], yp + off[2], op + off[0], geo, count);
  });
}

// The backward: both gradients from one read of g, x and y (Note [Strided geometry]): operand
// 0 is grad_x, 1 grad_y, 2 g, 3 x, 4 y. An undefined gradient comes as a null pointer.
template <BinaryKind K, class T>
__global__ void binary_backward_kernel(const T* g, const T* x, const T* y, T* gx, T* gy, Geometry<5> geo, uint32_t n) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int64_t off[5];
  geometry_offsets(geo, i, off);
  using A = dacc_t<T>;
  const A vg = to_acc(g[off[2]]), vx = to_acc(x[off[3]]), vy = to_acc(y[off[4]]);
  if (gx) gx[off[0]] = from_acc<T>(binary_grad_x<K, A>(vg, vx, vy));
  if (gy) gy[off[1]] = from_acc<T>(binary_grad_y<K, A>(vg, vx, vy));
}

// out = f(x, y) with x or y 16-bit (X, Y: their types, one of them float), each read in its own
// dtype and widened in registers (Note [Widening arithmetic] in ops/binary.cpp): 4 elements a
// thread, then a scalar tail.
template <BinaryKind K, class X, class Y>
__global__ void binary_widening_kernel(const X* x, const Y* y, float* out, int64_t n) {
  const int64_t nvec = n / 4;
  const int64_t gid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t v = gid; v < nvec; v += step) {
    Vec<X, 4> a = reinterpret_cast<const Vec<X, 4>*>(x)[v];
    Vec<Y, 4> b = reinterpret_cast<const Vec<Y, 4>*>(y)[v];
    Vec<float, 4> r;
#pragma unroll
    for (int j = 0; j < 4; ++j) r.v[j] = binary_op<K, float>(to_acc(a.v[j]), to_acc(b.v[j]));
    reinterpret_cast<Vec<float, 4>*>(out)[v] = r;
  }
  const int64_t t = nvec * 4 + gid;
  if (t < n) out[t] = binary_op<K, float>(to_acc(x[t]), to_acc(y[t]));
}

// where moves elements without looking at them, so it is instantiated per element size.
template <class E>
__global__ void where_kernel(const bool* cond, const E* x, const E* y, E* out, Geometry<4> g, uint32_t n) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int64_t off[4];
  geometry_offsets(g, i, off);
  out[off[0]] = cond[off[1]] ? x[off[2]] : y[off[3]];
}

// dst += src in the wider of their accumulation types (Note [Mixed-dtype accumulation]).
template <class D, class S>
using mixed_acc_t = std::conditional_t<std::is_same_v<D, double> || std::is_same_v<S, double>, double, float>;

template <class D, class S> __device__ __forceinline__ D add_mixed(D d, S s) {
  using A = mixed_acc_t<D, S>;
  return from_acc<D>(static_cast<A>(to_acc(d)) + static_cast<A>(to_acc(s)));
}

// Flat together (Note [Dense fast path]), 4-element vectors, then a scalar tail.
template <class D, class S> __global__ void accumulate_flat_kernel(D* dst, const S* src, int64_t n) {
  const int64_t nvec = n / 4;
  const int64_t gid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t v = gid; v < nvec; v += step) {
    Vec<D, 4> d = reinterpret_cast<const Vec<D, 4>*>(dst)[v];
    const Vec<S, 4> s = reinterpret_cast<const Vec<S, 4>*>(src)[v];
#pragma unroll
    for (int j = 0; j < 4; ++j) d.v[j] = add_mixed(d.v[j], s.v[j]);
    reinterpret_cast<Vec<D, 4>*>(dst)[v] = d;
  }
  const int64_t t = nvec * 4 + gid;
  if (t < n) dst[t] = add_mixed(dst[t], src[t]);
}

// Operand 0 is dst, 1 src (Note [Strided geometry]).
template <class D, class S>
__global__ void accumulate_strided_kernel(D* dst, const S* src, Geometry<2> g, uint32_t n) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int64_t off[2];
  geometry_offsets(g, i, off);
  dst[off[0]] = add_mixed(dst[off[0]], src[off[1]]);
}

void accumulate(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  KernelContext ctx(dst);
  dispatch_floating(dst.dtype(), "accumulate", [&](auto dtag) {
    using D = typename decltype(dtag)::type;
    dispatch_floating(src.dtype(), "accumulate", [&](auto stag) {
      using S = typename decltype(stag)::type;
      D* dp = ptr<D>(dst);
      const S* sp = ptr<const S>(src);
      const int64_t n = dst.numel();
      if (flat_together({&dst, &src}) && is_aligned(dp, 4 * sizeof(D)) && is_aligned(sp, 4 * sizeof(S))) {
        launch(ctx, accumulate_flat_kernel<D, S>, ctx.grid_stride_blocks(n / 4 + 1), kBlockSize, 0, dp, sp, n);
        return;
      }
      auto g = make_geometry<2>(dst.shape(), {&dst.strides(), &src.strides()});
      for_each_chunk(g, [&](const Geometry<2>& geo, uint32_t count, const std::array<int64_t, 2>& off) {
        launch(ctx, accumulate_strided_kernel<D, S>, blocks_for(count), kBlockSize, 0, dp + off[0], sp + off[1], geo, count);
      });
    });
  });
}

void binary(BinaryKind k, const Tensor& x, const Tensor& y, const Tensor& out) {
  if (out.numel() == 0) return;
  KernelContext ctx(out);
  dispatch_all(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    visit_binary_kind(k, [&](auto kind) {
      constexpr BinaryKind K = decltype(kind)::value;
      if constexpr (binary_instantiated<K, T>()) {
        launch_binary<K, T>(ctx, x, y, out);
      } else {
        AG_CHECK(false, "binary kernel {} on cuda: dtype {} is not supported", kind_name(K), dtype_name(x.dtype()));
      }
    });
  });
}

void binary_widening(BinaryKind k, const Tensor& x, const Tensor& y, const Tensor& out) {
  const int64_t n = out.numel();
  if (n == 0) return;
  AG_INTERNAL_ASSERT(out.dtype() == DType::Float32 && x.numel() == n && y.numel() == n && x.is_contiguous() &&
                         y.is_contiguous() && out.is_contiguous(),
                     "binary_widening: contiguous operands of one shape and a float32 output, got {}, {} and {}",
                     x.desc(), y.desc(), out.desc());
  KernelContext ctx(out);
  auto run = [&](auto xt, auto yt) {
    using X = typename decltype(xt)::type;
    using Y = typename decltype(yt)::type;
    const X* xp = ptr<const X>(x);
    const Y* yp = ptr<const Y>(y);
    float* op = ptr<float>(out);
    AG_INTERNAL_ASSERT(is_aligned(xp, 4 * sizeof(X)) && is_aligned(yp, 4 * sizeof(Y)) && is_aligned(op, 16),
                       "binary_widening: operands aligned to 4 elements");
    auto go = [&](auto kind) {
      launch(ctx, binary_widening_kernel<decltype(kind)::value, X, Y>, ctx.grid_stride_blocks(n / 4 + 1), kBlockSize, 0,
             xp, yp, op, n);
    };
    switch (k) {
      case BinaryKind::Add: return go(BinaryConst<BinaryKind::Add>{});
      case BinaryKind::Sub: return go(BinaryConst<BinaryKind::Sub>{});
      case BinaryKind::Mul: return go(BinaryConst<BinaryKind::Mul>{});
      default: AG_INTERNAL_ASSERT(false, "binary_widening: {} is not Add, Sub or Mul", kind_name(k));
    }
  };
  auto narrow = [&](const Tensor& t, auto&& f) {
    if (t.dtype() == DType::Float16) return f(TypeTag<__half>{});
    if (t.dtype() == DType::BFloat16) return f(TypeTag<__nv_bfloat16>{});
    AG_INTERNAL_ASSERT(false, "binary_widening: one operand float16 or bfloat16, got {}", dtype_name(t.dtype()));
  };
  if (x.dtype() == DType::Float32) narrow(y, [&](auto yt) { run(TypeTag<float>{}, yt); });
  else narrow(x, [&](auto xt) { run(xt, TypeTag<float>{}); });
}

void binary_backward(BinaryKind k, const Tensor& g, const Tensor& x, const Tensor& y, const Tensor& gx,
                     const Tensor& gy) {
  if (g.numel() == 0 || (!gx.defined() && !gy.defined())) return;
  KernelContext ctx(g);
  const Shape none(g.dim(), 0);
  auto geo = make_geometry<5>(g.shape(), {gx.defined() ? &gx.strides() : &none, gy.defined() ? &gy.strides() : &none,
                                          &g.strides(), &x.strides(), &y.strides()});
  dispatch_floating(g.dtype(), "binary_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    visit_binary_kind(k, [&](auto kind) {
      constexpr BinaryKind K = decltype(kind)::value;
      if constexpr (binary_grad(K).kernel) {
        const T* gp = ptr<const T>(g);
        const T* xp = ptr<const T>(x);
        const T* yp = ptr<const T>(y);
        T* gxp = gx.defined() ? ptr<T>(gx) : nullptr;
        T* gyp = gy.defined() ? ptr<T>(gy) : nullptr;
        for_each_chunk(geo, [&](const Geometry<5>& c, uint32_t count, const std::array<int64_t, 5>& off) {
          launch(ctx, binary_backward_kernel<K, T>, blocks_for(count), kBlockSize, 0, gp + off[2], xp + off[3],
                 yp + off[4], gxp ? gxp + off[0] : nullptr, gyp ? gyp + off[1] : nullptr, c, count);
        });
      } else {
        AG_INTERNAL_ASSERT(false, "binary_backward: kind {} has no backward kernel", kind_name(K));
      }
    });
  });
}

void where(const Tensor& cond, const Tensor& x, const Tensor& y, const Tensor& out) {
  if (out.numel() == 0) return;
  KernelContext ctx(out);
  auto g = make_geometry<4>(out.shape(), {&out.strides(), &cond.strides(), &x.strides(), &y.strides()});
  dispatch_size(out.element_size(), [&](auto tag) {
    using E = typename decltype(tag)::type;
    const bool* cp = ptr<const bool>(cond);
    const E* xp = ptr<const E>(x);
    const E* yp = ptr<const E>(y);
    E* op = ptr<E>(out);
    for_each_chunk(g, [&](const Geometry<4>& geo, uint32_t count, const std::array<int64_t, 4>& off) {
      launch(ctx, where_kernel<E>, blocks_for(count), kBlockSize, 0, cp + off[1], xp + off[2], yp + off[3], op + off[0], geo, count);
    });
  });
}

}  // namespace

AG_REGISTER_KERNEL(kernel::binary, kCUDA, binary);
AG_REGISTER_KERNEL(kernel::binary_backward, kCUDA, binary_backward);
AG_REGISTER_KERNEL(kernel::accumulate, kCUDA, accumulate);
AG_REGISTER_KERNEL(kernel::binary_widening, kCUDA, binary_widening);
AG_REGISTER_KERNEL(kernel::where, kCUDA, where);

}  // namespace ampgrad::cuda
