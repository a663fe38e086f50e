// A kernel of the test's own, launched the way ampgrad launches its kernels (cuda::launch in
// cuda/launch.cuh), for test_call_graphs' failed-launch cases.
#include <ampgrad/cuda/launch.cuh>

#include "call_graphs_kernels.h"

namespace {
__global__ void scale_kernel(float* x, int64_t n, float s) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= s;
}
}  // namespace

void launch_scale(const ampgrad::Tensor& x, float s, unsigned threads) {
  namespace cuda = ampgrad::cuda;
  cuda::KernelContext ctx(x);
  const int64_t n = x.numel();
  const unsigned blocks = static_cast<unsigned>((n + threads - 1) / threads);
  cuda::launch(ctx, scale_kernel, dim3(blocks), dim3(threads), 0, cuda::ptr<float>(x), n, s);
}
