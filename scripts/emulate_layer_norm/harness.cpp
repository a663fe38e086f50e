// CPU emulation of the layer norm kernels (run.sh says what it checks and what not): a thread
// per CUDA thread of a (32, 8) block, barriers for __syncthreads and the warp shuffles.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <type_traits>
#include <vector>

using std::min;
using std::sqrt;
struct D3 {
  unsigned x = 0, y = 0, z = 0;
};
thread_local D3 threadIdx;
D3 blockIdx_g, gridDim, blockDim;
#define blockIdx blockIdx_g
unsigned char* g_dyn_smem;
std::unique_ptr<std::barrier<>> g_block;
std::unique_ptr<std::barrier<>> g_warp[8];
double g_shfl[8][32];

void __syncthreads() { g_block->arrive_and_wait(); }
template <class A> A __shfl_xor_sync(unsigned, A v, int o) {
  const unsigned w = threadIdx.y, l = threadIdx.x;
  g_shfl[w][l] = static_cast<double>(v);  // float and double both exact in a double
  g_warp[w]->arrive_and_wait();
  const A r = static_cast<A>(g_shfl[w][l ^ static_cast<unsigned>(o)]);
  g_warp[w]->arrive_and_wait();
  return r;
}
float __fadd_rn(float a, float b) { return a + b; }
double __dadd_rn(double a, double b) { return a + b; }
template <class T> constexpr bool is_half_v = std::is_same_v<T, __half>;
template <class T> constexpr bool is_bf16_v = std::is_same_v<T, __nv_bfloat16>;
template <class T> auto to_acc(T v) {
  if constexpr (is_half_v<T>) return __half2float(v);
  else if constexpr (is_bf16_v<T>) return __bfloat162float(v);
  else return v;
}
template <class T, class A> T from_acc(A v) {
  if constexpr (is_half_v<T>) return __float2half_rn(static_cast<float>(v));
  else if constexpr (is_bf16_v<T>) return __float2bfloat16_rn(static_cast<float>(v));
  else return static_cast<T>(v);
}

template <class T, int N> struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

#include "kernel_body.inc"

// Runs kernel(args...) over grid (gx, gy) of (32, 8) blocks, one block at a time; dynamic
// shared memory starts as garbage, as on the device.
template <class K, class... Args> void launch(K kernel, unsigned gx, unsigned gy, size_t smem, Args... args) {
  std::vector<unsigned char> dyn(smem + 16, 0xCD);
  gridDim = {gx, gy, 1};
  blockDim = {32, 8, 1};
  for (unsigned by = 0; by < gy; ++by)
    for (unsigned bx = 0; bx < gx; ++bx) {
      blockIdx = {bx, by, 0};
      std::fill(dyn.begin(), dyn.end(), 0xCD);
      g_dyn_smem = dyn.data();
      g_block = std::make_unique<std::barrier<>>(256);
      for (auto& w : g_warp) w = std::make_unique<std::barrier<>>(32);
      std::vector<std::thread> ts;
      for (unsigned t = 0; t < 256; ++t)
        ts.emplace_back([&, t] {
          threadIdx = {t % 32, t / 32, 0};
          kernel(args...);
        });
      for (auto& th : ts) th.join();
    }
}

std::mt19937 rng(7);
std::vector<float> randn(size_t n, float scale = 1, float shift = 0) {
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& x : v) x = d(rng) * scale + shift;
  return v;
}
template <class L> std::vector<L> low_of(const std::vector<float>& v) {
  std::vector<L> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = from_acc<L>(v[i]);
  return o;
}
template <class T> bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}
double rel(const std::vector<float>& got, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

int failures = 0;
void expect(bool ok, const char* what, int rows, int n) {
  if (!ok) {
    ++failures;
    std::printf("FAILED: %s (rows %d, n %d)\n", what, rows, n);
  }
}

// One case: rows x n, a float32 stream x and a 16-bit residual of type R (or float).
// G: the register kernels' groups of columns (ln_col), 1 or 4.
template <class R> void run_case(int rows, int n, int G) {
  const bool reg = n <= 1024;
  const size_t N = static_cast<size_t>(rows) * n;
  const std::vector<float> x = randn(N, 2, 0.5f), w = randn(n, 0.3f, 1), b = randn(n, 0.3f);
  std::vector<R> res(N);
  {
    const std::vector<float> r = randn(N);
    for (size_t i = 0; i < N; ++i) res[i] = from_acc<R>(r[i]);
  }
  // The pair's add first (the widening add: float(x) + float(res), rounded once).
  std::vector<float> s_pair(N);
  for (size_t i = 0; i < N; ++i) s_pair[i] = x[i] + static_cast<float>(to_acc(res[i]));
  const unsigned fgrid = static_cast<unsigned>((rows + 7) / 8);
  auto forward = [&](const float* xin, const R* r, float* sum, std::vector<float>& y, std::vector<__half>& y_low,
                     std::vector<float>& mean, std::vector<float>& rstd) {
    y.assign(N, 0);
    y_low.assign(N, __half());
    mean.assign(rows, 0);
    rstd.assign(rows, 0);
    if (reg) {
      auto k = n <= 128 ? (G == 4 ? ln_forward_reg_kernel<float, 4, 4, __half, R> : ln_forward_reg_kernel<float, 4, 1, __half, R>)
                        : (G == 4 ? ln_forward_reg_kernel<float, 32, 4, __half, R> : ln_forward_reg_kernel<float, 32, 1, __half, R>);
      launch(k, fgrid, 1, 0, xin, r, sum, w.data(), b.data(), y.data(), y_low.data(), mean.data(), rstd.data(),
             static_cast<int64_t>(rows), n, 1e-5);
    } else {
      launch(ln_forward_kernel<float, __half, R>, fgrid, 1, 0, xin, r, sum, w.data(), b.data(), y.data(),
             y_low.data(), mean.data(), rstd.data(), static_cast<int64_t>(rows), static_cast<int64_t>(n), 1e-5);
    }
  };
  std::vector<float> sum(N, -7), y1, m1, r1, y2, m2, r2;
  std::vector<__half> yl1, yl2;
  forward(x.data(), res.data(), sum.data(), y1, yl1, m1, r1);
  forward(s_pair.data(), static_cast<const R*>(nullptr), nullptr, y2, yl2, m2, r2);
  expect(same_bits(sum, s_pair), "forward: the sum is the widening add's bits", rows, n);
  expect(same_bits(y1, y2) && same_bits(m1, m2) && same_bits(r1, r2), "forward: y, mean, rstd are the pair's bits",
         rows, n);
  expect(std::memcmp(yl1.data(), yl2.data(), N * sizeof(__half)) == 0, "forward: y_low is the pair's bits", rows, n);
  // float64: the layer norm of the sum.
  std::vector<double> yref(N);
  for (int r = 0; r < rows; ++r) {
    double mu = 0, var = 0;
    for (int j = 0; j < n; ++j) mu += s_pair[r * n + j];
    mu /= n;
    for (int j = 0; j < n; ++j) var += (s_pair[r * n + j] - mu) * (s_pair[r * n + j] - mu);
    const double inv = 1 / std::sqrt(var / n + 1e-5);
    for (int j = 0; j < n; ++j) yref[r * n + j] = (s_pair[r * n + j] - mu) * inv * w[j] + b[j];
  }
  const double fe = rel(y1, yref);
  expect(fe < 1e-6, "forward: against float64", rows, n);
  // Backward: dy (float32) and dy_low (float16) arrive; the sum's own gradient dsum, and
  // (pending) a sum the engine already held for x.
  const std::vector<float> dy = randn(N), dsum = randn(N), pending = randn(N);
  const std::vector<__half> dy_low = low_of<__half>(randn(N));
  for (bool acc : {false, true}) {
    const int V = n <= 128 ? 4 : 32;
    auto backward = [&](bool accumulate, const float* ds, std::vector<float>& gx, std::vector<__half>& gx_low,
                        std::vector<float>& gw, std::vector<float>& gb) {
      gx_low.assign(N, __half());
      gw.assign(n, 0);
      gb.assign(n, 0);
      if (reg) {
        const unsigned blocks = std::min<unsigned>(fgrid, 3);  // each warp takes several rows
        std::vector<float> part(static_cast<size_t>(blocks) * 2 * n, -9);
        auto k = V == 4 ? (G == 4 ? ln_backward_reg_kernel<float, 4, 4, __half> : ln_backward_reg_kernel<float, 4, 1, __half>)
                        : (G == 4 ? ln_backward_reg_kernel<float, 32, 4, __half> : ln_backward_reg_kernel<float, 32, 1, __half>);
        launch(k, blocks, 1, static_cast<size_t>(8 * 32 * V) * sizeof(float), dy.data(),
               static_cast<const __half*>(dy_low.data()), s_pair.data(), w.data(), m2.data(), r2.data(), gx.data(),
               accumulate, ds, gx_low.data(), part.data(), static_cast<int64_t>(rows), n);
        launch(ln_reg_params_finish_kernel<float>, static_cast<unsigned>((n + 31) / 32), 1, 0,
               static_cast<const float*>(part.data()), gw.data(), gb.data(), n, static_cast<int>(blocks));
      } else {
        launch(ln_backward_input_kernel<float, __half>, fgrid, 1, 0, dy.data(),
               static_cast<const __half*>(dy_low.data()), s_pair.data(), w.data(), m2.data(), r2.data(), gx.data(),
               accumulate, ds, gx_low.data(), static_cast<int64_t>(rows), static_cast<int64_t>(n));
      }
    };
    // Fused: dsum into the kernel (on top of the pending sum with acc).
    std::vector<float> gx1 = acc ? pending : std::vector<float>(N, -5), gw1, gb1;
    std::vector<__half> gl1;
    backward(acc, dsum.data(), gx1, gl1, gw1, gb1);
    // The pair: the engine's sum so far (pending + dsum, or dsum) preloaded, accumulated into.
    std::vector<float> gx2(N), gw2, gb2;
    for (size_t i = 0; i < N; ++i) gx2[i] = acc ? pending[i] + dsum[i] : dsum[i];
    std::vector<__half> gl2;
    backward(true, nullptr, gx2, gl2, gw2, gb2);
    expect(same_bits(gx1, gx2), acc ? "backward: gx (pending + dsum) is the pair's bits" : "backward: gx is the pair's bits",
           rows, n);
    expect(std::memcmp(gl1.data(), gl2.data(), N * sizeof(__half)) == 0, "backward: gx_low is the pair's bits", rows, n);
    if (reg) expect(same_bits(gw1, gw2) && same_bits(gb1, gb2), "backward: weight and bias gradients", rows, n);
    // float64: the layer norm's input gradient plus what it is added to.
    std::vector<double> gref(N);
    for (int r = 0; r < rows; ++r) {
      const double mu = m2[r], inv = r2[r];
      double a = 0, c = 0;
      for (int j = 0; j < n; ++j) {
        const double d = (double(dy[r * n + j]) + double(__half2float(dy_low[r * n + j]))) * w[j];
        a += d;
        c += d * (s_pair[r * n + j] - mu) * inv;
      }
      a /= n;
      c /= n;
      for (int j = 0; j < n; ++j) {
        const size_t i = static_cast<size_t>(r) * n + j;
        const double d = (double(dy[i]) + double(__half2float(dy_low[i]))) * w[j];
        gref[i] = inv * (d - a - (s_pair[i] - mu) * inv * c) + dsum[i] + (acc ? pending[i] : 0.0);
      }
    }
    const double be = rel(gx1, gref);
    expect(be < 1e-6, "backward: against float64", rows, n);
    std::printf("rows %4d n %4d %s residual %s%s: forward rel %.2e, backward rel %.2e\n", rows, n,
                reg ? (G == 4 ? "register, groups of 4" : "register, groups of 1") : "loop                 ",
                is_half_v<R> ? "float16" : (is_bf16_v<R> ? "bfloat16" : "float32"), acc ? ", pending" : "", fe, be);
  }
}

int main() {
  for (int G : {1, 4}) {  // the register kernels one by one and in groups of 4 columns
    run_case<__half>(37, 96, G);
    run_case<__nv_bfloat16>(21, 1000, G);
    run_case<float>(9, 100, G);
  }
  run_case<__half>(11, 1500, 1);
  run_case<__nv_bfloat16>(5, 1100, 1);
  if (failures) {
    std::printf("%d check(s) failed\n", failures);
    return 1;
  }
  std::printf("all checks passed\n");
  return 0;
}
