// Host cost of queuing one empty kernel, by launch path: the <<<>>> syntax (cudaLaunchKernel),
// the driver's cuLaunchKernel on the same function (cudaGetFuncBySymbol), cudaLaunchKernelExC,
// and cudaMemsetAsync for scale. Microseconds per call, median of 9 samples of 2000 calls
// (the device keeps up: each kernel is empty). Run it with CUDA_MODULE_LOADING=EAGER and LAZY
// to see whether lazy loading costs anything per launch. Last, whether a launch waits for the
// device: the host time of one launch queued behind a kernel that spins for ~200 us, plain and
// cooperative (Note [One-launch scaled step] in core/fused_kernels.h). And what a one-node CUDA
// graph of the same kernel costs to launch (Note [Kernel graphs] in cuda/launch.cuh): host
// time per call, and device time per kernel when each kernel spins ~6 us (device-bound),
// launched directly and as graphs.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

__global__ void empty_kernel(int) {}
// As large as the strided elementwise kernels' arguments (Geometry<3>: 232 bytes).
struct BigArgs {
  long long w[32];
};
__global__ void big_args_kernel(BigArgs) {}
// A memory-bound elementwise kernel of many blocks (as the CNN's batch norm and ReLU), and the
// same with a 2 KB argument (as the fused optimizer's tensor lists).
__global__ void scale_kernel(const float* x, float* y, long long n) {
  for (long long i = blockIdx.x * 256LL + threadIdx.x; i < n; i += 256LL * gridDim.x) y[i] = 2.0f * x[i];
}
struct HugeArgs {
  long long w[256];
};
__global__ void scale_huge_kernel(const float* x, float* y, long long n, HugeArgs) {
  for (long long i = blockIdx.x * 256LL + threadIdx.x; i < n; i += 256LL * gridDim.x) y[i] = 2.0f * x[i];
}
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

// A graph of one kernel node, instantiated: false if anything fails.
static bool one_node_graph(const void* func, void** kargs, dim3 grid, dim3 block, cudaGraphExec_t* exec) {
  cudaGraph_t g;
  if (cudaGraphCreate(&g, 0) != cudaSuccess) return false;
  cudaKernelNodeParams p{};
  p.func = const_cast<void*>(func);
  p.gridDim = grid;
  p.blockDim = block;
  p.kernelParams = kargs;
  cudaGraphNode_t node;
  const bool ok = cudaGraphAddKernelNode(&node, g, nullptr, 0, &p) == cudaSuccess &&
                  cudaGraphInstantiateWithFlags(exec, g, 0) == cudaSuccess;
  cudaGraphDestroy(g);
  return ok;
}

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
  // One-node graphs of the same kernels.
  auto one_node = [](const void* func, void** kargs, cudaGraphExec_t* exec) {
    return one_node_graph(func, kargs, dim3(1), dim3(32), exec);
  };
  BigArgs big{};
  void* big_args[] = {&big};
  cudaGraphExec_t g_empty, g_big;
  if (!one_node(reinterpret_cast<const void*>(&empty_kernel), args, &g_empty) ||
      !one_node(reinterpret_cast<const void*>(&big_args_kernel), big_args, &g_big)) {
    std::fprintf(stderr, "graph build failed\n");
    return 1;
  }
  std::printf("  <<<>>> 256-byte args   %.2f\n", per_call_us(s, [&] { big_args_kernel<<<1, 32, 0, s>>>(big); }));
  std::printf("  graph, empty kernel    %.2f\n", per_call_us(s, [&] { (void)cudaGraphLaunch(g_empty, s); }));
  std::printf("  graph, 256-byte args   %.2f\n", per_call_us(s, [&] { (void)cudaGraphLaunch(g_big, s); }));
  {  // One exec per kernel, its arguments set before each launch (instead of one per argument list).
    cudaGraph_t g;
    CK(cudaGraphCreate(&g, 0));
    cudaKernelNodeParams p{};
    p.func = reinterpret_cast<void*>(&big_args_kernel);
    p.gridDim = dim3(1);
    p.blockDim = dim3(32);
    p.kernelParams = big_args;
    cudaGraphNode_t node;
    CK(cudaGraphAddKernelNode(&node, g, nullptr, 0, &p));
    cudaGraphExec_t exec;
    CK(cudaGraphInstantiateWithFlags(&exec, g, 0));
    std::printf("  graph + SetParams      %.2f\n", per_call_us(s, [&] {
                  (void)cudaGraphExecKernelNodeSetParams(exec, node, &p);
                  (void)cudaGraphLaunch(exec, s);
                }));
  }
  // Device-bound: kernels of ~6 us back to back, directly and as one-node graphs.
  cudaGraphExec_t g_spin;
  long long cycles = 12000;  // ~6 us at ~2 GHz
  void* spin_args[] = {&cycles};
  if (!one_node(reinterpret_cast<const void*>(&spin_kernel), spin_args, &g_spin)) return 1;
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  auto device_us = [&](const std::function<void()>& launch) {
    std::vector<double> t;
    for (int r = 0; r < 9; ++r) {
      cudaStreamSynchronize(s);
      spin_kernel<<<1, 1, 0, s>>>(10000000);  // ~5 ms: the timed kernels are all queued before they start
      cudaEventRecord(e0, s);
      for (int i = 0; i < 1000; ++i) launch();
      cudaEventRecord(e1, s);
      cudaEventSynchronize(e1);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      t.push_back(ms * 1000.0 / 1000);
    }
    std::sort(t.begin(), t.end());
    return t[4];
  };
  std::printf("  device us per ~6 us kernel: <<<>>> %.2f, one-node graph %.2f\n",
              device_us([&] { spin_kernel<<<1, 1, 0, s>>>(cycles); }),
              device_us([&] { (void)cudaGraphLaunch(g_spin, s); }));

  // Device-bound, kernels of many blocks: n floats scaled, at three sizes; direct and as
  // one-node graphs, and with a 2 KB argument.
  float *x = nullptr, *y = nullptr;
  const long long max_n = 1LL << 22;
  CK(cudaMalloc(&x, max_n * 4));
  CK(cudaMalloc(&y, max_n * 4));
  CK(cudaMemset(x, 0, max_n * 4));
  HugeArgs huge{};
  for (long long n : {1LL << 15, 1LL << 19, 1LL << 22}) {
    const unsigned grid = static_cast<unsigned>(std::min<long long>((n + 255) / 256, 132LL * 32));
    auto node = [&](const void* func, void** kargs, cudaGraphExec_t* exec) {
      return one_node_graph(func, kargs, dim3(grid), dim3(256), exec);
    };
    long long nn = n;
    void* sargs[] = {&x, &y, &nn};
    void* hargs[] = {&x, &y, &nn, &huge};
    cudaGraphExec_t gs, gh;
    if (!node(reinterpret_cast<const void*>(&scale_kernel), sargs, &gs) ||
        !node(reinterpret_cast<const void*>(&scale_huge_kernel), hargs, &gh)) return 1;
    std::printf("  device us per kernel, %lld floats, %u blocks: <<<>>> %.2f, graph %.2f; 2 KB args: <<<>>> %.2f, graph %.2f\n",
                n, grid, device_us([&] { scale_kernel<<<grid, 256, 0, s>>>(x, y, n); }),
                device_us([&] { (void)cudaGraphLaunch(gs, s); }),
                device_us([&] { scale_huge_kernel<<<grid, 256, 0, s>>>(x, y, n, huge); }),
                device_us([&] { (void)cudaGraphLaunch(gh, s); }));
  }
  // Many different one-node graphs in turn (a network's kernels), against the same launches
  // made directly: 64 graphs of the 524288-float kernel, each with its own output.
  {
    const int k = 64;
    const long long n = 1LL << 19;
    float* outs = nullptr;
    CK(cudaMalloc(&outs, k * n * 4));
    std::vector<cudaGraphExec_t> execs(k);
    std::vector<float*> yk(k);
    long long nn = n;
    for (int i = 0; i < k; ++i) {
      yk[i] = outs + i * n;
      void* a[] = {&x, &yk[i], &nn};
      if (!one_node_graph(reinterpret_cast<const void*>(&scale_kernel), a, dim3(2048), dim3(256), &execs[i])) return 1;
    }
    int i = 0, j = 0;
    std::printf("  device us per kernel, 64 different kernels in turn: <<<>>> %.2f, graphs %.2f\n",
                device_us([&] {
                  scale_kernel<<<2048, 256, 0, s>>>(x, yk[i], n);
                  i = (i + 1) % k;
                }),
                device_us([&] {
                  (void)cudaGraphLaunch(execs[j], s);
                  j = (j + 1) % k;
                }));
  }
  CK(cudaStreamSynchronize(s));
  return 0;
}
