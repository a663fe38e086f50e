// Library calls replayed as one-call CUDA graphs once they repeat (Note [Call graphs]).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

struct CUstream_st;

namespace ampgrad::cuda {

// Note [Call graphs]
// A cuBLASLt call costs 7-10 us of host time on the lent H200 machines (benchmarks/
// profile_gemm.cpp, "host_us"), against 2.5-3.5 us of device time for a small network's
// GEMM: cuBLASLt rebuilds the kernel's arguments (Hopper kernels take TMA descriptors of
// every operand) and launches through the driver on every call. The same GEMM captured in a
// CUDA graph launches in 1.3-2.1 us ("graph1_us"), because the graph's launch arguments are
// built once. A training loop repeats its calls exactly: the caching allocator hands each
// step's tensors the same addresses, so a GEMM's full argument list (its cached plan, the
// operand, output, bias and workspace pointers, alpha, beta and the stream) recurs every step.
//
// run_call() therefore keys a call by everything that determines what it enqueues. The first
// two calls of a key run directly (the first leaves only the key's hash, so that keys seen
// once never take a place in the table); the third is captured on the library stream
// (cudaStreamCaptureModeThreadLocal) into a graph of that one call, instantiated and launched,
// and later calls with the key only launch the graph. A graph replays exactly the kernels,
// and kernel arguments, that the direct call would enqueue now: the key holds every input
// of the call, and the graph reads and writes device memory at the same addresses when it
// runs, in stream order, as the direct call would. So results are bitwise those of the
// direct call. Keys and graphs live in one least-recently-used table (kCallGraphEntries);
// an evicted graph is destroyed (a graph still running is freed by the driver when done).
// Calls made while a CudaGraph captures the stream run directly (they are being captured
// anyway). A call whose capture fails (an API that cannot be captured, an error from inside the
// capture, a graph with no work in it) or whose graph fails to launch runs directly, and its
// key is marked never to be captured again. The enqueued work must not allocate: the
// allocator does not know of these captures (Note [Frees during capture]).
// AMPGRAD_CALL_GRAPHS=0 in the environment, or set_call_graphs_enabled(false), turns it off;
// AMPGRAD_CALL_GRAPHS_TRACE=1 prints every key first seen to stderr (finding keys that vary).
// PyTorch pays the same cuBLAS host cost on every call; its answer is whole-step graphs
// (torch.cuda.graphs), which ampgrad has too (Note [CUDA graphs]); this keeps eager steps fast.
// ampgrad's own kernels go through run_call as well while the host binds (Note [Kernel
// graphs] in cuda/launch.cuh): a kernel launch is keyed by the kernel and its arguments.

// Everything that determines what a call enqueues, as 64-bit words: a GEMM's few dozen, a
// kernel's arguments (Note [Kernel graphs] in cuda/launch.cuh) up to a few hundred. Keys of up
// to kInlineWords words live inside the key; longer ones on the heap.
class CallKey {
 public:
  static constexpr int kInlineWords = 48;
  CallKey() = default;
  CallKey(const CallKey& o) : heap_(o.heap_), n_(o.n_) {
    if (heap_.empty()) std::memcpy(inline_, o.inline_, sizeof(uint64_t) * static_cast<size_t>(n_));
  }
  CallKey& operator=(const CallKey& o) {
    heap_ = o.heap_;
    n_ = o.n_;
    if (heap_.empty()) std::memcpy(inline_, o.inline_, sizeof(uint64_t) * static_cast<size_t>(n_));
    return *this;
  }
  CallKey& add(uint64_t v) {
    if (heap_.empty() && n_ < kInlineWords) inline_[n_] = v;
    else spill(v);
    ++n_;
    return *this;
  }
  CallKey& add(const void* p) { return add(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p))); }
  template <typename T>
    requires(std::is_trivially_copyable_v<T> && sizeof(T) <= 8 && !std::is_pointer_v<T>)
  CallKey& add_bits(T v) {
    uint64_t w = 0;
    std::memcpy(&w, &v, sizeof(T));
    return add(w);
  }
  // The bytes of an object, in words (the last one zero-padded).
  CallKey& add_bytes(const void* p, size_t n);
  bool operator==(const CallKey& o) const {
    return n_ == o.n_ && std::memcmp(data(), o.data(), sizeof(uint64_t) * static_cast<size_t>(n_)) == 0;
  }
  size_t hash() const;
  int size() const { return n_; }
  uint64_t word(int i) const { return data()[i]; }

 private:
  const uint64_t* data() const { return heap_.empty() ? inline_ : heap_.data(); }
  void spill(uint64_t v);
  uint64_t inline_[kInlineWords];
  std::vector<uint64_t> heap_;  // all the words, once there are more than kInlineWords
  int n_ = 0;
};

constexpr int kCallGraphEntries = 512;

// Enqueues a call's work on `stream` (the library stream of `device`, made current by the
// caller): directly, or by launching the graph captured from an earlier call with an equal key.
void run_call(int device, CUstream_st* stream, const CallKey& key, void (*enqueue)(void*), void* ctx);
template <typename F>
void run_call(int device, CUstream_st* stream, const CallKey& key, F&& enqueue) {
  run_call(device, stream, key, [](void* f) { (*static_cast<std::remove_reference_t<F>*>(f))(); },
           const_cast<void*>(static_cast<const void*>(&enqueue)));
}

struct CallGraphStats {
  int64_t direct = 0;     // calls run directly (first sightings, failed keys, captures, disabled)
  int64_t captured = 0;   // graphs captured
  int64_t launched = 0;   // calls run as a graph launch (captures included)
  int64_t failed = 0;     // captures or graph launches that failed; their keys run directly from then on
  int64_t entries = 0;    // keys in the table now
};
CallGraphStats call_graph_stats();
// On by default; AMPGRAD_CALL_GRAPHS=0 turns it off at start. Turning it off destroys the graphs.
void set_call_graphs_enabled(bool enabled);
bool call_graphs_enabled();
// When ampgrad's own kernels launch through run_call (Note [Kernel graphs] in cuda/launch.cuh),
// while call graphs are on: never, only while the device keeps up with the host (the
// default), or always. AMPGRAD_KERNEL_GRAPHS=0, =auto or =1 sets it at start. Changing it
// keeps the table.
enum class KernelGraphs { off, when_host_bound, always };
void set_kernel_graphs(KernelGraphs mode);
KernelGraphs kernel_graphs();
// Whether a kernel launched now on `stream` of `device` should go through run_call: the mode,
// call graphs on, no CudaGraph capturing, and (when_host_bound) the device not far behind
// the host (Note [Kernel graphs]). Cheap: it looks at the device every kProbeLaunches calls.
bool launch_kernels_as_graphs(int device, CUstream_st* stream);

}  // namespace ampgrad::cuda
