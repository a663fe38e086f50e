// CPU emulation of the one-tile attention kernels (run.sh says what it checks and what not): a
// thread per CUDA thread, barriers for the warp collectives (ldmatrix, mma.sync, shuffles) and
// __syncthreads, against float64. Shared memory starts as garbage (0xCD), as on the device.
// A case whose reference gradient is zero (one key: dq = dk = 0) reports inf/NaN relative
// error: that is the measure, not the kernel.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <type_traits>
#include <vector>
#include <algorithm>
#include <memory>
using std::min;
struct D3 { unsigned x = 0; };
thread_local D3 threadIdx;
D3 blockIdx_g; D3 blockDim;
#define blockIdx blockIdx_g
unsigned char* g_smem;
std::unique_ptr<std::barrier<>> g_block;
std::unique_ptr<std::barrier<>> g_warp[8];
const void* g_addr[8][32];
uint32_t g_a[8][32][4], g_b[8][32][2];
float g_f[8][32];
template <class T> constexpr bool is_half_v = std::is_same_v<T, __half>;
void __syncthreads() { g_block->arrive_and_wait(); }
void warp_sync() { g_warp[threadIdx.x >> 5]->arrive_and_wait(); }
void __syncwarp() { warp_sync(); }
float __shfl_xor_sync(unsigned, float v, int o) {
  int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  g_f[w][l] = v; warp_sync();
  float r = g_f[w][l ^ o]; warp_sync();
  return r;
}
void ldsm_x4(uint32_t (&r)[4], const void* p) {
  int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  g_addr[w][l] = p; warp_sync();
  for (int i = 0; i < 4; ++i) {
    const uint16_t* row = static_cast<const uint16_t*>(g_addr[w][i * 8 + l / 4]);
    r[i] = uint32_t(row[2 * (l % 4)]) | uint32_t(row[2 * (l % 4) + 1]) << 16;
  }
  warp_sync();
}
void ldsm_x4_t(uint32_t (&r)[4], const void* p) {
  int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  g_addr[w][l] = p; warp_sync();
  for (int i = 0; i < 4; ++i) {
    const uint16_t* ra = static_cast<const uint16_t*>(g_addr[w][i * 8 + 2 * (l % 4)]);
    const uint16_t* rb = static_cast<const uint16_t*>(g_addr[w][i * 8 + 2 * (l % 4) + 1]);
    r[i] = uint32_t(ra[l / 4]) | uint32_t(rb[l / 4]) << 16;
  }
  warp_sync();
}
template <class T> float bits_to_float(uint16_t b) {
  if constexpr (is_half_v<T>) { __half_raw r; r.x = b; return __half2float(__half(r)); }
  else { uint32_t u = uint32_t(b) << 16; float f; std::memcpy(&f, &u, 4); return f; }
}
template <class T> void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  for (int i = 0; i < 4; ++i) g_a[w][l][i] = a[i];
  g_b[w][l][0] = b0; g_b[w][l][1] = b1;
  warp_sync();
  float A[16][16], B[16][8];
  for (int x = 0; x < 32; ++x) {
    int g = x / 4, t = x % 4;
    auto lo = [](uint32_t v) { return uint16_t(v & 0xffff); };
    auto hi = [](uint32_t v) { return uint16_t(v >> 16); };
    const uint32_t* fa = g_a[w][x];
    A[g][2 * t] = bits_to_float<T>(lo(fa[0])); A[g][2 * t + 1] = bits_to_float<T>(hi(fa[0]));
    A[g + 8][2 * t] = bits_to_float<T>(lo(fa[1])); A[g + 8][2 * t + 1] = bits_to_float<T>(hi(fa[1]));
    A[g][2 * t + 8] = bits_to_float<T>(lo(fa[2])); A[g][2 * t + 9] = bits_to_float<T>(hi(fa[2]));
    A[g + 8][2 * t + 8] = bits_to_float<T>(lo(fa[3])); A[g + 8][2 * t + 9] = bits_to_float<T>(hi(fa[3]));
    B[2 * t][g] = bits_to_float<T>(lo(g_b[w][x][0])); B[2 * t + 1][g] = bits_to_float<T>(hi(g_b[w][x][0]));
    B[2 * t + 8][g] = bits_to_float<T>(lo(g_b[w][x][1])); B[2 * t + 9][g] = bits_to_float<T>(hi(g_b[w][x][1]));
  }
  int g = l / 4, t = l % 4;
  int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
  for (int i = 0; i < 4; ++i) {
    float s = 0;
    for (int k = 0; k < 16; ++k) s += A[rows[i]][k] * B[k][cols[i]];
    d[i] += s;
  }
  warp_sync();
}
#include "kernel_body.inc"

template <class T> uint16_t to_bits(float f) {
  if constexpr (is_half_v<T>) { __half h = __float2half_rn(f); return __half_raw(h).x; }
  else { __nv_bfloat16 h = __float2bfloat16_rn(f); return __nv_bfloat16_raw(h).x; }
}

template <class Args, class K> void launch(K kernel, int blocks, int threads, size_t smem, const Args& a) {
  std::vector<unsigned char> buf(smem + 64, 0xCD);  // garbage, as shared memory is
  for (int b = 0; b < blocks; ++b) {
    blockIdx.x = b; blockDim.x = threads;
    g_smem = buf.data();
    std::fill(buf.begin(), buf.end(), 0xCD);
    g_block = std::make_unique<std::barrier<>>(threads);
    for (int w = 0; w < threads / 32; ++w) g_warp[w] = std::make_unique<std::barrier<>>(32);
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t) ts.emplace_back([&, t] { threadIdx.x = t; kernel(a); });
    for (auto& th : ts) th.join();
  }
}

struct Case { bool bf16; int B, H, L, S, E; bool causal, packed; };

double rel(const std::vector<double>& a, const std::vector<double>& b) {
  double n = 0, d = 0;
  for (size_t i = 0; i < a.size(); ++i) { n += (a[i] - b[i]) * (a[i] - b[i]); d += b[i] * b[i]; }
  return std::sqrt(n / d);
}

template <class T> bool run_case(const Case& c) {
  std::mt19937 rng(c.B * 131 + c.L * 7 + c.S + c.E);
  std::normal_distribution<float> nd;
  const int B = c.B, H = c.H, L = c.L, S = c.S, E = c.E;
  // Layout: [B, H, T, E] dense, or packed [B, T, 3, H, E] for q, k, v (L == S).
  std::vector<uint16_t> qkv, qb, kb, vb;
  int64_t sq[3], sk[3], sv[3];
  const uint16_t *qp, *kp, *vp;
  std::vector<uint16_t> packed;
  if (c.packed) {
    packed.resize(size_t(B) * L * 3 * H * E);
    for (auto& x : packed) x = to_bits<T>(nd(rng));
    int64_t s_b = int64_t(L) * 3 * H * E, s_h = E, s_t = 3 * H * E;
    for (auto* s : {sq, sk, sv}) { s[0] = s_b; s[1] = s_h; s[2] = s_t; }
    qp = packed.data(); kp = packed.data() + H * E; vp = packed.data() + 2 * H * E;
  } else {
    qb.resize(size_t(B) * H * L * E); kb.resize(size_t(B) * H * S * E); vb.resize(kb.size());
    for (auto* v : {&qb, &kb, &vb}) for (auto& x : *v) x = to_bits<T>(nd(rng));
    sq[0] = int64_t(H) * L * E; sq[1] = int64_t(L) * E; sq[2] = E;
    sk[0] = int64_t(H) * S * E; sk[1] = int64_t(S) * E; sk[2] = E;
    std::copy(sk, sk + 3, sv);
    qp = qb.data(); kp = kb.data(); vp = vb.data();
  }
  auto get = [&](const uint16_t* p, const int64_t* s, int b, int h, int t, int e) {
    return double(bits_to_float<T>(p[b * s[0] + h * s[1] + t * s[2] + e]));
  };
  // o: [B, T, H, E] (as empty_ordered_like of a heads-last q), or [B, H, L, E].
  std::vector<uint16_t> o(size_t(B) * H * L * E), dout(o.size()), dq(size_t(B) * H * L * E), dk(size_t(B) * H * S * E),
      dv(dk.size());
  std::vector<float> stats(size_t(B) * H * L);
  int64_t so[3] = {int64_t(L) * H * E, E, int64_t(H) * E};  // heads last
  int64_t sdq[3] = {int64_t(H) * L * E, int64_t(L) * E, E}, sdk[3] = {int64_t(H) * S * E, int64_t(S) * E, E};
  for (auto& x : dout) x = to_bits<T>(nd(rng));
  const float scale = 1.0f / std::sqrt(float(E));
  TileForwardArgs fa{{qp, sq[0], sq[1], sq[2]}, {kp, sk[0], sk[1], sk[2]}, {vp, sv[0], sv[1], sv[2]},
                     {o.data(), so[0], so[1], so[2]}, stats.data(), H, L, S, c.causal ? 1 : 0, scale, 0};
  const int lp = (L + 15) / 16 * 16, sp = (S + 15) / 16 * 16;
  size_t fsm = size_t(lp + 2 * sp) * (E + 8) * 2;
  size_t bsm = size_t(2 * lp + 2 * sp) * (E + 8) * 2 + size_t(2 * lp) * (sp + 8) * 2 + size_t(2 * lp) * 4;

  auto fwd = [&](auto e) {
    constexpr int EE = decltype(e)::value;
    launch(sdpa_tile_forward_kernel<T, EE>, B * H, lp * 2, fsm, fa);
  };
  if (E == 16) fwd(std::integral_constant<int, 16>{}); else if (E == 32) fwd(std::integral_constant<int, 32>{}); else fwd(std::integral_constant<int, 64>{});
  TileBackwardArgs ba{fa.q, fa.k, fa.v, fa.o, {dout.data(), so[0], so[1], so[2]}, {dq.data(), sdq[0], sdq[1], sdq[2]},
                      {dk.data(), sdk[0], sdk[1], sdk[2]}, {dv.data(), sdk[0], sdk[1], sdk[2]}, stats.data(), H, L, S,
                      c.causal ? 1 : 0, scale, 0};
  auto bwd = [&](auto e) {
    constexpr int EE = decltype(e)::value;
    launch(sdpa_tile_backward_kernel<T, EE>, B * H, std::max(lp, sp) * 2, bsm, ba);
  };
  if (E == 16) bwd(std::integral_constant<int, 16>{}); else if (E == 32) bwd(std::integral_constant<int, 32>{}); else bwd(std::integral_constant<int, 64>{});
  // float64 reference
  std::vector<double> ro, rdq, rdk, rdv, go, gdq, gdk, gdv, rst, gst;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      std::vector<double> P(size_t(L) * S, 0.0), dP(size_t(L) * S), O(size_t(L) * E, 0.0);
      for (int i = 0; i < L; ++i) {
        double m = -INFINITY;
        for (int j = 0; j < S; ++j) {
          if (c.causal && j > i) { P[i * S + j] = -INFINITY; continue; }
          double d = 0;
          for (int e = 0; e < E; ++e) d += get(qp, sq, b, h, i, e) * get(kp, sk, b, h, j, e);
          P[i * S + j] = d * scale; m = std::max(m, P[i * S + j]);
        }
        double z = 0;
        for (int j = 0; j < S; ++j) z += (P[i * S + j] = std::exp(P[i * S + j] - m));
        for (int j = 0; j < S; ++j) P[i * S + j] /= z;
        rst.push_back(m + std::log(z)); gst.push_back(stats[(b * H + h) * L + i]);
        for (int e = 0; e < E; ++e) {
          for (int j = 0; j < S; ++j) O[i * E + e] += P[i * S + j] * get(vp, sv, b, h, j, e);
          ro.push_back(O[i * E + e]); go.push_back(bits_to_float<T>(o[b * so[0] + h * so[1] + i * so[2] + e]));
        }
      }
      auto gdo = [&](int i, int e) { return double(bits_to_float<T>(dout[b * so[0] + h * so[1] + i * so[2] + e])); };
      std::vector<double> Dr(L, 0.0);
      for (int i = 0; i < L; ++i) for (int e = 0; e < E; ++e) Dr[i] += gdo(i, e) * O[i * E + e];
      for (int i = 0; i < L; ++i) for (int j = 0; j < S; ++j) {
        double d = 0;
        for (int e = 0; e < E; ++e) d += gdo(i, e) * get(vp, sv, b, h, j, e);
        dP[i * S + j] = P[i * S + j] * (d - Dr[i]);  // dS
      }
      for (int i = 0; i < L; ++i) for (int e = 0; e < E; ++e) {
        double d = 0;
        for (int j = 0; j < S; ++j) d += dP[i * S + j] * get(kp, sk, b, h, j, e);
        rdq.push_back(d * scale); gdq.push_back(bits_to_float<T>(dq[b * sdq[0] + h * sdq[1] + i * sdq[2] + e]));
      }
      for (int j = 0; j < S; ++j) for (int e = 0; e < E; ++e) {
        double a = 0, v = 0;
        for (int i = 0; i < L; ++i) { a += dP[i * S + j] * get(qp, sq, b, h, i, e); v += P[i * S + j] * gdo(i, e); }
        rdk.push_back(a * scale); gdk.push_back(bits_to_float<T>(dk[b * sdk[0] + h * sdk[1] + j * sdk[2] + e]));
        rdv.push_back(v); gdv.push_back(bits_to_float<T>(dv[b * sdk[0] + h * sdk[1] + j * sdk[2] + e]));
      }
    }
  double eo = rel(go, ro), es = rel(gst, rst), eq = rel(gdq, rdq), ek = rel(gdk, rdk), ev = rel(gdv, rdv);
  const double tol = c.bf16 ? 2.5e-2 : 4e-3;
  bool ok = eo < tol && es < 1e-5 && eq < tol && ek < tol && ev < tol;
  std::printf("%s %s B%d H%d L%d S%d E%d causal %d packed %d: o %.2e stats %.2e dq %.2e dk %.2e dv %.2e\n",
              ok ? "ok  " : "FAIL", c.bf16 ? "bf16" : "f16 ", B, H, L, S, E, c.causal, c.packed, eo, es, eq, ek, ev);
  return ok;
}

int main() {
  const Case cases[] = {
      {false, 1, 2, 128, 128, 32, true, true}, {true, 1, 1, 128, 128, 32, true, true}, {false, 1, 2, 17, 5, 16, false, false},
      {true, 1, 1, 100, 77, 64, true, false}, {false, 1, 1, 1, 3, 32, false, false}, {false, 1, 1, 128, 128, 64, false, false}, {true, 1, 1, 16, 128, 64, true, false}, {false, 1, 1, 128, 16, 16, true, false}, {false, 1, 1, 33, 128, 64, false, false},
      {false, 1, 2, 77, 100, 32, true, false}, {true, 1, 1, 128, 128, 16, false, false}, {false, 2, 1, 40, 40, 64, true, true},
      {false, 2, 2, 32, 32, 16, true, true},
  };
  int bad = 0;
  for (const Case& c : cases) bad += c.bf16 ? !run_case<__nv_bfloat16>(c) : !run_case<__half>(c);
  std::printf("%d failed\n", bad);
  return bad != 0;
}
