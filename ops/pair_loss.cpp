// The losses composed of ops: margin_ranking, cosine_embedding, triplet_margin, multi_margin
// and multilabel_margin. Each is one record (its autocast category applies once, at the
// outer op) whose body is PyTorch's formula in ops, so autograd differentiates it.
#include <ampgrad/ops/internal.h>
#include <ampgrad/ops/nn_ops.h>
#include <ampgrad/ops/op_scope.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad {

using amp::Category;

namespace {

const OpInfo kMarginRanking{"margin_ranking_loss", Category::fp32, true, "losses: as PyTorch; accumulation"};
const OpInfo kCosineEmbedding{"cosine_embedding_loss", Category::fp32, true, "losses: norms and sums of products"};
const OpInfo kTripletMargin{"triplet_margin_loss", Category::fp32, true, "losses: norms of differences"};
const OpInfo kMultiMargin{"multi_margin_loss", Category::fp32, true, "losses: as PyTorch; accumulation"};
const OpInfo kMultilabelMargin{"multilabel_margin_loss", Category::fp32, true, "losses: as PyTorch; accumulation"};

void check_same_shape(const OpInfo& op, const Tensor& a, const char* an, const Tensor& b, const char* bn) {
  check_defined(op, a, an);
  check_defined(op, b, bn);
  check_same_device(op, a, b);
  AG_CHECK(a.shape() == b.shape(), "{}: {} {} and {} {} must have the same shape", op.name, an, a.desc(), bn, b.desc());
}

void check_floating(const OpInfo& op, const Tensor& t, const char* what) {
  AG_CHECK(is_floating(t.dtype()), "{}: expected a floating {}, got {}", op.name, what, t.desc());
}

// Class targets [N] (or 0-dim for one sample) for input [N, C] (or [C]), int64, in range when
// they are on the CPU (a CUDA target is checked by the kernel, which reports it at the next
// synchronization: Note [Device-side errors] in cuda/device_error.h).
void check_class_targets(const OpInfo& op, const Tensor& input, const Tensor& target) {
  check_defined(op, target, "target");
  check_same_device(op, input, target);
  AG_CHECK(input.dim() == 1 || input.dim() == 2, "{}: expected input [N, C] or [C], got {}", op.name, input.desc());
  const Shape want = input.dim() == 2 ? Shape{input.size(0)} : Shape{};
  AG_CHECK(target.dtype() == kInt64 && (target.shape() == want || (input.dim() == 1 && target.shape() == Shape{1})),
           "{}: expected an int64 target {} of class indices for input {}, got {}", op.name, shape_str(want),
           input.desc(), target.desc());
  if (target.is_cpu()) {
    const int64_t c = input.size(-1);
    for (int64_t t : target.to_vector<int64_t>())
      AG_CHECK(t >= 0 && t < c, "{}: target {} is out of range for {} classes", op.name, t, c);
  }
}

// max(x, 0) with clamp_min's gradient (g where x >= 0), as PyTorch's hinge losses.
Tensor hinge(const Tensor& x) { return clamp(x, 0.0, std::nullopt); }

}  // namespace

Tensor reduce_loss(const Tensor& per_sample, Reduction reduction, const OpInfo& op) {
  switch (reduction) {
    case Reduction::None: return per_sample;
    case Reduction::Mean: return mean(per_sample);
    case Reduction::Sum: return sum(per_sample);
    case Reduction::BatchMean: break;
  }
  AG_CHECK(false, "{}: reduction batchmean is kl_div's only", op.name);
  return Tensor();
}

Tensor margin_ranking_loss(const Tensor& a0, const Tensor& b0, const Tensor& y0, double margin, Reduction reduction) {
  Tensor a = a0, b = b0, y = y0;
  OpScope scope(kMarginRanking, a, b, y);
  check_same_shape(kMarginRanking, a, "input1", b, "input2");
  check_same_shape(kMarginRanking, a, "input1", y, "target");
  check_floating(kMarginRanking, a, "input1");
  // max(0, -y (x1 - x2) + margin), labels y in {1, -1}; clamp_min's gradient passes at 0, as
  // PyTorch's (relu's would stop there, and equal scores would never separate).
  return scope.finish(reduce_loss(hinge(-y * (a - b) + margin), reduction, kMarginRanking));
}

Tensor cosine_embedding_loss(const Tensor& a0, const Tensor& b0, const Tensor& y0, double margin,
                             Reduction reduction) {
  Tensor a = a0, b = b0, y = y0;
  OpScope scope(kCosineEmbedding, a, b, y);
  check_same_shape(kCosineEmbedding, a, "input1", b, "input2");
  check_floating(kCosineEmbedding, a, "input1");
  AG_CHECK(a.dim() == 1 || a.dim() == 2, "cosine_embedding_loss: expected inputs [N, D] or [D], got {}", a.desc());
  const Shape want = a.dim() == 2 ? Shape{a.size(0)} : Shape{};
  check_defined(kCosineEmbedding, y, "target");
  AG_CHECK(y.shape() == want, "cosine_embedding_loss: expected a target {} of labels 1 and -1 for inputs {}, got {}",
           shape_str(want), a.desc(), y.desc());
  // PyTorch's formula: cos = <x1, x2> / sqrt((|x1|^2 + 1e-12)(|x2|^2 + 1e-12)); 1 - cos where
  // y == 1, max(0, cos - margin) where y == -1.
  const int64_t d = a.dim() - 1;
  const Tensor cos = sum(a * b, {d}) / sqrt((sum(a * a, {d}) + 1e-12) * (sum(b * b, {d}) + 1e-12));
  const Tensor zero = zeros({}, cos.options());
  const Tensor per = where(eq(y, 1), rsub(cos, 1), zero) + where(eq(y, -1), hinge(cos - margin), zero);
  return scope.finish(reduce_loss(per, reduction, kCosineEmbedding));
}

Tensor triplet_margin_loss(const Tensor& anchor0, const Tensor& positive0, const Tensor& negative0, double margin,
                           double p, double eps, bool swap, Reduction reduction) {
  Tensor anchor = anchor0, positive = positive0, negative = negative0;
  OpScope scope(kTripletMargin, anchor, positive, negative);
  check_same_shape(kTripletMargin, anchor, "anchor", positive, "positive");
  check_same_shape(kTripletMargin, anchor, "anchor", negative, "negative");
  check_floating(kTripletMargin, anchor, "anchor");
  const Tensor d_ap = pairwise_distance(anchor, positive, p, eps);
  Tensor d_an = pairwise_distance(anchor, negative, p, eps);
  if (swap) d_an = minimum(d_an, pairwise_distance(positive, negative, p, eps));
  return scope.finish(reduce_loss(hinge(d_ap - d_an + margin), reduction, kTripletMargin));
}

Tensor multi_margin_loss(const Tensor& input0, const Tensor& target0, int64_t p, double margin, const Tensor& weight0,
                         Reduction reduction) {
  Tensor input = input0, target = target0, weight = weight0;
  OpScope scope(kMultiMargin, input, target, weight);
  check_defined(kMultiMargin, input, "input");
  check_floating(kMultiMargin, input, "input");
  check_class_targets(kMultiMargin, input, target);
  AG_CHECK(p == 1 || p == 2, "multi_margin_loss: p must be 1 or 2, got {}", p);
  const int64_t c = input.size(-1);
  AG_CHECK(!weight.defined() || weight.shape() == Shape{c}, "multi_margin_loss: weight must be [{}], got {}", c,
           weight.desc());
  const Tensor x = input.dim() == 1 ? unsqueeze(input, 0) : input;
  const Tensor t = target.reshape({x.size(0), 1});
  // sum over classes j != y of max(0, margin - x[y] + x[j])^p (times weight[y]), over C.
  const Tensor onehot = eq(arange(c, TensorOptions(kInt64).device(x.device())).view({1, c}), t);
  const Tensor x_y = sum(where(onehot, x, zeros({}, x.options())), {1}, true);
  Tensor terms = relu(rsub(x_y, margin) + x);
  if (p == 2) terms = terms * terms;
  // weight[y] of each row as a masked sum over classes: weight's gradient is then a sum over
  // the batch in float (index_select's adjoint would add in the 16-bit dtype, atomically).
  if (weight.defined()) terms = terms * sum(where(onehot, weight.reshape({1, c}), zeros({}, x.options())), {1}, true);
  Tensor per = sum(where(onehot, zeros({}, x.options()), terms), {1}) / static_cast<double>(c);
  if (input.dim() == 1) per = per.reshape({});
  return scope.finish(reduce_loss(per, reduction, kMultiMargin));
}

Tensor multilabel_margin_loss(const Tensor& input0, const Tensor& target0, Reduction reduction) {
  Tensor input = input0, target = target0;
  OpScope scope(kMultilabelMargin, input, target);
  check_same_shape(kMultilabelMargin, input, "input", target, "target");
  check_floating(kMultilabelMargin, input, "input");
  AG_CHECK(target.dtype() == kInt64, "multilabel_margin_loss: expected an int64 target, got {}", target.desc());
  AG_CHECK(input.dim() == 1 || input.dim() == 2, "multilabel_margin_loss: expected input [N, C] or [C], got {}",
           input.desc());
  const int64_t c = input.size(-1);
  if (target.is_cpu()) {
    for (int64_t t : target.to_vector<int64_t>())
      AG_CHECK(t >= -1 && t < c, "multilabel_margin_loss: target {} is out of range for {} classes", t, c);
  }
  const Tensor x = input.dim() == 1 ? unsqueeze(input, 0) : input;
  const Tensor y = target.dim() == 1 ? unsqueeze(target, 0) : target;
  // Each row's targets are its entries before the first -1. count[n, j]: how often class j is
  // one of them (PyTorch's loop visits a repeated target again); the loss sums, over targets j
  // and non-targets i, max(0, 1 - (x[j] - x[i])), over C.
  const Tensor valid = eq(cumsum(eq(y, -1), 1), 0);                             // [N, C]
  const Tensor classes = arange(c, TensorOptions(kInt64).device(x.device())).view({1, 1, c});
  const Tensor hits = eq(unsqueeze(y, 2), classes).to(x.dtype()) * unsqueeze(valid, 2).to(x.dtype());  // [N, k, j]
  const Tensor count = sum(hits, {1});                                           // [N, C]
  const Tensor other = eq(count, 0.0).to(x.dtype());
  const Tensor pairs = relu(rsub(unsqueeze(x, 2) - unsqueeze(x, 1), 1));       // [N, j, i]
  Tensor per = sum(pairs * unsqueeze(count, 2) * unsqueeze(other, 1), {1, 2}) / static_cast<double>(c);
  if (input.dim() == 1) per = per.reshape({});
  return scope.finish(reduce_loss(per, reduction, kMultilabelMargin));
}

}  // namespace ampgrad
