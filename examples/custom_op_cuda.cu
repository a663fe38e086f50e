// swish's CUDA kernel for examples/custom_op.cpp: plain CUDA on raw pointers; the .cpp hands it
// the tensors' memory and ampgrad's stream, and registers it as the op's CUDA implementation.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace {
// y = x * sigmoid(beta * x), beta one slope per feature (the innermost dim).
__global__ void swish_forward_kernel(const float* x, const float* beta, float* y, int64_t n, int64_t features) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const float v = x[i];
    y[i] = v / (1.0f + expf(-beta[i % features] * v));
  }
}
}  // namespace

// Queues the kernel on `stream`; returns nullptr, or the launch's error.
const char* swish_forward_launch(const float* x, const float* beta, float* y, int64_t n, int64_t features,
                                 cudaStream_t stream) {
  constexpr int kBlock = 256;
  const int64_t grid = std::min<int64_t>((n + kBlock - 1) / kBlock, 4096);
  swish_forward_kernel<<<static_cast<unsigned>(grid), kBlock, 0, stream>>>(x, beta, y, n, features);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}
