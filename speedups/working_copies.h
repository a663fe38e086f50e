// The 16-bit working copies of float32 parameters that autocast keeps between steps and the
// fused optimizers refresh in their own pass (Note [Working copies]): the registry behind
// speedups/casts.cpp.
#pragma once

#include <vector>

#include <ampgrad/core/tensor.h>

namespace ampgrad::speedups::detail {

// Note [Working copies]
// Under autocast every step casts each float32 weight to float16 again, one launch per
// weight per step, although a weight changes only in the optimizer's step, which already
// reads and writes all of it. So ampgrad keeps the 16-bit copy that autocast made of a
// parameter (a float32 leaf that requires grad) after the autocast region ends, together
// with what it was made from: the parameter object, its memory (set_data and Module::to
// replace it), its shape and its version. The fused optimizer step (SGD, Adam, AdamW)
// writes the copy in the same pass as the parameter, as it writes the working copies of
// master weights, and records the parameter's new version. The next region's cast finds a
// copy that still matches and reuses it: no kernel. Anything else that changes the
// parameter (an in-place op, a checkpoint load, a broadcast) bumps its version, and the
// next cast makes a fresh copy. A skipped step (found inf) writes neither, so they agree.
// Two cases keep a copy out of the fused step, so that it goes stale instead:
// - a live graph (or an open autocast region) still holds it: writing it in place would
//   change what that graph's backward reads (a GAN's generator loss built before the
//   discriminator's step);
// - a CUDA graph replayed since the copy was made: replays write parameters with no version
//   bump, so every copy made before one is distrusted by eager code.
// A captured step (Note [CUDA graphs] in cuda/graph.h) uses the copies its eager warm-up
// kept, as an eager step does: its forward reads them, no cast in the graph, and its fused
// optimizer step writes them. No copy is made during a capture (it would live in graph
// memory). The graph keeps the copies it read (Note [Capture attachments] in core/capture.h)
// and, before each replay, casts again into the same memory any whose parameter changed since
// (its version moved) or that another graph's replay may have left behind.
// Cost: 16 bits per parameter element; a freed parameter's copy goes at the next optimizer
// step, cast of a new parameter, working_copy_count() or clear_working_copies().
// speedups::set_working_copies(false) restores a cache per autocast region (PyTorch's).

// The kept copy of `param` in `dtype` when it matches the parameter's current version, else
// an undefined tensor.
Tensor current_working_copy(const Tensor& param, DType dtype);
// Keeps `copy` (param's values cast to copy's dtype, just computed) as param's copy.
void keep_working_copy(const Tensor& param, const Tensor& copy);
// For a fused optimizer step: the current copy of each param (undefined where none).
std::vector<Tensor> current_working_copies(const std::vector<Tensor>& params);
// After the step wrote params[i] and copies[i] (and bumped both versions): they match again.
void working_copies_written(const std::vector<Tensor>& params, const std::vector<Tensor>& copies);

}  // namespace ampgrad::speedups::detail
