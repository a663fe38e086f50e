// cuDNN convolution (forward, backward data, backward filter): the library's handle per
// device, descriptors from each tensor's layout (NCHW or NHWC), a math type per dtype,
// heuristic or benchmarked algorithms, workspaces from the caching allocator.
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "cuda/check.h"
#include "cuda/kernels.h"
#include "cuda/runtime.h"

namespace ampgrad::cuda {

namespace detail {
void throw_cudnn_error(int status, const char* call, const char* file, int line) {
  char last[1024] = {};
  cudnnGetLastErrorString(last, sizeof(last));
  last[sizeof(last) - 1] = '\0';
  throw Error(fmt::format("cuDNN error: {} failed: {}{}{} (at {}:{})", call,
                          cudnnGetErrorString(static_cast<cudnnStatus_t>(status)), last[0] ? ": " : "", last, file,
                          line));
}
}  // namespace detail

// Note [cuDNN convolution]
// Layout: cuDNN wants x, w and y in one memory format, each packed. A call takes NHWC when
// any of its tensors is channels-last (and not also NCHW-packed, as a [N, C, 1, 1] tensor is),
// NCHW otherwise (always for float64, which cuDNN runs in NCHW only), and NCHW again when
// cuDNN has no algorithm for the NHWC call. A tensor that is not packed in the call's format,
// or not 16-byte aligned, goes through a packed copy (outputs: packed scratch copied back).
// Descriptors get the packed strides, with size-1 dims given consistent ones. The legacy API
// indexes with int, so the batch is split into chunks whose x and y hold fewer than 2^31
// elements (backward filter accumulates over chunks).
// Bias: added afterwards by the library's broadcast add (any dtype and layout, as PyTorch
// does), not by cudnnAddTensor.
// Math: float16/bfloat16 data computes in float32 on tensor cores; float32 is pinned to
// CUDNN_FMA_MATH unless allow_tf32(), whatever an algorithm reports, so nothing silently
// rounds to TF32; float64 computes in float64.
// Algorithms: cuDNN's heuristic order, taking the first whose workspace can be allocated; in
// benchmark mode, cudnnFind*AlgorithmEx once per key (pass, device, dtype, math, layout,
// shapes, window, groups), the fastest cached and tried first. While the stream is being
// captured into a CUDA graph nothing is timed (Find synchronizes): cached choices are used,
// other keys take the heuristics.

namespace {

constexpr int kMaxDevices = 64;

struct DnnState {
  std::once_flag once;
  cudnnHandle_t handle = nullptr;
};

// One handle per device, created on first use and never destroyed (as blas_handle in
// cuda/matmul.cpp), bound to the library stream (Note [CUDA stream]).
cudnnHandle_t dnn_handle(int device) {
  static auto* states = new std::array<DnnState, kMaxDevices>();
  AG_CHECK(device >= 0 && device < kMaxDevices, "cuda: device index {} out of range", device);
  DnnState& st = (*states)[static_cast<size_t>(device)];
  std::call_once(st.once, [&] {
    DeviceGuard guard(device);
    cudnnHandle_t h = nullptr;
    AG_CUDNN_CHECK(cudnnCreate(&h));
    try {
      AG_CUDNN_CHECK(cudnnSetStream(h, current_stream(device)));
    } catch (const Error&) {
      (void)cudnnDestroy(h);
      throw;
    }
    st.handle = h;
  });
  return st.handle;
}

std::atomic<bool> g_benchmark{false};

template <class D, cudnnStatus_t (*Create)(D*), cudnnStatus_t (*Destroy)(D)> class Descriptor {
 public:
  Descriptor() {
    const cudnnStatus_t st = Create(&d_);
    if (st != CUDNN_STATUS_SUCCESS) detail::throw_cudnn_error(st, "cudnnCreate*Descriptor", __FILE__, __LINE__);
  }
  ~Descriptor() { (void)Destroy(d_); }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  D get() const { return d_; }

 private:
  D d_ = nullptr;
};
using TensorDesc = Descriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDesc = Descriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvDesc =
    Descriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;

cudnnDataType_t dnn_type(DType t) {
  switch (t) {
    case DType::Float32: return CUDNN_DATA_FLOAT;
    case DType::Float16: return CUDNN_DATA_HALF;
    case DType::BFloat16: return CUDNN_DATA_BFLOAT16;
    case DType::Float64: return CUDNN_DATA_DOUBLE;
    default: break;
  }
  AG_CHECK(false, "conv2d on cuda: dtype {} is not supported (cuDNN takes float16, bfloat16, float32, float64)",
           dtype_name(t));
  return CUDNN_DATA_FLOAT;  // unreachable: AG_CHECK threw
}

// The math type a call asks for (Note [cuDNN convolution]).
cudnnMathType_t wanted_math(DType t) {
  if (t == DType::Float16 || t == DType::BFloat16) return CUDNN_TENSOR_OP_MATH;
  if (t == DType::Float32) return allow_tf32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
  return CUDNN_DEFAULT_MATH;
}

// ---- layout -------------------------------------------------------------------------------

using Dims4 = std::array<int64_t, 4>;

// Strides of a packed [N, C, H, W] (or [K, C/g, kh, kw]) tensor stored as NCHW or NHWC.
Dims4 packed_strides(const Shape& s, bool nhwc) {
  Dims4 st{};
  int64_t e = 1;
  for (int d : nhwc ? std::array<int, 4>{1, 3, 2, 0} : std::array<int, 4>{3, 2, 1, 0}) {
    st[static_cast<size_t>(d)] = e;
    e *= s[static_cast<size_t>(d)];
  }
  return st;
}

bool is_packed(const Tensor& t, bool nhwc) {
  const Dims4 st = packed_strides(t.shape(), nhwc);
  for (int d = 0; d < 4; ++d)
    if (t.size(d) != 1 && t.stride(d) != st[static_cast<size_t>(d)]) return false;
  return true;
}

bool usable_as_is(const Tensor& t, bool nhwc) {
  return is_packed(t, nhwc) && reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
}

bool wants_nhwc(std::initializer_list<const Tensor*> ts) {
  if ((*ts.begin())->dtype() == DType::Float64) return false;
  return std::any_of(ts.begin(), ts.end(),
                     [](const Tensor* t) { return is_packed(*t, true) && !is_packed(*t, false); });
}

Tensor empty_packed(const Tensor& like, bool nhwc) {
  const Shape& s = like.shape();
  if (!nhwc) return empty(s, like.options());
  Tensor storage = empty({s[0], s[2], s[3], s[1]}, like.options());
  const Dims4 st = packed_strides(s, true);
  return alias_with(storage, s, {st[0], st[1], st[2], st[3]}, 0);
}

Tensor packed_input(const Tensor& t, bool nhwc) {
  if (usable_as_is(t, nhwc)) return t;
  Tensor c = empty_packed(t, nhwc);
  copy(c, t);
  return c;
}

// `t` itself, or scratch that the caller copies back into `t` after the call.
Tensor packed_output(const Tensor& t, bool nhwc) { return usable_as_is(t, nhwc) ? t : empty_packed(t, nhwc); }

Tensor batch_slice(const Tensor& t, int64_t start, int64_t count) {
  if (start == 0 && count == t.size(0)) return t;
  return alias_with(t, {count, t.size(1), t.size(2), t.size(3)}, t.strides(), t.storage_offset() + start * t.stride(0));
}

// Calls f(a_chunk, b_chunk, first) over batch chunks of at most 2^31 - 1 elements each.
template <class F> void for_each_batch_chunk(const Tensor& a, const Tensor& b, F&& f) {
  const int64_t n = a.size(0);
  const int64_t per_sample = std::max(a.numel(), b.numel()) / n;
  AG_CHECK(per_sample <= INT32_MAX,
           "conv2d on cuda: one sample of {} or {} has more than 2^31 - 1 elements, beyond cuDNN's 32-bit indexing",
           a.desc(), b.desc());
  int64_t chunk = std::min<int64_t>(n, INT32_MAX / per_sample);
  if (chunk < n && chunk >= 16) chunk -= chunk % 16;  // keeps every chunk's start 16-byte aligned
  for (int64_t start = 0; start < n; start += chunk) {
    const int64_t count = std::min(chunk, n - start);
    f(batch_slice(a, start, count), batch_slice(b, start, count), start == 0);
  }
}

int to_int(int64_t v, const char* what) {
  AG_CHECK(v >= 0 && v <= INT32_MAX, "conv2d on cuda: {} {} does not fit cuDNN's int parameters", what, v);
  return static_cast<int>(v);
}

// ---- one cuDNN call -----------------------------------------------------------------------

enum class Pass { Forward, BackwardData, BackwardFilter };

const char* pass_name(Pass p) {
  switch (p) {
    case Pass::Forward: return "forward";
    case Pass::BackwardData: return "backward data";
    case Pass::BackwardFilter: return "backward filter";
  }
  return "?";
}

// A call in forward's naming: x [N, C, H, W], w [K, C/g, kh, kw], y [N, K, oh, ow], all
// packed in one format. Forward writes y; backward data writes x (from y and w); backward
// filter writes w (from x and y).
struct ConvCall {
  Pass pass;
  int device;
  DType dtype;
  cudnnHandle_t handle;
  TensorDesc xd, yd;
  FilterDesc wd;
  ConvDesc cd;
  void* x;
  void* w;
  void* y;
  std::string key;  // what decides the algorithm, for the benchmark cache

  ConvCall(Pass pass_, const Tensor& xt, const Tensor& wt, const Tensor& yt, const Conv2dParams& p, bool nhwc)
      : pass(pass_),
        device(xt.device().index),
        dtype(xt.dtype()),
        handle(dnn_handle(device)),
        x(xt.data_ptr()),
        w(wt.data_ptr()),
        y(yt.data_ptr()) {
    const cudnnDataType_t type = dnn_type(dtype);
    for (auto [desc, t] : {std::pair{&xd, &xt}, std::pair{&yd, &yt}}) {
      const Dims4 st = packed_strides(t->shape(), nhwc);
      std::array<int, 4> dims{}, strides{};
      for (size_t d = 0; d < 4; ++d) {
        dims[d] = to_int(t->size(static_cast<int64_t>(d)), "size");
        strides[d] = to_int(st[d], "stride");
      }
      AG_CUDNN_CHECK(cudnnSetTensorNdDescriptor(desc->get(), type, 4, dims.data(), strides.data()));
    }
    AG_CHECK(wt.numel() <= INT32_MAX, "conv2d on cuda: weight {} has more than 2^31 - 1 elements", wt.desc());
    const std::array<int, 4> wdims{to_int(wt.size(0), "size"), to_int(wt.size(1), "size"),
                                   to_int(wt.size(2), "size"), to_int(wt.size(3), "size")};
    AG_CUDNN_CHECK(
        cudnnSetFilterNdDescriptor(wd.get(), type, nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, 4, wdims.data()));
    const Window2d& win = p.window;
    AG_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
        cd.get(), to_int(win.ph, "padding"), to_int(win.pw, "padding"), to_int(win.sh, "stride"),
        to_int(win.sw, "stride"), to_int(win.dh, "dilation"), to_int(win.dw, "dilation"), CUDNN_CROSS_CORRELATION,
        dtype == DType::Float64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT));
    AG_CUDNN_CHECK(cudnnSetConvolutionGroupCount(cd.get(), to_int(p.groups, "groups")));
    AG_CUDNN_CHECK(cudnnSetConvolutionMathType(cd.get(), wanted_math(dtype)));
    key = fmt::format("{}|{}|{}|{}|{}|{}|{}|{}|{},{},{},{},{},{}|{}", static_cast<int>(pass), device,
                      dtype_name(dtype), static_cast<int>(wanted_math(dtype)), nhwc ? "nhwc" : "nchw",
                      shape_str(xt.shape()), shape_str(wt.shape()), shape_str(yt.shape()), win.sh, win.sw, win.ph,
                      win.pw, win.dh, win.dw, p.groups);
  }
};

struct AlgoPerf {
  int algo = 0;
  cudnnStatus_t status = CUDNN_STATUS_NOT_SUPPORTED;
  size_t memory = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

template <class P> std::vector<AlgoPerf> to_perfs(const P* perf, int n) {
  std::vector<AlgoPerf> out;
  for (int i = 0; i < n; ++i)
    out.push_back({static_cast<int>(perf[i].algo), perf[i].status, perf[i].memory, perf[i].mathType});
  return out;
}

int algo_count(Pass pass) {
  switch (pass) {
    case Pass::Forward: return CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
    case Pass::BackwardData: return CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
    case Pass::BackwardFilter: return CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
  }
  return 0;
}

std::vector<AlgoPerf> heuristic_algos(const ConvCall& c) {
  int n = 0;
  switch (c.pass) {
    case Pass::Forward: {
      std::array<cudnnConvolutionFwdAlgoPerf_t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT> perf{};
      AG_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(c.handle, c.xd.get(), c.wd.get(), c.cd.get(), c.yd.get(),
                                                            static_cast<int>(perf.size()), &n, perf.data()));
      return to_perfs(perf.data(), n);
    }
    case Pass::BackwardData: {
      std::array<cudnnConvolutionBwdDataAlgoPerf_t, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT> perf{};
      AG_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(c.handle, c.wd.get(), c.yd.get(), c.cd.get(),
                                                                 c.xd.get(), static_cast<int>(perf.size()), &n,
                                                                 perf.data()));
      return to_perfs(perf.data(), n);
    }
    case Pass::BackwardFilter: {
      std::array<cudnnConvolutionBwdFilterAlgoPerf_t, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT> perf{};
      AG_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(c.handle, c.xd.get(), c.yd.get(), c.cd.get(),
                                                                   c.wd.get(), static_cast<int>(perf.size()), &n,
                                                                   perf.data()));
      return to_perfs(perf.data(), n);
    }
  }
  return {};
}

// Times the algorithms that fit in `ws`, fastest first. They write their result to `out`
// (the call's output, or scratch of its size).
std::vector<AlgoPerf> find_algos(const ConvCall& c, void* out, void* ws, size_t bytes) {
  int n = 0;
  switch (c.pass) {
    case Pass::Forward: {
      std::array<cudnnConvolutionFwdAlgoPerf_t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT> perf{};
      AG_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(c.handle, c.xd.get(), c.x, c.wd.get(), c.w, c.cd.get(),
                                                            c.yd.get(), out, static_cast<int>(perf.size()), &n,
                                                            perf.data(), ws, bytes));
      return to_perfs(perf.data(), n);
    }
    case Pass::BackwardData: {
      std::array<cudnnConvolutionBwdDataAlgoPerf_t, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT> perf{};
      AG_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(c.handle, c.wd.get(), c.w, c.yd.get(), c.y,
                                                                 c.cd.get(), c.xd.get(), out,
                                                                 static_cast<int>(perf.size()), &n, perf.data(), ws,
                                                                 bytes));
      return to_perfs(perf.data(), n);
    }
    case Pass::BackwardFilter: {
      std::array<cudnnConvolutionBwdFilterAlgoPerf_t, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT> perf{};
      AG_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(c.handle, c.xd.get(), c.x, c.yd.get(), c.y,
                                                                   c.cd.get(), c.wd.get(), out,
                                                                   static_cast<int>(perf.size()), &n, perf.data(),
                                                                   ws, bytes));
      return to_perfs(perf.data(), n);
    }
  }
  return {};
}

// The workspace `algo` needs under the descriptor's current math type; false when cuDNN
// cannot run it for this call.
bool workspace_size(const ConvCall& c, int algo, size_t* bytes) {
  cudnnStatus_t st = CUDNN_STATUS_NOT_SUPPORTED;
  switch (c.pass) {
    case Pass::Forward:
      st = cudnnGetConvolutionForwardWorkspaceSize(c.handle, c.xd.get(), c.wd.get(), c.cd.get(), c.yd.get(),
                                                   static_cast<cudnnConvolutionFwdAlgo_t>(algo), bytes);
      break;
    case Pass::BackwardData:
      st = cudnnGetConvolutionBackwardDataWorkspaceSize(c.handle, c.wd.get(), c.yd.get(), c.cd.get(), c.xd.get(),
                                                        static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), bytes);
      break;
    case Pass::BackwardFilter:
      st = cudnnGetConvolutionBackwardFilterWorkspaceSize(c.handle, c.xd.get(), c.yd.get(), c.cd.get(), c.wd.get(),
                                                          static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), bytes);
      break;
  }
  return st == CUDNN_STATUS_SUCCESS;
}

// output = conv(...) (+ output when accumulating). Returns cuDNN's status.
cudnnStatus_t execute(const ConvCall& c, int algo, void* ws, size_t bytes, bool accumulate) {
  // Scaling factors are double for float64 data, float otherwise.
  const double one_d = 1.0, beta_d = accumulate ? 1.0 : 0.0;
  const float one_f = 1.0f, beta_f = accumulate ? 1.0f : 0.0f;
  const bool f64 = c.dtype == DType::Float64;
  const void* alpha = f64 ? static_cast<const void*>(&one_d) : static_cast<const void*>(&one_f);
  const void* beta = f64 ? static_cast<const void*>(&beta_d) : static_cast<const void*>(&beta_f);
  switch (c.pass) {
    case Pass::Forward:
      return cudnnConvolutionForward(c.handle, alpha, c.xd.get(), c.x, c.wd.get(), c.w, c.cd.get(),
                                     static_cast<cudnnConvolutionFwdAlgo_t>(algo), ws, bytes, beta, c.yd.get(), c.y);
    case Pass::BackwardData:
      return cudnnConvolutionBackwardData(c.handle, alpha, c.wd.get(), c.w, c.yd.get(), c.y, c.cd.get(),
                                          static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), ws, bytes, beta,
                                          c.xd.get(), c.x);
    case Pass::BackwardFilter:
      return cudnnConvolutionBackwardFilter(c.handle, alpha, c.xd.get(), c.x, c.yd.get(), c.y, c.cd.get(),
                                            static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), ws, bytes, beta,
                                            c.wd.get(), c.w);
  }
  return CUDNN_STATUS_NOT_SUPPORTED;
}

const char* execute_name(Pass p) {
  switch (p) {
    case Pass::Forward: return "cudnnConvolutionForward";
    case Pass::BackwardData: return "cudnnConvolutionBackwardData";
    case Pass::BackwardFilter: return "cudnnConvolutionBackwardFilter";
  }
  return "?";
}

void* output_of(const ConvCall& c) {
  return c.pass == Pass::Forward ? c.y : (c.pass == Pass::BackwardData ? c.x : c.w);
}

Tensor workspace(int device, size_t bytes) {
  return empty({static_cast<int64_t>(bytes)}, TensorOptions(kUInt8).device(Device(kCUDA, device)));
}

// Float32 without TF32 stays on FMA kernels whatever an algorithm reports (Note [cuDNN convolution]).
cudnnMathType_t math_for(const AlgoPerf& p, DType t) {
  return t == DType::Float32 && !allow_tf32() ? CUDNN_FMA_MATH : p.math;
}

bool capturing(int device) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  AG_CUDA_CHECK(cudaStreamIsCapturing(current_stream(device), &st));
  return st != cudaStreamCaptureStatusNone;
}

// The fastest algorithm for c.key, timed once by cuDNN and cached; without `search` (while
// a graph is being captured) only what the cache holds.
std::optional<AlgoPerf> benchmarked(const ConvCall& c, bool accumulate, bool search) {
  static auto* mutex = new std::mutex();
  static auto* cache = new std::map<std::string, AlgoPerf>();
  std::lock_guard<std::mutex> lock(*mutex);
  if (auto it = cache->find(c.key); it != cache->end()) return it->second;
  if (!search) return std::nullopt;
  // The search workspace: the most any algorithm asks for (FFT may ask for gigabytes), at
  // most what the device and the pool's cache have free, halved until it can be allocated;
  // Find skips the algorithms that need more.
  size_t bytes = 0;
  for (int a = 0; a < algo_count(c.pass); ++a) {
    size_t b = 0;
    if (workspace_size(c, a, &b)) bytes = std::max(bytes, b);
  }
  size_t free_bytes = 0, total_bytes = 0;
  AG_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const MemoryStats ms = memory_stats(c.device);
  const size_t cached = ms.reserved > ms.allocated ? ms.reserved - ms.allocated : 0;
  bytes = std::min(bytes, (free_bytes + cached) / 10 * 9);
  Tensor ws;
  for (; bytes > 0; bytes /= 2) {
    try {
      ws = workspace(c.device, bytes);
      break;
    } catch (const Error&) {
    }
  }
  // Find writes the output; an accumulating call must not lose what it holds.
  void* out = output_of(c);
  Tensor scratch;
  if (accumulate) {
    size_t out_bytes = 0;
    AG_CUDNN_CHECK(cudnnGetFilterSizeInBytes(c.wd.get(), &out_bytes));  // only backward filter accumulates
    scratch = workspace(c.device, out_bytes);
    out = scratch.data_ptr();
  }
  const std::vector<AlgoPerf> found = find_algos(c, out, bytes ? ws.data_ptr() : nullptr, bytes);
  for (const AlgoPerf& p : found) {
    if (p.status != CUDNN_STATUS_SUCCESS || p.memory > bytes) continue;
    cache->emplace(c.key, p);
    return p;
  }
  return std::nullopt;  // nothing ran within the workspace: the heuristics get their turn
}

// Runs the call with the first candidate algorithm that cuDNN supports and whose workspace
// can be allocated; false when there is none (`why` says the last reason).
// The algorithm that last ran for each key: asking cuDNN 9's heuristics costs milliseconds
// of host time per call (it builds a backend query), more than the convolution itself.
struct ChosenCache {
  std::mutex mu;
  std::map<std::string, AlgoPerf> algo;
};
ChosenCache& chosen_cache() {
  static auto* cache = new ChosenCache();  // leaked, like the handles
  return *cache;
}

bool try_algo(ConvCall& c, const AlgoPerf& p, bool accumulate, std::string& why);

bool run(ConvCall& c, bool accumulate, std::string& why) {
  const bool bench = g_benchmark.load(std::memory_order_relaxed);
  const std::string key = c.key + (bench ? "|bench" : "|heuristic");
  std::optional<AlgoPerf> cached;
  {
    std::lock_guard<std::mutex> lock(chosen_cache().mu);
    if (auto it = chosen_cache().algo.find(key); it != chosen_cache().algo.end()) cached = it->second;
  }
  if (cached && try_algo(c, *cached, accumulate, why)) return true;
  std::vector<AlgoPerf> candidates;
  if (bench) {
    if (auto best = benchmarked(c, accumulate, !capturing(c.device))) candidates.push_back(*best);
  }
  for (const AlgoPerf& p : heuristic_algos(c)) candidates.push_back(p);
  for (const AlgoPerf& p : candidates) {
    if (try_algo(c, p, accumulate, why)) {
      std::lock_guard<std::mutex> lock(chosen_cache().mu);
      chosen_cache().algo[key] = p;
      return true;
    }
  }
  return false;
}

// Runs `p` if cuDNN supports it and its workspace can be allocated.
bool try_algo(ConvCall& c, const AlgoPerf& p, bool accumulate, std::string& why) {
  {
    if (p.status != CUDNN_STATUS_SUCCESS) return false;
    AG_CUDNN_CHECK(cudnnSetConvolutionMathType(c.cd.get(), math_for(p, c.dtype)));
    size_t bytes = 0;
    if (!workspace_size(c, p.algo, &bytes)) return false;
    Tensor ws;
    if (bytes > 0) {
      try {
        ws = workspace(c.device, bytes);
      } catch (const Error& e) {
        why = e.what();  // out of memory: try an algorithm that needs less
        return false;
      }
    }
    const cudnnStatus_t st = execute(c, p.algo, bytes ? ws.data_ptr() : nullptr, bytes, accumulate);
    if (st == CUDNN_STATUS_SUCCESS) return true;
    if (CUDNN_STATUS_CATEGORY(st) != CUDNN_STATUS_NOT_SUPPORTED)
      detail::throw_cudnn_error(st, execute_name(c.pass), __FILE__, __LINE__);
  }
  return false;
}

// One pass in forward's naming (x, w, y; the pass says which one it writes) in one layout,
// over batch chunks; false when cuDNN has no algorithm for it.
bool run_in_layout(Pass pass, const Tensor& x, const Tensor& w, const Tensor& y, const Conv2dParams& p, bool nhwc,
                   std::string& why) {
  const bool writes_x = pass == Pass::BackwardData, writes_w = pass == Pass::BackwardFilter;
  const bool writes_y = pass == Pass::Forward;
  const Tensor xp = writes_x ? packed_output(x, nhwc) : packed_input(x, nhwc);
  const Tensor wp = writes_w ? packed_output(w, nhwc) : packed_input(w, nhwc);
  const Tensor yp = writes_y ? packed_output(y, nhwc) : packed_input(y, nhwc);
  bool ok = true;
  for_each_batch_chunk(xp, yp, [&](const Tensor& xc, const Tensor& yc, bool first) {
    if (!ok) return;
    ConvCall c(pass, xc, wp, yc, p, nhwc);
    // Backward filter sums over the batch: later chunks add to what the first wrote.
    ok = run(c, writes_w && !first, why);
  });
  if (!ok) return false;
  const Tensor& out = writes_x ? x : (writes_w ? w : y);
  const Tensor& packed = writes_x ? xp : (writes_w ? wp : yp);
  if (!packed.is_same(out)) copy(out, packed);
  return true;
}

void run_pass(Pass pass, const Tensor& x, const Tensor& w, const Tensor& y, const Conv2dParams& p) {
  std::string why = "no algorithm supports it";
  const bool nhwc = wants_nhwc({&x, &w, &y});
  if (run_in_layout(pass, x, w, y, p, nhwc, why)) return;
  // Not every NHWC case has a cuDNN kernel (float32 on FMA kernels may not); NCHW covers all.
  if (nhwc && run_in_layout(pass, x, w, y, p, false, why)) return;
  AG_CHECK(false, "conv2d {} on cuda: no cuDNN algorithm could run ({})", pass_name(pass), why);
}

// Adds the call's shapes and parameters to any error it throws.
template <class F>
void with_context(const char* what, std::initializer_list<const Tensor*> ts, const Conv2dParams& p, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    std::string operands;
    for (const Tensor* t : ts) operands += fmt::format("{}{} strides {}", operands.empty() ? "" : ", ", t->desc(),
                                                       shape_str(t->strides()));
    const Window2d& w = p.window;
    throw Error(fmt::format("{}\n  in conv2d {} on cuda: {}; stride [{}, {}], padding [{}, {}], dilation [{}, {}], "
                            "groups {}",
                            e.what(), what, operands, w.sh, w.sw, w.ph, w.pw, w.dh, w.dw, p.groups));
  }
}

}  // namespace

void conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
                    const Conv2dParams& p) {
  if (out.numel() == 0) return;
  DeviceGuard guard(out.device().index);
  with_context("forward", {&x, &weight, &out}, p, [&] {
    if (x.numel() == 0 || weight.numel() == 0) {  // no input channels: an empty sum
      fill(out, 0);
    } else {
      run_pass(Pass::Forward, x, weight, out, p);
    }
    if (bias.defined()) {  // out += bias[k], broadcast over n, y, x by zero strides
      Tensor b = alias_with(bias, out.shape(), {0, bias.stride(0), 0, 0}, bias.storage_offset());
      binary(BinaryKind::Add, out, b, out);
    }
  });
}

void conv2d_backward_data(const Tensor& grad_out, const Tensor& weight, const Tensor& grad_in,
                          const Conv2dParams& p) {
  if (grad_in.numel() == 0) return;
  DeviceGuard guard(grad_in.device().index);
  with_context("backward data", {&grad_out, &weight, &grad_in}, p, [&] {
    if (grad_out.numel() == 0 || weight.numel() == 0) {
      fill(grad_in, 0);
      return;
    }
    run_pass(Pass::BackwardData, grad_in, weight, grad_out, p);
  });
}

void conv2d_backward_weight(const Tensor& x, const Tensor& grad_out, const Tensor& grad_weight,
                            const Conv2dParams& p) {
  if (grad_weight.numel() == 0) return;
  DeviceGuard guard(grad_weight.device().index);
  with_context("backward filter", {&x, &grad_out, &grad_weight}, p, [&] {
    if (x.numel() == 0 || grad_out.numel() == 0) {
      fill(grad_weight, 0);
      return;
    }
    run_pass(Pass::BackwardFilter, x, grad_weight, grad_out, p);
  });
}

void set_cudnn_benchmark(bool on) { g_benchmark.store(on, std::memory_order_relaxed); }
bool cudnn_benchmark() { return g_benchmark.load(std::memory_order_relaxed); }

}  // namespace ampgrad::cuda
