// CudaGraph: captures the work ampgrad queues on its stream and replays it with one launch.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace ampgrad {
struct CaptureAttachment;  // core/capture.h
}

struct CUgraph_st;
struct CUgraphExec_st;

namespace ampgrad::cuda {

// Whether a CudaGraph is capturing device `device`'s stream now (a capture ampgrad did not
// start is not supported: the allocator must know of it, Note [Frees during capture]).
bool capturing(int device);
// How many times any CudaGraph has been replayed in this process. A replay rewrites tensors
// on the device with no host-side trace (no version bump): host caches of device values
// (the kept working copies, Note [Working copies] in speedups/working_copies.h) stop trusting what they hold.
uint64_t graph_replays();

// The switches and counters of the per-call graphs that keep eager steps fast (Note [Call
// graphs], Note [Kernel graphs] and Note [Launch batches] in cuda/call_graph.h, the machinery's
// internals).
struct CallGraphStats {
  int64_t direct = 0;     // calls run directly (first sightings, failed keys, captures, disabled)
  int64_t captured = 0;   // graphs captured
  int64_t launched = 0;   // calls run as a graph launch (captures included)
  int64_t failed = 0;     // captures, compositions or graph launches that failed; their keys run directly from then on
  int64_t entries = 0;    // keys in the table now
  int64_t capacity = 0;   // keys the table holds at most (set_call_graph_capacity)
  int64_t evicted = 0;    // keys pushed out of a full table, least recently used first (each is captured again if it recurs)
  int64_t batches = 0;    // batch graphs launched (Note [Launch batches])
  int64_t batched = 0;    // calls that ran inside them (counted in launched when they were held)
  int64_t batches_composed = 0;
  int64_t raw_waits = 0;  // data_ptr() calls that submitted held calls and waited (Note [Raw access])
};
CallGraphStats call_graph_stats();
// The table's size, kCallGraphEntries by default (AMPGRAD_CALL_GRAPH_ENTRIES=N at start, 64 to
// 2^20); a smaller one evicts its least recently used keys now.
void set_call_graph_capacity(int64_t entries);
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
// On by default; AMPGRAD_LAUNCH_BATCHES=0 turns it off at start. Turning it off submits what is held.
void set_launch_batches(bool enabled);
bool launch_batches();

// Note [CUDA graphs]
// capture(fn) runs fn while the library stream (Note [CUDA stream]) records instead of
// executing, in cudaStreamCaptureModeGlobal: any call that would wait for the device
// (a device-to-host copy, item(), synchronize()) fails the capture, so a captured training
// step is proof that it never synchronizes. Allocations made during capture become graph
// memory nodes (the allocator uses cudaMallocAsync) with fixed addresses; the graph is
// instantiated with AutoFreeOnLaunch, so tensors that outlive the capture (the loss, say) are
// rewritten in place by each replay(). Tensors the step reads and writes (parameters,
// scaler state) must exist before the capture: run the step once eagerly first. Gradients
// may be either: set to none at the step's start (zero_grad(), the default, as PyTorch's
// whole-network capture does), they come out of the graph's memory at fixed addresses, each
// GEMM writing its .grad directly; kept (zero_grad(false)), the graph zeroes them and adds
// into them, a kernel more per parameter. Host-side state the step relies on rides with the
// graph (Note [Capture attachments] in core/capture.h): replay() calls each attachment's
// before_replay() first.
class CudaGraph {
 public:
  CudaGraph() = default;
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Records fn's device work on the current device's stream. If fn throws, the capture is
  // abandoned (the stream is usable again) and the exception propagates.
  void capture(const std::function<void()>& fn);
  // Launches the captured work on the stream (asynchronous).
  void replay();
  bool captured() const { return exec_ != nullptr; }

 private:
  CUgraph_st* graph_ = nullptr;
  CUgraphExec_st* exec_ = nullptr;
  int device_ = 0;
  std::vector<std::shared_ptr<CaptureAttachment>> attachments_;
};

}  // namespace ampgrad::cuda
