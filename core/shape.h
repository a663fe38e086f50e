// Shapes and strides: sizes in elements, broadcasting, dim wrapping, printing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ampgrad {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& s);
Shape contiguous_strides(const Shape& sizes);
std::string shape_str(const Shape& s);  // "[2, 3]"
// Broadcast two shapes as NumPy/PyTorch do; throws naming `op` when they don't broadcast.
Shape broadcast_shapes(std::string_view op, const Shape& a, const Shape& b);
// Negative dims count from the end; throws naming `op` when out of range.
int64_t wrap_dim(std::string_view op, int64_t dim, int64_t ndim);

}  // namespace ampgrad
