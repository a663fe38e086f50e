// Library calls replayed as one-call CUDA graphs once they repeat (Note [Call graphs]).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include <ampgrad/cuda/graph.h>

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
// direct call. Keys and graphs live in one least-recently-used table (kCallGraphEntries entries);
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
// Calls whose graph has launched before are held back and submitted together, as one graph
// once the sequence repeats (Note [Launch batches]).

// Note [Launch batches]
// With every call of a small network's step a graph launch, the host's time went to the
// launches themselves: 15 graph launches at 1.5-2.5 us were 39 % of the small MLP's AMP step
// (benchmarks/host_profile.py). One graph holding a whole phase of the step (its forward; its
// backward and optimizer step) launches in about the time of one of them. So run_call, for a
// key whose graph has launched before, does not launch it: it holds the call back, in order,
// on its device (HeldCalls). Only calls on the library stream are held. The held calls are submitted when anything else is about to
// reach the stream or the host is about to look at it:
//   - a call that runs directly, or the first launch of a new graph (run_call), a kernel
//     launched directly (launch(), launch_cooperative()), a byte copy or fill, a cuBLAS or
//     cuDNN call outside run_call: they call submit_launches() before they enqueue;
//   - anyone taking the stream from current_stream(): copies to and from the host, events,
//     synchronization, NCCL, a CudaGraph's capture and replay, and code outside the library
//     that queues its own work on ampgrad's stream; launch_stream() is the stream without
//     that, for the launch paths above only; a free to the pool (the allocator) submits too;
//     a block freed to the host cache is only handed to later work on the same stream;
//   - synchronize(), and data_ptr() of a CUDA tensor (which waits for them, Note [Raw access]);
//   - the phases of a step: backward() submits the forward's calls before it starts, and an
//     optimizer's step() submits the backward's and its own when it ends (end_phase(), Note
//     [Device hooks] in core/device_hooks.h);
//   - kMaxHeldCalls calls held, or a cut: after at least 8 calls, a call whose id (mixed) falls
//     in one of 32 buckets ends the batch (cuts_batch() in cuda/call_graph.cpp). The cuts depend
//     on the calls alone, as content-defined chunks do, so a step's batches are the same
//     sequences every step even where something else submits at a moment that moves (a probe's
//     answer); only the batch around it differs. At a fixed length every later batch of the
//     phase would shift, and none would be seen again.
// The work reaches the stream in the order it was asked for, only later, and nothing can look
// at the stream or the memory in between; so results are those of immediate launches. The
// submitted sequence is keyed like a call, by the ids of its calls' graphs: its first two
// sightings launch the graphs one by one, the third composes one graph of them (each a child
// graph node after the one before) and launches it, and later sightings launch that graph.
// A graph pushed out of the table while its call is held is destroyed after the call is
// submitted. A held graph that fails to launch (it launched before, so the device is at fault)
// raises the device's error naming the op that asked for the call (CurrentOp, kept with it):
// where it is submitted, or, from a free (which cannot throw), at the next run_call,
// submit_launches(), synchronize() or data_ptr(); the calls held after it are dropped. A call
// that fails as it is asked for (a launch the device refuses) raises at that call, after the
// calls held before it were submitted (tests/test_call_graphs.cpp).
// Code past the library that takes a tensor's address with data_ptr() gets the held calls
// submitted and finished first (Note [Raw access] in core/tensor.h).
// What it costs: the device starts a phase's work when the phase's last call is asked for,
// not at its first. So calls are held only while kernels go through run_call (Note [Kernel
// graphs]): while the host binds, the host time saved is worth more; while the device is
// behind, holding would only delay its work (and kernels launched directly would submit the
// held calls every few calls anyway). A kernel's launch probes the backlog in
// launch_kernels_as_graphs(); a library call probes it in run_call, so that a loop of GEMMs
// alone does not hold calls on an old answer. The probe's events see only submitted work, and
// its horizons (512 launches to count as behind, 128 to count as caught up) are longer than
// the largest batch: a batch's work reaching the device at once is not a backlog. (With 32 it
// was: the LSTMCell loop of `ampgrad bench step` went direct at moments that moved from step to
// step, so its batches never repeated, and a third of its host time was the graphs of held
// calls launched one by one.)
// set_launch_batches(false) or AMPGRAD_LAUNCH_BATCHES=0 launches every graph at once.

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

// The table's size: kCallGraphEntries in cuda/call_graph.cpp (Note [Call-graph table size]),
// set_call_graph_capacity() in cuda/graph.h.
// Calls held back on a device before they are submitted anyway (Note [Launch batches]).
constexpr int kMaxHeldCalls = 64;

// Enqueues a call's work on `stream` (the library stream of `device`, made current by the
// caller): directly, or by launching the graph captured from an earlier call with an equal key,
// or by holding that launch back until submit_launches() (Note [Launch batches]).
void run_call(int device, CUstream_st* stream, const CallKey& key, void (*enqueue)(void*), void* ctx);
template <typename F>
void run_call(int device, CUstream_st* stream, const CallKey& key, F&& enqueue) {
  run_call(device, stream, key, [](void* f) { (*static_cast<std::remove_reference_t<F>*>(f))(); },
           const_cast<void*>(static_cast<const void*>(&enqueue)));
}

// Whether a kernel launched now on `stream` of `device` should go through run_call: the mode,
// call graphs on, no CudaGraph capturing, and (when_host_bound) the device not far behind
// the host (Note [Kernel graphs]). Cheap: it looks at the device every kProbeLaunches calls.
bool launch_kernels_as_graphs(int device, CUstream_st* stream);

// Submits the calls held back on `device` (Note [Launch batches]): before work that does not
// go through run_call reaches its stream, and at the end of a step's phases. Cheap when none are.
void submit_launches(int device);
// Submits the calls held back on `device` and, if there were any, waits for the device to finish
// them: code past the library is about to touch device memory (Note [Raw access] in
// core/tensor.h, Tensor::data_ptr()). Cheap when none are.
void finish_held_launches(int device);
// The same where nothing may throw (the allocator's frees): an error is kept, and thrown by the
// next run_call or submit_launches() (the held calls after the one that failed are dropped;
// the device's error is what a later call would report anyway).
void try_submit_launches(int device) noexcept;

}  // namespace ampgrad::cuda
