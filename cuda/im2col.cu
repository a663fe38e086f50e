// CUDA im2col and col2im (the window gather behind unfold and pooling, and its adjoint) and
// dropout masks, matching the CPU reference kernels of ops/cpu_conv.cpp.
#include <ampgrad/cuda/common.cuh>
#include <ampgrad/cuda/launch.cuh>
#include <ampgrad/core/kernels.h>

namespace ampgrad::cuda {

namespace {

// The window and the image/output extents, passed to the kernels by value.
struct WindowArgs {
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  int64_t h, w, oh, ow;
};

WindowArgs window_args(const Window2d& win, int64_t h, int64_t w) {
  return {win.kh, win.kw, win.sh, win.sw, win.ph, win.pw, win.dh, win.dw, h, w, win.out_h(h), win.out_w(w)};
}

// Note [im2col index types]
// Both kernels decompose a position into (n*C + c, row, column) with divisions, and compute
// window coordinates such as oy*sh - ph + i*dh or (y + ph - i*dh) / sh. They do it in the
// signed type S: int32 when the number of positions and every such coordinate fit (always,
// in practice), int64 otherwise. Memory offsets (of x with its strides, of cols whose kh*kw
// rows per channel can exceed 2^31 elements) are always computed in int64. The grid-stride
// counter itself is int64 so that it cannot wrap past the end.
bool fits_int32(const WindowArgs& g, int64_t positions) {
  constexpr int64_t kMax = INT32_MAX;
  // |coordinates| stay below extent + 2 * padding + dilation * kernel + stride * output.
  const int64_t span_h = g.h + 2 * g.ph + g.dh * g.kh + g.sh * g.oh;
  const int64_t span_w = g.w + 2 * g.pw + g.dw * g.kw + g.sw * g.ow;
  return positions <= kMax && span_h <= kMax && span_w <= kMax && g.oh * g.ow <= kMax && g.kh * g.kw <= kMax;
}

template <class F> void with_index_type(const WindowArgs& g, int64_t positions, F&& f) {
  if (fits_int32(g, positions)) {
    f(int32_t{});
  } else {
    f(int64_t{});
  }
}

// One thread per (n, c, oy, ox): it fills that column of the kh*kw rows of channel c, so
// neighbouring threads write neighbouring elements of each row. x [N, C, H, W] with strides
// (sn, sc, sy, sx); cols contiguous [N, C*kh*kw, oh*ow].
template <class T, class S>
__global__ void im2col_kernel(const T* x, T* cols, int64_t total, S channels, int64_t sn, int64_t sc, int64_t sy,
                              int64_t sx, WindowArgs g, float pad) {
  const T pad_value = from_acc<T>(pad);
  const S oh = static_cast<S>(g.oh), ow = static_cast<S>(g.ow), h = static_cast<S>(g.h), w = static_cast<S>(g.w);
  const S kh = static_cast<S>(g.kh), kw = static_cast<S>(g.kw), dh = static_cast<S>(g.dh), dw = static_cast<S>(g.dw);
  const int64_t L = g.oh * g.ow;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; q < total; q += step) {
    const S p = static_cast<S>(q);
    const S ox = p % ow;
    S r = p / ow;
    const S oy = r % oh;
    r /= oh;  // n * C + c
    const S c = r % channels;
    const S n = r / channels;
    const T* xp = x + static_cast<int64_t>(n) * sn + static_cast<int64_t>(c) * sc;
    T* out = cols + static_cast<int64_t>(r) * g.kh * g.kw * L + static_cast<int64_t>(oy) * ow + ox;
    const S y0 = oy * static_cast<S>(g.sh) - static_cast<S>(g.ph);
    const S x0 = ox * static_cast<S>(g.sw) - static_cast<S>(g.pw);
    for (S i = 0; i < kh; ++i) {
      const S y = y0 + i * dh;
      const bool row_inside = y >= 0 && y < h;
      const int64_t row = static_cast<int64_t>(y) * sy;
      for (S j = 0; j < kw; ++j) {
        const S xx = x0 + j * dw;
        *out = (row_inside && xx >= 0 && xx < w) ? xp[row + static_cast<int64_t>(xx) * sx] : pad_value;
        out += L;
      }
    }
  }
}

// One thread per pixel of out (contiguous [N, C, H, W]): it sums, in the CPU reference's
// order (i, then j), the cols entries whose window position reads the pixel. No atomics, so
// the result is deterministic and equal to the CPU's up to nothing (same additions, same order).
template <class T, class S>
__global__ void col2im_kernel(const T* cols, T* out, int64_t total, WindowArgs g) {
  using A = dacc_t<T>;
  const S oh = static_cast<S>(g.oh), ow = static_cast<S>(g.ow), h = static_cast<S>(g.h), w = static_cast<S>(g.w);
  const S kh = static_cast<S>(g.kh), kw = static_cast<S>(g.kw), sh = static_cast<S>(g.sh), sw = static_cast<S>(g.sw);
  const S ph = static_cast<S>(g.ph), pw = static_cast<S>(g.pw), dh = static_cast<S>(g.dh), dw = static_cast<S>(g.dw);
  const int64_t L = g.oh * g.ow;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; q < total; q += step) {
    const S p = static_cast<S>(q);
    const S xx = p % w;
    S r = p / w;
    const S y = r % h;
    r /= h;  // n * C + c
    const T* cp = cols + static_cast<int64_t>(r) * g.kh * g.kw * L;
    A acc = 0;
    for (S i = 0; i < kh; ++i) {
      const S ty = y + ph - i * dh;
      if (ty < 0) break;  // ty only decreases with i
      if (ty % sh) continue;
      const S oy = ty / sh;
      if (oy >= oh) continue;
      for (S j = 0; j < kw; ++j) {
        const S tx = xx + pw - j * dw;
        if (tx < 0) break;
        if (tx % sw) continue;
        const S ox = tx / sw;
        if (ox >= ow) continue;
        acc += to_acc(cp[static_cast<int64_t>(i * kw + j) * L + static_cast<int64_t>(oy) * ow + ox]);
      }
    }
    out[q] = from_acc<T>(acc);
  }
}

// out[i] = hash_uniform(seed, offset + i) < keep ? on : 0, the formula of the CPU reference
// (core/kernel_kinds.h), so masks are bit-identical across devices.
template <class T>
__global__ void dropout_mask_kernel(T* out, int64_t n, float keep, double scale, uint64_t seed, uint64_t offset) {
  // As the CPU reference: float64 masks hold the exact scale, the others scale rounded to float.
  T on;
  if constexpr (std::is_same_v<T, double>) on = scale;
  else on = from_acc<T>(static_cast<float>(scale));
  const T off = from_acc<T>(0.0f);
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    out[i] = hash_uniform(seed, offset + static_cast<uint64_t>(i)) < keep ? on : off;
}

}  // namespace

void im2col(const Tensor& x, const Tensor& cols, const Window2d& w, double pad_value) {
  const WindowArgs g = window_args(w, x.size(2), x.size(3));
  const int64_t channels = x.size(1);
  const int64_t total = x.size(0) * channels * g.oh * g.ow;  // one thread per (n, c, oy, ox)
  if (total <= 0 || cols.numel() == 0) return;
  KernelContext ctx(cols);
  dispatch_floating(x.dtype(), "im2col", [&](auto tag) {
    using T = typename decltype(tag)::type;
    with_index_type(g, total, [&](auto itag) {
      using S = decltype(itag);
      // The CPU reference rounds the pad value through float for every dtype; so does this.
      launch(ctx, im2col_kernel<T, S>, ctx.grid_stride_blocks(total), kBlockSize, 0, ptr<const T>(x), ptr<T>(cols), total, static_cast<S>(channels), x.stride(0), x.stride(1), x.stride(2), x.stride(3), g, static_cast<float>(pad_value));
    });
  });
}

void col2im(const Tensor& cols, const Tensor& out, const Window2d& w) {
  const WindowArgs g = window_args(w, out.size(2), out.size(3));
  const int64_t total = out.numel();
  if (total == 0) return;
  KernelContext ctx(out);
  dispatch_floating(out.dtype(), "col2im", [&](auto tag) {
    using T = typename decltype(tag)::type;
    with_index_type(g, total, [&](auto itag) {
      using S = decltype(itag);
      launch(ctx, col2im_kernel<T, S>, ctx.grid_stride_blocks(total), kBlockSize, 0, ptr<const T>(cols), ptr<T>(out), total, g);
    });
  });
}

void dropout_mask(const Tensor& out, double p_keep, double scale, uint64_t seed, uint64_t offset) {
  const int64_t n = out.numel();
  if (n == 0) return;
  KernelContext ctx(out);
  dispatch_floating(out.dtype(), "dropout_mask", [&](auto tag) {
    using T = typename decltype(tag)::type;
    // keep passes through float exactly as in the CPU reference.
    launch(ctx, dropout_mask_kernel<T>, ctx.grid_stride_blocks(n), kBlockSize, 0, ptr<T>(out), n, static_cast<float>(p_keep), scale, seed, offset);
  });
}

AG_REGISTER_KERNEL(kernel::im2col, kCUDA, im2col);
AG_REGISTER_KERNEL(kernel::col2im, kCUDA, col2im);
AG_REGISTER_KERNEL(kernel::dropout_mask, kCUDA, dropout_mask);

}  // namespace ampgrad::cuda
