// Unary elementwise ops: the rows of ops/unary_ops.def, clamp, round, gelu (two kinds), and the tensor-with-scalar forms
// of add, sub, rsub, mul and pow, all one kernel of core/elementwise_kinds.def each way.
#include <cmath>

#include <ampgrad/autograd/node.h>
#include <ampgrad/core/kernels.h>
#include <ampgrad/ops/internal.h>
#include <ampgrad/ops/op_scope.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad {

using autograd::Grads;
using Saved = std::vector<Tensor>;
using amp::Category;

namespace {
// The backward of kind k: the gradient itself (reads pass), or its backward kernel.
Grads unary_grads(UnaryKind k, const Tensor& g, const Saved& s, double p0, double p1) {
  if (unary_grad_reads(k) == UnaryGrad::pass) return Grads{g};
  // A kind that reads only g gets g in the saved value's place (its formula never reads it).
  const Tensor& sv = s[0].defined() ? s[0] : g;
  const Tensor gs = g.dtype() == sv.dtype() ? g : g.to(sv.dtype());
  Tensor gx = empty(gs.shape(), gs.options());
  if (gx.numel()) kernel::unary_backward(gx.device(), k, gs, sv, gx, p0, p1);
  return Grads{gx};
}
}  // namespace

// Runs kind k on a: in a's dtype when the kind takes integers and keep_int (a scalar operand
// that is itself an integer), else in a's floating dtype or float32. p0, p1 are the kind's a
// and b. The backward is the kind's backward kernel, reading what its row says: only that is
// saved, so an in-place edit of a tensor the formula never reads is not reported (Note
// [Version counter]).
Tensor unary_elementwise(const OpInfo& op, UnaryKind k, const Tensor& a0, double p0, double p1, bool keep_int) {
  Tensor a = a0;
  OpScope scope(op, a);
  check_defined(op, a, "input");
  const bool ints = unary_takes_integers(k) && keep_int;
  AG_CHECK(a.dtype() != kBool || !ints, "{}: not supported for bool tensors ({}); convert it first", op.name,
           a.desc());
  const DType dt = ints ? a.dtype() : float_compute_dtype(a.dtype());
  Tensor x = a;
  if (x.dtype() != dt) {
    NoGradGuard no_grad;
    x = to(a, a.device(), dt);
  }
  Tensor out = empty_as(x.shape(), dt, x);
  if (out.numel()) kernel::unary(out.device(), k, x, out, p0, p1);
  const UnaryGrad reads = unary_grad_reads(k);
  if (reads != UnaryGrad::none && is_floating(a.dtype()) && autograd::any_requires_grad({&a})) {
    Tensor saved = reads == UnaryGrad::x ? a : (reads == UnaryGrad::y ? out.detach() : Tensor());
    // The formula captures the kind's scalars only when it has them: a capture of at most 16
    // bytes stays inside the std::function, with no allocation per node (relu, tanh, exp, ...).
    if (p0 == 0 && p1 == 0)
      autograd::record(op, out, {a}, {saved}, [k](const Tensor& g, const Saved& s) { return unary_grads(k, g, s, 0, 0); });
    else if (p1 == 0)
      autograd::record(op, out, {a}, {saved}, [k, p0](const Tensor& g, const Saved& s) { return unary_grads(k, g, s, p0, 0); });
    else
      autograd::record(op, out, {a}, {saved},
                       [k, p0, p1](const Tensor& g, const Saved& s) { return unary_grads(k, g, s, p0, p1); });
  }
  return scope.finish(out);
}

// The ops of the table: a record and a function each.
#define AG_UNARY_OP(name, Kind, category, reason)                                                         \
  namespace {                                                                                             \
  const OpInfo k_##name{#name, Category::category, unary_grad_reads(UnaryKind::Kind) != UnaryGrad::none, \
                        reason};                                                                          \
  }                                                                                                       \
  Tensor name(const Tensor& x) { return unary_elementwise(k_##name, UnaryKind::Kind, x, 0, 0, true); }
#define AG_UNARY_OP1(name, Kind, category, reason, p, p0)                                                 \
  namespace {                                                                                             \
  const OpInfo k_##name{#name, Category::category, unary_grad_reads(UnaryKind::Kind) != UnaryGrad::none, \
                        reason};                                                                          \
  }                                                                                                       \
  Tensor name(const Tensor& x, double p) { return unary_elementwise(k_##name, UnaryKind::Kind, x, p, 0, true); }
#define AG_UNARY_OP2(name, Kind, category, reason, p, p0, q, q0)                                          \
  namespace {                                                                                             \
  const OpInfo k_##name{#name, Category::category, unary_grad_reads(UnaryKind::Kind) != UnaryGrad::none, \
                        reason};                                                                          \
  }                                                                                                       \
  Tensor name(const Tensor& x, double p, double q) {                                                      \
    return unary_elementwise(k_##name, UnaryKind::Kind, x, p, q, true);                                   \
  }
#include <ampgrad/ops/unary_ops.def>

namespace {
const OpInfo kClamp{"clamp", Category::passthrough, true, "exact in any dtype"};
const OpInfo kRound{"round", Category::passthrough, true, "exact in any dtype"};
const OpInfo kGelu{"gelu", Category::passthrough, true, "computed in float, bounded result"};
}  // namespace

Tensor gelu(const Tensor& x, std::string_view approximate) {
  AG_CHECK(approximate == "none" || approximate == "tanh", "gelu: approximate must be \"none\" or \"tanh\", got \"{}\"",
           approximate);
  return unary_elementwise(kGelu, approximate == "tanh" ? UnaryKind::GeluTanh : UnaryKind::Gelu, x, 0, 0, true);
}

Tensor round(const Tensor& a, int64_t decimals) {
  // The kind takes 10^|decimals| and decimals' sign (math::round_decimals).
  const double p = std::pow(10.0, static_cast<double>(decimals < 0 ? -decimals : decimals));
  return unary_elementwise(kRound, UnaryKind::Round, a, p, static_cast<double>((decimals > 0) - (decimals < 0)), true);
}

Tensor clamp(const Tensor& a, std::optional<Scalar> min, std::optional<Scalar> max) {
  AG_CHECK(min || max, "clamp: at least one of min and max must be given");
  const double lo = min ? min->to_double() : -INFINITY;
  const double hi = max ? max->to_double() : INFINITY;
  AG_CHECK(!(lo > hi), "clamp: min {} is greater than max {}", lo, hi);
  return unary_elementwise(kClamp, UnaryKind::Clamp, a, lo, hi, true);
}

}  // namespace ampgrad
