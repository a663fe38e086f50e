// The CUDA kernel of anomaly detection (Note [Anomaly detection] in autograd/anomaly.h): counts a
// tensor's NaN and inf values into the device's flags, once per checked op, with no host wait.
#include <ampgrad/core/kernels.h>
#include <ampgrad/cuda/launch.cuh>

namespace ampgrad::cuda {

namespace {

// flags = {check, NaN count, inf count}. The checks of one thread run in stream order, so an
// earlier check has finished before a later one starts: once one claimed the flags, later
// ones return at once, and only the claimant's threads add their counts.
template <class T>
__global__ void anomaly_check_kernel(const T* x, int64_t n, unsigned long long* flags, int64_t check) {
  const unsigned long long claimed = *static_cast<volatile unsigned long long*>(flags);
  if (claimed != 0 && claimed != static_cast<unsigned long long>(check)) return;
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  unsigned long long nan = 0, inf = 0;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const A v = static_cast<A>(x[i]);
    nan += isnan(v);
    inf += isinf(v);
  }
  if (nan + inf == 0) return;
  const unsigned long long prev = atomicCAS(flags, 0ull, static_cast<unsigned long long>(check));
  if (prev != 0 && prev != static_cast<unsigned long long>(check)) return;
  atomicAdd(flags + 1, nan);
  atomicAdd(flags + 2, inf);
}

void anomaly_check(const Tensor& t, const Tensor& flags, int64_t check) {
  if (t.numel() == 0) return;
  KernelContext ctx(t);
  dispatch_floating(t.dtype(), "anomaly_check", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch(ctx, anomaly_check_kernel<T>, ctx.grid_stride_blocks(t.numel()), kBlockSize, 0, ptr<const T>(t),
           t.numel(), ptr<unsigned long long>(flags), check);
  });
}

}  // namespace

AG_REGISTER_KERNEL(kernel::anomaly_check, kCUDA, anomaly_check);

}  // namespace ampgrad::cuda
