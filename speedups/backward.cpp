// The backward context's speed-ups: running sums, gradient roundings, a kept seed (Note [Backward speed-ups]).
#include <ampgrad/autograd/anomaly.h>
#include <ampgrad/autograd/backward_context.h>
#include <ampgrad/autograd/node.h>
#include <ampgrad/core/device_hooks.h>
#include <ampgrad/ops/ops.h>
#include <ampgrad/speedups/offered_copies.h>
#include <ampgrad/speedups/state.h>

namespace ampgrad::speedups {

// Note [Backward speed-ups]
// The answers to the questions of Note [Backward context] (autograd/backward_context.h):
// - Running sums (take_sum). A pre-norm transformer's residual stream x feeds both the residual
//   add and the next sublayer's layer norm, so its gradient is a sum: the add's (passed on as it
//   came) arrives first, then the engine adds layer_norm's input gradient into it, a kernel that
//   reads and writes the stream again (the small GPT: 8 a step, 4 MB each). layer_norm's
//   backward kernel writes that gradient anyway, so it adds it into the sum instead. take_sum
//   hands the formula the sum where the engine could have added in place (it alone holds it,
//   Note [Summing incoming gradients] in autograd/node.cpp), contiguous and of the gradient's
//   shape and dtype, and takes it out of the engine's hands: the formula returns it, and the
//   engine finds nothing to add it to. The bits are the engine's add (sum + g, rounded once;
//   the kernels add without contraction).
// - Gradient roundings (wants_rounded, offer_rounded, to_dtype). The node below is often the
//   residual add of float32 and float16 (Note [Widening arithmetic] in ops/binary.cpp), whose
//   float16 input's gradient is the float32 sum rounded: a cast kernel more. Where the
//   formula's gradient is the last to reach that node (its sum is final) and the node has an
//   input of that dtype, the formula writes the rounding in the same pass and offers it; the
//   engine's cast takes it while both are unchanged (the same tensors, the same versions).
//   Where nothing takes it, it cost a write.
// - The seed (make_seed, is_seed). loss.backward() starts from ones: a fill launch a step. The
//   seed is kept per thread, device, dtype and shape, and handed out again while nothing else
//   holds it and its version is the one it was filled with (a hook that wrote into it bumped
//   that). Its first consumer is usually the loss scale's product, whose backward is 1 * scale:
//   mul then hands over the scale itself (is_seed), a launch and a graph node less. A capture
//   makes its seed inside the graph: the kept one's memory is not the graph's.
// - When backward starts, the forward's held launches go to the device (end_phase: Note [Launch
//   batches] in cuda/call_graph.h), while the host works out the backward's.
// None of it runs under anomaly detection, which checks each formula's gradients and each sum
// apart. What they buy, measured on the small GPT's AMP step, is in docs/benchmarks.md
// ("Speed-ups"); set_backward_speedups(false) turns them off.

namespace {

struct Seed {
  Tensor t;
  uint32_t version;
};
std::vector<Seed>& kept_seeds() {
  thread_local auto* s = new std::vector<Seed>();  // leaked: device memory outlives static destructors
  return *s;
}

class FastBackwardContext final : public autograd::BackwardContext {
 public:
  explicit FastBackwardContext(autograd::GraphTask& task) : task_(task) {}

  Tensor take_sum(size_t input, const Shape& shape, DType dtype) override {
    autograd::Node* below = node_below(input);
    if (below == nullptr) return Tensor();
    const auto it = task_.pending.find(below);
    if (it == task_.pending.end() || !it->second.defined()) return Tensor();
    Tensor& sum = it->second;
    if (sum.dtype() != dtype || !sum.is_contiguous() || sum.storage_offset() != 0 ||
        !below->sum_takes_in_place(sum, shape, sum.device(), dtype))
      return Tensor();
    ++detail::thread_stats().running_sums;
    return std::exchange(sum, Tensor());
  }

  bool wants_rounded(size_t input, DType dtype) override {
    autograd::Node* below = node_below(input);
    if (below == nullptr) return false;
    const auto waiting = task_.waiting.find(below);
    if (waiting == task_.waiting.end() || waiting->second != 1) return false;  // more will be added to it
    const auto* f = dynamic_cast<const autograd::FunctionNode*>(below);
    if (f == nullptr) return false;
    for (size_t i = 0; i < f->inputs.size(); ++i)
      if (f->inputs[i].dtype == dtype && i < f->next.size() && f->next[i].valid()) return true;
    return false;
  }

  void offer_rounded(const Tensor& grad, const Tensor& rounded) override { roundings_.offer(grad, rounded); }

  Tensor to_dtype(const Tensor& grad, DType dtype) override {
    if (!roundings_.empty()) {
      if (Tensor r = roundings_.find(grad, dtype, /*take=*/true); r.defined()) {
        ++detail::thread_stats().roundings_taken;
        return r;
      }
    }
    return grad.to(dtype);
  }

  Tensor make_seed(const Tensor& root) override {
    Tensor t;
    if (!graph_capturing(root.device())) t = kept_seed(root);
    if (!t.defined()) t = ones_like(root);
    seed_ = t.unsafe_impl();
    seed_version_ = t.version();
    return t;
  }

  bool is_seed(const Tensor& g) const override {
    return seed_ != nullptr && g.unsafe_impl() == seed_ && g.version() == seed_version_;
  }

 private:
  // The node at input i of the node whose formula runs, or null.
  autograd::Node* node_below(size_t input) const {
    const autograd::Node* n = task_.running;
    return n != nullptr && input < n->next.size() ? n->next[input].node.get() : nullptr;
  }

  // A kept seed like `root`, or a new one kept for next time (undefined: none can be kept).
  static Tensor kept_seed(const Tensor& root) {
    std::vector<Seed>& list = kept_seeds();
    for (auto it = list.begin(); it != list.end(); ++it) {
      const Tensor& t = it->t;
      if (t.device() != root.device() || t.dtype() != root.dtype() || t.shape() != root.shape()) continue;
      if (t.version() == it->version && t.impl_ptr().use_count() == 1 && t.storage().use_count() == 1) {
        ++detail::thread_stats().seeds_reused;
        return t;
      }
      list.erase(it);  // written, or still held by someone: make a fresh one
      break;
    }
    Tensor t = ones_like(root);
    list.push_back({t, t.version()});
    return t;
  }

  autograd::GraphTask& task_;
  OfferedCopies roundings_{16};
  const TensorImpl* seed_ = nullptr;  // alive while the backward runs: the engine holds it
  uint32_t seed_version_ = 0;
};

std::unique_ptr<autograd::BackwardContext> make_context(autograd::GraphTask& task, const Tensor& root) {
  end_phase(root.device());
  if (!detail::switches().backward || autograd::detail::anomaly_guarded()) return nullptr;
  return std::make_unique<FastBackwardContext>(task);
}

struct Register {
  Register() { autograd::set_backward_context_factory(&make_context); }
};
const Register register_backward;

}  // namespace

}  // namespace ampgrad::speedups
