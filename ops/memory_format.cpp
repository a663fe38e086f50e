// Channels-last (NHWC) layout: detection, allocation and conversion of 4-D tensors.
#include <ampgrad/ops/internal.h>
#include <ampgrad/ops/nn_ops.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad {

bool is_channels_last(const Tensor& t) {
  if (t.dim() != 4) return false;
  const Shape& s = t.shape();
  const Shape& st = t.strides();
  // NHWC strides: C fastest, then W, H, N (size-1 dims may carry any stride).
  int64_t expected = 1;
  for (int d : {1, 3, 2, 0}) {
    if (s[d] != 1 && st[d] != expected) return false;
    expected *= s[d];
  }
  return true;
}

Tensor empty_channels_last(const Shape& shape, TensorOptions options) {
  AG_CHECK(shape.size() == 4, "empty_channels_last: expected a 4-D shape, got {}", shape_str(shape));
  Tensor nhwc = empty({shape[0], shape[2], shape[3], shape[1]}, options);
  return nhwc.permute({0, 3, 1, 2});
}

Tensor Tensor::to_channels_last() const {
  AG_CHECK(dim() == 4, "to_channels_last: expected a 4-D tensor [N, C, H, W], got {}", desc());
  if (is_channels_last(*this)) return *this;
  // A differentiable copy into NHWC storage, viewed back as [N, C, H, W].
  return permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2});
}

}  // namespace ampgrad
