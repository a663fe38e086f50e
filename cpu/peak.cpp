// FMA throughput loops behind measured_peak_gflops (Note [CPU peak]).
#include <ampgrad/cpu/peak.h>

#include <immintrin.h>

#include <chrono>
#include <map>
#include <mutex>
#include <vector>

#include <ampgrad/cpu/parallel.h>

namespace ampgrad::cpu {

namespace {

constexpr int kChains = 12;  // independent accumulators: FMA latency times pipes, with room

// Each returns its accumulators' sum (so the loop cannot be dropped); flops per call are
// iters * kChains * (flops per instruction).
__attribute__((target("avx512f"))) float fma512_ps(int64_t iters) {
  __m512 acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = _mm512_set1_ps(static_cast<float>(j) * 1e-3f);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < kChains; ++j) acc[j] = _mm512_fmadd_ps(acc[j], a, b);
  float s = 0;
  for (int j = 0; j < kChains; ++j) s += _mm512_reduce_add_ps(acc[j]);
  return s;
}
__attribute__((target("avx512f"))) double fma512_pd(int64_t iters) {
  __m512d acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = _mm512_set1_pd(static_cast<double>(j) * 1e-3);
  const __m512d a = _mm512_set1_pd(0.999999), b = _mm512_set1_pd(1e-7);
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < kChains; ++j) acc[j] = _mm512_fmadd_pd(acc[j], a, b);
  double s = 0;
  for (int j = 0; j < kChains; ++j) s += _mm512_reduce_add_pd(acc[j]);
  return s;
}
__attribute__((target("avx512f,avx512bf16"))) float dpbf16(int64_t iters) {
  __m512 acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = _mm512_set1_ps(static_cast<float>(j) * 1e-3f);
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < kChains; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], a, a);
  float s = 0;
  for (int j = 0; j < kChains; ++j) s += _mm512_reduce_add_ps(acc[j]);
  return s;
}
__attribute__((target("avx2,fma"))) float fma256_ps(int64_t iters) {
  __m256 acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = _mm256_set1_ps(static_cast<float>(j) * 1e-3f);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < kChains; ++j) acc[j] = _mm256_fmadd_ps(acc[j], a, b);
  alignas(32) float out[8];
  float s = 0;
  for (int j = 0; j < kChains; ++j) {
    _mm256_store_ps(out, acc[j]);
    for (float v : out) s += v;
  }
  return s;
}
__attribute__((target("avx2,fma"))) double fma256_pd(int64_t iters) {
  __m256d acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = _mm256_set1_pd(static_cast<double>(j) * 1e-3);
  const __m256d a = _mm256_set1_pd(0.999999), b = _mm256_set1_pd(1e-7);
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < kChains; ++j) acc[j] = _mm256_fmadd_pd(acc[j], a, b);
  alignas(32) double out[4];
  double s = 0;
  for (int j = 0; j < kChains; ++j) {
    _mm256_store_pd(out, acc[j]);
    for (double v : out) s += v;
  }
  return s;
}
template <class T> T mul_add(int64_t iters) {  // SSE2: separate multiply and add, 4 or 2 lanes
  T acc[kChains][16 / sizeof(T)];
  for (int j = 0; j < kChains; ++j)
    for (auto& v : acc[j]) v = static_cast<T>(j) * T(1e-3);
  const T a = T(0.999999), b = T(1e-7);
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < kChains; ++j)
      for (auto& v : acc[j]) v = v * a + b;
  T s = 0;
  for (int j = 0; j < kChains; ++j)
    for (T v : acc[j]) s += v;
  return s;
}

struct Kernel {
  std::string method;
  double flops_per_iter;  // per thread
  double (*run)(int64_t);
};

Kernel kernel_for(DType d) {
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (d == kFloat64) {
    if (avx512) return {"AVX-512 FMA, float64", kChains * 8 * 2.0, [](int64_t n) { return fma512_pd(n); }};
    if (avx2) return {"AVX2 FMA, float64", kChains * 4 * 2.0, [](int64_t n) { return fma256_pd(n); }};
    return {"SSE2 multiply + add, float64", kChains * 2 * 2.0, [](int64_t n) { return mul_add<double>(n); }};
  }
  if (d == kBFloat16 && avx512 && __builtin_cpu_supports("avx512bf16"))
    return {"AVX512-BF16 dot products", kChains * 32 * 2.0, [](int64_t n) { return static_cast<double>(dpbf16(n)); }};
  const std::string note = d == kFloat32 ? "" : std::string(", which ") + dtype_name(d).data() + " computes in here";
  if (avx512) return {"AVX-512 FMA, float32" + note, kChains * 16 * 2.0, [](int64_t n) { return static_cast<double>(fma512_ps(n)); }};
  if (avx2) return {"AVX2 FMA, float32" + note, kChains * 8 * 2.0, [](int64_t n) { return static_cast<double>(fma256_ps(n)); }};
  return {"SSE2 multiply + add, float32" + note, kChains * 4 * 2.0, [](int64_t n) { return static_cast<double>(mul_add<float>(n)); }};
}

}  // namespace

double measured_peak_gflops(DType d) {
  static std::mutex mu;
  static std::map<std::pair<int, int>, double> done;
  const int threads = get_num_threads();
  std::lock_guard<std::mutex> lock(mu);
  auto key = std::make_pair(static_cast<int>(d), threads);
  if (auto it = done.find(key); it != done.end()) return it->second;
  const Kernel k = kernel_for(d);
  std::vector<double> sink(static_cast<size_t>(threads));
  auto pass = [&](int64_t iters) {
    const auto t0 = std::chrono::steady_clock::now();
    parallel_for(threads, 1, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) sink[t] = k.run(iters);
    });
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  pass(1000);  // wake the team, reach full clocks
  const int64_t iters = 200000;
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) best = std::max(best, k.flops_per_iter * iters * threads / pass(iters) / 1e9);
  done[key] = best;
  return best;
}

std::string peak_method(DType d) { return kernel_for(d).method; }

}  // namespace ampgrad::cpu
