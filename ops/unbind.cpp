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

// The tensor whose slices along d the gradients are, when they are (a backward that wrote them
// into one block: Note [Packed attention gradients] in ops/attention.cpp): their stack, with no
// copy. Undefined otherwise, and for gradients with history of their own (double backward).
Tensor stacked_already(const std::vector<Tensor>& gs, int64_t d) {
  if (gs.size() < 2) return Tensor();
  const Tensor& g0 = gs[0];
  if (!g0.defined() || !gs[1].defined()) return Tensor();
  const int64_t step = gs[1].storage_offset() - g0.storage_offset();
  if (step <= 0) return Tensor();
  for (size_t i = 0; i < gs.size(); ++i) {
    const Tensor& g = gs[i];
    if (!g.defined() || g.requires_grad() || g.storage() != g0.storage() || g.dtype() != g0.dtype() ||
        g.shape() != g0.shape() || g.strides() != g0.strides() ||
        g.storage_offset() != g0.storage_offset() + step * static_cast<int64_t>(i))
      return Tensor();
  }
  Shape sizes = g0.shape(), strides = g0.strides();
  sizes.insert(sizes.begin() + d, static_cast<int64_t>(gs.size()));
  strides.insert(strides.begin() + d, step);
  Tensor stacked = alias_with(g0, sizes, strides, g0.storage_offset());
  return is_non_overlapping_and_dense(stacked) ? stacked : Tensor();
}
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
      if (Tensor s = stacked_already(grads, d); s.defined()) return autograd::Grads{s};
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
