// Working copies kept across autocast regions (Note [Working copies] in amp/working_copy.h).
#include "amp/working_copy.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace ampgrad::amp {

namespace {

struct Entry {
  std::weak_ptr<TensorImpl> owner;  // expired: the parameter is gone (its address may be reused)
  Tensor copy;
  uint32_t version = 0;  // the parameter's version that `copy` holds
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

// The live entries of `param` (creating the slot), dropping those of a dead parameter.
std::vector<Entry>& slot(Registry& r, const Tensor& param) {
  std::vector<Entry>& es = r.entries[param.unsafe_impl()];
  if (!es.empty() && es.front().owner.lock() != param.impl_ptr()) es.clear();
  return es;
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
  int64_t n = 0;
  for (const auto& [impl, es] : r.entries)
    if (!es.empty() && !es.front().owner.expired()) n += static_cast<int64_t>(es.size());
  return n;
}

namespace detail {

Tensor current_working_copy(const Tensor& param, DType dtype) {
  Registry& r = registry();
  if (!r.keep.load()) return {};
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.entries.find(param.unsafe_impl());
  if (it == r.entries.end() || it->second.empty() || it->second.front().owner.lock() != param.impl_ptr()) return {};
  for (const Entry& e : it->second)
    if (e.copy.dtype() == dtype && e.version == param.version()) return e.copy;
  return {};
}

void keep_working_copy(const Tensor& param, const Tensor& copy) {
  Registry& r = registry();
  if (!r.keep.load()) return;
  std::lock_guard<std::mutex> lock(r.mu);
  // A new parameter: first drop the slots of parameters that are gone.
  if (r.entries.find(param.unsafe_impl()) == r.entries.end()) {
    for (auto it = r.entries.begin(); it != r.entries.end();) {
      if (it->second.empty() || it->second.front().owner.expired()) it = r.entries.erase(it);
      else ++it;
    }
  }
  std::vector<Entry>& es = slot(r, param);
  for (Entry& e : es)
    if (e.copy.dtype() == copy.dtype()) {
      e.copy = copy;
      e.version = param.version();
      return;
    }
  es.push_back({param.impl_ptr(), copy, param.version()});
}

std::vector<Tensor> current_working_copies(const std::vector<Tensor>& params) {
  std::vector<Tensor> out(params.size());
  Registry& r = registry();
  if (!r.keep.load()) return out;
  std::lock_guard<std::mutex> lock(r.mu);
  for (size_t i = 0; i < params.size(); ++i) {
    auto it = r.entries.find(params[i].unsafe_impl());
    if (it == r.entries.end() || it->second.empty() || it->second.front().owner.lock() != params[i].impl_ptr())
      continue;
    for (const Entry& e : it->second)
      if (e.version == params[i].version()) {
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
