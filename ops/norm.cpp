// Normalization and dropout: batch_norm and layer_norm (fused kernels where they can, composites of
// differentiable ops elsewhere), group_norm, dropout.
#include <ampgrad/amp/cast_reuse.h>
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
// fp32 as layer_norm, reading 16-bit inputs as they are: the add promotes, as add's category
// (a float16 branch joins the float32 stream uncast), and the sum is normalized in float32.
const OpInfo kAddLayerNorm{"add_layer_norm", Category::fp32, true,
                           "not a PyTorch op: its pair add (promote) then layer_norm (fp32, accumulation: mean "
                           "and variance over a row); 16-bit inputs are read as they are",
                           {}, /*reads_16bit=*/true};
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
// float32), it runs as kernels of its own (cuda/layer_norm.cu): a warp per row computes the mean,
// then the variance of the deviations (two passes over the row, so it does not cancel), and
// writes the output and the row's mean and rstd; backward, the input gradient and each
// block's column sums for the weight and bias gradients in one launch, those sums added in
// block order by a second (Note [Layer norm kernels] in cuda/layer_norm.cu): deterministic,
// no atomics. Where a later cast would take it (amp::ready_cast_dtype, Note [Cast reuse] in
// amp/cast_reuse.h), the forward also writes the output in the autocast dtype for the next
// lower op, as a second output whose gradient the backward takes in the same kernel; and the
// backward's kernel may add its input gradient into the engine's sum and write its 16-bit
// rounding (Note [Backward context] in autograd/backward_context.h). Everything else (the CPU,
// 16-bit parameters) takes the composite.
//
// Note [Add and layer norm]
// A pre-norm transformer adds each sublayer's output into the residual stream and normalizes
// the sum for the next sublayer: s = x + branch; h = layer_norm(s). As two ops on CUDA that
// is two launches (the add, then the layer norm reading s back); add_layer_norm is one: the
// forward kernel reads x and residual, writes s and the normalized row (and its 16-bit copy),
// so the small GPT's step loses 9 launches. Backward, s's gradient (the residual stream's,
// from the ops above) is added to layer_norm's input gradient in the same kernel, where the
// unfused graph's engine adds it: the same adds in the same order, so the values and
// gradients are the pair's bit for bit;
// the residual's gradient is that sum, rounded in the same pass where the residual is 16-bit
// (the float32 stream plus a float16 branch under autocast). The kernel takes x's gradient
// so far from the engine (take_sum) only where the residual wants none: both inputs get the
// kernel's one gradient, and x's other uses' part of it is not the residual's. The fused path takes a float32
// (or float64) sum of tensors of one shape on CUDA; anything else runs the pair of ops.
//
// The fused kernels' path of layer_norm(x) and, with `residual`, add_layer_norm(x, residual)
// (x then of the sum's dtype; sum_out gets x + residual).
Tensor layer_norm_fused(const Tensor& x, const Tensor& residual, Tensor* sum_out, const Shape& normalized_shape,
                        int64_t rows, const Tensor& weight, const Tensor& bias, double eps) {
  const bool add = residual.defined();
  const Tensor xc = contiguous(x), rc = add ? contiguous(residual) : Tensor();
  const Tensor sum = add ? empty(x.shape(), x.options()) : Tensor();
  Tensor y = empty(x.shape(), x.options());
  Tensor mu = empty_as({rows}, x.dtype(), x), rstd = empty_as({rows}, x.dtype(), x);
  // y in the autocast dtype too, where the next lower op's cast would take it (Note [Cast reuse]).
  Tensor y_low;
  if (x.dtype() == kFloat32)
    if (const std::optional<DType> low = amp::ready_cast_dtype(x.device()); low && is_reduced_float(*low))
      y_low = empty(x.shape(), x.options().dtype(*low));
  kernel::layer_norm_forward(x.device(), xc, rc, weight, bias, eps, sum, y, mu, rstd, y_low);
  const Tensor& normalized = add ? sum : xc;  // the rows the backward differentiates
  if (add ? autograd::any_requires_grad({&x, &residual, &weight, &bias})
          : autograd::any_requires_grad({&x, &weight, &bias})) {
    // The autocast dtype of the forward: the input gradient's rounding the node below may want.
    const std::optional<DType> low = y_low.defined() ? std::optional<DType>(y_low.dtype()) : std::nullopt;
    // add_layer_norm: the residual's dtype where its gradient is the float32 one rounded.
    const std::optional<DType> res_low =
        add && residual.dtype() != x.dtype() ? std::optional<DType>(residual.dtype()) : std::nullopt;
    const size_t w_at = add ? 2 : 1;  // the weight's input index
    const bool has_low = y_low.defined();
    autograd::ContextMultiBackwardFn fn = [normalized_shape, low, res_low, add, has_low, w_at,
                                           need_x = x.requires_grad(), need_r = add && residual.requires_grad(),
                                           need_w = weight.defined() && weight.requires_grad(),
                                           need_b = bias.defined() && bias.requires_grad()](
                                              const std::vector<Tensor>& g, const std::vector<Tensor>& s,
                                              autograd::BackwardContext& ctx) {
      // g: y's gradient, then y_low's (has_low), then the sum's (add).
      const Tensor dy = g[0].defined() ? contiguous(g[0]) : Tensor();
      const Tensor dy_low = has_low && g[1].defined() ? contiguous(g[1]) : Tensor();
      const Tensor dsum = add && g.back().defined() ? contiguous(g.back()) : Tensor();
      autograd::Grads out(w_at + 2);
      if (!dy.defined() && !dy_low.defined()) {  // only the sum's gradient, passed on as add's backward would
        if (dsum.defined()) {
          if (need_x) out[0] = dsum;
          if (need_r) out[1] = dsum;
        }
        return out;
      }
      // The input gradient added into the engine's sum so far, and then rounded for the node
      // below, where the context offers (Note [Backward context]). Not where the residual wants
      // a gradient: the kernel's one gx is both inputs' gradient, and x's sum so far (its other
      // uses' gradients) is not the residual's; the engine adds it.
      Tensor gx = need_x && !need_r ? ctx.take_sum(0, s[0].shape(), s[0].dtype()) : Tensor();
      const bool accumulate = gx.defined();
      if ((need_x || need_r) && !accumulate) gx = empty(s[0].shape(), s[0].options());
      // The 16-bit rounding of the final gradient: the residual's (add_layer_norm), or for the
      // node below x (layer_norm). One copy per kernel, of the autocast dtype where there is one.
      Tensor gx_low;
      if (need_r && res_low && (!dy_low.defined() || *res_low == dy_low.dtype()))
        gx_low = empty(s[0].shape(), s[0].options().dtype(*res_low));
      else if (!add && need_x && low && ctx.wants_rounded(0, *low))
        gx_low = empty(s[0].shape(), s[0].options().dtype(*low));
      const Tensor gw = need_w ? empty(normalized_shape, s[0].options()) : Tensor();
      const Tensor gb = need_b ? empty(normalized_shape, s[0].options()) : Tensor();
      // (The sum's gradient only matters for an input gradient: none is wanted without one.)
      kernel::layer_norm_backward(s[0].device(), dy, dy_low, s[0], s[1], s[2], s[3], gx.defined() ? dsum : Tensor(),
                                  gx, accumulate, gx_low, gw, gb);
      if (accumulate) gx.bump_version();  // written in place, as the engine's add_ would
      if (!add && gx_low.defined()) ctx.offer_rounded(gx, gx_low);
      if (need_x) out[0] = gx;
      if (need_r) out[1] = gx_low.defined() ? gx_low : gx;
      out[w_at] = gw;
      out[w_at + 1] = gb;
      return out;
    };
    std::vector<Tensor> outs{y};
    if (has_low) outs.push_back(y_low);
    if (add) outs.push_back(sum);
    std::vector<Tensor> inputs = add ? std::vector<Tensor>{x, residual, weight, bias} : std::vector<Tensor>{x, weight, bias};
    const OpInfo& op = add ? kAddLayerNorm : kLayerNorm;
    if (outs.size() > 1) {
      autograd::record_outputs(op, outs, inputs, {normalized, weight, mu, rstd}, std::move(fn));
    } else {
      autograd::record(op, y, inputs, {normalized, weight, mu, rstd},
                       [fn = std::move(fn)](const Tensor& g, const std::vector<Tensor>& s,
                                            autograd::BackwardContext& ctx) { return fn({g}, s, ctx); });
    }
  }
  if (y_low.defined()) amp::offer_ready_cast(y, y_low);
  if (sum_out) *sum_out = sum;
  return y;
}

// layer_norm's checks of normalized_shape against x, weight and bias (`op` names the caller).
// Returns n, the normalized elements of a row.
int64_t check_layer_norm(const OpInfo& op, const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                         const Tensor& bias) {
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  AG_CHECK(k >= 1 && x.dim() >= k && Shape(x.shape().end() - k, x.shape().end()) == normalized_shape,
           "{}: normalized_shape {} does not match the last dims of input {}", op.name, shape_str(normalized_shape),
           x.desc());
  for (const Tensor* t : std::initializer_list<const Tensor*>{&weight, &bias})
    if (t->defined())
      AG_CHECK(t->shape() == normalized_shape, "{}: weight and bias must be {}, got {}", op.name,
               shape_str(normalized_shape), t->desc());
  return shape_numel(normalized_shape);
}

// Whether the fused kernels take a row of x (x's dtype, rows of n) with this weight and bias.
bool layer_norm_fusable(const Tensor& x, int64_t n, const Tensor& weight, const Tensor& bias) {
  const int64_t rows = n > 0 ? x.numel() / n : 0;
  bool fusable = kernel::layer_norm_forward.has(x.device()) && (x.dtype() == kFloat32 || x.dtype() == kFloat64) &&
                 rows > 0 && n > 0 && rows <= int64_t{65535} * 64;
  for (const Tensor* t : std::initializer_list<const Tensor*>{&weight, &bias})
    fusable = fusable && (!t->defined() || (t->dtype() == x.dtype() && t->is_contiguous() && t->device() == x.device()));
  return fusable;
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
  const int64_t n = check_layer_norm(kLayerNorm, x, normalized_shape, weight, bias);
  if (layer_norm_fusable(x, n, weight, bias))
    return scope.finish(layer_norm_fused(x, Tensor(), nullptr, normalized_shape, x.numel() / n, weight, bias, eps));
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  Shape dims;
  for (int64_t d = x.dim() - k; d < x.dim(); ++d) dims.push_back(d);
  Tensor mu = mean(x, dims, true);
  Tensor var = ampgrad::var(x, dims, 0.0, true);
  Tensor y = (x - mu) * rsqrt(var + eps);
  if (weight.defined()) y = y * weight;
  if (bias.defined()) y = y + bias;
  return scope.finish(y);
}

std::pair<Tensor, Tensor> add_layer_norm(const Tensor& x0, const Tensor& residual0, const Shape& normalized_shape,
                                         const Tensor& weight0, const Tensor& bias0, double eps) {
  Tensor x = x0, residual = residual0, weight = weight0, bias = bias0;
  OpScope scope(kAddLayerNorm, x, residual, weight, bias);
  check_defined(kAddLayerNorm, x, "input");
  check_defined(kAddLayerNorm, residual, "residual");
  check_same_device(kAddLayerNorm, x, residual);
  AG_CHECK(is_floating(x.dtype()) && is_floating(residual.dtype()),
           "add_layer_norm: expected floating input and residual, got {} and {}", x.desc(), residual.desc());
  AG_CHECK(x.shape() == residual.shape(), "add_layer_norm: input {} and residual {} must have the same shape",
           x.desc(), residual.desc());
  const int64_t n = check_layer_norm(kAddLayerNorm, x, normalized_shape, weight, bias);
  // The sum's dtype is add's (promotion); the wide operand is the one of that dtype (x + r and
  // r + x are the same bits), the other its residual (Note [Add and layer norm]).
  const DType sum_dtype = promote_types(x.dtype(), residual.dtype());
  const bool x_wide = x.dtype() == sum_dtype;
  const Tensor& wide = x_wide ? x : residual;
  const Tensor& other = x_wide ? residual : x;
  const bool other_ok = other.dtype() == sum_dtype || (sum_dtype == kFloat32 && is_reduced_float(other.dtype()));
  if (other_ok && layer_norm_fusable(wide, n, weight, bias)) {
    scope.note_path([] { return std::string("fused (the add in the layer norm's kernel)"); });
    Tensor sum;
    Tensor y = layer_norm_fused(wide, other, &sum, normalized_shape, wide.numel() / n, weight, bias, eps);
    scope.finish(y);
    return {y, sum};
  }
  scope.note_path([] { return std::string("add, then layer_norm"); });
  Tensor sum = add(x, residual);
  // Inside this op's scope the policy acted once, for both (fp32, 16-bit inputs read as they
  // are); layer_norm's own casts (an fp32 op) are made here.
  Tensor s = sum;
  if (scope.autocast_dtype()) {
    s = as_float32(s);
    weight = as_float32(weight);
    bias = as_float32(bias);
  }
  Tensor y = layer_norm(s, normalized_shape, weight, bias, eps);
  scope.finish(y);
  return {y, sum};
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
