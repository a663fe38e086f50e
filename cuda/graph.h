// CudaGraph: captures the work ampgrad queues on its stream and replays it with one launch.
#pragma once

#include <cstdint>
#include <functional>

struct CUgraph_st;
struct CUgraphExec_st;

namespace ampgrad::cuda {

// Whether a CudaGraph is capturing device `device`'s stream now (a capture ampgrad did not
// start is not supported: the allocator must know of it, Note [Frees during capture]).
bool capturing(int device);
// How many times any CudaGraph has been replayed in this process. A replay rewrites tensors
// on the device with no host-side trace (no version bump): host caches of device values
// (amp's kept working copies, Note [Working copies]) stop trusting what they hold.
uint64_t graph_replays();

// Note [CUDA graphs]
// capture(fn) runs fn while the library stream (Note [CUDA stream]) records instead of
// executing, in cudaStreamCaptureModeGlobal: any call that would wait for the device
// (a device-to-host copy, item(), synchronize()) fails the capture, so a captured training
// step is proof that it never synchronizes. Allocations made during capture become graph
// memory nodes (the allocator uses cudaMallocAsync) with fixed addresses; the graph is
// instantiated with AutoFreeOnLaunch, so tensors that outlive the capture (the loss, say) are
// rewritten in place by each replay(). Tensors the step reads and writes (parameters,
// gradients, optimizer and scaler state) must exist before the capture: run the step once
// eagerly first, and zero gradients with zero_grad(false) so they keep their memory.
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
};

}  // namespace ampgrad::cuda
