// CUDA graph capture and replay of ampgrad's stream (Note [CUDA graphs]).
#include <ampgrad/cuda/graph.h>

#include <atomic>
#include <mutex>
#include <utility>
#include <vector>

#include <ampgrad/core/capture.h>
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

namespace {
// The capture recording each device's stream now (Note [Capture attachments]): its number
// (0: none) and what code above the backend attached to it, handed to the graph at its end.
struct Recording {
  std::mutex mu;
  uint64_t id = 0;
  std::vector<std::shared_ptr<CaptureAttachment>> attached;
};
constexpr int kMaxRecordedDevices = 64;
Recording& recording(int device) {
  static auto* all = new Recording[kMaxRecordedDevices];  // leaked, like the allocator's state
  AG_CHECK(device >= 0 && device < kMaxRecordedDevices, "CudaGraph: no device {}", device);
  return all[device];
}
std::atomic<uint64_t> g_captures{0};

uint64_t capture_id(int device) {
  Recording& r = recording(device);
  std::lock_guard<std::mutex> lock(r.mu);
  return r.id;
}

void attach(int device, std::shared_ptr<CaptureAttachment> a) {
  Recording& r = recording(device);
  std::lock_guard<std::mutex> lock(r.mu);
  AG_CHECK(r.id != 0, "attach_to_capture: no graph is capturing cuda:{}", device);
  r.attached.push_back(std::move(a));
}

// Ends the record of a capture: what was attached to it, for its graph (or dropped).
std::vector<std::shared_ptr<CaptureAttachment>> end_recording(int device) {
  Recording& r = recording(device);
  std::lock_guard<std::mutex> lock(r.mu);
  r.id = 0;
  return std::exchange(r.attached, {});
}
}  // namespace

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
  if (cudaError_t err = cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal); err != cudaSuccess) {
    allocator_capture_end(device_);
    AG_CUDA_CHECK(err);
  }
  {
    Recording& r = recording(device_);
    std::lock_guard<std::mutex> lock(r.mu);
    r.id = g_captures.fetch_add(1) + 1;
  }
  try {
    fn();
  } catch (...) {
    cudaGraph_t broken = nullptr;
    (void)cudaStreamEndCapture(stream, &broken);
    if (broken) (void)cudaGraphDestroy(broken);
    (void)cudaGetLastError();
    allocator_capture_end(device_);
    (void)end_recording(device_);
    throw;
  }
  cudaGraph_t g = nullptr;
  cudaError_t err = cudaStreamEndCapture(stream, &g);
  allocator_capture_end(device_);
  std::vector<std::shared_ptr<CaptureAttachment>> attached = end_recording(device_);
  AG_CUDA_CHECK(err);
  graph_ = g;
  cudaGraphExec_t exec = nullptr;
  AG_CUDA_CHECK(cudaGraphInstantiateWithFlags(&exec, g, cudaGraphInstantiateFlagAutoFreeOnLaunch));
  exec_ = exec;
  attachments_ = std::move(attached);
}

namespace {
std::atomic<uint64_t> g_replays{0};
}  // namespace

bool capturing(int device) { return allocator_capturing(device); }
uint64_t graph_replays() { return g_replays.load(std::memory_order_relaxed); }

namespace {
// What the optimizers and the speed-ups ask of CUDA (Note [Device hooks] in
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
    CaptureHooks c;
    c.capture_id = &capture_id;
    c.attach = &attach;
    set_capture_hooks(DeviceType::CUDA, c);
  }
};
const RegisterCudaHooks register_cuda_hooks;
}  // namespace

void CudaGraph::replay() {
  AG_CHECK(exec_ != nullptr, "CudaGraph.replay: nothing was captured");
  DeviceGuard guard(device_);
  for (const auto& a : attachments_) a->before_replay();  // may queue eager work first
  g_replays.fetch_add(1, std::memory_order_relaxed);
  // Note [Graph launch memory]: a capture's allocations become the graph's allocation nodes,
  // whose memory the driver finds at launch, outside our pool; what the pool keeps cached
  // (Note [CUDA allocator]) can leave it none. On an H100 (80 GB) test_cuda's full run once
  // failed a replay so, after its out-of-memory case and the cases that filled the pool again.
  // As the allocator does for its own requests: empty the cache and try once more.
  cudaError_t err = cudaGraphLaunch(exec_, current_stream(device_));
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // not sticky
    empty_cache(device_);
    err = cudaGraphLaunch(exec_, current_stream(device_));
  }
  AG_CUDA_CHECK(err);
}

}  // namespace ampgrad::cuda
