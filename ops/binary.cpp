// Binary elementwise ops with broadcasting and type promotion: add, sub, mul, div, pow, the rows
// of ops/binary_ops.def (maximum, minimum, the comparisons), their scalar forms, and where.
#include <type_traits>

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

const OpInfo kAdd{"add", Category::passthrough, true, "elementwise, no accumulation: stays in its input dtype"};
const OpInfo kSub{"sub", Category::passthrough, true, "elementwise, no accumulation: stays in its input dtype"};
const OpInfo kMul{"mul", Category::passthrough, true, "elementwise, no accumulation: stays in its input dtype"};
const OpInfo kDiv{"div", Category::passthrough, true, "elementwise, no accumulation: stays in its input dtype"};
const OpInfo kPow{"pow", Category::fp32, true, "range: powers overflow float16 quickly"};
const OpInfo kRsub{"rsub", Category::passthrough, true, "elementwise: stays in its input dtype"};
const OpInfo kWhere{"where", Category::promote, true, "mixes two inputs: both are cast to the wider dtype, as PyTorch's type promotion does"};
const OpInfo kRdiv{"rdiv", Category::fp32, true, "range: s / x overflows float16 for small x (PyTorch 1.x's fp32 list)"};
const OpInfo kRtruediv{"rtruediv", Category::fp32, true, "range: s / x overflows float16 for small x (Python's name; PyTorch 1.x's fp32 list)"};
const OpInfo kRpow{"rpow", Category::fp32, true, "range: s ** x overflows float16 quickly, as PyTorch's fp32 list"};

int category_rank(DType t) { return t == kBool ? 0 : (is_floating(t) ? 2 : 1); }

}  // namespace

DType result_type(std::initializer_list<const Tensor*> ts) {
  std::optional<DType> dimd, zero;
  for (const Tensor* t : ts) {
    std::optional<DType>& slot = t->dim() == 0 ? zero : dimd;
    slot = slot ? promote_types(*slot, t->dtype()) : t->dtype();
  }
  if (!dimd) return *zero;
  if (!zero || category_rank(*zero) <= category_rank(*dimd)) return *dimd;
  return *zero;
}
DType result_type(const Tensor& a, const Tensor& b) { return result_type({&a, &b}); }

Tensor cast_quietly(const Tensor& t, DType dt) {
  if (t.dtype() == dt) return t;
  NoGradGuard no_grad;
  return to(t, t.device(), dt);
}

namespace {

// Note [Widening arithmetic]
// A float32 tensor and a float16 or bfloat16 one (a transformer's residual stream plus a
// sublayer's autocast output) promote to float32: a cast of the narrow operand, then a float32
// kernel, two launches and a float32 temporary. For add, sub and mul of contiguous operands of
// one shape, on a device with the kernel (CUDA), one kernel reads the narrow operand in its own
// dtype and widens it in registers. Widening is exact, so the result is the two launches' bit
// for bit. The backward is the op's own; the narrow input's gradient comes out in float32 and
// is rounded to its dtype by the engine (Note [Grad shape and dtype]), as before.
bool widening(BinaryKind k, const Tensor& a, const Tensor& b, DType dt) {
  if (k != BinaryKind::Add && k != BinaryKind::Sub && k != BinaryKind::Mul) return false;
  if (dt != kFloat32 || a.dtype() == b.dtype() || a.shape() != b.shape() || a.numel() == 0) return false;
  const Tensor& narrow = a.dtype() == kFloat32 ? b : a;
  if (!is_reduced_float(narrow.dtype()) || !kernel::binary_widening.has(a.device())) return false;
  // Contiguous, and aligned to 4 elements (storage starts are): the kernel's vector loads.
  return a.is_contiguous() && b.is_contiguous() && a.storage_offset() % 4 == 0 && b.storage_offset() % 4 == 0;
}

// Broadcasts, promotes (to float32 for kinds that compute in float) and runs kernel k; out is
// Bool for comparisons.
Tensor binary_forward(const OpInfo& op, BinaryKind k, const Tensor& a, const Tensor& b) {
  check_defined(op, a, "first input");
  check_defined(op, b, "second input");
  check_same_device(op, a, b);
  Shape shape = broadcast_shapes(op.name, a.shape(), b.shape());
  DType dt = result_type(a, b);
  if (binary_computes_in_float(k)) dt = float_compute_dtype(dt);
  AG_CHECK(dt != kBool || is_comparison(k), "{}: arithmetic on bool tensors ({} and {}) is not supported", op.name,
           a.desc(), b.desc());
  if (widening(k, a, b, dt)) {  // Note [Widening arithmetic]
    Tensor out = empty_as(shape, dt, a);
    kernel::binary_widening(out.device(), k, a, b, out);
    return out;
  }
  Tensor x = broadcast_to(cast_quietly(a, dt), shape);
  Tensor y = broadcast_to(cast_quietly(b, dt), shape);
  Tensor out = empty_as(shape, is_comparison(k) ? kBool : dt, a);
  if (out.numel()) kernel::binary(out.device(), k, x, y, out);
  return out;
}

// An op whose gradients are its kind's backward kernel: both in one pass, computed only for
// the inputs that require grad, and only the operands those gradients read are saved (so an
// in-place edit of one they never read is not reported, Note [Version counter]).
Tensor binary_elementwise(const OpInfo& op, BinaryKind k, const Tensor& a0, const Tensor& b0) {
  Tensor a = a0, b = b0;
  OpScope scope(op, a, b);
  Tensor out = binary_forward(op, k, a, b);
  const BinaryGrad bg = binary_grad(k);
  if (bg.differentiable && autograd::any_requires_grad({&a, &b}) && is_floating(out.dtype())) {
    AG_INTERNAL_ASSERT(bg.kernel, "{}: kind {} has no backward kernel", op.name, kind_name(k));
    const bool need_a = a.requires_grad(), need_b = b.requires_grad();
    const bool save_x = (need_a && bg.dx_x) || (need_b && bg.dy_x), save_y = (need_a && bg.dx_y) || (need_b && bg.dy_y);
    autograd::record(op, out, {a, b}, {save_x ? a : Tensor(), save_y ? b : Tensor()},
                     [k, need_a, need_b](const Tensor& g, const Saved& s) {
                       // The operands in g's dtype (the forward's) and shape; one that no
                       // requested formula reads is g itself.
                       auto operand = [&g](const Tensor& t) {
                         return t.defined() ? broadcast_to(cast_quietly(t, g.dtype()), g.shape()) : g;
                       };
                       Tensor gx = need_a ? empty(g.shape(), g.options()) : Tensor();
                       Tensor gy = need_b ? empty(g.shape(), g.options()) : Tensor();
                       if (g.numel()) kernel::binary_backward(g.device(), k, g, operand(s[0]), operand(s[1]), gx, gy);
                       return Grads{gx, gy};
                     });
  }
  return scope.finish(out);
}

// Which of a and b a backward formula composed of ops reads. Only those are saved.
struct Needs {
  bool a, b;
};
constexpr Needs kNeedsNothing{false, false};

template <class Backward>
Tensor binary_with_grad(const OpInfo& op, BinaryKind k, const Tensor& a0, const Tensor& b0, Needs needs, Backward bw) {
  Tensor a = a0, b = b0;
  OpScope scope(op, a, b);
  Tensor out = binary_forward(op, k, a, b);
  if (autograd::any_requires_grad({&a, &b}) && is_floating(out.dtype())) {
    // Unneeded slots stay undefined tensors; the formula gets them as such.
    autograd::record(op, out, {a, b}, {needs.a ? a : Tensor(), needs.b ? b : Tensor()},
                     [bw](const Tensor& g, const Saved& s, autograd::BackwardContext& ctx) {
                       if constexpr (std::is_invocable_v<Backward, const Tensor&, const Tensor&, const Tensor&,
                                                         autograd::BackwardContext&>)
                         return bw(g, s[0], s[1], ctx);
                       else
                         return bw(g, s[0], s[1]);
                     });
  }
  return scope.finish(out);
}

Tensor compare(const OpInfo& op, BinaryKind k, const Tensor& a0, const Tensor& b0) {
  Tensor a = a0, b = b0;
  OpScope scope(op, a, b);
  return scope.finish(binary_forward(op, k, a, b));
}

Tensor scalar_like(const Tensor& a, const Scalar& s) {
  return full({}, s, TensorOptions(scalar_result_dtype(a.dtype(), s)).device(a.device()));
}

}  // namespace

// Note [In-place arithmetic]
// a.add_(b) could run as add(a, b) and a copy back: two kernels and a temporary. When the
// result's dtype is self's, other broadcasts to self's shape, self has no overlapping
// elements (no zero stride) and other is not a different view of self's storage, the kernel
// writes into self directly: each element is read and written by the same thread, so
// out == x is safe. Otherwise the two-kernel path runs. Both bump self's version.
//
// Note [Mixed-dtype accumulation]
// Under autocast a float32 parameter's gradient may arrive in float16 (an mm's or conv's
// gradient of the weight's 16-bit copy; linear's comes in float32 already) and is added into
// its float32 .grad every step. a.add_(b) with b of a
// narrower floating dtype (float16 or bfloat16 into float32, anything into float64) runs
// kernel::accumulate, which reads b in its own dtype: one kernel, no float32 temporary.
// Widening is exact, so the sums are bit-identical to casting b first.
namespace {
bool writable_in_place(const Tensor& self) {
  for (int64_t d = 0; d < self.dim(); ++d)
    if (self.stride(d) == 0 && self.size(d) > 1) return false;
  return true;
}
bool same_view(const Tensor& a, const Tensor& b) {
  return a.storage_offset() == b.storage_offset() && a.shape() == b.shape() && a.strides() == b.strides() &&
         a.dtype() == b.dtype();
}
}  // namespace

bool binary_inplace(BinaryKind k, Tensor& self, const Tensor& other) {
  if (!self.defined() || !other.defined() || self.device() != other.device()) return false;
  if (result_type(self, other) != self.dtype() || self.dtype() == kBool || !writable_in_place(self)) return false;
  if (other.storage() == self.storage() && !same_view(self, other)) return false;
  const OpInfo& op = k == BinaryKind::Add ? kAdd : (k == BinaryKind::Sub ? kSub : (k == BinaryKind::Mul ? kMul : kDiv));
  // Shapes that do not broadcast throw here, with the op's name, as the out-of-place op would.
  if (broadcast_shapes(op.name, self.shape(), other.shape()) != self.shape()) return false;
  Tensor a = self, b = other;
  OpScope scope(op, a, b);  // passthrough: traced, never cast
  NoGradGuard no_grad;
  const bool widens = k == BinaryKind::Add && other.dtype() != self.dtype() &&
                      promote_types(self.dtype(), other.dtype()) == self.dtype() && is_floating(other.dtype());
  if (self.numel() && widens)  // Note [Mixed-dtype accumulation]
    kernel::accumulate(self.device(), self, broadcast_to(other, self.shape()));
  else if (self.numel())
    kernel::binary(self.device(), k, self, broadcast_to(cast_quietly(other, self.dtype()), self.shape()), self);
  self.bump_version();
  scope.finish(self);
  return true;
}

bool scalar_inplace(UnaryKind k, Tensor& self, double s) {
  if (!self.defined() || !is_floating(self.dtype()) || !writable_in_place(self)) return false;
  Tensor a = self;
  OpScope scope(k == UnaryKind::AddScalar ? kAdd : kMul, a);
  if (self.numel()) kernel::unary(self.device(), k, self, self, s, 0);
  self.bump_version();
  scope.finish(self);
  return true;
}

Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha) {
  if (alpha.to_double() != 1) return add(a, mul(b, alpha));
  return binary_with_grad(kAdd, BinaryKind::Add, a, b, kNeedsNothing,
                          [](const Tensor& g, const Tensor&, const Tensor&) {
                            return Grads{g, g};
                          });
}
Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha) {
  if (alpha.to_double() != 1) return sub(a, mul(b, alpha));
  return binary_with_grad(kSub, BinaryKind::Sub, a, b, kNeedsNothing,
                          [](const Tensor& g, const Tensor&, const Tensor&) {
                            return Grads{g, neg(g)};
                          });
}
// mul saves only what the gradients its inputs need read, and computes only those gradients:
// the loss scale (loss * scale) or a dropout mask costs no backward launch for the factor
// that needs none (PyTorch's needs_input_grad).
Tensor mul(const Tensor& a, const Tensor& b) {
  // d/da = g * b, d/db = g * a: b is saved when a needs its gradient, and a when b does. Where g
  // is backward()'s seed of ones (the loss scale's product, loss * scale), g * b is b itself,
  // exactly (Note [Backward context]).
  return binary_with_grad(kMul, BinaryKind::Mul, a, b, Needs{b.requires_grad(), a.requires_grad()},
                          [](const Tensor& g, const Tensor& x, const Tensor& y, autograd::BackwardContext& ctx) {
                            auto times_g = [&](const Tensor& f) {
                              if (!f.defined()) return Tensor();
                              if (f.shape() == g.shape() && f.dtype() == g.dtype() && f.device() == g.device() &&
                                  ctx.is_seed(g))
                                return f;
                              return g * f;
                            };
                            return Grads{times_g(y), times_g(x)};
                          });
}
Tensor div(const Tensor& a, const Tensor& b) { return binary_elementwise(kDiv, BinaryKind::Div, a, b); }
Tensor pow(const Tensor& a, const Tensor& e) { return binary_elementwise(kPow, BinaryKind::Pow, a, e); }

// The ops of the table (ops/binary_ops.def): a record and the functions each.
#define AG_BINARY_OP(name, Kind, category, reason)                                                            \
  namespace {                                                                                                 \
  const OpInfo k_##name{#name, Category::category, binary_grad(BinaryKind::Kind).differentiable, reason};      \
  }                                                                                                           \
  Tensor name(const Tensor& a, const Tensor& b) { return binary_elementwise(k_##name, BinaryKind::Kind, a, b); }
#define AG_BINARY_OP_S(name, Kind, category, reason)                                  \
  AG_BINARY_OP(name, Kind, category, reason)                                          \
  Tensor name(const Tensor& a, const Scalar& b) { return name(a, scalar_like(a, b)); }
#define AG_COMPARE_OP(name, Kind)                                                                   \
  namespace {                                                                                       \
  const OpInfo k_##name{#name, Category::passthrough, false, "returns bool"};                        \
  }                                                                                                 \
  Tensor name(const Tensor& a, const Tensor& b) { return compare(k_##name, BinaryKind::Kind, a, b); } \
  Tensor name(const Tensor& a, const Scalar& b) { return name(a, scalar_like(a, b)); }
#include <ampgrad/ops/binary_ops.def>

// Scalar forms: add/mul/rsub/pow run as one unary kernel (no broadcast operand); a float
// scalar with an integer tensor gives float32, as a Python number does in PyTorch.
Tensor add(const Tensor& a, const Scalar& b) {
  return unary_elementwise(kAdd, UnaryKind::AddScalar, a, b.to_double(), 0, !b.is_floating());
}
Tensor sub(const Tensor& a, const Scalar& b) {
  return unary_elementwise(kSub, UnaryKind::AddScalar, a, -b.to_double(), 0, !b.is_floating());
}
Tensor rsub(const Tensor& a, const Scalar& b) {
  return unary_elementwise(kRsub, UnaryKind::RSubScalar, a, b.to_double(), 0, !b.is_floating());
}
Tensor mul(const Tensor& a, const Scalar& b) {
  return unary_elementwise(kMul, UnaryKind::MulScalar, a, b.to_double(), 0, !b.is_floating());
}
Tensor div(const Tensor& a, const Scalar& b) { return div(a, scalar_like(a, b)); }
// The scalar-first forms: one kernel each, computed in float (true division, as Python's).
Tensor rdiv(const Tensor& a, const Scalar& b) {
  return unary_elementwise(kRdiv, UnaryKind::RDivScalar, a, b.to_double(), 0, false);
}
Tensor rtruediv(const Tensor& a, const Scalar& b) {
  return unary_elementwise(kRtruediv, UnaryKind::RDivScalar, a, b.to_double(), 0, false);
}
Tensor pow(const Scalar& base, const Tensor& e) {
  return unary_elementwise(kRpow, UnaryKind::RPowScalar, e, base.to_double(), 0, false);
}
// As PyTorch: an integer tensor to an integer power stays an integer tensor (a floating
// exponent gives float32), and a negative integer power of it is an error.
Tensor pow(const Tensor& a, const Scalar& e) {
  AG_CHECK(!a.defined() || is_floating(a.dtype()) || e.is_floating() || e.to_double() >= 0,
           "pow: integers to negative integer powers are not allowed ({} ** {})", a.desc(), e.to_double());
  return unary_elementwise(kPow, UnaryKind::PowScalar, a, e.to_double(), 0, !e.is_floating());
}

Tensor where(const Tensor& cond0, const Tensor& a0, const Tensor& b0) {
  Tensor cond = cond0, a = a0, b = b0;
  OpScope scope(kWhere, cond, a, b);
  check_defined(kWhere, cond, "condition");
  check_defined(kWhere, a, "first input");
  check_defined(kWhere, b, "second input");
  AG_CHECK(cond.dtype() == kBool, "where: condition must be bool, got {}", cond.desc());
  check_same_device(kWhere, cond, a);
  check_same_device(kWhere, a, b);
  Shape shape = broadcast_shapes(kWhere.name, broadcast_shapes(kWhere.name, cond.shape(), a.shape()), b.shape());
  DType dt = result_type(a, b);
  Tensor out = empty_as(shape, dt, a);
  if (out.numel())
    kernel::where(out.device(), broadcast_to(cond, shape), broadcast_to(cast_quietly(a, dt), shape),
                  broadcast_to(cast_quietly(b, dt), shape), out);
  if (autograd::any_requires_grad({&a, &b}) && is_floating(dt)) {
    autograd::record(kWhere, out, {Tensor(), a, b}, {cond}, [](const Tensor& g, const Saved& s) {
      Tensor zero = zeros_like(g);
      return Grads{Tensor(), where(s[0], g, zero), where(s[0], zero, g)};
    });
  }
  return scope.finish(out);
}
Tensor where(const Tensor& cond, const Tensor& a, const Scalar& b) { return where(cond, a, scalar_like(a, b)); }

}  // namespace ampgrad
