// Maps a reduction to [outer, r, inner] without copying when the reduced dims are adjacent.
#include <ampgrad/ops/reduce_geometry.h>

#include <algorithm>

#include <ampgrad/autograd/node.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad {

namespace {
std::vector<bool> reduced_mask(std::string_view op, int64_t ndim, const Shape& dims) {
  std::vector<bool> mask(static_cast<size_t>(ndim), dims.empty());
  for (int64_t d : dims) {
    int64_t w = wrap_dim(op, d, ndim);
    if (ndim == 0) continue;
    AG_CHECK(!mask[w], "{}: dimension {} appears more than once in the reduction dims", op, w);
    mask[w] = true;
  }
  return mask;
}
}  // namespace

Shape rows_around(const Shape& shape, int64_t d) {
  const int64_t ndim = static_cast<int64_t>(shape.size());
  int64_t outer = 1, r = ndim ? shape[d] : 1, inner = 1;
  for (int64_t i = 0; i < d; ++i) outer *= shape[i];
  for (int64_t i = d + 1; i < ndim; ++i) inner *= shape[i];
  return {outer, r, inner};
}

Shape reduce_geometry_keep_shape(const Shape& in_shape, const Shape& dims) {
  const int64_t n = static_cast<int64_t>(in_shape.size());
  std::vector<bool> mask = reduced_mask("reduce", n, dims);
  Shape keep = in_shape;
  for (int64_t i = 0; i < n; ++i)
    if (mask[i]) keep[i] = 1;
  return keep;
}

ReduceGeometry reduce_geometry(std::string_view op, const Tensor& a, const Shape& dims) {
  const int64_t n = a.dim();
  std::vector<bool> mask = reduced_mask(op, n, dims);
  ReduceGeometry g;
  g.keep_shape = a.shape();
  int64_t outer = 1, r = 1, inner = 1;
  int64_t first = -1, last = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (mask[i]) {
      g.keep_shape[i] = 1;
      r *= a.shape()[i];
      if (first < 0) first = i;
      last = i;
    } else {
      g.out_shape.push_back(a.shape()[i]);
    }
  }
  bool adjacent = true;
  for (int64_t i = first; i >= 0 && i <= last; ++i) adjacent = adjacent && mask[i];
  g.r = r;
  NoGradGuard no_grad;  // the kernels read x3; it is no part of the graph
  if (first < 0) {  // a 0-dim input: one element, reduced onto itself
    g.x3 = contiguous(a).view({1, 1, 1});
    return g;
  }
  if (adjacent) {
    for (int64_t i = 0; i < first; ++i) outer *= a.shape()[i];
    for (int64_t i = last + 1; i < n; ++i) inner *= a.shape()[i];
    g.x3 = contiguous(a).view({outer, r, inner});
  } else {
    // Reduced, then kept, then reduced dims (Note [Reductions around a kept block]).
    int64_t kept_first = -1, kept_last = -1;
    for (int64_t i = 0; i < n; ++i)
      if (!mask[i]) {
        if (kept_first < 0) kept_first = i;
        kept_last = i;
      }
    bool block = a.is_contiguous() && kept_first > 0 && kept_last < n - 1;
    for (int64_t i = kept_first; block && i <= kept_last; ++i) block = !mask[i];
    if (block) {
      int64_t lead = 1, kept = 1, trail = 1;
      for (int64_t i = 0; i < n; ++i) (i < kept_first ? lead : i > kept_last ? trail : kept) *= a.shape()[i];
      g.around = true;
      g.x3 = a.view({lead, kept, trail});
    }
    Shape perm;
    for (int64_t i = 0; i < n; ++i)
      if (!mask[i]) {
        perm.push_back(i);
        outer *= a.shape()[i];
      }
    for (int64_t i = 0; i < n; ++i)
      if (mask[i]) perm.push_back(i);
    if (g.around) {
      g.permuted = permute(a, perm);  // a view; contiguous(...).view({outer, r, 1}) when asked
    } else {
      g.x3 = contiguous(permute(a, perm)).view({outer, r, 1});
    }
  }
  return g;
}

}  // namespace ampgrad
