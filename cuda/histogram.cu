// The CUDA kernel of the exponent histograms (Note [Exponent histograms] in
// core/exponent_bins.h): each block counts its share of a tensor in shared memory, then adds its
// counts to the device's int64 row with one atomic per nonzero bin. No host wait, so a histogram
// can be taken inside a captured graph.
#include <ampgrad/core/exponent_bins.h>
#include <ampgrad/core/kernels.h>
#include <ampgrad/cuda/launch.cuh>

namespace ampgrad::cuda {

namespace {

constexpr int kBins = exponent_bins::kBins;

template <class T> __global__ void exponent_histogram_kernel(const T* x, int64_t n, unsigned long long* counts) {
  __shared__ unsigned int local[kBins];
  for (int b = threadIdx.x; b < kBins; b += blockDim.x) local[b] = 0;
  __syncthreads();
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;  // 16-bit values widen exactly
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    atomicAdd(&local[exponent_bins::bin_of(static_cast<A>(x[i]))], 1u);
  __syncthreads();
  for (int b = threadIdx.x; b < kBins; b += blockDim.x)
    if (local[b] != 0) atomicAdd(counts + b, static_cast<unsigned long long>(local[b]));
}

void exponent_histogram(const Tensor& t, const Tensor& counts) {
  if (t.numel() == 0) return;
  KernelContext ctx(t);
  dispatch_floating(t.dtype(), "exponent_histogram", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch(ctx, exponent_histogram_kernel<T>, ctx.grid_stride_blocks(t.numel()), kBlockSize, 0, ptr<const T>(t),
           t.numel(), ptr<unsigned long long>(counts));
  });
}

}  // namespace

AG_REGISTER_KERNEL(kernel::exponent_histogram, kCUDA, exponent_histogram);

}  // namespace ampgrad::cuda
