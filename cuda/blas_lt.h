// cuBLASLt for FP8, 16-bit and float32 GEMMs: cached descriptors and algorithm per geometry
// (Note [cuBLASLt GEMM] in cuda/blas_lt.cpp). Internal to cuda/matmul.cpp.
#pragma once

#include <cublas_v2.h>

#include <cstddef>
#include <cstdint>

#include <ampgrad/core/dtype.h>

namespace ampgrad::cuda {

// The workspace the library stream's GEMMs get: cuBLAS asks for 32 MiB on Hopper; with less it
// may pick slower split-k kernels. Plans are made for it.
constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;

// Column-major D = alpha * op(A) op(B) + beta * C with C == D, strided batches: cuBLAS's
// cublasGemmStridedBatchedEx arguments. A is m x k after op, B k x n, C m x n.
struct LtGemm {
  int device = 0;
  DType dtype = DType::Float32;  // A's and B's
  DType out_dtype = DType::Float32;  // C's and D's: dtype, or float32 for 16-bit A and B
  bool tf32 = false;
  cublasOperation_t op_a = CUBLAS_OP_N, op_b = CUBLAS_OP_N;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0, stride_a = 0;
  const void* b = nullptr;
  int64_t ldb = 0, stride_b = 0;
  void* c = nullptr;
  int64_t ldc = 0, stride_c = 0;
  int64_t batch = 1;
  float alpha = 1, beta = 0;
  // When set: D = alpha * op(A) op(B) + bias[row], a vector of m elements of the GEMM's
  // out_dtype (cuBLASLt's EPILOGUE_BIAS; batch 1, beta 0).
  const void* bias = nullptr;
  // When set: also bias_grad[col] = sum over k of op(B)[k, col], n elements of out_dtype
  // (cuBLASLt's EPILOGUE_BGRADB: linear's bias gradient from its weight-gradient GEMM; batch 1,
  // beta 0, no bias).
  void* bias_grad = nullptr;
  // When set: D = max(alpha * op(A) op(B) [+ bias[row]], 0) (EPILOGUE_RELU / RELU_BIAS: linear
  // followed by relu, ops/linear.cpp; batch 1, beta 0, no bias_grad).
  bool relu = false;
  // When set: D = gelu_tanh(alpha * op(A) op(B) [+ bias[row]]), and, with aux, aux (m x n,
  // leading dimension ldc, out_dtype) = what gelu was applied to (EPILOGUE_GELU[_AUX][_BIAS]:
  // linear followed by gelu(approximate="tanh"), linear_gelu; batch 1, beta 0, no bias_grad).
  bool gelu = false;
  void* aux = nullptr;
  // FP8 (Note [FP8 GEMM] in cuda/blas_lt.cpp): dtype is A's, b_dtype B's (float8_e4m3fn or
  // float8_e5m2, not both e5m2); a_scale and b_scale dequantize them (D = a_scale * b_scale *
  // op(A) op(B) [+ bias]); d_scale quantizes a float8 D; amax_d receives max |D| before
  // d_scale. Each a float on the device. op_a T and op_b N (Hopper's FP8 layout).
  DType b_dtype = DType::Float32;
  const float* a_scale = nullptr;
  const float* b_scale = nullptr;
  const float* d_scale = nullptr;
  float* amax_d = nullptr;
  bool fast_accum = false;
};

// Runs the GEMM on the device's library stream; false when cuBLASLt
// proposes no algorithm (the caller then takes cublasGemmStridedBatchedEx).
bool lt_gemm(const LtGemm& g, void* workspace, size_t workspace_bytes);

}  // namespace ampgrad::cuda
