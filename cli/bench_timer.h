// Timing for benchmarks: CUDA events on the library stream for CUDA work, a steady clock on
// the CPU; warm-ups first, then the median of many runs.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

#include "core/device.h"
#include "cuda/runtime.h"
#if AMPGRAD_WITH_CUDA
#include <cuda_runtime_api.h>

#include "cuda/check.h"
#endif

namespace ampgrad::cli {

inline double median_ms(Device dev, const std::function<void()>& fn, int warmup = 5, int reps = 30) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> ms;
#if AMPGRAD_WITH_CUDA
  if (dev.is_cuda()) {
    cudaStream_t s = cuda::current_stream(dev.index);
    cudaEvent_t a, b;
    AG_CUDA_CHECK(cudaEventCreate(&a));
    AG_CUDA_CHECK(cudaEventCreate(&b));
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
  }
#endif
  if (dev.is_cpu()) {
    for (int i = 0; i < reps; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      fn();
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace ampgrad::cli
