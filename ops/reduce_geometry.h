// How a reduction over some dims, or an op along one dim, becomes an [outer, r, inner] problem
// for the kernels.
#pragma once

#include <string_view>

#include <ampgrad/core/kernel_kinds.h>
#include <ampgrad/core/tensor.h>

namespace ampgrad {

struct ReduceGeometry {
  Tensor x3;         // contiguous [outer, r, inner] (a view when possible, else a permuted copy)
  int64_t r = 0;     // elements reduced per output
  // Note [Reductions around a kept block]: reduced leading and trailing dims of a contiguous
  // tensor around kept ones (a convolution's bias gradient, a sum over N, H and W). A sum or
  // mean of them is two passes over the view, not a permuted copy: x3 is then the view [lead,
  // kept, trail] and reduce_forward sums over trail, then over lead. Other kinds take
  // permuted() (the copy).
  bool around = false;
  Tensor permuted;   // around: the [outer, r, 1] copy the other kinds reduce
  Shape out_shape;   // without the reduced dims
  Shape keep_shape;  // reduced dims kept as 1
};

// `dims` empty means every dim. Throws naming `op` on out-of-range or repeated dims.
ReduceGeometry reduce_geometry(std::string_view op, const Tensor& a, const Shape& dims);
Shape reduce_geometry_keep_shape(const Shape& in_shape, const Shape& dims);
// [outer, r, inner] around dim d (already wrapped) of a shape: the view the kernels along one
// dim take (softmax, the scans) of a contiguous tensor.
Shape rows_around(const Shape& shape, int64_t d);

struct OpInfo;
// Runs kernel::reduce of kind k over `dims` of a (ops/reduce.cpp): the values (keepdim's
// shape, out_dtype) and, for Max/Min, their indices. param: Var's correction, Norm's p.
std::pair<Tensor, Tensor> reduce_forward(const OpInfo& op, ReduceKind k, const Tensor& a, const Shape& dims,
                                         bool keepdim, DType out_dtype, double param = 0);
// A reduction's gradient g broadcast back over the reduced dims of in_shape.
Tensor expand_back(const Tensor& g, const Shape& in_shape, const Shape& dims, bool keepdim);

}  // namespace ampgrad
