// The pointwise losses: l1, mse, smooth_l1, huber, soft_margin, kl_div, poisson_nll,
// hinge_embedding and binary_cross_entropy_with_logits, with reduction none, mean or sum.
#include <cmath>

#include <ampgrad/autograd/node.h>
#include <ampgrad/core/kernels.h>
#include <ampgrad/ops/internal.h>
#include <ampgrad/ops/nn_ops.h>
#include <ampgrad/ops/op_scope.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad {

using amp::Category;
using autograd::Grads;
using Saved = std::vector<Tensor>;

// Note [Pointwise losses]
// A loss that is a sum (or mean) of one formula per element, l(x_i, y_i), is a row of
// core/loss_kinds.def: the formula and its two gradients. With reduction mean or sum it runs
// as one kernel that reads x and y once and writes one number (the element losses are never
// stored), and its backward as one kernel that writes both gradients from the 0-dim incoming
// gradient; reduction none writes the element losses. Composed of ops, l1_loss was four
// kernels and two full-size temporaries forward. Inputs and target are made contiguous first
// (a copy only for strided ones) and computed in their promoted floating dtype.

namespace {

const OpInfo kL1{"l1_loss", Category::fp32, true, "losses: as PyTorch; the sum of a long batch outgrows float16"};
const OpInfo kMse{"mse_loss", Category::fp32, true, "losses: squares overflow float16"};
const OpInfo kSmoothL1{"smooth_l1_loss", Category::fp32, true, "losses: squares overflow float16"};
const OpInfo kHuber{"huber_loss", Category::fp32, true, "losses: squares overflow float16"};
const OpInfo kSoftMargin{"soft_margin_loss", Category::fp32, true, "losses: exp overflows float16"};
const OpInfo kKlDiv{"kl_div", Category::fp32, true, "losses: logs and exps of probabilities"};
const OpInfo kPoissonNll{"poisson_nll_loss", Category::fp32, true, "losses: exp of the log-rate overflows float16"};
const OpInfo kHingeEmbedding{"hinge_embedding_loss", Category::fp32, true, "losses: as PyTorch; accumulation"};
const OpInfo kBceWithLogits{"binary_cross_entropy_with_logits", Category::fp32, true,
                            "losses: the stable log-sigmoid form"};

// What the target holds: values (floating), or labels (1 and -1, any numeric dtype).
enum class Target { values, labels };

Tensor pointwise_loss(const OpInfo& op, LossKind k, const Tensor& input0, const Tensor& target0, Reduction r,
                      double a = 0, double b = 0, Target target_kind = Target::values) {
  Tensor input = input0, target = target0;
  OpScope scope(op, input, target);
  check_defined(op, input, "input");
  check_defined(op, target, "target");
  check_same_device(op, input, target);
  AG_CHECK(is_floating(input.dtype()), "{}: expected a floating input, got {}", op.name, input.desc());
  AG_CHECK(target_kind == Target::labels ? target.dtype() != kBool : is_floating(target.dtype()),
           "{}: expected a {} target, got {} (input {})", op.name,
           target_kind == Target::labels ? "numeric (labels 1 and -1)" : "floating", target.desc(), input.desc());
  AG_CHECK(input.shape() == target.shape(), "{}: the target {} must have the input's shape {}", op.name,
           target.desc(), shape_str(input.shape()));
  AG_CHECK(r != Reduction::BatchMean || k == LossKind::KlDiv || k == LossKind::KlDivLogTarget,
           "{}: reduction batchmean is kl_div's only", op.name);
  const DType dt = is_floating(target.dtype()) ? promote_types(input.dtype(), target.dtype()) : input.dtype();
  // Differentiable casts: a gradient reaches each input in its own dtype.
  const Tensor x = contiguous(input.dtype() == dt ? input : input.to(dt));
  const Tensor y = contiguous(target.dtype() == dt ? target : target.to(dt));
  const int64_t n = x.numel();
  // PyTorch's mean of nothing is NaN; batchmean divides the sum by the batch size.
  const double scale = r == Reduction::Sum ? 1.0
                       : r == Reduction::BatchMean ? 1.0 / static_cast<double>(x.dim() ? x.size(0) : 1)
                                                   : 1.0 / static_cast<double>(n);
  Tensor out;
  if (r == Reduction::None) {
    out = empty_as(x.shape(), dt, x);
    if (n) kernel::pointwise_loss(out.device(), k, x, y, out, a, b);
  } else {
    out = empty_as({}, dt, x);
    if (n) kernel::pointwise_loss_sum(out.device(), k, x, y, out, a, b, scale);
    else fill_into(out, r == Reduction::Sum ? 0.0 : NAN);
  }
  const bool need_x = x.requires_grad(), need_y = y.requires_grad();
  if (need_x || need_y) {
    const double gscale = r == Reduction::None ? 1.0 : scale;
    autograd::record(op, out, {x, y}, {x, y}, [k, a, b, gscale, need_x, need_y](const Tensor& g, const Saved& s) {
      Tensor gx = need_x ? empty(s[0].shape(), s[0].options()) : Tensor();
      Tensor gy = need_y ? empty(s[0].shape(), s[0].options()) : Tensor();
      if (s[0].numel())
        kernel::pointwise_loss_backward(s[0].device(), k, g.dim() ? contiguous(g) : g, s[0], s[1], gx, gy, a, b, gscale);
      return Grads{gx, gy};
    });
  }
  return scope.finish(out);
}

}  // namespace

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  return pointwise_loss(kL1, LossKind::L1, input, target, reduction);
}
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  return pointwise_loss(kMse, LossKind::Mse, input, target, reduction);
}
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction, double beta) {
  AG_CHECK(beta >= 0, "smooth_l1_loss: beta must be >= 0, got {}", beta);
  return pointwise_loss(kSmoothL1, LossKind::SmoothL1, input, target, reduction, beta);
}
Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction, double delta) {
  AG_CHECK(delta > 0, "huber_loss: delta must be > 0, got {}", delta);
  return pointwise_loss(kHuber, LossKind::Huber, input, target, reduction, delta);
}
Tensor soft_margin_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  return pointwise_loss(kSoftMargin, LossKind::SoftMargin, input, target, reduction, 0, 0, Target::labels);
}
Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction, bool log_target) {
  return pointwise_loss(kKlDiv, log_target ? LossKind::KlDivLogTarget : LossKind::KlDiv, input, target, reduction);
}
Tensor poisson_nll_loss(const Tensor& input, const Tensor& target, bool log_input, bool full, double eps,
                        Reduction reduction) {
  return pointwise_loss(kPoissonNll, log_input ? LossKind::PoissonNllLog : LossKind::PoissonNll, input, target,
                        reduction, eps, full ? 1.0 : 0.0);
}
Tensor hinge_embedding_loss(const Tensor& input, const Tensor& target, double margin, Reduction reduction) {
  return pointwise_loss(kHingeEmbedding, LossKind::HingeEmbedding, input, target, reduction, margin, 0,
                        Target::labels);
}
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target, Reduction reduction) {
  return pointwise_loss(kBceWithLogits, LossKind::BceWithLogits, logits, target, reduction);
}

}  // namespace ampgrad
