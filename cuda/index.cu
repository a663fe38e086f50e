// CUDA index_select (a gather along the middle dim), index_add (its scatter-add adjoint),
// index_copy, and gather / scatter_add along any dim.
#include <ampgrad/cuda/common.cuh>
#include <ampgrad/cuda/device_error.cuh>
#include <ampgrad/cuda/launch.cuh>
#include <ampgrad/core/kernels.h>

namespace ampgrad::cuda {

namespace {

// Note [CUDA index bounds]
// The index tensor lives on the device, so the op layer cannot validate it on the host
// without a synchronizing copy. The kernels therefore never touch memory outside the tensors
// for an out-of-range index (index_select and gather write 0 for it, index_add, index_copy and
// scatter_add skip it), and report the first one to the device's error record, which the next
// host synchronization raises as ag::Error (Note [Device-side errors] in cuda/device_error.h).
// PyTorch asserts in-kernel, which poisons the whole CUDA context instead.

// out[o, j, c] = x[o, index[j], c] over out viewed as [outer, n, inner]; I is the index type
// of the linear position (32-bit when the output has fewer than 2^31 elements).
template <class E, class I>
__global__ void index_select_kernel(const E* x, const int64_t* index, E* out, I total, I n, I inner, int64_t d,
                                    DeviceErrorRecord* err, int site) {
  const I step = static_cast<I>(gridDim.x) * blockDim.x;
  for (I p = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; p < total; p += step) {
    const I c = p % inner;
    const I row = p / inner;
    const I j = row % n;
    const I o = row / n;
    const int64_t src = index[j];
    const bool in_range = src >= 0 && src < d;
    if (!in_range) [[unlikely]] report_out_of_range(err, site, src, j, 0, d);
    out[p] = in_range ? x[(static_cast<int64_t>(o) * d + src) * inner + c] : E(0);
  }
}

// out[o, index[j], c] += src[o, j, c]. Atomic: duplicate indices add in an unspecified order,
// so float results are not bitwise reproducible from run to run (16-bit values also round
// after every addition, as the CPU reference does).
template <class T, class I>
__global__ void index_add_kernel(T* out, const int64_t* index, const T* src, I total, I n, I inner, int64_t d,
                                 DeviceErrorRecord* err, int site) {
  const I step = static_cast<I>(gridDim.x) * blockDim.x;
  for (I p = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; p < total; p += step) {
    const I c = p % inner;
    const I row = p / inner;
    const I j = row % n;
    const I o = row / n;
    const int64_t dst = index[j];
    if (dst < 0 || dst >= d) [[unlikely]] {  // Note [CUDA index bounds]
      report_out_of_range(err, site, dst, j, 0, d);
      continue;
    }
    T* target = out + (static_cast<int64_t>(o) * d + dst) * inner + c;
    if constexpr (std::is_same_v<T, int64_t>) {
      atomicAdd(reinterpret_cast<unsigned long long*>(target), static_cast<unsigned long long>(src[p]));
    } else {
      atomicAdd(target, src[p]);
    }
  }
}

// out[o, index[j], c] = src[o, j, c]; a repeated index: one of its rows wins.
template <class E, class I>
__global__ void index_copy_kernel(E* out, const int64_t* index, const E* src, I total, I n, I inner, int64_t d,
                                  DeviceErrorRecord* err, int site) {
  const I step = static_cast<I>(gridDim.x) * blockDim.x;
  for (I p = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; p < total; p += step) {
    const I c = p % inner;
    const I row = p / inner;
    const I j = row % n;
    const I o = row / n;
    const int64_t dst = index[j];
    if (dst >= 0 && dst < d) [[likely]] {
      out[(static_cast<int64_t>(o) * d + dst) * inner + c] = src[p];
    } else {
      report_out_of_range(err, site, dst, j, 0, d);  // Note [CUDA index bounds]
    }
  }
}

// Over index's shape (Note [Strided geometry]): 0 out (or src), 1 index, 2 x (or out) without
// dim's stride; `step` is that stride, `d` the dim's size.
template <class E>
__global__ void gather_kernel(const E* x, const int64_t* index, E* out, Geometry<3> g, uint32_t n, int64_t step,
                              int64_t d, int64_t first, DeviceErrorRecord* err, int site) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int64_t off[3];
  geometry_offsets(g, i, off);
  const int64_t k = index[off[1]];
  const bool in_range = k >= 0 && k < d;
  if (!in_range) [[unlikely]] report_out_of_range(err, site, k, first + i, 0, d);  // Note [CUDA index bounds]
  out[off[0]] = in_range ? x[off[2] + k * step] : E(0);
}

template <class T>
__global__ void scatter_add_kernel(T* out, const int64_t* index, const T* src, Geometry<3> g, uint32_t n, int64_t step,
                                   int64_t d, int64_t first, DeviceErrorRecord* err, int site) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int64_t off[3];
  geometry_offsets(g, i, off);
  const int64_t k = index[off[1]];
  if (k < 0 || k >= d) [[unlikely]] {  // Note [CUDA index bounds]
    report_out_of_range(err, site, k, first + i, 0, d);
    return;
  }
  T* target = out + off[2] + k * step;
  if constexpr (std::is_same_v<T, int64_t>) {
    atomicAdd(reinterpret_cast<unsigned long long*>(target), static_cast<unsigned long long>(src[off[0]]));
  } else {
    atomicAdd(target, src[off[0]]);
  }
}

__global__ void check_index_kernel(const int64_t* index, int64_t n, int64_t low, int64_t high, DeviceErrorRecord* err,
                                   int site) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const int64_t v = index[i];
    if (v < low || v >= high) [[unlikely]] report_out_of_range(err, site, v, i, low, high);
  }
}

Shape without_dim(const Tensor& t, int64_t dim) {
  Shape s = t.strides();
  s[dim] = 0;
  return s;
}

// Runs f(I{}) with the narrowest index type for `total` positions.
template <class F> void with_index_type(int64_t total, F&& f) {
  if (total <= INT32_MAX) {
    f(uint32_t{});
  } else {
    f(uint64_t{});
  }
}

}  // namespace

void index_select(const Tensor& x, const Tensor& index, const Tensor& out) {
  const int64_t d = x.size(1), inner = x.size(2), n = index.numel();
  const int64_t total = out.numel();
  if (total == 0) return;
  KernelContext ctx(out);
  DeviceErrorRecord* err = device_error_record(ctx.device);
  const int site = error_site("index_select", "index", {{"input", &x}, {"index", &index}});
  dispatch_size(x.element_size(), [&](auto tag) {
    using E = typename decltype(tag)::type;
    with_index_type(total, [&](auto itag) {
      using I = decltype(itag);
      launch(ctx, index_select_kernel<E, I>, ctx.grid_stride_blocks(total), kBlockSize, 0, ptr<const E>(x), ptr<const int64_t>(index), ptr<E>(out), static_cast<I>(total), static_cast<I>(n), static_cast<I>(inner), d, err, site);
    });
  });
}

void index_add(const Tensor& out, const Tensor& index, const Tensor& src) {
  const int64_t d = out.size(1), inner = out.size(2), n = index.numel();
  const int64_t total = src.numel();
  if (total == 0) return;
  KernelContext ctx(out);
  DeviceErrorRecord* err = device_error_record(ctx.device);
  const int site = error_site("index_add", "index", {{"input", &out}, {"index", &index}, {"source", &src}});
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    with_index_type(total, [&](auto itag) {
      using I = decltype(itag);
      launch(ctx, index_add_kernel<T, I>, ctx.grid_stride_blocks(total), kBlockSize, 0, ptr<T>(out), ptr<const int64_t>(index), ptr<const T>(src), static_cast<I>(total), static_cast<I>(n), static_cast<I>(inner), d, err, site);
    });
  };
  switch (out.dtype()) {
    case DType::Float32: return run(TypeTag<float>{});
    case DType::Float16: return run(TypeTag<__half>{});
    case DType::BFloat16: return run(TypeTag<__nv_bfloat16>{});
    case DType::Float64: return run(TypeTag<double>{});
    case DType::Int64: return run(TypeTag<int64_t>{});
    case DType::Int32: return run(TypeTag<int32_t>{});
    default: break;
  }
  AG_CHECK(false, "index_add on cuda: dtype {} is not supported (no atomic add)", dtype_name(out.dtype()));
}

void index_copy(const Tensor& out, const Tensor& index, const Tensor& src) {
  const int64_t d = out.size(1), inner = out.size(2), n = index.numel();
  const int64_t total = src.numel();
  if (total == 0) return;
  KernelContext ctx(out);
  DeviceErrorRecord* err = device_error_record(ctx.device);
  const int site = error_site("index_copy", "index", {{"input", &out}, {"index", &index}, {"source", &src}});
  dispatch_size(out.element_size(), [&](auto tag) {
    using E = typename decltype(tag)::type;
    with_index_type(total, [&](auto itag) {
      using I = decltype(itag);
      launch(ctx, index_copy_kernel<E, I>, ctx.grid_stride_blocks(total), kBlockSize, 0, ptr<E>(out), ptr<const int64_t>(index), ptr<const E>(src), static_cast<I>(total), static_cast<I>(n), static_cast<I>(inner), d, err, site);
    });
  });
}

void gather(const Tensor& x, const Tensor& index, const Tensor& out, int64_t dim) {
  if (index.numel() == 0) return;
  KernelContext ctx(out);
  const Shape xs = without_dim(x, dim);
  auto g = make_geometry<3>(index.shape(), {&out.strides(), &index.strides(), &xs});
  DeviceErrorRecord* err = device_error_record(ctx.device);
  const int site = error_site("gather", "index", {{"input", &x}, {"index", &index}});
  dispatch_size(x.element_size(), [&](auto tag) {
    using E = typename decltype(tag)::type;
    int64_t first = 0;  // the chunk's first position in the index
    for_each_chunk(g, [&](const Geometry<3>& geo, uint32_t count, const std::array<int64_t, 3>& off) {
      launch(ctx, gather_kernel<E>, blocks_for(count), kBlockSize, 0, ptr<const E>(x) + off[2], ptr<const int64_t>(index) + off[1], ptr<E>(out) + off[0], geo, count, x.stride(dim), x.size(dim), first, err, site);
      first += count;
    });
  });
}

void scatter_add(const Tensor& out, const Tensor& index, const Tensor& src, int64_t dim) {
  if (index.numel() == 0) return;
  KernelContext ctx(out);
  const Shape os = without_dim(out, dim);
  auto g = make_geometry<3>(index.shape(), {&src.strides(), &index.strides(), &os});
  DeviceErrorRecord* err = device_error_record(ctx.device);
  const int site = error_site("scatter_add", "index", {{"input", &out}, {"index", &index}, {"source", &src}});
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    int64_t first = 0;  // the chunk's first position in the index
    for_each_chunk(g, [&](const Geometry<3>& geo, uint32_t count, const std::array<int64_t, 3>& off) {
      launch(ctx, scatter_add_kernel<T>, blocks_for(count), kBlockSize, 0, ptr<T>(out) + off[2], ptr<const int64_t>(index) + off[1], ptr<const T>(src) + off[0], geo, count, out.stride(dim), out.size(dim), first, err, site);
      first += count;
    });
  };
  switch (out.dtype()) {
    case DType::Float32: return run(TypeTag<float>{});
    case DType::Float16: return run(TypeTag<__half>{});
    case DType::BFloat16: return run(TypeTag<__nv_bfloat16>{});
    case DType::Float64: return run(TypeTag<double>{});
    case DType::Int64: return run(TypeTag<int64_t>{});
    case DType::Int32: return run(TypeTag<int32_t>{});
    default: break;
  }
  AG_CHECK(false, "scatter_add on cuda: dtype {} is not supported (no atomic add)", dtype_name(out.dtype()));
}

void check_index(const Tensor& index, int64_t low, int64_t high, const char* op, const char* what) {
  const int64_t n = index.numel();
  if (n == 0) return;
  KernelContext ctx(index);
  launch(ctx, check_index_kernel, ctx.grid_stride_blocks(n), kBlockSize, 0, ptr<const int64_t>(index), n, low, high,
         device_error_record(ctx.device), error_site(op, what, {{what, &index}}));
}

AG_REGISTER_KERNEL(kernel::check_index, kCUDA, check_index);
AG_REGISTER_KERNEL(kernel::index_select, kCUDA, index_select);
AG_REGISTER_KERNEL(kernel::index_copy, kCUDA, index_copy);
AG_REGISTER_KERNEL(kernel::gather, kCUDA, gather);
AG_REGISTER_KERNEL(kernel::scatter_add, kCUDA, scatter_add);
AG_REGISTER_KERNEL(kernel::index_add, kCUDA, index_add);

}  // namespace ampgrad::cuda
