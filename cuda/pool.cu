// CUDA max pooling (Note [Max pooling] in ops/pool.cpp): one thread per output forward, one
// per input backward (it gathers from the windows that hold it: deterministic, no atomics).
#include <algorithm>
#include <cuda/std/limits>

#include <ampgrad/cuda/common.cuh>
#include <ampgrad/cuda/launch.cuh>
#include <ampgrad/core/kernels.h>

namespace ampgrad::cuda {

namespace {

struct Dims4 {
  int64_t n, c, h, w;
};
struct Strides4 {
  int64_t n, c, h, w;
  __device__ __forceinline__ int64_t at(int64_t a, int64_t b, int y, int x) const {
    return a * n + b * c + static_cast<int64_t>(y) * h + static_cast<int64_t>(x) * w;
  }
};
Strides4 strides_of(const Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2), t.stride(3)}; }

// blockIdx.y (striding by gridDim.y) picks the plane (n, c); the threads of blockIdx.x cover its
// positions, so a thread divides once to find its row and column. Integer division is emulated
// on the GPU, and per-element decompositions and window searches dominated these kernels.
template <class T>
__global__ void max_pool2d_forward_kernel(const T* x, Dims4 in, Strides4 xs, Window2d w, int oh, int ow, T* out,
                                          int32_t* indices, Strides4 os) {
  using A = dacc_t<T>;
  const int H = static_cast<int>(in.h), W = static_cast<int>(in.w), kh = static_cast<int>(w.kh),
            kw = static_cast<int>(w.kw), sh = static_cast<int>(w.sh), sw = static_cast<int>(w.sw),
            ph = static_cast<int>(w.ph), pw = static_cast<int>(w.pw), dh = static_cast<int>(w.dh),
            dw = static_cast<int>(w.dw);
  const int pos = blockIdx.x * blockDim.x + threadIdx.x;
  if (pos >= oh * ow) return;
  const int oy = pos / ow, ox = pos - oy * ow;
  for (int64_t plane = blockIdx.y; plane < in.n * in.c; plane += gridDim.y) {
    const int64_t n = plane / in.c, c = plane - n * in.c;
    A best = -::cuda::std::numeric_limits<A>::infinity();  // a window of padding only: -inf, as on the CPU
    int32_t arg = -1;
    for (int i = 0; i < kh; ++i) {
      const int iy = oy * sh - ph + i * dh;
      if (iy < 0 || iy >= H) continue;
      for (int j = 0; j < kw; ++j) {
        const int ix = ox * sw - pw + j * dw;
        if (ix < 0 || ix >= W) continue;
        const A v = to_acc(x[xs.at(n, c, iy, ix)]);
        if (arg < 0 || v > best || (v != v && best == best)) {  // NaN wins, then the first maximum
          best = v;
          arg = iy * W + ix;
        }
      }
    }
    out[os.at(n, c, oy, ox)] = from_acc<T>(best);
    indices[os.at(n, c, oy, ox)] = arg;
  }
}

// The outputs whose windows hold input row iy: oy * s - p + i * d == iy for a tap i in [0, k).
__device__ __forceinline__ void window_range(int iy, int k, int s, int p, int d, int out, int& lo, int& hi) {
  const int t = iy + p;
  hi = min(t / s, out - 1);
  const int first = t - (k - 1) * d;
  lo = first <= 0 ? 0 : (first + s - 1) / s;
}

template <class T>
__global__ void max_pool2d_backward_kernel(const T* g, const int32_t* indices, Strides4 gs, Strides4 is, Window2d w,
                                           int oh, int ow, Dims4 in, T* gx, Strides4 xs) {
  using A = dacc_t<T>;
  const int H = static_cast<int>(in.h), W = static_cast<int>(in.w);
  const int pos = blockIdx.x * blockDim.x + threadIdx.x;
  if (pos >= H * W) return;
  const int iy = pos / W, ix = pos - iy * W;
  int ylo, yhi, xlo, xhi;
  window_range(iy, static_cast<int>(w.kh), static_cast<int>(w.sh), static_cast<int>(w.ph), static_cast<int>(w.dh), oh,
               ylo, yhi);
  window_range(ix, static_cast<int>(w.kw), static_cast<int>(w.sw), static_cast<int>(w.pw), static_cast<int>(w.dw), ow,
               xlo, xhi);
  const int dh = static_cast<int>(w.dh), dw = static_cast<int>(w.dw), sh = static_cast<int>(w.sh),
            sw = static_cast<int>(w.sw), ph = static_cast<int>(w.ph), pw = static_cast<int>(w.pw);
  for (int64_t plane = blockIdx.y; plane < in.n * in.c; plane += gridDim.y) {
    const int64_t n = plane / in.c, c = plane - n * in.c;
    A sum = 0;
    for (int oy = ylo; oy <= yhi; ++oy) {
      if (dh != 1 && (iy + ph - oy * sh) % dh != 0) continue;
      for (int ox = xlo; ox <= xhi; ++ox) {
        if (dw != 1 && (ix + pw - ox * sw) % dw != 0) continue;
        if (indices[is.at(n, c, oy, ox)] == pos) sum += to_acc(g[gs.at(n, c, oy, ox)]);
      }
    }
    gx[xs.at(n, c, iy, ix)] = from_acc<T>(sum);
  }
}

dim3 plane_grid(int64_t positions, int64_t planes) {
  return dim3(static_cast<unsigned>((positions + kBlockSize - 1) / kBlockSize),
              static_cast<unsigned>(std::min<int64_t>(planes, 65535)));
}

}  // namespace

void max_pool2d_forward(const Tensor& x, const Window2d& w, const Tensor& out, const Tensor& indices) {
  if (out.numel() == 0) return;
  KernelContext ctx(out);
  const Dims4 in{x.size(0), x.size(1), x.size(2), x.size(3)};
  const int oh = static_cast<int>(out.size(2)), ow = static_cast<int>(out.size(3));
  dispatch_floating(x.dtype(), "max_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch(ctx, max_pool2d_forward_kernel<T>, plane_grid(int64_t{oh} * ow, in.n * in.c), kBlockSize, 0, ptr<const T>(x), in, strides_of(x), w, oh, ow, ptr<T>(out), ptr<int32_t>(indices), strides_of(out));
  });
}

void max_pool2d_backward(const Tensor& g, const Tensor& indices, const Window2d& w, const Tensor& grad_x) {
  if (grad_x.numel() == 0) return;
  KernelContext ctx(grad_x);
  const Dims4 in{grad_x.size(0), grad_x.size(1), grad_x.size(2), grad_x.size(3)};
  dispatch_floating(g.dtype(), "max_pool2d backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch(ctx, max_pool2d_backward_kernel<T>, plane_grid(in.h * in.w, in.n * in.c), kBlockSize, 0, ptr<const T>(g), ptr<const int32_t>(indices), strides_of(g), strides_of(indices), w, static_cast<int>(g.size(2)), static_cast<int>(g.size(3)), in, ptr<T>(grad_x), strides_of(grad_x));
  });
}

AG_REGISTER_KERNEL(kernel::max_pool2d_forward, kCUDA, max_pool2d_forward);
AG_REGISTER_KERNEL(kernel::max_pool2d_backward, kCUDA, max_pool2d_backward);

}  // namespace ampgrad::cuda
