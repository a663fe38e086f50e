// Losses: nll_loss, cross_entropy (class weights, label smoothing, ignore_index, the three
// reductions, spatial inputs) and binary cross-entropy.
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

// Note [Classification shapes]
// nll_loss and cross_entropy take PyTorch's three shapes: input [N, C] with target [N]; one
// sample, [C] with a 0-dim target; and [N, C, d1, ...] with target [N, d1, ...], one loss per
// position (segmentation; PyTorch's nll_loss2d). Each becomes rows of classes, [M, C]: the
// class dim moved last and the others flattened (a copy for the spatial shapes), the target
// flattened to [M]. The losses are then computed on rows; reduction None views the per-row
// losses back as the target's shape.
struct Rows {
  Tensor input, target;  // [M, C], [M]
  Shape target_shape;    // for reduction None
};

Rows as_rows(const OpInfo& op, const Tensor& input, const Tensor& target, const Tensor& weight, int64_t ignore_index,
             std::optional<DType> autocast) {
  check_defined(op, input, "input");
  check_defined(op, target, "target");
  AG_CHECK(input.dim() >= 1, "{}: expected input [N, C], [C] or [N, C, d1, ...], got {}", op.name, input.desc());
  AG_CHECK(is_floating(input.dtype()), "{}: expected a floating input, got {}", op.name, input.desc());
  check_same_device(op, input, target);
  const int64_t classes = input.dim() == 1 ? input.size(0) : input.size(1);
  Shape want;  // the target's shape: the input's without the class dim
  for (int64_t d = 0; d < input.dim(); ++d)
    if (d != (input.dim() == 1 ? 0 : 1)) want.push_back(input.size(d));
  AG_CHECK(target.dtype() == kInt64 && target.shape() == want,
           "{}: expected an int64 target {} of class indices for input {}, got {}", op.name, shape_str(want),
           input.desc(), target.desc());
  if (weight.defined()) {
    check_same_device(op, input, weight);
    AG_CHECK(weight.dim() == 1 && weight.size(0) == classes && is_floating(weight.dtype()),
             "{}: expected a floating weight [{}] (one per class), got {}", op.name, classes, weight.desc());
    // Under autocast the weight is cast with the input; outside it they must agree, as PyTorch's.
    AG_CHECK(autocast || weight.dtype() == input.dtype(), "{}: expected weight {} in the input's dtype {}", op.name,
             weight.desc(), dtype_name(input.dtype()));
  }
  if (target.is_cpu()) {
    for (int64_t t : target.to_vector<int64_t>())
      AG_CHECK((t >= 0 && t < classes) || t == ignore_index,
               "{}: target {} is out of range for {} classes (and is not ignore_index {})", op.name, t, classes,
               ignore_index);
  }
  if (input.dim() == 2) return {input, target, want};
  if (input.dim() == 1) return {input.reshape({1, classes}), target.reshape({1}), want};
  Shape last;  // the class dim moved last
  last.push_back(0);
  for (int64_t d = 2; d < input.dim(); ++d) last.push_back(d);
  last.push_back(1);
  return {permute(input, last).reshape({-1, classes}), target.reshape({-1}), want};
}

// The negative log-likelihood of each row's target, times its class weight, as PyTorch's
// nll_loss computes it: 0 for an ignored row. Also the sum of the counted rows' weights (their
// count without a weight), which reduction Mean divides by.
std::pair<Tensor, Tensor> weighted_nll_rows(const OpInfo& op, const Tensor& lp, const Tensor& target,
                                            const Tensor& weight, int64_t ignore_index) {
  const Tensor counted = ne(target, ignore_index);
  const Tensor safe = where(counted, target, 0);  // an ignored row reads class 0, then weighs 0
  // A CUDA target out of range is raised at the next synchronization naming this op, as the
  // fused kernels do (the CPU's targets were checked on the host).
  if (!safe.is_cpu()) kernel::check_index(safe.device(), safe, 0, lp.size(1), op.name.data(), "target");
  Tensor w = counted.to(lp.dtype());
  if (weight.defined()) w = index_select(weight.to(lp.dtype()), 0, safe) * w;
  const Tensor picked = squeeze(gather(lp, 1, unsqueeze(safe, 1)), 1);
  return {-picked * w, sum(w)};
}

Tensor reduce_rows(const Tensor& per_row, const Tensor& weight_sum, Reduction reduction, const Shape& target_shape,
                   const OpInfo& op) {
  switch (reduction) {
    case Reduction::None: return per_row.reshape(target_shape);
    case Reduction::Sum: return sum(per_row);
    case Reduction::Mean: return sum(per_row) / weight_sum;
    case Reduction::BatchMean: break;
  }
  AG_CHECK(false, "{}: reduction BatchMean is kl_div's; use Mean, Sum or None", op.name);
  return Tensor();
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

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, int64_t ignore_index) {
  return nll_loss(log_probs, target, Tensor(), ignore_index, Reduction::Mean);
}

Tensor nll_loss(const Tensor& log_probs0, const Tensor& target0, const Tensor& weight0, int64_t ignore_index,
                Reduction reduction) {
  Tensor lp = log_probs0, target = target0, weight = weight0;
  OpScope scope(kNllLoss, lp, target, weight);
  const Rows rows = as_rows(kNllLoss, lp, target, weight, ignore_index, scope.autocast_dtype());
  // The common form by its own kernels; weights and the other reductions as PyTorch writes them.
  if (!weight.defined() && reduction == Reduction::Mean)
    return scope.finish(nll_mean(rows.input, rows.target, ignore_index));
  auto [per_row, weight_sum] = weighted_nll_rows(kNllLoss, rows.input, rows.target, weight, ignore_index);
  return scope.finish(reduce_rows(per_row, weight_sum, reduction, rows.target_shape, kNllLoss));
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, double label_smoothing, int64_t ignore_index) {
  return cross_entropy(logits, target, Tensor(), ignore_index, Reduction::Mean, label_smoothing);
}

Tensor cross_entropy(const Tensor& logits0, const Tensor& target0, const Tensor& weight0, int64_t ignore_index,
                     Reduction reduction, double label_smoothing) {
  Tensor logits = logits0, target = target0, weight = weight0;
  OpScope scope(kCrossEntropy, logits, target, weight);
  const Rows rows = as_rows(kCrossEntropy, logits, target, weight, ignore_index, scope.autocast_dtype());
  AG_CHECK(label_smoothing >= 0 && label_smoothing <= 1, "cross_entropy: label_smoothing must be in [0, 1], got {}",
           label_smoothing);
  // 16-bit logits under autocast are read as they are (Note [Reading 16-bit inputs]).
  const std::optional<DType> wide =
      is_reduced_float(logits.dtype()) ? scope.autocast_dtype() : std::optional<DType>();
  if (label_smoothing == 0 && !weight.defined() && reduction == Reduction::Mean)
    return scope.finish(cross_entropy_fused(rows.input, rows.target, ignore_index, wide));
  // As PyTorch: log_softmax, then nll_loss; label smoothing adds e / C times the loss against
  // every class (each weighted by its class weight), over the rows not ignored.
  const Tensor lp = log_softmax(rows.input, 1, wide);
  const Tensor counted = ne(rows.target, ignore_index).to(lp.dtype());
  Tensor loss, weight_sum = sum(counted);
  if (!weight.defined() && reduction == Reduction::Mean) {
    loss = nll_mean(lp, rows.target, ignore_index);
  } else {
    auto [per_row, total] = weighted_nll_rows(kCrossEntropy, lp, rows.target, weight, ignore_index);
    loss = reduce_rows(per_row, total, reduction, rows.target_shape, kCrossEntropy);
    weight_sum = total;
  }
  if (label_smoothing == 0) return scope.finish(loss);
  const Tensor against_all = weight.defined() ? sum(lp * weight.to(lp.dtype()), {1}) : sum(lp, {1});
  const Tensor smooth = reduce_rows(-against_all * counted, weight_sum, reduction, rows.target_shape, kCrossEntropy);
  const double classes = static_cast<double>(rows.input.size(1));
  return scope.finish(loss * (1 - label_smoothing) + smooth * (label_smoothing / classes));
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
