// MultiheadAttention, as torch.nn.MultiheadAttention and F.multi_head_attention_forward.
#include <cmath>

#include <ampgrad/nn/attention.h>
#include <ampgrad/nn/init.h>
#include <ampgrad/ops/nn_ops.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad::nn {

namespace {
constexpr const char* kName = "MultiheadAttention";

// A bool mask (true: may not attend) as the float mask it stands for: -inf there, 0 elsewhere,
// in `dtype`; a float mask as it is.
Tensor float_mask(const Tensor& mask, DType dtype) {
  if (mask.dtype() != kBool) return mask;
  return masked_fill(zeros(mask.shape(), TensorOptions(dtype).device(mask.device())), mask, -INFINITY);
}
}  // namespace

MultiheadAttention::MultiheadAttention(int64_t embed_dim_, int64_t num_heads_, MultiheadAttentionOptions o)
    : Module(kName), embed_dim(embed_dim_), num_heads(num_heads_), opts_(o) {
  AG_CHECK(embed_dim > 0 && num_heads > 0, "{}: embed_dim and num_heads must be positive, got {} and {}", kName,
           embed_dim, num_heads);
  AG_CHECK(embed_dim % num_heads == 0, "{}: embed_dim {} must be divisible by num_heads {}", kName, embed_dim,
           num_heads);
  AG_CHECK(o.dropout >= 0 && o.dropout <= 1, "{}: dropout must be in [0, 1], got {}", kName, o.dropout);
  head_dim = embed_dim / num_heads;
  kdim = o.kdim.value_or(embed_dim);
  vdim = o.vdim.value_or(embed_dim);
  AG_CHECK(kdim > 0 && vdim > 0, "{}: kdim and vdim must be positive, got {} and {}", kName, kdim, vdim);
  // Registered in PyTorch's order (its state_dict's), drawn in its order: out_proj first (as a
  // Linear), then the input projections (xavier-uniform), the biases zeroed.
  const TensorOptions& t = o.options;
  if (kdim == embed_dim && vdim == embed_dim) {
    in_proj_weight = register_parameter("in_proj_weight", empty({3 * embed_dim, embed_dim}, t));
  } else {
    q_proj_weight = register_parameter("q_proj_weight", empty({embed_dim, embed_dim}, t));
    k_proj_weight = register_parameter("k_proj_weight", empty({embed_dim, kdim}, t));
    v_proj_weight = register_parameter("v_proj_weight", empty({embed_dim, vdim}, t));
  }
  if (o.bias) in_proj_bias = register_parameter("in_proj_bias", empty({3 * embed_dim}, t));
  out_proj = register_module("out_proj", std::make_shared<Linear>(embed_dim, embed_dim, LinearOptions{o.bias, t}));
  for (const Tensor* w : {&in_proj_weight, &q_proj_weight, &k_proj_weight, &v_proj_weight})
    if (w->defined()) init::xavier_uniform_(*w);
  if (o.bias) {
    init::zeros_(in_proj_bias);
    init::zeros_(out_proj->bias);
  }
}

std::pair<Tensor, Tensor> MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                                      const Tensor& key_padding_mask, bool need_weights,
                                                      const Tensor& attn_mask0, bool average_attn_weights,
                                                      bool is_causal) {
  AG_CHECK(query.defined() && key.defined() && value.defined(), "{}: query, key and value must be defined", kName);
  const bool batched = query.dim() == 3;
  AG_CHECK((query.dim() == 3 || query.dim() == 2) && key.dim() == query.dim() && value.dim() == query.dim(),
           "{}: query, key and value must all be 3-D ({}) or all 2-D (unbatched [L, E]), got query {}, key {}, "
           "value {}",
           kName, opts_.batch_first ? "[N, L, E], batch_first" : "[L, N, E]", query.desc(), key.desc(), value.desc());
  // [L, N, E] from here on.
  Tensor q = query, k = key, v = value;
  if (!batched) {
    q = q.unsqueeze(1);
    k = k.unsqueeze(1);
    v = v.unsqueeze(1);
  } else if (opts_.batch_first) {
    q = q.transpose(0, 1);
    k = k.transpose(0, 1);
    v = v.transpose(0, 1);
  }
  const int64_t L = q.size(0), N = q.size(1), S = k.size(0), H = num_heads, E = embed_dim, D = head_dim;
  AG_CHECK(q.size(2) == E && k.size(2) == kdim && v.size(2) == vdim,
           "{}: expected query, key and value with {}, {} and {} features (embed_dim, kdim, vdim), got query {}, "
           "key {}, value {}",
           kName, E, kdim, vdim, query.desc(), key.desc(), value.desc());
  AG_CHECK(k.size(0) == v.size(0) && k.size(1) == N && v.size(1) == N,
           "{}: key and value must have the same sequence length and the query's batch, got query {}, key {}, value {}",
           kName, query.desc(), key.desc(), value.desc());
  AG_CHECK(!is_causal || attn_mask0.defined(),
           "{}: is_causal is a hint that attn_mask is the causal mask, and needs attn_mask (a [L, L] bool mask, true "
           "above the diagonal)",
           kName);

  const double p = is_training() ? opts_.dropout : 0.0;
  // is_causal when the causal mask is all: sdpa's own causal mask, no mask tensor.
  const bool causal = is_causal && !key_padding_mask.defined();

  // The masks, as one float mask [1 or N * H, L, S] (PyTorch's merge) for the explicit weights;
  // for scaled_dot_product_attention as 4-D masks that broadcast, [1 or N, 1 or H, L, S] and
  // [N, 1, 1, S], so the fused path's bias is no larger than they are.
  Tensor mask, attn4, kpm4;
  // With build false, only the checks (a causal call that needs no mask tensor).
  auto build_masks = [&](DType dt, bool build) {
    if (attn_mask0.defined()) {
      const Tensor& m = attn_mask0;
      AG_CHECK(m.dtype() == kBool || is_floating(m.dtype()), "{}: attn_mask must be bool or floating, got {}", kName,
               m.desc());
      if (m.dim() == 2) {
        AG_CHECK(m.size(0) == L && m.size(1) == S, "{}: a 2-D attn_mask must be [L, S] = [{}, {}], got {}", kName, L, S,
                 m.desc());
        if (build) {
          mask = float_mask(m, dt).unsqueeze(0);
          attn4 = mask.unsqueeze(0);
        }
      } else {
        AG_CHECK(m.dim() == 3 && m.size(0) == N * H && m.size(1) == L && m.size(2) == S,
                 "{}: attn_mask must be [L, S] = [{}, {}] or [N * num_heads, L, S] = [{}, {}, {}], got {}", kName, L, S,
                 N * H, L, S, m.desc());
        if (build) {
          mask = float_mask(m, dt);
          attn4 = mask.reshape({N, H, L, S});
        }
      }
    }
    if (key_padding_mask.defined()) {
      const Tensor& m = key_padding_mask;
      const Shape want = batched ? Shape{N, S} : Shape{S};
      AG_CHECK(m.shape() == want, "{}: key_padding_mask must be {} (batch, source length), got {}", kName,
               shape_str(want), m.desc());
      AG_CHECK(m.dtype() == kBool || is_floating(m.dtype()), "{}: key_padding_mask must be bool or floating, got {}",
               kName, m.desc());
      if (!build) return;
      kpm4 = float_mask(m, dt).reshape({N, 1, 1, S});
      if (need_weights) {
        const Tensor kpm = kpm4.expand({N, H, 1, S}).reshape({N * H, 1, S});
        mask = mask.defined() ? mask + kpm : kpm;
      }
    }
  };


  // Note [MultiheadAttention's layout]
  // Self-attention with batch_first, no weights asked for, stays [N, L, E] throughout: one
  // projection GEMM on the input as it is, q, k and v as views of [N, L, 3, H, D] permuted to
  // [N, H, L, D], the fused attention's output laid out as [N, L, H, D] (Note [Attention paths]),
  // so [N * L, E] for the output projection is a view. Transposing to [L, N, E] first (PyTorch's
  // layout inside) costs a strided cast and copy each way per layer.
  if (batched && opts_.batch_first && !need_weights && in_proj_weight.defined() && query.is_same(key) &&
      key.is_same(value) && query.is_contiguous()) {
    const Tensor proj = linear(query, in_proj_weight, in_proj_bias);  // [N, L, 3E]
    build_masks(proj.dtype(), !causal);
    Tensor m;
    if (!causal) {
      m = attn4;
      if (kpm4.defined()) m = m.defined() ? m + kpm4 : kpm4;
    }
    const std::vector<Tensor> qkv = unbind(proj.reshape({N, L, 3, H, D}), 2);
    auto to_heads = [](const Tensor& t) { return t.permute({0, 2, 1, 3}); };
    const Tensor o = scaled_dot_product_attention(to_heads(qkv[0]), to_heads(qkv[1]), to_heads(qkv[2]), m, p, causal);
    return {out_proj->forward(o.permute({0, 2, 1, 3}).reshape({N * L, E})).reshape({N, L, E}), Tensor()};
  }

  // The input projections: one GEMM for self-attention (query, key and value one tensor).
  Tensor qp, kp, vp, all;
  if (in_proj_weight.defined()) {
    auto part = [&](const Tensor& t, int64_t i) { return t.defined() ? narrow(t, 0, i * E, E) : Tensor(); };
    if (query.is_same(key) && key.is_same(value)) {
      all = linear(q, in_proj_weight, in_proj_bias);  // [L, N, 3E]
      qp = narrow(all, 2, 0, E);
      kp = narrow(all, 2, E, E);
      vp = narrow(all, 2, 2 * E, E);
    } else {
      qp = linear(q, part(in_proj_weight, 0), part(in_proj_bias, 0));
      kp = linear(k, part(in_proj_weight, 1), part(in_proj_bias, 1));
      vp = linear(v, part(in_proj_weight, 2), part(in_proj_bias, 2));
    }
  } else {
    auto part = [&](int64_t i) { return in_proj_bias.defined() ? narrow(in_proj_bias, 0, i * E, E) : Tensor(); };
    qp = linear(q, q_proj_weight, part(0));
    kp = linear(k, k_proj_weight, part(1));
    vp = linear(v, v_proj_weight, part(2));
  }

  build_masks(qp.dtype(), need_weights || !causal);

  // Heads: [L, N, E] -> [N * H, L, D].
  auto heads = [&](const Tensor& t, int64_t len) { return t.reshape({len, N * H, D}).transpose(0, 1); };
  Tensor out, weights;
  if (need_weights) {
    // Explicit weights, as PyTorch's path for them (its plain softmax: a fully masked row is NaN).
    const Tensor qh = heads(qp, L) * (1.0 / std::sqrt(static_cast<double>(D)));
    Tensor w = bmm(qh, heads(kp, S).transpose(1, 2));  // [N * H, L, S]
    if (mask.defined()) w = w + mask;
    w = softmax(w, -1);
    if (p > 0) w = dropout(w, p, true);
    out = bmm(w, heads(vp, S)).transpose(0, 1).reshape({L * N, E});  // [L, N * H, D] -> [L * N, E]
    weights = w.reshape({N, H, L, S});
    if (average_attn_weights) weights = mean(weights, {1});
    if (!batched) weights = weights.squeeze(0);
  } else {
    // scaled_dot_product_attention per head, [N, H, L, D].
    Tensor m;
    if (!causal) {
      m = attn4;
      if (kpm4.defined()) m = m.defined() ? m + kpm4 : kpm4;
    }
    auto split = [&](const Tensor& t, int64_t len) { return heads(t, len).reshape({N, H, len, D}); };
    Tensor o;
    if (all.defined() && all.is_contiguous()) {
      // Self-attention: q, k and v as views of the one projection, [L, N, 3, H, D] unbound and
      // permuted to [N, H, L, D], no copies (the fused path takes their strides; unbind's one
      // backward node stacks their gradients back in one kernel).
      const std::vector<Tensor> qkv = unbind(all.reshape({L, N, 3, H, D}), 2);
      auto to_heads = [](const Tensor& t) { return t.permute({1, 2, 0, 3}); };
      o = scaled_dot_product_attention(to_heads(qkv[0]), to_heads(qkv[1]), to_heads(qkv[2]), m, p, causal);
    } else {
      o = scaled_dot_product_attention(split(qp, L), split(kp, S), split(vp, S), m, p, causal);
    }
    out = o.permute({2, 0, 1, 3}).reshape({L * N, E});  // [L, N, H, D]
  }
  out = out_proj->forward(out).reshape({L, N, E});
  if (!batched) out = out.squeeze(1);
  else if (opts_.batch_first) out = out.transpose(0, 1);
  return {out, weights};
}

}  // namespace ampgrad::nn
