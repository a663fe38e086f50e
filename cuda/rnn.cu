// CUDA kernels of the recurrent cells' fused pointwise parts (Note [Fused recurrent cells] in
// ops/rnn_cells.cpp): one thread per hidden unit of a row, the formulas of core/rnn_formulas.h
// in float (double for float64), 16-bit values rounded on store. Tensors are contiguous.
#include <ampgrad/core/kernels.h>
#include <ampgrad/core/rnn_formulas.h>
#include <ampgrad/cuda/common.cuh>
#include <ampgrad/cuda/launch.cuh>

namespace ampgrad::cuda {

namespace {

// Element k of an optional tensor (0 where it is null), in the accumulation type A.
template <class A, class T> __device__ __forceinline__ A load(const T* p, int64_t k) {
  return p ? static_cast<A>(to_acc(p[k])) : A(0);
}
template <class T, class A> __device__ __forceinline__ void store(T* p, int64_t k, A v) {
  if (p) p[k] = from_acc<T>(v);
}

template <class T>
__global__ void rnn_cell_forward_kernel(const T* gi, const T* gh, const T* bi, const T* bh, T* hy, int64_t h,
                                        int64_t n, int relu) {
  using A = dacc_t<T>;
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= n) return;
  const int64_t k = e % h;
  const A pre = load<A>(gi, e) + load<A>(bi, k) + load<A>(gh, e) + load<A>(bh, k);
  hy[e] = from_acc<T>(formulas::rnn_forward<A>(relu != 0, pre));
}

template <class T> __global__ void rnn_cell_backward_kernel(const T* g, const T* hy, T* gp, int64_t n, int relu) {
  using A = dacc_t<T>;
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= n) return;
  gp[e] = from_acc<T>(formulas::rnn_backward<A>(relu != 0, load<A>(g, e), load<A>(hy, e)));
}

// T the gates' type, S the state's (T, or float for 16-bit gates with a float32 cx).
template <class T, class S>
__global__ void lstm_cell_forward_kernel(const T* gi, const T* gh, const T* bi, const T* bh, const S* cx, T* hy, S* cy,
                                         S* ws, int64_t h, int64_t n) {
  using A = dacc_t<T>;
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= n) return;
  const int64_t b = e / h, k = e - b * h, row = b * 4 * h;
  A pre[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int64_t j = q * h + k;
    pre[q] = load<A>(gi, row + j) + load<A>(bi, j) + load<A>(gh, row + j) + load<A>(bh, j);
  }
  const auto s = formulas::lstm_forward<A>(pre[0], pre[1], pre[2], pre[3], load<A>(cx, e));
  hy[e] = from_acc<T>(s.hy);
  cy[e] = from_acc<S>(s.cy);
  if (ws) {
    ws[row + k] = from_acc<S>(s.i);
    ws[row + h + k] = from_acc<S>(s.f);
    ws[row + 2 * h + k] = from_acc<S>(s.g);
    ws[row + 3 * h + k] = from_acc<S>(s.o);
  }
}

template <class T, class S>
__global__ void lstm_cell_backward_kernel(const T* ghy, const S* gcy, const S* cx, const S* cy, const S* ws, T* gg,
                                          S* gcx, int64_t h, int64_t n) {
  using A = dacc_t<T>;
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= n) return;
  const int64_t b = e / h, k = e - b * h, w = b * 4 * h + k;
  const auto r = formulas::lstm_backward<A>(load<A>(ghy, e), load<A>(gcy, e), load<A>(ws, w), load<A>(ws, w + h),
                                            load<A>(ws, w + 2 * h), load<A>(ws, w + 3 * h), load<A>(cx, e),
                                            load<A>(cy, e));
  gg[w] = from_acc<T>(r.gi);
  gg[w + h] = from_acc<T>(r.gf);
  gg[w + 2 * h] = from_acc<T>(r.gg);
  gg[w + 3 * h] = from_acc<T>(r.go);
  store(gcx, e, r.gcx);
}

template <class T>
__global__ void gru_cell_forward_kernel(const T* gi, const T* gh, const T* bi, const T* bh, const T* hx, T* hy, T* ws,
                                        int64_t h, int64_t n) {
  using A = dacc_t<T>;
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= n) return;
  const int64_t b = e / h, k = e - b * h, row = b * 3 * h;
  auto in = [&](int q) { return load<A>(gi, row + q * h + k) + load<A>(bi, q * h + k); };
  auto hid = [&](int q) { return load<A>(gh, row + q * h + k) + load<A>(bh, q * h + k); };
  const A hn = hid(2);
  const auto s = formulas::gru_forward<A>(in(0), in(1), in(2), hid(0), hid(1), hn, load<A>(hx, e));
  hy[e] = from_acc<T>(s.hy);
  if (ws) {
    const int64_t w = b * 4 * h + k;
    ws[w] = from_acc<T>(s.r);
    ws[w + h] = from_acc<T>(s.z);
    ws[w + 2 * h] = from_acc<T>(s.n);
    ws[w + 3 * h] = from_acc<T>(hn);
  }
}

template <class T>
__global__ void gru_cell_backward_kernel(const T* ghy, const T* hx, const T* ws, T* ggi, T* ggh, T* ghx, int64_t h,
                                         int64_t n) {
  using A = dacc_t<T>;
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= n) return;
  const int64_t b = e / h, k = e - b * h, w = b * 4 * h + k, g3 = b * 3 * h + k;
  const auto r = formulas::gru_backward<A>(load<A>(ghy, e), load<A>(ws, w), load<A>(ws, w + h),
                                           load<A>(ws, w + 2 * h), load<A>(ws, w + 3 * h), load<A>(hx, e));
  ggi[g3] = from_acc<T>(r.gir);
  ggi[g3 + h] = from_acc<T>(r.giz);
  ggi[g3 + 2 * h] = from_acc<T>(r.gin);
  ggh[g3] = from_acc<T>(r.gir);
  ggh[g3 + h] = from_acc<T>(r.giz);
  ggh[g3 + 2 * h] = from_acc<T>(r.ghn);
  ghx[e] = from_acc<T>(r.ghx);
}

template <class T> const T* in_ptr(const Tensor& t) { return t.defined() ? ptr<const T>(t) : nullptr; }
template <class T> T* out_ptr(const Tensor& t) { return t.defined() ? ptr<T>(t) : nullptr; }

// One thread per unit: B * H threads, within a grid's x limit for any realistic size.
unsigned unit_blocks(int64_t n) {
  const int64_t blocks = (n + kBlockSize - 1) / kBlockSize;
  AG_CHECK(blocks <= INT32_MAX, "recurrent cell on cuda: {} units are too many for one launch", n);
  return static_cast<unsigned>(blocks);
}

}  // namespace

void rnn_cell_forward(bool relu, const Tensor& gi, const Tensor& gh, const Tensor& b_ih, const Tensor& b_hh,
                      const Tensor& hy) {
  const int64_t n = hy.numel();
  KernelContext ctx(hy);
  dispatch_floating(gi.dtype(), "rnn cell", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch(ctx, rnn_cell_forward_kernel<T>, unit_blocks(n), kBlockSize, 0, ptr<const T>(gi), ptr<const T>(gh),
           in_ptr<T>(b_ih), in_ptr<T>(b_hh), ptr<T>(hy), hy.size(1), n, relu ? 1 : 0);
  });
}

void rnn_cell_backward(bool relu, const Tensor& grad_hy, const Tensor& hy, const Tensor& grad_pre) {
  const int64_t n = hy.numel();
  KernelContext ctx(hy);
  dispatch_floating(hy.dtype(), "rnn cell backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch(ctx, rnn_cell_backward_kernel<T>, unit_blocks(n), kBlockSize, 0, ptr<const T>(grad_hy), ptr<const T>(hy),
           ptr<T>(grad_pre), n, relu ? 1 : 0);
  });
}

void lstm_cell_forward(const Tensor& gi, const Tensor& gh, const Tensor& b_ih, const Tensor& b_hh, const Tensor& cx,
                       const Tensor& hy, const Tensor& cy, const Tensor& ws) {
  const int64_t n = hy.numel();
  KernelContext ctx(hy);
  dispatch_widened(gi.dtype(), cx.dtype(), "lstm cell", [&](auto tt, auto ts) {
    using T = typename decltype(tt)::type;
    using S = typename decltype(ts)::type;
    launch(ctx, lstm_cell_forward_kernel<T, S>, unit_blocks(n), kBlockSize, 0, ptr<const T>(gi), ptr<const T>(gh),
           in_ptr<T>(b_ih), in_ptr<T>(b_hh), ptr<const S>(cx), ptr<T>(hy), ptr<S>(cy), out_ptr<S>(ws), hy.size(1), n);
  });
}

void lstm_cell_backward(const Tensor& grad_hy, const Tensor& grad_cy, const Tensor& cx, const Tensor& cy,
                        const Tensor& ws, const Tensor& grad_gates, const Tensor& grad_cx) {
  const int64_t n = cx.numel();
  KernelContext ctx(cx);
  dispatch_widened(grad_gates.dtype(), cx.dtype(), "lstm cell backward", [&](auto tt, auto ts) {
    using T = typename decltype(tt)::type;
    using S = typename decltype(ts)::type;
    launch(ctx, lstm_cell_backward_kernel<T, S>, unit_blocks(n), kBlockSize, 0, in_ptr<T>(grad_hy), in_ptr<S>(grad_cy),
           ptr<const S>(cx), ptr<const S>(cy), ptr<const S>(ws), ptr<T>(grad_gates), out_ptr<S>(grad_cx), cx.size(1), n);
  });
}

void gru_cell_forward(const Tensor& gi, const Tensor& gh, const Tensor& b_ih, const Tensor& b_hh, const Tensor& hx,
                      const Tensor& hy, const Tensor& ws) {
  const int64_t n = hy.numel();
  KernelContext ctx(hy);
  dispatch_floating(gi.dtype(), "gru cell", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch(ctx, gru_cell_forward_kernel<T>, unit_blocks(n), kBlockSize, 0, ptr<const T>(gi), ptr<const T>(gh),
           in_ptr<T>(b_ih), in_ptr<T>(b_hh), ptr<const T>(hx), ptr<T>(hy), out_ptr<T>(ws), hy.size(1), n);
  });
}

void gru_cell_backward(const Tensor& grad_hy, const Tensor& hx, const Tensor& ws, const Tensor& grad_gi,
                       const Tensor& grad_gh, const Tensor& grad_hx) {
  const int64_t n = hx.numel();
  KernelContext ctx(hx);
  dispatch_floating(hx.dtype(), "gru cell backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch(ctx, gru_cell_backward_kernel<T>, unit_blocks(n), kBlockSize, 0, ptr<const T>(grad_hy), ptr<const T>(hx),
           ptr<const T>(ws), ptr<T>(grad_gi), ptr<T>(grad_gh), ptr<T>(grad_hx), hx.size(1), n);
  });
}

AG_REGISTER_KERNEL(kernel::rnn_cell_forward, kCUDA, rnn_cell_forward);
AG_REGISTER_KERNEL(kernel::rnn_cell_backward, kCUDA, rnn_cell_backward);
AG_REGISTER_KERNEL(kernel::lstm_cell_forward, kCUDA, lstm_cell_forward);
AG_REGISTER_KERNEL(kernel::lstm_cell_backward, kCUDA, lstm_cell_backward);
AG_REGISTER_KERNEL(kernel::gru_cell_forward, kCUDA, gru_cell_forward);
AG_REGISTER_KERNEL(kernel::gru_cell_backward, kCUDA, gru_cell_backward);

}  // namespace ampgrad::cuda
