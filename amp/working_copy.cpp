// Working copies kept across autocast regions (Note [Working copies] in amp/working_copy.h).
#include <ampgrad/amp/working_copy_detail.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>

#include <ampgrad/core/device_hooks.h>

namespace ampgrad::amp {

namespace {

// What a copy was made from: the parameter object, its memory, geometry and version, and
// how many graph replays had run (a replay writes parameters with no version bump).
struct Entry {
  std::weak_ptr<TensorImpl> owner;    // expired: the parameter is gone (its address may be reused)
  std::weak_ptr<Storage> storage;     // set_data and Module::to give a parameter new memory
  Tensor copy;
  uint32_t version = 0;
  uint64_t replays = 0;
};

struct Registry {
  std::mutex mu;
  std::unordered_map<const TensorImpl*, std::vector<Entry>> entries;
  std::atomic<bool> keep{true};
};

Registry& registry() {
  static auto* r = new Registry();  // leaked: parameters may be destroyed during exit
  return *r;
}

uint64_t replays() { return graph_replays(DeviceType::CUDA); }

// While a CUDA graph captures, copies are neither served, kept nor written: a captured step
// casts inside the graph, as it would without kept copies, so its replays never read a copy
// that eager code changes behind them, and no copy lives in graph memory.
bool capturing(const Tensor& t) { return graph_capturing(t.device()); }

// Whether e still holds param's values: same object, memory, shape and version, no replay since.
bool current(const Entry& e, const Tensor& param, uint64_t now) {
  return e.version == param.version() && e.replays == now && e.owner.lock() == param.impl_ptr() &&
         e.storage.lock() == param.storage() && e.copy.shape() == param.shape() &&
         e.copy.device() == param.device();
}

void purge_dead(Registry& r) {
  for (auto it = r.entries.begin(); it != r.entries.end();) {
    if (it->second.empty() || it->second.front().owner.expired()) it = r.entries.erase(it);
    else ++it;
  }
}

}  // namespace

bool keep_working_copies() { return registry().keep.load(); }

void set_keep_working_copies(bool on) {
  registry().keep.store(on);
  if (!on) clear_working_copies();
}

void clear_working_copies() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.entries.clear();
}

int64_t working_copy_count() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  purge_dead(r);
  int64_t n = 0;
  for (const auto& [impl, es] : r.entries) n += static_cast<int64_t>(es.size());
  return n;
}

namespace detail {

Tensor current_working_copy(const Tensor& param, DType dtype) {
  Registry& r = registry();
  if (!r.keep.load() || capturing(param)) return {};
  const uint64_t now = replays();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.entries.find(param.unsafe_impl());
  if (it == r.entries.end()) return {};
  for (const Entry& e : it->second)
    if (e.copy.dtype() == dtype && current(e, param, now)) return e.copy;
  return {};
}

void keep_working_copy(const Tensor& param, const Tensor& copy) {
  Registry& r = registry();
  if (!r.keep.load() || capturing(param)) return;
  const uint64_t now = replays();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.entries.find(param.unsafe_impl()) == r.entries.end()) purge_dead(r);  // a new parameter
  std::vector<Entry>& es = r.entries[param.unsafe_impl()];
  if (!es.empty() && es.front().owner.lock() != param.impl_ptr()) es.clear();  // a dead one's slot
  Entry fresh{param.impl_ptr(), param.storage(), copy, param.version(), now};
  for (Entry& e : es)
    if (e.copy.dtype() == copy.dtype()) {
      e = std::move(fresh);
      return;
    }
  es.push_back(std::move(fresh));
}

std::vector<Tensor> current_working_copies(const std::vector<Tensor>& params) {
  std::vector<Tensor> out(params.size());
  Registry& r = registry();
  if (!r.keep.load() || params.empty() || capturing(params[0])) return out;
  const uint64_t now = replays();
  std::lock_guard<std::mutex> lock(r.mu);
  purge_dead(r);  // once per optimizer step: copies of freed parameters go now
  for (size_t i = 0; i < params.size(); ++i) {
    auto it = r.entries.find(params[i].unsafe_impl());
    if (it == r.entries.end()) continue;
    for (const Entry& e : it->second)
      // A copy that a live graph (or an open autocast region) still holds is not written in
      // place: that graph's backward would find it changed. It goes stale instead, and the
      // next cast makes a new one.
      if (current(e, params[i], now) && e.copy.storage().use_count() == 1) {
        out[i] = e.copy;
        break;
      }
  }
  return out;
}

void working_copies_written(const std::vector<Tensor>& params, const std::vector<Tensor>& copies) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (size_t i = 0; i < params.size() && i < copies.size(); ++i) {
    if (!copies[i].defined()) continue;
    auto it = r.entries.find(params[i].unsafe_impl());
    if (it == r.entries.end()) continue;
    for (Entry& e : it->second)
      if (e.copy.is_same(copies[i])) e.version = params[i].version();
  }
}

}  // namespace detail

}  // namespace ampgrad::amp
