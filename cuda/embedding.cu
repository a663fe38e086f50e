// CUDA embedding backward, deterministic: each index's rows of the gradient summed in position
// order (Note [Embedding backward] in ops/embedding.cpp), found by a scan of the index for a
// small table and batch (Note [Embedding backward by scan]), else by sorting the positions by
// index (CUB's stable radix sort). The forward is index_select's gather (cuda/index.cu).
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>

#include <ampgrad/core/kernels.h>
#include <ampgrad/cuda/common.cuh>
#include <ampgrad/cuda/launch.cuh>

namespace ampgrad::cuda {

namespace {

// keys[j] = index[j], or `num` for an index out of range (sorted last, then skipped: the
// forward recorded it, Note [Device-side errors]); positions[j] = j.
__global__ void embedding_keys_kernel(const int64_t* index, int64_t* keys, int64_t* positions, int64_t n,
                                      int64_t num) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < n; j += step) {
    const int64_t v = index[j];
    keys[j] = v >= 0 && v < num ? v : num;
    positions[j] = j;
  }
}

// One thread per (sorted position i, column c), columns fastest: a position that starts a run
// of equal keys sums, at column c, the gradient rows of the run's positions in order, and
// stores the sum in the key's row of out (divided by the run's length when scale is set).
// A run is summed serially: fine for a batch's tokens (a character model's most common one,
// a few thousand times), slow for one index picked ~10^5 times, where fixed-size partial sums
// per run and a second pass (as PyTorch's) would keep the order fixed and spread the work.
template <class T>
__global__ void embedding_backward_kernel(const T* grad, const int64_t* keys, const int64_t* positions, T* out,
                                          int64_t n, int64_t dim, int64_t num, int64_t padding_idx, int64_t scale) {
  using A = dacc_t<T>;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < n * dim; p += step) {
    const int64_t i = p / dim, c = p - i * dim;
    const int64_t key = keys[i];
    if ((i > 0 && keys[i - 1] == key) || key == num || key == padding_idx) continue;
    A sum = A(0);
    int64_t end = i;
    for (; end < n && keys[end] == key; ++end) sum += to_acc(grad[positions[end] * dim + c]);
    if (scale) sum = sum * (A(1) / static_cast<A>(end - i));
    out[key * dim + c] = from_acc<T>(sum);
  }
}

// Note [Embedding backward by scan]
// The sort costs five launches (keys, CUB's histogram, scan and two passes) before the sums:
// 51 of a small GPT's 1376 us a step (vocabulary 256, 4096 tokens). Where the table times the
// index is small, one launch does it all: a block per table row (and per 256 columns), whose
// warps scan the index in order, 512 positions each, and list the row's positions in shared
// memory (ballots, then a prefix over the warps: ascending order); then each thread, a column,
// adds that column of the listed gradient rows in order, kScanDepth loads in flight. The sums
// are the sort path's, in the same order: the same bits, and the CPU's. Rows no index picked
// are left as they are (out comes zeroed). Each block reads the whole index: num * n * (column
// tiles) compares in all, so the scan is taken up to kScanMaxWork of them, and for at most
// kScanMaxIndex positions (a block's passes run in turn: a small table and a long index have
// few blocks for it).
constexpr int kScanPerWarp = 16;                     // ballots (of 32 positions) per warp and pass
constexpr int kScanDepth = 16;                       // gradient loads in flight per thread
constexpr int64_t kScanMaxWork = int64_t(1) << 22;  // num * n * column tiles
constexpr int64_t kScanMaxIndex = int64_t(1) << 16;
constexpr int kScanMaxWarps = 8;                     // blocks of at most 256 threads

template <class T>
__global__ void embedding_backward_scan_kernel(const T* grad, const int64_t* index, T* out, int64_t n, int64_t dim,
                                               int64_t padding_idx, bool scale) {
  using A = dacc_t<T>;
  __shared__ int hits[kScanMaxWarps * 32 * kScanPerWarp];  // the pass's positions of this row, ascending
  __shared__ int warp_hits[kScanMaxWarps];
  const int64_t row = blockIdx.x, c = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31,
            warps = static_cast<int>(blockDim.x) >> 5;
  const int64_t pass = static_cast<int64_t>(warps) * 32 * kScanPerWarp;
  A acc = A(0);
  int64_t count = 0;
  for (int64_t t0 = 0; t0 < n && row != padding_idx; t0 += pass) {
    const int64_t w0 = t0 + static_cast<int64_t>(warp) * 32 * kScanPerWarp;
    unsigned masks[kScanPerWarp];
    int mine = 0;
#pragma unroll
    for (int u = 0; u < kScanPerWarp; ++u) {
      const int64_t j = w0 + u * 32 + lane;
      masks[u] = __ballot_sync(0xffffffffu, j < n && index[j] == row);
      mine += __popc(masks[u]);
    }
    if (lane == 0) warp_hits[warp] = mine;
    __syncthreads();
    int offset = 0, total = 0;
    for (int w = 0; w < warps; ++w) {
      if (w < warp) offset += warp_hits[w];
      total += warp_hits[w];
    }
#pragma unroll
    for (int u = 0; u < kScanPerWarp; ++u) {
      if ((masks[u] >> lane) & 1u)
        hits[offset + __popc(masks[u] & ((1u << lane) - 1u))] = static_cast<int>(w0 - t0) + u * 32 + lane;
      offset += __popc(masks[u]);
    }
    __syncthreads();
    count += total;
    if (c < dim) {
      for (int k = 0; k < total; k += kScanDepth) {
        A v[kScanDepth];
#pragma unroll
        for (int u = 0; u < kScanDepth; ++u)
          if (k + u < total) v[u] = to_acc(grad[(t0 + hits[k + u]) * dim + c]);
#pragma unroll
        for (int u = 0; u < kScanDepth; ++u)
          if (k + u < total) acc += v[u];
      }
    }
    __syncthreads();  // every thread has read the list before the next pass writes it
  }
  if (c < dim && count > 0) out[row * dim + c] = from_acc<T>(scale ? acc * (A(1) / static_cast<A>(count)) : acc);
}

// The bits the sort looks at: enough for keys in [0, num].
int key_bits(int64_t num) {
  int bits = 1;
  while (bits < 63 && (int64_t{1} << bits) <= num) ++bits;
  return bits;
}

}  // namespace

void embedding_backward(const Tensor& grad, const Tensor& index, int64_t padding_idx, bool scale_grad_by_freq,
                        const Tensor& out) {
  const int64_t n = index.numel(), dim = grad.size(1), num = out.size(0);
  if (n == 0 || dim == 0) return;
  AG_CHECK(n <= INT32_MAX, "embedding backward on cuda: {} indices; at most 2^31 - 1 are supported", n);
  KernelContext ctx(out);
  const int threads = static_cast<int>(std::min<int64_t>(kScanMaxWarps * 32, (dim + 31) / 32 * 32));
  const int64_t tiles = (dim + threads - 1) / threads;
  if (n <= kScanMaxIndex && num * n * tiles <= kScanMaxWork) {  // Note [Embedding backward by scan]
    const dim3 grid(static_cast<unsigned>(num), static_cast<unsigned>(tiles));
    dispatch_floating(out.dtype(), "embedding backward", [&](auto tag) {
      using T = typename decltype(tag)::type;
      launch(ctx, embedding_backward_scan_kernel<T>, grid, threads, 0, ptr<const T>(grad), ptr<const int64_t>(index),
             ptr<T>(out), n, dim, padding_idx, scale_grad_by_freq);
    });
    return;
  }
  const TensorOptions i64 = TensorOptions(kInt64).device(out.device());
  const Tensor keys_in = empty({n}, i64), keys = empty({n}, i64), positions_in = empty({n}, i64),
               positions = empty({n}, i64);
  const int bits = key_bits(num);
  size_t temp_bytes = 0;
  AG_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, ptr<const int64_t>(keys_in), ptr<int64_t>(keys),
                                                ptr<const int64_t>(positions_in), ptr<int64_t>(positions),
                                                static_cast<int>(n), 0, bits, ctx.stream));
  const Tensor temp = empty({static_cast<int64_t>((temp_bytes + 7) / 8)}, i64);
  launch(ctx, embedding_keys_kernel, ctx.grid_stride_blocks(n), kBlockSize, 0, ptr<const int64_t>(index),
         ptr<int64_t>(keys_in), ptr<int64_t>(positions_in), n, num);
  // The sort's kernels, as one call (a graph once it repeats, Note [Call graphs] in
  // cuda/call_graph.h): stable, so equal keys keep their positions in ascending order.
  launch_call(
      ctx,
      [&] {
        CallKey key;
        key.add(uint64_t{6})  // 6: CUB's radix sort (1 cuBLASLt, 2 cuDNN, 3 a batch, 4 a fill, 5 a copy)
            .add(ampgrad::detail::address(temp))
            .add(static_cast<uint64_t>(temp_bytes))
            .add(ampgrad::detail::address(keys_in))
            .add(ampgrad::detail::address(keys))
            .add(ampgrad::detail::address(positions_in))
            .add(ampgrad::detail::address(positions))
            .add(static_cast<uint64_t>(n))
            .add(static_cast<uint64_t>(bits))
            .add(static_cast<const void*>(ctx.stream));
        return key;
      },
      [&] {
        size_t bytes = temp_bytes;
        AG_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(ampgrad::detail::address(temp), bytes, ptr<const int64_t>(keys_in),
                                                      ptr<int64_t>(keys), ptr<const int64_t>(positions_in),
                                                      ptr<int64_t>(positions), static_cast<int>(n), 0, bits,
                                                      ctx.stream));
      });
  dispatch_floating(out.dtype(), "embedding backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch(ctx, embedding_backward_kernel<T>, ctx.grid_stride_blocks(n * dim), kBlockSize, 0, ptr<const T>(grad),
           ptr<const int64_t>(keys), ptr<const int64_t>(positions), ptr<T>(out), n, dim, num, padding_idx,
           static_cast<int64_t>(scale_grad_by_freq));
  });
}

AG_REGISTER_KERNEL(kernel::embedding_backward, kCUDA, embedding_backward);

}  // namespace ampgrad::cuda
