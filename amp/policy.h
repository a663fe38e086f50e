// The autocast policy's entry points for OpScope (ops/op_scope.h): internals, not part of
// the umbrella header's API (Note [Autocast] in amp/autocast.h).
#pragma once

#include <optional>

#include <ampgrad/amp/autocast.h>

namespace ampgrad::amp {

namespace detail {
// Whether this op call is the outermost on its thread; the policy runs only for those.
struct OpDepth {
  static inline thread_local int depth = 0;
};
// True while autocast is enabled for some device type or a trace is recording.
bool policy_active();
// Applies the policy to the inputs (replacing them with casts); fills `rec` when tracing.
// Returns the dtype the policy chose (nothing when it did not act).
std::optional<DType> apply_policy(const OpInfo& op, Tensor* const* inputs, size_t n, OpRecord* rec);
bool tracing();
// Note [Ready casts] in amp/autocast.h. The dtype autocast casts a `lower` op's inputs to on
// `device`, when it is enabled there: an fp32 op that can also write its float32 output in it
// for free offers that copy.
std::optional<DType> ready_cast_dtype(Device device);
// `low` is `source` (a float32 output of the op running now) rounded to low's dtype, in
// autograd an output of the same node: autocast hands it out instead of casting `source` while
// both are unchanged. Keeps `low` while `source` lives, never `source`.
void offer_cast(const Tensor& source, const Tensor& low);
void trace_push(OpRecord&& rec);
// An op that the policy left uncast for FP8 autocast and that runs in bfloat16 after all (its
// shapes do not fit an FP8 GEMM) casts its inputs with this, as the policy would have.
void cast_inputs(Tensor* const* inputs, size_t n, DType dtype, OpRecord* rec);
}  // namespace detail

}  // namespace ampgrad::amp
