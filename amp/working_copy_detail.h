// Working copies for autocast and the fused optimizer steps: internals, not part of the
// umbrella header's API (Note [Working copies] in amp/working_copy.h).
#pragma once

#include <vector>

#include <ampgrad/amp/working_copy.h>

namespace ampgrad::amp {

namespace detail {
// The kept copy of `param` in `dtype` when it matches the parameter's current version, else
// an undefined tensor.
Tensor current_working_copy(const Tensor& param, DType dtype);
// Keeps `copy` (param's values cast to copy's dtype, just computed) as param's copy.
void keep_working_copy(const Tensor& param, const Tensor& copy);
// For a fused optimizer step: the current copy of each param (undefined where none).
std::vector<Tensor> current_working_copies(const std::vector<Tensor>& params);
// After the step wrote params[i] and copies[i] (and bumped both versions): they match again.
void working_copies_written(const std::vector<Tensor>& params, const std::vector<Tensor>& copies);
}  // namespace detail

}  // namespace ampgrad::amp
