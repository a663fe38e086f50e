// FP8 autocast's GEMMs (Note [FP8 autocast] in amp/autocast.h): linear, mm, matmul, addmm and
// bmm call these when OpScope::autocast_dtype() is a float8 dtype. Internal to ops/.
#pragma once

#include <ampgrad/core/tensor.h>
#include <ampgrad/ops/op.h>
#include <ampgrad/ops/op_scope.h>

namespace ampgrad {

// x @ w^T + b as FP8 GEMMs, forward and backward, when the shapes allow: returns the bfloat16
// output. Otherwise casts x, w and b to bfloat16 (scope.cast_inputs; the trace says why) and
// returns an undefined tensor: the caller then runs its usual path. w [N, K]; x [..., K].
// relu: relu(x @ w^T + b) as one node (linear_relu, Note [FP8 linear_relu]).
Tensor fp8_linear(OpScope& scope, const OpInfo& op, Tensor& x, Tensor& w, Tensor& b, bool relu = false);
// a @ b for 2-D b (a [..., K], b [K, N]), as fp8_linear with w = b^T: the gradient of b comes
// out of its own GEMM, [K, N] and contiguous. Falls back as fp8_linear.
Tensor fp8_mm(OpScope& scope, const OpInfo& op, Tensor& a, Tensor& b);
// a [B, M, K] @ b [B, K, N] as batched FP8 GEMMs, forward and backward (Note [Batched FP8
// GEMMs]); returns the bfloat16 [B, M, N] output, or falls back as fp8_linear.
Tensor fp8_bmm(OpScope& scope, const OpInfo& op, Tensor& a, Tensor& b);

}  // namespace ampgrad
