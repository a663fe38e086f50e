// The CUDA allocator: stream-ordered allocations from each device's memory pool, which keeps
// freed memory cached; statistics; out-of-memory recovery and its error message.
#include <algorithm>
#include <atomic>
#include <functional>
#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <ampgrad/core/storage.h>
#include <ampgrad/cuda/call_graph.h>
#include <ampgrad/cuda/check.h>
#include <ampgrad/cuda/runtime.h>

namespace ampgrad::cuda {

// Note [CUDA allocator]
// cudaMalloc and cudaFree synchronize the device and cost tens of microseconds, so a training
// step that allocates hundreds of temporaries must not call them each time. PyTorch answers
// with its own caching allocator (size-class bins, block splitting, per-stream free lists and
// events for cross-stream reuse: thousands of lines). The driver has offered the same thing
// since CUDA 11.2: cudaMallocAsync/cudaFreeAsync on a memory pool. With the pool's release
// threshold at UINT64_MAX, freed blocks stay in the pool and a later cudaMallocAsync of a
// similar size is served from it without a driver round trip; the pool splits and coalesces
// blocks itself. Allocation and free are ordered on a stream: a block freed on the library
// stream (Note [CUDA stream]) is reused only by work queued after the free, so a tensor can be
// released while kernels that read it are still in flight, with no event bookkeeping here.
// What we keep is the accounting (allocated, peak, reserved) and out-of-memory recovery:
// on failure we wait for the stream (pending frees return to the pool), trim the pool to
// zero (cached blocks go back to the driver, defragmenting), retry once, and only then throw.
//
// Note [Host block cache]
// cudaMallocAsync and cudaFreeAsync are driver calls of about a microsecond each, a third of
// what a small op costs on the host, and a fifth of a 1024 x 1024 float16 GEMM (8 us on an
// H200), which allocates its 2 MiB output on every call. Blocks of up to kCachedBlock bytes
// therefore also have a host-side free list per device, keyed by size rounded up to 512
// bytes: a freed block goes on the list, not back to the pool, and the next request of its
// size class takes it back without a driver call. A training step asks for the same sizes
// every step, so exact size classes hit; nothing is split or coalesced here (the pool does
// that for what misses). A request takes the class's lowest-addressed free block, not the
// last one freed: then which blocks a step's tensors get depends only on which blocks are
// free when it starts, not on the order earlier steps freed them in, and a loop's tensors
// get the same addresses every step (every other step for a tensor kept across steps, like
// the last loss). With the last freed block first, the addresses of same-sized temporaries
// cycled through permutations many steps long, and kernel launches keyed by their pointers
// rarely repeated (Note [Kernel graphs] in cuda/launch.cuh). This is safe for the same reason the pool is: all of ampgrad's work
// on a device is ordered on one stream, so work queued after the free runs after the kernels
// that read the block. While a graph is being captured the list is left alone (captured
// kernels must not use blocks that eager code may reuse later), and blocks a capture
// allocated never enter it. The list holds at most kHostCacheBytes; it is emptied into the
// pool before an out-of-memory retry and by empty_cache(), so memory parked on it is never
// what makes an allocation fail.

namespace {

constexpr int kMaxDevices = 64;
constexpr size_t kCachedBlock = size_t{64} << 20;
constexpr size_t kHostCacheBytes = size_t{1} << 30;

size_t round_cached(size_t n) { return (std::max<size_t>(n, 1) + 511) / 512 * 512; }
// A free list's key: its pool (0: the shared lists) and its rounded size (at most kCachedBlock).
uint64_t cache_key(uint32_t pool, size_t nbytes) { return (static_cast<uint64_t>(pool) << 32) | nbytes; }
static_assert(kCachedBlock < (size_t{1} << 32));

// The pool a thread's allocations come from now (Note [Memory pools]): 0, the shared lists,
// unless a MemPoolGuard names one of `device`.
thread_local uint32_t t_pool[kMaxDevices] = {};  // per device: 0, or the guard's pool
uint32_t current_pool(int device) { return device >= 0 && device < kMaxDevices ? t_pool[device] : 0; }
std::atomic<uint32_t> next_pool_id{1};

struct DeviceCounters {
  std::once_flag pool_once;
  std::atomic<size_t> allocated{0};
  std::atomic<size_t> peak{0};
  std::atomic<uint64_t> num_allocs{0};
  std::atomic<uint64_t> num_ooms{0};
};

DeviceCounters& counters(int device) {
  static auto* all = new DeviceCounters[kMaxDevices];  // leaked: outlives tensors freed at exit
  AG_CHECK(device >= 0 && device < kMaxDevices, "cuda: device index {} out of range", device);
  return all[device];
}

std::string format_bytes(size_t n) {
  constexpr double kKiB = 1024.0;
  double v = static_cast<double>(n);
  if (v >= kKiB * kKiB * kKiB) return fmt::format("{:.2f} GiB", v / (kKiB * kKiB * kKiB));
  if (v >= kKiB * kKiB) return fmt::format("{:.2f} MiB", v / (kKiB * kKiB));
  if (v >= kKiB) return fmt::format("{:.2f} KiB", v / kKiB);
  return fmt::format("{} bytes", n);
}

cudaMemPool_t pool_of(int device) {
  cudaMemPool_t pool = nullptr;
  AG_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  return pool;
}

// Called on the first allocation of a device, never at load time (CI has no GPU).
void configure_pool(int device) {
  std::call_once(counters(device).pool_once, [device] {
    uint64_t keep_everything = UINT64_MAX;
    AG_CUDA_CHECK(cudaMemPoolSetAttribute(pool_of(device), cudaMemPoolAttrReleaseThreshold, &keep_everything));
  });
}

size_t reserved_bytes(int device) {
  uint64_t reserved = 0;
  AG_CUDA_CHECK(cudaMemPoolGetAttribute(pool_of(device), cudaMemPoolAttrReservedMemCurrent, &reserved));
  return static_cast<size_t>(reserved);
}

// Note [Frees during capture]
// While a CUDA graph is being captured (Note [CUDA graphs]), cudaFreeAsync becomes a graph
// free node and accepts only memory allocated by the same capture. A tensor allocated
// before the capture and released during it (the previous step's loss, say) is therefore
// not freed then: its pointer waits here until the capture ends.
struct CaptureState {
  std::mutex mu;
  // Written under mu; read without it by cuda::capturing (autograd and autocast ask per step).
  std::atomic<bool> capturing{false};
  std::unordered_set<void*> graph_allocs;
  std::vector<void*> deferred;
  std::unordered_set<void*> graph_owned;  // allocated by a capture and not yet freed
  // Note [Host block cache]: free blocks by pool and rounded size (cache_key), and their total.
  std::unordered_map<uint64_t, std::vector<void*>> cached_free;
  size_t cached_bytes = 0;
  // Note [Memory pools]: the pool of each live block allocated under a MemPoolGuard, and the
  // pools alive now.
  std::unordered_map<void*, uint32_t> block_pool;
  std::unordered_set<uint32_t> live_pools;
};
CaptureState& capture_state(int device) {
  static auto* all = new CaptureState[kMaxDevices];  // leaked, like the counters
  return all[device];
}

void count_allocation(int dev, size_t nbytes) {
  DeviceCounters& c = counters(dev);
  size_t now = c.allocated.fetch_add(nbytes) + nbytes;
  size_t peak = c.peak.load();
  while (now > peak && !c.peak.compare_exchange_weak(peak, now)) {
  }
  c.num_allocs.fetch_add(1);
}

// A cached block of exactly `nbytes` (rounded), or nullptr (Note [Host block cache]).
void* take_cached(int dev, uint32_t pool, size_t nbytes) {
  CaptureState& cs = capture_state(dev);
  std::lock_guard<std::mutex> lock(cs.mu);
  if (cs.capturing) return nullptr;
  auto it = cs.cached_free.find(cache_key(pool, nbytes));
  if (it == cs.cached_free.end() || it->second.empty()) return nullptr;
  // The lowest address (Note [Host block cache]): the list is a min-heap.
  std::pop_heap(it->second.begin(), it->second.end(), std::greater<>());
  void* p = it->second.back();
  it->second.pop_back();
  cs.cached_bytes -= nbytes;
  if (pool != 0) cs.block_pool[p] = pool;
  return p;
}

// Returns every block of the host cache to the pool.
// Returns every block of the host cache to the pool; with `only`, those of that MemPool only.
// While a graph captures, the blocks are freed when it ends (Note [Frees during capture]).
void release_cached(int dev, std::optional<uint32_t> only = std::nullopt) {
  std::vector<void*> blocks;
  {
    CaptureState& cs = capture_state(dev);
    std::lock_guard<std::mutex> lock(cs.mu);
    for (auto it = cs.cached_free.begin(); it != cs.cached_free.end();) {
      if (only && (it->first >> 32) != *only) {
        ++it;
        continue;
      }
      cs.cached_bytes -= (it->first & 0xffffffffu) * it->second.size();
      blocks.insert(blocks.end(), it->second.begin(), it->second.end());
      it = cs.cached_free.erase(it);
    }
    if (cs.capturing) {
      cs.deferred.insert(cs.deferred.end(), blocks.begin(), blocks.end());
      return;
    }
  }
  if (blocks.empty()) return;
  DeviceGuard guard(dev);
  cudaStream_t stream = current_stream(dev);
  // Every block is given back even if one fails; the first failure is reported after.
  cudaError_t first = cudaSuccess;
  for (void* p : blocks) {
    const cudaError_t e = cudaFreeAsync(p, stream);
    if (e != cudaSuccess && first == cudaSuccess) first = e;
  }
  if (first != cudaSuccess) (void)cudaGetLastError();
  AG_CUDA_CHECK(first);
}

class CudaAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, Device device) override {
    const int dev = device.index;
    AG_CHECK(dev >= 0 && dev < device_count(), "cuda: cannot allocate on {}: {} CUDA device(s) visible", device.str(),
             device_count());
    const bool cached = nbytes <= kCachedBlock;
    if (cached) nbytes = round_cached(nbytes);
    const uint32_t pool = current_pool(dev);
    if (cached) {
      if (void* p = take_cached(dev, pool, nbytes)) {
        count_allocation(dev, nbytes);
        return p;
      }
    }
    DeviceGuard guard(dev);
    configure_pool(dev);
    // Held-back calls (Note [Launch batches]) need not be submitted first: the pool hands out
    // only memory freed to it, and a free to the pool submits them (deallocate). A block freed
    // to the host cache is handed out again by the same stream's later work, after them.
    cudaStream_t stream = launch_stream(dev);
    void* p = nullptr;
    cudaError_t err = cudaMallocAsync(&p, nbytes, stream);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // not sticky: clear it so later checks do not see it
      release_cached(dev);
      AG_CUDA_CHECK(cudaStreamSynchronize(current_stream(dev)));
      AG_CUDA_CHECK(cudaMemPoolTrimTo(pool_of(dev), 0));
      err = cudaMallocAsync(&p, nbytes, stream);
    }
    // A request beyond the device's memory may be refused as an invalid value: still an OOM.
    const size_t total = device_properties(dev).total_memory;
    if (err == cudaErrorMemoryAllocation || (err != cudaSuccess && nbytes > total)) {
      (void)cudaGetLastError();
      DeviceCounters& c = counters(dev);
      c.num_ooms.fetch_add(1);
      size_t in_use = c.allocated.load();
      size_t reserved = reserved_bytes(dev);
      size_t cached = reserved > in_use ? reserved - in_use : 0;
      throw Error(fmt::format("out of memory on {}: tried to allocate {} (in use {}, cached {}, device total {})",
                              device.str(), format_bytes(nbytes), format_bytes(in_use), format_bytes(cached),
                              format_bytes(total)));
    }
    AG_CUDA_CHECK(err);
    {
      CaptureState& cs = capture_state(dev);
      std::lock_guard<std::mutex> lock(cs.mu);
      if (cs.capturing) {
        cs.graph_allocs.insert(p);
        cs.graph_owned.insert(p);
      }
      if (pool != 0) cs.block_pool[p] = pool;
      else if (!cs.block_pool.empty()) cs.block_pool.erase(p);
    }
    count_allocation(dev, nbytes);
    return p;
  }

  void deallocate(void* ptr, size_t nbytes, Device device) noexcept override {
    const int dev = device.index;
    if (dev < 0 || dev >= kMaxDevices) return;
    const bool cached = nbytes <= kCachedBlock;
    if (cached) nbytes = round_cached(nbytes);  // as allocate() rounded it
    counters(dev).allocated.fetch_sub(nbytes);
    {
      CaptureState& cs = capture_state(dev);
      std::lock_guard<std::mutex> lock(cs.mu);
      // Back to the pool it came from while that pool lives (Note [Memory pools]); the block
      // leaves the map in every case, so an address the driver hands out again starts clean.
      uint32_t pool = 0;
      if (!cs.block_pool.empty()) {
        auto it = cs.block_pool.find(ptr);
        if (it != cs.block_pool.end()) {
          if (cs.live_pools.count(it->second)) pool = it->second;
          cs.block_pool.erase(it);
        }
      }
      if (cs.capturing && !cs.graph_allocs.count(ptr)) {
        cs.deferred.push_back(ptr);
        return;
      }
      const bool graph_owned = !cs.graph_owned.empty() && cs.graph_owned.erase(ptr) > 0;
      if (cached && !cs.capturing && !graph_owned && cs.cached_bytes + nbytes <= kHostCacheBytes) {
        try {
          std::vector<void*>& free = cs.cached_free[cache_key(pool, nbytes)];
          free.push_back(ptr);
          std::push_heap(free.begin(), free.end(), std::greater<>());
          cs.cached_bytes += nbytes;
          return;
        } catch (...) {  // no host memory for the list: give the block back to the pool
        }
      }
    }
    cudaStream_t stream = nullptr;
    try {
      stream = launch_stream(dev);  // exists: the block was allocated on it
    } catch (...) {
      return;
    }
    // Calls held back (Note [Launch batches]) may use the block: they go first.
    try_submit_launches(dev);
    // Fails harmlessly at process exit once the runtime is unloading; clear the error so the
    // next launch check does not report it.
    if (cudaFreeAsync(ptr, stream) != cudaSuccess) (void)cudaGetLastError();
  }
};

CudaAllocator& cuda_allocator() {
  static auto* allocator = new CudaAllocator();  // leaked: tensors may be freed during exit
  return *allocator;
}

// Registers the allocator when the library loads. Makes no CUDA call: the library must load
// on machines without a GPU or driver.
struct RegisterCudaAllocator {
  RegisterCudaAllocator() { set_allocator(DeviceType::CUDA, &cuda_allocator()); }
};
const RegisterCudaAllocator register_cuda_allocator;

}  // namespace

void allocator_capture_begin(int device) {
  CaptureState& cs = capture_state(device);
  std::lock_guard<std::mutex> lock(cs.mu);
  cs.capturing = true;
  cs.graph_allocs.clear();
}

void allocator_capture_end(int device) {
  std::vector<void*> deferred;
  {
    CaptureState& cs = capture_state(device);
    std::lock_guard<std::mutex> lock(cs.mu);
    cs.capturing = false;
    cs.graph_allocs.clear();
    deferred.swap(cs.deferred);
  }
  DeviceGuard guard(device);
  for (void* p : deferred) AG_CUDA_CHECK(cudaFreeAsync(p, current_stream(device)));
}

bool allocator_capturing(int device) {
  if (device < 0 || device >= kMaxDevices) return false;
  return capture_state(device).capturing.load();
}

MemoryStats memory_stats(int device) {
  DeviceCounters& c = counters(device);
  MemoryStats s;
  s.allocated = c.allocated.load();
  s.peak_allocated = c.peak.load();
  s.num_allocs = c.num_allocs.load();
  s.num_ooms = c.num_ooms.load();
  if (device < device_count()) s.reserved = reserved_bytes(device);
  return s;
}

void reset_peak_memory_stats(int device) {
  DeviceCounters& c = counters(device);
  c.peak.store(c.allocated.load());
}

MemPool::MemPool(int device) : device_(device), id_(next_pool_id.fetch_add(1)) {
  AG_CHECK(device >= 0 && device < device_count(), "MemPool: no CUDA device {} ({} visible)", device, device_count());
  CaptureState& cs = capture_state(device);
  std::lock_guard<std::mutex> lock(cs.mu);
  cs.live_pools.insert(id_);
}

MemPool::~MemPool() {
  {
    CaptureState& cs = capture_state(device_);
    std::lock_guard<std::mutex> lock(cs.mu);
    cs.live_pools.erase(id_);
  }
  try {
    release_cached(device_, id_);
  } catch (...) {  // a destructor must not throw; every block was handed back, the error is the device's
  }
}

MemPoolGuard::MemPoolGuard(MemPool& pool) : device_(pool.device()), prev_id_(t_pool[pool.device()]) {
  t_pool[device_] = pool.id();
}

MemPoolGuard::~MemPoolGuard() { t_pool[device_] = prev_id_; }

void empty_cache(int device) {
  if (device >= device_count()) return;
  release_cached(device);
  DeviceGuard guard(device);
  AG_CUDA_CHECK(cudaStreamSynchronize(current_stream(device)));
  AG_CUDA_CHECK(cudaMemPoolTrimTo(pool_of(device), 0));
}

}  // namespace ampgrad::cuda
