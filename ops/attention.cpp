// scaled_dot_product_attention, as torch.nn.functional.scaled_dot_product_attention: the math
// path, composed of matmul, softmax, where and dropout (Note [Attention math path]).
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <ampgrad/autograd/node.h>
#include <ampgrad/core/generator.h>
#include <ampgrad/core/kernels.h>
#include <ampgrad/ops/internal.h>
#include <ampgrad/ops/nn_ops.h>
#include <ampgrad/ops/op_scope.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad {

// Note [Attention math path]
// softmax(q k^T * scale + mask) v over the last two dims, every leading dim a batch dim
// (broadcast, as matmul's): q [..., L, E], k [..., S, E], v [..., S, Ev] give [..., L, Ev]. As
// PyTorch's math backend: the scale (1/sqrt(E) by default) is applied as its square root to q
// and to k, so float16 products stay in range; a bool mask says where attention is allowed
// (true: take part), a float mask is added to the scores; is_causal allows j <= i (the top-left
// triangle, as PyTorch's); a row the mask leaves nothing in attends to nothing and gives zeros
// (PyTorch's safe softmax since 2.5) rather than NaN, and its gradient is zero too. Dropout
// drops attention weights with probability dropout_p whenever dropout_p > 0 (the functional form
// does not know of training mode; MultiheadAttention passes 0 in eval). The L x S scores and
// weights are tensors here: this is the path the fused one is tested against, and the one for
// the CPU, float32 and float64.

// Note [Attention paths]
// On CUDA, float16 and bfloat16 attention takes the fused path. Without a mask tensor or
// dropout, E 16, 32 or 64 and L and S at most 128, that is the one-tile kernel (Note
// [Attention in one tile] in cuda/attention_tile.cu), unless enable_tile_sdp(false) or
// AMPGRAD_TILE_SDP=0 has turned it off. Otherwise it is cuDNN's (Note [Fused attention] in
// cuda/attention.cpp), when cuDNN can: q [B, H, L, E], k and v [B, H, S, E] (4-D, no
// broadcasting, Ev == E), E a multiple of 8 up to 128, and, when a gradient is wanted, a
// backward plan too (checked before the forward runs; with cuDNN
// older than 9.16 and S not a multiple of 128 the backward graph carries cudnn-frontend's
// workaround, a padding mask of full lengths). Everything
// else, and any case cuDNN's engines refuse, takes the math path; the trace (`ampgrad explain`)
// says which ran, and why. The output is laid out in the order of q's strides, and each
// gradient in the order of its input's (as PyTorch's fused paths), so that a caller's
// transposes back (MultiheadAttention's [N, H, L, D] to [L, N, E]) cost no copy. The
// backward saves q, k, v, the output and the rows' logsumexp (float32 [B, H, L, 1]); nothing
// L x S. Dropout draws one seed from the default generator, as dropout() does, into a device
// tensor that forward and backward both read.
//
// Note [Masks on the fused path]
// An attn_mask (bool; or, in float16, a float mask that needs no gradient; S a multiple of 8)
// reaches cuDNN as a bias added to the scaled scores, the mask broadcast to [B or 1, H or 1, L,
// S] in q's dtype: 0 where a bool mask allows attention and a floor where it does not; a float
// mask as it is, raised to that floor (-inf among what is raised). The floor is float16's
// lowest, -65504, and for bfloat16 -2^100 (its own lowest, -3.4e38, overflows to -inf once the
// kernel scales the scores by log2 e: that row came out zero on the H200). A finite floor
// rather than -inf keeps a row the mask empties finite inside the kernel (an all -inf row is
// exp(-inf + inf), NaN); values below it weigh as it does (exp underflows to 0 either way).
// bfloat16 float masks take the math path: a row whose every value sits near -2^100 keeps a
// logsumexp that has lost log Z (the float ulp there is 2^77), so the backward's recomputed
// weights came out S times too large on the H200; a floor of -2^16 would keep it (as float16's
// does), and is the next step, not yet run there. The rows a mask empties (a bool row all false, a float row all -inf) are found from the
// mask and set to zero after the kernel (masked_fill, whose backward zeroes their gradient), as
// the math path's safe softmax gives. (A float row mixing -inf with values at or below the floor
// differs: the kernel weighs both alike.) The bias is as large as the mask broadcast
// over L: a key-padding mask [B, 1, 1, S] becomes [B, 1, L, S], not B * H score matrices.
// MultiheadAttention hands its key_padding_mask over as [N, 1, 1, S] for this.
//
// Note [Packed attention gradients]
// When q, k and v are the slices of one packed tensor (MultiheadAttention's self-attention
// unbinds them from its one in-projection, [N, L, 3, H, D]), the fused backward writes dq, dk
// and dv as the same slices of one fresh packed tensor, as PyTorch's memory-efficient backward
// does; unbind's backward then finds its gradients to be the slices of one tensor and returns
// that tensor rather than stacking copies (ops/unbind.cpp): three copies fewer per layer.

namespace {
// On by default (Note [Attention in one tile]): AMPGRAD_TILE_SDP=0 at start, or
// enable_tile_sdp(false), turns it off.
bool tile_sdp_from_env() {
  const char* env = std::getenv("AMPGRAD_TILE_SDP");
  return env == nullptr || std::string(env) != "0";
}
std::atomic<bool> g_tile_sdp{tile_sdp_from_env()};
}  // namespace

void enable_tile_sdp(bool enabled) { g_tile_sdp.store(enabled); }
bool tile_sdp_enabled() { return g_tile_sdp.load(); }

namespace {
const OpInfo kSdpa{"scaled_dot_product_attention", amp::Category::lower, true,
                   "two matmuls around a softmax computed in float: tensor cores in float16, as PyTorch's list"};

// Whether a and b broadcast together; with `to`, whether a broadcasts to b's shape itself.
bool broadcasts(const Shape& a, const Shape& b, bool to = false) {
  if (to && a.size() > b.size()) return false;
  for (size_t i = 1; i <= std::min(a.size(), b.size()); ++i) {
    const int64_t x = a[a.size() - i], y = b[b.size() - i];
    if (x != y && x != 1 && (to || y != 1)) return false;
  }
  return true;
}

void check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double dropout_p,
                  bool is_causal) {
  const char* name = kSdpa.name.data();
  check_defined(kSdpa, q, "query");
  check_defined(kSdpa, k, "key");
  check_defined(kSdpa, v, "value");
  check_same_device(kSdpa, q, k);
  check_same_device(kSdpa, q, v);
  AG_CHECK(is_floating(q.dtype()) && q.dtype() == k.dtype() && q.dtype() == v.dtype(),
           "{}: query, key and value must have one floating dtype, got query {}, key {}, value {}", name, q.desc(),
           k.desc(), v.desc());
  AG_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2,
           "{}: query, key and value must be at least 2-D ([..., L, E], [..., S, E], [..., S, Ev]), got query {}, "
           "key {}, value {}",
           name, q.desc(), k.desc(), v.desc());
  AG_CHECK(q.size(-1) == k.size(-1),
           "{}: query and key must have the same head dim (last dim), got query {} and key {}", name, q.desc(),
           k.desc());
  AG_CHECK(k.size(-2) == v.size(-2),
           "{}: key and value must have the same sequence length (dim -2), got key {} and value {}", name, k.desc(),
           v.desc());
  const Shape qb(q.shape().begin(), q.shape().end() - 2), kb(k.shape().begin(), k.shape().end() - 2),
      vb(v.shape().begin(), v.shape().end() - 2);
  AG_CHECK(broadcasts(qb, kb) && broadcasts(qb, vb) && broadcasts(kb, vb),
           "{}: the batch and head dims of query {}, key {} and value {} do not broadcast", name, q.desc(), k.desc(),
           v.desc());
  AG_CHECK(dropout_p >= 0 && dropout_p <= 1, "{}: dropout_p must be in [0, 1], got {}", name, dropout_p);
  if (!mask.defined()) return;
  AG_CHECK(!is_causal, "{}: an explicit attn_mask must not be given with is_causal=true (attn_mask {})", name,
           mask.desc());
  check_same_device(kSdpa, q, mask);
  AG_CHECK(mask.dtype() == kBool || mask.dtype() == q.dtype(),
           "{}: attn_mask must be bool or have the query's dtype {}, got {}", name, dtype_name(q.dtype()), mask.desc());
  Shape scores = broadcast_shapes(name, qb, kb);
  scores.push_back(q.size(-2));
  scores.push_back(k.size(-2));
  AG_CHECK(broadcasts(mask.shape(), scores, true), "{}: attn_mask {} does not broadcast to the attention scores' shape {}", name,
           mask.desc(), shape_str(scores));
}
// The order of like's dims (4-D), outermost first, by their strides, the last dim last: a
// tensor laid out in it (as PyTorch's fused attention allocates its output like the query)
// makes the caller's transpose back free.
std::array<int64_t, 4> dim_order(const Tensor& like) {
  std::array<int64_t, 4> perm{0, 1, 2, 3};
  std::stable_sort(perm.begin(), perm.begin() + 3, [&](int64_t a, int64_t b) { return like.stride(a) > like.stride(b); });
  return perm;
}

// The strides of a tensor of `shape` (4-D) dense in like's dim order.
Shape ordered_strides(const Shape& shape, const Tensor& like) {
  const std::array<int64_t, 4> perm = dim_order(like);
  Shape st(4);
  int64_t step = 1;
  for (int i = 3; i >= 0; --i) {
    st[static_cast<size_t>(perm[static_cast<size_t>(i)])] = step;
    step *= shape[perm[static_cast<size_t>(i)]];
  }
  return st;
}

// A tensor of `shape` (4-D), dense in like's dim order.
Tensor empty_ordered_like(const Shape& shape, const Tensor& like) {
  return alias_with(empty({shape_numel(shape)}, like.options()), shape, ordered_strides(shape, like), 0);
}

// Why the fused path cannot take this call, or "" when it may try.
std::string fused_refusal(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask) {
  if (!q.is_cuda() || !kernel::sdpa_fused_forward.has(q.device())) return "math path: not a CUDA tensor";
  if (q.dtype() != kFloat16 && q.dtype() != kBFloat16) return "math path: fused attention takes float16 and bfloat16";
  if (mask.defined() && mask.requires_grad()) return "math path: an attn_mask that requires grad";
  if (mask.defined() && k.size(-2) % 8 != 0) return "math path: an attn_mask with S not a multiple of 8";
  if (mask.defined() && mask.dtype() != kBool && q.dtype() == kBFloat16)
    return "math path: a bfloat16 float attn_mask (the fused path takes bool masks in bfloat16)";
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) return "math path: the fused path takes 4-D [B, H, T, E] only";
  if (k.size(0) != q.size(0) || v.size(0) != q.size(0) || k.size(1) != q.size(1) || v.size(1) != q.size(1))
    return "math path: batch and head dims must match without broadcasting";
  const int64_t e = q.size(3);
  if (v.size(3) != e || e % 8 != 0 || e > 128) return "math path: head dims must be equal, a multiple of 8, at most 128";
  if (q.size(2) == 0 || k.size(2) == 0 || q.numel() == 0) return "math path: empty";
  return "";
}

// A contiguous-in-the-last-dim copy where t's strides do not suit cuDNN.
Tensor for_cudnn(const Tensor& t) {
  bool ok = t.stride(3) == 1;
  for (int d = 0; d < 3; ++d) ok = ok && t.stride(d) % 8 == 0;
  return ok ? t : contiguous(t);
}

// q, k and v as the slices along a last dim of one tensor, when they are (Note [Packed attention
// gradients]): that tensor, [..., 3], dense; undefined when they are not.
Tensor packed_qkv(const Tensor& q, const Tensor& k, const Tensor& v) {
  const int64_t step = k.storage_offset() - q.storage_offset();
  if (q.storage() != k.storage() || q.storage() != v.storage() || step <= 0 ||
      v.storage_offset() - k.storage_offset() != step || q.shape() != k.shape() || q.shape() != v.shape() ||
      q.strides() != k.strides() || q.strides() != v.strides())
    return Tensor();
  Shape sizes = q.shape(), strides = q.strides();
  sizes.push_back(3);
  strides.push_back(step);
  Tensor packed = alias_with(q, sizes, strides, q.storage_offset());
  return is_non_overlapping_and_dense(packed) ? packed : Tensor();
}

// The output's gradient g with o's strides exactly (o is dense) and 16-byte aligned, as both
// fused backwards take it: g itself when it is, else a copy.
Tensor laid_out_as(const Tensor& g, const Tensor& o) {
  if (g.strides() == o.strides() && reinterpret_cast<uintptr_t>(ampgrad::detail::address(g)) % 16 == 0) return g;
  Tensor dout = alias_with(empty({o.numel()}, o.options()), o.shape(), o.strides(), 0);
  dout.copy_(g);
  return dout;
}

// dq, dk, dv for the fused backward: laid out as q, k and v are, in one packed block when they
// are the slices of one.
std::array<Tensor, 3> attention_grads(const Tensor& q, const Tensor& k, const Tensor& v) {
  if (const Tensor packed = packed_qkv(q, k, v); packed.defined()) {
    const Tensor g = empty_preserving_layout(packed);
    const int64_t step = packed.strides().back();
    return {alias_with(g, q.shape(), q.strides(), 0), alias_with(g, q.shape(), q.strides(), step),
            alias_with(g, q.shape(), q.strides(), 2 * step)};
  }
  return {empty_ordered_like(q.shape(), q), empty_ordered_like(k.shape(), k), empty_ordered_like(v.shape(), v)};
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask, double dropout_p, bool is_causal,
                                    std::optional<double> scale) {
  Tensor q = query, k = key, v = value, mask = attn_mask;
  OpScope scope(kSdpa, q, k, v, mask);
  check_inputs(q, k, v, mask, dropout_p, is_causal);
  const double sc = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  const bool grad = autograd::any_requires_grad({&q, &k, &v});
  std::string why = fused_refusal(q, k, v, mask);
  if (why.empty() && dropout_p < 1) {
    const Tensor qc = for_cudnn(q), kc = for_cudnn(k), vc = for_cudnn(v);
    const int64_t b = q.size(0), h = q.size(1), l = q.size(2), e = q.size(3);
    const TensorOptions f32 = TensorOptions(kFloat32).device(q.device());
    Tensor out = empty_ordered_like({b, h, l, e}, qc), stats = empty({b, h, l, 1}, f32), rng;
    // Short sequences: the one-tile kernel (Note [Attention in one tile]).
    std::string tile_why;
    if (!mask.defined() && dropout_p == 0 && tile_sdp_enabled() && kernel::sdpa_tile_forward.has(q.device()) &&
        kernel::sdpa_tile_forward(q.device(), qc, kc, vc, out, stats, sc, is_causal, tile_why)) {
      scope.note_path([] { return std::string("fused (one-tile kernel: L, S <= 128)"); });
      if (grad) {
        autograd::record(kSdpa, out, {q, k, v}, {qc, kc, vc, out.detach(), stats},
                         [sc, is_causal](const Tensor& g, const std::vector<Tensor>& sv) {
                           const Tensor& o = sv[3];
                           const Tensor dout = laid_out_as(g, o);
                           const auto [dq, dk, dv] = attention_grads(sv[0], sv[1], sv[2]);
                           std::string why;
                           AG_CHECK(kernel::sdpa_tile_backward(o.device(), sv[0], sv[1], sv[2], o, dout, sv[4], dq, dk,
                                                               dv, sc, is_causal, why),
                                    "scaled_dot_product_attention backward: {}", why);
                           return autograd::Grads{dq, dk, dv};
                         });
      }
      return scope.finish(out);
    }
    // The backward's tensors: do as out, dq, dk, dv as q, k, v are laid out (packed when they
    // are: Note [Packed attention gradients]).
    std::vector<int64_t> backward_strides;
    if (grad) {
      backward_strides.insert(backward_strides.end(), out.strides().begin(), out.strides().end());
      const bool packed = packed_qkv(qc, kc, vc).defined();
      for (const Tensor* t : {&qc, &kc, &vc}) {
        const Shape st = packed ? t->strides() : ordered_strides(t->shape(), *t);
        backward_strides.insert(backward_strides.end(), st.begin(), st.end());
      }
    }
    // The mask as the scores' bias (Note [Masks on the fused path]).
    const double lowest = q.dtype() == kFloat16 ? -65504.0 : std::ldexp(-1.0, 100);
    Tensor bias, dead;  // dead: the rows the mask leaves empty, [B or 1, H or 1, L, 1]
    if (mask.defined()) {
      NoGradGuard no_grad;
      Shape m4 = mask.shape();
      while (m4.size() < 4) m4.insert(m4.begin(), 1);
      const Tensor m = mask.reshape(m4).expand({m4[0], m4[1], l, k.size(2)});
      if (mask.dtype() == kBool) {
        bias = where(m, zeros({}, q.options()), lowest);
        dead = eq(max(bias, -1, true).first, lowest);
      } else {
        bias = clamp(m, lowest, std::nullopt);
        dead = eq(max(m, -1, true).first, -INFINITY);
      }
    }
    if (dropout_p > 0) {
      // 53 bits of one draw: a fill writes doubles (seed at [0], offset at [2]).
      rng = full({4}, static_cast<double>(default_generator().next_u64() >> 11), TensorOptions(kInt64).device(q.device()));
    }
    if (kernel::sdpa_fused_forward(q.device(), qc, kc, vc, bias, out, stats, sc, is_causal, dropout_p, backward_strides,
                                   rng, why)) {
      scope.note_path([&] {
        return std::string(bias.defined() ? "fused (cuDNN flash attention, the mask as a bias)" : "fused (cuDNN flash attention)");
      });
      if (grad) {
        autograd::record(kSdpa, out, {q, k, v}, {qc, kc, vc, out.detach(), stats, rng, bias},
                         [sc, is_causal, dropout_p](const Tensor& g, const std::vector<Tensor>& sv) {
                           const Tensor& o = sv[3];
                           // do with o's strides exactly, so that the plan checked for it applies.
                           const Tensor dout = laid_out_as(g, o);
                           const auto [dq, dk, dv] = attention_grads(sv[0], sv[1], sv[2]);
                           std::string why;
                           AG_CHECK(kernel::sdpa_fused_backward(o.device(), sv[0], sv[1], sv[2], sv[6], o, dout, sv[4],
                                                                dq, dk, dv, sc, is_causal, dropout_p, sv[5], why),
                                    "scaled_dot_product_attention backward: {}", why);
                           return autograd::Grads{dq, dk, dv};
                         });
      }
      // Rows the mask left empty give zeros, as the math path's.
      if (dead.defined()) out = masked_fill(out, dead, 0.0);
      return scope.finish(out);
    }
  }
  scope.note_path([&] { return why.empty() ? std::string("math path") : why; });
  Tensor kt = k.transpose(-2, -1);
  if (sc > 0) {
    const double root = std::sqrt(sc);
    q = q * root;
    kt = kt * root;
  } else {
    q = q * sc;
  }
  Tensor scores = matmul(q, kt);  // [..., L, S]
  const int64_t L = scores.size(-2), S = scores.size(-1);
  if (is_causal) {
    const TensorOptions i64 = TensorOptions(kInt64).device(scores.device());
    const Tensor keep = le(arange(S, i64).reshape({1, S}), arange(L, i64).reshape({L, 1}));
    scores = where(keep, scores, -INFINITY);
  } else if (mask.defined()) {
    scores = mask.dtype() == kBool ? where(mask, scores, -INFINITY) : scores + mask;
  }
  Tensor weights;
  if (mask.defined()) {
    // Rows with nothing left: softmax over zeros instead (finite, so its gradient is too), and
    // zeros out.
    Tensor dead;
    {
      NoGradGuard no_grad;
      dead = eq(max(scores, -1, true).first, -INFINITY);
    }
    weights = masked_fill(softmax(masked_fill(scores, dead, 0.0), -1), dead, 0.0);
  } else {
    weights = softmax(scores, -1);
  }
  if (dropout_p > 0) weights = dropout(weights, dropout_p, true);
  return scope.finish(matmul(weights, v));
}

}  // namespace ampgrad
