// CUDA softmax and log_softmax over the middle dim of [outer, r, inner], numerically stable,
// and their backward passes; a 16-bit input may be read as is into a float32 output
// (log_softmax(x, dim, kFloat32): Note [Reading 16-bit inputs] in ops/softmax.cpp).
#include <ampgrad/core/kernels.h>
#include <ampgrad/cuda/launch.cuh>
#include <ampgrad/cuda/reduce.cuh>

namespace ampgrad::cuda {

namespace {

// One read computes each row's max m and sum s of exp(x - m) online (LseOp, which rescales s
// when m grows), a second read writes exp(x - m) / s or x - m - log(s). Layout as the
// reductions (Note [CUDA reductions] in reduce.cu): rows when inner == 1, else columns.

template <class O, class A> __device__ __forceinline__ O softmax_value(A x, LseState<A> st, A log_s, bool log) {
  return from_acc<O>(log ? x - st.m - log_s : math::exp(x - st.m) / st.s);
}

// inner == 1: blockDim.x threads per row, blockDim.y rows per block.
template <class T, class O> __global__ void softmax_rows_kernel(const T* x, O* out, int64_t outer, int64_t r, bool log) {
  using Op = LseOp<T>;
  using A = typename Op::A;
  using State = typename Op::State;
  __shared__ State smem[kBlockSize];
  const Op op{};
  const int tx = threadIdx.x, ty = threadIdx.y, bx = blockDim.x;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * blockDim.y; base < outer;
       base += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    const int64_t row = base + ty;
    const State st = combine_row(smem, row < outer ? accumulate_row(op, x + row * r, 0, r) : op.identity(),
                                 [&](State a, State b) { return op.combine(a, b); });
    if (row < outer) {
      const A log_s = math::log(st.s);
      const T* px = x + row * r;
      O* po = out + row * r;
      for (int64_t j = tx; j < r; j += bx) po[j] = softmax_value<O>(to_acc(px[j]), st, log_s, log);
    }
    __syncthreads();  // smem is reused by the next rows
  }
}

// inner > 1: blockDim.x threads over neighbouring inner positions, blockDim.y split r.
template <class T, class O>
__global__ void softmax_cols_kernel(const T* x, O* out, int64_t outer, int64_t r, int64_t inner, bool log) {
  using Op = LseOp<T>;
  using A = typename Op::A;
  using State = typename Op::State;
  __shared__ State smem[kBlockSize];
  const Op op{};
  const int tx = threadIdx.x, ty = threadIdx.y, bx = blockDim.x, by = blockDim.y;
  const int64_t tiles = (inner + bx - 1) / bx;
  for (int64_t b = blockIdx.x; b < outer * tiles; b += gridDim.x) {
    const int64_t o = b / tiles, i = (b % tiles) * bx + tx;
    const int64_t first = o * r * inner + i;  // x[o, 0, i]
    State acc = op.identity();
    if (i < inner) {
      for (int64_t j = ty; j < r; j += by) acc = op.accumulate(acc, to_acc(x[first + j * inner]), j);
    }
    const State st = combine_col(smem, acc, [&](State a, State b) { return op.combine(a, b); });
    if (i < inner) {
      const A log_s = math::log(st.s);
      for (int64_t j = ty; j < r; j += by) out[first + j * inner] = softmax_value<O>(to_acc(x[first + j * inner]), st, log_s, log);
    }
    __syncthreads();
  }
}

// The backward over r, with s the row's sum of g (log_softmax) or of g * y (softmax):
// log_softmax: gx = g - exp(y) * s; softmax: gx = y * (g - s). One kernel where the composite
// formula took four (a sum, exp, a broadcast multiply, a subtraction).
template <class A> __device__ __forceinline__ A softmax_grad(A g, A y, A s, bool log) {
  return log ? g - math::exp(y) * s : y * (g - s);
}

// inner == 1: blockDim.x threads per row, blockDim.y rows per block.
template <class O, class T>
__global__ void softmax_backward_rows_kernel(const O* g, const O* y, T* gx, int64_t outer, int64_t r, bool log) {
  using A = dacc_t<O>;
  __shared__ A smem[kBlockSize];
  const int tx = threadIdx.x, ty = threadIdx.y, bx = blockDim.x;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * blockDim.y; base < outer;
       base += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    const int64_t row = base + ty;
    A acc = 0;
    if (row < outer) {
      for (int64_t j = tx; j < r; j += bx) {
        const A gv = to_acc(g[row * r + j]);
        acc += log ? gv : gv * to_acc(y[row * r + j]);
      }
    }
    const A sum = combine_row(smem, acc, [](A a, A b) { return a + b; });
    if (row < outer) {
      for (int64_t j = tx; j < r; j += bx)
        gx[row * r + j] = from_acc<T>(softmax_grad(to_acc(g[row * r + j]), to_acc(y[row * r + j]), sum, log));
    }
    __syncthreads();  // smem is reused by the next rows
  }
}

// inner > 1: blockDim.x threads over neighbouring inner positions, blockDim.y split r.
template <class O, class T>
__global__ void softmax_backward_cols_kernel(const O* g, const O* y, T* gx, int64_t outer, int64_t r, int64_t inner,
                                             bool log) {
  using A = dacc_t<O>;
  __shared__ A smem[kBlockSize];
  const int tx = threadIdx.x, ty = threadIdx.y, bx = blockDim.x, by = blockDim.y;
  const int64_t tiles = (inner + bx - 1) / bx;
  for (int64_t b = blockIdx.x; b < outer * tiles; b += gridDim.x) {
    const int64_t o = b / tiles, i = (b % tiles) * bx + tx;
    const int64_t first = o * r * inner + i;
    A acc = 0;
    if (i < inner) {
      for (int64_t j = ty; j < r; j += by) {
        const A gv = to_acc(g[first + j * inner]);
        acc += log ? gv : gv * to_acc(y[first + j * inner]);
      }
    }
    const A sum = combine_col(smem, acc, [](A a, A b) { return a + b; });
    if (i < inner) {
      for (int64_t j = ty; j < r; j += by) {
        const int64_t k = first + j * inner;
        gx[k] = from_acc<T>(softmax_grad(to_acc(g[k]), to_acc(y[k]), sum, log));
      }
    }
    __syncthreads();
  }
}



struct Launch {
  dim3 grid, block;
};
// Rows (inner == 1): a warp to a full block per row, the rest of the block on more rows;
// columns: up to 32 neighbouring inner positions, the block's other threads split r.
Launch launch_of(int64_t outer, int64_t r, int64_t inner) {
  if (inner == 1) {
    const int bx = row_threads(r), by = kBlockSize / bx;
    return {dim3(grid_of(ceil_div(outer, by))), dim3(bx, by)};
  }
  const int bx = pow2_at_least(inner, 32);
  return {dim3(grid_of(outer * ceil_div(inner, bx))), dim3(bx, kBlockSize / bx)};
}
}  // namespace

void softmax(const Tensor& x, const Tensor& out, bool log) {
  if (out.numel() == 0) return;
  KernelContext ctx(out);
  const int64_t outer = x.size(0), r = x.size(1), inner = x.size(2);
  const Launch l = launch_of(outer, r, inner);
  dispatch_widened(x.dtype(), out.dtype(), "softmax", [&](auto tt, auto to) {
    using T = typename decltype(tt)::type;
    using O = typename decltype(to)::type;
    const T* xp = ptr<const T>(x);
    O* op = ptr<O>(out);
    if (inner == 1) launch(ctx, softmax_rows_kernel<T, O>, l.grid, l.block, 0, xp, op, outer, r, log);
    else launch(ctx, softmax_cols_kernel<T, O>, l.grid, l.block, 0, xp, op, outer, r, inner, log);
  });
}

void softmax_backward(const Tensor& g, const Tensor& y, const Tensor& grad_x, bool log) {
  if (grad_x.numel() == 0) return;
  KernelContext ctx(grad_x);
  const int64_t outer = y.size(0), r = y.size(1), inner = y.size(2);
  const Launch l = launch_of(outer, r, inner);
  dispatch_widened(grad_x.dtype(), y.dtype(), "softmax_backward", [&](auto tt, auto to) {
    using T = typename decltype(tt)::type;
    using O = typename decltype(to)::type;
    const O* gp = ptr<const O>(g);
    const O* yp = ptr<const O>(y);
    T* xp = ptr<T>(grad_x);
    if (inner == 1) launch(ctx, softmax_backward_rows_kernel<O, T>, l.grid, l.block, 0, gp, yp, xp, outer, r, log);
    else launch(ctx, softmax_backward_cols_kernel<O, T>, l.grid, l.block, 0, gp, yp, xp, outer, r, inner, log);
  });
}

AG_REGISTER_KERNEL(kernel::softmax, kCUDA, softmax);
AG_REGISTER_KERNEL(kernel::softmax_backward, kCUDA, softmax_backward);

}  // namespace ampgrad::cuda
