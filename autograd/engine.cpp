// The backward engine: runs the graph's nodes in reverse topological order.
#include <optional>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include <ampgrad/amp/autocast.h>
#include <ampgrad/autograd/anomaly.h>
#include <ampgrad/autograd/node.h>
#include <ampgrad/ops/ops.h>
#include <ampgrad/core/device_hooks.h>
#include <ampgrad/core/offered_copies.h>

namespace ampgrad::autograd {

namespace {
// The callbacks of the backward running on this thread; null outside one.
thread_local std::vector<std::function<void()>>* t_callbacks = nullptr;

// The node whose formula runs now on this thread, and the engine's sums (Note [Accumulating
// formulas]); null outside a formula.
struct Running {
  Node* node;
  std::unordered_map<Node*, Tensor>* pending;
  std::unordered_map<Node*, int>* deps;
  // The sums pending_gradient handed the formula to add into: (input, the sum).
  std::vector<std::pair<size_t, const TensorImpl*>> handed;
};
thread_local Running* t_running = nullptr;
thread_local int64_t t_formula_sums = 0;

// Whether the formula's gradient `g` for input i is the sum pending_gradient handed it for
// that input (the formula added into it: the engine adds nothing). Any other gradient that
// happens to be the pending sum's tensor (add's backward returns its incoming gradient for
// both inputs: x + x) is summed as always.
bool summed_by_formula(Running& r, size_t i, const Tensor& sum, const Tensor& g) {
  for (auto it = r.handed.begin(); it != r.handed.end(); ++it) {
    if (it->first != i || it->second != sum.unsafe_impl() || it->second != g.unsafe_impl()) continue;
    r.handed.erase(it);
    ++t_formula_sums;
    return true;
  }
  return false;
}

// Note [Gradient copies]: this thread's offers, for the backward running now (leaked, like the
// seeds: device memory outlives static destructors).
::ampgrad::detail::OfferedCopies& copies() {
  thread_local auto* c = new ::ampgrad::detail::OfferedCopies(16);
  return *c;
}
thread_local int64_t t_copy_hits = 0;
}  // namespace

// Note [Accumulating formulas]
// A pre-norm transformer's residual stream x feeds both the residual add and the layer norm of
// the next sublayer, so its gradient is a sum: the add's (passed on as it came) arrives first,
// and the engine added layer_norm's input gradient into it, a kernel reading and writing the
// stream's 4 MB (the small GPT: 8 a step). A formula that writes its input gradient in a
// kernel of its own can add it there instead: detail::pending_gradient hands the formula the
// sum so far, where the engine alone holds it (as Note [Summing incoming gradients] requires
// for its in-place add), and the formula returns it with its own gradient added in (and bumps
// its version, as add_ would); the engine, getting back for that input the sum it handed out,
// adds nothing. The bits are the engine's add (sum + g, rounded once; layer_norm's kernels add
// without contraction). Not under anomaly detection, which checks each formula's own gradients
// and each sum apart (Note [Anomaly detection] in autograd/anomaly.h).
//
// Note [Gradient copies]
// The next node down is often the residual add of float32 and float16 (Note [Widening
// arithmetic] in ops/binary.cpp), whose float16 input's gradient is the float32 sum rounded, a
// cast kernel more. A formula that writes a final gradient (the last to reach its node,
// detail::wants_gradient_copy) can write its rounding in the same pass and offer it
// (offer_gradient_copy); FunctionNode::apply takes it instead of casting while both are
// unchanged (the same tensor, the same version). The copy is the cast's bits; where nothing
// takes it, it cost a write.
namespace detail {

Tensor pending_gradient(size_t input, const Shape& shape, DType dtype) {
  Running* r = t_running;
  if (!r || anomaly_guarded() || input >= r->node->next.size() || !r->node->next[input].valid()) return Tensor();
  Node* child = r->node->next[input].node.get();
  const auto it = r->pending->find(child);
  if (it == r->pending->end() || !it->second.defined()) return Tensor();
  const Tensor& sum = it->second;
  // The engine's own rule for adding in place, and the layout the formula's kernel writes.
  if (sum.dtype() != dtype || !sum.is_contiguous() || sum.storage_offset() != 0 ||
      !child->sum_takes_in_place(sum, shape, sum.device(), dtype))
    return Tensor();
  r->handed.emplace_back(input, sum.unsafe_impl());
  return sum;
}

int64_t formula_sums() { return t_formula_sums; }

bool gradient_taken_over(size_t input, const Shape& shape, DType dtype) {
  const Running* r = t_running;
  if (!r || anomaly_guarded() || input >= r->node->next.size() || !r->node->next[input].valid()) return false;
  Node* child = r->node->next[input].node.get();
  const auto* acc = dynamic_cast<const AccumulateGrad*>(child);
  if (!acc || !acc->takes_over(shape, dtype)) return false;
  const auto d = r->deps->find(child);
  return d != r->deps->end() && d->second == 1 && r->pending->find(child) == r->pending->end();
}

bool wants_gradient_copy(size_t input, DType dtype) {
  const Running* r = t_running;
  if (!r || anomaly_guarded() || input >= r->node->next.size() || !r->node->next[input].valid()) return false;
  Node* child = r->node->next[input].node.get();
  const auto d = r->deps->find(child);
  if (d == r->deps->end() || d->second != 1) return false;  // more gradients will be added to it
  const auto* f = dynamic_cast<const FunctionNode*>(child);
  if (!f) return false;
  for (size_t i = 0; i < f->inputs.size(); ++i)
    if (f->inputs[i].dtype == dtype && i < f->next.size() && f->next[i].valid()) return true;
  return false;
}

void offer_gradient_copy(const Tensor& grad, const Tensor& low) { copies().offer(grad, low); }

Tensor take_gradient_copy(const Tensor& grad, DType dtype) {
  if (copies().empty()) return Tensor();
  Tensor low = copies().find(grad, dtype, /*take=*/true);
  if (low.defined()) ++t_copy_hits;
  return low;
}

int64_t gradient_copy_hits() { return t_copy_hits; }

}  // namespace detail

// Note [Implicit seed]
// loss.backward() starts from a gradient of 1, and filling it is a kernel launch per step: on
// a small network, a launch is a visible part of the step. The seed is therefore kept, per
// thread, device, dtype and shape, and handed out again while nothing else holds it and its
// version is the one it was filled with (a hook that wrote into it in place bumped that).
// Formulas never write their incoming gradient, and a leaf root cannot take it over as its
// .grad because the cache's reference makes it shared (Note [Gradient accumulation]). A CUDA
// graph capture makes its own seed inside the graph (the kept one's memory must not be read
// by replays after it is replaced), and that seed counts as implicit while its backward runs
// (t_capture_seed, cleared when run_backward returns).
// The seed's first consumer is usually the loss scale's product (scaler.scale(loss)), whose
// backward is 1 * scale: mul hands over the other factor itself instead (is_implicit_seed), in
// a captured step too (its multiply was one kernel and one graph node of every replay).
namespace {
struct Seed {
  Tensor t;
  uint32_t version;
};
std::vector<Seed>& seeds() {
  thread_local auto* s = new std::vector<Seed>();  // leaked: device memory outlives static destructors
  return *s;
}

// The seed a backward running under a graph capture made (Note [Implicit seed]).
thread_local Seed t_capture_seed;

Tensor implicit_seed(const Tensor& root) {
  if (graph_capturing(root.device())) {
    Tensor t = ones_like(root);
    t_capture_seed = {t, t.version()};
    return t;
  }
  std::vector<Seed>& list = seeds();
  for (auto it = list.begin(); it != list.end(); ++it) {
    Tensor& t = it->t;
    if (t.device() != root.device() || t.dtype() != root.dtype() || t.shape() != root.shape()) continue;
    if (t.version() == it->version && t.impl_ptr().use_count() == 1 && t.storage().use_count() == 1) return t;
    list.erase(it);  // written, or still held by someone: make a fresh one
    break;
  }
  Tensor t = ones_like(root);
  list.push_back({t, t.version()});
  return t;
}
}  // namespace

bool is_implicit_seed(const Tensor& t) {
  if (!t.defined()) return false;
  if (t_capture_seed.t.defined() && t_capture_seed.t.unsafe_impl() == t.unsafe_impl())
    return t.version() == t_capture_seed.version;
  for (const Seed& s : seeds())
    if (s.t.unsafe_impl() == t.unsafe_impl()) return s.t.version() == s.version;
  return false;
}

void queue_callback(std::function<void()> fn) {
  AG_CHECK(t_callbacks != nullptr, "autograd.queue_callback: no backward is running on this thread");
  t_callbacks->push_back(std::move(fn));
}

void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph) {
  AG_CHECK(root.requires_grad(),
           "backward: the tensor ({}) does not require grad and has no grad_fn; did you forget requires_grad_() on "
           "an input, or run the forward under NoGradGuard?",
           root.desc());
  Tensor g = grad;
  // The seed's own ops are not the forward's (Note [Anomaly detection] in autograd/anomaly.h).
  std::optional<detail::AnomalyQuiet> quiet;
  if (detail::anomaly_guarded()) [[unlikely]] quiet.emplace();
  // A capture's seed counts as implicit until this backward returns (a nested one keeps the
  // outer one's for its return).
  struct CaptureSeedScope {
    Seed outer = t_capture_seed;
    ~CaptureSeedScope() { t_capture_seed = std::move(outer); }
  } capture_seed_scope;
  if (!g.defined()) {
    AG_CHECK(root.numel() == 1,
             "backward: grad can be implicitly created only for scalar outputs, but the output is {}; pass a "
             "gradient of the same shape",
             root.desc());
    g = implicit_seed(root);
  } else {
    AG_CHECK(g.shape() == root.shape(), "backward: gradient {} does not match the output {}", g.desc(),
             root.desc());
    AG_CHECK(g.device() == root.device(), "backward: gradient {} is on another device than the output {}",
             g.desc(), root.desc());
    // Every formula reads its incoming gradient in its output's dtype (FunctionNode::apply
    // keeps that true between nodes); a seed of another dtype is cast here, as PyTorch does.
    if (g.dtype() != root.dtype()) g = g.to(root.dtype());
  }
  NoGradGuard no_grad;  // formulas build no graph of their own (no double backward)
  amp::AutocastSuspend no_autocast;  // nor are they recast
  // The forward's calls go to the device now, while the host works out the backward's (Note
  // [Device hooks] in core/device_hooks.h).
  end_phase(root.device());
  // Work a formula queued beside the device's stream is waited for when the backward ends,
  // however it ends (Note [Weight gradients beside the stream] in cuda/side_stream.h).
  struct JoinSide {
    ~JoinSide() { join_side_work(); }
  } join_side;

  Edge start = gradient_edge(root);
  quiet.reset();
  // Under anomaly detection the forward's checks are read here, and on a device that checks
  // later (not the CPU) the nodes keep their saved tensors until the backward's are read
  // (Note [Anomaly detection] in autograd/anomaly.h). Declared after `start`, which may hold
  // the root's only reference (a leaf's accumulator).
  const bool anomaly = detail::anomaly_guarded() && detail::anomaly_begin_backward(g);
  struct Kept {
    bool anomaly;
    bool keep;
    std::vector<Node*> nodes;
    ~Kept() {
      for (Node* n : nodes) n->release();
      if (anomaly) detail::anomaly_backward_done();
    }
  } kept{anomaly, anomaly && root.device().type != DeviceType::CPU, {}};
  std::unordered_set<Node*> summed;  // anomaly detection: nodes whose gradient is a sum

  // Count, for each node, how many edges lead into it from nodes reachable from the root.
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> stack{start.node.get()};
  deps[start.node.get()] = 0;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next) {
      if (!e.valid()) continue;
      auto [it, inserted] = deps.try_emplace(e.node.get(), 0);
      ++it->second;
      if (inserted) stack.push_back(e.node.get());
    }
  }

  std::vector<std::function<void()>> callbacks;
  auto* outer = t_callbacks;
  t_callbacks = &callbacks;
  struct Restore {
    std::vector<std::function<void()>>* outer;
    ~Restore() {
      t_callbacks = outer;
      if (!outer) copies().clear();  // the outermost backward's offers end with it, however it ends
    }
  } restore{outer};

  std::unordered_map<Node*, Tensor> pending;  // summed incoming gradient per node
  pending[start.node.get()] = g;
  auto later_first = [](Node* a, Node* b) { return a->sequence < b->sequence; };
  std::priority_queue<Node*, std::vector<Node*>, decltype(later_first)> ready(later_first);
  ready.push(start.node.get());
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    auto it = pending.find(n);
    Tensor in = std::move(it->second);
    pending.erase(it);
    // A node all of whose incoming gradients are undefined still passes "nothing" on, so
    // that its children's dependency counts reach zero.
    if (anomaly && in.defined() && summed.erase(n) > 0) [[unlikely]] detail::anomaly_check_sum(*n, in);
    Grads outs;
    Running running{n, &pending, &deps, {}};
    if (in.defined()) {
      Running* outer_running = t_running;
      t_running = &running;
      struct Reset {
        Running* outer;
        ~Reset() { t_running = outer; }
      } reset{outer_running};
      outs = n->apply(in);
    } else {
      outs = Grads(n->next.size());
    }
    for (size_t i = 0; i < outs.size(); ++i) {
      const Edge& e = n->next[i];
      if (!e.valid()) continue;
      Node* child = e.node.get();
      if (outs[i].defined()) {
        // Moved, not copied: a gradient nobody else holds can become a leaf's .grad as is
        // (Note [Gradient accumulation]).
        auto [slot, inserted] = pending.try_emplace(child, std::move(outs[i]));
        if (!inserted) {
          if (slot->second.defined()) {
            // The formula may have added into the sum already (Note [Accumulating formulas]).
            if (!summed_by_formula(running, i, slot->second, outs[i])) child->accumulate_incoming(slot->second, outs[i]);
            if (anomaly) [[unlikely]] summed.insert(child);
          } else {
            slot->second = std::move(outs[i]);
          }
        }
      } else {
        pending.try_emplace(child, Tensor());
      }
      if (--deps[child] == 0) ready.push(child);
    }
    if (retain_graph) continue;
    if (kept.keep) kept.nodes.push_back(n);
    else n->release();
  }
  join_side_work();  // before the callbacks (DistributedDataParallel's) read the gradients
  if (anomaly) detail::anomaly_end_backward();
  t_callbacks = outer;
  for (auto& fn : callbacks) fn();
}

}  // namespace ampgrad::autograd
