// Optional OpenBLAS for the CPU matmul: found at run time, so nothing links against it.
#pragma once

#include <cstdint>

namespace ampgrad::cpu {

// Note [CPU BLAS]
// The CPU path carries the main job on machines without a GPU, and a plain triple loop
// reaches a few GFLOP/s. When Debian's libopenblas is installed, sgemm/dgemm come from it
// (~170 GFLOP/s a core here); it is opened with dlopen on first use, so the library and the
// binaries carried to other machines never require it. 16-bit inputs are widened to float32
// and accumulate in float32, as everywhere in ampgrad. AMPGRAD_NO_BLAS=1 in the environment
// (read once, at the first GEMM) leaves OpenBLAS unopened: the reference GEMM then runs its
// loop, and the fast one oneDNN's matmul.
// The fast CPU GEMM (cpu/gemm.cpp) calls sgemm too, on strided operands without copies: on
// this machine OpenBLAS's float32 kernels run at ~170 GFLOP/s a core against oneDNN 2.6's
// ~105 at the MLP's sizes. OpenBLAS is kept to one thread of its own (openblas_set_num_threads
// (1); not for an OpenMP build of OpenBLAS, which would shrink the whole team and runs on one
// thread inside the team's regions anyway): its pool and the OpenMP team would fight over the
// cores; callers split a product into blocks on the team instead (Note [CPU threads]).
bool blas_available();
// Row-major C[m, n] = alpha * op(A) @ op(B) + beta * C with leading dimensions as BLAS takes them.
void blas_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void blas_dgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
                int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

}  // namespace ampgrad::cpu
