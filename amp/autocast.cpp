// Autocast state, guard, policy and cast cache (Note [Autocast] in amp/autocast.h).
#include <ampgrad/amp/autocast.h>
#include <ampgrad/amp/policy.h>

#include <unordered_map>

#include <ampgrad/amp/cast_reuse.h>
#include <ampgrad/amp/fp8.h>
#include <ampgrad/amp/trace.h>
#include <ampgrad/core/device_hooks.h>
#include <ampgrad/ops/op.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad::amp {

namespace {

struct State {
  bool enabled[2] = {false, false};
  DType dtype[2] = {DType::BFloat16, DType::Float16};  // CPU, CUDA
  Fp8Recipe* fp8[2] = {nullptr, nullptr};             // FP8 autocast's recipe, where enabled
  int depth = 0;  // enabled regions currently open
  Trace* trace = nullptr;
  struct Key {
    const TensorImpl* impl;
    DType dtype;
    bool operator==(const Key& o) const { return impl == o.impl && dtype == o.dtype; }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const { return std::hash<const void*>()(k.impl) ^ static_cast<size_t>(k.dtype); }
  };
  // Holds the source alive too, so a key's address cannot be reused while cached.
  std::unordered_map<Key, std::pair<Tensor, Tensor>, KeyHash> cache;
  CastCacheStats stats;
};

thread_local State t_state;

int idx(DeviceType t) { return static_cast<int>(t); }

// Note [Cast cache]
// As PyTorch's cached_cast: inside the outermost enabled region, a float32 leaf that requires
// grad (a parameter) is cast once per dtype and that cast is reused by every op of the region
// (a weight used twice, an RNN's weights at every time step); anything else is cast at each use.
// The region's end empties the cache. Before casting, a cast made outside the region may serve
// (Note [Cast reuse] in amp/cast_reuse.h: a parameter's copy the optimizer wrote, an op's ready
// cast). While a CUDA graph captures, the cache is neither read nor written: a cast made before
// the capture may be freed under the graph, and one made in it holds nothing until it replays.
Tensor cached_cast(const Tensor& t, DType dtype, OpRecord* rec) {
  State& s = t_state;
  const bool cacheable = t.is_leaf() && t.requires_grad() && t.dtype() == DType::Float32 && s.depth > 0 &&
                         !graph_capturing(t.device());
  const State::Key key{t.unsafe_impl(), dtype};
  if (cacheable) {
    if (auto it = s.cache.find(key); it != s.cache.end()) {
      ++s.stats.hits;
      if (rec) ++rec->cache_hits;
      return it->second.second;
    }
  }
  Tensor c = reusable_cast(t, dtype);
  if (c.defined()) {
    ++s.stats.hits;
    ++s.stats.reused;
    if (rec) ++rec->cache_hits;
  } else {
    c = to(t, t.device(), dtype);
    const int64_t bytes = static_cast<int64_t>(c.nbytes());
    s.stats.bytes_converted += bytes;
    if (rec) {
      ++rec->casts;
      rec->bytes_converted += bytes;
    }
    if (cacheable) {
      ++s.stats.misses;
      cast_made(t, c);
    }
  }
  if (cacheable) s.cache.emplace(key, std::make_pair(t, c));
  return c;
}

}  // namespace

bool is_autocast_enabled(DeviceType type) { return t_state.enabled[idx(type)]; }
DType get_autocast_dtype(DeviceType type) { return t_state.dtype[idx(type)]; }
Fp8Recipe* get_autocast_fp8_recipe(DeviceType type) {
  return t_state.enabled[idx(type)] ? t_state.fp8[idx(type)] : nullptr;
}

const std::vector<std::string_view>& fp8_gemm_ops() {
  static const std::vector<std::string_view> ops{"addmm", "bmm", "linear", "linear_gelu", "linear_relu", "matmul", "mm"};
  return ops;
}

namespace {
bool runs_fp8(std::string_view op) {
  for (std::string_view n : fp8_gemm_ops())
    if (n == op) return true;
  return false;
}
}  // namespace

AutocastGuard::AutocastGuard(DeviceType type, std::optional<DType> dtype, bool enabled)
    : type_(type),
      prev_enabled_(t_state.enabled[idx(type)]),
      prev_dtype_(t_state.dtype[idx(type)]),
      prev_fp8_(t_state.fp8[idx(type)]) {
  DType d = dtype.value_or(type == DeviceType::CUDA ? DType::Float16 : DType::BFloat16);
  AG_CHECK(!is_float8(d), "AutocastGuard: FP8 autocast needs a scaling recipe: AutocastGuard(device, {}, recipe) "
           "with an amp::Fp8Recipe (Note [FP8 autocast])", dtype_name(d));
  AG_CHECK(d == DType::Float16 || d == DType::BFloat16,
           "AutocastGuard: autocast dtype must be float16 or bfloat16, got {}", dtype_name(d));
  t_state.fp8[idx(type)] = nullptr;
  if (enabled) {
    if (t_state.depth++ == 0) {
      t_state.cache.clear();
      t_state.stats = {};
    }
  }
  t_state.enabled[idx(type)] = enabled;
  t_state.dtype[idx(type)] = d;
  enabled_region_ = enabled;
}

AutocastGuard::AutocastGuard(DeviceType type, DType dtype, Fp8Recipe& recipe, bool enabled)
    : type_(type),
      prev_enabled_(t_state.enabled[idx(type)]),
      prev_dtype_(t_state.dtype[idx(type)]),
      prev_fp8_(t_state.fp8[idx(type)]) {
  AG_CHECK(dtype == recipe.dtype(Fp8Role::input),
           "AutocastGuard: FP8 autocast's dtype is the forward's format, {} (the recipe's fp8_format picks the "
           "gradients'), got {}",
           dtype_name(recipe.dtype(Fp8Role::input)), dtype_name(dtype));
  if (enabled) {
    if (t_state.depth++ == 0) {
      t_state.cache.clear();
      t_state.stats = {};
    }
    // Once per step: the amaxes recorded since the last region (its forward and backward) go
    // into the histories and the scales follow (Note [FP8 scaling]).
    if (!(prev_enabled_ && prev_fp8_ == &recipe)) recipe.update();
  }
  t_state.enabled[idx(type)] = enabled;
  t_state.dtype[idx(type)] = DType::BFloat16;
  t_state.fp8[idx(type)] = enabled ? &recipe : nullptr;
  enabled_region_ = enabled;
}

AutocastGuard::~AutocastGuard() {
  t_state.enabled[idx(type_)] = prev_enabled_;
  t_state.dtype[idx(type_)] = prev_dtype_;
  t_state.fp8[idx(type_)] = prev_fp8_;
  if (enabled_region_ && --t_state.depth == 0) t_state.cache.clear();
}

AutocastSuspend::AutocastSuspend() : prev_{t_state.enabled[0], t_state.enabled[1]} {
  t_state.enabled[0] = t_state.enabled[1] = false;
}
AutocastSuspend::~AutocastSuspend() {
  t_state.enabled[0] = prev_[0];
  t_state.enabled[1] = prev_[1];
}

namespace {
CastReuse* g_reuse = nullptr;
}  // namespace

void set_cast_reuse(CastReuse* reuse) { g_reuse = reuse; }

Tensor reusable_cast(const Tensor& t, DType dtype) { return g_reuse ? g_reuse->find(t, dtype) : Tensor(); }

void cast_made(const Tensor& t, const Tensor& cast) {
  if (g_reuse) g_reuse->made(t, cast);
}

std::optional<DType> ready_cast_dtype(Device device) {
  const int i = idx(device.type);
  if (!g_reuse || !t_state.enabled[i] || !g_reuse->wants_ready_casts(device, t_state.dtype[i]))
    return std::nullopt;
  return t_state.dtype[i];
}

void offer_ready_cast(const Tensor& source, const Tensor& low) {
  if (g_reuse) g_reuse->offer(source, low);
}

std::vector<Tensor> copies_to_write(const std::vector<Tensor>& params) {
  return g_reuse ? g_reuse->copies_to_write(params) : std::vector<Tensor>(params.size());
}

void copies_written(const std::vector<Tensor>& params, const std::vector<Tensor>& copies) {
  if (g_reuse) g_reuse->copies_written(params, copies);
}

CastCacheStats cast_cache_stats() {
  CastCacheStats s = t_state.stats;
  s.entries = static_cast<int64_t>(t_state.cache.size());
  return s;
}

void clear_cast_cache() { t_state.cache.clear(); }

Trace::Trace() : prev_(t_state.trace) { t_state.trace = this; }
Trace::~Trace() { t_state.trace = prev_; }

// Appends to a Trace (its friend: the records are private to it).
class TraceWriter {
 public:
  static void push(Trace& t, OpRecord&& rec) { t.records_.push_back(std::move(rec)); }
};

namespace detail {

bool policy_active() { return t_state.enabled[0] || t_state.enabled[1] || t_state.trace != nullptr; }
bool tracing() { return t_state.trace != nullptr; }
void trace_push(OpRecord&& rec) {
  if (t_state.trace) TraceWriter::push(*t_state.trace, std::move(rec));
}

std::optional<DType> apply_policy(const OpInfo& op, Tensor* const* inputs, size_t n, OpRecord* rec) {
  const Tensor* first = nullptr;
  for (size_t i = 0; i < n; ++i)
    if (inputs[i]->defined()) {
      first = inputs[i];
      break;
    }
  if (rec) {
    rec->op = op.name;
    rec->category = op.category;
    for (size_t i = 0; i < n; ++i)
      if (inputs[i]->defined()) rec->input_dtypes.push_back(inputs[i]->dtype());
  }
  if (!first) return std::nullopt;
  const DeviceType dev = first->device().type;
  if (!t_state.enabled[idx(dev)]) return std::nullopt;
  const DType ac = t_state.dtype[idx(dev)];
  auto castable = [&](const Tensor& t) {
    return t.defined() && t.device().type == dev && is_floating(t.dtype()) && t.dtype() != DType::Float64;
  };
  std::optional<DType> target;
  switch (op.category) {
    case Category::passthrough: return std::nullopt;
    case Category::banned:
      AG_CHECK(ac != DType::Float16,
               "{}: unsafe to autocast to float16 (the result can overflow or lose precision); use {} instead, "
               "or run {} with autocast disabled (AutocastGuard(device, std::nullopt, false))",
               op.name, op.alternative, op.name);
      return std::nullopt;
    case Category::lower:
      // FP8 autocast: the GEMM ops quantize their inputs themselves (Note [FP8 autocast]).
      if (Fp8Recipe* r = t_state.fp8[idx(dev)]; r && runs_fp8(op.name)) {
        const DType f8 = r->dtype(Fp8Role::input);
        if (rec) rec->chosen_dtype = f8;
        return f8;
      }
      target = ac;
      break;
    case Category::fp32: target = DType::Float32; break;
    case Category::promote: {
      std::optional<DType> widest;
      for (size_t i = 0; i < n; ++i) {
        const Tensor& t = *inputs[i];
        if (!t.defined() || !is_floating(t.dtype())) continue;
        widest = widest ? promote_types(*widest, t.dtype()) : t.dtype();
      }
      target = widest;
      break;
    }
  }
  if (!target) return std::nullopt;
  if (rec) rec->chosen_dtype = target;
  for (size_t i = 0; i < n; ++i) {
    Tensor& t = *inputs[i];
    if (!castable(t) || t.dtype() == *target) continue;
    if (op.reads_16bit && *target == DType::Float32 && is_reduced_float(t.dtype())) {
      if (rec) ++rec->read_16bit;
      continue;
    }
    t = cached_cast(t, *target, rec);
  }
  return target;
}

void cast_inputs(Tensor* const* inputs, size_t n, DType dtype, OpRecord* rec) {
  if (rec) rec->chosen_dtype = dtype;
  for (size_t i = 0; i < n; ++i) {
    Tensor& t = *inputs[i];
    if (!t.defined() || !is_floating(t.dtype()) || t.dtype() == DType::Float64 || t.dtype() == dtype) continue;
    t = cached_cast(t, dtype, rec);
  }
}

}  // namespace detail

}  // namespace ampgrad::amp
