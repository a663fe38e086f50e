// softmax and log_softmax over one dim, numerically stable (the max is subtracted first),
// with an optional result dtype as PyTorch's; each backward is one kernel.
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
const OpInfo kSoftmax{"softmax", Category::fp32, true, "range and accumulation: exp and a sum over the row", {},
                      /*reads_16bit=*/true};
const OpInfo kSoftmin{"softmin", Category::fp32, true, "softmax of -x: range and accumulation (PyTorch's calls softmax, fp32)"};
const OpInfo kLogSoftmax{"log_softmax", Category::fp32, true, "range and accumulation: exp and a sum over the row",
                         {}, /*reads_16bit=*/true};

// Note [Reading 16-bit inputs]
// An fp32 op under autocast used to cost two casts beyond its own kernel: its float16 input
// widened into a float32 copy, and in backward the float32 gradient narrowed back. softmax,
// log_softmax and cross_entropy read float16/bfloat16 as they are, compute in float32 (which
// every kernel does anyway) and write a float32 result; their backward kernel writes the
// gradient in the input's 16-bit dtype. The results are the cast-first ones up to float32
// rounding: the widening is exact and the arithmetic the same, but a CUDA kernel may sum a row
// in another order (its vector width follows the input's dtype); the backward rounds once,
// where the cast did. The same path serves
// log_softmax(x, dim, kFloat32) outside autocast (PyTorch's dtype argument, which PyTorch
// also fuses for half to float). Autocast learns of it from OpInfo::reads_16bit, and
// `ampgrad explain` counts the inputs read this way instead of cast.

Tensor softmax_impl(const OpInfo& op, OpScope& scope, Tensor a, int64_t dim, std::optional<DType> dtype, bool log) {
  check_defined(op, a, "input");
  AG_CHECK(is_floating(a.dtype()), "{}: expected a floating tensor, got {}", op.name, a.desc());
  // Autocast's choice applies to the 16-bit inputs it would have cast (never float64).
  if (!dtype && is_reduced_float(a.dtype())) dtype = scope.autocast_dtype();
  if (dtype) AG_CHECK(is_floating(*dtype), "{}: dtype must be floating, got {}", op.name, dtype_name(*dtype));
  // A 16-bit input with a float32 result is read as is; any other dtype request casts first.
  const bool widen = dtype && *dtype == kFloat32 && is_reduced_float(a.dtype());
  if (dtype && *dtype != a.dtype() && !widen) a = a.to(*dtype);
  const int64_t d = wrap_dim(op.name, dim, a.dim());
  const Shape rows = rows_around(a.shape(), d);
  Tensor out = empty(a.shape(), TensorOptions(widen ? kFloat32 : a.dtype()).device(a.device()));
  if (out.numel()) {
    NoGradGuard no_grad;
    kernel::softmax(out.device(), contiguous(a).view(rows), out.view(rows), log);
  }
  if (autograd::any_requires_grad({&a})) {
    autograd::record(op, out, {a}, {out.detach()}, [rows, log, in_dtype = a.dtype()](const Tensor& g, const Saved& s) {
      const Tensor& y = s[0];
      Tensor gx = empty(y.shape(), TensorOptions(in_dtype).device(y.device()));
      if (gx.numel()) {
        const Tensor gy = g.dtype() == y.dtype() ? g.contiguous() : g.to(y.dtype()).contiguous();
        kernel::softmax_backward(gx.device(), gy.view(rows), y.view(rows), gx.view(rows), log);
      }
      return Grads{gx};
    });
  }
  return out;
}
}  // namespace

Tensor softmax(const Tensor& a0, int64_t dim, std::optional<DType> dtype) {
  Tensor a = a0;
  OpScope scope(kSoftmax, a);
  return scope.finish(softmax_impl(kSoftmax, scope, a, dim, dtype, false));
}

Tensor softmin(const Tensor& a0, int64_t dim, std::optional<DType> dtype) {
  Tensor a = a0;
  OpScope scope(kSoftmin, a);
  check_defined(kSoftmin, a, "input");
  return scope.finish(softmax(-a, dim, dtype));
}

Tensor log_softmax(const Tensor& a0, int64_t dim, std::optional<DType> dtype) {
  Tensor a = a0;
  OpScope scope(kLogSoftmax, a);
  return scope.finish(softmax_impl(kLogSoftmax, scope, a, dim, dtype, true));
}

}  // namespace ampgrad
