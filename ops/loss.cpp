// Losses: nll_loss, cross_entropy (label smoothing, ignore_index) and binary cross-entropy.
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

namespace {
const OpInfo kNllLoss{"nll_loss", Category::fp32, true, "losses: range and accumulation, as PyTorch"};
const OpInfo kCrossEntropy{"cross_entropy", Category::fp32, true, "losses: exp, log and a sum over classes (PyTorch runs it as log_softmax and nll_loss, both fp32)", {},
                           /*reads_16bit=*/true};
const OpInfo kBce{"binary_cross_entropy", Category::banned, true,
                  "log of probabilities near 0 or 1 is unsafe in float16", "binary_cross_entropy_with_logits"};

void check_classification(const OpInfo& op, const Tensor& input, const Tensor& target, int64_t ignore_index) {
  check_defined(op, input, "input");
  check_defined(op, target, "target");
  AG_CHECK(input.dim() == 2, "{}: expected input [N, C], got {}", op.name, input.desc());
  AG_CHECK(is_floating(input.dtype()), "{}: expected a floating input, got {}", op.name, input.desc());
  AG_CHECK(target.dtype() == kInt64 && target.dim() == 1 && target.size(0) == input.size(0),
           "{}: expected an int64 target [{}] of class indices, got {}", op.name, input.size(0), target.desc());
  check_same_device(op, input, target);
  if (target.is_cpu()) {
    for (int64_t t : target.to_vector<int64_t>())
      AG_CHECK((t >= 0 && t < input.size(1)) || t == ignore_index,
               "{}: target {} is out of range for {} classes (and is not ignore_index {})", op.name, t,
               input.size(1), ignore_index);
  }
}

// The mean negative log-likelihood by its own kernels (core/kernels.h): one reduction forward,
// one pass writing the [N, C] gradient backward, the count of counted rows kept on the device.
// Called with lp's OpScope already open (nll_loss, cross_entropy).
Tensor nll_mean(const Tensor& lp0, const Tensor& target0, int64_t ignore_index) {
  const Tensor lp = lp0.contiguous(), target = target0.contiguous();
  Tensor loss = empty_as({}, lp.dtype(), lp), count = empty_as({}, kFloat32, lp);
  kernel::nll_loss_forward(loss.device(), lp, target, ignore_index, loss, count);
  if (autograd::any_requires_grad({&lp0})) {
    autograd::record(kNllLoss, loss, {lp0, target0}, {target, count},
                     [ignore_index, shape = lp.shape()](const Tensor& g, const Saved& s) {
                       Tensor glp = empty_as(shape, g.dtype(), g);
                       kernel::nll_loss_backward(glp.device(), g.contiguous(), s[0], s[1], ignore_index, glp);
                       return Grads{glp, Tensor()};
                     });
  }
  return loss;
}

// Note [Fused cross-entropy]
// cross_entropy is log_softmax then nll_loss in PyTorch: two kernels forward, two backward,
// and an [N, C] float32 log-probability tensor kept for backward. Without label smoothing
// ampgrad runs it as one kernel each way: the forward computes each row's logsumexp (kept,
// N floats) and the mean of lse - x[target] over the counted rows; the backward writes
// grad / count * (softmax(x) - onehot(target)) straight into the logits' dtype, reading the
// logits (16-bit ones as they are, Note [Reading 16-bit inputs]) and the kept row sums.
// Rows are summed in a fixed order, so the loss is deterministic.
Tensor cross_entropy_fused(const Tensor& logits0, const Tensor& target0, int64_t ignore_index,
                           std::optional<DType> wide) {
  const Tensor logits = logits0.contiguous(), target = target0.contiguous();
  const DType loss_dtype = wide ? *wide : logits.dtype();
  const DType lse_dtype = logits.dtype() == kFloat64 ? kFloat64 : kFloat32;
  Tensor loss = empty_as({}, loss_dtype, logits), count = empty_as({}, kFloat32, logits);
  Tensor lse = empty_as({logits.size(0)}, lse_dtype, logits);
  kernel::cross_entropy_forward(loss.device(), logits, target, ignore_index, lse, loss, count);
  if (autograd::any_requires_grad({&logits0})) {
    autograd::record(kCrossEntropy, loss, {logits0, target0}, {logits, target, lse, count},
                     [ignore_index](const Tensor& g, const Saved& s) {
                       Tensor gx = empty_as(s[0].shape(), s[0].dtype(), s[0]);
                       kernel::cross_entropy_backward(gx.device(), g.contiguous(), s[0], s[1], s[2], s[3], ignore_index, gx);
                       return Grads{gx, Tensor()};
                     });
  }
  return loss;
}
}  // namespace

Tensor nll_loss(const Tensor& log_probs0, const Tensor& target0, int64_t ignore_index) {
  Tensor lp = log_probs0, target = target0;
  OpScope scope(kNllLoss, lp, target);
  check_classification(kNllLoss, lp, target, ignore_index);
  return scope.finish(nll_mean(lp, target, ignore_index));
}

Tensor cross_entropy(const Tensor& logits0, const Tensor& target0, double label_smoothing, int64_t ignore_index) {
  Tensor logits = logits0, target = target0;
  OpScope scope(kCrossEntropy, logits, target);
  check_classification(kCrossEntropy, logits, target, ignore_index);
  AG_CHECK(label_smoothing >= 0 && label_smoothing <= 1, "cross_entropy: label_smoothing must be in [0, 1], got {}",
           label_smoothing);
  // 16-bit logits under autocast are read as they are (Note [Reading 16-bit inputs]).
  const std::optional<DType> wide =
      is_reduced_float(logits.dtype()) ? scope.autocast_dtype() : std::optional<DType>();
  if (label_smoothing == 0) return scope.finish(cross_entropy_fused(logits, target, ignore_index, wide));
  Tensor lp = log_softmax(logits, 1, wide);
  // (1 - e) * nll + e * mean over classes of -log p, over the valid rows.
  Tensor validf = ne(target, ignore_index).to(lp.dtype());
  Tensor smooth = -sum(sum(lp, {1}) * validf) / (sum(validf) * static_cast<double>(logits.size(1)));
  return scope.finish(nll_mean(lp, target, ignore_index) * (1 - label_smoothing) + smooth * label_smoothing);
}

Tensor binary_cross_entropy(const Tensor& probs0, const Tensor& target0, Reduction reduction) {
  Tensor p = probs0, y = target0;
  OpScope scope(kBce, p, y);
  check_defined(kBce, p, "input");
  check_defined(kBce, y, "target");
  AG_CHECK(p.shape() == y.shape(), "binary_cross_entropy: input {} and target {} must have the same shape", p.desc(),
           y.desc());
  // log clamped at -100, as PyTorch, so p = 0 or 1 gives a finite loss.
  Tensor lp = clamp(log(p), -100.0, std::nullopt), l1p = clamp(log(rsub(p, 1)), -100.0, std::nullopt);
  return scope.finish(reduce_loss(-(y * lp + rsub(y, 1) * l1p), reduction, kBce));
}

}  // namespace ampgrad
