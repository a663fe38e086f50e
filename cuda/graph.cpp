// CUDA graph capture and replay of ampgrad's stream (Note [CUDA graphs]).
#include <ampgrad/cuda/graph.h>

#include <atomic>

#include <ampgrad/core/device_hooks.h>
#include <ampgrad/cuda/call_graph.h>
#include <ampgrad/cuda/check.h>
#include <ampgrad/cuda/device_error.h>

namespace ampgrad::cuda {
// cuda/allocator.cpp: Note [Frees during capture].
void allocator_capture_begin(int device);
void allocator_capture_end(int device);
bool allocator_capturing(int device);
}  // namespace ampgrad::cuda

namespace ampgrad::cuda {

CudaGraph::~CudaGraph() {
  if (exec_) (void)cudaGraphExecDestroy(exec_);
  if (graph_) (void)cudaGraphDestroy(graph_);
}

void CudaGraph::capture(const std::function<void()>& fn) {
  AG_CHECK(exec_ == nullptr, "CudaGraph.capture: this graph already holds a capture");
  device_ = current_device();
  cudaStream_t stream = current_stream(device_);
  (void)device_error_record(device_);  // made now: a capture cannot allocate pinned memory
  allocator_capture_begin(device_);
  AG_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  try {
    fn();
  } catch (...) {
    cudaGraph_t broken = nullptr;
    (void)cudaStreamEndCapture(stream, &broken);
    if (broken) (void)cudaGraphDestroy(broken);
    (void)cudaGetLastError();
    allocator_capture_end(device_);
    throw;
  }
  cudaGraph_t g = nullptr;
  cudaError_t err = cudaStreamEndCapture(stream, &g);
  allocator_capture_end(device_);
  AG_CUDA_CHECK(err);
  graph_ = g;
  cudaGraphExec_t exec = nullptr;
  AG_CUDA_CHECK(cudaGraphInstantiateWithFlags(&exec, g, cudaGraphInstantiateFlagAutoFreeOnLaunch));
  exec_ = exec;
}

namespace {
std::atomic<uint64_t> g_replays{0};
}  // namespace

bool capturing(int device) { return allocator_capturing(device); }
uint64_t graph_replays() { return g_replays.load(std::memory_order_relaxed); }

namespace {
// What autograd, the optimizers and working copies ask of CUDA (Note [Device hooks] in
// core/device_hooks.h): the end of a step's phase submits the held calls (Note [Launch
// batches]); a raw access submits them and waits (Note [Raw access] in core/tensor.h).
// Registered at load; makes no CUDA call.
struct RegisterCudaHooks {
  RegisterCudaHooks() {
    DeviceHooks h;
    h.end_phase = &submit_launches;
    h.raw_access = &finish_held_launches;
    h.capturing = &capturing;
    h.graph_replays = &graph_replays;
    set_device_hooks(DeviceType::CUDA, h);
  }
};
const RegisterCudaHooks register_cuda_hooks;
}  // namespace

void CudaGraph::replay() {
  AG_CHECK(exec_ != nullptr, "CudaGraph.replay: nothing was captured");
  DeviceGuard guard(device_);
  g_replays.fetch_add(1, std::memory_order_relaxed);
  AG_CUDA_CHECK(cudaGraphLaunch(exec_, current_stream(device_)));
}

}  // namespace ampgrad::cuda
