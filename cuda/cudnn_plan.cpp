// cuDNN graph API for convolution: descriptors, engine configurations filtered by numerics,
// execution plans chosen by heuristics or timing and cached per geometry, variant packs.
#include <ampgrad/cuda/cudnn_plan.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <ampgrad/core/dispatch.h>
#include <ampgrad/core/tensor.h>
#include <ampgrad/cuda/call_graph.h>
#include <ampgrad/cuda/check.h>
#include <ampgrad/cuda/graph.h>
#include <ampgrad/cuda/runtime.h>

namespace ampgrad::cuda {

namespace detail {
void throw_cudnn_error(int status, const char* call, const char* file, int line) {
  char last[1024] = {};
  cudnnGetLastErrorString(last, sizeof(last));
  last[sizeof(last) - 1] = '\0';
  const std::string op = CurrentOp::label();
  throw Error(fmt::format("cuDNN error{}{}{}: {} failed: {}{}{} (at {}:{})", op.empty() ? "" : " (in ", op,
                          op.empty() ? "" : ")", call,
                          cudnnGetErrorString(static_cast<cudnnStatus_t>(status)), last[0] ? ": " : "", last, file,
                          line));
}
}  // namespace detail

namespace dnn {

// Note [cuDNN plans]
// cuDNN 9's legacy calls (cudnnConvolutionForward and friends) are a shim over the graph API:
// every call builds an operation graph and an execution plan again, which costs more host
// time than a small convolution runs on the device, and they reach only the engines that map
// to the old algorithm enums. ampgrad builds the graph itself, once per ConvGeometry: tensor,
// convolution and operation descriptors, an operation graph, engine configurations from
// heuristics mode A and then the fallback list, and a finalized execution plan. A call then
// costs a map lookup, a workspace from the caching allocator and a variant pack, or, once the
// call repeats with the same pointers, a graph launch (Note [Call graphs] in cuda/call_graph.h).
// Numerics filter the engines: none that down-converts its inputs; for float32 no tensor-core
// (TF32) engine unless allow_tf32(); none that reduces in reduced precision, so float16 and
// bfloat16 accumulate in float32, as every float16/bfloat16 product does here.
// Non-deterministic engines are allowed, as in PyTorch's default.
// Benchmark mode (cudnn.benchmark): every candidate plan (up to kMaxTimed; mode A and the
// fallback list propose 10-40; then the knob sweep of Note [cuDNN knobs]) runs once to warm up, then five times, each between its own
// CUDA events, into a scratch output; the plan with the fastest median is cached. With only
// the first 12 timed (and a mean of three), tf32 NCHW 64x64x56 forward ran at 0.90 of
// PyTorch's choice. Timing synchronizes, so while the stream is captured into a CUDA graph
// only cached plans are used and a new geometry takes the heuristics' first plan.
// AMPGRAD_CUDNN_BENCHMARK_LOG=1 prints every timed candidate (pass, dtype, shapes, engine
// index, knobs as type=value, workspace, median ms) to stderr. A geometry
// no engine supports is cached as such (channels-last float32 may have none: the caller
// retries in NCHW).

namespace {

constexpr int kMaxDevices = 64;
constexpr int kMaxTimed = 64;
constexpr int64_t kUidX = 1, kUidW = 2, kUidY = 3;

struct HandleState {
  std::once_flag once;
  cudnnHandle_t handle = nullptr;
};


struct Plan {
  std::vector<DescPtr> parts;  // the descriptors the plan was built from, kept alive with it
  DescPtr plan;
  int64_t workspace = 0;
};
using PlanPtr = std::shared_ptr<const Plan>;

cudnnDataType_t dnn_type(DType t) {
  switch (t) {
    case DType::Float32: return CUDNN_DATA_FLOAT;
    case DType::Float16: return CUDNN_DATA_HALF;
    case DType::BFloat16: return CUDNN_DATA_BFLOAT16;
    case DType::Float64: return CUDNN_DATA_DOUBLE;
    default: break;
  }
  AG_CHECK(false, "convolution on cuda: dtype {} is not supported (cuDNN takes float16, bfloat16, float32, float64)",
           dtype_name(t));
  return CUDNN_DATA_FLOAT;  // unreachable: AG_CHECK threw
}

using Dims5 = std::array<int64_t, 5>;

// Strides of a packed [N, C, spatial...] tensor of `n` dims stored as NC... or (4-D) NHWC.
Dims5 packed_strides(const Dims5& s, int64_t n, bool nhwc) {
  Dims5 st{};
  int64_t e = 1;
  auto put = [&](int64_t d) {
    st[static_cast<size_t>(d)] = e;
    e *= s[static_cast<size_t>(d)];
  };
  if (nhwc) {
    put(1);
    for (int64_t d = n - 1; d >= 2; --d) put(d);
    put(0);
  } else {
    for (int64_t d = n - 1; d >= 0; --d) put(d);
  }
  return st;
}

DescPtr tensor_desc(int64_t uid, cudnnDataType_t type, const Dims5& dims, int64_t n, bool nhwc) {
  auto t = std::make_shared<Desc>(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const Dims5 strides = packed_strides(dims, n, nhwc);
  const int64_t alignment = 16;  // the caller passes 16-byte-aligned pointers only
  t->set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
  t->set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, n, dims.data());
  t->set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, n, strides.data());
  t->set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  t->set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
  t->finalize();
  return t;
}

DescPtr conv_desc(const ConvGeometry& g) {
  auto c = std::make_shared<Desc>(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const cudnnDataType_t compute = g.dtype == DType::Float64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t spatial = g.dims - 2;
  const int64_t* stride = g.window.data();
  const int64_t* pad = stride + spatial;
  const int64_t* dilation = pad + spatial;
  c->set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
  c->set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
  c->set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial);
  c->set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, spatial, stride);
  c->set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, spatial, pad);
  c->set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, spatial, pad);
  c->set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, spatial, dilation);
  c->finalize();
  return c;
}

// The pass's operation: which attributes name x, w, y, alpha and beta.
struct OpAttrs {
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
};
OpAttrs op_attrs(Pass p) {
  switch (p) {
    case Pass::Forward:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA};
    case Pass::BackwardData:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA};
    case Pass::BackwardFilter:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA};
  }
  AG_INTERNAL_ASSERT(false, "unknown convolution pass");
  return {};
}

// The operation graph of one pass, and the descriptors it holds.
std::vector<DescPtr> operation_graph(const ConvGeometry& g, cudnnHandle_t h) {
  const cudnnDataType_t type = dnn_type(g.dtype);
  DescPtr x = tensor_desc(kUidX, type, g.x, g.dims, g.nhwc), w = tensor_desc(kUidW, type, g.w, g.dims, g.nhwc),
          y = tensor_desc(kUidY, type, g.y, g.dims, g.nhwc), conv = conv_desc(g);
  const OpAttrs a = op_attrs(g.pass);
  auto op = std::make_shared<Desc>(a.type);
  op->set(a.x, *x);
  op->set(a.w, *w);
  op->set(a.y, *y);
  op->set(a.conv, *conv);
  // Scaling factors in the compute type: double for float64 data, float otherwise.
  const double alpha_d = 1, beta_d = g.accumulate ? 1 : 0;
  const float alpha_f = 1, beta_f = g.accumulate ? 1.0f : 0.0f;
  if (g.dtype == DType::Float64) {
    op->set(a.alpha, CUDNN_TYPE_DOUBLE, 1, &alpha_d);
    op->set(a.beta, CUDNN_TYPE_DOUBLE, 1, &beta_d);
  } else {
    op->set(a.alpha, CUDNN_TYPE_FLOAT, 1, &alpha_f);
    op->set(a.beta, CUDNN_TYPE_FLOAT, 1, &beta_f);
  }
  op->finalize();
  auto graph = std::make_shared<Desc>(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  cudnnBackendDescriptor_t ops[] = {op->get()};
  graph->set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, ops);
  graph->set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
  graph->finalize();
  return {graph, op, conv, x, w, y};  // the graph first
}

struct EngineInfo {
  int64_t index = -1;
  bool allowed = true;
};

// The engine behind a configuration and whether its numerics are allowed (Note [cuDNN plans]).
EngineInfo engine_info(const Desc& cfg, const ConvGeometry& g) {
  Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t e = engine.get();
  int64_t n = 0;
  AG_CUDNN_CHECK(
      cudnnBackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &e));
  EngineInfo info;
  AG_CUDNN_CHECK(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &info.index));
  std::array<cudnnBackendNumericalNote_t, CUDNN_NUMERICAL_NOTE_TYPE_COUNT> notes{};
  AG_CUDNN_CHECK(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                          static_cast<int64_t>(notes.size()), &n, notes.data()));
  for (int64_t i = 0; i < std::min<int64_t>(n, static_cast<int64_t>(notes.size())); ++i) {
    switch (notes[static_cast<size_t>(i)]) {
      case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS:
      case CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION: info.allowed = false; break;
      case CUDNN_NUMERICAL_NOTE_TENSOR_CORE:
        if (g.dtype == DType::Float32 && !g.tf32) info.allowed = false;
        break;
      default: break;
    }
  }
  return info;
}

// Note [cuDNN knobs]
// An engine configuration is an engine and a value for each of its knobs (tile sizes, split
// counts, ...). PlanSource keeps the first configuration the heuristics give for each engine.
// Benchmark mode then also times the neighbours of the fastest one (sweep_knobs): each knob
// its configuration sets, moved to the values around its own in the engine's range (up to 8
// strides each way, nearest first; cuDNN refuses the combinations the engine cannot run when
// the configuration or plan is finalized, and those cost no timing), moving to any that is
// faster, within 2 x kMaxTimed timed plans and 4 x kMaxTimed attempts, with the numerics
// filter of Note [cuDNN plans]. Anything that fails in the sweep keeps the best plan found
// before it. AMPGRAD_CUDNN_BENCHMARK_LOG=1 prints every timed candidate with its knobs.
// Measured on an H200: conv_transpose2d's float32 weight gradient ([64, 128, 28, 28] by
// [128, 64, 4, 4], stride 2) ran engine 20 with the heuristics' knobs (TILE_SIZE 6,
// USE_TEX 0) in 0.616 ms; the sweep found TILE_SIZE 0, USE_TEX 1 at 0.472 ms (21 plans timed
// for that pass), and the op's forward + backward went from 0.94 of PyTorch's speed to 1.04.
struct KnobChoice {
  cudnnBackendKnobType_t type;
  int64_t value;
};
struct KnobRange {
  cudnnBackendKnobType_t type;
  int64_t lo, hi, stride;
};

// Descriptors of one type, created for cuDNN to fill with an array attribute.
std::vector<DescPtr> fresh(cudnnBackendDescriptorType_t type, size_t n, std::vector<cudnnBackendDescriptor_t>& raw) {
  std::vector<DescPtr> d;
  raw.clear();
  for (size_t i = 0; i < n; ++i) {
    d.push_back(std::make_shared<Desc>(type));
    raw.push_back(d.back()->get());
  }
  return d;
}

// The knob choices of a configuration and the knob ranges of its engine (empty when cuDNN
// does not say).
void knobs_of(const Desc& cfg, std::vector<KnobChoice>& choices, std::vector<KnobRange>& ranges) {
  choices.clear();
  ranges.clear();
  std::vector<cudnnBackendDescriptor_t> raw;
  auto kc = fresh(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, CUDNN_KNOB_TYPE_COUNTS, raw);
  int64_t got = 0, n = 0;
  if (cudnnBackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                               static_cast<int64_t>(raw.size()), &got, raw.data()) != CUDNN_STATUS_SUCCESS)
    got = 0;
  for (int64_t i = 0; i < std::min<int64_t>(got, static_cast<int64_t>(raw.size())); ++i) {
    KnobChoice c{};
    if (cudnnBackendGetAttribute(raw[static_cast<size_t>(i)], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE,
                                 1, &n, &c.type) == CUDNN_STATUS_SUCCESS &&
        cudnnBackendGetAttribute(raw[static_cast<size_t>(i)], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1,
                                 &n, &c.value) == CUDNN_STATUS_SUCCESS)
      choices.push_back(c);
  }
  Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t e = engine.get();
  AG_CUDNN_CHECK(cudnnBackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                          &n, &e));
  auto ki = fresh(CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR, CUDNN_KNOB_TYPE_COUNTS, raw);
  if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_KNOB_INFO, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                               static_cast<int64_t>(raw.size()), &got, raw.data()) != CUDNN_STATUS_SUCCESS)
    got = 0;
  for (int64_t i = 0; i < std::min<int64_t>(got, static_cast<int64_t>(raw.size())); ++i) {
    const cudnnBackendDescriptor_t k = raw[static_cast<size_t>(i)];
    KnobRange r{};
    if (cudnnBackendGetAttribute(k, CUDNN_ATTR_KNOB_INFO_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &n, &r.type) ==
            CUDNN_STATUS_SUCCESS &&
        cudnnBackendGetAttribute(k, CUDNN_ATTR_KNOB_INFO_MINIMUM_VALUE, CUDNN_TYPE_INT64, 1, &n, &r.lo) ==
            CUDNN_STATUS_SUCCESS &&
        cudnnBackendGetAttribute(k, CUDNN_ATTR_KNOB_INFO_MAXIMUM_VALUE, CUDNN_TYPE_INT64, 1, &n, &r.hi) ==
            CUDNN_STATUS_SUCCESS &&
        cudnnBackendGetAttribute(k, CUDNN_ATTR_KNOB_INFO_STRIDE, CUDNN_TYPE_INT64, 1, &n, &r.stride) ==
            CUDNN_STATUS_SUCCESS)
      ranges.push_back(r);
  }
}

int64_t engine_index(const Desc& cfg) {
  Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t e = engine.get();
  int64_t n = 0, index = -1;
  AG_CUDNN_CHECK(
      cudnnBackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &e));
  AG_CUDNN_CHECK(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index));
  return index;
}

// A configuration of engine `index` of `graph` with these knob choices; nullptr when cuDNN
// rejects it. `made_of` receives the descriptors it refers to.
DescPtr make_config(const Desc& graph, int64_t index, const std::vector<KnobChoice>& choices,
                    std::vector<DescPtr>& made_of) {
  made_of.clear();
  auto engine = std::make_shared<Desc>(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  engine->set(CUDNN_ATTR_ENGINE_OPERATION_GRAPH, graph);
  engine->set(CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &index);
  if (cudnnBackendFinalize(engine->get()) != CUDNN_STATUS_SUCCESS) return nullptr;
  made_of.push_back(engine);
  std::vector<cudnnBackendDescriptor_t> raw;
  for (const KnobChoice& c : choices) {
    auto k = std::make_shared<Desc>(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
    k->set(CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &c.type);
    k->set(CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &c.value);
    if (cudnnBackendFinalize(k->get()) != CUDNN_STATUS_SUCCESS) return nullptr;
    raw.push_back(k->get());
    made_of.push_back(k);
  }
  auto cfg = std::make_shared<Desc>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  cfg->set(CUDNN_ATTR_ENGINECFG_ENGINE, *engine);
  if (!raw.empty())
    cfg->set(CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(raw.size()),
             raw.data());
  if (cudnnBackendFinalize(cfg->get()) != CUDNN_STATUS_SUCCESS) return nullptr;
  return cfg;
}

std::string knobs_str(const std::vector<KnobChoice>& choices) {
  std::string out;
  for (const KnobChoice& c : choices) out += fmt::format(" {}={}", static_cast<int>(c.type), c.value);
  return out;
}

// Execution plans for one geometry, in the heuristics' order, built on demand.
class PlanSource {
 public:
  PlanSource(const ConvGeometry& g, cudnnHandle_t h) : h_(h) {
    parts_ = operation_graph(g, h);
    std::set<int64_t> seen;
    for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
      for (DescPtr& cfg : engine_configs(*parts_.front(), mode)) {
        const EngineInfo info = engine_info(*cfg, g);
        if (info.allowed && seen.insert(info.index).second) {
          cfgs_.push_back(std::move(cfg));
          engines_.push_back(info.index);
        }
      }
    }
  }

  // The next configuration that finalizes into a plan; nullptr when there is none.
  PlanPtr next() {
    while (i_ < cfgs_.size()) {
      const DescPtr& cfg = cfgs_[i_++];
      if (PlanPtr p = build(cfg)) return p;  // else the engine cannot run this graph
    }
    return nullptr;
  }

  // A plan of configuration `cfg` (and the descriptors it was made of, kept alive with it);
  // nullptr when it does not finalize.
  PlanPtr build(const DescPtr& cfg, const std::vector<DescPtr>& made_of = {}) const {
    auto plan = std::make_shared<Desc>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    plan->set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h_);
    plan->set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, *cfg);
    if (cudnnBackendFinalize(plan->get()) != CUDNN_STATUS_SUCCESS) return nullptr;
    auto p = std::make_shared<Plan>();
    p->parts = parts_;
    p->parts.insert(p->parts.end(), made_of.begin(), made_of.end());
    p->parts.push_back(cfg);
    p->plan = plan;
    int64_t n = 0;
    AG_CUDNN_CHECK(cudnnBackendGetAttribute(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                                            1, &n, &p->workspace));
    return p;
  }

  const Desc& graph() const { return *parts_.front(); }
  // The configuration of the plan next() returned last.
  const DescPtr& last_config() const { return cfgs_[i_ - 1]; }

  size_t configs() const { return cfgs_.size(); }
  // The global engine index of the plan next() returned last.
  int64_t last_engine() const { return engines_[i_ - 1]; }

 private:
  cudnnHandle_t h_;
  std::vector<DescPtr> parts_;
  std::vector<DescPtr> cfgs_;
  std::vector<int64_t> engines_;
  size_t i_ = 0;
};

Tensor workspace(int device, int64_t bytes) {
  return empty({bytes}, TensorOptions(kUInt8).device(Device(kCUDA, device)));
}

void execute(cudnnHandle_t h, const Plan& p, void* x, void* w, void* y, void* ws) {
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  const int64_t uids[] = {kUidX, kUidW, kUidY};
  void* ptrs[] = {x, w, y};
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids);
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs);
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
  pack.finalize();
  AG_CUDNN_CHECK(cudnnBackendExecute(h, p.plan->get(), pack.get()));
}

int64_t numel(const Dims5& s, int64_t n) {
  int64_t e = 1;
  for (int64_t d = 0; d < n; ++d) e *= s[static_cast<size_t>(d)];
  return e;
}

// Median milliseconds of five runs after one warm-up (each run between its own pair of
// events), or infinity when the workspace cannot be allocated. The pass writes into
// `scratch`, never into the caller's output.
float time_plan(const ConvGeometry& g, cudnnHandle_t h, const Plan& p, void* x, void* w, void* y, void* scratch) {
  Tensor ws;
  try {
    if (p.workspace > 0) ws = workspace(g.device, p.workspace);
  } catch (const Error&) {
    return std::numeric_limits<float>::infinity();
  }
  void* wsp = p.workspace > 0 ? ampgrad::detail::address(ws) : nullptr;
  void* xs = g.pass == Pass::BackwardData ? scratch : x;
  void* wsc = g.pass == Pass::BackwardFilter ? scratch : w;
  void* ys = g.pass == Pass::Forward ? scratch : y;
  cudaStream_t s = current_stream(g.device);
  constexpr int kRuns = 5;
  std::array<cudaEvent_t, kRuns + 1> ev{};
  auto destroy = [&] {
    for (cudaEvent_t e : ev)
      if (e) (void)cudaEventDestroy(e);
  };
  std::array<float, kRuns> ms{};
  try {
    for (cudaEvent_t& e : ev) AG_CUDA_CHECK(cudaEventCreate(&e));
    execute(h, p, xs, wsc, ys, wsp);
    AG_CUDA_CHECK(cudaEventRecord(ev[0], s));
    for (int i = 0; i < kRuns; ++i) {
      execute(h, p, xs, wsc, ys, wsp);
      AG_CUDA_CHECK(cudaEventRecord(ev[static_cast<size_t>(i) + 1], s));
    }
    AG_CUDA_CHECK(cudaEventSynchronize(ev[kRuns]));
    for (size_t i = 0; i < kRuns; ++i) AG_CUDA_CHECK(cudaEventElapsedTime(&ms[i], ev[i], ev[i + 1]));
  } catch (...) {
    destroy();
    throw;
  }
  destroy();
  std::sort(ms.begin(), ms.end());
  return ms[kRuns / 2];
}

// Times the neighbours of configuration `centre_cfg` (Note [cuDNN knobs]): each knob of its
// engine set to the values around its own, nearest first, moving to any that is faster, while
// the budgets of timed plans and of attempts last. Updates best and best_ms.
template <class Report>
void sweep_knobs(const ConvGeometry& g, cudnnHandle_t h, const PlanSource& src, const Desc& centre_cfg, void* x,
                 void* w, void* y, void* scratch, int& timed, PlanPtr& best, float& best_ms, const Report& report) {
  constexpr int kMaxAttempts = 4 * kMaxTimed, kValuesPerKnob = 8;
  const int64_t engine = engine_index(centre_cfg);
  std::vector<KnobChoice> choices;
  std::vector<KnobRange> ranges;
  knobs_of(centre_cfg, choices, ranges);
  auto key = [](const std::vector<KnobChoice>& c) {
    std::vector<int64_t> k;
    for (const KnobChoice& kc : c) k.insert(k.end(), {static_cast<int64_t>(kc.type), kc.value});
    return k;
  };
  std::set<std::vector<int64_t>> tried{key(choices)};
  int attempts = 0;
  auto budget_left = [&] { return timed < 2 * kMaxTimed && attempts < kMaxAttempts; };
  for (bool moved = true; moved && budget_left();) {
    moved = false;
    const std::vector<KnobChoice> centre = choices;
    for (const KnobRange& r : ranges) {
      const auto at = std::find_if(centre.begin(), centre.end(), [&](const KnobChoice& c) { return c.type == r.type; });
      if (at == centre.end() || r.hi <= r.lo) continue;
      const int64_t stride = std::max<int64_t>(1, r.stride), own = at->value;
      // own +- stride, own +- 2 stride, ...: the nearest values first.
      for (int64_t d = 1; d <= kValuesPerKnob && budget_left(); ++d) {
        for (const int64_t v : {own - d * stride, own + d * stride}) {
          if (v < r.lo || v > r.hi || !budget_left()) continue;
          std::vector<KnobChoice> c = centre;
          c[static_cast<size_t>(at - centre.begin())].value = v;
          if (!tried.insert(key(c)).second) continue;
          ++attempts;
          std::vector<DescPtr> made_of;
          DescPtr cfg = make_config(src.graph(), engine, c, made_of);
          if (!cfg || !engine_info(*cfg, g).allowed) continue;
          PlanPtr p = src.build(cfg, made_of);
          if (!p) continue;
          ++timed;
          float ms = std::numeric_limits<float>::infinity();
          try {
            ms = time_plan(g, h, *p, x, w, y, scratch);
          } catch (const Error&) {
            (void)cudaGetLastError();
            continue;  // a combination the engine refuses at execution
          }
          report(engine, c, *p, ms);
          if (ms < best_ms) best_ms = ms, best = p, choices = c, moved = true;
        }
      }
    }
  }
}

// The fastest of the candidate plans (Note [cuDNN plans]); nullptr when none finalizes.
PlanPtr fastest_plan(const ConvGeometry& g, cudnnHandle_t h, void* x, void* w, void* y) {
  PlanSource src(g, h);
  const Dims5& out = g.pass == Pass::Forward ? g.y : (g.pass == Pass::BackwardData ? g.x : g.w);
  Tensor scratch;
  try {
    scratch = workspace(g.device, numel(out, g.dims) * static_cast<int64_t>(itemsize(g.dtype)));
  } catch (const Error&) {
    return src.next();  // no memory to time in: the heuristics' choice
  }
  // AMPGRAD_CUDNN_BENCHMARK_LOG=1: each candidate's engine, knobs, workspace and time on stderr.
  static const bool log = [] {
    const char* v = std::getenv("AMPGRAD_CUDNN_BENCHMARK_LOG");
    return v && *v && std::string(v) != "0";
  }();
  auto report = [&](int64_t engine, const std::vector<KnobChoice>& knobs, const Plan& p, float ms) {
    if (!log) return;
    std::fputs(fmt::format("cudnn benchmark: {} {} x [{}] w [{}]: engine {} knobs{}, workspace {} B, {:.4f} ms\n",
                           pass_name(g.pass), dtype_name(g.dtype), fmt::join(g.x.begin(), g.x.begin() + g.dims, ", "),
                           fmt::join(g.w.begin(), g.w.begin() + g.dims, ", "), engine, knobs_str(knobs), p.workspace,
                           ms)
                   .c_str(),
               stderr);
  };
  PlanPtr best, first;
  DescPtr best_cfg;
  float best_ms = std::numeric_limits<float>::infinity();
  int timed = 0;
  std::vector<KnobChoice> choices;
  std::vector<KnobRange> ranges;
  for (; timed < kMaxTimed; ++timed) {
    PlanPtr p = src.next();
    if (!p) break;
    if (!first) first = p;
    const float ms = time_plan(g, h, *p, x, w, y, ampgrad::detail::address(scratch));
    if (log) {
      try {
        knobs_of(*src.last_config(), choices, ranges);
      } catch (const Error&) {
        choices.clear();
      }
    }
    report(src.last_engine(), choices, *p, ms);
    if (ms < best_ms) best_ms = ms, best = p, best_cfg = src.last_config();
  }
  // The best configuration's neighbours (Note [cuDNN knobs]). Optional: anything that goes
  // wrong in it keeps the best plan so far.
  if (best_cfg) {
    try {
      sweep_knobs(g, h, src, *best_cfg, x, w, y, ampgrad::detail::address(scratch), timed, best, best_ms, report);
    } catch (const Error&) {
      (void)cudaGetLastError();  // a refused launch inside cuDNN must not be reported by the next kernel
    }
  }
  return best ? best : first;  // nothing fit in memory: the heuristics' choice, to fail clearly later
}

struct Entry {
  PlanPtr plan;     // nullptr: no engine supports the geometry
  std::string why;  // ... and why
};

struct PlanCache {
  std::mutex mu;
  std::map<std::pair<ConvGeometry, bool>, Entry> plans;  // (geometry, timed)
};
PlanCache& plan_cache() {
  static auto* cache = new PlanCache();  // leaked, like the handles the plans use
  return *cache;
}

bool lookup(const ConvGeometry& g, bool timed, Entry& e) {
  PlanCache& c = plan_cache();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.plans.find({g, timed});
  if (it == c.plans.end()) return false;
  e = it->second;
  return true;
}

// A cached plan is never replaced (Note [Call graphs] keys calls by its address): the first
// one stored for a geometry wins, and e becomes it.
void store(const ConvGeometry& g, bool timed, Entry& e) {
  PlanCache& c = plan_cache();
  std::lock_guard<std::mutex> lock(c.mu);
  e = c.plans.emplace(std::make_pair(g, timed), e).first->second;
}

Entry no_engine(const PlanSource& src) {
  return {nullptr, src.configs() == 0 ? "cuDNN's heuristics propose no engine with the required numerics"
                                      : fmt::format("none of the {} proposed engines builds a plan", src.configs())};
}

}  // namespace

std::vector<DescPtr> engine_configs(const Desc& graph, cudnnBackendHeurMode_t mode) {
  Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
  heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  if (cudnnBackendFinalize(heur.get()) != CUDNN_STATUS_SUCCESS) return {};
  int64_t count = 0;
  if (cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                               nullptr) != CUDNN_STATUS_SUCCESS)
    return {};
  std::vector<DescPtr> cfgs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    cfgs.push_back(std::make_shared<Desc>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    raw.push_back(cfgs.back()->get());
  }
  int64_t got = 0;
  AG_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                          count, &got, raw.data()));
  cfgs.resize(static_cast<size_t>(std::min(got, count)));
  return cfgs;
}

cudnnHandle_t handle(int device) {
  static auto* states = new std::array<HandleState, kMaxDevices>();  // never destroyed: plans use them
  AG_CHECK(device >= 0 && device < kMaxDevices, "cuda: device index {} out of range", device);
  HandleState& st = (*states)[static_cast<size_t>(device)];
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

const char* pass_name(Pass p) {
  switch (p) {
    case Pass::Forward: return "forward";
    case Pass::BackwardData: return "backward data";
    case Pass::BackwardFilter: return "backward filter";
  }
  return "?";
}

bool run_conv(const ConvGeometry& g, void* x, void* w, void* y, bool benchmark, std::string& why) {
  const cudnnHandle_t h = handle(g.device);
  Entry e;
  bool found = false;
  if (benchmark) {
    found = lookup(g, true, e);
    if (!found && !capturing(g.device)) {
      PlanPtr p = fastest_plan(g, h, x, w, y);
      e = p ? Entry{p, ""} : Entry{nullptr, "no cuDNN engine builds a plan for it"};
      store(g, true, e);
      found = true;
    }
  }
  if (!found && !lookup(g, false, e)) {
    PlanSource src(g, h);
    PlanPtr p = src.next();
    e = p ? Entry{p, ""} : no_engine(src);
    store(g, false, e);
  }
  if (!e.plan) {
    why = e.why;
    return false;
  }
  PlanPtr plan = e.plan;
  Tensor ws;
  if (plan->workspace > 0) {
    try {
      ws = workspace(g.device, plan->workspace);
    } catch (const Error& oom) {
      // Out of memory for this plan's workspace: the first plan that needs less and fits.
      PlanSource src(g, h);
      plan = nullptr;
      while (PlanPtr p = src.next()) {
        if (p->workspace >= e.plan->workspace) continue;
        try {
          if (p->workspace > 0) ws = workspace(g.device, p->workspace);
          plan = p;
          break;
        } catch (const Error&) {
        }
      }
      if (!plan) {
        why = oom.what();
        return false;
      }
    }
  }
  void* wsp = plan->workspace > 0 ? ampgrad::detail::address(ws) : nullptr;
  // A variant pack and cudnnBackendExecute cost more host time than a small convolution runs,
  // and a training loop repeats each call with the same pointers (Note [Call graphs]).
  // Only cached plans, which live as long as the process: a key's plan address must not be
  // reused by another plan (the out-of-memory fallback's plan is freed after the call).
  if (plan != e.plan) {
    submit_launches(g.device);  // the calls held back come first (Note [Launch batches])
    execute(h, *plan, x, w, y, wsp);
    return true;
  }
  cudaStream_t stream = launch_stream(g.device);
  CallKey call;
  call.add(uint64_t{2}).add(plan.get()).add(x).add(w).add(y).add(wsp).add(stream);
  run_call(g.device, stream, call, [&] { execute(h, *plan, x, w, y, wsp); });
  return true;
}

}  // namespace dnn
}  // namespace ampgrad::cuda
