// CUDA softmax and log_softmax over the middle dim of [outer, r, inner], numerically stable.
#include "cuda/kernels.h"
#include "cuda/reduce.cuh"

namespace ampgrad::cuda {

namespace {

// One read computes each row's max m and sum s of exp(x - m) online (LseOp, which rescales s
// when m grows), a second read writes exp(x - m) / s or x - m - log(s). Layout as the
// reductions (Note [CUDA reductions] in reduce.cu): rows when inner == 1, else columns.

template <class T, class A> __device__ __forceinline__ T softmax_value(A x, LseState<A> st, A log_s, bool log) {
  return from_acc<T>(log ? x - st.m - log_s : math::exp(x - st.m) / st.s);
}

// inner == 1: blockDim.x threads per row, blockDim.y rows per block.
template <class T> __global__ void softmax_rows_kernel(const T* x, T* out, int64_t outer, int64_t r, bool log) {
  using Op = LseOp<T>;
  using A = typename Op::A;
  using State = typename Op::State;
  __shared__ State smem[kBlockSize];
  const Op op{};
  const int tx = threadIdx.x, ty = threadIdx.y, bx = blockDim.x;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * blockDim.y; base < outer;
       base += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    const int64_t row = base + ty;
    State* mine = smem + ty * bx;
    mine[tx] = row < outer ? accumulate_row(op, x + row * r, 0, r) : op.identity();
    __syncthreads();
    for (int s = bx / 2; s > 0; s >>= 1) {
      if (tx < s) mine[tx] = op.combine(mine[tx], mine[tx + s]);
      __syncthreads();
    }
    const State st = mine[0];
    if (row < outer) {
      const A log_s = math::log(st.s);
      const T* px = x + row * r;
      T* po = out + row * r;
      for (int64_t j = tx; j < r; j += bx) po[j] = softmax_value<T>(to_acc(px[j]), st, log_s, log);
    }
    __syncthreads();  // smem is reused by the next rows
  }
}

// inner > 1: blockDim.x threads over neighbouring inner positions, blockDim.y split r.
template <class T>
__global__ void softmax_cols_kernel(const T* x, T* out, int64_t outer, int64_t r, int64_t inner, bool log) {
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
    smem[ty * bx + tx] = acc;
    __syncthreads();
    for (int s = by / 2; s > 0; s >>= 1) {
      if (ty < s) smem[ty * bx + tx] = op.combine(smem[ty * bx + tx], smem[(ty + s) * bx + tx]);
      __syncthreads();
    }
    const State st = smem[tx];
    if (i < inner) {
      const A log_s = math::log(st.s);
      for (int64_t j = ty; j < r; j += by) out[first + j * inner] = softmax_value<T>(to_acc(x[first + j * inner]), st, log_s, log);
    }
    __syncthreads();
  }
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

unsigned grid_of(int64_t blocks) { return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(blocks, INT32_MAX))); }

}  // namespace

void softmax(const Tensor& x, const Tensor& out, bool log) {
  if (out.numel() == 0) return;
  KernelContext ctx(out);
  const int64_t outer = x.size(0), r = x.size(1), inner = x.size(2);
  dispatch_floating(x.dtype(), "softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = ptr<const T>(x);
    T* op = ptr<T>(out);
    if (inner == 1) {
      const int bx = r <= 256 ? 32 : (r <= 2048 ? 128 : 256), by = kBlockSize / bx;
      softmax_rows_kernel<T><<<grid_of(ceil_div(outer, by)), dim3(bx, by), 0, ctx.stream>>>(xp, op, outer, r, log);
    } else {
      int bx = 1;
      while (bx < inner && bx < 32) bx *= 2;
      const int by = kBlockSize / bx;
      softmax_cols_kernel<T>
          <<<grid_of(outer * ceil_div(inner, bx)), dim3(bx, by), 0, ctx.stream>>>(xp, op, outer, r, inner, log);
    }
    AG_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace ampgrad::cuda
