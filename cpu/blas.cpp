// dlopen of OpenBLAS's cblas_sgemm/cblas_dgemm and its thread count (Note [CPU BLAS]).
#include <ampgrad/cpu/blas.h>

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include <ampgrad/core/error.h>
#include <ampgrad/cpu/parallel.h>

namespace ampgrad::cpu {

namespace {
// The CBLAS enums, as cblas.h defines them.
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;
using SgemmFn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*, int);
using DgemmFn = void (*)(int, int, int, int, int, int, double, const double*, int, const double*, int, double, double*,
                         int);
using ThreadsFn = void (*)(int);
struct Blas {
  SgemmFn sgemm = nullptr;
  DgemmFn dgemm = nullptr;
  ThreadsFn set_threads = nullptr;
};

const Blas& blas() {
  static Blas b;
  static std::once_flag once;
  std::call_once(once, [] {
    const char* off = std::getenv("AMPGRAD_NO_BLAS");
    if (off && off[0] == '1') return;
    for (const char* name : {"libopenblas.so.0", "libopenblas.so", "libcblas.so.3"}) {
      void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (!h) continue;
      b.sgemm = reinterpret_cast<SgemmFn>(dlsym(h, "cblas_sgemm"));
      b.dgemm = reinterpret_cast<DgemmFn>(dlsym(h, "cblas_dgemm"));
      b.set_threads = reinterpret_cast<ThreadsFn>(dlsym(h, "openblas_set_num_threads"));
      if (b.sgemm && b.dgemm) {
        // One thread of its own: the callers split the work (cpu/gemm.cpp). Not for an OpenMP
        // build of OpenBLAS (openblas_get_parallel() == 2), whose openblas_set_num_threads would
        // shrink the whole team; it runs single-threaded inside the team's regions anyway.
        using ParallelFn = int (*)();
        auto parallel = reinterpret_cast<ParallelFn>(dlsym(h, "openblas_get_parallel"));
        if (b.set_threads && !(parallel && parallel() == 2)) b.set_threads(1);
        return;
      }
      b = Blas{};
    }
  });
  return b;
}
}  // namespace

bool blas_available() { return blas().sgemm != nullptr; }



void blas_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  AG_INTERNAL_ASSERT(blas_available(), "blas_sgemm without BLAS");
  blas().sgemm(kRowMajor, ta ? kTrans : kNoTrans, tb ? kTrans : kNoTrans, static_cast<int>(m), static_cast<int>(n),
               static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta, c,
               static_cast<int>(ldc));
}

void blas_dgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
                const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  AG_INTERNAL_ASSERT(blas_available(), "blas_dgemm without BLAS");
  blas().dgemm(kRowMajor, ta ? kTrans : kNoTrans, tb ? kTrans : kNoTrans, static_cast<int>(m), static_cast<int>(n),
               static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta, c,
               static_cast<int>(ldc));
}

}  // namespace ampgrad::cpu
