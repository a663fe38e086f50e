// Host cost of queuing one empty kernel, by launch path: the <<<>>> syntax (cudaLaunchKernel),
// the driver's cuLaunchKernel on the same function (cudaGetFuncBySymbol), cudaLaunchKernelExC,
// and cudaMemsetAsync for scale. Microseconds per call, median of 9 samples of 2000 calls
// (the device keeps up: each kernel is empty). Run it with CUDA_MODULE_LOADING=EAGER and LAZY
// to see whether lazy loading costs anything per launch. Last, whether a launch waits for the
// device: the host time of one launch queued behind a kernel that spins for ~200 us, plain and
// cooperative (Note [One-launch scaled step] in core/fused_kernels.h).
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

__global__ void empty_kernel(int) {}
__global__ void spin_kernel(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

#define CK(x)                                                                   \
  do {                                                                          \
    auto s_ = (x);                                                              \
    if (static_cast<int>(s_) != 0) {                                            \
      std::fprintf(stderr, "%s failed (%d) line %d\n", #x, static_cast<int>(s_), __LINE__); \
      return 1;                                                                 \
    }                                                                           \
  } while (0)

static double per_call_us(cudaStream_t s, const std::function<void()>& fn) {
  std::vector<double> t;
  for (int r = 0; r < 9; ++r) {
    cudaStreamSynchronize(s);
    auto a = std::chrono::steady_clock::now();
    for (int i = 0; i < 2000; ++i) fn();
    auto b = std::chrono::steady_clock::now();
    t.push_back(std::chrono::duration<double, std::micro>(b - a).count() / 2000);
  }
  std::sort(t.begin(), t.end());
  return t[4];
}

int main() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("profile_launch: no CUDA device\n");
    return 0;
  }
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  void* buf;
  CK(cudaMalloc(&buf, 256));
  empty_kernel<<<1, 32, 0, s>>>(0);
  CK(cudaStreamSynchronize(s));
  cudaFunction_t fn;
  CK(cudaGetFuncBySymbol(&fn, reinterpret_cast<const void*>(&empty_kernel)));
  int arg = 0;
  void* args[] = {&arg};
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(1);
  cfg.blockDim = dim3(32);
  cfg.stream = s;
  const char* mode = std::getenv("CUDA_MODULE_LOADING");
  std::printf("profile_launch (CUDA_MODULE_LOADING=%s), us per call:\n", mode ? mode : "(default)");
  std::printf("  <<<>>>                 %.2f\n", per_call_us(s, [&] { empty_kernel<<<1, 32, 0, s>>>(0); }));
  std::printf("  <<<>>> + GetLastError  %.2f\n", per_call_us(s, [&] {
                empty_kernel<<<1, 32, 0, s>>>(0);
                (void)cudaGetLastError();
              }));
  std::printf("  cudaLaunchKernel       %.2f\n", per_call_us(s, [&] {
                (void)cudaLaunchKernel(reinterpret_cast<const void*>(&empty_kernel), dim3(1), dim3(32), args, 0, s);
              }));
  std::printf("  cudaLaunchKernelExC    %.2f\n", per_call_us(s, [&] {
                (void)cudaLaunchKernelExC(&cfg, reinterpret_cast<const void*>(&empty_kernel), args);
              }));
  std::printf("  cuLaunchKernel         %.2f\n", per_call_us(s, [&] {
                (void)cuLaunchKernel(reinterpret_cast<CUfunction>(fn), 1, 1, 1, 32, 1, 1, 0,
                                     reinterpret_cast<CUstream>(s), args, nullptr);
              }));
  std::printf("  cudaMemsetAsync        %.2f\n", per_call_us(s, [&] { (void)cudaMemsetAsync(buf, 0, 256, s); }));
  std::printf("  cudaGetDevice          %.3f\n", per_call_us(s, [&] {
                int d;
                (void)cudaGetDevice(&d);
              }));
  cudaLaunchAttribute coop{};
  coop.id = cudaLaunchAttributeCooperative;
  coop.val.cooperative = 1;
  cudaLaunchConfig_t ccfg = cfg;
  ccfg.attrs = &coop;
  ccfg.numAttrs = 1;
  std::printf("  cudaLaunchKernelExC, cooperative %.2f\n", per_call_us(s, [&] {
                (void)cudaLaunchKernelExC(&ccfg, reinterpret_cast<const void*>(&empty_kernel), args);
              }));
  auto behind_busy = [&](const std::function<void()>& launch) {
    std::vector<double> t;
    for (int r = 0; r < 9; ++r) {
      spin_kernel<<<1, 1, 0, s>>>(400000);
      auto a = std::chrono::steady_clock::now();
      launch();
      auto b = std::chrono::steady_clock::now();
      cudaStreamSynchronize(s);
      t.push_back(std::chrono::duration<double, std::micro>(b - a).count());
    }
    std::sort(t.begin(), t.end());
    return t[4];
  };
  std::printf("  behind a ~200 us kernel: <<<>>> %.2f, cooperative %.2f\n",
              behind_busy([&] { empty_kernel<<<1, 32, 0, s>>>(0); }),
              behind_busy([&] { (void)cudaLaunchKernelExC(&ccfg, reinterpret_cast<const void*>(&empty_kernel), args); }));
  CK(cudaStreamSynchronize(s));
  return 0;
}
