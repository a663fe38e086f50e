// Shared pieces of the CUDA kernels: device element types and float conversions, 16-byte
// vectors, dtype dispatch, launch context, and strided geometry with 32-bit indexing.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <array>
#include <climits>
#include <cstdint>
#include <type_traits>
#include <vector>

#include <ampgrad/core/kernel_kinds.h>
#include <ampgrad/core/tensor.h>
#include <ampgrad/cuda/check.h>
#include <ampgrad/cuda/runtime.h>

namespace ampgrad::cuda {

// ---- element types ------------------------------------------------------------------------

// Kernels see __half and __nv_bfloat16 where the host sees Half and BFloat16 (same 16 bits).
template <class T> struct TypeTag { using type = T; };

template <class T> inline constexpr bool is_half_v = std::is_same_v<T, __half>;
template <class T> inline constexpr bool is_bf16_v = std::is_same_v<T, __nv_bfloat16>;
template <class T> inline constexpr bool is_reduced_v = is_half_v<T> || is_bf16_v<T>;
template <class T>
inline constexpr bool is_float_v = is_reduced_v<T> || std::is_same_v<T, float> || std::is_same_v<T, double>;

// The type a kernel computes in, as core's acc_t: float for 16-bit floats, int64 for integers.
template <class T> struct DevAcc { using type = T; };
template <> struct DevAcc<__half> { using type = float; };
template <> struct DevAcc<__nv_bfloat16> { using type = float; };
template <> struct DevAcc<int32_t> { using type = int64_t; };
template <> struct DevAcc<uint8_t> { using type = int64_t; };
template <> struct DevAcc<bool> { using type = int64_t; };
template <class T> using dacc_t = typename DevAcc<T>::type;

template <class T> __device__ __forceinline__ dacc_t<T> to_acc(T v) {
  if constexpr (is_half_v<T>) return __half2float(v);
  else if constexpr (is_bf16_v<T>) return __bfloat162float(v);
  else return static_cast<dacc_t<T>>(v);
}

// Rounds to nearest even as core/half.h does on the host. Doubles reach 16-bit types through
// float, as on the host (Half has no double constructor).
template <class T, class A> __device__ __forceinline__ T from_acc(A v) {
  if constexpr (is_half_v<T>) return __float2half_rn(static_cast<float>(v));
  else if constexpr (is_bf16_v<T>) return __float2bfloat16_rn(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, bool>) return v != A(0);
  else return static_cast<T>(v);
}

template <class T> inline constexpr bool is_float8_v = std::is_same_v<T, Float8_e4m3fn> || std::is_same_v<T, Float8_e5m2>;

// Any dtype to any dtype, for copy. Float8 goes through float with core/float8.h's own
// conversions, so the device rounds as the host does (Note [Float8 tensors] in core/dtype.h).
template <class D, class S> __device__ __forceinline__ D cast_value(S s) {
  if constexpr (std::is_same_v<D, S>) return s;
  else if constexpr (is_float8_v<S>) return cast_value<D>(static_cast<float>(s));
  else if constexpr (is_float8_v<D>) {
    if constexpr (is_half_v<S>) return D(__half2float(s));
    else if constexpr (is_bf16_v<S>) return D(__bfloat162float(s));
    else return D(static_cast<float>(s));
  }
  else if constexpr (is_half_v<S>) return from_acc<D>(__half2float(s));
  else if constexpr (is_bf16_v<S>) return from_acc<D>(__bfloat162float(s));
  else return from_acc<D>(s);
}

// ---- 16-byte vectors ----------------------------------------------------------------------

template <class T> inline constexpr int kVecSize = 16 / sizeof(T);

template <class T, int N> struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

inline bool is_aligned(const void* p, size_t alignment) {
  return reinterpret_cast<uintptr_t>(p) % alignment == 0;
}

// ---- dtype dispatch -----------------------------------------------------------------------

// f(TypeTag<T>{}) with T the device type of `t`.
template <class F> decltype(auto) dispatch_all(DType t, F&& f) {
  switch (t) {
    case DType::Float32: return f(TypeTag<float>{});
    case DType::Float16: return f(TypeTag<__half>{});
    case DType::BFloat16: return f(TypeTag<__nv_bfloat16>{});
    case DType::Float64: return f(TypeTag<double>{});
    case DType::Int64: return f(TypeTag<int64_t>{});
    case DType::Int32: return f(TypeTag<int32_t>{});
    case DType::Bool: return f(TypeTag<bool>{});
    case DType::UInt8: return f(TypeTag<uint8_t>{});
    case DType::Float8_e4m3fn:
    case DType::Float8_e5m2: ampgrad::detail::float8_unsupported(t);
  }
  return f(TypeTag<float>{});  // unreachable: every enumerator is handled above
}

// As dispatch_all, float8 dtypes included: the kernels that move and convert values.
template <class F> decltype(auto) dispatch_with_float8(DType t, F&& f) {
  if (t == DType::Float8_e4m3fn) return f(TypeTag<Float8_e4m3fn>{});
  if (t == DType::Float8_e5m2) return f(TypeTag<Float8_e5m2>{});
  return dispatch_all(t, std::forward<F>(f));
}

template <class F> decltype(auto) dispatch_floating(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::Float32: return f(TypeTag<float>{});
    case DType::Float16: return f(TypeTag<__half>{});
    case DType::BFloat16: return f(TypeTag<__nv_bfloat16>{});
    case DType::Float64: return f(TypeTag<double>{});
    default: break;
  }
  AG_CHECK(false, "{} on cuda: dtype {} is not supported (expected a floating dtype)", op, dtype_name(t));
  return f(TypeTag<float>{});  // unreachable: AG_CHECK threw
}

// Calls f(TypeTag<T>{}, TypeTag<O>{}) for a floating `narrow` dtype T and `wide` O, which is T
// or float32 for a 16-bit T: the kernels that read a 16-bit tensor as it is into float32
// (Note [Reading 16-bit inputs] in ops/softmax.cpp).
template <class F> void dispatch_widened(DType narrow, DType wide, const char* op, F&& f) {
  dispatch_floating(narrow, op, [&](auto tn) {
    using T = typename decltype(tn)::type;
    if (wide == narrow) {
      f(tn, tn);
    } else {
      AG_INTERNAL_ASSERT(wide == DType::Float32 && is_reduced_float(narrow), "{}: {} read into {}", op,
                         dtype_name(narrow), dtype_name(wide));
      if constexpr (is_reduced_v<T>) f(tn, TypeTag<float>{});
    }
  });
}

// Unsigned integer of the given byte size: kernels that only move elements dispatch on size.
template <size_t N> struct Bits;
template <> struct Bits<1> { using type = uint8_t; };
template <> struct Bits<2> { using type = uint16_t; };
template <> struct Bits<4> { using type = uint32_t; };
template <> struct Bits<8> { using type = uint64_t; };

template <class F> decltype(auto) dispatch_size(size_t size, F&& f) {
  switch (size) {
    case 1: return f(TypeTag<uint8_t>{});
    case 2: return f(TypeTag<uint16_t>{});
    case 4: return f(TypeTag<uint32_t>{});
    default: return f(TypeTag<uint64_t>{});
  }
}

// ---- launch context -----------------------------------------------------------------------

constexpr int kBlockSize = 256;

// Makes the tensor's device current for a launcher's scope and fetches its stream.
class KernelContext {
 public:
  explicit KernelContext(const Tensor& t)
      : guard_(t.device().index),
        device(t.device().index),
        stream(launch_stream(t.device().index)),  // Note [Launch batches]
        sm_count(device_properties(t.device().index).sm_count) {}
  KernelContext(const KernelContext&) = delete;
  KernelContext& operator=(const KernelContext&) = delete;

 private:
  DeviceGuard guard_;

 public:
  int device;
  cudaStream_t stream;
  int sm_count;

  // Blocks for a grid-stride loop over `work` items: enough to fill the device a few times.
  unsigned grid_stride_blocks(int64_t work, int block = kBlockSize) const {
    int64_t blocks = (work + block - 1) / block;
    int64_t cap = static_cast<int64_t>(sm_count) * 32;
    return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > cap ? cap : blocks));
  }
};

template <class T> T* ptr(const Tensor& t) { return static_cast<T*>(ampgrad::detail::address(t)); }
// ptr for an optional operand: null where `t` is undefined.
template <class T> const T* ptr_or_null(const Tensor& t) { return t.defined() ? ptr<const T>(t) : nullptr; }
template <class T> T* mut_or_null(const Tensor& t) { return t.defined() ? ptr<T>(t) : nullptr; }

// Note [Dense fast path]
// Tensors of one shape and identical strides that are non-overlapping and dense (contiguous,
// channels-last, any transpose of those) keep corresponding elements at the same position of
// one block of memory each, starting at data_ptr() (strides are never negative). An
// elementwise kernel can then walk them as flat arrays of numel() elements with vector loads,
// whatever the dims' order.
inline bool flat_together(std::initializer_list<const Tensor*> ts) {
  const Tensor& first = **ts.begin();
  if (!is_non_overlapping_and_dense(first)) return false;
  for (const Tensor* t : ts)
    if (t->shape() != first.shape() || (t->strides() != first.strides() && !(t->is_contiguous() && first.is_contiguous())))
      return false;
  return true;
}

// ---- strided geometry ---------------------------------------------------------------------

// Note [Strided geometry]
// An elementwise kernel over tensors of one shape but any strides (out first, then inputs;
// broadcast dims have stride 0) decomposes a linear index into a multi-index and sums
// index * stride per operand. The host first drops size-1 dims and merges adjacent dims that
// are contiguous in every operand (so all-contiguous operands become one dim and the kernel
// does no division at all), then hands the kernel chunks of fewer than 2^31 elements and at
// most kMaxDims dims, so that index math is 32-bit: the outermost dim is split on the host
// and each chunk's starting offsets move into its base pointers. Offsets stay 64-bit.

constexpr int kMaxDims = 8;

template <int N> struct Geometry {
  int ndim;
  int unused = 0;  // no padding: kernel arguments are keyed by their bytes (Note [Kernel graphs])
  uint32_t sizes[kMaxDims];  // innermost first
  int64_t strides[N][kMaxDims];  // in elements, innermost first
};

template <int N> __device__ __forceinline__ void geometry_offsets(const Geometry<N>& g, uint32_t i, int64_t (&off)[N]) {
#pragma unroll
  for (int k = 0; k < N; ++k) off[k] = 0;
#pragma unroll
  for (int d = 0; d < kMaxDims; ++d) {
    if (d == g.ndim - 1) {  // outermost: what is left of i is its index
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] += static_cast<int64_t>(i) * g.strides[k][d];
      break;
    }
    uint32_t q = i / g.sizes[d];
    uint32_t r = i - q * g.sizes[d];
    i = q;
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] += static_cast<int64_t>(r) * g.strides[k][d];
  }
}

// The coalesced geometry on the host, innermost first, any number of dims, 64-bit sizes.
template <int N> struct HostGeometry {
  std::vector<int64_t> sizes;
  std::array<std::vector<int64_t>, N> strides;
  int64_t numel = 1;
};

template <int N>
HostGeometry<N> make_geometry(const Shape& shape, const std::array<const Shape*, N>& strides) {
  HostGeometry<N> g;
  for (int64_t s : shape) g.numel *= s;
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] == 1) continue;
    bool merge = !g.sizes.empty();
    for (int k = 0; k < N && merge; ++k) merge = (*strides[k])[d] == g.strides[k].back() * g.sizes.back();
    if (merge) {
      g.sizes.back() *= shape[d];
    } else {
      g.sizes.push_back(shape[d]);
      for (int k = 0; k < N; ++k) g.strides[k].push_back((*strides[k])[d]);
    }
  }
  if (g.sizes.empty()) {  // one element (0-dim or all sizes 1)
    g.sizes.push_back(1);
    for (int k = 0; k < N; ++k) g.strides[k].push_back(0);
  }
  return g;
}

namespace detail {
template <int N, class F>
void for_each_chunk_rec(const HostGeometry<N>& g, int ndim, std::type_identity_t<std::array<int64_t, N>> offsets,
                        F& f) {
  const int outer_dim = ndim - 1;
  int64_t inner = 1;
  for (int d = 0; d < outer_dim; ++d) inner *= g.sizes[static_cast<size_t>(d)];
  const int64_t outer = g.sizes[static_cast<size_t>(outer_dim)];
  auto emit = [&](int64_t outer_len, const std::array<int64_t, N>& off) {
    Geometry<N> k{};
    k.ndim = ndim;
    for (int d = 0; d < ndim; ++d) {
      k.sizes[d] = static_cast<uint32_t>(d == outer_dim ? outer_len : g.sizes[static_cast<size_t>(d)]);
      for (int j = 0; j < N; ++j) k.strides[j][d] = g.strides[static_cast<size_t>(j)][static_cast<size_t>(d)];
    }
    f(k, static_cast<uint32_t>(outer_len * inner), off);
  };
  if (ndim <= kMaxDims && inner * outer <= INT32_MAX) {
    emit(outer, offsets);
  } else if (ndim > kMaxDims || inner > INT32_MAX) {  // peel the outermost dim one index at a time
    for (int64_t i = 0; i < outer; ++i) {
      std::array<int64_t, N> off = offsets;
      for (int j = 0; j < N; ++j) off[j] += i * g.strides[static_cast<size_t>(j)][static_cast<size_t>(outer_dim)];
      for_each_chunk_rec(g, ndim - 1, off, f);
    }
  } else {  // split the outermost dim into blocks of fewer than 2^31 elements
    const int64_t step = INT32_MAX / inner;
    for (int64_t start = 0; start < outer; start += step) {
      std::array<int64_t, N> off = offsets;
      for (int j = 0; j < N; ++j) off[j] += start * g.strides[static_cast<size_t>(j)][static_cast<size_t>(outer_dim)];
      emit(std::min(step, outer - start), off);
    }
  }
}
}  // namespace detail

// Calls f(const Geometry<N>&, uint32_t numel, const std::array<int64_t, N>& element_offsets)
// once per chunk (Note [Strided geometry]). Nothing is called for an empty geometry.
template <int N, class F> void for_each_chunk(const HostGeometry<N>& g, F&& f) {
  if (g.numel == 0) return;
  std::array<int64_t, N> zero{};
  detail::for_each_chunk_rec(g, static_cast<int>(g.sizes.size()), zero, f);
}

inline unsigned blocks_for(uint32_t n, int block = kBlockSize) {
  return static_cast<unsigned>((static_cast<uint64_t>(n) + block - 1) / block);
}

// ---- last block ---------------------------------------------------------------------------

// Note [Last block]
// A kernel whose blocks each write a partial result finishes the reduction in the same launch:
// every block, once its writes are done, counts itself on a counter of the kernel's, and the
// block that completes the count (which then sees every other block's writes) combines the
// partials and resets the counter for the next launch. Launches on a device are serialized
// on its one stream (Note [CUDA stream]), also inside CUDA graphs, so one counter per kernel
// (a zero-initialized __device__ variable of its file) suffices. The fused optimizers' step
// counters, batch norm's statistics and cross-entropy's loss finish this way.
// Every thread of the block calls it, after the block's writes; it returns true in every
// thread of the last block, with the other blocks' writes visible.
__device__ inline bool last_block_done(unsigned int* counter) {
  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
    __threadfence();
    last = atomicAdd(counter, 1u) == gridDim.x * gridDim.y * gridDim.z - 1;
    if (last) *counter = 0;
  }
  __syncthreads();
  if (last) __threadfence();
  return last;
}

}  // namespace ampgrad::cuda
