// softmax and log_softmax over one dim, numerically stable (the max is subtracted first).
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
const OpInfo kSoftmax{"softmax", Category::fp32, true, "range and accumulation: exp and a sum over the row"};
const OpInfo kLogSoftmax{"log_softmax", Category::fp32, true, "range and accumulation: exp and a sum over the row"};

Tensor softmax_forward(const OpInfo& op, const Tensor& a, int64_t dim, bool log) {
  check_defined(op, a, "input");
  AG_CHECK(is_floating(a.dtype()), "{}: expected a floating tensor, got {}", op.name, a.desc());
  const int64_t d = wrap_dim(op.name, dim, a.dim());
  int64_t outer = 1, r = a.dim() ? a.shape()[d] : 1, inner = 1;
  for (int64_t i = 0; i < d; ++i) outer *= a.shape()[i];
  for (int64_t i = d + 1; i < a.dim(); ++i) inner *= a.shape()[i];
  Tensor out = empty_like(a);
  if (out.numel()) {
    NoGradGuard no_grad;
    kernel::softmax(contiguous(a).view({outer, r, inner}), out.view({outer, r, inner}), log);
  }
  return out;
}
}  // namespace

Tensor softmax(const Tensor& a0, int64_t dim) {
  Tensor a = a0;
  OpScope scope(kSoftmax, a);
  Tensor out = softmax_forward(kSoftmax, a, dim, false);
  if (autograd::any_requires_grad({&a})) {
    autograd::record(kSoftmax, out, {a}, {out.detach()}, [dim](const Tensor& g, const Saved& s) {
      const Tensor& y = s[0];
      return Grads{y * (g - sum(g * y, {dim}, true))};
    });
  }
  return scope.finish(out);
}

Tensor log_softmax(const Tensor& a0, int64_t dim) {
  Tensor a = a0;
  OpScope scope(kLogSoftmax, a);
  Tensor out = softmax_forward(kLogSoftmax, a, dim, true);
  if (autograd::any_requires_grad({&a})) {
    autograd::record(kLogSoftmax, out, {a}, {out.detach()}, [dim](const Tensor& g, const Saved& s) {
      return Grads{g - exp(s[0]) * sum(g, {dim}, true)};
    });
  }
  return scope.finish(out);
}

}  // namespace ampgrad
