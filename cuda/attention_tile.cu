// Attention for short sequences in one tile: a block per (batch, head) holds q, k and v in
// shared memory and computes the forward, or the whole backward, with tensor-core MMAs
// (Note [Attention in one tile]).
#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include <ampgrad/core/kernels.h>
#include <ampgrad/cuda/attention_layout.h>
#include <ampgrad/cuda/launch.cuh>

namespace ampgrad::cuda {

// Note [Attention in one tile]
// When L and S are at most 128 (a character GPT's context), one (batch, head)'s q, k and v are
// a few KB: a block loads them into shared memory once and does the rest there, with
// mma.sync m16n8k16 (float16 or bfloat16 in, float accumulators), the tensor cores' warp-level
// instruction. cuDNN's flash-attention kernels are built for long sequences: for the small
// GPT (B 32, H 8, T 128, E 32) they took 17 us forward and 31 us backward per layer (ncu;
// the backward also zeroes and converts a float dq), where the data is 2 MB in and out. The
// fused path (Note [Attention paths] in ops/attention.cpp) takes this kernel for
// float16 and bfloat16, E 16, 32 or 64, L and S at most 128, no mask tensor and no dropout,
// causal or not; the rest goes to cuDNN.
//   Layout: a warp per 16 query rows (the forward) or 16 key rows (the backward's second
//   phase). Rows are E + 8 halves apart in shared memory (and the weights S + 8 apart), which
//   puts ldmatrix's eight 16-byte rows in distinct banks. Rows past L or S are zeros.
//   Forward: the warp's 16 x S scores stay in registers (16 x 128 floats: 64 per thread);
//   with every key at hand the softmax is exact, not online: row max, exp2 of the scores
//   scaled by scale * log2 e, row sum. The float16 (bfloat16) weights are the A operand of
//   P @ v straight from the accumulators (an m16n8 accumulator pair is an m16k16 A fragment),
//   o is divided by the row sum, staged in the warp's own q rows and stored 16 bytes at a
//   time; stats gets logsumexp = (max + log2 sum) * ln 2, as cuDNN's (natural log).
//   Backward: D = rowsum(do * o) per query row first. Phase 1, per 16 query rows and 16 keys:
//   S = q k^T, P = exp2(S * scale * log2 e - stats * log2 e) (the forward's weights, in
//   float), dP = do v^T, dS = P * (dP - D); dq += dS k in registers, and P and dS are written
//   to shared memory in q's dtype. Phase 2, per 16 keys: dv = P^T do and dk = dS^T q, the
//   transposes read by ldmatrix.trans. scale multiplies dq and dk at the end. No atomics:
//   each output row is one warp's sum in a fixed order, so the gradients' bits repeat.
//   Causal (j <= i, the top-left triangle) skips the key blocks wholly above the diagonal,
//   in both phases alike, and masks within the diagonal ones.
// One block per (batch, head): 256 blocks of 8 warps for the small GPT, one wave at two
// blocks per SM (the backward's 109 KB of shared memory at E 32, with the carveout at its
// most shared; at E 64, 141 KB, one block per SM). Causal work is uneven across the warps
// (the last query strip sees 8 key blocks, the first 1; phase 2 the reverse), and the
// gradients are stored 4 bytes a lane: the first things to look at under ncu.
// Against cuDNN's kernels on an H100: the small GPT's graphed AMP step 0.963 -> 0.894 ms, the
// tiny one's 0.185 -> 0.160. On by default; enable_tile_sdp(false) or AMPGRAD_TILE_SDP=0
// sends these calls to cuDNN.

namespace {

constexpr int kMaxTile = 128;  // L and S at most this
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// One operand: its (b, h) = (0, 0) start and its strides for b, h and the row (elements; the
// last dim is contiguous).
struct TileOperand {
  const void* p;
  int64_t sb, sh, st;
};

struct TileForwardArgs {
  TileOperand q, k, v, o;
  float* stats;  // [B, H, L] contiguous
  int32_t heads, l, s, causal;
  float scale;
  int32_t pad;
};

struct TileBackwardArgs {
  TileOperand q, k, v, o, dout, dq, dk, dv;
  const float* stats;
  int32_t heads, l, s, causal;
  float scale;
  int32_t pad;
};

// Kernel arguments are hashed as bytes (Note [Kernel graphs]): no padding.
static_assert(sizeof(TileOperand) == 32 && sizeof(TileForwardArgs) == 4 * 32 + 8 + 6 * 4);
static_assert(sizeof(TileBackwardArgs) == 8 * 32 + 8 + 6 * 4);

__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Four 8 x 8 matrices of 16-bit values; lane i gives the address of row i % 8 of matrix i / 8.
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(p)));
}
// As ldsm_x4, each matrix transposed.
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(p)));
}

// d += a (16 x 16, row major) @ b (16 x 8, column major), float accumulators.
template <class T>
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (is_half_v<T>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two floats rounded to T, the first in the low half (the lower column).
template <class T> __device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (is_half_v<T>) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
}

template <class T> __device__ __forceinline__ float2 unpack2(uint32_t v) {
  if constexpr (is_half_v<T>) return __half22float2(*reinterpret_cast<const __half2*>(&v));
  else return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v));
}

// Rows [0, rows_p) of E values from src (row stride st) into dst (row stride E + 8), zeros
// from row `rows` on; 16 bytes a thread at a time, the whole block.
template <class T, int E>
__device__ __forceinline__ void load_rows(T* dst, const T* src, int64_t st, int rows, int rows_p) {
  constexpr int kChunks = E / 8;
  for (int i = threadIdx.x; i < rows_p * kChunks; i += blockDim.x) {
    const int r = i / kChunks, c = i % kChunks;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < rows) v = *reinterpret_cast<const uint4*>(src + r * st + c * 8);
    *reinterpret_cast<uint4*>(dst + r * (E + 8) + c * 8) = v;
  }
}

template <class T> __device__ __forceinline__ const T* at(const TileOperand& t, int b, int h) {
  return static_cast<const T*>(t.p) + b * t.sb + h * t.sh;
}

// The A fragment (16 x 16) of rows r0.. and columns c0.. of a row-major tile (row stride ld).
template <class T> __device__ __forceinline__ void load_a(uint32_t (&a)[4], const T* base, int ld, int r0, int c0) {
  const int lane = threadIdx.x & 31;
  ldsm_x4(a, base + (r0 + (lane & 7) + ((lane >> 3) & 1) * 8) * ld + c0 + (lane >> 4) * 8);
}
// The A fragment of the transpose: rows c0.. (m) and columns r0.. (k) of tile^T, from rows
// r0.. and columns c0.. of the tile.
template <class T> __device__ __forceinline__ void load_a_t(uint32_t (&a)[4], const T* base, int ld, int r0, int c0) {
  const int lane = threadIdx.x & 31;
  ldsm_x4_t(a, base + (r0 + (lane & 7) + (lane >> 4) * 8) * ld + c0 + ((lane >> 3) & 1) * 8);
}
// B fragments (16 x 8, k x n) for two n tiles, where the tile is stored [n][k] (k^T from k):
// b[0], b[1] for n rows n0..n0+7, b[2], b[3] for n0+8..n0+15; k columns k0..k0+15.
template <class T> __device__ __forceinline__ void load_b_nk(uint32_t (&b)[4], const T* base, int ld, int n0, int k0) {
  const int lane = threadIdx.x & 31;
  ldsm_x4(b, base + (n0 + (lane & 7) + (lane >> 4) * 8) * ld + k0 + ((lane >> 3) & 1) * 8);
}
// B fragments for two n tiles where the tile is stored [k][n] (v as it is): k rows k0..k0+15,
// n columns n0..n0+7 (b[0], b[1]) and n0+8..n0+15 (b[2], b[3]).
template <class T> __device__ __forceinline__ void load_b_kn(uint32_t (&b)[4], const T* base, int ld, int k0, int n0) {
  const int lane = threadIdx.x & 31;
  ldsm_x4_t(b, base + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * ld + n0 + (lane >> 4) * 8);
}

template <class T, int E>
__global__ void __launch_bounds__(256) sdpa_tile_forward_kernel(TileForwardArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  constexpr int ld = E + 8;
  const int L = a.l, S = a.s, Lp = (L + 15) & ~15, Sp = (S + 15) & ~15;
  T* sq = reinterpret_cast<T*>(smem_raw);
  T* sk = sq + Lp * ld;
  T* sv = sk + Sp * ld;
  const int bh = blockIdx.x, b = bh / a.heads, h = bh % a.heads;
  load_rows<T, E>(sq, at<T>(a.q, b, h), a.q.st, L, Lp);
  load_rows<T, E>(sk, at<T>(a.k, b, h), a.k.st, S, Sp);
  load_rows<T, E>(sv, at<T>(a.v, b, h), a.v.st, S, Sp);
  __syncthreads();

  const int lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
  const int i0 = (threadIdx.x >> 5) * 16;
  const int r0 = i0 + g, r1 = r0 + 8;
  // Key pairs of tiles (16 keys) this warp's rows see.
  const int pairs = a.causal ? min(Sp, i0 + 16) / 16 : Sp / 16;
  float s[kMaxTile / 8][4];
#pragma unroll
  for (int j = 0; j < kMaxTile / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
  for (int kb = 0; kb < E / 16; ++kb) {
    uint32_t qa[4];
    load_a<T>(qa, sq, ld, i0, kb * 16);
#pragma unroll
    for (int jj = 0; jj < kMaxTile / 16; ++jj) {
      if (jj < pairs) {
        uint32_t kf[4];
        load_b_nk<T>(kf, sk, ld, jj * 16, kb * 16);
        mma<T>(s[2 * jj], qa, kf[0], kf[1]);
        mma<T>(s[2 * jj + 1], qa, kf[2], kf[3]);
      }
    }
  }
  // Scale (in log2 units), mask, row max.
  const float c = a.scale * kLog2e;
  float m0 = -INFINITY, m1 = -INFINITY;
#pragma unroll
  for (int j = 0; j < kMaxTile / 8; ++j) {
    if (j < 2 * pairs) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = j * 8 + tig * 2 + e;
        const bool in = col < S;
        s[j][e] = in && (!a.causal || col <= r0) ? s[j][e] * c : -INFINITY;
        s[j][2 + e] = in && (!a.causal || col <= r1) ? s[j][2 + e] * c : -INFINITY;
        m0 = fmaxf(m0, s[j][e]);
        m1 = fmaxf(m1, s[j][2 + e]);
      }
    }
  }
  m0 = fmaxf(m0, __shfl_xor_sync(0xffffffffu, m0, 1));
  m0 = fmaxf(m0, __shfl_xor_sync(0xffffffffu, m0, 2));
  m1 = fmaxf(m1, __shfl_xor_sync(0xffffffffu, m1, 1));
  m1 = fmaxf(m1, __shfl_xor_sync(0xffffffffu, m1, 2));
  float l0 = 0.f, l1 = 0.f;
#pragma unroll
  for (int j = 0; j < kMaxTile / 8; ++j) {
    if (j < 2 * pairs) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        s[j][e] = exp2f(s[j][e] - m0);
        s[j][2 + e] = exp2f(s[j][2 + e] - m1);
        l0 += s[j][e];
        l1 += s[j][2 + e];
      }
    }
  }
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);

  // o = P v, P rounded to T from the accumulators.
  float o[E / 8][4];
#pragma unroll
  for (int n = 0; n < E / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < kMaxTile / 16; ++kk) {
    if (kk < pairs) {
      const uint32_t pa[4] = {pack2<T>(s[2 * kk][0], s[2 * kk][1]), pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                              pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int ep = 0; ep < E / 16; ++ep) {
        uint32_t vf[4];
        load_b_kn<T>(vf, sv, ld, kk * 16, ep * 16);
        mma<T>(o[2 * ep], pa, vf[0], vf[1]);
        mma<T>(o[2 * ep + 1], pa, vf[2], vf[3]);
      }
    }
  }
  // Staged in the warp's own q rows, then stored 16 bytes a lane.
  const float inv0 = 1.f / l0, inv1 = 1.f / l1;
  __syncwarp();
#pragma unroll
  for (int n = 0; n < E / 8; ++n) {
    *reinterpret_cast<uint32_t*>(sq + r0 * ld + n * 8 + tig * 2) = pack2<T>(o[n][0] * inv0, o[n][1] * inv0);
    *reinterpret_cast<uint32_t*>(sq + r1 * ld + n * 8 + tig * 2) = pack2<T>(o[n][2] * inv1, o[n][3] * inv1);
  }
  __syncwarp();
  T* out = const_cast<T*>(at<T>(a.o, b, h));
  for (int i = lane; i < 16 * (E / 8); i += 32) {
    const int r = i0 + i / (E / 8), col = (i % (E / 8)) * 8;
    if (r < L) *reinterpret_cast<uint4*>(out + r * a.o.st + col) = *reinterpret_cast<const uint4*>(sq + r * ld + col);
  }
  if (tig == 0) {
    float* st = a.stats + static_cast<int64_t>(bh) * L;
    if (r0 < L) st[r0] = (m0 + log2f(l0)) * kLn2;
    if (r1 < L) st[r1] = (m1 + log2f(l1)) * kLn2;
  }
}

template <class T, int E>
__global__ void __launch_bounds__(256) sdpa_tile_backward_kernel(TileBackwardArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  constexpr int ld = E + 8;
  const int L = a.l, S = a.s, Lp = (L + 15) & ~15, Sp = (S + 15) & ~15, lw = Sp + 8;
  T* sq = reinterpret_cast<T*>(smem_raw);
  T* sk = sq + Lp * ld;
  T* sv = sk + Sp * ld;
  T* sdo = sv + Sp * ld;
  T* sp = sdo + Lp * ld;  // P, [Lp][Sp + 8]
  T* sds = sp + Lp * lw;  // dS
  float* sd = reinterpret_cast<float*>(sds + Lp * lw);  // D
  float* slse = sd + Lp;  // stats * log2 e; +inf past L (weights 0)
  const int bh = blockIdx.x, b = bh / a.heads, h = bh % a.heads;
  load_rows<T, E>(sq, at<T>(a.q, b, h), a.q.st, L, Lp);
  load_rows<T, E>(sk, at<T>(a.k, b, h), a.k.st, S, Sp);
  load_rows<T, E>(sv, at<T>(a.v, b, h), a.v.st, S, Sp);
  const T* dout = at<T>(a.dout, b, h);
  load_rows<T, E>(sdo, dout, a.dout.st, L, Lp);
  {
    // D = rowsum(do * o), in float from the 16-bit values, 8 at a time.
    const T* o = at<T>(a.o, b, h);
    const float* stats = a.stats + static_cast<int64_t>(bh) * L;
    for (int r = threadIdx.x; r < Lp; r += blockDim.x) {
      float d = 0.f;
      if (r < L) {
#pragma unroll
        for (int c = 0; c < E; c += 8) {
          const uint4 x = *reinterpret_cast<const uint4*>(o + r * a.o.st + c);
          const uint4 y = *reinterpret_cast<const uint4*>(dout + r * a.dout.st + c);
          const uint32_t xs[4] = {x.x, x.y, x.z, x.w}, ys[4] = {y.x, y.y, y.z, y.w};
#pragma unroll
          for (int w = 0; w < 4; ++w) {
            const float2 fx = unpack2<T>(xs[w]), fy = unpack2<T>(ys[w]);
            d = fmaf(fx.x, fy.x, d);
            d = fmaf(fx.y, fy.y, d);
          }
        }
      }
      sd[r] = d;
      slse[r] = r < L ? stats[r] * kLog2e : INFINITY;
    }
  }
  __syncthreads();

  const int lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3, warp = threadIdx.x >> 5,
            warps = blockDim.x >> 5;
  const float c = a.scale * kLog2e;
  // Phase 1: per 16 query rows, dq; P and dS to shared memory.
  for (int i0 = warp * 16; i0 < Lp; i0 += warps * 16) {
    const int r0 = i0 + g, r1 = r0 + 8;
    uint32_t qa[E / 16][4], da[E / 16][4];
#pragma unroll
    for (int kb = 0; kb < E / 16; ++kb) {
      load_a<T>(qa[kb], sq, ld, i0, kb * 16);
      load_a<T>(da[kb], sdo, ld, i0, kb * 16);
    }
    const float lse0 = slse[r0], lse1 = slse[r1], d0 = sd[r0], d1 = sd[r1];
    float dq[E / 8][4];
#pragma unroll
    for (int n = 0; n < E / 8; ++n) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.f;
    const int blocks = a.causal ? min(Sp, i0 + 16) / 16 : Sp / 16;
    for (int kc = 0; kc < blocks; ++kc) {
      const int j0 = kc * 16;
      float s[2][4] = {}, dp[2][4] = {};
#pragma unroll
      for (int kb = 0; kb < E / 16; ++kb) {
        uint32_t kf[4], vf[4];
        load_b_nk<T>(kf, sk, ld, j0, kb * 16);
        load_b_nk<T>(vf, sv, ld, j0, kb * 16);
        mma<T>(s[0], qa[kb], kf[0], kf[1]);
        mma<T>(s[1], qa[kb], kf[2], kf[3]);
        mma<T>(dp[0], da[kb], vf[0], vf[1]);
        mma<T>(dp[1], da[kb], vf[2], vf[3]);
      }
      float p[2][4], ds[2][4];
#pragma unroll
      for (int t = 0; t < 2; ++t) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int row = e < 2 ? r0 : r1, col = j0 + t * 8 + tig * 2 + (e & 1);
          const bool in = col < S && (!a.causal || col <= row);
          p[t][e] = in ? exp2f(s[t][e] * c - (e < 2 ? lse0 : lse1)) : 0.f;
          ds[t][e] = p[t][e] * (dp[t][e] - (e < 2 ? d0 : d1));
        }
        const int col = j0 + t * 8 + tig * 2;
        *reinterpret_cast<uint32_t*>(sp + r0 * lw + col) = pack2<T>(p[t][0], p[t][1]);
        *reinterpret_cast<uint32_t*>(sp + r1 * lw + col) = pack2<T>(p[t][2], p[t][3]);
        *reinterpret_cast<uint32_t*>(sds + r0 * lw + col) = pack2<T>(ds[t][0], ds[t][1]);
        *reinterpret_cast<uint32_t*>(sds + r1 * lw + col) = pack2<T>(ds[t][2], ds[t][3]);
      }
      const uint32_t dsa[4] = {pack2<T>(ds[0][0], ds[0][1]), pack2<T>(ds[0][2], ds[0][3]),
                               pack2<T>(ds[1][0], ds[1][1]), pack2<T>(ds[1][2], ds[1][3])};
#pragma unroll
      for (int ep = 0; ep < E / 16; ++ep) {
        uint32_t kf[4];
        load_b_kn<T>(kf, sk, ld, j0, ep * 16);
        mma<T>(dq[2 * ep], dsa, kf[0], kf[1]);
        mma<T>(dq[2 * ep + 1], dsa, kf[2], kf[3]);
      }
    }
    T* dqp = const_cast<T*>(at<T>(a.dq, b, h));
#pragma unroll
    for (int n = 0; n < E / 8; ++n) {
      const int col = n * 8 + tig * 2;
      if (r0 < L) *reinterpret_cast<uint32_t*>(dqp + r0 * a.dq.st + col) = pack2<T>(dq[n][0] * a.scale, dq[n][1] * a.scale);
      if (r1 < L) *reinterpret_cast<uint32_t*>(dqp + r1 * a.dq.st + col) = pack2<T>(dq[n][2] * a.scale, dq[n][3] * a.scale);
    }
  }
  __syncthreads();

  // Phase 2: per 16 keys, dv = P^T do and dk = dS^T q.
  for (int j0 = warp * 16; j0 < Sp; j0 += warps * 16) {
    float dv[E / 8][4], dk[E / 8][4];
#pragma unroll
    for (int n = 0; n < E / 8; ++n) {
      dv[n][0] = dv[n][1] = dv[n][2] = dv[n][3] = 0.f;
      dk[n][0] = dk[n][1] = dk[n][2] = dk[n][3] = 0.f;
    }
    // Causal: query blocks below j0's hold zero weights for these keys (and phase 1 left them
    // unwritten).
    for (int q0 = a.causal ? j0 : 0; q0 < Lp; q0 += 16) {
      uint32_t pa[4], dsa[4];
      load_a_t<T>(pa, sp, lw, q0, j0);
      load_a_t<T>(dsa, sds, lw, q0, j0);
#pragma unroll
      for (int ep = 0; ep < E / 16; ++ep) {
        uint32_t df[4], qf[4];
        load_b_kn<T>(df, sdo, ld, q0, ep * 16);
        load_b_kn<T>(qf, sq, ld, q0, ep * 16);
        mma<T>(dv[2 * ep], pa, df[0], df[1]);
        mma<T>(dv[2 * ep + 1], pa, df[2], df[3]);
        mma<T>(dk[2 * ep], dsa, qf[0], qf[1]);
        mma<T>(dk[2 * ep + 1], dsa, qf[2], qf[3]);
      }
    }
    T* dkp = const_cast<T*>(at<T>(a.dk, b, h));
    T* dvp = const_cast<T*>(at<T>(a.dv, b, h));
    const int r0 = j0 + g, r1 = r0 + 8;
#pragma unroll
    for (int n = 0; n < E / 8; ++n) {
      const int col = n * 8 + tig * 2;
      if (r0 < S) {
        *reinterpret_cast<uint32_t*>(dkp + r0 * a.dk.st + col) = pack2<T>(dk[n][0] * a.scale, dk[n][1] * a.scale);
        *reinterpret_cast<uint32_t*>(dvp + r0 * a.dv.st + col) = pack2<T>(dv[n][0], dv[n][1]);
      }
      if (r1 < S) {
        *reinterpret_cast<uint32_t*>(dkp + r1 * a.dk.st + col) = pack2<T>(dk[n][2] * a.scale, dk[n][3] * a.scale);
        *reinterpret_cast<uint32_t*>(dvp + r1 * a.dv.st + col) = pack2<T>(dv[n][2], dv[n][3]);
      }
    }
  }
}

TileOperand operand(const Tensor& t) {
  return {ampgrad::detail::address(t), t.stride(0), t.stride(1), t.stride(2)};
}

int padded(int64_t n) { return static_cast<int>((n + 15) / 16 * 16); }

size_t forward_smem(int e, int lp, int sp) { return static_cast<size_t>(lp + 2 * sp) * (e + 8) * 2; }
size_t backward_smem(int e, int lp, int sp) {
  return static_cast<size_t>(2 * lp + 2 * sp) * (e + 8) * 2 + static_cast<size_t>(2 * lp) * (sp + 8) * 2 +
         static_cast<size_t>(2 * lp) * sizeof(float);
}

// The shared memory a block may opt in to on `device` (bytes; 227 KB on the H200).
size_t smem_optin(int device) {
  static std::mutex mu;
  static std::map<int, size_t> known;
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find(device);
  if (it != known.end()) return it->second;
  int bytes = 0;
  AG_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return known.emplace(device, static_cast<size_t>(bytes)).first->second;
}

// Lets a kernel take the shared memory its largest case needs, with the most of the SM's
// unified memory as shared memory (two backward blocks of 109 KB per SM need it): a function
// attribute holds for the device current when it is set, so once per kernel and device.
template <auto Kernel> void allow_smem(int device, size_t bytes) {
  static std::mutex mu;
  static std::set<int> done;
  std::lock_guard<std::mutex> lock(mu);
  if (done.count(device) != 0) return;
  AG_CUDA_CHECK(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(std::min(bytes, smem_optin(device)))));
  AG_CUDA_CHECK(cudaFuncSetAttribute(Kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                     cudaSharedmemCarveoutMaxShared));
  done.insert(device);
}

// Calls f with the element type and the head dim as a constant; false when E is not 16, 32 or 64.
template <class F> bool dispatch_tile(DType dtype, int64_t e, F&& f) {
  auto by_e = [&](auto tag) {
    using T = typename decltype(tag)::type;
    switch (e) {
      case 16: f(TypeTag<T>{}, std::integral_constant<int, 16>{}); return true;
      case 32: f(TypeTag<T>{}, std::integral_constant<int, 32>{}); return true;
      case 64: f(TypeTag<T>{}, std::integral_constant<int, 64>{}); return true;
      default: return false;
    }
  };
  if (dtype == kFloat16) return by_e(TypeTag<__half>{});
  if (dtype == kBFloat16) return by_e(TypeTag<__nv_bfloat16>{});
  return false;
}

// Why the kernel cannot take q, k, v (4-D [B, H, T, E]), or "".
std::string tile_refusal(const Tensor& q, const Tensor& k, const Tensor& v) {
  if (q.dtype() != kFloat16 && q.dtype() != kBFloat16) return "float16 and bfloat16 only";
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) return "4-D only";
  const int64_t e = q.size(3);
  if ((e != 16 && e != 32 && e != 64) || k.size(3) != e || v.size(3) != e) return "head dim not 16, 32 or 64";
  if (q.size(2) > kMaxTile || k.size(2) > kMaxTile || q.size(2) == 0 || k.size(2) == 0)
    return "L or S not in [1, 128]";
  if (q.size(0) * q.size(1) > INT32_MAX || q.size(0) * q.size(1) == 0) return "batch x heads not in [1, 2^31)";
  for (const Tensor* t : {&q, &k, &v})
    if (!sdpa_operand_fits(*t)) return "strides not multiples of 8 with a last stride of 1";
  return "";
}

}  // namespace

bool sdpa_tile_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o, const Tensor& stats,
                       double scale, bool causal, std::string& why) {
  why = tile_refusal(q, k, v);
  if (why.empty() && !sdpa_operand_fits(o)) why = "output strides";
  if (!why.empty()) return false;
  KernelContext ctx(o);
  const int64_t bh = q.size(0) * q.size(1);
  TileForwardArgs args{operand(q), operand(k), operand(v), operand(o), ptr<float>(stats),
                       static_cast<int32_t>(q.size(1)), static_cast<int32_t>(q.size(2)),
                       static_cast<int32_t>(k.size(2)), causal ? 1 : 0, static_cast<float>(scale), 0};
  const int lp = padded(q.size(2)), sp = padded(k.size(2));
  if (forward_smem(static_cast<int>(q.size(3)), lp, sp) > smem_optin(ctx.device)) {
    why = "more shared memory than the device gives a block";
    return false;
  }
  return dispatch_tile(q.dtype(), q.size(3), [&](auto tag, auto e) {
    using T = typename decltype(tag)::type;
    constexpr int E = decltype(e)::value;
    allow_smem<sdpa_tile_forward_kernel<T, E>>(ctx.device, forward_smem(E, kMaxTile, kMaxTile));
    launch(ctx, sdpa_tile_forward_kernel<T, E>, static_cast<unsigned>(bh), static_cast<unsigned>(lp * 2),
           forward_smem(E, lp, sp), args);
  });
}

bool sdpa_tile_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o, const Tensor& dout,
                        const Tensor& stats, const Tensor& dq, const Tensor& dk, const Tensor& dv, double scale,
                        bool causal, std::string& why) {
  why = tile_refusal(q, k, v);
  for (const Tensor* t : {&o, &dout, &dq, &dk, &dv})
    if (why.empty() && !sdpa_operand_fits(*t)) why = "output or gradient strides";
  if (!why.empty()) return false;
  KernelContext ctx(dq);
  const int64_t bh = q.size(0) * q.size(1);
  TileBackwardArgs args{operand(q),  operand(k),  operand(v),  operand(o),
                        operand(dout), operand(dq), operand(dk), operand(dv),
                        ptr<const float>(stats), static_cast<int32_t>(q.size(1)), static_cast<int32_t>(q.size(2)),
                        static_cast<int32_t>(k.size(2)), causal ? 1 : 0, static_cast<float>(scale), 0};
  const int lp = padded(q.size(2)), sp = padded(k.size(2));
  if (backward_smem(static_cast<int>(q.size(3)), lp, sp) > smem_optin(ctx.device)) {
    why = "more shared memory than the device gives a block";
    return false;
  }
  return dispatch_tile(q.dtype(), q.size(3), [&](auto tag, auto e) {
    using T = typename decltype(tag)::type;
    constexpr int E = decltype(e)::value;
    allow_smem<sdpa_tile_backward_kernel<T, E>>(ctx.device, backward_smem(E, kMaxTile, kMaxTile));
    launch(ctx, sdpa_tile_backward_kernel<T, E>, static_cast<unsigned>(bh), static_cast<unsigned>(std::max(lp, sp) * 2),
           backward_smem(E, lp, sp), args);
  });
}

AG_REGISTER_KERNEL(kernel::sdpa_tile_forward, kCUDA, sdpa_tile_forward);
AG_REGISTER_KERNEL(kernel::sdpa_tile_backward, kCUDA, sdpa_tile_backward);

}  // namespace ampgrad::cuda
