// CUDA reductions over the middle dim of [outer, r, inner]: deterministic, no float atomics.
#include <array>
#include <atomic>

#include <ampgrad/core/kernels.h>
#include <ampgrad/cuda/launch.cuh>
#include <ampgrad/cuda/reduce.cuh>

namespace ampgrad::cuda {

namespace {

// Note [CUDA reductions]
// Two kernels cover the geometry. With inner == 1 each row is contiguous: a group of
// blockDim.x threads (one warp for short rows, up to the whole block for long ones) reads a
// row with 16-byte loads and combines its states in shared memory (reduce_rows_kernel). With
// inner > 1, blockDim.x threads take neighbouring inner positions, so loads stay coalesced,
// and blockDim.y threads split r (reduce_cols_kernel). When there are too few outputs to fill
// the device (a full reduction has one), r is cut into `splits` chunks: the first pass writes
// one partial state per chunk, and a second pass, reduce_cols_kernel over the partials,
// combines them. Every combination happens in an order fixed by the shape (and, for split
// rows, the device: Note [One wave]), so results are identical from run to run (and there
// are no atomics).

struct ReduceShape {
  int64_t outer;
  int64_t r;
  int64_t inner;
  int64_t splits;  // chunks of r, each giving one partial state
  int64_t chunk;  // elements of r per chunk
};

// inner == 1. Thread group ty of the block handles slot (row, chunk) = base + ty.
template <class Op>
__global__ void reduce_rows_kernel(Op op, const typename Op::Elem* x, ReduceShape sh, void* out, int64_t* indices,
                                   typename Op::State* partial) {
  using State = typename Op::State;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  State* smem = reinterpret_cast<State*>(smem_raw);
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t slots = sh.outer * sh.splits;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * blockDim.y; base < slots;
       base += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    const int64_t slot = base + ty;
    State acc = op.identity();
    if (slot < slots) {
      const int64_t row = slot / sh.splits, part = slot % sh.splits;
      const int64_t begin = part * sh.chunk;
      acc = accumulate_row(op, x + row * sh.r, begin, min(sh.r, begin + sh.chunk));
    }
    const State total = combine_row(smem, acc, [&](State a, State b) { return op.combine(a, b); });
    if (tx == 0 && slot < slots) {
      if (partial) partial[slot] = total;
      else op.write(total, out, indices, slot);  // one chunk per row: slot is the row
    }
    __syncthreads();  // smem is reused by the next slots
  }
}

// inner > 1 (and the second pass over partials, kRaw false). Block b covers inner positions
// [tile * bx, tile * bx + bx) of chunk `part` of outer index o.
template <class Op, bool kRaw>
__global__ void reduce_cols_kernel(Op op, const std::conditional_t<kRaw, typename Op::Elem, typename Op::State>* x,
                                   ReduceShape sh, void* out, int64_t* indices, typename Op::State* partial) {
  using State = typename Op::State;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  State* smem = reinterpret_cast<State*>(smem_raw);
  const int tx = threadIdx.x, ty = threadIdx.y, bx = blockDim.x, by = blockDim.y;
  const int64_t tiles = (sh.inner + bx - 1) / bx;
  const int64_t nblocks = sh.outer * sh.splits * tiles;
  for (int64_t b = blockIdx.x; b < nblocks; b += gridDim.x) {
    const int64_t tile = b % tiles, rest = b / tiles;
    const int64_t part = rest % sh.splits, o = rest / sh.splits;
    const int64_t i = tile * bx + tx;
    State acc = op.identity();
    if (i < sh.inner) {
      const int64_t begin = part * sh.chunk, end = min(sh.r, begin + sh.chunk);
      auto add = [&](State s, int64_t j) {
        const auto v = x[(o * sh.r + j) * sh.inner + i];
        if constexpr (kRaw) return op.accumulate(s, to_acc(v), j);
        else return op.combine(s, v);
      };
      // Four independent states, so that four loads are in flight per thread (a column
      // reduction reads one element per row); combined in a fixed order at the end.
      State acc4[4] = {op.identity(), op.identity(), op.identity(), op.identity()};
      int64_t j = begin + ty;
      for (; j + 3 * by < end; j += 4 * by) {
#pragma unroll
        for (int u = 0; u < 4; ++u) acc4[u] = add(acc4[u], j + u * by);
      }
      for (; j < end; j += by) acc4[0] = add(acc4[0], j);
      acc = op.combine(op.combine(acc4[0], acc4[1]), op.combine(acc4[2], acc4[3]));
    }
    const State total = combine_col(smem, acc, [&](State a, State b) { return op.combine(a, b); });
    if (ty == 0 && i < sh.inner) {
      if (partial) partial[(o * sh.splits + part) * sh.inner + i] = total;
      else op.write(total, out, indices, o * sh.inner + i);
    }
    __syncthreads();
  }
}


// Note [One wave]
// A split reduction (one output or few) gives each block one chunk of r, so its time is that
// of the slowest wave of blocks: the grid is as many blocks as fit on the device at once (one
// wave for a full reduction; a few outputs round it up to a multiple of their count), asked of
// the occupancy calculator once per kernel and device. A fixed 8 blocks per SM was 1.33 waves
// once the kernels needed 40 registers a thread (6 blocks of 256 fit per SM): the last third of
// the blocks ran on a device a third full (norm of 64M float16 at 0.79 of a copy). The split,
// and so the order of the combination, then depends on the device and the build as well as
// the shape: still the same from run to run on one device.
template <auto Kernel> int64_t one_wave(const KernelContext& ctx, size_t smem) {
  static std::array<std::atomic<int>, 64> per_sm{};  // by device; 0: not asked yet
  AG_INTERNAL_ASSERT(ctx.device >= 0 && ctx.device < 64, "device index out of range");
  std::atomic<int>& known = per_sm[static_cast<size_t>(ctx.device)];
  int n = known.load(std::memory_order_relaxed);
  if (n == 0) {
    AG_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, Kernel, kBlockSize, smem));
    n = std::max(n, 1);
    known.store(n, std::memory_order_relaxed);
  }
  return static_cast<int64_t>(n) * ctx.sm_count;
}

template <class Op>
void run_reduce(const KernelContext& ctx, const Op& op, const Tensor& x, const Tensor& out, const Tensor& indices) {
  using T = typename Op::Elem;
  using State = typename Op::State;
  const int64_t outer = x.size(0), r = x.size(1), inner = x.size(2);
  const T* xp = ptr<const T>(x);
  void* op_out = ampgrad::detail::address(out);
  int64_t* ip = indices.defined() ? ptr<int64_t>(indices) : nullptr;
  const size_t smem = kBlockSize * sizeof(State);

  // Second pass (Note [CUDA reductions]): partials [outer, splits, inner] -> out.
  auto finish = [&](const State* partial, int64_t splits) {
    const int bx = pow2_at_least(inner, 32), by = kBlockSize / bx;
    ReduceShape sh{outer, splits, inner, 1, splits};
    launch(ctx, reduce_cols_kernel<Op, false>, grid_of(outer * ceil_div(inner, bx)), dim3(bx, by), smem, op, partial, sh, op_out, ip, nullptr);
  };
  auto partial_buffer = [&](int64_t count) {
    return empty({static_cast<int64_t>(count * sizeof(State))}, TensorOptions(kUInt8).device(out.device()));
  };

  if (inner == 1) {
    const int bx = reduce_row_threads<T>(r), by = kBlockSize / bx;
    const int64_t blocks = ceil_div(outer, by);
    const int64_t target_blocks = one_wave<reduce_rows_kernel<Op>>(ctx, smem);
    int64_t splits = 1, chunk = r;
    if (blocks < target_blocks && r >= 8192) {
      splits = std::min(ceil_div(target_blocks, blocks), ceil_div(r, 4096));
      chunk = ceil_div(ceil_div(r, splits), 16) * 16;  // chunk starts keep the row's alignment
      splits = ceil_div(r, chunk);
    }
    ReduceShape sh{outer, r, 1, splits, chunk};
    if (splits == 1) {
      launch(ctx, reduce_rows_kernel<Op>, grid_of(blocks), dim3(bx, by), smem, op, xp, sh, op_out, ip, nullptr);
      return;
    }
    Tensor buf = partial_buffer(outer * splits);
    auto* partial = ptr<State>(buf);
    launch(ctx, reduce_rows_kernel<Op>, grid_of(ceil_div(outer * splits, by)), dim3(bx, by), smem, op, xp, sh, op_out, ip, partial);
    finish(partial, splits);
    return;
  }

  const int bx = pow2_at_least(inner, 32), by = kBlockSize / bx;
  const int64_t blocks = outer * ceil_div(inner, bx);
  const int64_t target_blocks = one_wave<reduce_cols_kernel<Op, true>>(ctx, smem);
  int64_t splits = 1, chunk = r;
  if (blocks < target_blocks && r >= 16 * by) {
    splits = std::min(ceil_div(target_blocks, blocks), ceil_div(r, 8 * by));
    chunk = ceil_div(r, splits);
    splits = ceil_div(r, chunk);
  }
  ReduceShape sh{outer, r, inner, splits, chunk};
  if (splits == 1) {
    launch(ctx, reduce_cols_kernel<Op, true>, grid_of(blocks), dim3(bx, by), smem, op, xp, sh, op_out, ip, nullptr);
    return;
  }
  Tensor buf = partial_buffer(outer * splits * inner);
  auto* partial = ptr<State>(buf);
  launch(ctx, reduce_cols_kernel<Op, true>, grid_of(blocks * splits), dim3(bx, by), smem, op, xp, sh, op_out, ip, partial);
  finish(partial, splits);
}

// Reductions by dtype: floating types everywhere; Sum and Prod also on int64 (the op layer
// sums integers as int64); Max/Min/Argmax/Argmin also on int64, int32 and uint8, as the CPU.
template <bool kInt64, bool kNarrowInts, class F> void dispatch_reduce(DType t, const char* what, F&& f) {
  switch (t) {
    case DType::Float32: return f(TypeTag<float>{});
    case DType::Float16: return f(TypeTag<__half>{});
    case DType::BFloat16: return f(TypeTag<__nv_bfloat16>{});
    case DType::Float64: return f(TypeTag<double>{});
    default: break;
  }
  if constexpr (kInt64) {
    if (t == DType::Int64) return f(TypeTag<int64_t>{});
  }
  if constexpr (kNarrowInts) {
    if (t == DType::Int32) return f(TypeTag<int32_t>{});
    if (t == DType::UInt8) return f(TypeTag<uint8_t>{});
  }
  AG_CHECK(false, "{} on cuda: dtype {} is not supported", what, dtype_name(t));
}

// Note [CUDA scans]
// cumsum (and cumprod) along r of [outer, r, inner], one line per (outer, inner) position.
// Short lines, and lines side by side in inner when there are many, go one per thread, in
// order (neighbouring threads take neighbouring inner positions). Many contiguous lines go
// one per warp (cumsum_warp_lines_kernel). Other lines take a block each: the block scans a tile of kBlockSize * kScanItems elements (each thread its items in
// order, then the threads' totals by warp shuffles and across the warps in shared memory),
// adds the running carry and moves on. Sums are kept in the accumulation type, in an order
// fixed by the shape: deterministic.
constexpr int64_t kShortScan = 64;

// kProd: cumprod, the same scans with products (identity 1).
template <class A, bool kProd> __device__ __forceinline__ A scan_join(A a, A b) { return kProd ? a * b : a + b; }

template <class T, bool kProd>
__global__ void cumsum_lines_kernel(const T* x, T* out, int64_t lines, int64_t r, int64_t inner, bool reverse) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t line = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; line < lines; line += step) {
    const int64_t start = (line / inner) * r * inner + line % inner;
    dacc_t<T> s = kProd ? 1 : 0;
    for (int64_t k = 0; k < r; ++k) {
      const int64_t at = start + (reverse ? r - 1 - k : k) * inner;
      s = scan_join<dacc_t<T>, kProd>(s, to_acc(x[at]));
      out[at] = from_acc<T>(s);
    }
  }
}

// A block per line, tiles of kBlockSize * kItems elements: the tile is loaded coalesced into
// shared memory, each thread scans kItems consecutive elements of it, the threads' totals are
// scanned across the warp (shuffles) and the warps (shared memory), and the results go back
// through shared memory to coalesced stores. One element per thread per tile, with three
// barriers each, ran at 0.39 of a copy (f32, lines of 1024).
template <class T> inline constexpr int kScanItems = sizeof(T) >= 4 ? 4 : 8;

template <class T, bool kProd>
__global__ void cumsum_block_kernel(const T* x, T* out, int64_t r, int64_t inner, bool reverse) {
  using A = dacc_t<T>;
  constexpr int kItems = kScanItems<T>, kTile = kBlockSize * kItems, kWarps = kBlockSize / 32;
  // Padded: thread t's kItems consecutive entries fall in different banks.
  __shared__ A tile[kTile + kTile / 32];
  __shared__ A warp_total[kWarps];
  const A id = kProd ? A(1) : A(0);
  auto slot = [](int i) { return i + i / 32; };
  const int64_t line = blockIdx.x;
  const int64_t start = (line / inner) * r * inner + line % inner;
  const int tx = threadIdx.x, lane = tx % 32, warp = tx / 32;
  A carry = id;
  for (int64_t base = 0; base < r; base += kTile) {
    auto at = [&](int64_t k) { return start + (reverse ? r - 1 - k : k) * inner; };
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const int i = j * kBlockSize + tx;
      tile[slot(i)] = base + i < r ? A(to_acc(x[at(base + i)])) : id;
    }
    __syncthreads();
    A v[kItems];
    A mine = id;
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      mine = scan_join<A, kProd>(mine, tile[slot(tx * kItems + j)]);
      v[j] = mine;
    }
    // Inclusive scan of the threads' totals: across the warp, then across the warps.
    A w = mine;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const A n = __shfl_up_sync(0xffffffffu, w, d);
      if (lane >= d) w = scan_join<A, kProd>(w, n);
    }
    if (lane == 31) warp_total[warp] = w;
    __syncthreads();
    if (warp == 0) {
      A t = lane < kWarps ? warp_total[lane] : id;
#pragma unroll
      for (int d = 1; d < kWarps; d <<= 1) {
        const A n = __shfl_up_sync(0xffffffffu, t, d);
        if (lane >= d) t = scan_join<A, kProd>(t, n);
      }
      if (lane < kWarps) warp_total[lane] = t;
    }
    __syncthreads();
    // What comes before this thread's first element: the carry, the earlier warps, the
    // earlier lanes of this warp.
    const A lane_before = __shfl_up_sync(0xffffffffu, w, 1);
    A before = scan_join<A, kProd>(carry, warp > 0 ? warp_total[warp - 1] : id);
    if (lane > 0) before = scan_join<A, kProd>(before, lane_before);
#pragma unroll
    for (int j = 0; j < kItems; ++j) tile[slot(tx * kItems + j)] = scan_join<A, kProd>(before, v[j]);
    carry = scan_join<A, kProd>(carry, warp_total[kWarps - 1]);
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const int i = j * kBlockSize + tx;
      if (base + i < r) out[at(base + i)] = from_acc<T>(tile[slot(i)]);
    }
    __syncthreads();  // tile and warp_total are rewritten by the next tile
  }
}

// A warp per contiguous line (inner == 1), lines striding over the grid's warps: each lane
// takes kScanItems consecutive elements (one 16-byte load when kVec), scans them, and the
// lanes' totals are scanned by shuffles; no shared memory, no barriers. Tiles of 32 *
// kScanItems elements move along the line with a running carry.
template <class T, bool kProd, bool kVec>
__global__ void cumsum_warp_lines_kernel(const T* x, T* out, int64_t lines, int64_t r, bool reverse) {
  using A = dacc_t<T>;
  constexpr int kItems = kScanItems<T>;
  const A id = kProd ? A(1) : A(0);
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t line = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; line < lines; line += warps) {
    const T* xl = x + line * r;
    T* ol = out + line * r;
    A carry = id;
    for (int64_t base = 0; base < r; base += 32 * kItems) {
      const int64_t first = base + lane * kItems;
      A v[kItems];
      if constexpr (kVec) {  // !reverse, r a multiple of kItems, 16-byte aligned lines
        Vec<T, kItems> in;
        if (first < r) in = *reinterpret_cast<const Vec<T, kItems>*>(xl + first);
#pragma unroll
        for (int j = 0; j < kItems; ++j) v[j] = first < r ? A(to_acc(in.v[j])) : id;
      } else {
#pragma unroll
        for (int j = 0; j < kItems; ++j) {
          const int64_t k = first + j;
          v[j] = k < r ? A(to_acc(xl[reverse ? r - 1 - k : k])) : id;
        }
      }
#pragma unroll
      for (int j = 1; j < kItems; ++j) v[j] = scan_join<A, kProd>(v[j - 1], v[j]);
      A w = v[kItems - 1];
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        const A n = __shfl_up_sync(0xffffffffu, w, d);
        if (lane >= d) w = scan_join<A, kProd>(w, n);
      }
      const A lane_before = __shfl_up_sync(0xffffffffu, w, 1);
      const A before = lane > 0 ? scan_join<A, kProd>(carry, lane_before) : carry;
      if constexpr (kVec) {
        Vec<T, kItems> o;
#pragma unroll
        for (int j = 0; j < kItems; ++j) o.v[j] = from_acc<T>(scan_join<A, kProd>(before, v[j]));
        if (first < r) *reinterpret_cast<Vec<T, kItems>*>(ol + first) = o;
      } else {
#pragma unroll
        for (int j = 0; j < kItems; ++j) {
          const int64_t k = first + j;
          if (k < r) ol[reverse ? r - 1 - k : k] = from_acc<T>(scan_join<A, kProd>(before, v[j]));
        }
      }
      carry = scan_join<A, kProd>(carry, __shfl_sync(0xffffffffu, w, 31));
    }
  }
}

template <bool kProd> void scan(const Tensor& x, const Tensor& out, bool reverse) {
  const int64_t outer = x.size(0), r = x.size(1), inner = x.size(2), lines = outer * inner;
  if (out.numel() == 0) return;
  KernelContext ctx(out);
  dispatch_all(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      AG_INTERNAL_ASSERT(false, "cumsum on cuda: bool reaches the kernel as int64");
    } else {
      const T* xp = ptr<const T>(x);
      T* op = ptr<T>(out);
      // Short lines, or many lines side by side (neighbouring threads read neighbouring inner
      // positions): a thread per line.
      // Contiguous lines, enough of them to give every SM 16 warps: a warp per line.
      // Otherwise a block per line.
      if (r <= kShortScan || (inner > 1 && lines >= 16384)) {
        launch(ctx, cumsum_lines_kernel<T, kProd>, ctx.grid_stride_blocks(lines), kBlockSize, 0, xp, op, lines, r,
               inner, reverse);
      } else if (inner == 1 && lines >= 16 * static_cast<int64_t>(ctx.sm_count)) {
        const unsigned blocks = ctx.grid_stride_blocks(lines * 32);
        const bool vec = !reverse && r % kScanItems<T> == 0 && is_aligned(xp, 16) && is_aligned(op, 16);
        if (vec)
          launch(ctx, cumsum_warp_lines_kernel<T, kProd, true>, blocks, kBlockSize, 0, xp, op, lines, r, reverse);
        else
          launch(ctx, cumsum_warp_lines_kernel<T, kProd, false>, blocks, kBlockSize, 0, xp, op, lines, r, reverse);
      } else {
        AG_CHECK(lines <= INT32_MAX, "{} on cuda: {} lines of {} elements is more than one grid",
                 kProd ? "cumprod" : "cumsum", lines, r);
        launch(ctx, cumsum_block_kernel<T, kProd>, static_cast<unsigned>(lines), kBlockSize, 0, xp, op, r, inner,
               reverse);
      }
    }
  });
}
void cumsum(const Tensor& x, const Tensor& out, bool reverse) { scan<false>(x, out, reverse); }
void cumprod(const Tensor& x, const Tensor& out) { scan<true>(x, out, false); }

// One thread per line, in order (Note [cumprod's gradient] in ops/reduce.cpp): before the
// line's first zero z, grad_i = (sum over k >= i of g_k out_k) / x_i; at z, the sum over k >= z
// of g_k times the product of the line's other values up to k; after z, 0.
template <class T>
__global__ void cumprod_backward_kernel(const T* x, const T* out, const T* g, T* gx, int64_t lines, int64_t r,
                                        int64_t inner) {
  using A = dacc_t<T>;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t line = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; line < lines; line += step) {
    const int64_t start = (line / inner) * r * inner + line % inner;
    auto at = [&](int64_t k) { return start + k * inner; };
    int64_t z = r;
    for (int64_t k = 0; k < r && z == r; ++k)
      if (to_acc(x[at(k)]) == A(0)) z = k;
    // At z and after: the products of the values after z, times the product before z.
    A before = z > 0 ? A(to_acc(out[at(z - 1)])) : A(1), q = before, at_zero = 0;
    for (int64_t k = z; k < r; ++k) {
      if (k > z) q *= to_acc(x[at(k)]);
      at_zero += to_acc(g[at(k)]) * q;
      if (k > z) gx[at(k)] = from_acc<T>(A(0));
    }
    if (z < r) gx[at(z)] = from_acc<T>(at_zero);
    A suffix = 0;  // sum over k >= i of g_k out_k (out_k is 0 from z on)
    for (int64_t k = z - 1; k >= 0; --k) {
      suffix += to_acc(g[at(k)]) * to_acc(out[at(k)]);
      gx[at(k)] = from_acc<T>(suffix / to_acc(x[at(k)]));
    }
  }
}

void cumprod_backward(const Tensor& x, const Tensor& out, const Tensor& g, const Tensor& grad_x) {
  const int64_t outer = x.size(0), r = x.size(1), inner = x.size(2), lines = outer * inner;
  if (x.numel() == 0) return;
  KernelContext ctx(grad_x);
  dispatch_floating(x.dtype(), "cumprod backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch(ctx, cumprod_backward_kernel<T>, ctx.grid_stride_blocks(lines), kBlockSize, 0, ptr<const T>(x), ptr<const T>(out), ptr<const T>(g), ptr<T>(grad_x), lines, r, inner);
  });
}

}  // namespace

void reduce(ReduceKind k, const Tensor& x, const Tensor& out, const Tensor& indices, double param) {
  if (out.numel() == 0) return;
  KernelContext ctx(out);
  const int64_t r = x.size(1);
  switch (k) {
    case ReduceKind::Sum:
    case ReduceKind::Mean:
      return dispatch_reduce<true, false>(x.dtype(), "sum", [&](auto tag) {
        run_reduce(ctx, SumOp<typename decltype(tag)::type>{k == ReduceKind::Mean, r}, x, out, indices);
      });
    case ReduceKind::Prod:
      return dispatch_reduce<true, false>(x.dtype(), "prod", [&](auto tag) {
        run_reduce(ctx, ProdOp<typename decltype(tag)::type>{}, x, out, indices);
      });
    case ReduceKind::Max:
    case ReduceKind::Argmax:
      return dispatch_reduce<true, true>(x.dtype(), "max", [&](auto tag) {
        run_reduce(ctx, MinMaxOp<typename decltype(tag)::type, true>{k == ReduceKind::Argmax}, x, out, indices);
      });
    case ReduceKind::Min:
    case ReduceKind::Argmin:
      return dispatch_reduce<true, true>(x.dtype(), "min", [&](auto tag) {
        run_reduce(ctx, MinMaxOp<typename decltype(tag)::type, false>{k == ReduceKind::Argmin}, x, out, indices);
      });
    case ReduceKind::Var:
      return dispatch_reduce<false, false>(x.dtype(), "var", [&](auto tag) {
        run_reduce(ctx, VarOp<typename decltype(tag)::type>{param}, x, out, indices);
      });
    case ReduceKind::LogSumExp:
      return dispatch_reduce<false, false>(x.dtype(), "logsumexp", [&](auto tag) {
        run_reduce(ctx, LseOp<typename decltype(tag)::type>{}, x, out, indices);
      });
    case ReduceKind::Norm:
      return dispatch_reduce<false, false>(x.dtype(), "norm", [&](auto tag) {
        using T = typename decltype(tag)::type;
        using A = dacc_t<T>;
        math::visit_norm_mode(param, [&](auto mode, auto power) {
          run_reduce(ctx, NormOp<T, mode.value, power.value>{static_cast<A>(param), static_cast<A>(1.0 / param)}, x, out,
                     indices);
        });
      });
  }
  AG_INTERNAL_ASSERT(false, "reduce: unknown kind {}", static_cast<int>(k));
}

AG_REGISTER_KERNEL(kernel::reduce, kCUDA, reduce);
AG_REGISTER_KERNEL(kernel::cumsum, kCUDA, cumsum);
AG_REGISTER_KERNEL(kernel::cumprod, kCUDA, cumprod);
AG_REGISTER_KERNEL(kernel::cumprod_backward, kCUDA, cumprod_backward);

}  // namespace ampgrad::cuda
