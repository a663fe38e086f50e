// CUDA max pooling (Note [Max pooling] in ops/pool.cpp): one thread per output forward, one
// per input backward (it gathers from the windows that hold it: deterministic, no atomics).
#include "cuda/common.cuh"
#include "ops/pool_kernels.h"

namespace ampgrad::cuda {

namespace {

struct Dims4 {
  int64_t n, c, h, w;
};
struct Strides4 {
  int64_t n, c, h, w;
  template <class I> __device__ __forceinline__ int64_t at(I a, I b, I y, I x) const {
    return static_cast<int64_t>(a) * n + static_cast<int64_t>(b) * c + static_cast<int64_t>(y) * h +
           static_cast<int64_t>(x) * w;
  }
};
Strides4 strides_of(const Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2), t.stride(3)}; }

// Index arithmetic in I: int32 when every index fits (64-bit division is emulated on the GPU
// and dominated these kernels), int64 otherwise.
template <class T, class I>
__global__ void max_pool2d_forward_kernel(const T* x, Dims4 in, Strides4 xs, Window2d w, int64_t oh, int64_t ow,
                                          T* out, int32_t* indices, Strides4 os, int64_t total) {
  using A = dacc_t<T>;
  const I OW = static_cast<I>(ow), OH = static_cast<I>(oh), C = static_cast<I>(in.c), H = static_cast<I>(in.h),
          W = static_cast<I>(in.w);
  for (int64_t e64 = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e64 < total;
       e64 += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const I e = static_cast<I>(e64);
    const I ox = e % OW, oy = (e / OW) % OH, c = (e / (OW * OH)) % C, n = e / (OW * OH * C);
    A best = 0;
    int32_t arg = -1;
    for (I i = 0; i < static_cast<I>(w.kh); ++i) {
      const I iy = oy * static_cast<I>(w.sh) - static_cast<I>(w.ph) + i * static_cast<I>(w.dh);
      if (iy < 0 || iy >= H) continue;
      for (I j = 0; j < static_cast<I>(w.kw); ++j) {
        const I ix = ox * static_cast<I>(w.sw) - static_cast<I>(w.pw) + j * static_cast<I>(w.dw);
        if (ix < 0 || ix >= W) continue;
        const A v = to_acc(x[xs.at(n, c, iy, ix)]);
        if (arg < 0 || v > best || (v != v && best == best)) {  // NaN wins, then the first maximum
          best = v;
          arg = static_cast<int32_t>(iy * W + ix);
        }
      }
    }
    out[os.at(n, c, oy, ox)] = from_acc<T>(best);
    indices[os.at(n, c, oy, ox)] = arg;
  }
}

template <class T, class I>
__global__ void max_pool2d_backward_kernel(const T* g, const int32_t* indices, Strides4 gs, Strides4 is, Window2d w,
                                           int64_t oh, int64_t ow, Dims4 in, T* gx, Strides4 xs, int64_t total) {
  using A = dacc_t<T>;
  const I OW = static_cast<I>(ow), OH = static_cast<I>(oh), C = static_cast<I>(in.c), H = static_cast<I>(in.h),
          W = static_cast<I>(in.w);
  const I sh = static_cast<I>(w.sh), sw = static_cast<I>(w.sw), ph = static_cast<I>(w.ph), pw = static_cast<I>(w.pw),
          dh = static_cast<I>(w.dh), dw = static_cast<I>(w.dw);
  for (int64_t e64 = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e64 < total;
       e64 += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const I e = static_cast<I>(e64);
    const I ix = e % W, iy = (e / W) % H, c = (e / (W * H)) % C, n = e / (W * H * C);
    A sum = 0;
    const int32_t me = static_cast<int32_t>(iy * W + ix);
    for (I i = 0; i < static_cast<I>(w.kh); ++i) {
      const I ty = iy + ph - i * dh;
      if (ty < 0 || ty % sh != 0 || ty / sh >= OH) continue;
      for (I j = 0; j < static_cast<I>(w.kw); ++j) {
        const I tx = ix + pw - j * dw;
        if (tx < 0 || tx % sw != 0 || tx / sw >= OW) continue;
        if (indices[is.at(n, c, ty / sh, tx / sw)] == me) sum += to_acc(g[gs.at(n, c, ty / sh, tx / sw)]);
      }
    }
    gx[xs.at(n, c, iy, ix)] = from_acc<T>(sum);
  }
}

}  // namespace

void max_pool2d_forward(const Tensor& x, const Window2d& w, const Tensor& out, const Tensor& indices) {
  if (out.numel() == 0) return;
  KernelContext ctx(out);
  const Dims4 in{x.size(0), x.size(1), x.size(2), x.size(3)};
  const bool narrow = x.numel() <= INT32_MAX && out.numel() <= INT32_MAX;
  dispatch_floating(x.dtype(), "max_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto launch = [&](auto kernel) {
      kernel<<<ctx.grid_stride_blocks(out.numel()), kBlockSize, 0, ctx.stream>>>(
          ptr<const T>(x), in, strides_of(x), w, out.size(2), out.size(3), ptr<T>(out), ptr<int32_t>(indices),
          strides_of(out), out.numel());
      AG_CUDA_CHECK_LAUNCH();
    };
    if (narrow) launch(max_pool2d_forward_kernel<T, int32_t>);
    else launch(max_pool2d_forward_kernel<T, int64_t>);
  });
}

void max_pool2d_backward(const Tensor& g, const Tensor& indices, const Window2d& w, const Tensor& grad_x) {
  if (grad_x.numel() == 0) return;
  KernelContext ctx(grad_x);
  const Dims4 in{grad_x.size(0), grad_x.size(1), grad_x.size(2), grad_x.size(3)};
  const bool narrow = grad_x.numel() <= INT32_MAX && g.numel() <= INT32_MAX;
  dispatch_floating(g.dtype(), "max_pool2d backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto launch = [&](auto kernel) {
      kernel<<<ctx.grid_stride_blocks(grad_x.numel()), kBlockSize, 0, ctx.stream>>>(
          ptr<const T>(g), ptr<const int32_t>(indices), strides_of(g), strides_of(indices), w, g.size(2), g.size(3),
          in, ptr<T>(grad_x), strides_of(grad_x), grad_x.numel());
      AG_CUDA_CHECK_LAUNCH();
    };
    if (narrow) launch(max_pool2d_backward_kernel<T, int32_t>);
    else launch(max_pool2d_backward_kernel<T, int64_t>);
  });
}

}  // namespace ampgrad::cuda
