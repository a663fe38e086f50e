// scaled_dot_product_attention, as torch.nn.functional.scaled_dot_product_attention: the math
// path, composed of matmul, softmax, where and dropout (Note [Attention math path]).
#include <algorithm>
#include <cmath>
#include <optional>

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
}  // namespace

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask, double dropout_p, bool is_causal,
                                    std::optional<double> scale) {
  Tensor q = query, k = key, v = value, mask = attn_mask;
  OpScope scope(kSdpa, q, k, v, mask);
  check_inputs(q, k, v, mask, dropout_p, is_causal);
  const double sc = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
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
