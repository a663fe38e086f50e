// The capture hooks' table (Note [Capture attachments] in core/capture.h).
#include <ampgrad/core/capture.h>

#include <ampgrad/core/error.h>

namespace ampgrad {

namespace {
CaptureHooks& hooks_of(DeviceType type) {
  static CaptureHooks table[2];  // CPU, CUDA; written while the library loads, read after
  return table[type == DeviceType::CUDA ? 1 : 0];
}
}  // namespace

void set_capture_hooks(DeviceType type, const CaptureHooks& hooks) { hooks_of(type) = hooks; }

uint64_t capture_id(Device device) {
  auto* f = hooks_of(device.type).capture_id;
  return f != nullptr ? f(device.index) : 0;
}

void attach_to_capture(Device device, std::shared_ptr<CaptureAttachment> a) {
  auto* f = hooks_of(device.type).attach;
  AG_CHECK(f != nullptr && capture_id(device) != 0, "attach_to_capture: no graph is capturing {}", device.str());
  f(device.index, std::move(a));
}

}  // namespace ampgrad
