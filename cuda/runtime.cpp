// Device queries, the per-device library stream (Note [CUDA stream]), copies and error text.
#include <ampgrad/cuda/runtime.h>

#include <array>
#include <cstdlib>
#include <memory>
#include <mutex>

#include <ampgrad/core/device_hooks.h>
#include <ampgrad/core/dispatch.h>
#include <ampgrad/cuda/call_graph.h>
#include <ampgrad/cuda/device_error.h>
#include <ampgrad/cuda/check.h>
#include <ampgrad/cuda/graph.h>

namespace ampgrad::cuda {

namespace detail {

namespace {
// " (in linear)", " (in linear's backward)", or nothing outside any op (Note [Kernel dispatch]).
std::string in_op(std::string_view label) { return label.empty() ? std::string() : fmt::format(" (in {})", label); }
}  // namespace

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  throw_cuda_error_in(CurrentOp::label(), err, call, file, line);
}

void throw_cuda_error_in(std::string_view op, cudaError_t err, const char* call, const char* file, int line) {
  // Reset the thread's last error so the next AG_CUDA_CHECK_LAUNCH does not report this one
  // again (sticky errors, such as an illegal address, cannot be reset and keep failing).
  (void)cudaGetLastError();
  throw Error(fmt::format("CUDA error{}: {} failed: {}: {} (at {}:{})", in_op(op), call, cudaGetErrorName(err),
                          cudaGetErrorString(err), file, line));
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  throw Error(fmt::format("cuBLAS error{}: {} failed: {}: {} (at {}:{})", in_op(CurrentOp::label()), call,
                          cublasGetStatusName(status), cublasGetStatusString(status), file, line));
}

}  // namespace detail

namespace {

constexpr int kMaxDevices = 64;

int query_device_count() noexcept {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // no driver or no device: not an error for the caller
    return 0;
  }
  return n;
}

struct DeviceState {
  std::once_flag props_once;
  DeviceProperties props;
  std::once_flag stream_once;
  cudaStream_t stream = nullptr;
};

// Leaked on purpose: streams and properties must outlive every static Tensor destroyed at exit.
std::array<DeviceState, kMaxDevices>& device_states() {
  static auto* states = new std::array<DeviceState, kMaxDevices>();
  return *states;
}

DeviceState& state_of(int device) {
  AG_CHECK(device >= 0 && device < device_count(), "cuda: device {} does not exist ({} device(s) visible)", device,
           device_count());
  AG_CHECK(device < kMaxDevices, "cuda: device {} is beyond the {} devices ampgrad supports", device, kMaxDevices);
  return device_states()[static_cast<size_t>(device)];
}

}  // namespace

bool is_available() { return device_count() > 0; }

int device_count() {
  static const int count = query_device_count();
  return count;
}

const DeviceProperties& device_properties(int device) {
  DeviceState& st = state_of(device);
  std::call_once(st.props_once, [&] {
    cudaDeviceProp p{};
    AG_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
    st.props.name = p.name;
    st.props.major = p.major;
    st.props.minor = p.minor;
    st.props.sm_count = p.multiProcessorCount;
    st.props.total_memory = p.totalGlobalMem;
    st.props.max_threads_per_block = p.maxThreadsPerBlock;
    st.props.max_threads_per_sm = p.maxThreadsPerMultiProcessor;
    st.props.shared_memory_per_block = p.sharedMemPerBlock;
    st.props.l2_cache_size = p.l2CacheSize;
    st.props.memory_bus_width = p.memoryBusWidth;
  });
  return st.props;
}

int current_device() {
  int d = 0;
  AG_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

void set_device(int device) {
  (void)state_of(device);  // range check with a clear message
  AG_CUDA_CHECK(cudaSetDevice(device));
}

CUstream_st* current_stream(int device) {
  if (device < 0) device = current_device();
  CUstream_st* s = launch_stream(device);
  submit_launches(device);
  return s;
}

CUstream_st* launch_stream(int device) {
  DeviceState& st = state_of(device);
  std::call_once(st.stream_once, [&] {
    DeviceGuard guard(device);
    cudaStream_t s = nullptr;
    AG_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    st.stream = s;
  });
  return st.stream;
}

void synchronize() {
  const int dev = current_device();
  submit_launches(dev);
  AG_CUDA_CHECK(cudaDeviceSynchronize());
  check_device_errors(dev);
}

namespace {
// After an op in sync-debug mode (Note [Device hooks]): its device's work, then its errors.
void sync_after_op(Device d) {
  if (!d.is_cuda() || graph_capturing(d)) return;  // a capture cannot wait
  const int device = d.index;
  DeviceGuard guard(device);
  submit_launches(device);
  AG_CUDA_CHECK(cudaStreamSynchronize(launch_stream(device)));
  check_device_errors(device);
}
struct SyncDebugFromEnv {
  SyncDebugFromEnv() {
    const char* v = std::getenv("AMPGRAD_SYNC_DEBUG");
    if (v && v[0] == '1') set_sync_debug(true);
  }
};
const SyncDebugFromEnv sync_debug_from_env;
}  // namespace

void set_sync_debug(bool on) { ampgrad::detail::set_after_op(on ? &sync_after_op : nullptr); }
bool sync_debug() { return ampgrad::detail::after_op_hook != nullptr; }

namespace {
// The device that owns a device pointer (copies run on that device's stream); for anything
// else, the current device.
int device_of(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return current_device();
  }
  return attr.type == cudaMemoryTypeDevice ? attr.device : current_device();
}

bool is_pinned_host(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return true;  // unknown: assume the worst
  }
  return attr.type == cudaMemoryTypeHost;
}
}  // namespace

// Note [Host values in a capture]
// A host-to-device copy made while a CUDA graph captures the stream becomes a copy node that
// reads the host address again at every replay: by then the host buffer (a CPU tensor, the
// values of tensor(), rand(), randn()) is freed or holds something else, and the replays
// compute on garbage, silently. (The GPT's position indices, arange on the host then, were
// such a copy: every replay read freed memory, and the embedding found indices out of range.)
// So the copy is refused with an error; arange, full, zeros, ones and the like fill CUDA
// tensors on the device and are captured as kernels. Tensors of host values are made before
// the capture, and the step reads them there.
void memcpy_h2d(void* dst, const void* src, size_t n) {
  if (n == 0) return;
  const int dev = device_of(dst);
  cudaStreamCaptureStatus outside = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(current_stream(dev), &outside) != cudaSuccess) {
    (void)cudaGetLastError();
    outside = cudaStreamCaptureStatusNone;
  }
  AG_CHECK(!capturing(dev) && outside == cudaStreamCaptureStatusNone,
           "cuda: a copy of {} bytes from host memory to cuda:{} while a CUDA graph captures: every replay would "
           "read that host memory again, after it is gone (Note [Host values in a capture] in cuda/runtime.cpp). "
           "Make the tensor before the capture (tensor(), rand(), randn(), .to(cuda) of a CPU tensor), or on the "
           "device (arange, full, zeros, ones)",
           n, dev);
  DeviceGuard guard(dev);
  cudaStream_t stream = current_stream(dev);
  AG_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, stream));
  // From pageable memory (ampgrad's CPU allocator) the driver has staged src before returning.
  // From pinned memory the DMA reads src later, so wait: the caller may free src right away.
  if (is_pinned_host(src)) AG_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void memcpy_d2h(void* dst, const void* src, size_t n) {
  if (n == 0) return;
  const int dev = device_of(src);
  DeviceGuard guard(dev);
  cudaStream_t stream = current_stream(dev);
  AG_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, stream));
  AG_CUDA_CHECK(cudaStreamSynchronize(stream));
  check_device_errors(dev);  // Note [Device-side errors]
}

void memcpy_d2d(void* dst, const void* src, size_t n) {
  if (n == 0) return;
  const int dev = device_of(dst);
  DeviceGuard guard(dev);
  AG_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, current_stream(dev)));
}

}  // namespace ampgrad::cuda
