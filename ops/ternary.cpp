// Ternary elementwise ops: addcmul, addcdiv and lerp, one kernel of core/elementwise_kinds.def
// each way, with broadcasting and type promotion over all three inputs.
#include <ampgrad/autograd/node.h>
#include <ampgrad/core/kernels.h>
#include <ampgrad/ops/internal.h>
#include <ampgrad/ops/op_scope.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad {

using amp::Category;
using autograd::Grads;
using Saved = std::vector<Tensor>;

namespace {

const OpInfo kAddcmul{"addcmul", Category::promote, true, "mixes three inputs: all are cast to the widest dtype"};
const OpInfo kAddcdiv{"addcdiv", Category::promote, true, "mixes three inputs: all are cast to the widest dtype"};
const OpInfo kLerp{"lerp", Category::passthrough, true, "as PyTorch (not in its autocast lists): exact where it matters"};

// out = f(x, y, z) of kind k; the gradients of the inputs that need one, in one kernel.
Tensor ternary_elementwise(const OpInfo& op, TernaryKind k, const Tensor& x0, const Tensor& y0, const Tensor& z0,
                           double a) {
  Tensor x = x0, y = y0, z = z0;
  OpScope scope(op, x, y, z);
  check_defined(op, x, "input");
  check_defined(op, y, "tensor1");
  check_defined(op, z, "tensor2");
  check_same_device(op, x, y);
  check_same_device(op, x, z);
  const Shape shape = broadcast_shapes(op.name, broadcast_shapes(op.name, x.shape(), y.shape()), z.shape());
  const DType dt = result_type({&x, &y, &z});
  if (ternary_computes_in_float(k)) {
    AG_CHECK(is_floating(dt), "{}: expected floating inputs, got {}, {} and {}", op.name, x.desc(), y.desc(), z.desc());
  }
  AG_CHECK(dt != kBool, "{}: arithmetic on bool tensors is not supported", op.name);
  Tensor out = empty_as(shape, dt, x);
  auto operand = [&](const Tensor& t, DType d, const Shape& s) { return broadcast_to(cast_quietly(t, d), s); };
  if (out.numel()) kernel::ternary(out.device(), k, operand(x, dt, shape), operand(y, dt, shape), operand(z, dt, shape), out, a);
  if (autograd::any_requires_grad({&x, &y, &z}) && is_floating(dt)) {
    const std::array<bool, 3> need{x.requires_grad(), y.requires_grad(), z.requires_grad()};
    autograd::record(op, out, {x, y, z}, {x, y, z}, [k, a, need, operand](const Tensor& g, const Saved& s) {
      std::array<Tensor, 3> grads;
      for (int i = 0; i < 3; ++i)
        if (need[i]) grads[i] = empty(g.shape(), g.options());
      if (g.numel())
        kernel::ternary_backward(g.device(), k, g, operand(s[0], g.dtype(), g.shape()), operand(s[1], g.dtype(), g.shape()),
                                 operand(s[2], g.dtype(), g.shape()), grads, a);
      return Grads{grads[0], grads[1], grads[2]};
    });
  }
  return scope.finish(out);
}

}  // namespace

Tensor addcmul(const Tensor& self, const Tensor& tensor1, const Tensor& tensor2, const Scalar& value) {
  return ternary_elementwise(kAddcmul, TernaryKind::Addcmul, self, tensor1, tensor2, value.to_double());
}
Tensor addcdiv(const Tensor& self, const Tensor& tensor1, const Tensor& tensor2, const Scalar& value) {
  return ternary_elementwise(kAddcdiv, TernaryKind::Addcdiv, self, tensor1, tensor2, value.to_double());
}
Tensor lerp(const Tensor& start, const Tensor& end, const Tensor& weight) {
  return ternary_elementwise(kLerp, TernaryKind::Lerp, start, end, weight, 0);
}
Tensor lerp(const Tensor& start0, const Tensor& end0, const Scalar& weight) {
  Tensor start = start0, end = end0;
  OpScope scope(kLerp, start, end);
  check_defined(kLerp, start, "input");
  check_defined(kLerp, end, "end");
  // A Scalar weight stays unrounded, as PyTorch's (it computes 16-bit lerp in float with the
  // weight as given): 16-bit inputs are computed in float32 and rounded once.
  const DType dt = promote_types(start.dtype(), end.dtype());
  const DType wide = is_reduced_float(dt) ? kFloat32 : dt;
  auto as = [wide](const Tensor& t) { return t.dtype() == wide ? t : t.to(wide); };
  Tensor out = lerp(as(start), as(end), full({}, weight, TensorOptions(wide).device(start.device())));
  return scope.finish(out.dtype() == dt ? out : out.to(dt));
}

}  // namespace ampgrad
