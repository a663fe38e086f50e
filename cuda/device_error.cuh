// The device side of Note [Device-side errors] in cuda/device_error.h.
#pragma once

#include <ampgrad/cuda/device_error.h>

namespace ampgrad::cuda {

// Records `value` (at `position` of the index tensor, outside [low, high)) for `site`, if no
// violation was recorded before.
__device__ inline void report_out_of_range(DeviceErrorRecord* r, int site, int64_t value, int64_t position,
                                           int64_t low, int64_t high) {
  if (atomicCAS(&r->flag, 0, 1) != 0) return;
  r->site = site;
  r->value = value;
  r->position = position;
  r->low = low;
  r->high = high;
  __threadfence_system();
}

}  // namespace ampgrad::cuda
