// Unary elementwise ops: one record each, with its forward and backward side by side.
#include "autograd/node.h"
#include "ops/dispatch.h"
#include "ops/internal.h"
#include "ops/op_scope.h"
#include "ops/ops.h"

namespace ampgrad {

using autograd::Grads;
using Saved = std::vector<Tensor>;
using amp::Category;

namespace {

// Runs kernel `k` on `a`, in a's dtype when the kind takes it, else in float32.
Tensor unary_forward(const OpInfo& op, UnaryKind k, const Tensor& a, double p0 = 0, double p1 = 0) {
  check_defined(op, a, "input");
  DType dt = unary_takes_integers(k) ? a.dtype() : float_compute_dtype(a.dtype());
  AG_CHECK(a.dtype() != kBool || !unary_takes_integers(k) || k == UnaryKind::Abs,
           "{}: not supported for bool tensors ({})", op.name, a.desc());
  Tensor x = a;
  if (x.dtype() != dt) {
    NoGradGuard no_grad;
    x = to(a, a.device(), dt);
  }
  Tensor out = empty_as(x.shape(), dt, x);
  if (out.numel()) kernel::unary(k, x, out, p0, p1);
  return out;
}

// Which of its input x and output y an op's backward reads. Only those are saved, so that an
// in-place edit of a tensor the formula never reads is not reported (Note [Version counter]).
enum class Needs { nothing, x, y };

// Defines an op whose backward needs only its input x or its output y (the other is passed
// to the formula as an undefined tensor).
template <class Backward>
Tensor unary_op_with_grad(const OpInfo& op, UnaryKind k, const Tensor& a0, Needs needs, Backward bw, double p0 = 0,
                          double p1 = 0) {
  Tensor a = a0;
  OpScope scope(op, a);
  Tensor out = unary_forward(op, k, a, p0, p1);
  if (autograd::any_requires_grad({&a}) && is_floating(a.dtype())) {
    autograd::record(op, out, {a}, {needs == Needs::x ? a : Tensor(), needs == Needs::y ? out.detach() : Tensor()},
                     [bw](const Tensor& g, const Saved& s) { return Grads{bw(g, s[0], s[1])}; });
  }
  return scope.finish(out);
}

Tensor unary_kernel(UnaryKind k, const Tensor& x, double p0 = 0, double p1 = 0) {
  Tensor out = empty_like(x);
  if (out.numel()) kernel::unary(k, x, out, p0, p1);
  return out;
}

const OpInfo kNeg{"neg", Category::passthrough, true, "exact in any dtype"};
const OpInfo kExp{"exp", Category::fp32, true, "range: e^x overflows float16 above x = 11"};
const OpInfo kLog{"log", Category::fp32, true, "range: inputs near 0 lose their digits in float16"};
const OpInfo kLog1p{"log1p", Category::fp32, true, "range: small x is the point of log1p, float16 flushes it"};
const OpInfo kSqrt{"sqrt", Category::passthrough, true, "as PyTorch: the result is as precise as the input"};
const OpInfo kRsqrt{"rsqrt", Category::fp32, true, "range: 1/sqrt(x) overflows float16 for x < 2.4e-10"};
const OpInfo kReciprocal{"reciprocal", Category::fp32, true, "range: 1/x overflows float16 for |x| < 1.5e-5"};
const OpInfo kAbs{"abs", Category::passthrough, true, "exact in any dtype"};
const OpInfo kSign{"sign", Category::passthrough, false, "exact in any dtype"};
const OpInfo kRelu{"relu", Category::passthrough, true, "exact in any dtype"};
const OpInfo kGelu{"gelu", Category::passthrough, true, "computed in float, bounded result"};
const OpInfo kTanh{"tanh", Category::passthrough, true, "computed in float, bounded result"};
const OpInfo kSigmoid{"sigmoid", Category::passthrough, true, "computed in float, bounded result"};
const OpInfo kSoftplus{"softplus", Category::fp32, true, "range: log(1 + e^x) as PyTorch's fp32 list"};
const OpInfo kClamp{"clamp", Category::passthrough, true, "exact in any dtype"};

}  // namespace

Tensor neg(const Tensor& a) {
  return unary_op_with_grad(kNeg, UnaryKind::Neg, a, Needs::nothing, [](const Tensor& g, const Tensor&, const Tensor&) {
    return neg(g);
  });
}
Tensor exp(const Tensor& a) {
  return unary_op_with_grad(kExp, UnaryKind::Exp, a, Needs::y, [](const Tensor& g, const Tensor&, const Tensor& y) {
    return g * y;
  });
}
Tensor log(const Tensor& a) {
  return unary_op_with_grad(kLog, UnaryKind::Log, a, Needs::x, [](const Tensor& g, const Tensor& x, const Tensor&) {
    return g / x;
  });
}
Tensor log1p(const Tensor& a) {
  return unary_op_with_grad(kLog1p, UnaryKind::Log1p, a, Needs::x, [](const Tensor& g, const Tensor& x, const Tensor&) {
    return g / (x + 1);
  });
}
Tensor sqrt(const Tensor& a) {
  return unary_op_with_grad(kSqrt, UnaryKind::Sqrt, a, Needs::y, [](const Tensor& g, const Tensor&, const Tensor& y) {
    return g / (y * 2);
  });
}
Tensor rsqrt(const Tensor& a) {
  return unary_op_with_grad(kRsqrt, UnaryKind::Rsqrt, a, Needs::y, [](const Tensor& g, const Tensor&, const Tensor& y) {
    return g * (y * y * y) * -0.5;
  });
}
Tensor reciprocal(const Tensor& a) {
  return unary_op_with_grad(kReciprocal, UnaryKind::Reciprocal, a, Needs::y,
                            [](const Tensor& g, const Tensor&, const Tensor& y) { return -(g * y * y); });
}
Tensor abs(const Tensor& a) {
  return unary_op_with_grad(kAbs, UnaryKind::Abs, a, Needs::x, [](const Tensor& g, const Tensor& x, const Tensor&) {
    return g * sign(x);
  });
}
Tensor sign(const Tensor& a0) {
  Tensor a = a0;
  OpScope scope(kSign, a);
  return scope.finish(unary_forward(kSign, UnaryKind::Sign, a));
}
Tensor relu(const Tensor& a) {
  return unary_op_with_grad(kRelu, UnaryKind::Relu, a, Needs::x, [](const Tensor& g, const Tensor& x, const Tensor&) {
    // One kernel, x > 0 ? g : 0, where the mask and the product took two.
    Tensor out = empty(x.shape(), x.options());
    if (out.numel()) kernel::binary(BinaryKind::ReluBackward, g, x, out);
    return out;
  });
}
Tensor gelu(const Tensor& a) {
  return unary_op_with_grad(kGelu, UnaryKind::Gelu, a, Needs::x, [](const Tensor& g, const Tensor& x, const Tensor&) {
    return g * unary_kernel(UnaryKind::GeluGrad, x);
  });
}
Tensor tanh(const Tensor& a) {
  return unary_op_with_grad(kTanh, UnaryKind::Tanh, a, Needs::y, [](const Tensor& g, const Tensor&, const Tensor& y) {
    return g * rsub(y * y, 1);
  });
}
Tensor sigmoid(const Tensor& a) {
  return unary_op_with_grad(kSigmoid, UnaryKind::Sigmoid, a, Needs::y,
                            [](const Tensor& g, const Tensor&, const Tensor& y) {
                              return g * y * rsub(y, 1);
                            });
}
Tensor softplus(const Tensor& a) {
  return unary_op_with_grad(kSoftplus, UnaryKind::Softplus, a, Needs::x,
                            [](const Tensor& g, const Tensor& x, const Tensor&) {
                              return g * unary_kernel(UnaryKind::Sigmoid, x);
                            });
}
Tensor clamp(const Tensor& a, std::optional<Scalar> min, std::optional<Scalar> max) {
  AG_CHECK(min || max, "clamp: at least one of min and max must be given");
  const double lo = min ? min->to_double() : -INFINITY;
  const double hi = max ? max->to_double() : INFINITY;
  AG_CHECK(!(lo > hi), "clamp: min {} is greater than max {}", lo, hi);
  return unary_op_with_grad(
      kClamp, UnaryKind::Clamp, a, Needs::x,
      [lo, hi](const Tensor& g, const Tensor& x, const Tensor&) { return g * unary_kernel(UnaryKind::ClampMask, x, lo, hi); },
      lo, hi);
}

// The scalar forms of add, mul and pow share their op's record (defined in binary.cpp).
Tensor unary_scalar_op(const OpInfo& op, UnaryKind k, const Tensor& a0, double s, bool keep_int) {
  Tensor a = a0;
  OpScope scope(op, a);
  check_defined(op, a, "input");
  Tensor x = a;
  if (!keep_int && !is_floating(a.dtype())) {
    NoGradGuard no_grad;
    x = to(a, a.device(), kFloat32);
  }
  AG_CHECK(x.dtype() != kBool, "{}: arithmetic on a bool tensor ({}) is not supported; convert it first", op.name,
           a.desc());
  Tensor out = empty_like(x);
  if (out.numel()) kernel::unary(k, x, out, s, 0);
  if (autograd::any_requires_grad({&a}) && is_floating(a.dtype())) {
    Tensor saved_input = k == UnaryKind::PowScalar ? a : Tensor();  // only pow reads its input back
    autograd::record(op, out, {a}, {saved_input}, [k, s](const Tensor& g, const Saved& sv) {
      switch (k) {
        case UnaryKind::AddScalar: return Grads{g};
        case UnaryKind::MulScalar: return Grads{g * s};
        case UnaryKind::RSubScalar: return Grads{neg(g)};
        case UnaryKind::PowScalar: return Grads{s == 0 ? zeros_like(g) : g * pow(sv[0], s - 1) * s};
        default: AG_INTERNAL_ASSERT(false, "no backward for scalar kind {}", static_cast<int>(k));
      }
      return Grads{Tensor()};
    });
  }
  return scope.finish(out);
}

}  // namespace ampgrad
