// CUDA kernels of FP8 autocast (core/float8_kernels.h; Note [FP8 scaling] in amp/fp8.h): the
// scaled, saturating quantization with its transpose and amax, and the delayed-scaling update.
#include <cuda_fp8.h>

#include <ampgrad/core/float8.h>
#include <ampgrad/core/float8_kernels.h>
#include <ampgrad/cuda/common.cuh>
#include <ampgrad/cuda/launch.cuh>

namespace ampgrad::cuda {

namespace {

constexpr int kTile = 64;  // a block quantizes a 64 x 64 tile

__device__ __forceinline__ float derived_scale(float amax, float fp8_max, int margin, float old) {
  if (!isfinite(amax) || amax <= 0.0f) return old;
  const float s = fp8_max / amax / ldexpf(1.0f, margin);
  return isfinite(s) ? s : old;
}

// |v| as an int: non-negative floats (NaN included, above infinity) order as their bits.
__device__ __forceinline__ void atomic_amax(float* amax, float v) {
  atomicMax(reinterpret_cast<int*>(amax), __float_as_int(v));
}

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
template <class T>
__global__ void amax_kernel(const T* x, int64_t rows, int64_t cols, int64_t sr, int64_t sc, float* amax) {
  const int64_t n = rows * cols;
  float m = 0.0f;
  bool nan = false;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i - r * cols;
    const float v = fabsf(static_cast<float>(to_acc(x[r * sr + c * sc])));
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

// A block quantizes a 64 x 64 tile with 16 x 16 threads: thread (tx, ty) reads 4 adjacent
// values of rows ty, ty + 16, ... (one 8- or 16-byte load where the row is contiguous and
// aligned), and writes 4 bytes of out's rows and 4 of out_t's (the tile transposed through
// shared memory).
template <class T, class Format>
__global__ void quantize_kernel(const T* x, int64_t rows, int64_t cols, int64_t sr, int64_t sc, float* scale,
                                float* amax, float* scale_inv, unsigned long long* counts, bool current,
                                float fp8_max, int margin, uint8_t* out, uint8_t* out_t) {
  __shared__ uint8_t tile[kTile][kTile + 4];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kTile, c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const float s = current ? derived_scale(*amax, fp8_max, margin, *scale) : *scale;
  if (blockIdx.x == 0 && blockIdx.y == 0 && tx == 0 && ty == 0) {
    if (current) *scale = s;
    *scale_inv = 1.0f / s;
  }
  const float fmax = Format::decode(Format::kMaxFinite);
  const bool full = r0 + kTile <= rows && c0 + kTile <= cols;
  const bool vec = full && sc == 1 && sr % 4 == 0 && (reinterpret_cast<uintptr_t>(x) % (4 * sizeof(T))) == 0;
  int mbits = 0;
  unsigned saturated = 0, flushed = 0;
#pragma unroll
  for (int i = 0; i < kTile / 16; ++i) {
    const int lr = ty + 16 * i;
    const int64_t r = r0 + lr, c = c0 + 4 * tx;
    float v[4];
    if (vec) {
      const Vec<T, 4> in = *reinterpret_cast<const Vec<T, 4>*>(x + r * sr + c);
#pragma unroll
      for (int j = 0; j < 4; ++j) v[j] = static_cast<float>(to_acc(in.v[j]));
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j)
        v[j] = r < rows && c + j < cols ? static_cast<float>(to_acc(x[r * sr + (c + j) * sc])) : 0.0f;
    }
    // The hardware's conversion (cvt.rn.satfinite, sm_89+): round to nearest even, saturated,
    // as Format::encode(y, true) bit for bit but for a NaN's sign (unspecified).
    float y[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      y[j] = v[j] * s;
      mbits = max(mbits, __float_as_int(fabsf(v[j])));  // a NaN's bits win
    }
    constexpr __nv_fp8_interpretation_t kind = std::is_same_v<Format, ampgrad::detail::E5M2> ? __NV_E5M2 : __NV_E4M3;
    const uint32_t packed =
        static_cast<uint32_t>(__nv_cvt_float2_to_fp8x2(make_float2(y[0], y[1]), __NV_SATFINITE, kind)) |
        static_cast<uint32_t>(__nv_cvt_float2_to_fp8x2(make_float2(y[2], y[3]), __NV_SATFINITE, kind)) << 16;
    if (counts) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        saturated += fabsf(y[j]) > fmax;
        flushed += v[j] != 0.0f && ((packed >> (8 * j)) & 0x7F) == 0;
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
  __syncthreads();
  const bool store4 = full && cols % 4 == 0 && rows % 4 == 0;
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
    const float s = derived_scale(m, fp8_max[i], margin, scale[i]);
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
               sc, amax);
      }
      if (rows == 0 || cols == 0) return;
      const dim3 grid(static_cast<unsigned>((cols + kTile - 1) / kTile), static_cast<unsigned>((rows + kTile - 1) / kTile));
      auto run = [&](auto kern) {
        launch(ctx, kern, grid, dim3(16, 16), 0, xp, rows, cols, sr, sc, ptr<float>(q.scale), amax,
               ptr<float>(q.scale_inv), counts, q.current, q.fp8_max, q.margin, o, ot);
      };
      if (out.dtype() == kFloat8_e4m3fn) run(quantize_kernel<T, ampgrad::detail::E4M3FN>);
      else run(quantize_kernel<T, ampgrad::detail::E5M2>);
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
