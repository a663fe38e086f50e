// How a reduction over some dims, or an op along one dim, becomes an [outer, r, inner] problem
// for the kernels.
#pragma once

#include <string_view>

#include "core/tensor.h"

namespace ampgrad {

struct ReduceGeometry {
  Tensor x3;         // contiguous [outer, r, inner] (a view when possible, else a permuted copy)
  int64_t r = 0;     // elements reduced per output
  Shape out_shape;   // without the reduced dims
  Shape keep_shape;  // reduced dims kept as 1
};

// `dims` empty means every dim. Throws naming `op` on out-of-range or repeated dims.
ReduceGeometry reduce_geometry(std::string_view op, const Tensor& a, const Shape& dims);
Shape reduce_geometry_keep_shape(const Shape& in_shape, const Shape& dims);
// [outer, r, inner] around dim d (already wrapped) of a shape: the view the kernels along one
// dim take (softmax, the scans) of a contiguous tensor.
Shape rows_around(const Shape& shape, int64_t d);

}  // namespace ampgrad
