// The table of device hooks (Note [Device hooks] in core/device_hooks.h).
#include <ampgrad/core/device_hooks.h>

#include <initializer_list>

namespace ampgrad {

namespace {
DeviceHooks& hooks_of(DeviceType type) {
  static DeviceHooks table[2];  // CPU, CUDA; written while the library loads, read after
  return table[type == DeviceType::CUDA ? 1 : 0];
}
}  // namespace

void set_device_hooks(DeviceType type, const DeviceHooks& hooks) { hooks_of(type) = hooks; }

void end_phase(Device device) {
  if (auto* f = hooks_of(device.type).end_phase) f(device.index);
}

void before_raw_access(Device device) {
  if (auto* f = hooks_of(device.type).raw_access) f(device.index);
}

bool graph_capturing(Device device) {
  auto* f = hooks_of(device.type).capturing;
  return f != nullptr && f(device.index);
}

uint64_t graph_replays(DeviceType type) {
  auto* f = hooks_of(type).graph_replays;
  return f != nullptr ? f() : 0;
}

}  // namespace ampgrad
