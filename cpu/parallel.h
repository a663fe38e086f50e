// Threads of the fast CPU kernels (Note [CPU threads]).
#pragma once

#include <cstdint>
#include <utility>

namespace ampgrad {

// Note [CPU threads]
// The fast CPU kernels (Note [Fast CPU kernels] in core/dispatch.h) run on one OpenMP team, the
// same one oneDNN uses, so the two never oversubscribe the cores. The team has
// get_num_threads() threads: the machine's logical CPUs by default (omp_get_max_threads), OMP_NUM_THREADS when it is set,
// set_num_threads(n) (PyTorch's torch.set_num_threads) at run time. Work is cut into one
// contiguous chunk per thread by its index alone, and every sum a kernel forms is formed in
// one thread in a fixed order, so results do not depend on timing, and, for the kernels of
// cpu/ that reduce within one thread's chunk, not even on the number of threads.
int get_num_threads();
void set_num_threads(int n);

// Whether CPU kernels run their fast implementations (Note [Fast CPU kernels] in
// core/dispatch.h; on by default, off with AMPGRAD_CPU_REFERENCE=1): off, every CPU kernel
// runs its plain reference loop (PyTorch's torch.backends.mkldnn.enabled, for all of them).
// One switch for the process: change it while no op runs.
bool fast_cpu_kernels();
void set_fast_cpu_kernels(bool on);

namespace cpu {

namespace detail {
void parallel_for(int64_t n, int64_t grain, void (*fn)(void*, int64_t, int64_t), void* ctx);
}

// Calls f(begin, end) on the chunks of [0, n), each at least `grain` long (serially when n is
// small or when called from inside a parallel region).
template <class F> void parallel_for(int64_t n, int64_t grain, F&& f) {
  if (n <= 0) return;
  detail::parallel_for(
      n, grain, [](void* ctx, int64_t b, int64_t e) { (*static_cast<std::remove_reference_t<F>*>(ctx))(b, e); },
      const_cast<void*>(static_cast<const void*>(&f)));
}

}  // namespace cpu
}  // namespace ampgrad
