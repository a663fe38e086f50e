// Timing for benchmarks: CUDA events on the library stream for CUDA work, a steady clock on
// the CPU; warm-ups first, then the median of many samples.
//
// A sample times `calls` back-to-back calls and reports their mean: with calls = 1 the host
// time of queuing the one call (its launch latency) is part of the sample, with several the
// device runs them back to back as in a network, and the sample measures the device's
// throughput. The single-op benchmarks (matmul, conv, bandwidth) use 10 calls per sample for
// ampgrad, raw cuBLAS and PyTorch alike (benchmarks/compare_torch.py); training steps use 10
// (ms/step) and 1 (one step). time_interleaved also reports the host's time to queue a call.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

#include <ampgrad/core/device.h>
#include <ampgrad/cuda/runtime.h>
#if AMPGRAD_WITH_CUDA
#include <cuda_runtime_api.h>

#include <ampgrad/cuda/check.h>
#endif

namespace ampgrad::cli {

// Calls per sample of the single-op benchmarks (see above).
inline constexpr int kOpCalls = 10;

// Note [Interleaved samples]
// The machine that runs the benchmarks is shared, and a host-bound case (a small network's
// eager step, a 1024 GEMM) runs as fast as the host queues launches: its speed drifts by
// 10-30 % over seconds as other tenants come and go. Timed one after the other, two
// variants of a case (fp32 and AMP) can each land in a fast or a slow stretch, and their
// medians then compare the host's moods rather than the code. median_ms_interleaved takes
// sample r of every variant in turn (starting with a different variant each round), so
// drift slows all of them alike and their medians compare like with like.
// Medians per variant: ms, the time per call (CUDA events, or the clock on the CPU), and
// host_ms, the host's time to queue one call (the clock around the calls, before waiting for
// the device). A call whose host_ms is at its ms is host-bound: the device waits for the host.
struct Timings {
  std::vector<double> ms, host_ms;
};

inline Timings time_interleaved(Device dev, const std::vector<std::function<void()>>& fns, int warmup = 5,
                                int reps = 30, int calls = 1) {
  const size_t n = fns.size();
  for (const auto& fn : fns)
    for (int i = 0; i < warmup; ++i) fn();
  std::vector<std::vector<double>> ms(n), host(n);
  auto since = [](std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
#if AMPGRAD_WITH_CUDA
  if (dev.is_cuda()) {
    // The stream is taken before every event: current_stream() submits the calls held back
    // (Note [Launch batches] in cuda/call_graph.h), which belong to the sample before it.
    auto stream = [&] { return cuda::current_stream(dev.index); };
    cudaEvent_t a, b;
    AG_CUDA_CHECK(cudaEventCreate(&a));
    AG_CUDA_CHECK(cudaEventCreate(&b));
    AG_CUDA_CHECK(cudaStreamSynchronize(stream()));  // warm-up work must not leak into the first sample
    for (int r = 0; r < reps; ++r) {
      for (size_t j = 0; j < n; ++j) {
        const size_t v = (static_cast<size_t>(r) + j) % n;
        AG_CUDA_CHECK(cudaEventRecord(a, stream()));
        const auto t0 = std::chrono::steady_clock::now();
        for (int c = 0; c < calls; ++c) fns[v]();
        cudaStream_t s = stream();  // submits the sample's held calls: part of its host time
        host[v].push_back(since(t0) / calls);
        AG_CUDA_CHECK(cudaEventRecord(b, s));
        AG_CUDA_CHECK(cudaEventSynchronize(b));
        float t = 0;
        AG_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
        ms[v].push_back(static_cast<double>(t) / calls);
      }
    }
    AG_CUDA_CHECK(cudaEventDestroy(a));
    AG_CUDA_CHECK(cudaEventDestroy(b));
  }
#endif
  if (dev.is_cpu()) {
    for (int r = 0; r < reps; ++r) {
      for (size_t j = 0; j < n; ++j) {
        const size_t v = (static_cast<size_t>(r) + j) % n;
        const auto t0 = std::chrono::steady_clock::now();
        for (int c = 0; c < calls; ++c) fns[v]();
        ms[v].push_back(since(t0) / calls);
        host[v].push_back(ms[v].back());
      }
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  Timings out;
  for (size_t v = 0; v < n; ++v) {
    out.ms.push_back(median(ms[v]));
    out.host_ms.push_back(median(host[v]));
  }
  return out;
}

inline std::vector<double> median_ms_interleaved(Device dev, const std::vector<std::function<void()>>& fns,
                                                 int warmup = 5, int reps = 30, int calls = 1) {
  return time_interleaved(dev, fns, warmup, reps, calls).ms;
}

inline double median_ms(Device dev, const std::function<void()>& fn, int warmup = 5, int reps = 30, int calls = 1) {
  return median_ms_interleaved(dev, {fn}, warmup, reps, calls)[0];
}

}  // namespace ampgrad::cli
