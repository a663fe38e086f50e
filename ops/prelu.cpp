// prelu: x where x > 0, weight * x elsewhere, with one weight or one per channel (dim 1), as
// torch.nn.functional.prelu. Composed of ops (where, mul); autograd gives weight's gradient
// summed over everything but the channel dim.
#include <ampgrad/ops/internal.h>
#include <ampgrad/ops/nn_ops.h>
#include <ampgrad/ops/op_scope.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad {

namespace {
const OpInfo kPrelu{"prelu", amp::Category::lower, true, "as PyTorch's lower-precision list (a multiply and a select)"};
}  // namespace

Tensor prelu(const Tensor& x0, const Tensor& weight0) {
  Tensor x = x0, weight = weight0;
  OpScope scope(kPrelu, x, weight);
  check_defined(kPrelu, x, "input");
  check_defined(kPrelu, weight, "weight");
  check_same_device(kPrelu, x, weight);
  AG_CHECK(is_floating(x.dtype()) && weight.dtype() == x.dtype(),
           "prelu: expected a floating input and a weight of its dtype, got {} and {}", x.desc(), weight.desc());
  // The channel dim is dim 1; inputs of fewer than 2 dims have one channel.
  const int64_t channels = x.dim() >= 2 ? x.size(1) : 1;
  AG_CHECK(weight.dim() <= 1 && (weight.numel() == 1 || weight.numel() == channels),
           "prelu: weight {} must hold 1 or {} (the channels of input {}) values", weight.desc(), channels, x.desc());
  Tensor w = weight.reshape({-1});
  if (weight.numel() > 1) {
    Shape per_channel(x.dim(), 1);
    per_channel[1] = channels;
    w = w.reshape(per_channel);
  } else {
    w = w.reshape({});
  }
  return scope.finish(where(gt(x, 0.0), x, w * x));
}

}  // namespace ampgrad
