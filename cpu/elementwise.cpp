// Fast CPU elementwise kernels and sums: the kinds' formulas of core/kernel_kinds.h (the very
// templates the reference and the CUDA kernels evaluate, in float for 16-bit dtypes) over
// contiguous operands as one flat loop the compiler vectorizes, cut into chunks on the thread
// team; copies also take strided or broadcast rows, binary ops a broadcast scalar second
// operand. Anything else (other strides and broadcasting, integers) runs the reference
// (ops/cpu_elementwise.cpp, ops/cpu_reduce.cpp, ops/cpu_conv.cpp).
#include <cstring>
#include <type_traits>
#include <vector>

#include <ampgrad/core/dispatch.h>
#include <ampgrad/core/kernel_kinds.h>
#include <ampgrad/core/kernels.h>
#include <ampgrad/cpu/parallel.h>

namespace ampgrad::cpu {

namespace {

// Elements per chunk below which a loop stays on one thread (a fork costs microseconds).
constexpr int64_t kGrain = 32768;

bool floating(DType d) { return d == kFloat32 || d == kBFloat16 || d == kFloat16 || d == kFloat64; }

// Calls f(T{}) for a floating dtype.
template <class F> void visit_float(DType d, F&& f) {
  switch (d) {
    case kFloat32: return f(float{});
    case kBFloat16: return f(BFloat16{});
    case kFloat16: return f(Half{});
    default: return f(double{});
  }
}

// Same shape, all contiguous.
bool flat(const Tensor& out, std::initializer_list<const Tensor*> ins) {
  if (!out.is_contiguous()) return false;
  for (const Tensor* t : ins)
    if (!t->is_contiguous() || t->shape() != out.shape()) return false;
  return true;
}

template <class T> T* ptr(const Tensor& t) { return static_cast<T*>(t.data_ptr()); }

template <UnaryKind K, class T> void unary_flat(const Tensor& x, const Tensor& out, double a, double b) {
  using A = acc_t<T>;
  const T* px = ptr<const T>(x);
  T* po = ptr<T>(out);
  const A ca = static_cast<A>(a), cb = static_cast<A>(b);
  parallel_for(out.numel(), kGrain, [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) po[i] = static_cast<T>(unary_op<K, A>(static_cast<A>(px[i]), ca, cb));
  });
}

void unary(UnaryKind k, const Tensor& x, const Tensor& out, double a, double b) {
  if (!floating(x.dtype()) || x.dtype() != out.dtype() || !flat(out, {&x}))
    return kernel::unary.reference(k, x, out, a, b);
  visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    switch (k) {
#define AG_UNARY(Kind, ...) \
  case UnaryKind::Kind: return unary_flat<UnaryKind::Kind, T>(x, out, a, b);
#include <ampgrad/core/elementwise_kinds.def>
    }
  });
}

template <UnaryKind K, class T>
void unary_backward_flat(const Tensor& g, const Tensor& s, const Tensor& gx, double a, double b) {
  using A = acc_t<T>;
  const T* pg = ptr<const T>(g);
  const T* ps = ptr<const T>(s);
  T* po = ptr<T>(gx);
  const A ca = static_cast<A>(a), cb = static_cast<A>(b);
  parallel_for(gx.numel(), kGrain, [&](int64_t st, int64_t e) {
    for (int64_t i = st; i < e; ++i)
      po[i] = static_cast<T>(unary_grad<K, A>(static_cast<A>(pg[i]), static_cast<A>(ps[i]), ca, cb));
  });
}

void unary_backward(UnaryKind k, const Tensor& g, const Tensor& s, const Tensor& gx, double a, double b) {
  if (!floating(gx.dtype()) || g.dtype() != gx.dtype() || s.dtype() != gx.dtype() || !flat(gx, {&g, &s}))
    return kernel::unary_backward.reference(k, g, s, gx, a, b);
  visit_float(gx.dtype(), [&](auto tag) {
    using T = decltype(tag);
    switch (k) {
#define AG_UNARY(Kind, ...) \
  case UnaryKind::Kind: return unary_backward_flat<UnaryKind::Kind, T>(g, s, gx, a, b);
#include <ampgrad/core/elementwise_kinds.def>
    }
  });
}

// y may be one value broadcast (all strides 0): the tensor-scalar ops.
bool scalar_like(const Tensor& y) {
  for (int64_t i = 0; i < y.dim(); ++i)
    if (y.stride(i) != 0 && y.size(i) != 1) return false;
  return true;
}

template <BinaryKind K, class T> void binary_flat(const Tensor& x, const Tensor& y, const Tensor& out, bool y_scalar) {
  using A = acc_t<T>;
  const T* px = ptr<const T>(x);
  const T* py = ptr<const T>(y);
  T* po = ptr<T>(out);
  const A y0 = static_cast<A>(py[0]);
  parallel_for(out.numel(), kGrain, [&](int64_t s, int64_t e) {
    if (y_scalar)
      for (int64_t i = s; i < e; ++i) po[i] = static_cast<T>(binary_op<K, A>(static_cast<A>(px[i]), y0));
    else
      for (int64_t i = s; i < e; ++i)
        po[i] = static_cast<T>(binary_op<K, A>(static_cast<A>(px[i]), static_cast<A>(py[i])));
  });
}

void binary(BinaryKind k, const Tensor& x, const Tensor& y, const Tensor& out) {
  const bool y_scalar = out.numel() > 0 && scalar_like(y) && x.is_contiguous() && out.is_contiguous() &&
                        x.shape() == out.shape();
  if (is_comparison(k) || !floating(x.dtype()) || y.dtype() != x.dtype() || out.dtype() != x.dtype() ||
      !(y_scalar || flat(out, {&x, &y})))
    return kernel::binary.reference(k, x, y, out);
  visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    switch (k) {
#define AG_BINARY(Kind, ...) \
  case BinaryKind::Kind:     \
    if constexpr (!is_comparison(BinaryKind::Kind)) return binary_flat<BinaryKind::Kind, T>(x, y, out, y_scalar); \
    return;
#include <ampgrad/core/elementwise_kinds.def>
    }
  });
}

template <BinaryKind K, class T>
void binary_backward_flat(const Tensor& g, const Tensor& x, const Tensor& y, const Tensor& gx, const Tensor& gy) {
  using A = acc_t<T>;
  const T* pg = ptr<const T>(g);
  const T* px = ptr<const T>(x);
  const T* py = ptr<const T>(y);
  T* pgx = gx.defined() ? ptr<T>(gx) : nullptr;
  T* pgy = gy.defined() ? ptr<T>(gy) : nullptr;
  parallel_for(g.numel(), kGrain, [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) {
      const A vg = static_cast<A>(pg[i]), vx = static_cast<A>(px[i]), vy = static_cast<A>(py[i]);
      if (pgx) pgx[i] = static_cast<T>(binary_grad_x<K, A>(vg, vx, vy));
      if (pgy) pgy[i] = static_cast<T>(binary_grad_y<K, A>(vg, vx, vy));
    }
  });
}

void binary_backward(BinaryKind k, const Tensor& g, const Tensor& x, const Tensor& y, const Tensor& gx,
                     const Tensor& gy) {
  const bool ok = floating(g.dtype()) && x.dtype() == g.dtype() && y.dtype() == g.dtype() &&
                  g.is_contiguous() && x.is_contiguous() && y.is_contiguous() && x.shape() == g.shape() &&
                  y.shape() == g.shape() && (!gx.defined() || (gx.dtype() == g.dtype() && flat(gx, {&g}))) &&
                  (!gy.defined() || (gy.dtype() == g.dtype() && flat(gy, {&g})));
  if (!ok) return kernel::binary_backward.reference(k, g, x, y, gx, gy);
  visit_float(g.dtype(), [&](auto tag) {
    using T = decltype(tag);
    switch (k) {
#define AG_BINARY(Kind, ...) \
  case BinaryKind::Kind: return binary_backward_flat<BinaryKind::Kind, T>(g, x, y, gx, gy);
#include <ampgrad/core/elementwise_kinds.def>
    }
  });
}

// dst = src converted, both contiguous floating: each value widened to its accumulation type
// and rounded once to dst's dtype, as the reference does.
// dst contiguous, src of its shape whose last dim has unit stride (or size 1): the offset of
// each of src's rows; other dims any strides (broadcast rows: a bias copied into a GEMM's
// output before a beta = 1 product).
bool rows_of(const Tensor& dst, const Tensor& src, std::vector<int64_t>& offsets) {
  const int64_t nd = dst.dim();
  if (nd < 2 || !dst.is_contiguous() || src.shape() != dst.shape() || (src.stride(nd - 1) != 1 && src.size(nd - 1) != 1))
    return false;
  // Rows of a few elements are not worth an offset each (a column slice: rows of 1).
  if (dst.size(nd - 1) < 16) return false;
  const int64_t rows = dst.numel() / std::max<int64_t>(1, dst.size(nd - 1));
  offsets.resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rem = r, off = 0;
    for (int64_t d = nd - 2; d >= 0; --d) {
      off += (rem % src.size(d)) * src.stride(d);
      rem /= src.size(d);
    }
    offsets[r] = off;
  }
  return true;
}

template <class D, class S> void convert(D* pd, const S* ps, int64_t n) {
  using W = std::conditional_t<std::is_same_v<S, double> || std::is_same_v<D, double>, double, float>;
  if constexpr (std::is_same_v<D, S>) std::memcpy(pd, ps, static_cast<size_t>(n) * sizeof(D));
  else
    for (int64_t i = 0; i < n; ++i) pd[i] = static_cast<D>(static_cast<W>(static_cast<acc_t<S>>(ps[i])));
}

void copy(const Tensor& dst, const Tensor& src) {
  std::vector<int64_t> offsets;
  if (floating(dst.dtype()) && floating(src.dtype()) && !flat(dst, {&src}) && dst.numel() > 0 &&
      rows_of(dst, src, offsets)) {
    const int64_t row = dst.size(dst.dim() - 1);
    visit_float(dst.dtype(), [&](auto dtag) {
      using D = decltype(dtag);
      visit_float(src.dtype(), [&](auto stag) {
        using S = decltype(stag);
        const S* ps = ptr<const S>(src);
        D* pd = ptr<D>(dst);
        parallel_for(static_cast<int64_t>(offsets.size()), std::max<int64_t>(1, kGrain / row), [&](int64_t s, int64_t e) {
          for (int64_t r = s; r < e; ++r) convert(pd + r * row, ps + offsets[r], row);
        });
      });
    });
    return;
  }
  if (!floating(dst.dtype()) || !floating(src.dtype()) || !flat(dst, {&src})) return kernel::copy.reference(dst, src);
  if (dst.data_ptr() == src.data_ptr() && dst.dtype() == src.dtype()) return;
  visit_float(dst.dtype(), [&](auto dtag) {
    using D = decltype(dtag);
    visit_float(src.dtype(), [&](auto stag) {
      using S = decltype(stag);
      const S* ps = ptr<const S>(src);
      D* pd = ptr<D>(dst);
      parallel_for(dst.numel(), kGrain, [&](int64_t s, int64_t e) { convert(pd + s, ps + s, e - s); });
    });
  });
}

// dst += src, contiguous floating of the same shape: the sum formed in float (double when
// either is float64), rounded to dst's dtype once.
void accumulate(const Tensor& dst, const Tensor& src) {
  if (!floating(dst.dtype()) || !floating(src.dtype()) || !flat(dst, {&src}))
    return kernel::accumulate.reference(dst, src);
  visit_float(dst.dtype(), [&](auto dtag) {
    using D = decltype(dtag);
    visit_float(src.dtype(), [&](auto stag) {
      using S = decltype(stag);
      using W = std::conditional_t<std::is_same_v<S, double> || std::is_same_v<D, double>, double, float>;
      const S* ps = ptr<const S>(src);
      D* pd = ptr<D>(dst);
      parallel_for(dst.numel(), kGrain, [&](int64_t s, int64_t e) {
        for (int64_t i = s; i < e; ++i)
          pd[i] = static_cast<D>(static_cast<W>(static_cast<acc_t<D>>(pd[i])) + static_cast<W>(static_cast<acc_t<S>>(ps[i])));
      });
    });
  });
}

void fill(const Tensor& dst, double value) {
  if (!floating(dst.dtype()) || !dst.is_contiguous()) return kernel::fill.reference(dst, value);
  visit_float(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T v;
    if constexpr (std::is_same_v<T, double>) v = value;
    else v = static_cast<T>(static_cast<float>(value));
    T* p = ptr<T>(dst);
    parallel_for(dst.numel(), kGrain * 4, [&](int64_t s, int64_t e) { std::fill(p + s, p + e, v); });
  });
}

// Sum and Mean over r of contiguous [outer, r, inner], accumulated in double (as the
// reference), each output by one thread in a fixed order, so the result does not depend on
// the thread count: inner 1, a row sum in 8 double lanes; otherwise rows j = 0 .. r - 1 added
// into a vector of inner accumulators. Mean multiplies by 1 / r (the reference divides: a
// float64 mean may differ in its last bit).
void reduce(ReduceKind k, const Tensor& x, const Tensor& out, const Tensor& indices, double param) {
  if ((k != ReduceKind::Sum && k != ReduceKind::Mean) || !floating(x.dtype()) || out.dtype() != x.dtype() ||
      !x.is_contiguous() || !out.is_contiguous() || x.size(1) == 0)
    return kernel::reduce.reference(k, x, out, indices, param);
  const int64_t outer = x.size(0), r = x.size(1), inner = x.size(2);
  const double scale = k == ReduceKind::Mean ? 1.0 / static_cast<double>(r) : 1.0;
  visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = ptr<const T>(x);
    T* po = ptr<T>(out);
    auto store = [&](int64_t at, double v) {
      if constexpr (std::is_same_v<T, double>) po[at] = v * scale;
      else po[at] = static_cast<T>(static_cast<float>(v * scale));
    };
    if (inner == 1) {
      parallel_for(outer, std::max<int64_t>(1, kGrain / r), [&](int64_t s, int64_t e) {
        for (int64_t o = s; o < e; ++o) {
          const T* row = px + o * r;
          double lane[8] = {};
          int64_t j = 0;
          for (; j + 8 <= r; j += 8)
            for (int l = 0; l < 8; ++l) lane[l] += static_cast<double>(static_cast<acc_t<T>>(row[j + l]));
          double acc = 0;
          for (int l = 0; l < 8; ++l) acc += lane[l];
          for (; j < r; ++j) acc += static_cast<double>(static_cast<acc_t<T>>(row[j]));
          store(o, acc);
        }
      });
      return;
    }
    // Blocks of `inner` columns, each summed down r in order.
    constexpr int64_t kBlock = 256;
    const int64_t blocks = (inner + kBlock - 1) / kBlock;
    parallel_for(outer * blocks, std::max<int64_t>(1, kGrain / (r * kBlock)), [&](int64_t s, int64_t e) {
      double acc[kBlock];
      for (int64_t t = s; t < e; ++t) {
        const int64_t o = t / blocks, i0 = (t % blocks) * kBlock, n = std::min(kBlock, inner - i0);
        std::fill(acc, acc + n, 0.0);
        for (int64_t j = 0; j < r; ++j) {
          const T* row = px + (o * r + j) * inner + i0;
          for (int64_t i = 0; i < n; ++i) acc[i] += static_cast<double>(static_cast<acc_t<T>>(row[i]));
        }
        for (int64_t i = 0; i < n; ++i) store(o * inner + i0 + i, acc[i]);
      }
    });
  });
}

void dropout_mask(const Tensor& out, double p_keep, double scale, uint64_t seed, uint64_t offset) {
  if (!floating(out.dtype()) || !out.is_contiguous())
    return kernel::dropout_mask.reference(out, p_keep, scale, seed, offset);
  visit_float(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* po = ptr<T>(out);
    const float keep = static_cast<float>(p_keep);
    T on;
    if constexpr (std::is_same_v<T, double>) on = scale;
    else on = static_cast<T>(static_cast<float>(scale));
    const T off = static_cast<T>(0.0f);
    parallel_for(out.numel(), kGrain, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) po[i] = hash_uniform(seed, offset + static_cast<uint64_t>(i)) < keep ? on : off;
    });
  });
}

}  // namespace

AG_REGISTER_FAST_KERNEL(kernel::unary, unary);
AG_REGISTER_FAST_KERNEL(kernel::unary_backward, unary_backward);
AG_REGISTER_FAST_KERNEL(kernel::binary, binary);
AG_REGISTER_FAST_KERNEL(kernel::binary_backward, binary_backward);
AG_REGISTER_FAST_KERNEL(kernel::copy, copy);
AG_REGISTER_FAST_KERNEL(kernel::accumulate, accumulate);
AG_REGISTER_FAST_KERNEL(kernel::fill, fill);
AG_REGISTER_FAST_KERNEL(kernel::reduce, reduce);
AG_REGISTER_FAST_KERNEL(kernel::dropout_mask, dropout_mask);

}  // namespace ampgrad::cpu
