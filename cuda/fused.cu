// Multi-tensor kernels for the loss scaler and the fused optimizers (Note [Fused steps]):
// one launch covers up to kMaxTensors tensors, its blocks sharing their chunks (Note [Chunks]).
#include <cooperative_groups.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <mutex>
#include <utility>

#include <ampgrad/cuda/common.cuh>
#include <ampgrad/core/fused_kernels.h>
#include <ampgrad/core/step_formulas.h>
#include <ampgrad/cuda/graph.h>
#include <ampgrad/cuda/launch.cuh>

namespace ampgrad::cuda {

namespace {

// Tensors a launch covers: 64 (the small GPT's 53 parameters in one launch of the check and
// one of Adam, not two each). Their lists are kernel arguments of up to 4.7 KB (Adam's six),
// over the 4 KB CUDA allowed before 12.1; the toolkit is 13 (up to 32 KB on sm_70 and later).
constexpr int kMaxTensors = 64;
constexpr int kFusedBlock = 512;
constexpr int kUnroll = 4;
// Chunks of kUnroll items per thread a block must have at least before a launch takes them
// (Note [Chunks]): with fewer, the blocks' shares differ by a whole chunk in 1 or 2.
constexpr int kChunksPerBlock = 4;
// The largest step (in elements) whose inf check runs inside the step's launch, behind a grid
// barrier (Note [One-launch scaled step]).
constexpr int64_t kCheckInsideMaxNumel = int64_t(1) << 20;

// Pointers of up to L aligned lists (param, grad, state...) for one launch, passed by value.
template <int L> struct TensorLists {
  void* ptr[L][kMaxTensors];
  int64_t numel[kMaxTensors];
  float* step[kMaxTensors];  // per-tensor step counters (optimizers), else null
  int64_t chunk_start[kMaxTensors + 1];  // tensor t's first chunk (Note [Chunks]); [count]: all
  int count;
  int unroll;  // items per thread in a chunk: 1 or kUnroll (Note [Chunks])
};

// Note [Chunks]
// A launch covers up to kMaxTensors tensors of any sizes, and its blocks share the work
// evenly: each tensor's items (elements, or groups of 4 with vec4) are cut into chunks,
// numbered across the tensors (chunk_start), and block b takes chunks b, b + gridDim.x, ...
// A grid of one row of blocks per tensor, sized by the largest, left most blocks idle on a
// small network (a few weights, several tiny biases): the small MLP's optimizer step took
// 23 us of device time that way, 4x its bytes' worth. A chunk is kFusedBlock * unroll items,
// each thread taking `unroll` of them, kFusedBlock apart: kUnroll independent loads in
// flight per thread where every block gets kChunksPerBlock such chunks or more (large steps,
// bound by bandwidth), 1 where not (small steps: more, smaller chunks keep every SM busy and
// the blocks' shares even). The grid is at most what fits on the device at once (occupancy),
// each block looping over its chunks: a grid of 8 blocks an SM where 2 of Adam's fit ran
// the small GPT's step in 3.65 waves, each block paying the bias corrections' prologue and
// barrier (ncu: 40 % of the warps' cycles waiting at a barrier, 20 % of DRAM bandwidth).
template <int U, int L, class F>
__device__ __forceinline__ void for_each_item_unrolled(const TensorLists<L>& lists, int shift, F&& f) {
  const int64_t total = lists.chunk_start[lists.count];
  int t = 0;
  for (int64_t c = blockIdx.x; c < total; c += gridDim.x) {
    while (c >= lists.chunk_start[t + 1]) ++t;
    const int64_t base = (c - lists.chunk_start[t]) * kFusedBlock * U + threadIdx.x, n = lists.numel[t] >> shift;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t i = base + static_cast<int64_t>(u) * kFusedBlock;
      if (i < n) f(t, i);
    }
  }
}

// Calls f(t, i) for every item i of every tensor t of the launch (elements, or groups of 4
// elements with shift 2), by chunks (Note [Chunks]).
template <int L, class F> __device__ __forceinline__ void for_each_item(const TensorLists<L>& lists, int shift, F&& f) {
  if (lists.unroll == kUnroll) for_each_item_unrolled<kUnroll>(lists, shift, f);
  else for_each_item_unrolled<1>(lists, shift, f);
}

// Note [Step counters in the kernel]
// An optimizer's step counters (Adam's bias correction, SGD's first momentum step) used to
// advance in a launch of their own after the update kernel: on a small network's step, one
// launch in forty. The update kernel now advances them itself, in its last block to finish:
// every block reads the counters of the tensors whose chunks it updates, and the last block
// to finish (Note [Last block] in cuda/common.cuh), so after every read, adds 1 to each
// counter of the launch. A
// skipped step (found_inf set) counts nothing. The same last block runs a scale update that
// rides in the step's launch (Note [One-launch scaled step] in core/fused_kernels.h). The SGD and Adam kernels
// share the counter: their launches are serialized too.
__device__ unsigned int g_blocks_done = 0;

// GradScaler's update as a launch's arguments; scale == nullptr: none.
struct ScaleUpdateArgs {
  float* scale = nullptr;
  int32_t* growth = nullptr;
  int32_t* hyst = nullptr;
  float* inv_scale = nullptr;
  float* last_scale = nullptr;
  float* last_found = nullptr;
  bool clear_found = false;
  bool unused[7] = {};  // no padding: kernel arguments are keyed by their bytes (Note [Kernel graphs])
  ScaleRule rule;
};

// Kernel arguments without padding bytes (Note [Kernel graphs] in cuda/launch.cuh).
static_assert(sizeof(SgdHyper) == 4 * 8 + 2 + 6 && sizeof(AdamHyper) == 5 * 8 + 3 + 5);
static_assert(sizeof(ScaleRule) == 6 * 8 && sizeof(ScaleUpdateArgs) == 6 * 8 + 1 + 7 + sizeof(ScaleRule));
static_assert(sizeof(TensorLists<4>) == 4 * 64 * 8 + 64 * 8 * 2 + 65 * 8 + 2 * 4);


ScaleUpdateArgs update_args(const ScaleUpdate& u) {
  ScaleUpdateArgs a;
  a.scale = ptr<float>(u.scale);
  a.growth = ptr<int32_t>(u.growth_tracker);
  a.hyst = ptr<int32_t>(u.hysteresis_left);
  a.inv_scale = ptr<float>(u.rec.inv_scale);
  a.last_scale = ptr<float>(u.rec.last_scale);
  a.last_found = ptr<float>(u.rec.last_found);
  a.clear_found = u.rec.clear_found;
  a.rule = u.rule;
  return a;
}

// GradScaler's update (step_formulas::next_scale_state), by one thread. Every load first, then
// the stores: one memory round trip each way.
__device__ void apply_scale_update(const ScaleUpdateArgs& u, float* found_inf) {
  const float found = *found_inf;
  const step_formulas::ScaleState old{*u.scale, *u.growth, *u.hyst};
  const step_formulas::ScaleState next = step_formulas::next_scale_state(old, found != 0.0f, u.rule);
  *u.last_scale = old.scale;
  *u.last_found = found;
  if (u.clear_found) *found_inf = 0.0f;
  *u.scale = next.scale;
  *u.growth = next.growth_tracker;
  *u.hyst = next.hysteresis_left;
  *u.inv_scale = 1.0f / next.scale;
}

// The start of a step kernel: with kCheck (a cooperative launch), every block checks its
// chunks of the gradients (list 1) and sets found_inf, then the grid waits for all of them.
// Returns whether the step is skipped.
template <class G, bool kCheck, int L>
__device__ __forceinline__ bool step_skipped(const TensorLists<L>& lists, bool vec4, float* found_inf) {
  if constexpr (kCheck) {
    bool bad = false;
    for_each_item(lists, vec4 ? 2 : 0, [&](int t, int64_t i) {
      const G* g = static_cast<const G*>(lists.ptr[1][t]);
      if (vec4) {
        const Vec<G, 4> v = reinterpret_cast<const Vec<G, 4>*>(g)[i];
#pragma unroll
        for (int e = 0; e < 4; ++e) step_formulas::unscale(to_acc(v.v[e]), dacc_t<G>(1), bad);
      } else {
        step_formulas::unscale(to_acc(g[i]), dacc_t<G>(1), bad);
      }
    });
    if (bad) *found_inf = 1.0f;  // many threads may write 1.0f: the same value, a benign race
    cooperative_groups::this_grid().sync();
  }
  return found_inf != nullptr && *static_cast<volatile float*>(found_inf) != 0.0f;
}

// The end of a step kernel: the last block to finish advances the step counters (unless the
// step was skipped) and runs the scale update it carries, after every block has read found_inf.
template <int L>
__device__ __forceinline__ void finish_step(const TensorLists<L>& lists, bool skipped, float* found_inf,
                                            const ScaleUpdateArgs& up) {
  if (!last_block_done(&g_blocks_done)) return;
  // A thread per counter (each tensor has its own): one thread's loop over them waited a
  // memory round trip per tensor, in turn.
  if (!skipped && static_cast<int>(threadIdx.x) < lists.count) *lists.step[threadIdx.x] += 1.0f;
  if (up.scale && threadIdx.x == 0) apply_scale_update(up, found_inf);
}

template <class G>
__global__ void amp_check_unscale_kernel(TensorLists<1> lists, float* found_inf, const float* inv_scale, bool write,
                                         bool vec4) {
  using A = dacc_t<G>;  // float, or double for float64 gradients
  const A inv = write ? static_cast<A>(*inv_scale) : A(1);
  bool bad = false;
  auto one = [&](G& x) {
    const A v = step_formulas::unscale(to_acc(x), inv, bad);
    if (write) x = from_acc<G>(v);
  };
  for_each_item(lists, vec4 ? 2 : 0, [&](int t, int64_t i) {
    G* g = static_cast<G*>(lists.ptr[0][t]);
    if (vec4) {
      Vec<G, 4> v = reinterpret_cast<const Vec<G, 4>*>(g)[i];
#pragma unroll
      for (int e = 0; e < 4; ++e) one(v.v[e]);
      if (write) reinterpret_cast<Vec<G, 4>*>(g)[i] = v;
    } else {
      one(g[i]);
    }
  });
  // Many threads may write 1.0f; the value is the same, so the race is benign.
  if (bad) *found_inf = 1.0f;
}

__global__ void amp_update_scale_kernel(ScaleUpdateArgs u, float* found_inf) { apply_scale_update(u, found_inf); }

// SGD's update of the launch's tensors (lists as sgd_kernel's).
template <class P, class G, class W>
__device__ __forceinline__ void sgd_items(const TensorLists<4>& lists, const float* inv_scale, const SgdHyper& h,
                                           bool vec4) {
  using A = std::conditional_t<std::is_same_v<P, double>, double, float>;
  const A inv = inv_scale ? static_cast<A>(*inv_scale) : A(1);
  const bool momentum = h.momentum != 0;
  // One element (step_formulas::sgd_update): gradient and parameter in, momentum buffer updated
  // in place (as stored), new parameter out.
  auto update = [&](A gi, A x, P& b_s, bool first) -> P {
    A b = momentum ? static_cast<A>(to_acc(b_s)) : A(0);
    const A nx = step_formulas::sgd_update(gi, x, b, first, h, inv, [&](A v) {
      b_s = from_acc<P>(v);
      return static_cast<A>(to_acc(b_s));
    });
    return from_acc<P>(nx);
  };
  // Whether the tensor last seen takes its first step (a block's chunks rarely change tensor).
  int seen = -1;
  bool first = false;
  for_each_item(lists, vec4 ? 2 : 0, [&](int t, int64_t i) {
    if (t != seen) {
      seen = t;
      first = *lists.step[t] == 0.0f;
    }
    P* p = static_cast<P*>(lists.ptr[0][t]);
    const G* g = static_cast<const G*>(lists.ptr[1][t]);
    P* buf = static_cast<P*>(lists.ptr[2][t]);
    W* w = static_cast<W*>(lists.ptr[3][t]);
    if (vec4) {
      Vec<P, 4> pv = reinterpret_cast<const Vec<P, 4>*>(p)[i];
      const Vec<G, 4> gv = reinterpret_cast<const Vec<G, 4>*>(g)[i];
      Vec<P, 4> bv{};
      if (momentum) bv = reinterpret_cast<const Vec<P, 4>*>(buf)[i];
      Vec<W, 4> wv{};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        pv.v[e] = update(static_cast<A>(to_acc(gv.v[e])), static_cast<A>(to_acc(pv.v[e])), bv.v[e], first);
        if (w) wv.v[e] = from_acc<W>(to_acc(pv.v[e]));
      }
      reinterpret_cast<Vec<P, 4>*>(p)[i] = pv;
      if (momentum) reinterpret_cast<Vec<P, 4>*>(buf)[i] = bv;
      if (w) reinterpret_cast<Vec<W, 4>*>(w)[i] = wv;
    } else {
      P unused{};
      const P nx = update(static_cast<A>(to_acc(g[i])), static_cast<A>(to_acc(p[i])), momentum ? buf[i] : unused,
                          first);
      p[i] = nx;
      if (w) w[i] = from_acc<W>(to_acc(nx));
    }
  });
}

// Lists: 0 param (P), 1 grad (G), 2 momentum buffer (P, unused without momentum), 3 working copy
// (W, null where a tensor has none). `vec4` as in adam_kernel; kCheck and `up` as in
// step_skipped and finish_step.
template <class P, class G, class W, bool kCheck>
__global__ void sgd_kernel(TensorLists<4> lists, float* found_inf, const float* inv_scale, SgdHyper h, bool vec4,
                           ScaleUpdateArgs up) {
  const bool skipped = step_skipped<G, kCheck>(lists, vec4, found_inf);
  if (!skipped) sgd_items<P, G, W>(lists, inv_scale, h, vec4);
  finish_step(lists, skipped, found_inf, up);
}

// Adam's update of the launch's tensors (lists as adam_kernel's).
template <class P, class G, class W>
__device__ __forceinline__ void adam_items(const TensorLists<6>& lists, const float* inv_scale, const AdamHyper& h,
                                            bool vec4) {
  using A = std::conditional_t<std::is_same_v<P, double>, double, float>;
  const A inv = inv_scale ? static_cast<A>(*inv_scale) : A(1);
  // The bias corrections of each tensor, once per block, a thread each (each thread computing
  // them at each chunk it took cost the small GPT's step launches 5-10 % on ncu).
  __shared__ step_formulas::AdamCorrections<A> corrections[kMaxTensors];
  if (static_cast<int>(threadIdx.x) < lists.count)
    corrections[threadIdx.x] =
        step_formulas::adam_corrections<A>(h, static_cast<int64_t>(*lists.step[threadIdx.x]) + 1);
  __syncthreads();
  int corrected = -1;
  step_formulas::AdamCorrections<A> c{};
  // One element (step_formulas::adam_update): gradient, parameter and state in, state updated
  // in place, new parameter out.
  auto update = [&](A gi, A x, P& m_s, P& v_s, P& vmax_s) -> P {
    A m = static_cast<A>(to_acc(m_s)), v = static_cast<A>(to_acc(v_s));
    A vmax = h.amsgrad ? static_cast<A>(to_acc(vmax_s)) : A(0);
    const A nx = step_formulas::adam_update(gi, x, m, v, vmax, h, c, inv);
    m_s = from_acc<P>(m);
    v_s = from_acc<P>(v);
    if (h.amsgrad) vmax_s = from_acc<P>(vmax);
    return from_acc<P>(nx);
  };
  for_each_item(lists, vec4 ? 2 : 0, [&](int t, int64_t i) {
    if (t != corrected) {
      corrected = t;
      c = corrections[t];
    }
    P* p = static_cast<P*>(lists.ptr[0][t]);
    const G* g = static_cast<const G*>(lists.ptr[1][t]);
    P* m = static_cast<P*>(lists.ptr[2][t]);
    P* v = static_cast<P*>(lists.ptr[3][t]);
    P* vmax = static_cast<P*>(lists.ptr[4][t]);
    W* w = static_cast<W*>(lists.ptr[5][t]);
    if (vec4) {
      Vec<P, 4> pv = reinterpret_cast<const Vec<P, 4>*>(p)[i];
      const Vec<G, 4> gv = reinterpret_cast<const Vec<G, 4>*>(g)[i];
      Vec<P, 4> mv = reinterpret_cast<const Vec<P, 4>*>(m)[i];
      Vec<P, 4> vv = reinterpret_cast<const Vec<P, 4>*>(v)[i];
      Vec<P, 4> xv{};
      if (h.amsgrad) xv = reinterpret_cast<const Vec<P, 4>*>(vmax)[i];
      Vec<W, 4> wv{};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        pv.v[e] = update(static_cast<A>(to_acc(gv.v[e])), static_cast<A>(to_acc(pv.v[e])), mv.v[e], vv.v[e], xv.v[e]);
        if (w) wv.v[e] = from_acc<W>(to_acc(pv.v[e]));
      }
      reinterpret_cast<Vec<P, 4>*>(p)[i] = pv;
      reinterpret_cast<Vec<P, 4>*>(m)[i] = mv;
      reinterpret_cast<Vec<P, 4>*>(v)[i] = vv;
      if (h.amsgrad) reinterpret_cast<Vec<P, 4>*>(vmax)[i] = xv;
      if (w) reinterpret_cast<Vec<W, 4>*>(w)[i] = wv;
    } else {
      P unused{};
      const P nx = update(static_cast<A>(to_acc(g[i])), static_cast<A>(to_acc(p[i])), m[i], v[i],
                          h.amsgrad ? vmax[i] : unused);
      p[i] = nx;
      if (w) w[i] = from_acc<W>(to_acc(nx));
    }
  });
}

// Lists: 0 param, 1 grad, 2 exp_avg, 3 exp_avg_sq, 4 max_exp_avg_sq (amsgrad), 5 working copy
// (W, null where a tensor has none).
// With `vec4`, every tensor of the launch is aligned for 4-element loads, with a multiple of 4 elements,
// and each thread moves 4 elements per array per load. kCheck and `up` as in step_skipped and finish_step.
template <class P, class G, class W, bool kCheck>
__global__ void adam_kernel(TensorLists<6> lists, float* found_inf, const float* inv_scale, AdamHyper h, bool vec4,
                            ScaleUpdateArgs up) {
  const bool skipped = step_skipped<G, kCheck>(lists, vec4, found_inf);
  if (!skipped) adam_items<P, G, W>(lists, inv_scale, h, vec4);
  finish_step(lists, skipped, found_inf, up);
}

// Launches `launch(lists, count, max_numel)` for each run of up to kMaxTensors tensors; a run of
// empty tensors only with `launch_empty` (optimizer steps: their counters advance in the kernel).
template <int L, class Fill, class Launch>
void in_batches(size_t n, Fill&& fill, Launch&& launch, bool launch_empty = false) {
  for (size_t start = 0; start < n; start += kMaxTensors) {
    TensorLists<L> lists{};
    const int count = static_cast<int>(std::min<size_t>(kMaxTensors, n - start));
    lists.count = count;
    int64_t max_numel = 0;
    for (int j = 0; j < count; ++j) {
      fill(lists, j, start + j);
      max_numel = std::max(max_numel, lists.numel[j]);
    }
    if (max_numel > 0 || launch_empty) launch(lists, count, max_numel);
  }
}

// Whether a launch can take 4 elements per load: every size a multiple of 4 and every
// pointer aligned for 4 elements of the widest type (4 doubles: 32 bytes).
template <int L> bool lists_vec4(const TensorLists<L>& l, int count) {
  for (int j = 0; j < count; ++j) {
    if (l.numel[j] % 4 != 0) return false;
    for (int a = 0; a < L; ++a)
      if (l.ptr[a][j] != nullptr && !is_aligned(l.ptr[a][j], 32)) return false;
  }
  return true;
}

// How many blocks of kFusedBlock threads of `kernel` fit on an SM of `device` at once (at
// least 1). Asked once per kernel and device.
int resident_per_sm(const void* kernel, int device) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, int> known;
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find({kernel, device});
  if (it != known.end()) return it->second;
  int per_sm = 0;
  AG_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kFusedBlock, 0));
  return known[{kernel, device}] = std::max(per_sm, 1);
}

// Numbers the chunks of a launch's tensors, items of 4 elements with vec4 (Note [Chunks]), and
// returns `kernel`'s grid: a block per chunk, at most as many as fit on the device at once
// (each then takes several chunks in turn).
template <int L> dim3 chunk_grid(const KernelContext& ctx, const void* kernel, TensorLists<L>& l, bool vec4) {
  const int64_t cap = static_cast<int64_t>(ctx.sm_count) * resident_per_sm(kernel, ctx.device);
  int64_t items = 0;
  for (int j = 0; j < l.count; ++j) items += vec4 ? l.numel[j] / 4 : l.numel[j];
  l.unroll = items >= cap * kFusedBlock * kUnroll * kChunksPerBlock ? kUnroll : 1;
  const int64_t chunk = static_cast<int64_t>(kFusedBlock) * l.unroll;
  l.chunk_start[0] = 0;
  for (int j = 0; j < l.count; ++j)
    l.chunk_start[j + 1] = l.chunk_start[j] + ((vec4 ? l.numel[j] / 4 : l.numel[j]) + chunk - 1) / chunk;
  return dim3(static_cast<unsigned>(std::clamp<int64_t>(l.chunk_start[l.count], 1, cap)));
}

// zero_kernel's grid: blockIdx.y picks the tensor; enough blocks in all to fill the device a
// few times, each looping over its share of the largest.
dim3 zero_grid(const KernelContext& ctx, int count, int64_t max_words) {
  const int64_t per_block = static_cast<int64_t>(kFusedBlock) * kUnroll;
  const int64_t x = (max_words + per_block - 1) / per_block;
  const int64_t cap = std::max<int64_t>(1, static_cast<int64_t>(ctx.sm_count) * 8 / count);
  return dim3(static_cast<unsigned>(std::clamp<int64_t>(x, 1, cap)), static_cast<unsigned>(count));
}

// Zeroes whole blocks of bytes (contiguous tensors of any dtype: zero is all-zero bits in
// each): 16-byte words, then the byte tail. numel[] holds byte counts here.
__global__ void zero_kernel(TensorLists<1> lists) {
  const int t = blockIdx.y;
  char* p = static_cast<char*>(lists.ptr[0][t]);
  const int64_t nbytes = lists.numel[t], words = nbytes / 16;
  const int64_t gid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = gid; i < words; i += step) reinterpret_cast<uint4*>(p)[i] = make_uint4(0, 0, 0, 0);
  for (int64_t i = words * 16 + gid; i < nbytes; i += step) p[i] = 0;
}

// Calls f(TypeTag<P>, TypeTag<G>) for the (param, grad) dtype pairs the kernels support.
template <class F> void dispatch_pair(DType p, DType g, const char* op, F&& f) {
  if (p == g) {
    dispatch_floating(p, op, [&](auto pt) { f(pt, pt); });
    return;
  }
  AG_CHECK(p == DType::Float32 && (g == DType::Float16 || g == DType::BFloat16),
           "{} on cuda: parameters of {} with gradients of {} are not supported", op, dtype_name(p), dtype_name(g));
  if (g == DType::Float16) f(TypeTag<float>{}, TypeTag<__half>{});
  else f(TypeTag<float>{}, TypeTag<__nv_bfloat16>{});
}

// Calls f(TypeTag<P>, TypeTag<G>, TypeTag<W>) with W the working copies' type: G for master
// weights (and when there are none), float16 or bfloat16 for autocast's kept copies of
// float32 parameters (Note [Working copies] in speedups/working_copies.h).
template <class F> void dispatch_step(DType p, DType g, DType w, const char* op, F&& f) {
  dispatch_pair(p, g, op, [&](auto pt, auto gt) {
    using P = typename decltype(pt)::type;
    using G = typename decltype(gt)::type;
    if (w == g) return f(pt, gt, gt);
    if constexpr (std::is_same_v<P, float> && std::is_same_v<G, float>) {
      if (w == DType::Float16) return f(pt, gt, TypeTag<__half>{});
      if (w == DType::BFloat16) return f(pt, gt, TypeTag<__nv_bfloat16>{});
    }
    AG_CHECK(false, "{} on cuda: parameters of {} with gradients of {} and working copies of {} are not supported",
             op, dtype_name(p), dtype_name(g), dtype_name(w));
  });
}

// The dtype of param k's working copy (its grad's when it has none).
DType working_dtype(const FusedStep& s, size_t k) {
  return !s.working.empty() && s.working[k].defined() ? s.working[k].dtype() : s.grads[k].dtype();
}

// A run of a step's tensors: one (param, grad, working copy) dtype triple, in order.
struct Run {
  std::array<DType, 3> dtypes;
  std::vector<size_t> tensors;
};

// Splits a step's tensors into runs of one dtype triple, preserving order. A tensor without
// a working copy (its pointer null in the launch) joins the run of its param and grad dtypes
// that has one: the small GPT's float32 layer-norm parameters and embeddings share the launch
// of its weights (one launch fewer, and with everything in one launch the check and the scale
// update fold into it, Note [One-launch scaled step]).
std::vector<Run> by_dtype(const FusedStep& s) {
  auto has_copy = [&](size_t k) { return !s.working.empty() && s.working[k].defined(); };
  std::vector<std::array<DType, 3>> copies;  // the first working copy dtype of each (param, grad)
  for (size_t k = 0; k < s.params.size(); ++k) {
    if (!has_copy(k)) continue;
    const std::array<DType, 3> key{s.params[k].dtype(), s.grads[k].dtype(), s.working[k].dtype()};
    if (std::none_of(copies.begin(), copies.end(), [&](const auto& c) { return c[0] == key[0] && c[1] == key[1]; }))
      copies.push_back(key);
  }
  std::vector<Run> runs;
  for (size_t k = 0; k < s.params.size(); ++k) {
    std::array<DType, 3> key{s.params[k].dtype(), s.grads[k].dtype(), working_dtype(s, k)};
    if (!has_copy(k)) {
      for (const auto& c : copies)
        if (c[0] == key[0] && c[1] == key[1]) key[2] = c[2];
    }
    auto it = std::find_if(runs.begin(), runs.end(), [&](const Run& r) { return r.dtypes == key; });
    if (it == runs.end()) it = runs.insert(runs.end(), Run{key, {}});
    it->tensors.push_back(k);
  }
  return runs;
}

void* working_ptr(const FusedStep& s, size_t k) {
  return !s.working.empty() && s.working[k].defined() ? ampgrad::detail::address(s.working[k]) : nullptr;
}

}  // namespace

void amp_check_and_unscale(const std::vector<Tensor>& grads, const Tensor& found_inf, const Tensor& inv_scale,
                           bool write_back) {
  if (grads.empty()) return;
  KernelContext ctx(found_inf);
  for (DType dt : {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64}) {
    std::vector<const Tensor*> same;
    for (const Tensor& g : grads)
      if (g.dtype() == dt) same.push_back(&g);
    if (same.empty()) continue;
    dispatch_floating(dt, "amp_check_and_unscale", [&](auto tag) {
      using G = typename decltype(tag)::type;
      in_batches<1>(
          same.size(),
          [&](TensorLists<1>& l, int j, size_t k) {
            l.ptr[0][j] = ampgrad::detail::address(*same[k]);
            l.numel[j] = same[k]->numel();
          },
          [&](TensorLists<1>& l, int, int64_t) {
            const bool vec4 = lists_vec4(l, l.count);
            launch(ctx, amp_check_unscale_kernel<G>,
                   chunk_grid(ctx, reinterpret_cast<const void*>(&amp_check_unscale_kernel<G>), l, vec4), kFusedBlock, 0, l,
                   ptr<float>(found_inf), write_back ? ptr<float>(inv_scale) : nullptr, write_back, vec4);
          });
    });
  }
  for (const Tensor& g : grads)
    AG_CHECK(is_floating(g.dtype()), "amp_check_and_unscale on cuda: gradient {} is not floating", g.desc());
}

void zero_tensors(const std::vector<Tensor>& ts) {
  if (ts.empty()) return;
  KernelContext ctx(ts[0]);
  for (const Tensor& t : ts)
    AG_INTERNAL_ASSERT(t.is_contiguous() && t.device() == ts[0].device() && is_aligned(ampgrad::detail::address(t), 16),
                       "zero_tensors: {} is not a contiguous, 16-byte aligned tensor of {}", t.desc(),
                       ts[0].device().str());
  in_batches<1>(
      ts.size(),
      [&](TensorLists<1>& l, int j, size_t k) {
        l.ptr[0][j] = ampgrad::detail::address(ts[k]);
        l.numel[j] = static_cast<int64_t>(ts[k].nbytes());
      },
      [&](TensorLists<1>& l, int count, int64_t max_bytes) {
        launch(ctx, zero_kernel, zero_grid(ctx, count, max_bytes / 16 + 1), kFusedBlock, 0, l);
      });
}

void amp_update_scale(const ScaleUpdate& u, const Tensor& found_inf) {
  KernelContext ctx(u.scale);
  launch(ctx, amp_update_scale_kernel, 1, 1, 0, update_args(u), ptr<float>(found_inf));
}

namespace {

// How many blocks of kFusedBlock threads of `kernel` fit on device `device` at once: the
// largest grid a cooperative launch of it may have (0 where the device has no cooperative
// launch). Asked once per kernel and device.
int64_t cooperative_capacity(const void* kernel, int device, int sm_count) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, int64_t> known;
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find({kernel, device});
  if (it != known.end()) return it->second;
  int cooperative = 0, per_sm = 0;
  AG_CUDA_CHECK(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device));
  if (cooperative) AG_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kFusedBlock, 0));
  return known[{kernel, device}] = static_cast<int64_t>(per_sm) * sm_count;
}

// Launches `kernel` cooperatively (its grid must fit on the device at once), as a graph once
// its arguments repeat (Note [Kernel graphs] in cuda/launch.cuh); false where fewer blocks fit
// than the occupancy said (MPS limits, say): nothing was launched.
template <class... Params, class... Args>
bool launch_cooperative(const KernelContext& ctx, void (*kernel)(Params...), dim3 grid, const Args&... args) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeCooperative;
  attr.val.cooperative = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(kFusedBlock);
  cfg.stream = ctx.stream;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  cudaError_t err = cudaSuccess;
  auto enqueue = [&] {
    err = cudaLaunchKernelEx(&cfg, kernel, args...);
    if (err != cudaErrorCooperativeLaunchTooLarge) AG_CUDA_CHECK(err);
    else (void)cudaGetLastError();
  };
  // A launch refused inside the capture leaves an empty graph: the capture fails, and the
  // key's calls (this one included) run directly, where the refusal shows in err.
  launch_call(
      ctx,
      [&] {
        return detail::kernel_key(kernel, grid, cfg.blockDim, 0, ctx.stream,
                                  detail::implicitly<std::remove_cv_t<Params>>(args)...)
            .add(uint64_t{0xc0});  // cooperative
      },
      enqueue);
  return err != cudaErrorCooperativeLaunchTooLarge;
}

// One launch of a step kernel. With `check` it must check the step's gradients itself: the
// kCheck instantiation, launched cooperatively (its grid capped to what fits at once). Where
// that cannot be (a CUDA graph capturing, no cooperative launch), the check runs as a launch
// of its own first and the plain kernel follows.
template <class... Params, class... Args>
void launch_step(const KernelContext& ctx, const FusedStep& s, bool check, dim3 grid, void (*checking)(Params...),
                 void (*plain)(Params...), Args... args) {
  if (check) {
    const int device = s.params[0].device().index;
    const int64_t capacity = capturing(device) ? 0 : cooperative_capacity(reinterpret_cast<const void*>(checking),
                                                                          device, ctx.sm_count);
    if (capacity > 0) {
      grid.x = static_cast<unsigned>(std::min<int64_t>(grid.x, capacity));
      if (launch_cooperative(ctx, checking, grid, args...)) return;
    }
    amp_check_and_unscale(s.grads, s.found_inf, Tensor(), /*write_back=*/false);
  }
  launch(ctx, plain, grid, kFusedBlock, 0, args...);
}

// A fused optimizer step as FusedStep describes (Note [One-launch scaled step]): one launch
// per run of up to kMaxTensors tensors of one dtype triple. `fill(lists, j, k)` puts tensor k
// in slot j; `kernels(P, G, W)` gives the kCheck and plain instantiations for a triple.
template <int L, class Fill, class Kernels, class Hyper>
void fused_step(const FusedStep& s, const char* op, Fill&& fill, Kernels&& kernels, const Hyper& h) {
  AG_INTERNAL_ASSERT(!s.check_grads || s.update, "{}: a step checks its gradients only with a scale update", op);
  if (s.params.empty()) {
    AG_INTERNAL_ASSERT(!s.update, "{}: a scale update needs at least one gradient", op);
    return;
  }
  KernelContext ctx(s.params[0]);
  const std::vector<Run> runs = by_dtype(s);
  // The check and the update ride in the step's launch only when one launch covers the step.
  const bool fold = s.update && runs.size() == 1 && runs[0].tensors.size() <= static_cast<size_t>(kMaxTensors);
  // A grid barrier needs a grid that fits on the device at once, and every block waits there
  // for the slowest; a launch saved matters only where launch time binds. So only a step
  // small enough for that checks inside its launch. (With one row of blocks per tensor the
  // capped grid had streamed large steps at a fraction of the bandwidth; with chunks
  // (Note [Chunks]) a large step inside was not measured.)
  int64_t numel = 0;
  for (const Tensor& p : s.params) numel += p.numel();
  const bool check_inside = fold && s.check_grads && numel <= kCheckInsideMaxNumel;
  if (s.check_grads && !check_inside) amp_check_and_unscale(s.grads, s.found_inf, Tensor(), /*write_back=*/false);
  const ScaleUpdateArgs up = fold ? update_args(*s.update) : ScaleUpdateArgs{};
  float* found_inf = mut_or_null<float>(s.found_inf);
  for (const Run& r : runs) {
    const std::vector<size_t>& run = r.tensors;
    dispatch_step(r.dtypes[0], r.dtypes[1], r.dtypes[2], op,
                  [&](auto pt, auto gt, auto wt) {
      const auto [checking, plain] = kernels(pt, gt, wt);
      in_batches<L>(
          run.size(), [&](TensorLists<L>& l, int j, size_t r) { fill(l, j, run[r]); },
          [&](TensorLists<L>& l, int, int64_t) {
            const bool vec4 = lists_vec4(l, l.count);
            launch_step(ctx, s, check_inside, chunk_grid(ctx, reinterpret_cast<const void*>(plain), l, vec4),
                        checking, plain, l, found_inf, ptr_or_null<float>(s.inv_scale), h, vec4, up);
          },
          /*launch_empty=*/true);
    });
  }
  if (s.update && !fold) amp_update_scale(*s.update, s.found_inf);
}

}  // namespace

void sgd_step(const FusedStep& s, const std::vector<Tensor>& momentum_bufs, const std::vector<Tensor>& steps,
              const SgdHyper& h) {
  fused_step<4>(
      s, "sgd_step",
      [&](TensorLists<4>& l, int j, size_t k) {
        l.ptr[0][j] = ampgrad::detail::address(s.params[k]);
        l.ptr[1][j] = ampgrad::detail::address(s.grads[k]);
        l.ptr[2][j] = momentum_bufs.empty() ? nullptr : ampgrad::detail::address(momentum_bufs[k]);
        l.ptr[3][j] = working_ptr(s, k);
        l.step[j] = static_cast<float*>(ampgrad::detail::address(steps[k]));
        l.numel[j] = s.params[k].numel();
      },
      [](auto pt, auto gt, auto wt) {
        using P = typename decltype(pt)::type;
        using G = typename decltype(gt)::type;
        using W = typename decltype(wt)::type;
        return std::pair{&sgd_kernel<P, G, W, true>, &sgd_kernel<P, G, W, false>};
      },
      h);
}

void adam_step(const FusedStep& s, const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
               const std::vector<Tensor>& max_exp_avg_sqs, const std::vector<Tensor>& steps, const AdamHyper& h) {
  fused_step<6>(
      s, "adam_step",
      [&](TensorLists<6>& l, int j, size_t k) {
        l.ptr[0][j] = ampgrad::detail::address(s.params[k]);
        l.ptr[1][j] = ampgrad::detail::address(s.grads[k]);
        l.ptr[2][j] = ampgrad::detail::address(exp_avgs[k]);
        l.ptr[3][j] = ampgrad::detail::address(exp_avg_sqs[k]);
        l.ptr[4][j] = max_exp_avg_sqs.empty() ? nullptr : ampgrad::detail::address(max_exp_avg_sqs[k]);
        l.ptr[5][j] = working_ptr(s, k);
        l.step[j] = static_cast<float*>(ampgrad::detail::address(steps[k]));
        l.numel[j] = s.params[k].numel();
      },
      [](auto pt, auto gt, auto wt) {
        using P = typename decltype(pt)::type;
        using G = typename decltype(gt)::type;
        using W = typename decltype(wt)::type;
        return std::pair{&adam_kernel<P, G, W, true>, &adam_kernel<P, G, W, false>};
      },
      h);
}

AG_REGISTER_KERNEL(kernel::zero_tensors, kCUDA, zero_tensors);
AG_REGISTER_KERNEL(kernel::amp_check_and_unscale, kCUDA, amp_check_and_unscale);
AG_REGISTER_KERNEL(kernel::amp_update_scale, kCUDA, amp_update_scale);
AG_REGISTER_KERNEL(kernel::sgd_step, kCUDA, sgd_step);
AG_REGISTER_KERNEL(kernel::adam_step, kCUDA, adam_step);

}  // namespace ampgrad::cuda
