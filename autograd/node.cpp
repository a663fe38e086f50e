// Nodes of the autograd graph, recording, and grad mode.
#include <ampgrad/autograd/node.h>

#include <ampgrad/autograd/anomaly_watch.h>

#include <ampgrad/core/dispatch.h>
#include <ampgrad/ops/op.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad::autograd {

namespace {
thread_local bool t_grad_mode = true;
uint64_t next_sequence() {
  static thread_local uint64_t seq = 0;
  return ++seq;
}
}  // namespace

bool grad_mode_enabled() { return t_grad_mode; }
void set_grad_mode(bool enabled) { t_grad_mode = enabled; }

bool any_requires_grad(std::initializer_list<const Tensor*> inputs) {
  if (!t_grad_mode) return false;
  for (const Tensor* t : inputs)
    if (t->defined() && t->requires_grad()) return true;
  return false;
}

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!t_grad_mode) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

std::string_view FunctionNode::name() const { return op_.name; }

Grads FunctionNode::apply(const Tensor& grad, BackwardContext& ctx) {
  AG_CHECK(!released_,
           "{}: trying to run backward through the graph a second time (its saved tensors were freed after the "
           "first backward); pass retain_graph=true to the first backward if you need to run it twice",
           op_.name);
  std::vector<Tensor> values;
  values.reserve(saved.size());
  for (size_t i = 0; i < saved.size(); ++i) {
    const SavedTensor& s = saved[i];
    AG_CHECK(!s.tensor.defined() || s.tensor.version() == s.version,
             "{}: a tensor saved for backward ({}) was modified by an in-place operation after it was saved "
             "(version {} is now {}); use an out-of-place op or clone() the tensor before modifying it",
             op_.name, s.tensor.desc(), s.version, s.tensor.version());
    values.push_back(s.tensor);
  }
  Grads grads;
  {
    CurrentOp current(op_.name, /*backward=*/true);  // names the formula's device errors
    grads = fn_(grad, values, ctx);
  }
  AG_INTERNAL_ASSERT(grads.size() == inputs.size(), "{}: backward returned {} gradients for {} inputs", op_.name,
                     grads.size(), inputs.size());
  // Note [Grad shape and dtype]
  for (size_t i = 0; i < grads.size(); ++i) {
    Tensor& g = grads[i];
    if (!g.defined() || !next[i].valid()) {
      g = Tensor();
      continue;
    }
    if (g.shape() != inputs[i].shape) g = sum_to(g, inputs[i].shape);
    // A narrower gradient for a leaf's accumulator is widened there, exactly, in the kernel
    // that adds it (Note [Gradient accumulation]). A wider one is rounded to the input's dtype
    // here, as PyTorch does (an float16 tensor's gradient is float16, and overflows to inf where
    // the scaler sees it), unless the op marked it wide on purpose and the next node takes it
    // (a cast, or the accumulator of the cast's leaf). Anything else is cast here.
    const DType want = inputs[i].dtype;
    if (g.dtype() != want) {
      const bool narrower = promote_types(want, g.dtype()) == want;
      if (!((narrower || inputs[i].wide_grad) && next[i].node->takes_grad_dtype(g.dtype()))) g = ctx.to_dtype(g, want);
    }
  }
  if (detail::anomaly_guarded()) [[unlikely]] detail::anomaly_check_gradients(*this, grad, grads);
  return grads;
}

Grads FunctionNode::apply_widened(const Tensor& grad, DType wide) const {
  AG_CHECK(!released_ && fn_, "{}: its saved tensors were freed; it cannot run again", op_.name);
  auto widen = [wide](const Tensor& t) {
    return t.defined() && is_floating(t.dtype()) && promote_types(t.dtype(), wide) == wide && t.dtype() != wide
               ? t.to(wide)
               : t;
  };
  std::vector<Tensor> values;
  values.reserve(saved.size());
  for (const SavedTensor& s : saved) values.push_back(widen(s.tensor));
  CurrentOp current(op_.name, /*backward=*/true);
  BackwardContext plain;
  return fn_(widen(grad), values, plain);
}

void FunctionNode::release() {
  // A node that saved no tensor has nothing to free, and a second backward through it is
  // fine, as in PyTorch: two losses that share such a node (one autocast region's cast of an
  // activation, say) can each run backward. (A parameter's cast has no node of its own: Note
  // [Leaf casts] in ops/copy.cpp.)
  bool any = false;
  for (const SavedTensor& s : saved) any = any || s.tensor.defined();
  if (!any) return;
  saved.clear();
  fn_ = nullptr;
  released_ = true;
}

Tensor Node::sum_incoming(const Tensor& a, const Tensor& b) const { return add(a, b); }

// Note [Summing incoming gradients]
// A node reached along several edges gets their gradients summed before it runs: an LSTMCell
// loop's weights 64 times a sequence (through their autocast copies under AMP), each step's
// hidden state twice. A sum that only the engine holds (nothing else shares its memory, no
// stride repeats an element) is added to in place, as PyTorch's InputBuffer does: the same
// kernel and the same values as add() (add_ reads a narrower b as is, Note [Mixed-dtype
// accumulation], as add() would widen it), without a new tensor per arrival; the
// caching allocator's free and the next malloc of the same size cost more host time than the
// add's launch. Where the sum's dtype would change, or the sum is shared, add() makes a new one.
bool Node::sum_takes_in_place(const Tensor& sum, const Shape& shape, Device device, DType dtype) const {
  return sum.shape() == shape && sum.device() == device && !sum.requires_grad() && sum_keeps_dtype(sum.dtype(), dtype) &&
         is_non_overlapping_and_dense(sum) && sum.impl_ptr().use_count() == 1 && sum.storage().use_count() == 1;
}

void Node::accumulate_incoming(Tensor& sum, const Tensor& b) const {
  if (sum_takes_in_place(sum, b.shape(), b.device(), b.dtype())) {
    sum.add_(b);
    return;
  }
  sum = sum_incoming(sum, b);
}

bool Node::sum_keeps_dtype(DType a, DType b) const { return promote_types(a, b) == a; }

// Note [Gradient accumulation]
// The gradient reaching a leaf may still be in a narrower dtype than the leaf's (float16 for
// an autocast weight of float32); it is widened here, where the leaf's dtype is known, and
// widening is exact, so the results are PyTorch's (whose engine casts first) to the bit:
// - no .grad yet: the incoming tensor becomes .grad when nothing else holds it or its memory
//   and it has the leaf's dtype and layout (PyTorch steals it too); otherwise a copy in the
//   leaf's dtype and layout is made (one cast or copy kernel).
// - a .grad nobody else holds: added in place, a narrower dtype read as is (Note
//   [Mixed-dtype accumulation]), one kernel; the .grad keeps its memory, which a captured
//   CUDA graph relies on (Note [CUDA graphs]).
// - otherwise (a user holds .grad) a new .grad = old + incoming, in the leaf's dtype.
// Two gradients arriving along different edges are each converted to the leaf's dtype before
// they are summed (sum_incoming), as they were when every node cast its own outputs.
namespace {
bool can_steal(const Tensor& g, const Tensor& leaf) {
  return g.impl_ptr().use_count() == 1 && g.storage().use_count() == 1 && g.dtype() == leaf.dtype() &&
         g.shape() == leaf.shape() && g.strides() == leaf.strides() && g.storage_offset() == 0 &&
         g.storage()->nbytes() == static_cast<size_t>(g.numel()) * g.element_size() &&
         is_non_overlapping_and_dense(g) && !g.requires_grad();
}
}  // namespace

bool AccumulateGrad::takes_grad_dtype(DType d) const {
  return is_floating(d) && promote_types(leaf_->dtype, d) == leaf_->dtype;
}

Tensor AccumulateGrad::sum_incoming(const Tensor& a, const Tensor& b) const {
  const DType dt = leaf_->dtype;
  return add(a.dtype() == dt ? a : a.to(dt), b.dtype() == dt ? b : b.to(dt));
}

bool AccumulateGrad::sum_keeps_dtype(DType a, DType b) const { return a == leaf_->dtype && takes_grad_dtype(b); }

Grads AccumulateGrad::apply(const Tensor& grad, BackwardContext&) {
  TensorImpl& leaf = *leaf_;
  const Tensor leaf_view(leaf_);
  NoGradGuard no_grad;
  if (leaf.grad == nullptr) {
    if (can_steal(grad, leaf_view)) {
      leaf.grad = grad.impl_ptr();
    } else if (!leaf_view.is_contiguous() && grad.shape() == leaf_view.shape() &&
               is_non_overlapping_and_dense(leaf_view)) {
      // A dense leaf's gradient takes the leaf's layout (a channels-last input gets a
      // channels-last gradient, as in PyTorch).
      Tensor owned = empty_preserving_layout(leaf_view);
      owned.copy_(grad);
      leaf.grad = owned.impl_ptr();
    } else {
      leaf.grad = (grad.dtype() == leaf.dtype ? grad.detach().clone() : grad.to(leaf.dtype)).impl_ptr();
    }
  } else if (leaf.grad.use_count() == 1 && leaf.grad->dtype == leaf.dtype) {
    Tensor acc(leaf.grad);
    acc.add_(grad);
  } else {
    Tensor acc(leaf.grad);
    Tensor sum = add(acc, grad);
    leaf.grad = (sum.dtype() == leaf.dtype ? sum : sum.to(leaf.dtype)).impl_ptr();
  }
  if (!leaf.post_accumulate_grad_hooks.empty()) {
    for (const auto& hook : leaf.post_accumulate_grad_hooks) hook(leaf_view);
  }
  return {};
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  if (t.grad_fn()) return {t.grad_fn()};
  TensorImpl* impl = t.unsafe_impl();
  std::shared_ptr<Node> acc = impl->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    // Accumulated as soon as its gradient is complete, before any function node waiting in
    // the ready queue: the gradient's post-accumulate hooks (DistributedDataParallel's bucket
    // all-reduce) then overlap with the rest of backward, as in PyTorch.
    acc->sequence = UINT64_MAX;
    impl->grad_accumulator = acc;
  }
  return {acc};
}

bool takes_grad_dtype(const Tensor& t, DType d) {
  const Edge e = gradient_edge(t);
  return e.valid() && (d == t.dtype() || e.node->takes_grad_dtype(d));
}

void share_gradient_edge(const Tensor& out, const Tensor& leaf) {
  TensorImpl* impl = out.unsafe_impl();
  impl->grad_fn = gradient_edge(leaf).node;
  impl->requires_grad = true;
}

void record(const OpInfo& op, const Tensor& out, const std::vector<Tensor>& inputs, std::vector<Tensor> saved,
            BackwardFn fn) {
  record(op, out, inputs, std::move(saved),
         [fn = std::move(fn)](const Tensor& g, const std::vector<Tensor>& s, BackwardContext&) { return fn(g, s); });
}

void record(const OpInfo& op, const Tensor& out, const std::vector<Tensor>& inputs, std::vector<Tensor> saved,
            ContextBackwardFn fn) {
  auto node = std::make_shared<FunctionNode>(op, std::move(fn));
  node->sequence = next_sequence();
  if (detail::anomaly_guarded()) [[unlikely]] node->forward_position = detail::anomaly_position();
  node->next.reserve(inputs.size());
  node->inputs.reserve(inputs.size());
  for (const Tensor& in : inputs) {
    node->next.push_back(gradient_edge(in));
    node->inputs.push_back({in.defined() ? in.shape() : Shape{}, in.defined() ? in.dtype() : DType::Float32});
  }
  node->saved.reserve(saved.size());
  for (Tensor& s : saved) {
    uint32_t v = s.defined() ? s.version() : 0;
    node->saved.push_back({std::move(s), v});
  }
  TensorImpl* impl = out.unsafe_impl();
  impl->grad_fn = std::move(node);
  impl->requires_grad = true;
}

}  // namespace ampgrad::autograd
