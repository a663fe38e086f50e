// CPU reference kernels: the elementwise kinds forward and backward, where, copy, accumulate
// and fill over strided operands.
#include <type_traits>

#include <ampgrad/core/kernels.h>
#include <ampgrad/ops/cpu_loop.h>
#include <ampgrad/ops/cpu_values.h>

namespace ampgrad::cpu {

namespace {

template <class T> T* base(const Tensor& t) { return static_cast<T*>(t.data_ptr()); }

template <UnaryKind K, class T> void unary_typed(const Tensor& x, const Tensor& out, double a, double b) {
  using A = acc_t<T>;
  const T* px = base<const T>(x);
  T* po = base<T>(out);
  const A ca = static_cast<A>(a), cb = static_cast<A>(b);
  for_each_offset<2>(out.shape(), {&x.strides(), &out.strides()}, [&](const std::array<int64_t, 2>& o) {
    po[o[1]] = static_cast<T>(unary_op<K, A>(static_cast<A>(px[o[0]]), ca, cb));
  });
}

template <UnaryKind K> void unary_kind(const Tensor& x, const Tensor& out, double a, double b) {
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      unary_typed<K, T>(x, out, a, b);
    } else if constexpr (unary_takes_integers(K) && !std::is_same_v<T, bool>) {
      unary_typed<K, T>(x, out, a, b);
    } else {
      AG_INTERNAL_ASSERT(false, "cpu unary kernel {} has no {} variant", kind_name(K), dtype_name(x.dtype()));
    }
  });
}

template <UnaryKind K, class T>
void unary_backward_typed(const Tensor& g, const Tensor& s, const Tensor& gx, double a, double b) {
  using A = acc_t<T>;
  const T* pg = base<const T>(g);
  const T* ps = base<const T>(s);
  T* po = base<T>(gx);
  const A ca = static_cast<A>(a), cb = static_cast<A>(b);
  for_each_offset<3>(gx.shape(), {&g.strides(), &s.strides(), &gx.strides()}, [&](const std::array<int64_t, 3>& o) {
    po[o[2]] = static_cast<T>(unary_grad<K, A>(static_cast<A>(pg[o[0]]), static_cast<A>(ps[o[1]]), ca, cb));
  });
}

template <BinaryKind K, class T> void binary_typed(const Tensor& x, const Tensor& y, const Tensor& out) {
  using A = acc_t<T>;
  const T* px = base<const T>(x);
  const T* py = base<const T>(y);
  if constexpr (is_comparison(K)) {
    bool* po = base<bool>(out);
    for_each_offset<3>(out.shape(), {&x.strides(), &y.strides(), &out.strides()},
                       [&](const std::array<int64_t, 3>& o) {
                         po[o[2]] = compare_op<K, A>(static_cast<A>(px[o[0]]), static_cast<A>(py[o[1]]));
                       });
  } else {
    T* po = base<T>(out);
    for_each_offset<3>(out.shape(), {&x.strides(), &y.strides(), &out.strides()},
                       [&](const std::array<int64_t, 3>& o) {
                         po[o[2]] = static_cast<T>(binary_op<K, A>(static_cast<A>(px[o[0]]), static_cast<A>(py[o[1]])));
                       });
  }
}

template <BinaryKind K> void binary_kind(const Tensor& x, const Tensor& y, const Tensor& out) {
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool> && !is_comparison(K)) {
      AG_INTERNAL_ASSERT(false, "cpu binary kernel has no bool arithmetic");
    } else if constexpr (binary_computes_in_float(K) && !std::is_floating_point_v<acc_t<T>>) {
      AG_INTERNAL_ASSERT(false, "cpu binary kernel {} computes in float; the op casts {} first", kind_name(K),
                         dtype_name(x.dtype()));
    } else {
      binary_typed<K, T>(x, y, out);
    }
  });
}

// One pass over g, x, y writing whichever of gx, gy is defined (the other gets a scratch
// offset of 0 into g's own buffer and is never written).
template <BinaryKind K, class T>
void binary_backward_typed(const Tensor& g, const Tensor& x, const Tensor& y, const Tensor& gx, const Tensor& gy) {
  using A = acc_t<T>;
  const T* pg = base<const T>(g);
  const T* px = base<const T>(x);
  const T* py = base<const T>(y);
  T* pgx = gx.defined() ? base<T>(gx) : nullptr;
  T* pgy = gy.defined() ? base<T>(gy) : nullptr;
  const Shape none(g.dim(), 0);
  for_each_offset<5>(g.shape(), {&g.strides(), &x.strides(), &y.strides(), pgx ? &gx.strides() : &none, pgy ? &gy.strides() : &none},
                     [&](const std::array<int64_t, 5>& o) {
                       const A vg = static_cast<A>(pg[o[0]]), vx = static_cast<A>(px[o[1]]), vy = static_cast<A>(py[o[2]]);
                       if (pgx) pgx[o[3]] = static_cast<T>(binary_grad_x<K, A>(vg, vx, vy));
                       if (pgy) pgy[o[4]] = static_cast<T>(binary_grad_y<K, A>(vg, vx, vy));
                     });
}

void unary(UnaryKind k, const Tensor& x, const Tensor& out, double a, double b) {
  switch (k) {
#define AG_UNARY(Kind, ...) \
  case UnaryKind::Kind: return unary_kind<UnaryKind::Kind>(x, out, a, b);
#include <ampgrad/core/elementwise_kinds.def>
  }
}

void unary_backward(UnaryKind k, const Tensor& g, const Tensor& s, const Tensor& gx, double a, double b) {
  visit_floating(gx, "unary_backward", [&](auto tag) {
    using T = decltype(tag);
    switch (k) {
#define AG_UNARY(Kind, ...) \
  case UnaryKind::Kind: return unary_backward_typed<UnaryKind::Kind, T>(g, s, gx, a, b);
#include <ampgrad/core/elementwise_kinds.def>
    }
  });
}

void binary(BinaryKind k, const Tensor& x, const Tensor& y, const Tensor& out) {
  switch (k) {
#define AG_BINARY(Kind, ...) \
  case BinaryKind::Kind: return binary_kind<BinaryKind::Kind>(x, y, out);
#include <ampgrad/core/elementwise_kinds.def>
  }
}

void binary_backward(BinaryKind k, const Tensor& g, const Tensor& x, const Tensor& y, const Tensor& gx, const Tensor& gy) {
  visit_floating(g, "binary_backward", [&](auto tag) {
    using T = decltype(tag);
    switch (k) {
#define AG_BINARY(Kind, ...) \
  case BinaryKind::Kind: return binary_backward_typed<BinaryKind::Kind, T>(g, x, y, gx, gy);
#include <ampgrad/core/elementwise_kinds.def>
    }
  });
}

namespace {
template <class F> void visit_ternary_kind(TernaryKind k, F&& f) {
  switch (k) {
#define AG_TERNARY(Kind, ...) \
  case TernaryKind::Kind: return f(std::integral_constant<TernaryKind, TernaryKind::Kind>{});
#include <ampgrad/core/elementwise_kinds.def>
  }
}
// The dtypes a ternary kind runs in: floating ones, and integers too for arith kinds.
template <TernaryKind K, class T> constexpr bool ternary_takes() {
  if constexpr (std::is_same_v<T, bool>) return false;
  else return !ternary_computes_in_float(K) || std::is_floating_point_v<acc_t<T>>;
}
}  // namespace

void ternary(TernaryKind k, const Tensor& x, const Tensor& y, const Tensor& z, const Tensor& out, double a) {
  visit_ternary_kind(k, [&](auto kind) {
    visit_dtype(out.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (!ternary_takes<kind.value, T>()) {
        AG_INTERNAL_ASSERT(false, "cpu ternary kernel {} on {}", kind_name(kind.value), dtype_name(out.dtype()));
      } else {
        using A = acc_t<T>;
        const T* px = base<const T>(x);
        const T* py = base<const T>(y);
        const T* pz = base<const T>(z);
        T* po = base<T>(out);
        const A ca = static_cast<A>(a);
        for_each_offset<4>(out.shape(), {&x.strides(), &y.strides(), &z.strides(), &out.strides()},
                           [&](const std::array<int64_t, 4>& o) {
                             po[o[3]] = static_cast<T>(ternary_op<kind.value, A>(
                                 static_cast<A>(px[o[0]]), static_cast<A>(py[o[1]]), static_cast<A>(pz[o[2]]), ca));
                           });
      }
    });
  });
}

void ternary_backward(TernaryKind k, const Tensor& g, const Tensor& x, const Tensor& y, const Tensor& z,
                      const std::array<Tensor, 3>& grads, double a) {
  visit_ternary_kind(k, [&](auto kind) {
    visit_floating(g, "ternary_backward", [&](auto tag) {
      using T = decltype(tag);
      using A = acc_t<T>;
      constexpr TernaryKind K = decltype(kind)::value;
      const T *pg = base<const T>(g), *px = base<const T>(x), *py = base<const T>(y), *pz = base<const T>(z);
      T* pd[3];
      const Shape none(g.dim(), 0);
      std::array<const Shape*, 3> ds;
      for (int i = 0; i < 3; ++i) {
        pd[i] = grads[i].defined() ? base<T>(grads[i]) : nullptr;
        ds[i] = pd[i] ? &grads[i].strides() : &none;
      }
      const A ca = static_cast<A>(a);
      for_each_offset<7>(g.shape(), {&g.strides(), &x.strides(), &y.strides(), &z.strides(), ds[0], ds[1], ds[2]},
                         [&](const std::array<int64_t, 7>& o) {
                           const A vg = static_cast<A>(pg[o[0]]), vx = static_cast<A>(px[o[1]]),
                                   vy = static_cast<A>(py[o[2]]), vz = static_cast<A>(pz[o[3]]);
                           if (pd[0]) pd[0][o[4]] = static_cast<T>(ternary_grad<K, 0, A>(vg, vx, vy, vz, ca));
                           if (pd[1]) pd[1][o[5]] = static_cast<T>(ternary_grad<K, 1, A>(vg, vx, vy, vz, ca));
                           if (pd[2]) pd[2][o[6]] = static_cast<T>(ternary_grad<K, 2, A>(vg, vx, vy, vz, ca));
                         });
    });
  });
}

void where(const Tensor& cond, const Tensor& x, const Tensor& y, const Tensor& out) {
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const bool* pc = base<const bool>(cond);
    const T* px = base<const T>(x);
    const T* py = base<const T>(y);
    T* po = base<T>(out);
    for_each_offset<4>(out.shape(), {&cond.strides(), &x.strides(), &y.strides(), &out.strides()},
                       [&](const std::array<int64_t, 4>& o) { po[o[3]] = pc[o[0]] ? px[o[1]] : py[o[2]]; });
  });
}

template <class T> inline constexpr bool kIsFloat8 = std::is_same_v<T, Float8_e4m3fn> || std::is_same_v<T, Float8_e5m2>;

void copy(const Tensor& dst, const Tensor& src) {
  visit_dtype_with_float8(dst.dtype(), [&](auto dtag) {
    using D = decltype(dtag);
    visit_dtype_with_float8(src.dtype(), [&](auto stag) {
      using S = decltype(stag);
      D* pd = base<D>(dst);
      const S* ps = base<const S>(src);
      for_each_offset<2>(dst.shape(), {&src.strides(), &dst.strides()}, [&](const std::array<int64_t, 2>& o) {
        if constexpr (std::is_same_v<D, S>) {
          pd[o[1]] = ps[o[0]];
        } else if constexpr (kIsFloat8<S> || kIsFloat8<D>) {
          // Through float, as PyTorch's casts (a double rounds to float first, then to float8).
          const float v = kIsFloat8<S> ? static_cast<float>(ps[o[0]]) : static_cast<float>(static_cast<double>(ps[o[0]]));
          if constexpr (std::is_same_v<D, bool>) pd[o[1]] = v != 0.0f;
          else if constexpr (kIsFloat8<D>) pd[o[1]] = D(v);
          else pd[o[1]] = static_cast<D>(v);
        } else if constexpr (std::is_same_v<D, bool>) {
          pd[o[1]] = static_cast<double>(ps[o[0]]) != 0.0;
        } else {
          // 16-bit values widen to float; doubles and integers go through double.
          using Mid = std::conditional_t<std::is_same_v<S, double> || std::is_same_v<D, double> ||
                                             std::is_integral_v<S>,
                                         double, float>;
          pd[o[1]] = static_cast<D>(static_cast<Mid>(ps[o[0]]));
        }
      });
    });
  });
}

void accumulate(const Tensor& dst, const Tensor& src) {
  visit_dtype(dst.dtype(), [&](auto dtag) {
    using D = decltype(dtag);
    visit_dtype(src.dtype(), [&](auto stag) {
      using S = decltype(stag);
      if constexpr (std::is_integral_v<D> || std::is_integral_v<S>) {
        AG_INTERNAL_ASSERT(false, "accumulate: {} into {} is not a floating pair", dtype_name(src.dtype()),
                           dtype_name(dst.dtype()));
      } else {
        using A = std::conditional_t<std::is_same_v<D, double> || std::is_same_v<S, double>, double, float>;
        D* pd = base<D>(dst);
        const S* ps = base<const S>(src);
        for_each_offset<2>(dst.shape(), {&src.strides(), &dst.strides()}, [&](const std::array<int64_t, 2>& o) {
          pd[o[1]] = static_cast<D>(static_cast<A>(pd[o[1]]) + static_cast<A>(ps[o[0]]));
        });
      }
    });
  });
}

void fill(const Tensor& dst, double value) {
  visit_dtype_with_float8(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T v;
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16> || kIsFloat8<T>) {
      v = T(static_cast<float>(value));
    } else {
      v = static_cast<T>(value);
    }
    T* pd = base<T>(dst);
    for_each_offset<1>(dst.shape(), {&dst.strides()}, [&](const std::array<int64_t, 1>& o) { pd[o[0]] = v; });
  });
}

}  // namespace

AG_REGISTER_KERNEL(kernel::unary, kCPU, unary);
AG_REGISTER_KERNEL(kernel::unary_backward, kCPU, unary_backward);
AG_REGISTER_KERNEL(kernel::binary, kCPU, binary);
AG_REGISTER_KERNEL(kernel::binary_backward, kCPU, binary_backward);
AG_REGISTER_KERNEL(kernel::where, kCPU, where);
AG_REGISTER_KERNEL(kernel::ternary, kCPU, ternary);
AG_REGISTER_KERNEL(kernel::ternary_backward, kCPU, ternary_backward);
AG_REGISTER_KERNEL(kernel::copy, kCPU, copy);
AG_REGISTER_KERNEL(kernel::accumulate, kCPU, accumulate);
AG_REGISTER_KERNEL(kernel::fill, kCPU, fill);

}  // namespace ampgrad::cpu
