// Working copies kept across autocast regions (Note [Working copies] in speedups/working_copies.h).
#include <ampgrad/speedups/working_copies.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>

#include <ampgrad/autograd/grad_mode.h>
#include <ampgrad/core/capture.h>
#include <ampgrad/core/device_hooks.h>
#include <ampgrad/speedups/speedups.h>
#include <ampgrad/speedups/state.h>

namespace ampgrad::speedups {

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

uint64_t replays() { return graph_replays(DeviceType::CUDA); }

// The kept copies a captured step read instead of casting, which its graph keeps (Note
// [Working copies], Note [Capture attachments] in core/capture.h). The graph's own replays
// write a parameter and its copy together, as the eager step does. Before each replay a copy
// is cast again into the same memory when its parameter may have moved without it: its version
// changed (an eager step, an in-place change), another graph's replay wrote the parameter (the
// registry counts the replays that write each parameter), or this graph writes the parameter
// but could not write the copy (a graph still held it when the captured step ran).
class CapturedCopies final : public CaptureAttachment {
 public:
  struct Use {
    Tensor param;                      // kept alive: the graph reads its memory
    std::shared_ptr<Storage> storage;  // the memory it had at the capture, kept for the graph
    Tensor copy;
    uint32_t version;
    uint64_t writes = 0;       // the parameter's graph writes after this graph's last replay
    bool cast_always = false;  // this graph writes the parameter but not the copy
  };
  explicit CapturedCopies(uint64_t capture) : capture(capture) {}
  void before_replay() override;

  const uint64_t capture;
  // Written while the capture records, under the registry's mutex: the copies the forward read,
  // and the parameters the captured optimizer step wrote.
  std::vector<Use> uses;
  std::vector<Tensor> written;
};

struct Registry {
  std::mutex mu;
  std::unordered_map<const TensorImpl*, std::vector<Entry>> entries;
  // The copies of the capture recording now, by device index (weak: its graph holds them).
  std::unordered_map<int, std::weak_ptr<CapturedCopies>> captured;
  // How many graph replays have written each parameter (CapturedCopies::written).
  std::unordered_map<const TensorImpl*, uint64_t> graph_writes;
};

Registry& registry() {
  static auto* r = new Registry();  // leaked: parameters may be destroyed during exit
  return *r;
}

void CapturedCopies::before_replay() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  NoGradGuard no_grad;
  for (Use& u : uses) {
    // A parameter given new memory since: the graph still reads the old, and its copy with it.
    if (u.param.storage() != u.storage) continue;
    const uint64_t w = r.graph_writes[u.param.unsafe_impl()];
    if (!u.cast_always && u.param.version() == u.version && w == u.writes) continue;
    u.copy.copy_(u.param);
    u.version = u.param.version();
  }
  for (const Tensor& p : written) ++r.graph_writes[p.unsafe_impl()];  // this replay's writes
  for (Use& u : uses) u.writes = r.graph_writes[u.param.unsafe_impl()];
}

// The capture recording param's device now, or null: its record of copies, made and attached
// at the first one served. Under the registry's mutex.
CapturedCopies* captured_copies(Registry& r, const Tensor& param) {
  const uint64_t id = capture_id(param.device());
  if (id == 0) return nullptr;
  std::shared_ptr<CapturedCopies> c = r.captured[param.device().index].lock();
  if (!c || c->capture != id) {
    c = std::make_shared<CapturedCopies>(id);
    attach_to_capture(param.device(), c);
    r.captured[param.device().index] = c;
  }
  return c.get();
}

// While a CUDA graph captures, no copy is made and kept: one made inside the graph would live
// in graph memory. Copies kept from before the capture are served and written, and recorded
// with the graph (CapturedCopies).
bool capturing(const Tensor& t) { return graph_capturing(t.device()); }

bool captured_use(const CapturedCopies* c, const Tensor& copy) {
  for (const CapturedCopies::Use& u : c->uses)
    if (u.copy.is_same(copy)) return true;
  return false;
}

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
  if (!detail::switches().working_copies) return {};
  const uint64_t now = replays();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.entries.find(param.unsafe_impl());
  if (it == r.entries.end()) return {};
  for (const Entry& e : it->second)
    if (e.copy.dtype() == dtype && current(e, param, now)) {
      if (CapturedCopies* c = captured_copies(r, param); c && !captured_use(c, e.copy))
        c->uses.push_back({param, param.storage(), e.copy, param.version(), r.graph_writes[param.unsafe_impl()]});
      return e.copy;
    }
  return {};
}

void keep_working_copy(const Tensor& param, const Tensor& copy) {
  Registry& r = registry();
  if (!detail::switches().working_copies || capturing(param)) return;
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
  if (!detail::switches().working_copies || params.empty()) return out;
  const uint64_t now = replays();
  std::lock_guard<std::mutex> lock(r.mu);
  // A captured step writes only the copies its forward read, which its graph keeps.
  CapturedCopies* capture = capturing(params[0]) ? captured_copies(r, params[0]) : nullptr;
  if (capturing(params[0]) && capture == nullptr) return out;
  purge_dead(r);  // once per optimizer step: copies of freed parameters go now
  for (size_t i = 0; i < params.size(); ++i) {
    auto it = r.entries.find(params[i].unsafe_impl());
    if (it == r.entries.end()) continue;
    for (const Entry& e : it->second)
      // A copy that a live graph (or an open autocast region) still holds is not written in
      // place: that graph's backward would find it changed. It goes stale instead, and the
      // next cast makes a new one.
      if (current(e, params[i], now) && e.copy.storage().use_count() == 1 &&
          (capture == nullptr || captured_use(capture, e.copy))) {
        out[i] = e.copy;
        break;
      }
  }
  return out;
}

void working_copies_written(const std::vector<Tensor>& params, const std::vector<Tensor>& copies) {
  if (copies.empty() && (params.empty() || !capturing(params[0]))) return;  // an eager step without copies
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (size_t i = 0; i < params.size() && i < copies.size(); ++i) {
    if (!copies[i].defined()) continue;
    auto it = r.entries.find(params[i].unsafe_impl());
    if (it == r.entries.end()) continue;
    for (Entry& e : it->second)
      if (e.copy.is_same(copies[i])) e.version = params[i].version();
  }
  // A captured step's write: the graph's record follows. Its replays write these parameters,
  // and each copy of theirs it read either with them or (not written here) not at all.
  if (params.empty() || !capturing(params[0])) return;
  CapturedCopies* capture = captured_copies(r, params[0]);
  if (capture == nullptr) return;
  for (size_t i = 0; i < params.size(); ++i) {
    capture->written.push_back(params[i]);
    const bool with_copy = i < copies.size() && copies[i].defined();
    for (CapturedCopies::Use& u : capture->uses) {
      if (!u.param.is_same(params[i])) continue;
      if (with_copy && u.copy.is_same(copies[i])) u.version = params[i].version();
      else u.cast_always = true;
    }
  }
}

}  // namespace detail

}  // namespace ampgrad::speedups
