// Errors the kernels find on the device (an index out of range), reported at the next host
// synchronization (Note [Device-side errors]). Internal to cuda/.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string_view>
#include <utility>

#include <ampgrad/core/tensor.h>

namespace ampgrad::cuda {

// Note [Device-side errors]
// An index or target lives on the device, so the op cannot validate it on the host without a
// synchronizing copy, and PyTorch's answer, an assertion in the kernel, poisons the whole CUDA
// context. ampgrad's kernels that read indices (index_select, embedding, index_add, index_copy,
// gather, scatter_add, index_put through them, nll_loss, cross_entropy) keep every access in bounds
// (an out-of-range index reads 0 or is skipped) and record the first violation in the
// device's DeviceErrorRecord: which call (a site: the op, what it checks, the shapes), the
// value, its position in the index tensor and the range it must be in. The record lives in
// mapped pinned host memory, so no copy is needed to read it: every host synchronization
// (memcpy_d2h under item(), to_vector(), to(kCPU) and the scaler's and checkpoints' reads;
// synchronize(); data_ptr()'s wait) looks at it after the sync, which is when the kernels
// before it have finished, and throws ag::Error with what it holds, then clears it. Nothing
// is added to the hot path: a kernel argument (a fixed pointer and the call's site, which is
// the same for equal shapes, so call graphs still replay) and an untaken branch. The context
// stays healthy: later ops and steps run. set_sync_debug(true) (AMPGRAD_SYNC_DEBUG=1)
// synchronizes after every op, so the error is raised by the op that caused it.
struct DeviceErrorRecord {
  int flag;  // 0, or 1 once a kernel has claimed the record (atomicCAS) and written the rest
  int site;
  int64_t value;
  int64_t position;
  int64_t low, high;  // the value must be in [low, high)
};

// The record of `device`, as the device addresses it (created on first use).
DeviceErrorRecord* device_error_record(int device);
// A site for a call of `op` checking `what` (e.g. "index", "target") against the shapes of
// `tensors` (named): the same number for equal shapes. Cheap after the first sighting.
int error_site(std::string_view op, std::string_view what,
               std::initializer_list<std::pair<std::string_view, const Tensor*>> tensors);
// After a synchronization of `device`: throws the recorded error, if any, and clears it.
void check_device_errors(int device);

}  // namespace ampgrad::cuda
