// What the layers above the kernels ask of a device backend besides its kernels (Note [Device hooks]).
#pragma once

#include <cstdint>

#include <ampgrad/core/device.h>

namespace ampgrad {

// Note [Device hooks]
// The optimizers, the speed-ups (the backward context, the working copies) and
// Tensor::data_ptr() need four things of a device that are not kernels: to say where a phase of
// a training step ends (the forward, when backward() starts; an optimizer's step), so that work
// the backend holds back goes to the
// device then (Note [Launch batches] in cuda/call_graph.h); that code past the library is about
// to touch the device's memory, so that held work goes and is finished (Note [Raw access] in
// core/tensor.h); whether a whole-step graph is being captured
// (Note [CUDA graphs] in cuda/graph.h); and a count of graph replays. The backend registers
// the answers when the library loads, as it registers its allocator (set_allocator), so no
// file outside cuda/ names the launch machinery or the graphs; a device without hooks
// answers "nothing held, not capturing, no replays".
struct DeviceHooks {
  void (*end_phase)(int device) = nullptr;
  void (*raw_access)(int device) = nullptr;
  bool (*capturing)(int device) = nullptr;
  uint64_t (*graph_replays)() = nullptr;
};
void set_device_hooks(DeviceType type, const DeviceHooks& hooks);

// A phase of a step ends on `device`: what its backend holds back goes to it.
void end_phase(Device device);
// Code past the library is about to read or write `device`'s memory by its address: what its
// backend holds back goes to the device and has finished when this returns.
void before_raw_access(Device device);
// Whether a graph captures `device`'s work now.
bool graph_capturing(Device device);
// Graph replays on `type`'s devices so far.
uint64_t graph_replays(DeviceType type);

namespace detail {
// Set while a backend wants to see every op end (CUDA's sync debug: cuda::set_sync_debug in
// cuda/runtime.h): OpScope::finish calls it with the output's device. Null otherwise, so an op
// pays one load of a pointer.
inline void (*after_op_hook)(Device device) = nullptr;
inline void set_after_op(void (*f)(Device)) { after_op_hook = f; }
}  // namespace detail

}  // namespace ampgrad
