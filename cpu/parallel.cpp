// The OpenMP team of the fast CPU kernels (Note [CPU threads]).
#include <ampgrad/cpu/parallel.h>

#include <omp.h>

#include <algorithm>

#include <ampgrad/core/dispatch.h>
#include <ampgrad/core/error.h>

namespace ampgrad {

int get_num_threads() { return omp_get_max_threads(); }

bool fast_cpu_kernels() { return detail::fast_cpu; }
void set_fast_cpu_kernels(bool on) { detail::fast_cpu = on; }

void set_num_threads(int n) {
  AG_CHECK(n >= 1, "set_num_threads: expected at least 1 thread, got {}", n);
  omp_set_num_threads(n);
}

namespace cpu::detail {

void parallel_for(int64_t n, int64_t grain, void (*fn)(void*, int64_t, int64_t), void* ctx) {
  const int64_t chunks = std::min<int64_t>(omp_get_max_threads(), std::max<int64_t>(1, n / std::max<int64_t>(grain, 1)));
  if (chunks <= 1 || omp_in_parallel()) {
    fn(ctx, 0, n);
    return;
  }
  // An exception may not leave a parallel region: the first one is kept and rethrown.
  std::exception_ptr error;
#pragma omp parallel num_threads(static_cast<int>(chunks))
  {
    const int64_t t = omp_get_thread_num(), team = omp_get_num_threads();
    const int64_t b = n * t / team, e = n * (t + 1) / team;
    try {
      if (b < e) fn(ctx, b, e);
    } catch (...) {
#pragma omp critical(ampgrad_parallel_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace cpu::detail
}  // namespace ampgrad
