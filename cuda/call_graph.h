// Library calls replayed as one-call CUDA graphs once they repeat (Note [Call graphs]).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

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
// two calls of a key run directly; the third is captured on the library stream
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
// AMPGRAD_CALL_GRAPHS=0 in the environment, or set_call_graphs_enabled(false), turns it off.
// PyTorch pays the same cuBLAS host cost on every call; its answer is whole-step graphs
// (torch.cuda.graphs), which ampgrad has too (Note [CUDA graphs]); this keeps eager steps fast.

// Everything that determines what a call enqueues, as 64-bit words.
class CallKey {
 public:
  static constexpr int kWords = 24;
  CallKey& add(uint64_t v);
  CallKey& add(const void* p) { return add(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p))); }
  template <typename T>
    requires(std::is_trivially_copyable_v<T> && sizeof(T) <= 8 && !std::is_pointer_v<T>)
  CallKey& add_bits(T v) {
    uint64_t w = 0;
    std::memcpy(&w, &v, sizeof(T));
    return add(w);
  }
  bool operator==(const CallKey& o) const {
    return n_ == o.n_ && std::memcmp(w_, o.w_, sizeof(uint64_t) * static_cast<size_t>(n_)) == 0;
  }
  size_t hash() const;

 private:
  uint64_t w_[kWords] = {};
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

}  // namespace ampgrad::cuda
