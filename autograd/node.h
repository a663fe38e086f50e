// Autograd graph nodes, saved tensors with version checks, and grad mode.
#pragma once

#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include <ampgrad/autograd/backward_context.h>
#include <ampgrad/autograd/grad_mode.h>
#include <ampgrad/core/tensor.h>

namespace ampgrad {
struct OpInfo;
}

namespace ampgrad::autograd {

// Note [Autograd graph]
// An op whose inputs require grad gives its output a grad_fn: a Node that holds an edge to
// each differentiable input's own grad_fn (or, for a leaf, to the leaf's AccumulateGrad
// node), the tensors its backward formula needs, and that formula. backward() runs the
// nodes reachable from the root in reverse topological order. Every node has exactly one
// output, so a formula maps one incoming gradient to one gradient per input.
//
// Note [Grad shape and dtype]
// A node remembers each input's shape and dtype. After a formula runs, the engine sums a
// gradient down to its input's shape (undoing broadcasting) and casts it to its input's
// dtype (undoing type promotion and autocast). Formulas therefore never deal with either.
// Two nodes take other dtypes as they are (takes_grad_dtype): a leaf's accumulator widens a
// narrower gradient itself, so a float16 gradient of a float32 parameter adds into its .grad
// in one kernel (Note [Gradient accumulation]); and a cast takes a gradient already in its
// source's dtype, which linear computes for an autocast weight copy (InputMeta::wide_grad,
// Note [Wide weight gradients] in ops/linear.cpp).

class Node;

struct Edge {
  std::shared_ptr<Node> node;  // null: the input needs no gradient
  bool valid() const { return node != nullptr; }
};

// A tensor kept for backward, with the version it had when saved (Note [Version counter]).
struct SavedTensor {
  Tensor tensor;
  uint32_t version = 0;
};

using Grads = std::vector<Tensor>;
// The backward formula: (incoming gradient, saved tensors) -> one gradient per input
// (an undefined Tensor where an input gets none).
using BackwardFn = std::function<Grads(const Tensor& grad, const std::vector<Tensor>& saved)>;
// A formula that asks its context (Note [Backward context]).
using ContextBackwardFn =
    std::function<Grads(const Tensor& grad, const std::vector<Tensor>& saved, BackwardContext& ctx)>;

class Node {
 public:
  virtual ~Node() = default;
  virtual std::string_view name() const = 0;
  // Runs the formula; returns one gradient per next edge, already reduced and cast.
  virtual Grads apply(const Tensor& grad, BackwardContext& ctx) = 0;
  virtual void release() {}  // drop saved state after a backward without retain_graph
  // True when the node takes a gradient of dtype `d` (not the dtype of the tensor it is the
  // gradient of) as it is, so the node before it skips the cast (Note [Grad shape and dtype]).
  virtual bool takes_grad_dtype(DType d) const { return false; }
  // Sums two gradients arriving for this node along different edges.
  virtual Tensor sum_incoming(const Tensor& a, const Tensor& b) const;
  // Adds b into `sum`, the gradient summed so far for this node: in place where the engine
  // alone holds `sum` (Note [Summing incoming gradients]), else sum = sum_incoming(sum, b).
  void accumulate_incoming(Tensor& sum, const Tensor& b) const;
  // Whether a gradient of `shape`, `device` and `dtype` may be added into `sum`, the gradient
  // summed so far for this node, in place: the engine alone holds it, no stride repeats an
  // element, and the sum keeps its dtype (Note [Summing incoming gradients]).
  bool sum_takes_in_place(const Tensor& sum, const Shape& shape, Device device, DType dtype) const;
  // Whether sum_incoming's result keeps the dtype `a` of the sum so far, given b's.
  virtual bool sum_keeps_dtype(DType a, DType b) const;

  std::vector<Edge> next;
  uint64_t sequence = 0;  // creation order; later nodes run first among ready ones
  // Under anomaly detection, the position in the forward of the op that recorded the node
  // (Note [Anomaly detection] in autograd/anomaly.h); 0 otherwise.
  int64_t forward_position = 0;
};

class FunctionNode final : public Node {
 public:
  FunctionNode(const OpInfo& op, ContextBackwardFn fn) : op_(op), fn_(std::move(fn)) {}
  std::string_view name() const override;
  Grads apply(const Tensor& grad, BackwardContext& ctx) override;
  void release() override;
  // The formula run again on copies of the incoming gradient and the saved tensors widened to
  // `wide` (those narrower than it), its gradients neither reduced nor cast: how large an
  // overflowed gradient really was (Note [Anomaly detection]). Raises if the node was released.
  Grads apply_widened(const Tensor& grad, DType wide) const;
  // A cast (record_cast in ops/copy.cpp) takes a gradient in its source's dtype as well.
  bool takes_grad_dtype(DType d) const override { return cast && !inputs.empty() && d == inputs[0].dtype; }

  struct InputMeta {
    Shape shape;
    DType dtype;
    // Set by the op when its gradient for this input is deliberately wider than the input
    // (linear's float32 weight gradient of a float16 copy: Note [Wide weight gradients]); such
    // a gradient is passed on unrounded where the next node takes it (takes_grad_dtype).
    bool wide_grad = false;
  };
  std::vector<InputMeta> inputs;
  std::vector<SavedTensor> saved;
  bool cast = false;  // the node of a dtype cast
  // For anomaly detection: a node of record_outputs (Note [Several outputs] in
  // autograd/multi_output.h). Its formula's node reads its gradients from the outputs' slots
  // (it cannot run again); an output's node passes a marker on, not a gradient (not checked).
  enum class Part : uint8_t { whole, formula, output };
  Part part = Part::whole;

 private:
  const OpInfo& op_;
  ContextBackwardFn fn_;
  bool released_ = false;
};

// Adds the incoming gradient into a leaf's .grad (Note [Gradient accumulation]).
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {}
  std::string_view name() const override { return "AccumulateGrad"; }
  Grads apply(const Tensor& grad, BackwardContext& ctx) override;
  bool takes_grad_dtype(DType d) const override;
  Tensor sum_incoming(const Tensor& a, const Tensor& b) const override;
  bool sum_keeps_dtype(DType a, DType b) const override;

 private:
  std::shared_ptr<TensorImpl> leaf_;
};


// True when grad mode is on and any defined input requires grad.
bool any_requires_grad(std::initializer_list<const Tensor*> inputs);
bool any_requires_grad(const std::vector<Tensor>& inputs);

// Gives `out` a FunctionNode for `op` over `inputs`, keeping `saved` for the formula.
void record(const OpInfo& op, const Tensor& out, const std::vector<Tensor>& inputs,
            std::vector<Tensor> saved, BackwardFn fn);
void record(const OpInfo& op, const Tensor& out, const std::vector<Tensor>& inputs,
            std::vector<Tensor> saved, ContextBackwardFn fn);

// The edge a gradient for `t` flows along (its grad_fn, or its leaf's accumulator).
Edge gradient_edge(const Tensor& t);
// True when the gradient for `t` may be handed over in dtype `d` as it is (Node::takes_grad_dtype).
bool takes_grad_dtype(const Tensor& t, DType d);
// Gives `out` (a same-device cast of the leaf `leaf`) the leaf's accumulator as its gradient
// edge (Note [Leaf casts] in ops/copy.cpp).
void share_gradient_edge(const Tensor& out, const Tensor& leaf);

// Runs backward from `root` with gradient `grad` (autograd/engine.cpp).
void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph);

// Only while a backward runs (from a node or a hook): `fn` runs once after its last node,
// before run_backward returns (PyTorch's queue_callback). DistributedDataParallel checks
// there that every bucket was reduced.
void queue_callback(std::function<void()> fn);

}  // namespace ampgrad::autograd
