// MultiheadAttention, as torch.nn.MultiheadAttention (nn/attention.cpp).
#pragma once

#include <memory>
#include <optional>
#include <utility>

#include <ampgrad/nn/layers.h>
#include <ampgrad/nn/module.h>

namespace ampgrad::nn {

struct MultiheadAttentionOptions {
  double dropout = 0.0;             // on the attention weights, in training mode
  bool bias = true;                 // in_proj_bias and out_proj.bias
  bool batch_first = false;         // inputs and output [N, L, E] rather than [L, N, E]
  std::optional<int64_t> kdim, vdim;  // key's and value's features (embed_dim when not given)
  TensorOptions options;            // dtype/device of the parameters
};

// Attention over num_heads heads of embed_dim / num_heads features each: query, key and value
// projected (in_proj_weight [3 E, E] and in_proj_bias [3 E], or q/k/v_proj_weight when key or
// value have other sizes), scaled_dot_product_attention per head, the heads joined and
// projected by out_proj. Parameters and their names as PyTorch's (a state_dict loads):
// in_proj_weight xavier-uniform, biases zero, out_proj as Linear.
class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions o = {});

  // query [L, N, E] (batch_first: [N, L, E]; unbatched: [L, E]), key and value [S, N, kdim]
  // and [S, N, vdim]. key_padding_mask [N, S] (unbatched: [S]) and attn_mask [L, S] or
  // [N * num_heads, L, S]: bool (true: may NOT attend, PyTorch's convention for this module) or
  // float (added). is_causal is a hint that attn_mask is the causal mask, which it then needs.
  // Returns the output, shaped as query, and with need_weights the attention weights
  // [N, L, S] averaged over the heads (or [N, num_heads, L, S]); without, an undefined tensor.
  std::pair<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& key_padding_mask = Tensor(), bool need_weights = true,
                                    const Tensor& attn_mask = Tensor(), bool average_attn_weights = true,
                                    bool is_causal = false);
  std::pair<Tensor, Tensor> operator()(const Tensor& query, const Tensor& key, const Tensor& value,
                                       const Tensor& key_padding_mask = Tensor(), bool need_weights = true,
                                       const Tensor& attn_mask = Tensor(), bool average_attn_weights = true,
                                       bool is_causal = false) {
    return forward(query, key, value, key_padding_mask, need_weights, attn_mask, average_attn_weights, is_causal);
  }

  int64_t embed_dim, num_heads, head_dim, kdim, vdim;
  Tensor in_proj_weight, in_proj_bias;                  // in_proj_weight undefined when kdim or vdim differ
  Tensor q_proj_weight, k_proj_weight, v_proj_weight;  // defined only then
  std::shared_ptr<Linear> out_proj;

 private:
  MultiheadAttentionOptions opts_;
};

}  // namespace ampgrad::nn
