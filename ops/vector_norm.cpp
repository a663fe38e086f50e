// Vector norms and distances: norm, dist, normalize, cosine_similarity, pairwise_distance,
// cdist, pdist and renorm. norm is one reduction kernel (ReduceKind::Norm); the others are
// composed of ops inside their own record, so autocast acts once, at the outer op.
#include <cmath>

#include <ampgrad/autograd/node.h>
#include <ampgrad/core/kernels.h>
#include <ampgrad/ops/internal.h>
#include <ampgrad/ops/nn_ops.h>
#include <ampgrad/ops/op_scope.h>
#include <ampgrad/ops/ops.h>
#include <ampgrad/ops/reduce_geometry.h>

namespace ampgrad {

using amp::Category;
using autograd::Grads;
using Saved = std::vector<Tensor>;

namespace {

const OpInfo kNorm{"norm", Category::fp32, true, "accumulation: sums of powers outgrow float16"};
const OpInfo kDist{"dist", Category::fp32, true, "accumulation: sums of powers outgrow float16"};
const OpInfo kNormalize{"normalize", Category::fp32, true, "a norm: sums of powers outgrow float16 (PyTorch's calls norm, fp32)"};
const OpInfo kCosineSimilarity{"cosine_similarity", Category::fp32, true, "norms and a sum of products"};
const OpInfo kPairwiseDistance{"pairwise_distance", Category::fp32, true,
                                "a norm: sums of powers outgrow float16 (PyTorch's calls norm, fp32)"};
const OpInfo kCdist{"cdist", Category::fp32, true, "norms of differences: sums of powers outgrow float16"};
const OpInfo kPdist{"pdist", Category::fp32, true, "norms of differences: sums of powers outgrow float16"};
const OpInfo kRenorm{"renorm", Category::fp32, true, "norms: sums of powers outgrow float16"};

void check_p(const OpInfo& op, double p) {
  AG_CHECK(p >= 0 || p == -INFINITY, "{}: p must be >= 0 (or -inf), got {}", op.name, p);
}

Tensor isnan_mask(const Tensor& x) { return ne(x, x); }

// d norm / d x for norm y (expanded to x's shape) and incoming gradient g (likewise), as
// PyTorch's norm_backward: where the norm is 0 the gradient is 0.
Tensor norm_grad(const Tensor& g, const Tensor& x, const Tensor& y, double p, const Shape& dims) {
  if (p == 0) return zeros_like(x);
  if (p == 1) return g * sign(x);
  const Tensor zero = zeros({}, x.options());
  if (p == 2) return x * where(eq(y, 0.0), zero, g / y);
  if (std::isinf(p)) {
    // Ties share the gradient evenly, as amax's; NaNs are the maximum.
    const Tensor mask = where(isnan_mask(x), ones({}, x.options()), eq(abs(x), y).to(x.dtype()));
    return sign(x) * (g / expand_back(sum(mask, dims, true), x.shape(), dims, true)) * mask;
  }
  if (p < 1) {
    const Tensor scaled = where(eq(x, 0.0), zero, sign(x) * pow(abs(x), p - 1));
    return scaled * g * pow(y, 1 - p);
  }
  const Tensor scaled = p < 2 ? sign(x) * pow(abs(x), p - 1) : x * pow(abs(x), p - 2);
  return scaled * where(eq(y, 0.0), zero, g / pow(y, p - 1));
}

// The last dims' geometry of cdist: [..., P, M] and [..., R, M].
void check_cdist(const Tensor& a, const Tensor& b) {
  AG_CHECK(a.dim() >= 2 && b.dim() >= 2, "cdist: expected inputs of at least 2 dims [..., P, M] and [..., R, M], got {} and {}",
           a.desc(), b.desc());
  AG_CHECK(a.size(-1) == b.size(-1), "cdist: x1 {} and x2 {} must have the same number of features (last dim)",
           a.desc(), b.desc());
}

}  // namespace

Tensor norm(const Tensor& a0, double p, const Shape& dims, bool keepdim) {
  Tensor a = a0;
  OpScope scope(kNorm, a);
  check_defined(kNorm, a, "input");
  AG_CHECK(is_floating(a.dtype()), "norm: expected a floating input, got {}", a.desc());
  check_p(kNorm, p);
  Tensor out = reduce_forward(kNorm, ReduceKind::Norm, a, dims, keepdim, a.dtype(), p).first;
  if (autograd::any_requires_grad({&a})) {
    autograd::record(kNorm, out, {a}, {a, out.detach()}, [p, dims, keepdim](const Tensor& g, const Saved& s) {
      const Shape& shape = s[0].shape();
      return Grads{norm_grad(expand_back(g, shape, dims, keepdim), s[0], expand_back(s[1], shape, dims, keepdim), p,
                             dims)};
    });
  }
  return scope.finish(out);
}

Tensor dist(const Tensor& a0, const Tensor& b0, double p) {
  Tensor a = a0, b = b0;
  OpScope scope(kDist, a, b);
  check_defined(kDist, a, "input");
  check_defined(kDist, b, "other");
  check_p(kDist, p);
  return scope.finish(norm(a - b, p));
}

Tensor normalize(const Tensor& x0, double p, int64_t dim, double eps) {
  Tensor x = x0;
  OpScope scope(kNormalize, x);
  check_defined(kNormalize, x, "input");
  const int64_t d = wrap_dim(kNormalize.name, dim, x.dim());
  // x / max(||x||_p, eps) along dim, as torch.nn.functional.normalize.
  return scope.finish(x / clamp(norm(x, p, {d}, true), eps, std::nullopt));
}

Tensor cosine_similarity(const Tensor& a0, const Tensor& b0, int64_t dim, double eps) {
  Tensor a = a0, b = b0;
  OpScope scope(kCosineSimilarity, a, b);
  check_defined(kCosineSimilarity, a, "x1");
  check_defined(kCosineSimilarity, b, "x2");
  const Shape shape = broadcast_shapes(kCosineSimilarity.name, a.shape(), b.shape());
  const int64_t d = wrap_dim(kCosineSimilarity.name, dim, static_cast<int64_t>(shape.size()));
  const Tensor x1 = expand(a, shape), x2 = expand(b, shape);
  // As PyTorch 2: each input divided by its norm first (the result stays in [-1, 1]); the
  // norms are clamped at eps in value only, the gradient taking the unclamped norm.
  auto unit = [&](const Tensor& x) {
    const Tensor n = norm(x, 2, {d}, true);
    const Tensor nd = n.detach();
    return x / (n + (clamp(nd, eps, std::nullopt) - nd));
  };
  return scope.finish(sum(unit(x1) * unit(x2), {d}));
}

Tensor pairwise_distance(const Tensor& a0, const Tensor& b0, double p, double eps, bool keepdim) {
  Tensor a = a0, b = b0;
  OpScope scope(kPairwiseDistance, a, b);
  check_defined(kPairwiseDistance, a, "x1");
  check_defined(kPairwiseDistance, b, "x2");
  check_p(kPairwiseDistance, p);
  // ||x1 - x2 + eps||_p over the last dim, as PyTorch's.
  const Tensor diff = a - b + eps;
  AG_CHECK(diff.dim() >= 1, "pairwise_distance: expected inputs with a feature dim, got {} and {}", a.desc(), b.desc());
  return scope.finish(norm(diff, p, {diff.dim() - 1}, keepdim));
}

Tensor cdist(const Tensor& a0, const Tensor& b0, double p) {
  Tensor a = a0, b = b0;
  OpScope scope(kCdist, a, b);
  check_defined(kCdist, a, "x1");
  check_defined(kCdist, b, "x2");
  check_p(kCdist, p);
  check_cdist(a, b);
  // Every pair's difference, [..., P, R, M], and its norm over M: exact (PyTorch's matrix-
  // product shortcut for p = 2 cancels digits), at P * R * M memory.
  const Tensor diff = unsqueeze(a, -2) - unsqueeze(b, -3);
  return scope.finish(norm(diff, p, {diff.dim() - 1}));
}

Tensor pdist(const Tensor& x0, double p) {
  Tensor x = x0;
  OpScope scope(kPdist, x);
  check_defined(kPdist, x, "input");
  check_p(kPdist, p);
  AG_CHECK(x.dim() == 2, "pdist: expected a 2-D input [N, M], got {}", x.desc());
  // The upper triangle (i < j, row by row) of cdist(x, x).
  const int64_t n = x.size(0);
  std::vector<int64_t> pairs;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = i + 1; j < n; ++j) pairs.push_back(i * n + j);
  const Tensor idx = tensor(pairs, {static_cast<int64_t>(pairs.size())}).to(x.device());
  const Tensor all = norm(unsqueeze(x, 1) - unsqueeze(x, 0), p, {2});
  return scope.finish(index_select(all.reshape({n * n}), 0, idx));
}

Tensor renorm(const Tensor& x0, double p, int64_t dim, double maxnorm) {
  Tensor x = x0;
  OpScope scope(kRenorm, x);
  check_defined(kRenorm, x, "input");
  AG_CHECK(p > 0, "renorm: p must be > 0, got {}", p);
  AG_CHECK(maxnorm >= 0, "renorm: maxnorm must be >= 0, got {}", maxnorm);
  const int64_t d = wrap_dim(kRenorm.name, dim, x.dim());
  Shape others;
  for (int64_t i = 0; i < x.dim(); ++i)
    if (i != d) others.push_back(i);
  // Each slice along dim whose norm exceeds maxnorm is scaled to it (PyTorch's 1e-7 guard).
  const Tensor n = others.empty() ? abs(x) : norm(x, p, others, true);
  const Tensor factor = where(gt(n, maxnorm), full({}, maxnorm, x.options()) / (n + 1e-7), ones({}, x.options()));
  return scope.finish(x * factor);
}

}  // namespace ampgrad
