// The seam where casts made outside the current autocast region may be reused (Note [Cast reuse]).
#pragma once

#include <optional>
#include <vector>

#include <ampgrad/core/tensor.h>

namespace ampgrad::amp {

// Note [Cast reuse]
// Autocast's cast cache lives for one region (Note [Cast cache] in amp/autocast.cpp), as
// PyTorch's does: every step casts every float32 weight again. Two kinds of cast can be had for
// less, and this interface is where they plug in:
//  - a parameter's 16-bit copy changes only when the optimizer steps, and the optimizer's kernel
//    reads and writes the whole parameter anyway: it can write the copy in the same pass
//    (copies_to_write, copies_written), and the next region's cast reuses it (find);
//  - an fp32 op's float32 output is often the next lower op's input: an op whose kernel can
//    also write its output in the autocast dtype in the same pass does so where one would be
//    taken (ready_cast_dtype) and offers it (offer_ready_cast); the next cast of that output
//    takes it (find).
// Without an implementation every answer is "nothing": no cast is reused, no copy is written,
// and autocast behaves as PyTorch's. The speed-ups register one while the library loads
// (speedups/casts.cpp, Note [Cast speed-ups]); either way the values are the same, bit for bit.
class CastReuse {
 public:
  virtual ~CastReuse() = default;
  // A tensor holding `t` cast to `dtype`, made earlier and still current, with t's gradient edge
  // (usable as autocast's cast of t); undefined where there is none.
  virtual Tensor find(const Tensor& t, DType dtype) = 0;
  // Autocast just cast `t`, a float32 parameter, to `cast`.
  virtual void made(const Tensor& t, const Tensor& cast) = 0;
  // Whether an op's float32 output on `device` rounded to `dtype` would be taken by a later cast.
  virtual bool wants_ready_casts(Device device, DType dtype) = 0;
  // `low` is `source` (an op's float32 output) rounded to low's dtype, written by the same op.
  virtual void offer(const Tensor& source, const Tensor& low) = 0;
  // An optimizer is about to update `params` in place: the 16-bit copies it should write from the
  // new values in the same pass (undefined where none).
  virtual std::vector<Tensor> copies_to_write(const std::vector<Tensor>& params) = 0;
  // The step wrote `params` and `copies` (copies as copies_to_write gave them).
  virtual void copies_written(const std::vector<Tensor>& params, const std::vector<Tensor>& copies) = 0;
};

// Set once, while the library loads; null: nothing is reused.
void set_cast_reuse(CastReuse* reuse);

// The seam's entry points for autocast, the ops and the optimizers: each the plain answer
// ("nothing") without a CastReuse.
Tensor reusable_cast(const Tensor& t, DType dtype);
void cast_made(const Tensor& t, const Tensor& cast);
// The dtype a fused fp32 op on `device` should also write its float32 output in: autocast's
// lower dtype there, when autocast is on and a later cast would take the copy.
std::optional<DType> ready_cast_dtype(Device device);
void offer_ready_cast(const Tensor& source, const Tensor& low);
std::vector<Tensor> copies_to_write(const std::vector<Tensor>& params);
void copies_written(const std::vector<Tensor>& params, const std::vector<Tensor>& copies);

}  // namespace ampgrad::amp
