// Benchmark helpers: CUDA-event timing with warm-ups and medians, on ampgrad's stream.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "cuda/check.h"
#include "cuda/runtime.h"

namespace ampgrad::bench {

// Median milliseconds of `fn` over `reps` timed runs after `warmup` untimed ones. Each run
// is bracketed by events on the library stream, so only device time between them counts.
inline double median_ms(const std::function<void()>& fn, int warmup = 5, int reps = 30) {
  cudaStream_t s = cuda::current_stream();
  for (int i = 0; i < warmup; ++i) fn();
  cudaEvent_t a, b;
  AG_CUDA_CHECK(cudaEventCreate(&a));
  AG_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    AG_CUDA_CHECK(cudaEventRecord(a, s));
    fn();
    AG_CUDA_CHECK(cudaEventRecord(b, s));
    AG_CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    AG_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  AG_CUDA_CHECK(cudaEventDestroy(a));
  AG_CUDA_CHECK(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace ampgrad::bench
