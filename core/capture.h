// Host-side state that a captured whole-step graph relies on between its replays (Note [Capture attachments]).
#pragma once

#include <cstdint>
#include <memory>

#include <ampgrad/core/device.h>

namespace ampgrad {

// Note [Capture attachments]
// A captured step (Note [CUDA graphs] in cuda/graph.h) replays device work that code above the
// backend set up on the host while it was recorded. Most of that is plain memory the graph owns
// or the step keeps; some is a cache whose host bookkeeping eager code goes on changing:
// autocast's kept working copies (Note [Working copies] in speedups/working_copies.h), which a
// captured forward reads instead of casting and a captured optimizer step writes. Between two
// replays an in-place change of a parameter (a checkpoint load, a broadcast) or another graph's
// replay can leave such a copy behind its parameter. So code above the backend may attach an
// object to the capture in progress: the graph keeps it as long as it lives and calls
// before_replay() on the host before each launch, where it may queue eager work on the stream
// (a refreshing cast) ahead of the replay. The backend registers the two answers at load, as it
// registers its device hooks (Note [Device hooks] in core/device_hooks.h); a device without
// them never captures.
struct CaptureAttachment {
  virtual ~CaptureAttachment() = default;
  virtual void before_replay() = 0;
};

struct CaptureHooks {
  uint64_t (*capture_id)(int device) = nullptr;  // which capture records now; 0: none
  void (*attach)(int device, std::shared_ptr<CaptureAttachment> a) = nullptr;
};
void set_capture_hooks(DeviceType type, const CaptureHooks& hooks);

// A number for the capture recording `device`'s work now, new for each capture; 0 when none is.
uint64_t capture_id(Device device);
// Hands `a` to the graph being captured on `device` (one must be: capture_id(device) != 0).
void attach_to_capture(Device device, std::shared_ptr<CaptureAttachment> a);

}  // namespace ampgrad
