// Layer construction (PyTorch's default initialization) and forward passes.
#include <ampgrad/nn/layers.h>

#include <cmath>

#include <ampgrad/autograd/node.h>
#include <ampgrad/nn/init.h>
#include <ampgrad/ops/nn_ops.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad::nn {

namespace {
// PyTorch's reset_parameters for Linear and Conv: kaiming_uniform_(a = sqrt(5)) on the
// weight (a bound of 1/sqrt(fan_in)), and the bias uniform in +-1/sqrt(fan_in).
void default_init(const Tensor& weight, const Tensor& bias) {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(init::fans(weight).first));
    init::uniform_(bias, -bound, bound);
  }
}
}  // namespace

Linear::Linear(int64_t in, int64_t out, LinearOptions o) : Module("Linear") {
  AG_CHECK(in > 0 && out > 0, "Linear: features must be positive, got in {} out {}", in, out);
  weight = register_parameter("weight", empty({out, in}, o.options));
  if (o.bias) bias = register_parameter("bias", empty({out}, o.options));
  default_init(weight, bias);
}

Tensor Linear::forward(const Tensor& x) { return linear(x, weight, bias); }

Tensor MaxPool2d::forward(const Tensor& x) { return max_pool2d(x, kernel_, stride_, padding_); }
Tensor AvgPool2d::forward(const Tensor& x) { return avg_pool2d(x, kernel_, stride_, padding_); }
Tensor AdaptiveAvgPool2d::forward(const Tensor& x) { return adaptive_avg_pool2d(x, out_); }
Tensor ReLU::forward(const Tensor& x) { return relu(x); }

namespace {
// The options with padding_idx checked against the table and counted from its start.
EmbeddingOptions checked(EmbeddingOptions o, int64_t num_embeddings, int64_t embedding_dim) {
  AG_CHECK(num_embeddings > 0 && embedding_dim >= 0,
           "Embedding: num_embeddings must be positive and embedding_dim non-negative, got {} and {}", num_embeddings,
           embedding_dim);
  if (o.padding_idx) {
    AG_CHECK(*o.padding_idx >= -num_embeddings && *o.padding_idx < num_embeddings,
             "Embedding: padding_idx {} must be within [-{}, {})", *o.padding_idx, num_embeddings, num_embeddings);
    if (*o.padding_idx < 0) *o.padding_idx += num_embeddings;
  }
  return o;
}

// N(0, 1), the padding row zeroed (the options checked first).
Tensor initial_table(int64_t num_embeddings, int64_t embedding_dim, const EmbeddingOptions& o) {
  const EmbeddingOptions c = checked(o, num_embeddings, embedding_dim);
  Tensor w = randn({num_embeddings, embedding_dim}, o.options);
  if (c.padding_idx) w.select(0, *c.padding_idx).fill_(0);
  return w;
}
}  // namespace

Embedding::Embedding(Tensor w, EmbeddingOptions o, bool trainable)
    : Module("Embedding"), opts_(checked(o, w.size(0), w.size(1))) {
  weight = register_parameter("weight", std::move(w), trainable);
}

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, EmbeddingOptions o)
    : Embedding(initial_table(num_embeddings, embedding_dim, o), o, true) {}

std::shared_ptr<Embedding> Embedding::from_pretrained(const Tensor& embeddings, bool freeze, EmbeddingOptions o) {
  AG_CHECK(embeddings.defined() && embeddings.dim() == 2,
           "Embedding.from_pretrained: embeddings must be 2-D [num_embeddings, embedding_dim], got {}",
           embeddings.defined() ? embeddings.desc() : std::string("an undefined tensor"));
  // A copy of the table (no random draw first, as PyTorch's _weight): the generator is left alone.
  return std::shared_ptr<Embedding>(new Embedding(embeddings.detach().clone(), o, !freeze));
}

Tensor Embedding::forward(const Tensor& input) {
  return embedding(input, weight, opts_.padding_idx, opts_.scale_grad_by_freq);
}

PReLU::PReLU(int64_t num_parameters, double init, TensorOptions o) : Module("PReLU") {
  AG_CHECK(num_parameters > 0, "PReLU: num_parameters must be positive, got {}", num_parameters);
  weight = register_parameter("weight", full({num_parameters}, init, o));
}
Tensor PReLU::forward(const Tensor& x) { return prelu(x, weight); }
GELU::GELU(std::string approximate) : Module("GELU"), approximate_(std::move(approximate)) {
  AG_CHECK(approximate_ == "none" || approximate_ == "tanh", "GELU: approximate must be \"none\" or \"tanh\", got \"{}\"",
           approximate_);
}
Tensor GELU::forward(const Tensor& x) { return gelu(x, approximate_); }
Tensor Tanh::forward(const Tensor& x) { return tanh(x); }
Tensor Sigmoid::forward(const Tensor& x) { return sigmoid(x); }
Tensor Dropout::forward(const Tensor& x) { return dropout(x, p_, is_training()); }
Tensor Flatten::forward(const Tensor& x) { return flatten(x, start_, end_); }

BatchNorm2d::BatchNorm2d(int64_t n, double eps, double momentum, TensorOptions o)
    : Module("BatchNorm2d"), eps_(eps), momentum_(momentum) {
  TensorOptions f32 = TensorOptions(kFloat32).device(o.device());
  weight = register_parameter("weight", ones({n}, f32));
  bias = register_parameter("bias", zeros({n}, f32));
  running_mean = register_buffer("running_mean", zeros({n}, f32));
  running_var = register_buffer("running_var", ones({n}, f32));
  num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, TensorOptions(kInt64).device(o.device())));
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  AG_CHECK(x.dim() == 4, "BatchNorm2d: expected a 4-D input [N, C, H, W], got {}", x.desc());
  if (is_training()) {
    NoGradGuard no_grad;
    num_batches_tracked.add_(1);
  }
  return batch_norm(x, running_mean, running_var, weight, bias, is_training(), momentum_, eps_);
}

LayerNorm::LayerNorm(Shape shape, double eps, TensorOptions o) : Module("LayerNorm"), shape_(shape), eps_(eps) {
  weight = register_parameter("weight", ones(shape, o));
  bias = register_parameter("bias", zeros(shape, o));
}

Tensor LayerNorm::forward(const Tensor& x) { return layer_norm(x, shape_, weight, bias, eps_); }

std::pair<Tensor, Tensor> LayerNorm::add_and_norm(const Tensor& x, const Tensor& residual) {
  return add_layer_norm(x, residual, shape_, weight, bias, eps_);
}

Bilinear::Bilinear(int64_t in1, int64_t in2, int64_t out, LinearOptions o) : Module("Bilinear") {
  AG_CHECK(in1 > 0 && in2 > 0 && out > 0, "Bilinear: features must be positive, got {}, {} and {}", in1, in2, out);
  weight = register_parameter("weight", empty({out, in1, in2}, o.options));
  const double bound = 1.0 / std::sqrt(static_cast<double>(in1));
  init::uniform_(weight, -bound, bound);
  if (o.bias) {
    bias = register_parameter("bias", empty({out}, o.options));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Bilinear::forward(const Tensor& x1, const Tensor& x2) { return bilinear(x1, x2, weight, bias); }

GroupNorm::GroupNorm(int64_t groups, int64_t channels, double eps, bool affine, TensorOptions o)
    : Module("GroupNorm"), num_groups(groups), num_channels(channels), eps(eps) {
  AG_CHECK(groups > 0 && channels % groups == 0, "GroupNorm: {} channels do not split into {} groups", channels, groups);
  if (affine) {
    weight = register_parameter("weight", ones({channels}, o));
    bias = register_parameter("bias", zeros({channels}, o));
  }
}

Tensor GroupNorm::forward(const Tensor& x) { return group_norm(x, num_groups, weight, bias, eps); }

}  // namespace ampgrad::nn
