// CUDA copy (any strides, any pair of dtypes: a cast), fill and arange.
#include <cstring>

#include <ampgrad/cuda/common.cuh>
#include <ampgrad/cuda/launch.cuh>
#include <ampgrad/core/kernels.h>

namespace ampgrad::cuda {

namespace {

// Same dtype: moves raw elements, so one instantiation per element size.
template <class E> __global__ void copy_kernel(const E* src, E* dst, Geometry<2> g, uint32_t n) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int64_t off[2];
  geometry_offsets(g, i, off);
  dst[off[0]] = src[off[1]];
}

// Different dtypes: operand 0 is dst, 1 is src (Note [Strided geometry]; contiguous
// operands collapse to one dim, so the contiguous case does no index division).
template <class D, class S> __global__ void cast_kernel(const S* src, D* dst, Geometry<2> g, uint32_t n) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int64_t off[2];
  geometry_offsets(g, i, off);
  dst[off[0]] = cast_value<D>(src[off[1]]);
}

// Flat arrays (Note [Dense fast path]) of 4-element vectors: dst 4 * sizeof(D)-aligned, src
// 4 * sizeof(S)-aligned; a scalar tail.
template <class D, class S> __global__ void cast_flat_kernel(const S* src, D* dst, int64_t n) {
  const int64_t nvec = n / 4;
  const int64_t gid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t v = gid; v < nvec; v += step) {
    const Vec<S, 4> in = reinterpret_cast<const Vec<S, 4>*>(src)[v];
    Vec<D, 4> r;
#pragma unroll
    for (int j = 0; j < 4; ++j) r.v[j] = cast_value<D>(in.v[j]);
    reinterpret_cast<Vec<D, 4>*>(dst)[v] = r;
  }
  const int64_t t = nvec * 4 + gid;
  if (t < n) dst[t] = cast_value<D>(src[t]);
}

template <class E> __global__ void fill_kernel(E* dst, E value, Geometry<1> g, uint32_t n) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int64_t off[1];
  geometry_offsets(g, i, off);
  dst[off[0]] = value;
}

template <class D> __global__ void arange_kernel(D* dst, double start, double step, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = cast_value<D>(start + step * static_cast<double>(i));
}

// The bits `value` has in `t`, converted as the CPU's fill does.
uint64_t fill_bits(DType t, double value) {
  uint64_t bits = 0;
  visit_dtype_with_float8(t, [&](auto tag) {
    using T = decltype(tag);
    T v;
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16> || std::is_same_v<T, Float8_e4m3fn> ||
                  std::is_same_v<T, Float8_e5m2>) {
      v = T(static_cast<float>(value));
    } else {
      v = static_cast<T>(value);
    }
    std::memcpy(&bits, &v, sizeof(T));
  });
  return bits;
}

}  // namespace

void copy(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  KernelContext ctx(dst);
  const bool flat = flat_together({&dst, &src});
  if (dst.dtype() == src.dtype() && flat) {
    // A byte copy goes through run_call like a kernel (Note [Kernel graphs]).
    void* d = ampgrad::detail::address(dst);
    const void* s = ampgrad::detail::address(src);
    const size_t n = dst.nbytes();
    launch_call(
        ctx,
        [&] {
          CallKey key;
          return key.add(uint64_t{5}).add(d).add(s).add(uint64_t{n}).add(static_cast<const void*>(ctx.stream));  // 5: a copy
        },
        [&] { AG_CUDA_CHECK(cudaMemcpyAsync(d, s, n, cudaMemcpyDeviceToDevice, ctx.stream)); });
    return;
  }
  auto g = make_geometry<2>(dst.shape(), {&dst.strides(), &src.strides()});
  if (dst.dtype() == src.dtype()) {
    dispatch_size(dst.element_size(), [&](auto tag) {
      using E = typename decltype(tag)::type;
      const E* sp = ptr<const E>(src);
      E* dp = ptr<E>(dst);
      for_each_chunk(g, [&](const Geometry<2>& geo, uint32_t count, const std::array<int64_t, 2>& off) {
        launch(ctx, copy_kernel<E>, blocks_for(count), kBlockSize, 0, sp + off[1], dp + off[0], geo, count);
      });
    });
    return;
  }
  dispatch_with_float8(dst.dtype(), [&](auto dtag) {
    using D = typename decltype(dtag)::type;
    dispatch_with_float8(src.dtype(), [&](auto stag) {
      using S = typename decltype(stag)::type;
      if constexpr (!std::is_same_v<D, S>) {  // equal dtypes took the raw path above
        const S* sp = ptr<const S>(src);
        D* dp = ptr<D>(dst);
        if (flat && is_aligned(sp, 4 * sizeof(S)) && is_aligned(dp, 4 * sizeof(D))) {
          const int64_t n = dst.numel();
          launch(ctx, cast_flat_kernel<D, S>, ctx.grid_stride_blocks(n / 4 + 1), kBlockSize, 0, sp, dp, n);
          return;
        }
        for_each_chunk(g, [&](const Geometry<2>& geo, uint32_t count, const std::array<int64_t, 2>& off) {
          launch(ctx, cast_kernel<D, S>, blocks_for(count), kBlockSize, 0, sp + off[1], dp + off[0], geo, count);
        });
      }
    });
  });
}

void fill(const Tensor& dst, double value) {
  if (dst.numel() == 0) return;
  KernelContext ctx(dst);
  const size_t es = dst.element_size();
  const uint64_t bits = fill_bits(dst.dtype(), value);
  bool bytes_equal = true;  // e.g. zero: a memset does it
  for (size_t b = 1; b < es; ++b) bytes_equal = bytes_equal && ((bits >> (8 * b)) & 0xff) == (bits & 0xff);
  if (dst.is_contiguous() && bytes_equal) {
    void* d = ampgrad::detail::address(dst);
    const int byte = static_cast<int>(bits & 0xff);
    const size_t n = dst.nbytes();
    launch_call(
        ctx,
        [&] {
          CallKey key;
          return key.add(uint64_t{4}).add(d).add(uint64_t(byte)).add(uint64_t{n}).add(static_cast<const void*>(ctx.stream));  // 4: a fill
        },
        [&] { AG_CUDA_CHECK(cudaMemsetAsync(d, byte, n, ctx.stream)); });
    return;
  }
  auto g = make_geometry<1>(dst.shape(), {&dst.strides()});
  dispatch_size(es, [&](auto tag) {
    using E = typename decltype(tag)::type;
    E* dp = ptr<E>(dst);
    const E v = static_cast<E>(bits);
    for_each_chunk(g, [&](const Geometry<1>& geo, uint32_t count, const std::array<int64_t, 1>& off) {
      launch(ctx, fill_kernel<E>, blocks_for(count), kBlockSize, 0, dp + off[0], v, geo, count);
    });
  });
}

void arange(const Tensor& dst, double start, double step) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  KernelContext ctx(dst);
  dispatch_all(dst.dtype(), [&](auto tag) {
    using D = typename decltype(tag)::type;
    launch(ctx, arange_kernel<D>, blocks_for(static_cast<uint32_t>(n)), kBlockSize, 0, ptr<D>(dst), start, step, n);
  });
}

// Host <-> device bytes (Note [CUDA stream] on when each returns).
void copy_across_devices(const Tensor& dst, const Tensor& src) {
  if (dst.is_cuda()) memcpy_h2d(ampgrad::detail::address(dst), ampgrad::detail::address(src), src.nbytes());
  else memcpy_d2h(ampgrad::detail::address(dst), ampgrad::detail::address(src), src.nbytes());
}

AG_REGISTER_KERNEL(kernel::copy, kCUDA, copy);
AG_REGISTER_KERNEL(kernel::fill, kCUDA, fill);
AG_REGISTER_KERNEL(kernel::arange, kCUDA, arange);
AG_REGISTER_KERNEL(kernel::copy_across_devices, kCUDA, copy_across_devices);

}  // namespace ampgrad::cuda
