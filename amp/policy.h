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
void trace_push(OpRecord&& rec);
// An op that the policy left uncast for FP8 autocast and that runs in bfloat16 after all (its
// shapes do not fit an FP8 GEMM) casts its inputs with this, as the policy would have.
void cast_inputs(Tensor* const* inputs, size_t n, DType dtype, OpRecord* rec);
}  // namespace detail

}  // namespace ampgrad::amp
