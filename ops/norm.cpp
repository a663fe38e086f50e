// Normalization and dropout: batch_norm and layer_norm (fused kernels where they can, composites of
// differentiable ops elsewhere), group_norm, dropout.
#include <ampgrad/amp/policy.h>
#include <ampgrad/autograd/multi_output.h>
#include <ampgrad/autograd/node.h>
#include <ampgrad/core/generator.h>
#include <ampgrad/core/kernels.h>
#include <ampgrad/ops/internal.h>
#include <ampgrad/ops/nn_ops.h>
#include <ampgrad/ops/op_scope.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad {

using amp::Category;

namespace {
const OpInfo kBatchNorm{"batch_norm", Category::passthrough, true,
                        "statistics computed in float32 inside; output in the input's dtype (as cuDNN)"};
const OpInfo kLayerNorm{"layer_norm", Category::fp32, true, "accumulation: mean and variance over a row"};
const OpInfo kGroupNorm{"group_norm", Category::fp32, true, "accumulation: mean and variance over a group"};
const OpInfo kDropout{"dropout", Category::passthrough, true, "a mask multiply: exact in any dtype"};

Tensor as_float32(const Tensor& t) { return t.defined() && t.dtype() != kFloat32 && t.dtype() != kFloat64 ? t.to(kFloat32) : t; }

// Note [Fused batch norm]
// As a composite of differentiable ops, batch norm cost about fifteen kernels forward and
// twenty backward per layer (mean, var, the running-statistic updates, the normalization's
// products, their gradients), and under autocast two casts each way more, which made a
// small CNN's AMP step slower than its float32 one. When x is NCHW-contiguous, channels-last
// or 2-D and the per-channel tensors are in the accumulation dtype (float32, float64 for
// float64 x; the usual case, also under autocast, where x is float16 and the layer's
// parameters float32), it runs as kernels of its own: the statistics (shifted sums, so the
// variance does not cancel) and the running-statistic update in one launch, the normalization
// in one, written in x's dtype and layout; backward, the per-channel sums (grad_weight,
// grad_bias) in one and the input gradient in one. Everything else takes the composite.
struct BnGeometry {
  int64_t outer = 0, inner = 0;
  bool ok = false;
};
BnGeometry bn_geometry(const Tensor& x) {
  int64_t spatial = 1;
  for (int64_t d = 2; d < x.dim(); ++d) spatial *= x.size(d);
  if (x.is_contiguous()) return {x.size(0), spatial, true};
  if (x.dim() == 4 && is_channels_last(x)) return {x.size(0) * spatial, 1, true};
  return {};
}

Tensor batch_norm_fused(const Tensor& x, const BnGeometry& geo, const Tensor& running_mean, const Tensor& running_var,
                        const Tensor& weight, const Tensor& bias, bool training, double momentum, double eps) {
  const DType acc = x.dtype() == kFloat64 ? kFloat64 : kFloat32;
  const int64_t c = x.size(1);
  Tensor mean, invstd;
  if (training) {
    mean = empty_as({c}, acc, x);
    invstd = empty_as({c}, acc, x);
    kernel::batch_norm_stats(mean.device(), x, geo.outer, geo.inner, eps, mean, invstd, running_mean, running_var, momentum);
    if (running_mean.defined()) {
      running_mean.bump_version();
      running_var.bump_version();
    }
  } else {
    NoGradGuard no_grad;
    mean = running_mean.clone();
    invstd = rsqrt(running_var + eps);
  }
  Tensor y = empty_preserving_layout(x);
  kernel::batch_norm_apply(y.device(), x, geo.outer, geo.inner, mean, invstd, weight, bias, y);
  if (autograd::any_requires_grad({&x, &weight, &bias})) {
    autograd::record(kBatchNorm, y, {x, weight, bias}, {x, weight, mean, invstd},
                     [geo, training, need_x = x.requires_grad(), need_w = weight.defined() && weight.requires_grad(),
                      need_b = bias.defined() && bias.requires_grad()](const Tensor& g, const std::vector<Tensor>& s) {
                       const Tensor& xs = s[0];
                       Tensor dy = g;
                       if (dy.strides() != xs.strides()) {  // the kernels index dy as x
                         dy = empty_preserving_layout(xs);
                         dy.copy_(g);
                       }
                       Tensor gx = need_x ? empty_preserving_layout(xs) : Tensor();
                       Tensor gw = need_w ? empty_like(s[2]) : Tensor(), gb = need_b ? empty_like(s[2]) : Tensor();
                       kernel::batch_norm_backward(dy.device(), dy, xs, geo.outer, geo.inner, s[2], s[3], s[1], training, gx, gw,
                                                   gb);
                       return autograd::Grads{gx, gw, gb};
                     });
  }
  return y;
}
// Note [Fused layer norm]
// As a composite (mean, var, the normalization's products and their gradients), layer norm
// cost about eight kernels forward and fifteen backward, a GPT's largest share of launches
// after its GEMMs. On CUDA, for float32 and float64 inputs whose weight and bias (when given)
// have the input's dtype (under autocast layer_norm is an fp32 op, so its inputs arrive as
// float32), it runs as kernels of its own (cuda/norm.cu): a warp per row computes the mean,
// then the variance of the deviations (two passes over the row, so it does not cancel), and
// writes the output and the row's mean and rstd; backward, the input gradient and each
// block's column sums for the weight and bias gradients in one launch, those sums added in
// block order by a second (Note [Layer norm kernels] in cuda/norm.cu): deterministic,
// no atomics. Under autocast the forward also writes the output in the autocast dtype for the
// next lower op, and the backward takes that copy's gradient (Note [Ready casts] in
// amp/autocast.h). Everything else (the CPU, 16-bit parameters) takes the composite.
Tensor layer_norm_fused(const Tensor& x, const Shape& normalized_shape, int64_t rows, const Tensor& weight,
                        const Tensor& bias, double eps) {
  const Tensor xc = contiguous(x);
  Tensor y = empty(x.shape(), x.options());
  Tensor mu = empty_as({rows}, x.dtype(), x), rstd = empty_as({rows}, x.dtype(), x);
  // Under autocast, y in its dtype too, for the next lower op (Note [Ready casts]).
  Tensor y_low;
  if (x.dtype() == kFloat32)
    if (const std::optional<DType> low = amp::detail::ready_cast_dtype(x.device()); low && is_reduced_float(*low))
      y_low = empty(x.shape(), x.options().dtype(*low));
  kernel::layer_norm_forward(x.device(), xc, weight, bias, eps, y, mu, rstd, y_low);
  if (autograd::any_requires_grad({&x, &weight, &bias})) {
    // The autocast dtype of the forward: the input gradient's rounding the node below may want.
    const std::optional<DType> low = y_low.defined() ? std::optional<DType>(y_low.dtype()) : std::nullopt;
    autograd::MultiBackwardFn fn = [normalized_shape, low, need_x = x.requires_grad(),
                                    need_w = weight.defined() && weight.requires_grad(),
                                    need_b = bias.defined() && bias.requires_grad()](const std::vector<Tensor>& g,
                                                                                     const std::vector<Tensor>& s) {
      const Tensor dy = g[0].defined() ? contiguous(g[0]) : Tensor();
      const Tensor dy_low = g.size() > 1 && g[1].defined() ? contiguous(g[1]) : Tensor();
      if (!dy.defined() && !dy_low.defined()) return autograd::Grads{Tensor(), Tensor(), Tensor()};
      // The input gradient added into the engine's sum so far (Note [Accumulating formulas] in
      // autograd/engine.cpp), and then rounded for the node below (Note [Gradient copies]).
      Tensor gx = need_x ? autograd::detail::pending_gradient(0, s[0].shape(), s[0].dtype()) : Tensor();
      const bool accumulate = gx.defined();
      if (need_x && !accumulate) gx = empty(s[0].shape(), s[0].options());
      const Tensor gx_low = need_x && low && autograd::detail::wants_gradient_copy(0, *low)
                                ? empty(s[0].shape(), s[0].options().dtype(*low))
                                : Tensor();
      const Tensor gw = need_w ? empty(normalized_shape, s[0].options()) : Tensor();
      const Tensor gb = need_b ? empty(normalized_shape, s[0].options()) : Tensor();
      kernel::layer_norm_backward(s[0].device(), dy, dy_low, s[0], s[1], s[2], s[3], gx, accumulate, gx_low, gw, gb);
      if (accumulate) gx.bump_version();  // written in place, as the engine's add_ would
      if (gx_low.defined()) autograd::detail::offer_gradient_copy(gx, gx_low);
      return autograd::Grads{gx, gw, gb};
    };
    if (y_low.defined()) {
      autograd::record_outputs(kLayerNorm, {y, y_low}, {x, weight, bias}, {xc, weight, mu, rstd}, std::move(fn));
    } else {
      autograd::record(kLayerNorm, y, {x, weight, bias}, {xc, weight, mu, rstd},
                       [fn = std::move(fn)](const Tensor& g, const std::vector<Tensor>& s) { return fn({g}, s); });
    }
  }
  if (y_low.defined()) amp::detail::offer_cast(y, y_low);
  return y;
}
}  // namespace

Tensor batch_norm(const Tensor& x0, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight0,
                  const Tensor& bias0, bool training, double momentum, double eps) {
  Tensor x = x0, weight = weight0, bias = bias0;
  OpScope scope(kBatchNorm, x, weight, bias);
  check_defined(kBatchNorm, x, "input");
  AG_CHECK(x.dim() >= 2, "batch_norm: expected an input [N, C, ...], got {}", x.desc());
  AG_CHECK(is_floating(x.dtype()), "batch_norm: expected a floating input, got {}", x.desc());
  const int64_t c = x.size(1);
  for (const Tensor* t : std::initializer_list<const Tensor*>{&running_mean, &running_var, &weight, &bias})
    if (t->defined())
      AG_CHECK(t->dim() == 1 && t->size(0) == c && t->device() == x.device(),
               "batch_norm: per-channel tensors must be [{}] on {}, got {}", c, x.device().str(), t->desc());
  AG_CHECK(training || (running_mean.defined() && running_var.defined()),
           "batch_norm: evaluation mode needs running_mean and running_var");
  AG_CHECK(running_mean.defined() == running_var.defined(),
           "batch_norm: running_mean and running_var come together; got {} and {}",
           running_mean.defined() ? running_mean.desc() : "none", running_var.defined() ? running_var.desc() : "none");
  const int64_t count = c > 0 ? x.numel() / c : 0;  // values per channel
  if (training)
    AG_CHECK(count > 1, "batch_norm: expected more than 1 value per channel when training, got input {}", x.desc());
  const DType acc = x.dtype() == kFloat64 ? kFloat64 : kFloat32;
  bool fusable = true;
  for (const Tensor* t : std::initializer_list<const Tensor*>{&running_mean, &running_var, &weight, &bias})
    fusable = fusable && (!t->defined() || (t->dtype() == acc && t->is_contiguous()));
  // (Evaluation mode has both running statistics: checked above.)
  if (const BnGeometry geo = bn_geometry(x); fusable && geo.ok && x.numel() > 0) {
    return scope.finish(batch_norm_fused(x, geo, running_mean, running_var, weight, bias, training, momentum, eps));
  }
  Shape dims{0}, bshape(x.dim(), 1);
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  bshape[1] = c;
  Tensor xf = as_float32(x);
  Tensor mu, var;
  if (training) {
    mu = mean(xf, dims, true);
    var = ampgrad::var(xf, dims, 0.0, true);
    if (running_mean.defined()) {
      NoGradGuard no_grad;
      Tensor rm = running_mean, rv = running_var;
      rm.copy_(rm * (1 - momentum) + mu.reshape({c}) * momentum);
      rv.copy_(rv * (1 - momentum) + var.reshape({c}) * (momentum * count / (count - 1.0)));
    }
  } else {
    mu = as_float32(running_mean).reshape(bshape);
    var = as_float32(running_var).reshape(bshape);
  }
  Tensor y = (xf - mu) * rsqrt(var + eps);
  if (weight.defined()) y = y * as_float32(weight).reshape(bshape);
  if (bias.defined()) y = y + as_float32(bias).reshape(bshape);
  return scope.finish(y.dtype() == x.dtype() ? y : y.to(x.dtype()));
}

Tensor layer_norm(const Tensor& x0, const Shape& normalized_shape, const Tensor& weight0, const Tensor& bias0,
                  double eps) {
  Tensor x = x0, weight = weight0, bias = bias0;
  OpScope scope(kLayerNorm, x, weight, bias);
  check_defined(kLayerNorm, x, "input");
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  AG_CHECK(k >= 1 && x.dim() >= k &&
               Shape(x.shape().end() - k, x.shape().end()) == normalized_shape,
           "layer_norm: normalized_shape {} does not match the last dims of input {}", shape_str(normalized_shape),
           x.desc());
  for (const Tensor* t : std::initializer_list<const Tensor*>{&weight, &bias})
    if (t->defined())
      AG_CHECK(t->shape() == normalized_shape, "layer_norm: weight and bias must be {}, got {}",
               shape_str(normalized_shape), t->desc());
  const int64_t n = shape_numel(normalized_shape), rows = n > 0 ? x.numel() / n : 0;
  bool fusable = kernel::layer_norm_forward.has(x.device()) && (x.dtype() == kFloat32 || x.dtype() == kFloat64) &&
                 rows > 0 && n > 0 && rows <= int64_t{65535} * 64;
  for (const Tensor* t : std::initializer_list<const Tensor*>{&weight, &bias})
    fusable = fusable && (!t->defined() || (t->dtype() == x.dtype() && t->is_contiguous() && t->device() == x.device()));
  if (fusable) return scope.finish(layer_norm_fused(x, normalized_shape, rows, weight, bias, eps));
  Shape dims;
  for (int64_t d = x.dim() - k; d < x.dim(); ++d) dims.push_back(d);
  Tensor mu = mean(x, dims, true);
  Tensor var = ampgrad::var(x, dims, 0.0, true);
  Tensor y = (x - mu) * rsqrt(var + eps);
  if (weight.defined()) y = y * weight;
  if (bias.defined()) y = y + bias;
  return scope.finish(y);
}

Tensor group_norm(const Tensor& x0, int64_t num_groups, const Tensor& weight0, const Tensor& bias0, double eps) {
  Tensor x = x0, weight = weight0, bias = bias0;
  OpScope scope(kGroupNorm, x, weight, bias);
  check_defined(kGroupNorm, x, "input");
  AG_CHECK(x.dim() >= 2, "group_norm: expected input [N, C, *], got {}", x.desc());
  const int64_t n = x.size(0), c = x.size(1);
  AG_CHECK(num_groups > 0 && c % num_groups == 0, "group_norm: {} channels of input {} do not split into {} groups", c,
           x.desc(), num_groups);
  for (const Tensor* t : std::initializer_list<const Tensor*>{&weight, &bias})
    if (t->defined())
      AG_CHECK(t->shape() == Shape{c}, "group_norm: weight and bias must be [{}], got {}", c, t->desc());
  // Each sample's channels in num_groups groups, normalized over the group's channels and
  // positions (biased variance), then a per-channel affine.
  if (x.numel() == 0) return scope.finish(x.clone());  // as PyTorch: an empty result
  const Tensor xg = x.reshape({n, num_groups, x.numel() / (n * num_groups)});
  const Tensor mu = mean(xg, {2}, true);
  const Tensor v = ampgrad::var(xg, {2}, 0.0, true);
  Tensor y = ((xg - mu) * rsqrt(v + eps)).reshape(x.shape());
  Shape per_channel(x.dim(), 1);
  per_channel[1] = c;
  if (weight.defined()) y = y * weight.reshape(per_channel);
  if (bias.defined()) y = y + bias.reshape(per_channel);
  return scope.finish(y);
}

Tensor dropout(const Tensor& x0, double p, bool training) {
  Tensor x = x0;
  OpScope scope(kDropout, x);
  check_defined(kDropout, x, "input");
  AG_CHECK(p >= 0 && p <= 1, "dropout: probability must be in [0, 1], got {}", p);
  if (!training || p == 0) return scope.finish(x);
  AG_CHECK(is_floating(x.dtype()), "dropout: expected a floating input, got {}", x.desc());
  if (p == 1) return scope.finish(x * 0.0);
  Tensor mask = empty(x.shape(), x.options());
  // One draw from the default generator seeds this mask: reproducible under manual_seed.
  const uint64_t seed = default_generator().next_u64();
  if (mask.numel()) kernel::dropout_mask(mask.device(), mask, 1 - p, 1 / (1 - p), seed, 0);
  return scope.finish(x * mask);
}

}  // namespace ampgrad
