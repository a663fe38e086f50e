// Nodes of the autograd graph, recording, and grad mode.
#include "autograd/node.h"

#include "ops/op.h"
#include "ops/ops.h"

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

Grads FunctionNode::apply(const Tensor& grad) {
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
  Grads grads = fn_(grad, values);
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
    if (g.dtype() != inputs[i].dtype) g = g.to(inputs[i].dtype);
  }
  return grads;
}

void FunctionNode::release() {
  saved.clear();
  fn_ = nullptr;
  released_ = true;
}

Grads AccumulateGrad::apply(const Tensor& grad) {
  TensorImpl& leaf = *leaf_;
  Tensor g = grad;
  if (leaf.grad == nullptr) {
    // Own the gradient: the incoming tensor may be shared with another branch of the graph.
    // It takes the leaf's layout when the leaf is dense (a channels-last input gets a
    // channels-last gradient, as in PyTorch); parameters are contiguous, and so their grads.
    Tensor leaf_view(leaf_);
    if (!leaf_view.is_contiguous() && g.shape() == leaf_view.shape() && is_non_overlapping_and_dense(leaf_view)) {
      Tensor owned = empty_preserving_layout(leaf_view);
      NoGradGuard no_grad;
      owned.copy_(g);
      leaf.grad = owned.impl_ptr();
    } else {
      leaf.grad = g.detach().clone().impl_ptr();
    }
  } else if (leaf.grad.use_count() == 1 && leaf.grad->dtype == g.dtype()) {
    // Nobody else holds the gradient: accumulate in place, so it keeps its memory (a
    // captured CUDA graph relies on that, Note [CUDA graphs]).
    Tensor acc(leaf.grad);
    acc.add_(g);
  } else {
    Tensor acc(leaf.grad);
    leaf.grad = add(acc, g).detach().impl_ptr();
  }
  if (!leaf.post_accumulate_grad_hooks.empty()) {
    const Tensor self(leaf_);
    for (const auto& hook : leaf.post_accumulate_grad_hooks) hook(self);
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

void record(const OpInfo& op, const Tensor& out, const std::vector<Tensor>& inputs, std::vector<Tensor> saved,
            BackwardFn fn) {
  auto node = std::make_shared<FunctionNode>(op, std::move(fn));
  node->sequence = next_sequence();
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
