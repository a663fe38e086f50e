// FP8 scaling recipes and their device state (Note [FP8 scaling] in amp/fp8.h).
#include <ampgrad/amp/fp8.h>

#include <array>

#include <ampgrad/core/device_hooks.h>
#include <ampgrad/core/float8.h>
#include <ampgrad/core/float8_kernels.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad::amp {

namespace {
constexpr int64_t kSlabTensors = 256;  // tensors per update kernel; a slab never moves once made
}

// Device buffers for up to kSlabTensors tensors' state: made whole, filled once, never moved,
// so the views handed out (and captured graphs' pointers) stay valid.
struct Fp8Recipe::Slab {
  Device device;
  Tensor amax, history, pos, fp8_max, scale, scale_inv, counts;
  int64_t used = 0;
};

struct Fp8Recipe::Entry {
  std::weak_ptr<TensorImpl> parameter;
  const TensorImpl* key = nullptr;
  Fp8Role role = Fp8Role::input;
  size_t slab = 0;
  int64_t slot = 0;
  detail::Fp8Meta meta;
};

std::string_view fp8_role_name(Fp8Role r) {
  switch (r) {
    case Fp8Role::input: return "input";
    case Fp8Role::weight: return "weight";
    case Fp8Role::grad_output: return "grad_output";
  }
  return "?";
}

Fp8Recipe::Fp8Recipe(DelayedScaling config) : delayed_(true), config_(config) {
  AG_CHECK(config.amax_history_len >= 1 && config.amax_history_len <= (int64_t{1} << 20),
           "DelayedScaling: amax_history_len must be in [1, 2^20], got {}", config.amax_history_len);
  AG_CHECK(config.margin >= -64 && config.margin <= 64, "DelayedScaling: margin must be in [-64, 64], got {}",
           config.margin);
}

Fp8Recipe::Fp8Recipe(CurrentScaling config)
    : delayed_(false), config_{config.margin, config.fp8_format, 1, AmaxComputeAlgo::most_recent} {
  AG_CHECK(config.margin >= -64 && config.margin <= 64, "CurrentScaling: margin must be in [-64, 64], got {}",
           config.margin);
}

Fp8Recipe::~Fp8Recipe() = default;

DType Fp8Recipe::dtype(Fp8Role role) const {
  return role == Fp8Role::grad_output && config_.fp8_format == Fp8Format::HYBRID ? kFloat8_e5m2 : kFloat8_e4m3fn;
}

float Fp8Recipe::fp8_max(Fp8Role role) const {
  return dtype(role) == kFloat8_e5m2 ? static_cast<float>(Float8_e5m2::from_bits(ampgrad::detail::E5M2::kMaxFinite))
                                     : static_cast<float>(Float8_e4m3fn::from_bits(ampgrad::detail::E4M3FN::kMaxFinite));
}

int64_t Fp8Recipe::num_tensors() const { return static_cast<int64_t>(entries_.size()); }

detail::Fp8Meta& Fp8Recipe::meta(const Tensor& parameter, Fp8Role role) {
  const TensorImpl* key = parameter.unsafe_impl();
  for (const auto& e : entries_)
    if (e->key == key && e->role == role && !e->parameter.expired()) return e->meta;
  const Device device = parameter.device();
  AG_CHECK(!graph_capturing(device),
           "FP8 autocast: {}'s {} scale is new during a CUDA graph capture; run the step once before capturing it, "
           "so that its FP8 state exists (Note [FP8 scaling])",
           parameter.desc(), fp8_role_name(role));
  size_t si = slabs_.size();
  for (size_t i = 0; i < slabs_.size(); ++i)
    if (slabs_[i]->device == device && slabs_[i]->used < kSlabTensors) si = i;
  if (si == slabs_.size()) {
    auto s = std::make_unique<Slab>();
    s->device = device;
    const TensorOptions f32 = TensorOptions(kFloat32).device(device);
    s->amax = zeros({kSlabTensors}, f32);
    s->history = zeros({kSlabTensors, config_.amax_history_len}, f32);
    s->pos = zeros({kSlabTensors}, TensorOptions(kInt32).device(device));
    s->fp8_max = full({kSlabTensors}, 448.0, f32);
    s->scale = ones({kSlabTensors}, f32);
    s->scale_inv = ones({kSlabTensors}, f32);
    s->counts = zeros({kSlabTensors, 2}, TensorOptions(kInt64).device(device));
    slabs_.push_back(std::move(s));
  }
  Slab& s = *slabs_[si];
  const int64_t slot = s.used++;
  auto ep = std::make_unique<Entry>();
  Entry& e = *ep;
  e.parameter = parameter.weak_impl();
  e.key = key;
  e.role = role;
  e.slab = si;
  e.slot = slot;
  e.meta.amax = s.amax.slice(0, slot, slot + 1);
  e.meta.scale = s.scale.slice(0, slot, slot + 1);
  e.meta.counts = s.counts.select(0, slot);
  e.meta.dtype = dtype(role);
  e.meta.fp8_max = fp8_max(role);
  s.fp8_max.slice(0, slot, slot + 1).fill_(e.meta.fp8_max);
  entries_.push_back(std::move(ep));
  return e.meta;
}

void Fp8Recipe::update() {
  if (!delayed_) return;
  for (const auto& s : slabs_) {
    kernel::Fp8Update u{s->amax, s->history, s->pos, s->fp8_max, s->scale, s->scale_inv, s->used, config_.margin,
                        config_.amax_compute_algo == AmaxComputeAlgo::most_recent};
    kernel::fp8_update_scales(s->device, u);
  }
}

std::vector<Fp8TensorStats> Fp8Recipe::stats() const {
  std::vector<Fp8TensorStats> out;
  std::vector<std::array<Tensor, 4>> host(slabs_.size());
  for (size_t i = 0; i < slabs_.size(); ++i) {
    const Slab& s = *slabs_[i];
    host[i] = {s.amax.cpu(), max(s.history, 1).first.cpu(), s.scale.cpu(), s.counts.cpu()};
  }
  for (const auto& ep : entries_) {
    const Entry& e = *ep;
    if (e.parameter.expired()) continue;
    const auto& h = host[e.slab];
    Fp8TensorStats st;
    st.parameter = e.key;
    st.role = e.role;
    st.dtype = e.meta.dtype;
    st.amax = h[0].data_ptr<float>()[e.slot];
    st.history_max = h[1].data_ptr<float>()[e.slot];
    st.scale = h[2].data_ptr<float>()[e.slot];
    st.quantized = e.meta.quantized;
    st.saturated = h[3].data_ptr<int64_t>()[2 * e.slot];
    st.flushed = h[3].data_ptr<int64_t>()[2 * e.slot + 1];
    out.push_back(st);
  }
  return out;
}

}  // namespace ampgrad::amp
