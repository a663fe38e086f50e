// unbind: the slices of a tensor along a dim as views, with one backward node for all of them
// (a select each would make each slice's gradient a zeroed full-size tensor: T slices of a
// sequence cost O(T^2)).
#include <ampgrad/autograd/multi_output.h>
#include <ampgrad/ops/internal.h>
#include <ampgrad/ops/op_scope.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad {

namespace {
const OpInfo kUnbind{"unbind", amp::Category::passthrough, true, "views: no data changes"};
}  // namespace

std::vector<Tensor> unbind(const Tensor& a0, int64_t dim) {
  Tensor a = a0;
  OpScope scope(kUnbind, a);
  check_defined(kUnbind, a, "input");
  AG_CHECK(a.dim() > 0, "unbind: cannot unbind a 0-dim tensor");
  const int64_t d = wrap_dim(kUnbind.name, dim, a.dim());
  std::vector<Tensor> outs;
  {
    NoGradGuard no_grad;  // the views' gradients go through the one node below
    for (int64_t i = 0; i < a.size(d); ++i) outs.push_back(select(a, d, i));
  }
  if (!outs.empty() && autograd::any_requires_grad({&a}) && is_floating(a.dtype())) {
    Shape part = a.shape();
    part.erase(part.begin() + d);
    autograd::record_outputs(kUnbind, outs, {a}, {}, [part, d](const std::vector<Tensor>& grads, const std::vector<Tensor>&) {
      std::vector<Tensor> gs = grads;
      const Tensor* like = nullptr;
      for (const Tensor& g : grads)
        if (g.defined()) like = &g;
      for (Tensor& g : gs)
        if (!g.defined()) g = zeros(part, like->options());
      return autograd::Grads{stack(gs, d)};
    });
    for (const Tensor& o : outs) count_tracked_view(o, a);  // Note [In-place autograd]
  }
  scope.finish(outs.empty() ? a : outs[0]);
  return outs;
}

}  // namespace ampgrad
