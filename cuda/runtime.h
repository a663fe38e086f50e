// The CUDA runtime layer: device queries, the library's stream, host<->device copies and
// memory statistics. Free of CUDA headers, so any .cpp (and a CPU-only build) can include it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

struct CUstream_st;  // cudaStream_t is CUstream_st*; declared here so no CUDA header is needed

namespace ampgrad::cuda {

struct DeviceProperties {
  std::string name;
  int major = 0;  // compute capability
  int minor = 0;
  int sm_count = 0;
  size_t total_memory = 0;  // bytes
  int max_threads_per_block = 0;
  int max_threads_per_sm = 0;
  size_t shared_memory_per_block = 0;  // bytes, without opt-in
  int l2_cache_size = 0;  // bytes
  int memory_bus_width = 0;  // bits
};

// Bytes, per device. `allocated` counts the bytes of live storages (as requested);
// `reserved` is what the memory pool holds from the driver, in use or cached.
struct MemoryStats {
  size_t allocated = 0;
  size_t peak_allocated = 0;
  size_t reserved = 0;
  uint64_t num_allocs = 0;
  uint64_t num_ooms = 0;  // allocations that failed even after trimming the cache
};

#ifdef AMPGRAD_WITH_CUDA

// True when a driver and at least one device are present. Never throws.
bool is_available();
// Number of visible devices; 0 without a driver. Never throws.
int device_count();
// Cached after the first call for each device.
const DeviceProperties& device_properties(int device = 0);
int current_device();
void set_device(int device);

// Note [CUDA stream]
// ampgrad runs all its device work (kernels, cuBLAS, copies, allocations and frees) on one
// stream per device that it owns: created on first use with cudaStreamNonBlocking, never
// destroyed (it lives as long as the process). A single stream keeps every op ordered after
// the ops whose outputs it reads without any events, and makes stream-ordered frees safe
// (Note [CUDA allocator]). Non-blocking means it does not synchronize with the legacy default
// stream: code that mixes ampgrad with its own CUDA work on another stream must call
// synchronize() (or use current_stream()) to order the two.
// current_stream() first submits the calls ampgrad holds back (Note [Launch batches] in
// cuda/call_graph.h), so that work queued on the stream it returns comes after them; a handle
// kept from an earlier call does not submit what was held since: take it again before use.
// Tensor::data_ptr() submits them too, and waits for them, so that code on any stream after
// cudaDeviceSynchronize() sees them (Note [Raw access] in core/tensor.h).
CUstream_st* current_stream(int device = -1);  // -1: the current device
// The same stream without submitting them: for the launch paths of cuda/ only, which go
// through run_call or call submit_launches() before they enqueue anything themselves.
CUstream_st* launch_stream(int device);
// Waits for all work on the current device; raises what the kernels found there (an index out
// of range: Note [Device-side errors] in cuda/device_error.h).
void synchronize();
// Off by default (AMPGRAD_SYNC_DEBUG=1 turns it on at start): every op synchronizes its device
// as it ends, so that an error the device finds is raised by the op that caused it, not at the
// next synchronization. For debugging: each op then waits for the device.
void set_sync_debug(bool on);
bool sync_debug();

// Byte copies on the stream of the device that owns the device pointer. memcpy_d2h returns
// once dst holds the data; memcpy_h2d returns once src may be reused; memcpy_d2d is
// asynchronous (stream-ordered).
void memcpy_h2d(void* dst, const void* src, size_t n);
void memcpy_d2h(void* dst, const void* src, size_t n);
void memcpy_d2d(void* dst, const void* src, size_t n);

// Opt-in (off by default, like torch.backends.cudnn.benchmark): time cuDNN's candidate
// algorithms once per convolution shape and cache the fastest; otherwise take cuDNN's
// heuristic choice (cuda/conv.cpp).
void set_cudnn_benchmark(bool on);
bool cudnn_benchmark();

// Opt-in (off by default, like torch.cuda.tunable; AMPGRAD_MATMUL_TUNING=1 turns it on at
// start): time cuBLASLt's candidate algorithms once per GEMM geometry and cache the fastest;
// otherwise take its heuristic's first (Note [Matmul tuning] in cuda/blas_lt.cpp).
void set_matmul_tuning(bool on);
bool matmul_tuning();
struct MatmulTuningStats {
  int64_t tuned = 0;    // geometries whose candidates were timed
  int64_t timed = 0;    // candidates timed
  int64_t changed = 0;  // geometries where a candidate beat the heuristic's first
};
MatmulTuningStats matmul_tuning_stats();

// Statistics of the caching allocator (cuda/allocator.cpp).
MemoryStats memory_stats(int device = 0);
void reset_peak_memory_stats(int device = 0);
// Returns the host block cache (Note [Host block cache]) and the unused memory of the
// device's pool to the driver.
void empty_cache(int device = 0);

// Note [Memory pools]
// The caching allocator keeps freed blocks per size (Note [Host block cache]) and hands a step's
// tensors the lowest-addressed free block of their size, so a training loop's tensors get the
// same addresses every step and its calls replay as graphs (Note [Call graphs] in
// cuda/call_graph.h). Two loops taken in turns in one process (fp32 and AMP copies of a model
// timed side by side, or a model trained between two others' evaluations) share those lists:
// the blocks one loop holds between its steps (its gradients) move the other's tensors, and
// after each switch a loop's addresses took 3-6 steps to settle again (the LSTMCell loop of
// `ampgrad bench step`: ~90 calls a step re-captured). A MemPool is a set of free lists of its
// own, as PyTorch's torch.cuda.MemPool: while a MemPoolGuard names it, the calling thread's
// allocations on its device take blocks from it, and blocks allocated so go back to it when
// freed, whatever is current then; guards of different devices are independent. Destroying
// the pool gives its free blocks back to the driver's memory pool (which keeps them reserved
// until empty_cache()); its blocks still in use go to the shared lists when they are freed.
// The pools share the host cache's cap (1 GiB of free blocks in all), and empty_cache() and
// the out-of-memory retry empty every pool's lists, live ones included.
class MemPool {
 public:
  explicit MemPool(int device = 0);
  ~MemPool();
  MemPool(const MemPool&) = delete;
  MemPool& operator=(const MemPool&) = delete;
  int device() const { return device_; }
  uint32_t id() const { return id_; }

 private:
  int device_;
  uint32_t id_;
};

// Allocations of this thread on the pool's device come from the pool while the guard lives
// (nested guards: the innermost wins; the one before is restored).
class MemPoolGuard {
 public:
  explicit MemPoolGuard(MemPool& pool);
  ~MemPoolGuard();
  MemPoolGuard(const MemPoolGuard&) = delete;
  MemPoolGuard& operator=(const MemPoolGuard&) = delete;

 private:
  int device_;
  uint32_t prev_id_;
};

#else  // CPU-only build: queries answer "no device"

// Pools change nothing without a device (Note [Memory pools]).
class MemPool {
 public:
  explicit MemPool(int device = 0) : device_(device) {}
  int device() const { return device_; }
  uint32_t id() const { return 0; }

 private:
  int device_;
};
class MemPoolGuard {
 public:
  explicit MemPoolGuard(MemPool&) {}
};

inline bool is_available() { return false; }
inline int device_count() { return 0; }
inline void synchronize() {}
inline void set_sync_debug(bool) {}
inline bool sync_debug() { return false; }
inline MemoryStats memory_stats(int = 0) { return {}; }
inline const DeviceProperties& device_properties(int = 0) {
  static const DeviceProperties none{"no CUDA device"};
  return none;
}
inline void reset_peak_memory_stats(int = 0) {}
inline void set_cudnn_benchmark(bool) {}
inline bool cudnn_benchmark() { return false; }
inline void set_matmul_tuning(bool) {}
inline bool matmul_tuning() { return false; }
struct MatmulTuningStats {
  int64_t tuned = 0, timed = 0, changed = 0;
};
inline MatmulTuningStats matmul_tuning_stats() { return {}; }

#endif

}  // namespace ampgrad::cuda
