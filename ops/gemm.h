// The GEMM helpers the matrix products share (ops/matmul.cpp defines them; ops/linear.cpp
// uses them too). Internal to ops/.
#pragma once

#include <ampgrad/core/tensor.h>
#include <ampgrad/ops/op.h>

namespace ampgrad {

// Same device, same floating dtype; the error names `op`.
void check_matmul_dtypes(const OpInfo& op, const Tensor& a, const Tensor& b);
// out[B, M, N] = alpha * a[B, M, K] @ b[B, K, N] + beta * c3 (batch strides may be 0), into
// `out` (contiguous [B, M, N]) when given, else a new tensor.
Tensor batched_gemm(const Tensor& a3, const Tensor& b3, const Tensor& c3 = Tensor(), double alpha = 1,
                    double beta = 0, Tensor out = Tensor());
// A [1, rows, cols] alias of a 2-D tensor, without the op machinery of unsqueeze (no
// dispatch, no autograd): the matrix products call this on every operand (Note [GEMM views]).
Tensor batch1(const Tensor& t);
// The transpose of a 2-D tensor as a plain alias (Note [GEMM views]).
Tensor transposed(const Tensor& t);
// a[M, K] @ b[K, N] (+ bias_row, a [1, M, N] broadcast row) into a new [M, N] tensor.
Tensor gemm2d(const Tensor& a, const Tensor& b, const Tensor& bias_row = Tensor());

}  // namespace ampgrad
