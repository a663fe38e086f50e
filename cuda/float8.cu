// CUDA kernels of FP8 autocast (core/float8_kernels.h; Note [FP8 scaling] in amp/fp8.h): the
// scaled, saturating quantization with its transpose and amax, and the delayed-scaling update.
#include <cuda_fp8.h>

#include <ampgrad/core/float8.h>
#include <ampgrad/core/float8_kernels.h>
#include <ampgrad/core/step_formulas.h>
#include <ampgrad/cuda/common.cuh>
#include <ampgrad/cuda/launch.cuh>

namespace ampgrad::cuda {

namespace {

constexpr int kTile = 64;  // a block quantizes a 64 x 64 tile

using step_formulas::fp8_scale;  // Note [FP8 scaling]

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
template <class I> __device__ __forceinline__ I warp_sum(I v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// max |x| of the [rows, cols] view into amax (zeroed before), for current scaling.
// A mask (Fp8Quantize::mask) zeroes x where it is <= 0 (relu's backward: a NaN mask passes x).
template <class T>
__global__ void amax_kernel(const T* x, int64_t rows, int64_t cols, int64_t sr, int64_t sc,
                            const __nv_bfloat16* mask, int64_t msr, int64_t msc, float* amax) {
  const int64_t n = rows * cols;
  float m = 0.0f;
  bool nan = false;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i - r * cols;
    float v = fabsf(static_cast<float>(to_acc(x[r * sr + c * sc])));
    if (mask && __bfloat162float(mask[r * msr + c * msc]) <= 0.0f) v = 0.0f;
    nan |= isnan(v);
    m = fmaxf(m, v);
  }
  if (nan) m = __int_as_float(0x7FC00000);
  // fmaxf drops a NaN: a lane that saw one sends NaN's bits, which win as an int.
  int bits = __float_as_int(m);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) bits = max(bits, __shfl_xor_sync(0xffffffffu, bits, o));
  int* a = reinterpret_cast<int*>(amax);
  if ((threadIdx.x & 31) == 0 && bits > *reinterpret_cast<volatile int*>(a)) atomicMax(a, bits);
}

// The 4 values at columns c.. c + 3 of rows r, r + 16, ... of p [rows, cols] (strides sr, sc)
// as floats, zeros outside: with vec (whole tile, contiguous 4-aligned rows) one load a row,
// every load issued before any is converted.
template <int kRows, class E>
__device__ __forceinline__ void load_rows(const E* __restrict__ p, int64_t r, int64_t c, int64_t rows, int64_t cols,
                                          int64_t sr, int64_t sc, bool vec, float (&v)[kRows][4]) {
  if (vec) {
    Vec<E, 4> in[kRows];
#pragma unroll
    for (int i = 0; i < kRows; ++i) in[i] = *reinterpret_cast<const Vec<E, 4>*>(p + (r + 16 * i) * sr + c);
#pragma unroll
    for (int i = 0; i < kRows; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) v[i][j] = static_cast<float>(to_acc(in[i].v[j]));
  } else {
#pragma unroll
    for (int i = 0; i < kRows; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
        v[i][j] = r + 16 * i < rows && c + j < cols ? static_cast<float>(to_acc(p[(r + 16 * i) * sr + (c + j) * sc]))
                                                    : 0.0f;
  }
}

// A block quantizes a 64 x 64 tile with 16 x 16 threads: thread (tx, ty) reads 4 adjacent
// values of rows ty, ty + 16, ... (one 8- or 16-byte load where the row is contiguous and
// aligned), and writes 4 bytes of out's rows and 4 of out_t's (the tile transposed through
// shared memory). With a mask, the values where it is <= 0 are zeros; with partials, the
// block writes its tile's column sums to row blockIdx.y of partials [row tiles, cols]
// (colsum_kernel adds the rows up, in order).
// kAligned: every tile whole, rows contiguous and 4-aligned, x's and the mask's (a separate
// instantiation without the general paths: fewer registers, more blocks per SM).
template <class T, class Format, bool kAligned>
__global__ void __launch_bounds__(256)
    quantize_kernel(const T* __restrict__ x, int64_t rows, int64_t cols, int64_t sr, int64_t sc,
                    const __nv_bfloat16* __restrict__ mask, int64_t msr, int64_t msc, float* partials, float* scale,
                    float* amax, float* scale_inv, unsigned long long* counts, bool current, float fp8_max, int margin,
                    uint8_t* out, uint8_t* out_t) {
  __shared__ uint8_t tile[kTile][kTile + 4];
  __shared__ float col_part[16][kTile];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kTile, c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const float s = current ? fp8_scale(*amax, fp8_max, margin, *scale) : *scale;
  if (blockIdx.x == 0 && blockIdx.y == 0 && tx == 0 && ty == 0) {
    if (current) *scale = s;
    *scale_inv = 1.0f / s;
  }
  const float fmax = Format::decode(Format::kMaxFinite);
  const bool full = kAligned || (r0 + kTile <= rows && c0 + kTile <= cols);
  const bool vec =
      kAligned || (full && sc == 1 && sr % 4 == 0 && (reinterpret_cast<uintptr_t>(x) % (4 * sizeof(T))) == 0);
  const bool mvec =
      kAligned || (vec && mask && msc == 1 && msr % 4 == 0 && (reinterpret_cast<uintptr_t>(mask) % 8) == 0);
  int mbits = 0;
  unsigned saturated = 0, flushed = 0;
  float csum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  // Every load of the tile first, then the arithmetic: all of a thread's loads in flight at
  // once (interleaved with the shared-memory stores, the loop kept one at a time and the
  // kernel ran at a quarter to a half of the memory's bandwidth, ncu on the H200).
  constexpr int kRows = kTile / 16;
  float v[kRows][4];
  load_rows<kRows>(x, r0 + ty, c0 + 4 * tx, rows, cols, sr, sc, vec, v);
  if (mask) {
    float mk[kRows][4];
    load_rows<kRows>(mask, r0 + ty, c0 + 4 * tx, rows, cols, msr, msc, mvec, mk);
#pragma unroll
    for (int i = 0; i < kRows; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (mk[i][j] <= 0.0f) v[i][j] = 0.0f;
  }
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int lr = ty + 16 * i;
#pragma unroll
    for (int j = 0; j < 4; ++j) csum[j] += v[i][j];
    // The hardware's conversion (cvt.rn.satfinite, sm_89+): round to nearest even, saturated,
    // as Format::encode(y, true) bit for bit but for a NaN's sign (unspecified).
    float y[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      y[j] = v[i][j] * s;
      mbits = max(mbits, __float_as_int(fabsf(v[i][j])));  // a NaN's bits win
    }
    constexpr __nv_fp8_interpretation_t kind = std::is_same_v<Format, ampgrad::detail::E5M2> ? __NV_E5M2 : __NV_E4M3;
    const uint32_t packed =
        static_cast<uint32_t>(__nv_cvt_float2_to_fp8x2(make_float2(y[0], y[1]), __NV_SATFINITE, kind)) |
        static_cast<uint32_t>(__nv_cvt_float2_to_fp8x2(make_float2(y[2], y[3]), __NV_SATFINITE, kind)) << 16;
    if (counts) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        saturated += fabsf(y[j]) > fmax;
        flushed += v[i][j] != 0.0f && ((packed >> (8 * j)) & 0x7F) == 0;
      }
    }
    *reinterpret_cast<uint32_t*>(&tile[lr][4 * tx]) = packed;
  }
  if (!current) {
    // One atomic per block at most, and none once amax holds as much: thousands of blocks
    // contending for one address would serialize (measured: the kernel ran at a third of its
    // bandwidth with one atomic per warp).
    __shared__ int warp_bits[8];
    int bits = mbits;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) bits = max(bits, __shfl_xor_sync(0xffffffffu, bits, o));
    const int lane = threadIdx.x + 16 * threadIdx.y;
    if (lane % 32 == 0) warp_bits[lane / 32] = bits;
    __syncthreads();
    if (lane == 0) {
      for (int w = 1; w < 8; ++w) bits = max(bits, warp_bits[w]);
      int* a = reinterpret_cast<int*>(amax);
      if (bits > *reinterpret_cast<volatile int*>(a)) atomicMax(a, bits);
    }
  }
  if (counts) {
    const unsigned sat = warp_sum(saturated), fl = warp_sum(flushed);
    if ((threadIdx.x + 16 * threadIdx.y) % 32 == 0 && (sat | fl)) {
      atomicAdd(counts, static_cast<unsigned long long>(sat));
      atomicAdd(counts + 1, static_cast<unsigned long long>(fl));
    }
  }
  if (partials) {
#pragma unroll
    for (int j = 0; j < 4; ++j) col_part[ty][4 * tx + j] = csum[j];
  }
  __syncthreads();
  if (partials) {
    const int lane = tx + 16 * ty;
    if (lane < kTile && c0 + lane < cols) {
      float t = 0.0f;
#pragma unroll
      for (int k = 0; k < 16; ++k) t += col_part[k][lane];
      partials[static_cast<int64_t>(blockIdx.y) * cols + c0 + lane] = t;
    }
  }
  const bool store4 = kAligned || (full && cols % 4 == 0 && rows % 4 == 0);
#pragma unroll
  for (int i = 0; i < kTile / 16; ++i) {
    const int l = ty + 16 * i;
    if (store4) {
      *reinterpret_cast<uint32_t*>(out + (r0 + l) * cols + c0 + 4 * tx) = *reinterpret_cast<const uint32_t*>(&tile[l][4 * tx]);
      if (out_t) {
        uint32_t t = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) t |= static_cast<uint32_t>(tile[4 * tx + j][l]) << (8 * j);
        *reinterpret_cast<uint32_t*>(out_t + (c0 + l) * rows + r0 + 4 * tx) = t;
      }
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int k = 4 * tx + j;
        if (r0 + l < rows && c0 + k < cols) out[(r0 + l) * cols + c0 + k] = tile[l][k];
        if (out_t && c0 + l < cols && r0 + k < rows) out_t[(c0 + l) * rows + r0 + k] = tile[k][l];
      }
    }
  }
}

// sums[c] = the sum of partials [tiles, cols]'s column c, in a fixed order: a block of 32 x 8
// threads takes 32 columns, thread (x, y) adds rows y, y + 8, ..., then the 8 sums in order.
// (One thread per column, 4096 columns made 16 blocks: 10 us for 1 MB, latency-bound.)
__global__ void colsum_kernel(const float* __restrict__ partials, int64_t tiles, int64_t cols, float* sums) {
  __shared__ float part[8][33];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float t = 0.0f;
  if (c < cols)
    for (int64_t i = threadIdx.y; i < tiles; i += 8) t += partials[i * cols + c];
  part[threadIdx.y][threadIdx.x] = t;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float u = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; ++k) u += part[k][threadIdx.x];
    sums[c] = u;
  }
}

// One block per meta (Note [FP8 scaling]).
__global__ void update_kernel(float* amax, float* history, int32_t* pos, const float* fp8_max, float* scale,
                              float* scale_inv, int64_t len, int margin, bool most_recent) {
  const int64_t i = blockIdx.x;
  float* h = history + i * len;
  const float a = amax[i];
  const bool finite = isfinite(a);
  __syncthreads();
  if (threadIdx.x == 0) {
    const int p = pos[i];
    h[p] = finite ? a : 0.0f;
    pos[i] = static_cast<int32_t>((p + 1) % len);
    amax[i] = 0.0f;
  }
  __syncthreads();
  if (!finite) return;  // kept scale; every thread returns alike
  float m = 0.0f;
  if (most_recent) {
    m = a;
  } else {
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) m = fmaxf(m, h[j]);
    __shared__ float part[32];
    m = warp_max(m);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = m;
    __syncthreads();
    if (threadIdx.x < 32) {
      m = threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : 0.0f;
      m = warp_max(m);
    }
  }
  if (threadIdx.x == 0) {
    const float s = fp8_scale(m, fp8_max[i], margin, scale[i]);
    scale[i] = s;
    scale_inv[i] = 1.0f / s;
  }
}

void fp8_quantize(const Tensor& x, const kernel::Fp8Quantize& q, const Tensor& out, const Tensor& out_t) {
  KernelContext ctx(x);
  const int64_t rows = x.size(0), cols = x.size(1), sr = x.stride(0), sc = x.stride(1);
  float* amax = ptr<float>(q.amax);
  auto* counts = q.counts.defined() ? ptr<unsigned long long>(q.counts) : nullptr;
  uint8_t* o = ptr<uint8_t>(out);
  uint8_t* ot = out_t.defined() ? ptr<uint8_t>(out_t) : nullptr;
  kernel::check_fp8_quantize(x, q);
  AG_CHECK((rows + kTile - 1) / kTile <= 65535,
           "fp8 quantization: at most {} rows on CUDA (65535 tiles of {}), got {}", int64_t{65535} * kTile, kTile, rows);
  const __nv_bfloat16* mask = q.mask.defined() ? ptr<__nv_bfloat16>(q.mask) : nullptr;
  const int64_t msr = q.mask.defined() ? q.mask.stride(0) : 0, msc = q.mask.defined() ? q.mask.stride(1) : 0;
  dispatch_all(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float> || is_reduced_v<T>) {
      const T* xp = ptr<T>(x);
      if (q.current) {
        launch_call(
            ctx,
            [&] {
              CallKey key;
              return key.add(uint64_t{4}).add(static_cast<void*>(amax)).add(uint64_t{0}).add(uint64_t{4}).add(
                  static_cast<const void*>(ctx.stream));  // 4: a fill, as kernel::fill's
            },
            [&] { AG_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), ctx.stream)); });
        launch(ctx, amax_kernel<T>, ctx.grid_stride_blocks(rows * cols) / 4 + 1, kBlockSize, 0, xp, rows, cols, sr,
               sc, mask, msr, msc, amax);
      }
      if (rows == 0 || cols == 0) {
        if (q.col_sums.defined() && cols > 0) Tensor(q.col_sums).zero_();  // a handle: the same storage
        return;
      }
      const int64_t tiles = (rows + kTile - 1) / kTile;
      const dim3 grid(static_cast<unsigned>((cols + kTile - 1) / kTile), static_cast<unsigned>(tiles));
      const Tensor partials =
          q.col_sums.defined() ? empty({tiles, cols}, TensorOptions(kFloat32).device(x.device())) : Tensor();
      float* pp = partials.defined() ? ptr<float>(partials) : nullptr;
      auto run = [&](auto kern) {
        launch(ctx, kern, grid, dim3(16, 16), 0, xp, rows, cols, sr, sc, mask, msr, msc, pp, ptr<float>(q.scale),
               amax, ptr<float>(q.scale_inv), counts, q.current, q.fp8_max, q.margin, o, ot);
      };
      const bool aligned = rows % kTile == 0 && cols % kTile == 0 && sc == 1 && sr % 4 == 0 &&
                           reinterpret_cast<uintptr_t>(xp) % (4 * sizeof(T)) == 0 &&
                           (!mask || (msc == 1 && msr % 4 == 0 && reinterpret_cast<uintptr_t>(mask) % 8 == 0));
      using ampgrad::detail::E4M3FN, ampgrad::detail::E5M2;
      if (out.dtype() == kFloat8_e4m3fn)
        aligned ? run(quantize_kernel<T, E4M3FN, true>) : run(quantize_kernel<T, E4M3FN, false>);
      else
        aligned ? run(quantize_kernel<T, E5M2, true>) : run(quantize_kernel<T, E5M2, false>);
      if (pp)
        launch(ctx, colsum_kernel, static_cast<unsigned>((cols + 31) / 32), dim3(32, 8), 0, static_cast<const float*>(pp),
               tiles, cols, ptr<float>(q.col_sums));
    } else {
      AG_CHECK(false, "fp8 quantization: x must be float32, float16 or bfloat16, got {}", dtype_name(x.dtype()));
    }
  });
}

void fp8_update_scales(const kernel::Fp8Update& u) {
  if (u.n == 0) return;
  KernelContext ctx(u.amax);
  launch(ctx, update_kernel, static_cast<unsigned>(u.n), 256, 0, ptr<float>(u.amax), ptr<float>(u.history),
         ptr<int32_t>(u.pos), ptr<const float>(u.fp8_max), ptr<float>(u.scale), ptr<float>(u.scale_inv),
         u.history.size(1), u.margin, u.most_recent);
}

}  // namespace

AG_REGISTER_KERNEL(kernel::fp8_quantize, kCUDA, fp8_quantize);
AG_REGISTER_KERNEL(kernel::fp8_update_scales, kCUDA, fp8_update_scales);

}  // namespace ampgrad::cuda
