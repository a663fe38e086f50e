// The device error records and their sites (Note [Device-side errors] in cuda/device_error.h).
#include <ampgrad/cuda/device_error.h>

#include <cuda_runtime_api.h>

#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <ampgrad/core/dispatch.h>
#include <ampgrad/core/shape.h>
#include <ampgrad/cuda/check.h>

namespace ampgrad::cuda {

namespace {
constexpr int kMaxDevices = 64;

struct Records {
  std::mutex mu;
  DeviceErrorRecord* host[kMaxDevices] = {};    // the host's view
  DeviceErrorRecord* device[kMaxDevices] = {};  // the device's address of the same memory
};
Records& records() {
  static auto* r = new Records();  // leaked: kernels may write after static destruction began
  return *r;
}

struct Site {
  std::string op, what, shapes;
};
struct KeyHash {
  size_t operator()(const std::vector<int64_t>& k) const {
    uint64_t h = 1469598103934665603ull;
    for (int64_t v : k) h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};
struct Sites {
  std::mutex mu;
  std::unordered_map<std::vector<int64_t>, int, KeyHash> ids;
  std::vector<Site> sites{Site{}};  // 0: no site
};
Sites& sites() {
  static auto* s = new Sites();
  return *s;
}
}  // namespace

DeviceErrorRecord* device_error_record(int device) {
  AG_CHECK(device >= 0 && device < kMaxDevices, "device error record: no device {}", device);
  Records& r = records();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.device[device] == nullptr) {
    DeviceGuard guard(device);
    void* host = nullptr;
    AG_CUDA_CHECK(cudaHostAlloc(&host, sizeof(DeviceErrorRecord), cudaHostAllocMapped));
    *static_cast<DeviceErrorRecord*>(host) = DeviceErrorRecord{};
    void* dev = nullptr;
    AG_CUDA_CHECK(cudaHostGetDevicePointer(&dev, host, 0));
    r.host[device] = static_cast<DeviceErrorRecord*>(host);
    r.device[device] = static_cast<DeviceErrorRecord*>(dev);
  }
  return r.device[device];
}

int error_site(std::string_view op, std::string_view what,
               std::initializer_list<std::pair<std::string_view, const Tensor*>> tensors) {
  // Inside an op (CurrentOp: the op being called, not the kernel's reshaped view of it), its
  // name and the shapes of its tensor arguments; else the kernel's.
  // In a backward formula's kernel (no op of its own): the op's backward, then the kernel's name.
  const bool in_op = !CurrentOp::name().empty() && CurrentOp::input_count() > 0;
  const std::string_view outer = in_op ? std::string_view() : CurrentOp::name();
  if (in_op) op = CurrentOp::name();
  // The key: the op's and the check's text (their addresses: literals), then every shape.
  std::vector<int64_t> key{reinterpret_cast<int64_t>(op.data()), reinterpret_cast<int64_t>(what.data()),
                           reinterpret_cast<int64_t>(outer.data()), CurrentOp::backward()};
  auto add_shape = [&](const Tensor& t) {
    key.push_back(t.dim());
    key.insert(key.end(), t.shape().begin(), t.shape().end());
  };
  if (in_op) {
    for (size_t i = 0; i < CurrentOp::input_count(); ++i)
      if (CurrentOp::inputs()[i]->defined()) add_shape(*CurrentOp::inputs()[i]);
  } else {
    for (const auto& [name, t] : tensors) add_shape(*t);
  }
  Sites& s = sites();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.ids.find(key);
  if (it != s.ids.end()) return it->second;
  std::string shapes;
  if (in_op) {
    shapes = "inputs";
    for (size_t i = 0; i < CurrentOp::input_count(); ++i)
      if (CurrentOp::inputs()[i]->defined())
        shapes += fmt::format("{} {}", i == 0 ? "" : ",", shape_str(CurrentOp::inputs()[i]->shape()));
  } else {
    for (const auto& [name, t] : tensors)
      shapes += fmt::format("{}{} {}", shapes.empty() ? "" : ", ", name, shape_str(t->shape()));
  }
  const int id = static_cast<int>(s.sites.size());
  const std::string name =
      outer.empty() ? std::string(op) : fmt::format("{} ({})", CurrentOp::label(outer, CurrentOp::backward()), op);
  s.sites.push_back({name, std::string(what), std::move(shapes)});
  s.ids.emplace(std::move(key), id);
  return id;
}

void check_device_errors(int device) {
  if (device < 0 || device >= kMaxDevices) return;
  Records& r = records();
  volatile DeviceErrorRecord* rec = r.host[device];  // written by the device
  if (rec == nullptr || rec->flag == 0) return;
  const DeviceErrorRecord got{rec->flag, rec->site, rec->value, rec->position, rec->low, rec->high};
  rec->flag = 0;  // cleared: the next violation is recorded afresh
  Site site;
  {
    Sites& s = sites();
    std::lock_guard<std::mutex> lock(s.mu);
    if (got.site > 0 && got.site < static_cast<int>(s.sites.size())) site = s.sites[static_cast<size_t>(got.site)];
  }
  throw Error(fmt::format("{}: {} {} is out of range [{}, {}) at position {} of the {} ({}; on cuda:{}, found by the "
                          "device and reported at this synchronization; AMPGRAD_SYNC_DEBUG=1 reports it at the op)",
                          site.op, site.what, got.value, got.low, got.high, got.position, site.what, site.shapes,
                          device));
}

}  // namespace ampgrad::cuda
