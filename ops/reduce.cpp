// Reductions over dims with keepdim: sum, mean, prod, var, logsumexp, max/min, argmax/argmin.
#include <algorithm>
#include <cmath>

#include <ampgrad/autograd/node.h>
#include <ampgrad/core/kernels.h>
#include <ampgrad/ops/internal.h>
#include <ampgrad/ops/op_scope.h>
#include <ampgrad/ops/ops.h>
#include <ampgrad/ops/reduce_geometry.h>

namespace ampgrad {

using autograd::Grads;
using Saved = std::vector<Tensor>;
using amp::Category;

namespace {

const OpInfo kSum{"sum", Category::fp32, true, "accumulation: long sums lose float16 digits and overflow"};
const OpInfo kMean{"mean", Category::passthrough, true, "as PyTorch; the kernel accumulates in float32"};
const OpInfo kProd{"prod", Category::fp32, true, "range: products overflow float16"};
const OpInfo kVar{"var", Category::passthrough, true, "the kernel accumulates in float32 (PyTorch: no autocast)"};
const OpInfo kLogSumExp{"logsumexp", Category::fp32, true, "range and accumulation"};
const OpInfo kMax{"max", Category::passthrough, true, "exact in any dtype"};
const OpInfo kMin{"min", Category::passthrough, true, "exact in any dtype"};
const OpInfo kArgmax{"argmax", Category::passthrough, false, "returns indices"};
const OpInfo kArgmin{"argmin", Category::passthrough, false, "returns indices"};
const OpInfo kCumprod{"cumprod", Category::fp32, true, "range: running products overflow float16"};
const OpInfo kCumsum{"cumsum", Category::fp32, true, "accumulation: running sums outgrow float16's range and digits"};

// The CPU references of kernel::cumsum and kernel::cumprod (kProd): one running sum or
// product per (outer, inner) line.
template <bool kProd> void scan_cpu(const Tensor& x, const Tensor& out, bool reverse) {
  const int64_t outer = x.size(0), r = x.size(1), inner = x.size(2);
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const T* px = static_cast<const T*>(x.data_ptr());
    T* po = static_cast<T*>(out.data_ptr());
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        A s = kProd ? 1 : 0;
        for (int64_t k = 0; k < r; ++k) {
          const int64_t at = (o * r + (reverse ? r - 1 - k : k)) * inner + i;
          s = kProd ? static_cast<A>(s * static_cast<A>(px[at])) : static_cast<A>(s + static_cast<A>(px[at]));
          po[at] = static_cast<T>(s);
        }
      }
  });
}
void cumsum_cpu(const Tensor& x, const Tensor& out, bool reverse) { scan_cpu<false>(x, out, reverse); }
void cumprod_cpu(const Tensor& x, const Tensor& out) { scan_cpu<true>(x, out, false); }
AG_REGISTER_KERNEL(kernel::cumsum, kCPU, cumsum_cpu);
AG_REGISTER_KERNEL(kernel::cumprod, kCPU, cumprod_cpu);

// Note [cumprod's gradient]
// out_k = x_0 ... x_k, so d out_k / d x_i (i <= k) is the product of the line's values up to k
// but x_i. Where x_i != 0 that is out_k / x_i, and grad_i = (sum over k >= i of g_k out_k) /
// x_i, one reverse scan. Dividing fails at zeros: with z the line's first zero, every out_k
// from z on is 0, so the sum is right for i < z; grad_z = sum over k >= z of g_k out_{z-1}
// x_{z+1} ... x_k; and for i > z every product still holds x_z = 0, so grad_i = 0. PyTorch
// computes the same cases. The kernel takes each line in order, in the accumulation type.
void cumprod_backward_cpu(const Tensor& x, const Tensor& out, const Tensor& g, const Tensor& grad_x) {
  const int64_t outer = x.size(0), r = x.size(1), inner = x.size(2);
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const T* px = static_cast<const T*>(x.data_ptr());
    const T* po = static_cast<const T*>(out.data_ptr());
    const T* pg = static_cast<const T*>(g.data_ptr());
    T* gx = static_cast<T*>(grad_x.data_ptr());
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        auto at = [&](int64_t k) { return (o * r + k) * inner + i; };
        int64_t z = r;
        for (int64_t k = 0; k < r && z == r; ++k)
          if (static_cast<A>(px[at(k)]) == A(0)) z = k;
        A q = z > 0 ? static_cast<A>(po[at(z - 1)]) : A(1), at_zero = 0;
        for (int64_t k = z; k < r; ++k) {
          if (k > z) q *= static_cast<A>(px[at(k)]);
          at_zero += static_cast<A>(pg[at(k)]) * q;
          if (k > z) gx[at(k)] = static_cast<T>(A(0));
        }
        if (z < r) gx[at(z)] = static_cast<T>(at_zero);
        A suffix = 0;
        for (int64_t k = z - 1; k >= 0; --k) {
          suffix += static_cast<A>(pg[at(k)]) * static_cast<A>(po[at(k)]);
          gx[at(k)] = static_cast<T>(suffix / static_cast<A>(px[at(k)]));
        }
      }
  });
}
AG_REGISTER_KERNEL(kernel::cumprod_backward, kCPU, cumprod_backward_cpu);

DType sum_dtype(DType t) { return is_floating(t) ? t : kInt64; }

}  // namespace

std::pair<Tensor, Tensor> reduce_forward(const OpInfo& op, ReduceKind k, const Tensor& a, const Shape& dims,
                                         bool keepdim, DType out_dtype, double param) {
  check_defined(op, a, "input");
  ReduceGeometry geo = reduce_geometry(op.name, a, dims);
  const bool has_identity = k == ReduceKind::Sum || k == ReduceKind::Prod || k == ReduceKind::Mean ||
                            (k == ReduceKind::Norm && param >= 0 && param != INFINITY);
  AG_CHECK(geo.r > 0 || has_identity,
           "{}: cannot reduce over an empty dimension of {} (the result has no identity)", op.name, a.desc());
  Shape out_shape = keepdim ? geo.keep_shape : geo.out_shape;
  Tensor out = empty_as(out_shape, out_dtype, a);
  Tensor idx;
  if (k == ReduceKind::Max || k == ReduceKind::Min) idx = empty_as(out_shape, kInt64, a);
  if (out.numel() == 0) return {out, idx};
  if (geo.r == 0) {
    fill_into(out, k == ReduceKind::Prod ? 1.0 : (k == ReduceKind::Mean ? NAN : 0.0));  // Norm: 0
    return {out, idx};
  }
  if (geo.around && (k == ReduceKind::Sum || k == ReduceKind::Mean)) {
    // Two passes (Note [Reductions around a kept block]): over trail into [lead, kept] and over
    // lead into [kept], partial results in float32 (float64 for float64, int64 for integers)
    // and the result rounded to out_dtype once.
    NoGradGuard no_grad;
    const DType mid = out_dtype == kFloat64 || !is_floating(out_dtype) ? out_dtype : kFloat32;
    const int64_t lead = geo.x3.size(0), kept = geo.x3.size(1), trail = geo.x3.size(2);
    Tensor x = geo.x3.dtype() == mid ? geo.x3 : to(geo.x3, geo.x3.device(), mid);
    Tensor part = empty_as({lead * kept}, mid, a);
    kernel::reduce(part.device(), k, x.view({lead * kept, trail, 1}), part, Tensor(), param);
    Tensor total = mid == out_dtype ? out : empty_as(out_shape, mid, a);
    kernel::reduce(total.device(), k, part.view({1, lead, kept}), total, Tensor(), param);
    if (mid != out_dtype) kernel::copy(out.device(), out, total);
    return {out, idx};
  }
  if (geo.around) geo.x3 = contiguous(geo.permuted).view({geo.permuted.numel() / geo.r, geo.r, 1});
  Tensor x = geo.x3;
  if (x.dtype() != out_dtype && k != ReduceKind::Argmax && k != ReduceKind::Argmin) {
    NoGradGuard no_grad;
    x = to(x, x.device(), out_dtype);
  }
  kernel::reduce(out.device(), k, x, out, idx, param);
  return {out, idx};
}

Tensor expand_back(const Tensor& g, const Shape& in_shape, const Shape& dims, bool keepdim) {
  Tensor gk = g;
  // reshape, not view: an incoming gradient may be non-contiguous (an expanded one from a
  // later reduction has all strides 0).
  if (!keepdim) gk = g.reshape(reduce_geometry_keep_shape(in_shape, dims));
  return expand(gk, in_shape);
}

Tensor sum(const Tensor& a, const Shape& dims, bool keepdim) {
  Tensor x = a;
  OpScope scope(kSum, x);
  Tensor out = reduce_forward(kSum, ReduceKind::Sum, x, dims, keepdim, sum_dtype(x.dtype())).first;
  if (autograd::any_requires_grad({&x})) {
    Shape in_shape = x.shape();
    autograd::record(kSum, out, {x}, {}, [in_shape, dims, keepdim](const Tensor& g, const Saved&) {
      return Grads{expand_back(g, in_shape, dims, keepdim)};
    });
  }
  return scope.finish(out);
}
Tensor sum(const Tensor& a) { return sum(a, {}, false); }

Tensor cumsum(const Tensor& a0, int64_t dim, std::optional<DType> dtype) {
  Tensor a = a0;
  OpScope scope(kCumsum, a);
  check_defined(kCumsum, a, "input");
  const int64_t d = wrap_dim(kCumsum.name, dim, a.dim());
  // As PyTorch: integers and bool sum into int64; `dtype` casts the input first.
  const DType dt = dtype.value_or(sum_dtype(a.dtype()));
  AG_CHECK(dt != kBool, "cumsum: dtype bool is not supported ({})", a.desc());
  Tensor x = a;
  if (x.dtype() != dt) {
    NoGradGuard no_grad;
    x = to(a, a.device(), dt);
  }
  const Shape rows = rows_around(a.shape(), d);
  Tensor out = empty_as(a.shape(), dt, a);
  if (out.numel()) kernel::cumsum(out.device(), contiguous(x).view(rows), out.view(rows), false);
  if (autograd::any_requires_grad({&a}) && is_floating(dt)) {
    // Each input element reaches every later output: its gradient is the reverse running sum.
    autograd::record(kCumsum, out, {a}, {}, [rows](const Tensor& g, const Saved&) {
      Tensor gx = empty(g.shape(), g.options());
      if (gx.numel()) kernel::cumsum(gx.device(), contiguous(g).view(rows), gx.view(rows), true);
      return Grads{gx};
    });
  }
  return scope.finish(out);
}

Tensor cumprod(const Tensor& a0, int64_t dim, std::optional<DType> dtype) {
  Tensor a = a0;
  OpScope scope(kCumprod, a);
  check_defined(kCumprod, a, "input");
  const int64_t d = wrap_dim(kCumprod.name, dim, a.dim());
  const DType dt = dtype.value_or(sum_dtype(a.dtype()));  // as cumsum: integers multiply in int64
  AG_CHECK(dt != kBool, "cumprod: dtype bool is not supported ({})", a.desc());
  Tensor x = contiguous(a.dtype() == dt ? a : a.to(dt));  // differentiable: gradients reach a in its dtype
  const Shape rows = rows_around(a.shape(), d);
  Tensor out = empty_as(a.shape(), dt, a);
  if (out.numel()) kernel::cumprod(out.device(), x.view(rows), out.view(rows));
  if (x.requires_grad() && is_floating(dt)) {
    autograd::record(kCumprod, out, {x}, {x, out.detach()}, [rows](const Tensor& g, const Saved& s) {
      Tensor gx = empty(g.shape(), g.options());
      if (gx.numel())
        kernel::cumprod_backward(gx.device(), s[0].view(rows), s[1].view(rows), contiguous(g).view(rows), gx.view(rows));
      return Grads{gx};
    });
  }
  return scope.finish(out);
}

Tensor mean(const Tensor& a, const Shape& dims, bool keepdim) {
  Tensor x = a;
  OpScope scope(kMean, x);
  check_defined(kMean, x, "input");
  AG_CHECK(is_floating(x.dtype()), "mean: expected a floating tensor, got {}; convert it with .to(kFloat32)",
           x.desc());
  Tensor out = reduce_forward(kMean, ReduceKind::Mean, x, dims, keepdim, x.dtype()).first;
  if (autograd::any_requires_grad({&x})) {
    Shape in_shape = x.shape();
    const double count = static_cast<double>(x.numel()) / static_cast<double>(std::max<int64_t>(out.numel(), 1));
    autograd::record(kMean, out, {x}, {}, [in_shape, dims, keepdim, count](const Tensor& g, const Saved&) {
      return Grads{expand_back(g / count, in_shape, dims, keepdim)};
    });
  }
  return scope.finish(out);
}
Tensor mean(const Tensor& a) { return mean(a, {}, false); }

Tensor prod(const Tensor& a, int64_t dim, bool keepdim) {
  Tensor x = a;
  OpScope scope(kProd, x);
  check_defined(kProd, x, "input");
  Shape dims{wrap_dim(kProd.name, dim, x.dim())};
  Tensor out = reduce_forward(kProd, ReduceKind::Prod, x, dims, keepdim, sum_dtype(x.dtype())).first;
  if (autograd::any_requires_grad({&x})) {
    autograd::record(kProd, out, {x}, {x, out.detach()}, [dims, keepdim](const Tensor& g, const Saved& s) {
      // d prod / d x_i = prod / x_i (inputs with zeros need the product of the others: not handled).
      return Grads{expand_back(g * s[1], s[0].shape(), dims, keepdim) / s[0]};
    });
  }
  return scope.finish(out);
}
Tensor prod(const Tensor& a) { return prod(a.reshape({-1}), 0, false); }

Tensor var(const Tensor& a, const Shape& dims, double correction, bool keepdim) {
  Tensor x = a;
  OpScope scope(kVar, x);
  check_defined(kVar, x, "input");
  AG_CHECK(is_floating(x.dtype()), "var: expected a floating tensor, got {}", x.desc());
  Tensor out = reduce_forward(kVar, ReduceKind::Var, x, dims, keepdim, x.dtype(), correction).first;
  if (autograd::any_requires_grad({&x})) {
    const double n = static_cast<double>(x.numel()) / static_cast<double>(std::max<int64_t>(out.numel(), 1));
    autograd::record(kVar, out, {x}, {x}, [dims, keepdim, correction, n](const Tensor& g, const Saved& s) {
      Tensor centered = s[0] - mean(s[0], dims, true);
      return Grads{expand_back(g, s[0].shape(), dims, keepdim) * centered * (2.0 / (n - correction))};
    });
  }
  return scope.finish(out);
}

Tensor logsumexp(const Tensor& a, const Shape& dims, bool keepdim) {
  Tensor x = a;
  OpScope scope(kLogSumExp, x);
  check_defined(kLogSumExp, x, "input");
  DType dt = float_compute_dtype(x.dtype());
  Tensor out = reduce_forward(kLogSumExp, ReduceKind::LogSumExp, x, dims, keepdim, dt).first;
  if (autograd::any_requires_grad({&x})) {
    autograd::record(kLogSumExp, out, {x}, {x, out.detach()}, [dims, keepdim](const Tensor& g, const Saved& s) {
      const Shape& in_shape = s[0].shape();
      return Grads{expand_back(g, in_shape, dims, keepdim) * exp(s[0] - expand_back(s[1], in_shape, dims, keepdim))};
    });
  }
  return scope.finish(out);
}

namespace {
std::pair<Tensor, Tensor> max_min_dim(const OpInfo& op, ReduceKind k, const Tensor& a, int64_t dim, bool keepdim) {
  Tensor x = a;
  OpScope scope(op, x);
  check_defined(op, x, "input");
  AG_CHECK(x.dtype() != kBool, "{}: not supported for bool tensors", op.name);
  Shape dims{wrap_dim(op.name, dim, x.dim())};
  auto [values, indices] = reduce_forward(op, k, x, dims, keepdim, x.dtype());
  if (autograd::any_requires_grad({&x}) && is_floating(x.dtype())) {
    const int64_t d = dims[0];
    autograd::record(op, values, {x}, {indices}, [d, keepdim, in_shape = x.shape()](const Tensor& g, const Saved& s) {
      // The gradient goes to the chosen index only.
      Shape pos_shape(in_shape.size(), 1);
      if (!in_shape.empty()) pos_shape[d] = in_shape[d];
      Tensor pos = arange(0, in_shape.empty() ? 1 : in_shape[d], 1, TensorOptions(kInt64).device(g.device()));
      Tensor idx = keepdim ? s[0] : unsqueeze(s[0], d);
      Tensor mask = eq(pos.view(pos_shape), idx);
      Tensor gk = keepdim ? g : unsqueeze(g, d);
      return Grads{where(mask, expand(gk, in_shape), zeros(in_shape, g.options()))};
    });
  }
  scope.finish(values);
  return {values, indices};
}

Tensor max_min_all(const OpInfo& op, ReduceKind k, const Tensor& a) {
  Tensor x = a;
  OpScope scope(op, x);
  check_defined(op, x, "input");
  AG_CHECK(x.numel() > 0, "{}: expected a non-empty tensor; {} has no elements", op.name, x.desc());
  Tensor out = reduce_forward(op, k, x, {}, false, x.dtype()).first;
  if (autograd::any_requires_grad({&x}) && is_floating(x.dtype())) {
    autograd::record(op, out, {x}, {x, out.detach()}, [](const Tensor& g, const Saved& s) {
      // Ties share the gradient evenly, as PyTorch's max() without a dim.
      Tensor mask = eq(s[0], s[1]).to(g.dtype());
      return Grads{mask * (g / sum(mask))};
    });
  }
  return scope.finish(out);
}

Tensor arg_reduce(const OpInfo& op, ReduceKind k, const Tensor& a, std::optional<int64_t> dim, bool keepdim) {
  Tensor x = a;
  OpScope scope(op, x);
  check_defined(op, x, "input");
  AG_CHECK(x.numel() > 0, "{}: expected a non-empty tensor; {} has no elements", op.name, x.desc());
  if (!dim) return scope.finish(reduce_forward(op, k, x.reshape({-1}), {0}, false, kInt64).first);
  Shape dims{wrap_dim(op.name, *dim, x.dim())};
  return scope.finish(reduce_forward(op, k, x, dims, keepdim, kInt64).first);
}
}  // namespace

std::pair<Tensor, Tensor> max(const Tensor& a, int64_t dim, bool keepdim) {
  return max_min_dim(kMax, ReduceKind::Max, a, dim, keepdim);
}
std::pair<Tensor, Tensor> min(const Tensor& a, int64_t dim, bool keepdim) {
  return max_min_dim(kMin, ReduceKind::Min, a, dim, keepdim);
}
Tensor max(const Tensor& a) { return max_min_all(kMax, ReduceKind::Max, a); }
Tensor min(const Tensor& a) { return max_min_all(kMin, ReduceKind::Min, a); }
Tensor argmax(const Tensor& a) { return arg_reduce(kArgmax, ReduceKind::Argmax, a, std::nullopt, false); }
Tensor argmax(const Tensor& a, int64_t dim, bool keepdim) {
  return arg_reduce(kArgmax, ReduceKind::Argmax, a, dim, keepdim);
}
Tensor argmin(const Tensor& a, int64_t dim, bool keepdim) {
  return arg_reduce(kArgmin, ReduceKind::Argmin, a, dim, keepdim);
}

Tensor sum_to(const Tensor& a, const Shape& shape) {
  if (a.shape() == shape) return a;
  const int64_t lead = a.dim() - static_cast<int64_t>(shape.size());
  AG_INTERNAL_ASSERT(lead >= 0, "sum_to: {} cannot be summed to {}", a.desc(), shape_str(shape));
  Shape dims;
  for (int64_t i = 0; i < a.dim(); ++i)
    if (i < lead || (shape[i - lead] == 1 && a.shape()[i] != 1)) dims.push_back(i);
  if (dims.empty()) return a.view(shape);
  return sum(a, dims, true).view(shape);
}

}  // namespace ampgrad
