// The backward engine: runs the graph's nodes in reverse topological order (Note [Backward engine]).
#include <queue>

#include <ampgrad/amp/autocast.h>
#include <ampgrad/autograd/anomaly_watch.h>
#include <ampgrad/autograd/backward_context.h>
#include <ampgrad/autograd/node.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad::autograd {

// Note [Backward engine]
// backward() is reverse-mode differentiation over the graph the forward recorded (Note
// [Autograd graph] in autograd/node.h):
//  1. Count, for every node reachable from the root, the edges that lead into it: how many
//     gradients it must wait for.
//  2. Start from the root's node with the seed gradient (ones, when none is given).
//  3. Repeatedly take a node whose gradients have all arrived, run its formula on their sum,
//     and deliver each result to the node at that input's edge, adding it to what arrived there
//     before. A node whose count reaches zero is ready.
// Among ready nodes the one recorded last runs first (a priority queue on creation order), so
// the backward visits the forward in reverse, as PyTorch's does; a leaf's accumulator runs as
// soon as it is ready (Note [Gradient accumulation]). Formulas run without grad mode (no graph
// of their own) and without autocast (gradients follow the forward's dtypes, not the policy).
// Anomaly detection watches the run (Note [Anomaly detection]); the speed-ups answer the
// formulas' questions through the context (Note [Backward context]: a formula that takes a sum
// out of `pending` returns it with its own gradient added, and the engine delivers it as any).

namespace {
// The callbacks of the backward running on this thread; null outside one.
thread_local std::vector<std::function<void()>>* t_callbacks = nullptr;

BackwardContextFactory g_context_factory = nullptr;

// Step 1: how many gradients each node reachable from `start` waits for.
void count_dependencies(Node* start, std::unordered_map<Node*, int>& waiting) {
  std::vector<Node*> stack{start};
  waiting[start] = 0;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next) {
      if (!e.valid()) continue;
      auto [it, first] = waiting.try_emplace(e.node.get(), 0);
      ++it->second;
      if (first) stack.push_back(e.node.get());
    }
  }
}

// Step 3's delivery: adds `g` (undefined: nothing along this edge) into the sum pending for `to`.
void deliver(GraphTask& task, Node* to, Tensor g, AnomalyWatch& watch) {
  Tensor& sum = task.pending[to];
  if (!g.defined()) return;
  if (!sum.defined()) {
    sum = std::move(g);  // moved: a gradient nobody else holds may become a leaf's .grad as is
    return;
  }
  to->accumulate_incoming(sum, g);
  watch.summed(to);
}

// The gradient backward starts from: `grad`, or ones for a scalar root.
Tensor seed_for(const Tensor& root, const Tensor& grad, BackwardContext& ctx) {
  detail::AnomalyQuiet quiet;  // the seed's ops are not the forward's
  if (!grad.defined()) {
    AG_CHECK(root.numel() == 1,
             "backward: grad can be implicitly created only for scalar outputs, but the output is {}; pass a "
             "gradient of the same shape",
             root.desc());
    return ctx.make_seed(root);
  }
  AG_CHECK(grad.shape() == root.shape(), "backward: gradient {} does not match the output {}", grad.desc(),
           root.desc());
  AG_CHECK(grad.device() == root.device(), "backward: gradient {} is on another device than the output {}",
           grad.desc(), root.desc());
  // Formulas read their incoming gradient in their output's dtype; a seed of another dtype is
  // cast here, as PyTorch does.
  return grad.dtype() == root.dtype() ? grad : grad.to(root.dtype());
}
}  // namespace

Tensor BackwardContext::make_seed(const Tensor& root) { return ones_like(root); }
Tensor BackwardContext::to_dtype(const Tensor& grad, DType dtype) { return grad.to(dtype); }

void set_backward_context_factory(BackwardContextFactory factory) { g_context_factory = factory; }

void queue_callback(std::function<void()> fn) {
  AG_CHECK(t_callbacks != nullptr, "autograd.queue_callback: no backward is running on this thread");
  t_callbacks->push_back(std::move(fn));
}

void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph) {
  AG_CHECK(root.requires_grad(),
           "backward: the tensor ({}) does not require grad and has no grad_fn; did you forget requires_grad_() on "
           "an input, or run the forward under NoGradGuard?",
           root.desc());
  NoGradGuard no_grad;
  amp::AutocastSuspend no_autocast;
  GraphTask task;
  std::unique_ptr<BackwardContext> ctx = g_context_factory ? g_context_factory(task, root) : nullptr;
  if (!ctx) ctx = std::make_unique<BackwardContext>();
  const Tensor seed = seed_for(root, grad, *ctx);
  const Edge start = gradient_edge(root);
  AnomalyWatch watch(seed);  // after `start`, which may hold the graph's only reference

  count_dependencies(start.node.get(), task.waiting);
  task.pending[start.node.get()] = seed;
  auto later_first = [](Node* a, Node* b) { return a->sequence < b->sequence; };
  std::priority_queue<Node*, std::vector<Node*>, decltype(later_first)> ready(later_first);
  ready.push(start.node.get());

  std::vector<std::function<void()>> callbacks;
  struct Callbacks {
    std::vector<std::function<void()>>* outer = t_callbacks;
    ~Callbacks() { t_callbacks = outer; }
  } restore;
  t_callbacks = &callbacks;

  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    auto it = task.pending.find(n);
    const Tensor in = std::move(it->second);
    task.pending.erase(it);
    watch.before_run(n, in);
    task.running = n;
    // A node whose gradients were all undefined passes "nothing" on, so that the counts of the
    // nodes below it still reach zero.
    Grads outs = in.defined() ? n->apply(in, *ctx) : Grads(n->next.size());
    for (size_t i = 0; i < outs.size(); ++i) {
      Node* to = n->next[i].node.get();
      if (to == nullptr) continue;
      deliver(task, to, std::move(outs[i]), watch);
      if (--task.waiting[to] == 0) ready.push(to);
    }
    if (!retain_graph) watch.release(n);
  }
  watch.end();
  t_callbacks = restore.outer;
  for (auto& fn : callbacks) fn();
}

}  // namespace ampgrad::autograd
