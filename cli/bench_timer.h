// Timing for benchmarks: CUDA events on the library stream for CUDA work, a steady clock on
// the CPU; warm-ups first, then the median of many samples.
//
// A sample times `calls` back-to-back calls and reports their mean: with calls = 1 the host
// time of queuing the one call (its launch latency) is part of the sample, with several the
// device runs them back to back as in a network, and the sample measures the device's
// throughput. The single-op benchmarks (matmul, conv, bandwidth) use 10 calls per sample for
// ampgrad, raw cuBLAS and PyTorch alike (benchmarks/compare_torch.py); training steps use 1.
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

// Calls per sample of the single-op benchmarks (see above).
inline constexpr int kOpCalls = 10;

inline double median_ms(Device dev, const std::function<void()>& fn, int warmup = 5, int reps = 30,
                        int calls = 1) {
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
      for (int c = 0; c < calls; ++c) fn();
      AG_CUDA_CHECK(cudaEventRecord(b, s));
      AG_CUDA_CHECK(cudaEventSynchronize(b));
      float t = 0;
      AG_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
      ms.push_back(static_cast<double>(t) / calls);
    }
    AG_CUDA_CHECK(cudaEventDestroy(a));
    AG_CUDA_CHECK(cudaEventDestroy(b));
  }
#endif
  if (dev.is_cpu()) {
    for (int i = 0; i < reps; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      for (int c = 0; c < calls; ++c) fn();
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / calls);
    }
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace ampgrad::cli
