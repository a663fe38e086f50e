// What a backward formula may ask beyond its gradient and saved values, and the seam where the
// backward speed-ups answer (Note [Backward context]).
#pragma once

#include <cstddef>
#include <memory>
#include <unordered_map>

#include <ampgrad/core/tensor.h>

namespace ampgrad::autograd {

class Node;

// Note [Backward context]
// A backward formula maps the gradient of its op's output and the tensors the op saved to one
// gradient per input: that is the whole algorithm, and all the reference engine gives
// (autograd/engine.cpp). A few formulas can spare the device some work when they know a little
// of the graph around them, so each formula also gets a BackwardContext, whose questions the
// plain engine answers "no":
//  - take_sum(i): the gradient the engine has summed so far for input i (that tensor's other
//    uses), handed over so that the formula's kernel adds its own gradient into it in the same
//    pass, instead of the engine adding it afterwards (a kernel reading and writing it again);
//  - wants_rounded(i, dtype) and offer_rounded: the node below will cast input i's gradient to
//    a 16-bit dtype, so a kernel that writes the gradient may write that rounding in the same
//    pass and offer it; the engine's cast (to_dtype) then takes it instead of a cast kernel;
//  - is_seed(g): g is the gradient of ones backward() starts from, so g * f is f.
// The engine asks two of its own: the seed's tensor (make_seed) and the cast of a gradient to
// its input's dtype (to_dtype, Note [Grad shape and dtype] in autograd/node.h).
// The speed-ups register a context that answers "yes" where that is safe (speedups/backward.cpp,
// Note [Backward speed-ups]); a formula's values never depend on the answers, only its cost,
// and the tests run both ways (speedups::set_backward_speedups).
class BackwardContext {
 public:
  virtual ~BackwardContext() = default;

  // Asked by formulas.
  // The gradient summed so far for input i, when the formula may add its own gradient of
  // `shape` and `dtype` into it in place (bumping its version); the engine no longer holds it,
  // so the formula must return it as input i's gradient. Undefined (the plain answer)
  // otherwise, and then the engine adds.
  virtual Tensor take_sum(size_t input, const Shape& shape, DType dtype) { return Tensor(); }
  // Whether input i's gradient will be cast to `dtype` on its way down.
  virtual bool wants_rounded(size_t input, DType dtype) { return false; }
  // `rounded` holds `grad` rounded to rounded's dtype, written by the formula.
  virtual void offer_rounded(const Tensor& grad, const Tensor& rounded) {}
  // Whether `g` is backward()'s gradient of ones, unchanged.
  virtual bool is_seed(const Tensor& g) const { return false; }

  // Asked by the engine.
  // The gradient backward() starts from when given none: ones like `root`.
  virtual Tensor make_seed(const Tensor& root);
  // `grad` cast to `dtype`.
  virtual Tensor to_dtype(const Tensor& grad, DType dtype);
};

// One backward as the engine holds it: the gradient summed so far for each node, and how many
// gradients each node still waits for. A context reads it to answer (and take_sum takes a sum
// out of it).
struct GraphTask {
  std::unordered_map<Node*, Tensor> pending;
  std::unordered_map<Node*, int> waiting;
  Node* running = nullptr;  // the node whose formula runs now
};

// Where the speed-ups plug in: makes each backward's context (null: the plain one). Set once,
// while the library loads.
using BackwardContextFactory = std::unique_ptr<BackwardContext> (*)(GraphTask& task, const Tensor& root);
void set_backward_context_factory(BackwardContextFactory factory);

}  // namespace ampgrad::autograd
