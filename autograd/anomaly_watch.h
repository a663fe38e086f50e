// Anomaly detection's hooks in the backward engine (Note [Anomaly detection] in autograd/anomaly.h).
#pragma once

#include <unordered_set>
#include <vector>

#include <ampgrad/autograd/anomaly.h>

namespace ampgrad::autograd {

class Node;
class FunctionNode;

namespace detail {
// FunctionNode::apply: `node` ran on `grad` and returned `grads`.
void anomaly_check_gradients(FunctionNode& node, const Tensor& grad, const std::vector<Tensor>& grads);
// While alive, this thread's ops are neither counted nor checked (the engine's own ops).
class AnomalyQuiet {
 public:
  AnomalyQuiet();
  ~AnomalyQuiet();
  AnomalyQuiet(const AnomalyQuiet&) = delete;
  AnomalyQuiet& operator=(const AnomalyQuiet&) = delete;

 private:
  bool prev_;
};
}  // namespace detail

// One backward as anomaly detection sees it: the engine's hooks (autograd/engine.cpp). Outside
// a DetectAnomalyGuard each is a test of a flag. Made with the backward's seed, which it checks
// (after reading the forward's checks).
class AnomalyWatch {
 public:
  explicit AnomalyWatch(const Tensor& seed);
  ~AnomalyWatch();
  AnomalyWatch(const AnomalyWatch&) = delete;
  AnomalyWatch& operator=(const AnomalyWatch&) = delete;
  // `node`'s gradient is the sum of gradients along several edges: checked before it runs.
  void summed(Node* node) {
    if (active_) [[unlikely]] summed_.insert(node);
  }
  // `node` is about to run on `grad`.
  void before_run(Node* node, const Tensor& grad);
  // `node` ran and its saved tensors may go: now, or (on a device whose checks are read at the
  // end) when the backward ends, so that the node flagged can run again.
  void release(Node* node);
  // The backward's last node ran: its checks are read (raises the first anomaly, if any).
  void end();

 private:
  bool active_ = false;
  bool keep_ = false;
  std::unordered_set<Node*> summed_;
  std::vector<Node*> kept_;
};

}  // namespace ampgrad::autograd
