// Helpers shared between op families that are not part of the public API: dtype rules,
// broadcasting views, and the in-place paths (the shared input checks are public, in
// ops/define_op.h).
#pragma once

#include <initializer_list>
#include <string_view>

#include <ampgrad/core/kernel_kinds.h>
#include <ampgrad/core/scalar.h>
#include <ampgrad/core/tensor.h>
#include <ampgrad/ops/define_op.h>

namespace ampgrad {

// Floating dtype an op computes in for `t`: its own if floating, float32 for integers/bool.
DType float_compute_dtype(DType t);
// A 0-dim tensor holding a Python-style scalar, typed so it does not upcast `like`.
DType scalar_result_dtype(DType tensor_dtype, const Scalar& s);
// PyTorch's result_type of tensors: 0-dim ones do not upcast dimensioned ones of the same
// category (bool < integer < floating) (ops/binary.cpp).
DType result_type(std::initializer_list<const Tensor*> tensors);
DType result_type(const Tensor& a, const Tensor& b);
// t in dtype dt, the cast not recorded by autograd (the op's own record differentiates).
Tensor cast_quietly(const Tensor& t, DType dt);
// A view of `t` with out's shape: broadcast dims get stride 0 (no copy).
Tensor broadcast_to(const Tensor& t, const Shape& shape);

// The result of casting `a` to `copy`'s dtype when `copy` already holds exactly that (a
// working copy, Note [Cast reuse] in amp/cast_reuse.h): a new handle on copy's memory
// with the cast's autograd edge to `a`, and no kernel.
Tensor to_reusing(const Tensor& a, const Tensor& copy);

Tensor clone_op(const Tensor& a);
Tensor& copy_into(Tensor& dst, const Tensor& src);
void fill_into(const Tensor& dst, double value);
// dst.copy_(src) and dst.fill_(value) where autograd tracks them (Note [In-place autograd] in
// ops/tensor_methods.cpp): dst's history after the write.
Tensor& copy_tracked(Tensor& dst, const Tensor& src);
Tensor& fill_tracked(Tensor& dst, double value);
// Refuses in-place writes to a leaf that requires grad in grad mode (Note [In-place autograd]
// in ops/tensor_methods.cpp).
void check_inplace(std::string_view op, const Tensor& t);
// A unary elementwise op of kind k (ops/unary.cpp): its forward, its backward kernel, its
// dtype rule; p0, p1 are the kind's scalars, keep_int keeps integer dtypes for kinds that
// take them (false: a floating scalar operand makes the result float32).
Tensor unary_elementwise(const OpInfo& op, UnaryKind k, const Tensor& a, double p0, double p1, bool keep_int);
// In-place arithmetic as one kernel writing into `self` (Note [In-place arithmetic]); false
// when it cannot (promotion, broadcasting self, overlap), and the caller goes out of place.
bool binary_inplace(BinaryKind k, Tensor& self, const Tensor& other);
bool scalar_inplace(UnaryKind k, Tensor& self, double s);
enum class Reduction;
// A loss's per-sample values reduced as `reduction` says (ops/pair_loss.cpp); BatchMean is an
// error naming op (kl_div alone takes it, in its kernel).
Tensor reduce_loss(const Tensor& per_sample, Reduction reduction, const OpInfo& op);
// Allocates out (shape, dtype of `like`, device of `like`).
inline Tensor empty_as(const Shape& shape, DType dtype, const Tensor& like) {
  return empty(shape, TensorOptions(dtype).device(like.device()));
}

}  // namespace ampgrad
