// Helpers shared between op families that are not part of the public API.
#pragma once

#include "core/kernel_kinds.h"
#include "core/tensor.h"

namespace ampgrad {

Tensor clone_op(const Tensor& a);
Tensor& copy_into(Tensor& dst, const Tensor& src);
void fill_into(const Tensor& dst, double value);
// Refuses in-place writes to tensors autograd is tracking.
void check_inplace(std::string_view op, const Tensor& t);
struct OpInfo;
// Tensor-with-scalar forms of add, mul, rsub and pow (a kernel of core/kernel_kinds.h).
Tensor unary_scalar_op(const OpInfo& op, UnaryKind k, const Tensor& a, double s, bool keep_int);
// In-place arithmetic as one kernel writing into `self` (Note [In-place arithmetic]); false
// when it cannot (promotion, broadcasting self, overlap), and the caller goes out of place.
bool binary_inplace(BinaryKind k, Tensor& self, const Tensor& other);
bool scalar_inplace(UnaryKind k, Tensor& self, double s);
// Allocates out (shape, dtype of `like`, device of `like`).
inline Tensor empty_as(const Shape& shape, DType dtype, const Tensor& like) {
  return empty(shape, TensorOptions(dtype).device(like.device()));
}

}  // namespace ampgrad
