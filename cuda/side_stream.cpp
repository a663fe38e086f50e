// The side stream (Note [Weight gradients beside the stream] in cuda/side_stream.h).
#include <ampgrad/cuda/side_stream.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>

#include <ampgrad/cuda/blas_lt.h>
#include <ampgrad/cuda/call_graph.h>
#include <ampgrad/cuda/check.h>
#include <ampgrad/cuda/graph.h>
#include <ampgrad/cuda/runtime.h>

namespace ampgrad::cuda {

namespace {

constexpr int kMaxSideDevices = 64;
// 2^24 multiply-adds: the small GPT's weight gradients (256 x 256 x 4096 and up) run beside the
// stream, the tiny one's (64 x 64 x 256) and the small MLPs' stay on it, where the host's two
// events and a wait (a few us) would cost more than the overlap gives.
constexpr int64_t kMinSideMacs = int64_t{1} << 24;

struct SideState {
  std::mutex mu;
  cudaStream_t stream = nullptr;
  cudaEvent_t queued = nullptr;  // recorded on the library stream: the side stream waits for it
  cudaEvent_t done = nullptr;    // recorded on the side stream: the library stream waits for it
  void* workspace = nullptr;
  bool failed = false;         // the stream could not be made: never tried again
  bool pending = false;        // side work the library stream has not waited for
  std::vector<Tensor> keep;    // what that work reads
};

// Leaked on purpose: streams and kept tensors must outlive static destruction.
std::array<SideState, kMaxSideDevices>& side_states() {
  static auto* s = new std::array<SideState, kMaxSideDevices>();
  return *s;
}
std::atomic<int> g_pending{0};  // devices with pending side work: join_side_work's fast path

std::atomic<bool>& overlap_flag() {
  static std::atomic<bool> on{[] {
    const char* v = std::getenv("AMPGRAD_OVERLAP_WGRAD");
    return v != nullptr && *v != 0 && std::string(v) != "0";
  }()};
  return on;
}
std::atomic<uint64_t> g_works{0};

SideState& state(int device) {
  AG_CHECK(device >= 0 && device < kMaxSideDevices, "cuda: device {} is beyond the {} devices of the side stream",
           device, kMaxSideDevices);
  return side_states()[static_cast<size_t>(device)];
}

// The library stream waits for the device's side work; what it kept is dropped (after the wait
// is queued: the frees are ordered after it). Holds st.mu. The held calls are submitted first
// without throwing (an error they keep is raised by the library's next call, not lost here).
void join_locked(int device, SideState& st) {
  if (!st.pending) return;
  try_submit_launches(device);
  AG_CUDA_CHECK(cudaStreamWaitEvent(launch_stream(device), st.done, 0));
  st.pending = false;
  g_pending.fetch_sub(1, std::memory_order_relaxed);
  st.keep.clear();
}

// Whether any device's stream is being captured: a capture in cudaStreamCaptureModeGlobal
// forbids cudaMalloc on every device.
bool any_capturing() {
  const int n = device_count();
  for (int d = 0; d < n && d < kMaxSideDevices; ++d)
    if (capturing(d)) return true;
  return false;
}

}  // namespace

void set_overlap_weight_grads(bool on) { overlap_flag().store(on, std::memory_order_relaxed); }
bool overlap_weight_grads() { return overlap_flag().load(std::memory_order_relaxed); }
uint64_t side_stream_works() { return g_works.load(std::memory_order_relaxed); }

bool wants_side_work(int device, int64_t macs) {
  if (macs < kMinSideMacs || !overlap_weight_grads() || sync_debug() || device < 0 || device >= kMaxSideDevices)
    return false;
  SideState& st = state(device);
  std::lock_guard<std::mutex> lock(st.mu);
  if (st.stream) return true;
  if (st.failed) return false;
  // Made outside a capture, which cannot allocate: a step captured before any ran eagerly
  // keeps its weight gradients on the library stream.
  if (any_capturing()) return false;
  DeviceGuard guard(device);
  // Where the device cannot spare the workspace (or a stream), the weight gradients stay on the
  // library stream: the error is cleared, and not tried again.
  bool ok = cudaMalloc(&st.workspace, kLtWorkspaceBytes) == cudaSuccess &&
            cudaEventCreateWithFlags(&st.queued, cudaEventDisableTiming) == cudaSuccess &&
            cudaEventCreateWithFlags(&st.done, cudaEventDisableTiming) == cudaSuccess;
  cudaStream_t stream = nullptr;
  ok = ok && cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess;
  if (!ok) {
    (void)cudaGetLastError();
    if (st.workspace) (void)cudaFree(st.workspace);
    if (st.queued) (void)cudaEventDestroy(st.queued);
    if (st.done) (void)cudaEventDestroy(st.done);
    st.workspace = nullptr;
    st.queued = st.done = nullptr;
    st.failed = true;
    return false;
  }
  st.stream = stream;
  return true;
}

SideWork::SideWork(int device, std::vector<Tensor> keep) : device_(device), keep_(std::move(keep)) {
  SideState& st = state(device);
  std::lock_guard<std::mutex> lock(st.mu);
  AG_INTERNAL_ASSERT(st.stream != nullptr, "SideWork: wants_side_work did not make the side stream");
  DeviceGuard guard(device);
  join_locked(device, st);  // the lag join
  cudaStream_t main = current_stream(device);  // the held calls go first
  AG_CUDA_CHECK(cudaEventRecord(st.queued, main));
  AG_CUDA_CHECK(cudaStreamWaitEvent(st.stream, st.queued, 0));
  stream_ = st.stream;
  workspace_ = st.workspace;
}

SideWork::~SideWork() {
  if (!stream_) return;  // it never began
  SideState& st = state(device_);
  std::lock_guard<std::mutex> lock(st.mu);
  // Kept and pending before the event: if the record fails, the join still waits for what was
  // recorded last, and the operands stay alive until it does.
  st.keep = std::move(keep_);
  if (!st.pending) g_pending.fetch_add(1, std::memory_order_relaxed);
  st.pending = true;
  int prev = 0;
  (void)cudaGetDevice(&prev);
  if (prev != device_) (void)cudaSetDevice(device_);
  if (cudaEventRecord(st.done, st.stream) != cudaSuccess) (void)cudaStreamSynchronize(st.stream);
  if (prev != device_) (void)cudaSetDevice(prev);
  if (ran_) g_works.fetch_add(1, std::memory_order_relaxed);
}

void join_side_work() noexcept {
  if (g_pending.load(std::memory_order_relaxed) == 0) return;
  for (int d = 0; d < kMaxSideDevices; ++d) {
    SideState& st = side_states()[static_cast<size_t>(d)];
    std::lock_guard<std::mutex> lock(st.mu);
    if (!st.pending) continue;
    try {
      DeviceGuard guard(d);
      join_locked(d, st);
    } catch (...) {
      // The wait could not be queued (the device failed): wait here for the side work before
      // its operands go, and leave the error to the library's next call.
      (void)cudaStreamSynchronize(st.stream);
      st.pending = false;
      g_pending.fetch_sub(1, std::memory_order_relaxed);
      st.keep.clear();
    }
  }
}

}  // namespace ampgrad::cuda
