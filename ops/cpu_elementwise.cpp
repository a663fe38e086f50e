// CPU reference kernels: unary, binary, where, copy and fill over strided operands.
#include <type_traits>

#include "core/kernels.h"
#include "ops/cpu_loop.h"

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
      AG_INTERNAL_ASSERT(false, "cpu unary kernel {} has no {} variant", static_cast<int>(K), dtype_name(x.dtype()));
    }
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
    } else {
      binary_typed<K, T>(x, y, out);
    }
  });
}

}  // namespace

void unary(UnaryKind k, const Tensor& x, const Tensor& out, double a, double b) {
  switch (k) {
#define AG_UNARY_CASE(K) \
  case UnaryKind::K: return unary_kind<UnaryKind::K>(x, out, a, b);
    AG_UNARY_CASE(Neg) AG_UNARY_CASE(Exp) AG_UNARY_CASE(Log) AG_UNARY_CASE(Log1p) AG_UNARY_CASE(Sqrt)
    AG_UNARY_CASE(Rsqrt) AG_UNARY_CASE(Reciprocal) AG_UNARY_CASE(Abs) AG_UNARY_CASE(Sign) AG_UNARY_CASE(Relu)
    AG_UNARY_CASE(Gelu) AG_UNARY_CASE(GeluGrad) AG_UNARY_CASE(Tanh) AG_UNARY_CASE(Sigmoid)
    AG_UNARY_CASE(Softplus) AG_UNARY_CASE(Clamp) AG_UNARY_CASE(ClampMask) AG_UNARY_CASE(PowScalar)
    AG_UNARY_CASE(AddScalar) AG_UNARY_CASE(MulScalar) AG_UNARY_CASE(RSubScalar) AG_UNARY_CASE(RDivScalar)
    AG_UNARY_CASE(NotEqualZero)
#undef AG_UNARY_CASE
  }
}

void binary(BinaryKind k, const Tensor& x, const Tensor& y, const Tensor& out) {
  switch (k) {
#define AG_BINARY_CASE(K) \
  case BinaryKind::K: return binary_kind<BinaryKind::K>(x, y, out);
    AG_BINARY_CASE(Add) AG_BINARY_CASE(Sub) AG_BINARY_CASE(Mul) AG_BINARY_CASE(Div) AG_BINARY_CASE(Pow)
    AG_BINARY_CASE(Maximum) AG_BINARY_CASE(Minimum) AG_BINARY_CASE(ReluBackward) AG_BINARY_CASE(Eq) AG_BINARY_CASE(Ne) AG_BINARY_CASE(Lt)
    AG_BINARY_CASE(Le) AG_BINARY_CASE(Gt) AG_BINARY_CASE(Ge)
#undef AG_BINARY_CASE
  }
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

void copy(const Tensor& dst, const Tensor& src) {
  visit_dtype(dst.dtype(), [&](auto dtag) {
    using D = decltype(dtag);
    visit_dtype(src.dtype(), [&](auto stag) {
      using S = decltype(stag);
      D* pd = base<D>(dst);
      const S* ps = base<const S>(src);
      for_each_offset<2>(dst.shape(), {&src.strides(), &dst.strides()}, [&](const std::array<int64_t, 2>& o) {
        if constexpr (std::is_same_v<D, S>) {
          pd[o[1]] = ps[o[0]];
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
  visit_dtype(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T v;
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      v = T(static_cast<float>(value));
    } else {
      v = static_cast<T>(value);
    }
    T* pd = base<T>(dst);
    for_each_offset<1>(dst.shape(), {&dst.strides()}, [&](const std::array<int64_t, 1>& o) { pd[o[0]] = v; });
  });
}

}  // namespace ampgrad::cpu
