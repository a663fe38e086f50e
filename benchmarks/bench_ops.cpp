// Issue benchmark for the CUDA backend: ag::mm vs raw cublasGemmEx (TFLOP/s), add and sum
// vs a device-to-device copy (GB/s), and host time per small op.
#include <chrono>
#include <functional>
#include <cstdio>
#include <string>
#include <vector>

#include <ampgrad/ampgrad.h>

#include "cli/bench_timer.h"

namespace ag = ampgrad;

cudaError_t launch_empty_kernel(cudaStream_t stream);  // empty_kernel.cu
// Device time of one call of fn on CUDA: median of 30 samples of 10 back-to-back calls after
// 5 warm-ups (cli/bench_timer.h).
double median_ms(const std::function<void()>& fn) {
  return ag::cli::median_ms(ag::Device(ag::kCUDA), fn, 5, 30, ag::cli::kOpCalls);
}

namespace {

// Device time of one call of fn with no host time in it: kOpCalls calls captured into a CUDA
// graph, the median of 30 replays. At 1024 a 16-bit GEMM runs ~8 us on the device while
// cuBLAS's own host time per call is ~12 us on this machine, so eager back-to-back calls
// measure host time on both sides; the graph measures the kernels cuBLAS chose.
double graphed_ms(const std::function<void()>& fn) {
  for (int i = 0; i < 3; ++i) fn();  // algorithms and plans cached before the capture
  ag::cuda::CudaGraph graph;
  graph.capture([&] {
    for (int c = 0; c < ag::cli::kOpCalls; ++c) fn();
  });
  return ag::cli::median_ms(ag::Device(ag::kCUDA), [&] { graph.replay(); }, 3, 30, 1) / ag::cli::kOpCalls;
}

struct GemmCase {
  const char* name;
  ag::DType dtype;
  bool tf32;
};

// Raw cuBLAS on the same stream: C = A @ B for row-major square n x n (computed as B^T A^T).
std::function<void()> raw_cublas(cublasHandle_t h, const ag::Tensor& a, const ag::Tensor& b, ag::Tensor& c,
                                 const GemmCase& g) {
  const int n = static_cast<int>(a.size(0));
  cudaDataType_t t = g.dtype == ag::kFloat16 ? CUDA_R_16F : (g.dtype == ag::kBFloat16 ? CUDA_R_16BF : CUDA_R_32F);
  cublasComputeType_t ct = g.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  return [=, &a, &b, &c] {
    const float alpha = 1, beta = 0;
    AG_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, b.data_ptr(), t, n, a.data_ptr(), t, n,
                                 &beta, c.data_ptr(), t, n, ct, CUBLAS_GEMM_DEFAULT));
  };
}

void bench_mm() {
  cublasHandle_t h;
  AG_CUBLAS_CHECK(cublasCreate(&h));
  AG_CUBLAS_CHECK(cublasSetStream(h, ag::cuda::current_stream()));
  size_t ws_bytes = 32u << 20;
  void* ws = nullptr;
  AG_CUDA_CHECK(cudaMalloc(&ws, ws_bytes));
  AG_CUBLAS_CHECK(cublasSetWorkspace(h, ws, ws_bytes));
  std::printf("\n## mm: ag::mm vs raw cublasGemmEx, square n x n, TFLOP/s\n\n"
              "eager: median of 30 samples of 10 back-to-back calls after 5 warm-ups (host time included);\n"
              "graphed: the same 10 calls captured in a CUDA graph, median of 30 replays (device time only).\n\n");
  std::printf("| dtype | n | ag::mm eager | raw cuBLAS eager | ratio | ag::mm graphed | raw cuBLAS graphed | ratio |\n"
              "|---|---|---|---|---|---|---|---|\n");
  const GemmCase cases[] = {{"f32", ag::kFloat32, false}, {"tf32", ag::kFloat32, true},
                            {"f16", ag::kFloat16, false}, {"bf16", ag::kBFloat16, false}};
  for (const GemmCase& g : cases) {
    ag::set_allow_tf32(g.tf32);
    for (int64_t n : {1024, 2048, 4096, 8192}) {
      auto opt = ag::TensorOptions(g.dtype).device(ag::kCUDA);
      ag::Tensor a = ag::randn({n, n}, opt), b = ag::randn({n, n}, opt);
      ag::Tensor c = ag::empty({n, n}, opt);
      double flop = 2.0 * n * n * n;
      const std::function<void()> ours_fn = [&] { ag::Tensor r = ag::mm(a, b); };
      const std::function<void()> raw_fn = raw_cublas(h, a, b, c, g);
      const double ours = median_ms(ours_fn), raw = median_ms(raw_fn);
      const double ours_g = graphed_ms(ours_fn), raw_g = graphed_ms(raw_fn);
      std::printf("| %s | %lld | %.1f | %.1f | %.3f | %.1f | %.1f | %.3f |\n", g.name, static_cast<long long>(n),
                  flop / ours / 1e9, flop / raw / 1e9, raw / ours, flop / ours_g / 1e9, flop / raw_g / 1e9,
                  raw_g / ours_g);
      std::fflush(stdout);
    }
  }
  ag::set_allow_tf32(false);
  AG_CUDA_CHECK(cudaFree(ws));
  AG_CUBLAS_CHECK(cublasDestroy(h));
}

// Memory-bound ops at 64M elements: each op's bytes (elements read and written, times the
// element size) over its median time, against a device-to-device copy's (2 elements moved per
// element). The targets: elementwise >= 0.85 of the copy, scans >= 0.7, norms and losses
// >= 0.8.
void bench_bandwidth() {
  const int64_t n = 64ll << 20;
  std::printf("\n## Memory-bound ops at 64M elements, GB/s (bytes read + written / median time)\n\n");
  std::printf("| op | dtype | ms | GB/s | vs D2D copy |\n|---|---|---|---|---|\n");
  for (ag::DType dt : {ag::kFloat32, ag::kFloat16}) {
    auto opt = ag::TensorOptions(dt).device(ag::kCUDA);
    ag::Tensor x = ag::randn({n}, opt), y = ag::randn({n}, opt);
    ag::Tensor u = ag::rand({n}, opt) * 1.8 - 0.9, p = ag::rand({n}, opt) + 0.1;  // asin/erfinv's domain; probabilities
    ag::Tensor dst = ag::empty({n}, opt);
    const ag::Tensor rows = x.view({n / 1024, 1024}), lab = ag::sign(y);
    const double es = static_cast<double>(ag::itemsize(dt));
    double copy_ms = median_ms([&] { ag::cuda::memcpy_d2d(dst.data_ptr(), x.data_ptr(), x.nbytes()); });
    double copy_gbs = 2 * n * es / copy_ms / 1e6;
    const char* name = ag::traits(dt).short_name.data();
    std::printf("| D2D copy | %s | %.3f | %.0f | 1.00 |\n", name, copy_ms, copy_gbs);
    struct Row {
      const char* op;
      int moved;  // elements read and written per element
      std::function<ag::Tensor()> fn;
    };
    const std::vector<Row> rows_ = {
        {"add", 3, [&] { return ag::add(x, y); }},
        {"sum", 1, [&] { return ag::sum(x); }},
        {"sin", 2, [&] { return ag::sin(x); }},
        {"tan", 2, [&] { return ag::tan(u); }},
        {"asin", 2, [&] { return ag::asin(u); }},
        {"erf", 2, [&] { return ag::erf(x); }},
        {"erfinv", 2, [&] { return ag::erfinv(u); }},
        {"expm1", 2, [&] { return ag::expm1(u); }},
        {"log2", 2, [&] { return ag::log2(p); }},
        {"round(decimals 2)", 2, [&] { return ag::round(x, 2); }},
        {"silu", 2, [&] { return ag::silu(x); }},
        {"mish", 2, [&] { return ag::mish(x); }},
        {"hardswish", 2, [&] { return ag::hardswish(x); }},
        {"atan2", 3, [&] { return ag::atan2(x, y); }},
        {"remainder", 3, [&] { return ag::remainder(x, p); }},
        {"addcmul", 4, [&] { return ag::addcmul(x, y, p, 0.5); }},
        {"lerp (tensor weight)", 4, [&] { return ag::lerp(x, y, p); }},
        {"cumsum (rows of 1024)", 2, [&] { return ag::cumsum(rows, 1); }},
        {"cumprod (rows of 1024)", 2, [&] { return ag::cumprod(rows, 1); }},
        {"sum (rows of 1024)", 1, [&] { return ag::sum(rows, {1}); }},
        {"norm (p 2, all)", 1, [&] { return ag::norm(x); }},
        {"norm (p 2, rows of 1024)", 1, [&] { return ag::norm(rows, 2, {1}); }},
        {"norm (p 3, rows of 1024)", 1, [&] { return ag::norm(rows, 3, {1}); }},
        {"l1_loss (mean)", 2, [&] { return ag::l1_loss(x, y); }},
        {"l1_loss (none)", 3, [&] { return ag::l1_loss(x, y, ag::Reduction::None); }},
        {"smooth_l1_loss (mean)", 2, [&] { return ag::smooth_l1_loss(x, y); }},
        {"kl_div (batchmean)", 2, [&] { return ag::kl_div(x, p, ag::Reduction::BatchMean); }},
        {"soft_margin_loss (mean)", 2, [&] { return ag::soft_margin_loss(x, lab); }},
        {"bce_with_logits (mean)", 2, [&] { return ag::binary_cross_entropy_with_logits(x, p); }},
        {"poisson_nll_loss (mean)", 2, [&] { return ag::poisson_nll_loss(u, p); }},
    };
    for (const Row& r : rows_) {
      const double ms = median_ms([&] { ag::Tensor out = r.fn(); });
      const double gbs = r.moved * n * es / ms / 1e6;
      std::printf("| %s | %s | %.3f | %.0f | %.2f |\n", r.op, name, ms, gbs, gbs / copy_gbs);
    }
    std::fflush(stdout);
  }
}

// Host microseconds per call of fn: 10,000 calls after 1,000 warm-ups, no sync inside.
double host_us(const std::function<void()>& fn) {
  for (int i = 0; i < 1000; ++i) fn();  // warm the allocator and caches
  ag::cuda::synchronize();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 10000; ++i) fn();
  double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / 10000;
  ag::cuda::synchronize();
  return us;
}

void bench_host_overhead() {
  std::printf("\n## Host time per small op: 10,000 adds of 1,000 elements (wall clock, no sync inside)\n\n");
  std::printf("| device | autograd recording | us per op |\n|---|---|---|\n");
  for (ag::Device dev : {ag::Device(ag::kCPU), ag::Device(ag::kCUDA)}) {
    for (bool grad : {false, true}) {
      ag::Tensor a = ag::randn({1000}, ag::TensorOptions().device(dev));
      ag::Tensor b = ag::randn({1000}, ag::TensorOptions().device(dev));
      if (grad) a.requires_grad_();
      const double us = host_us([&] { ag::Tensor r = ag::add(a, b); });
      std::printf("| %s | %s | %.2f |\n", dev.str().c_str(), grad ? "yes" : "no", us);
    }
  }
  // Where a CUDA op's host time goes: the allocation alone, the op without one (in place),
  // and a bare cudaMemsetAsync as the floor of any call that queues device work.
  ag::Tensor a = ag::randn({1000}, ag::TensorOptions().device(ag::kCUDA));
  ag::Tensor b = ag::randn({1000}, ag::TensorOptions().device(ag::kCUDA));
  std::printf("\n| CUDA part | us per call |\n|---|---|\n");
  std::printf("| ag::empty({1000}) (allocate + free) | %.2f |\n",
              host_us([&] { ag::Tensor r = ag::empty({1000}, a.options()); }));
  std::printf("| a.add_(b) (dispatch + launch, no allocation) | %.2f |\n", host_us([&] { a.add_(b); }));
  std::printf("| cudaMemsetAsync (driver floor) | %.2f |\n", host_us([&] {
                AG_CUDA_CHECK(cudaMemsetAsync(a.data_ptr(), 0, 4000, ag::cuda::current_stream()));
              }));
  std::printf("| empty kernel <<<1, 32>>> + cudaGetLastError (launch floor) | %.2f |\n",
              host_us([&] { AG_CUDA_CHECK(launch_empty_kernel(ag::cuda::current_stream())); }));
  int dev = 0;
  std::printf("| cudaGetDevice | %.3f |\n", host_us([&] { AG_CUDA_CHECK(cudaGetDevice(&dev)); }));
  // The matmul path at a size whose device time (~2 us) is below its host time, and a block
  // above 1 MiB (a 1024 x 1024 float16 GEMM's output).
  auto h16 = ag::TensorOptions(ag::kFloat16).device(ag::kCUDA);
  ag::Tensor m = ag::randn({256, 256}, h16), n = ag::randn({256, 256}, h16), o = ag::empty({256, 256}, h16);
  std::printf("| ag::empty({1024, 1024}, float16) (allocate + free, 2 MiB) | %.2f |\n",
              host_us([&] { ag::Tensor r = ag::empty({1024, 1024}, h16); }));
  std::printf("| ag::mm 256 x 256 float16 (op + output + cuBLASLt, as a call graph) | %.2f |\n",
              host_us([&] { ag::Tensor r = ag::mm(m, n); }));
  ag::cuda::set_call_graphs_enabled(false);  // Note [Call graphs]
  std::printf("| ag::mm 256 x 256 float16, call graphs off (cublasLtMatmul each call) | %.2f |\n",
              host_us([&] { ag::Tensor r = ag::mm(m, n); }));
  ag::cuda::set_call_graphs_enabled(true);
  cublasHandle_t h;
  AG_CUBLAS_CHECK(cublasCreate(&h));
  AG_CUBLAS_CHECK(cublasSetStream(h, ag::cuda::current_stream()));
  const float alpha = 1, beta = 0;
  std::printf("| raw cublasGemmEx 256 x 256 float16 (output preallocated) | %.2f |\n", host_us([&] {
                AG_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 256, 256, 256, &alpha, n.data_ptr(),
                                             CUDA_R_16F, 256, m.data_ptr(), CUDA_R_16F, 256, &beta, o.data_ptr(),
                                             CUDA_R_16F, 256, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
              }));
  AG_CUBLAS_CHECK(cublasDestroy(h));
}

}  // namespace

// bench_ops [host|bandwidth|mm]...: the named sections (all three when none is named).
int main(int argc, char** argv) {
  auto wants = [&](const char* section) {
    if (argc < 2) return true;
    for (int i = 1; i < argc; ++i)
      if (std::string(argv[i]) == section) return true;
    return false;
  };
  if (!ag::cuda::is_available()) {
    std::printf("bench_ops: no CUDA device; this benchmark measures the GPU backend\n");
    return 0;
  }
  auto p = ag::cuda::device_properties(0);
  std::printf("# bench_ops on %s (%d SMs)\n", p.name.c_str(), p.sm_count);
  if (wants("host")) bench_host_overhead();
  if (wants("bandwidth")) bench_bandwidth();
  if (wants("mm")) bench_mm();
  return 0;
}
