// Cast reuse's speed-ups: parameters' working copies and fused ops' ready casts (Note [Cast speed-ups]).
#include <ampgrad/amp/cast_reuse.h>
#include <ampgrad/ops/internal.h>
#include <ampgrad/speedups/offered_copies.h>
#include <ampgrad/speedups/state.h>
#include <ampgrad/speedups/working_copies.h>

namespace ampgrad::speedups {

// Note [Cast speed-ups]
// The answers to Note [Cast reuse] (amp/cast_reuse.h):
// - Working copies (find, made, copies_to_write, copies_written): a parameter's 16-bit copy is
//   kept after its autocast region ends and the fused optimizer step writes it in the same pass
//   as the parameter, so the next region's cast is no kernel (Note [Working copies] in
//   speedups/working_copies.h, which also says how captured steps keep them current).
// - Ready casts (wants_ready_casts, offer, find): an fp32 op's float32 output is often the next
//   lower op's input: a pre-norm transformer's layer_norm feeds linear, whose input autocast
//   casts to float16, a launch forward and its gradient's cast back a launch backward, per norm.
//   A fused fp32 op whose kernel can write its output in the autocast dtype as well, in the same
//   pass (layer_norm on CUDA), does so and offers that copy: it is a second output of the op's
//   autograd node, so its gradient goes straight into the op's backward (which takes the two
//   outputs' gradients in one kernel) with no cast either way. When a later cast asks for that
//   output, unchanged since (version), in that dtype, it gets the copy. The values are the
//   cast's bit for bit: both round the same float32 result once. The op's output itself stays
//   float32, as PyTorch's; the copy is kept only while the output lives, and costs a write of
//   its bytes when nothing takes it.
// What they buy, measured, is in docs/benchmarks.md ("Speed-ups"); set_working_copies(false)
// and set_ready_casts(false) turn them off.

namespace {

// This thread's ready casts. One lives while its source does (a layer_norm's output: about one
// block of a network), so a few are open at a time.
OfferedCopies& ready() {
  thread_local OfferedCopies offers(16);
  return offers;
}

class FastCasts final : public amp::CastReuse {
 public:
  Tensor find(const Tensor& t, DType dtype) override {
    if (!ready().empty()) {
      if (Tensor r = ready().find(t, dtype); r.defined()) {
        ++detail::thread_stats().ready_cast_hits;
        return r;
      }
    }
    if (!t.is_leaf() || !t.requires_grad() || t.dtype() != DType::Float32) return Tensor();
    Tensor kept = detail::current_working_copy(t, dtype);
    if (!kept.defined()) return Tensor();
    ++detail::thread_stats().working_copy_hits;
    return to_reusing(t, kept);
  }

  void made(const Tensor& t, const Tensor& cast) override { detail::keep_working_copy(t, cast.detach()); }

  bool wants_ready_casts(Device, DType dtype) override {
    return detail::switches().ready_casts && is_reduced_float(dtype);
  }

  void offer(const Tensor& source, const Tensor& low) override { ready().offer(source, low); }

  std::vector<Tensor> copies_to_write(const std::vector<Tensor>& params) override {
    return detail::current_working_copies(params);
  }

  void copies_written(const std::vector<Tensor>& params, const std::vector<Tensor>& copies) override {
    detail::working_copies_written(params, copies);
  }
};

struct Register {
  Register() { amp::set_cast_reuse(new FastCasts());  /* leaked: casts may run in static destructors */ }
};
const Register register_casts;

}  // namespace

}  // namespace ampgrad::speedups
