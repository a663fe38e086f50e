// masked_fill, tril and triu: values replaced where a mask says, as PyTorch's. Composed of
// where (and, for the triangles, a mask made of arange): their gradients are where's, zero
// where the value was replaced; masked_fill's 0-dim tensor value gets the sum of the gradient
// over the masked positions, as in PyTorch.
#include <algorithm>
#include <cmath>

#include <ampgrad/ops/internal.h>
#include <ampgrad/ops/op_scope.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad {

namespace {
const OpInfo kMaskedFill{"masked_fill", amp::Category::passthrough, true,
                         "copies values or the fill unchanged (on none of PyTorch's autocast lists)"};
const OpInfo kTril{"tril", amp::Category::passthrough, true, "copies values unchanged (on none of PyTorch's autocast lists)"};
const OpInfo kTriu{"triu", amp::Category::passthrough, true, "copies values unchanged (on none of PyTorch's autocast lists)"};

void check_mask(const Tensor& x, const Tensor& mask) {
  check_defined(kMaskedFill, x, "input");
  check_defined(kMaskedFill, mask, "mask");
  check_same_device(kMaskedFill, x, mask);
  AG_CHECK(mask.dtype() == kBool, "masked_fill: mask must be bool, got {}", mask.desc());
  (void)broadcast_shapes(kMaskedFill.name, x.shape(), mask.shape());  // raises, naming the op, if they do not broadcast
}

// The triangle below (lower) or above the diagonal `diagonal` of x's last two dims: the
// positions (i, j) with j - i <= diagonal (lower) or j - i >= diagonal (upper).
Tensor triangle(const OpInfo& op, const Tensor& x0, int64_t diagonal, bool lower) {
  Tensor x = x0;
  OpScope scope(op, x);
  check_defined(op, x, "input");
  AG_CHECK(x.dim() >= 2, "{}: input must have at least 2 dims (a matrix or a batch of them), got {}", op.name, x.desc());
  const int64_t rows = x.size(-2), cols = x.size(-1);
  // j <= i + diagonal (or >=), compared as a column and a row: only the bool mask is [rows, cols].
  // A diagonal past the matrix is the same as one at its edge (and stays exact in a double).
  diagonal = std::clamp<int64_t>(diagonal, -rows, cols);
  const TensorOptions i64 = TensorOptions(kInt64).device(x.device());
  const Tensor j = arange(cols, i64).reshape({1, cols}), i_plus = add(arange(rows, i64), diagonal).reshape({rows, 1});
  const Tensor keep = lower ? le(j, i_plus) : ge(j, i_plus);
  return scope.finish(where(keep, x, scalar_tensor(0, x.options())));
}
}  // namespace

Tensor masked_fill(const Tensor& input, const Tensor& mask, const Scalar& value) {
  Tensor x = input, m = mask;
  OpScope scope(kMaskedFill, x, m);
  check_mask(x, m);
  // As PyTorch: a value the input's dtype cannot hold is an error, not a wrapped or rounded fill.
  const double v = value.to_double();
  bool fits = true;
  switch (x.dtype()) {
    case kFloat16: fits = !std::isfinite(v) || std::abs(v) <= 65504.0; break;
    case kFloat32:
    case kBFloat16: fits = !std::isfinite(v) || std::abs(v) <= 3.4028234663852886e38; break;
    case kInt64: fits = v >= -9.223372036854775808e18 && v < 9.223372036854775808e18; break;  // NaN fails
    case kInt32: fits = v >= -2147483648.0 && v < 2147483648.0; break;
    case kUInt8: fits = v >= 0 && v < 256; break;
    default: break;  // float64, bool
  }
  AG_CHECK(fits, "masked_fill: value {} cannot be converted to {} without overflow (input {})", v, dtype_name(x.dtype()),
           x.desc());
  return scope.finish(where(m, scalar_tensor(value, x.options()), x));
}

Tensor masked_fill(const Tensor& input, const Tensor& mask, const Tensor& value) {
  Tensor x = input, m = mask, v = value;
  OpScope scope(kMaskedFill, x, m, v);
  check_mask(x, m);
  check_defined(kMaskedFill, v, "value");
  AG_CHECK(v.dim() == 0, "masked_fill: value must be a 0-dim tensor (or a number), got {}", v.desc());
  // As PyTorch: the value takes the input's dtype, and a CPU value may fill a CUDA input.
  return scope.finish(where(m, v.to(x.device()).to(x.dtype()), x));
}

Tensor tril(const Tensor& input, int64_t diagonal) { return triangle(kTril, input, diagonal, true); }
Tensor triu(const Tensor& input, int64_t diagonal) { return triangle(kTriu, input, diagonal, false); }

}  // namespace ampgrad
