// embedding: rows of a weight table picked by integer indices, as torch.nn.functional.embedding
// (padding_idx, scale_grad_by_freq), with a deterministic backward.
#include <ampgrad/autograd/node.h>
#include <ampgrad/core/kernels.h>
#include <ampgrad/ops/internal.h>
#include <ampgrad/ops/nn_ops.h>
#include <ampgrad/ops/op_scope.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad {

using autograd::Grads;
using Saved = std::vector<Tensor>;

namespace {
const OpInfo kEmbedding{"embedding", amp::Category::passthrough, true,
                        "gathers rows unchanged (on none of PyTorch's autocast lists): a float32 table stays float32"};
}  // namespace

// Note [Embedding backward]
// The weight's gradient adds each output row's gradient into the row its index picked; a
// language model's batch picks the same few rows (spaces, common letters) hundreds of times.
// Atomic adds, as index_add's, land in an order that changes from run to run, so the gradient
// (and the training after it) would not repeat bitwise. Instead the positions are sorted by
// their index (CUDA: a stable radix sort, cuda/embedding.cu; the CPU: std::stable_sort), so
// that within one index they stay in ascending order, and each index's rows are summed in that
// order, in float (double for float64), and stored once: the same bits on every run, and the
// same order on both devices. The row padding_idx keeps a zero gradient, and with
// scale_grad_by_freq each row's sum is divided by how many times its index occurs in the
// input, as PyTorch's. On CUDA an out-of-range index is recorded by the forward (Note
// [Device-side errors] in cuda/device_error.h) and skipped by the backward; on the CPU it
// raises before anything runs.

Tensor embedding(const Tensor& input0, const Tensor& weight0, std::optional<int64_t> padding_idx,
                 bool scale_grad_by_freq) {
  Tensor input = input0, weight = weight0;
  OpScope scope(kEmbedding, input, weight);
  check_defined(kEmbedding, input, "input");
  check_defined(kEmbedding, weight, "weight");
  check_same_device(kEmbedding, input, weight);
  AG_CHECK(input.dtype() == kInt64 || input.dtype() == kInt32,
           "embedding: input (the indices) must be int64 or int32, got {}", input.desc());
  AG_CHECK(weight.dim() == 2, "embedding: weight must be 2-D [num_embeddings, embedding_dim], got {}", weight.desc());
  const int64_t num = weight.size(0), dim = weight.size(1);
  int64_t pad = -1;
  if (padding_idx) {
    AG_CHECK(*padding_idx >= -num && *padding_idx < num,
             "embedding: padding_idx {} must be within [-{}, {}) (num_embeddings of weight {})", *padding_idx, num, num,
             weight.desc());
    pad = *padding_idx < 0 ? *padding_idx + num : *padding_idx;
  }
  const Tensor idx = contiguous(input.to(kInt64)).reshape({-1});
  if (idx.is_cpu()) kernel::check_index(idx.device(), idx, 0, num, "embedding", "index");
  Shape out_shape = input.shape();
  out_shape.push_back(dim);
  Tensor out = empty(out_shape, weight.options());
  if (out.numel()) {
    NoGradGuard no_grad;
    // index_select's gather; on CUDA an out-of-range index is recorded as embedding's (the
    // error site names the op being called, CurrentOp).
    kernel::index_select(out.device(), contiguous(weight).view({1, num, dim}), idx, out.view({1, idx.numel(), dim}));
  }
  if (autograd::any_requires_grad({&weight}) && is_floating(weight.dtype())) {
    autograd::record(kEmbedding, out, {Tensor(), weight}, {idx},
                     [num, dim, pad, scale_grad_by_freq](const Tensor& g, const Saved& s) {
                       Tensor gw = zeros({num, dim}, g.options());
                       if (g.numel())
                         kernel::embedding_backward(gw.device(), contiguous(g).view({s[0].numel(), dim}), s[0], pad,
                                                    scale_grad_by_freq, gw);
                       return Grads{Tensor(), gw};
                     });
  }
  return scope.finish(out);
}

}  // namespace ampgrad
