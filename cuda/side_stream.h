// The side stream: weight-gradient GEMMs beside the library stream (Note [Weight gradients
// beside the stream]). Internal to cuda/.
#pragma once

#include <cstdint>
#include <vector>

#include <ampgrad/core/tensor.h>

struct CUstream_st;

namespace ampgrad::cuda {

// Note [Weight gradients beside the stream]
// A linear layer's backward is two GEMMs: the input gradient, which the next node down waits
// for, and the weight gradient, which nothing reads until the optimizer. On one stream the
// small GPT's 17 weight-gradient GEMMs (with their bias gradients in the epilogue: 25 % of its
// step's device time on the H200) ran between the input-gradient GEMMs, layer norms and
// attention, each of which fills part of the GPU (a [4096, 256] output is 64 tiles on 132 SMs).
// So a weight gradient that nothing reads before backward ends (autograd's
// detail::gradient_taken_over: it becomes a leaf's .grad as it is) runs on a second stream of
// the device, the side stream, beside what follows it on the library stream; the two streams
// fill the GPU together, as PyTorch's users get from torch.cuda.Stream by hand.
//   - SideWork's constructor: the library stream first waits for the side work before (the lag
//     join, below), then the side stream waits for everything queued on the library stream so
//     far (an event: the GEMM's operands, and its output's memory, which the allocator handed
//     out in library-stream order), and the GEMM is queued on the side stream with a
//     workspace of its own (the library stream's may be in use at the same moment).
//   - its destructor: an event marks its end; the tensors it reads are kept alive until the
//     library stream has waited for that event, so the allocator cannot hand their memory to
//     library-stream work that would write it while the GEMM still reads it, and no in-place
//     write can reach them (autograd writes in place only what it alone holds).
//   - The lag join: the next side work makes the library stream wait for the side work
//     before it, and drops what that kept. So a weight gradient overlaps whatever the library
//     stream does between two linear layers' backward (the input-gradient GEMM, gelu, layer
//     norm, attention), and at most one side work's operands are held at a time (holding all
//     of them to the end of backward would keep the small GPT's activations and incoming
//     gradients alive through it: about 130 MB by their shapes, not measured).
//   - join_side_work() makes every device's library stream wait for its side work and drops
//     what it kept: autograd calls it when a backward ends (however it ends), so that the
//     optimizer, the scaler and anything after backward see finished gradients; a leaf's
//     accumulator calls it before any kernel that would read the gradient it was handed; a
//     CudaGraph capture joins before it begins and before it ends (the side stream joins a
//     capture through the first event and must leave it by the last).
// Only the weight-gradient GEMM (and its bias gradient) runs beside the stream, only when its
// product is large enough for the overlap to pay for the host's two events and a wait
// (kMinSideMacs), not in sync-debug mode (which waits for the library stream alone), and only
// while set_overlap_weight_grads() is on: off by default (AMPGRAD_OVERLAP_WGRAD=1 turns it on).
// Its first GPU run (session 35, an H100) gave the same bits beside the stream as on it and
// took the small GPT's graphed AMP step from 0.898 to 0.883 ms only: the input-gradient GEMMs,
// layer norms and attention it would overlap leave less of the GPU idle than their grids
// suggest. A switch for whoever wants to measure it on their model, as matmul tuning is.
// Results are bitwise those of the library stream: the same plan and kernel, another workspace.
// Calls on the side stream are never held back (Note [Launch batches] holds only the library
// stream's): they go as soon as they are asked for.

// Whether a weight-gradient GEMM of m * n * k multiply-adds on `device` runs beside the stream
// (the first time, outside any capture, makes the side stream, its events and its workspace;
// where that fails, never).
bool wants_side_work(int device, int64_t macs);
// One side work on `device` (see above), begun by the constructor: the lag join, then the side
// stream waits for the library stream. Queue the work on stream() with workspace() (the
// library stream's size, kLtWorkspaceBytes), then call ran() if anything was queued. The
// destructor ends it, whatever happened between (an exception, cuBLASLt declining): an event
// marks its end, which the library stream waits for at the next side work or join, and `keep`,
// what the work reads, stays alive until then. One at a time per device (ampgrad issues a
// device's work from one thread at a time: Note [CUDA stream]).
class SideWork {
 public:
  SideWork(int device, std::vector<Tensor> keep);
  ~SideWork();
  SideWork(const SideWork&) = delete;
  SideWork& operator=(const SideWork&) = delete;
  CUstream_st* stream() const { return stream_; }
  void* workspace() const { return workspace_; }
  void ran() { ran_ = true; }  // counted by side_stream_works()

 private:
  int device_;
  std::vector<Tensor> keep_;
  CUstream_st* stream_ = nullptr;
  void* workspace_ = nullptr;
  bool ran_ = false;
};
// Makes every device's library stream wait for its side work, and drops what that kept.
// Cheap when there is none.
void join_side_work() noexcept;

}  // namespace ampgrad::cuda
