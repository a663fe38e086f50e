// The layers: Linear, Embedding, pooling, activations, Dropout, Flatten, BatchNorm2d, LayerNorm,
// GroupNorm (the losses are in nn/losses.h).
// Each initializes its parameters as PyTorch's layer of the same name does.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <ampgrad/nn/conv.h>  // Conv1d, Conv2d, Conv3d, ConvTranspose1d/2d/3d
#include <ampgrad/nn/module.h>
#include <ampgrad/ops/nn_ops.h>  // InterpolateOptions

namespace ampgrad::nn {

struct LinearOptions {
  bool bias = true;
  TensorOptions options;  // dtype/device of the parameters
};

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, LinearOptions o = {});
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;
};

struct EmbeddingOptions {
  std::optional<int64_t> padding_idx;  // its row starts at zero and gets no gradient
  bool scale_grad_by_freq = false;     // each row's gradient divided by its index's count in the batch
  TensorOptions options;               // dtype/device of the weight
};

// A table of num_embeddings vectors of embedding_dim, looked up by integer indices: weight
// drawn from N(0, 1), the padding row zeroed, as torch.nn.Embedding (ops/embedding.cpp).
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, EmbeddingOptions o = {});
  // A table holding `embeddings` [num_embeddings, embedding_dim] (copied), frozen (no gradient)
  // unless freeze is false, as torch.nn.Embedding.from_pretrained.
  static std::shared_ptr<Embedding> from_pretrained(const Tensor& embeddings, bool freeze = true,
                                                    EmbeddingOptions o = {});
  Tensor forward(const Tensor& input) override;
  Tensor weight;

 private:
  Embedding(Tensor weight, EmbeddingOptions o, bool trainable);  // `weight` as the table
  EmbeddingOptions opts_;
};

// y = x1^T W x2 + b: weight [out, in1, in2] and bias [out] uniform in +-1/sqrt(in1), as
// torch.nn.Bilinear. Called with two inputs: bilinear(x1, x2).
class Bilinear : public Module {
 public:
  Bilinear(int64_t in1_features, int64_t in2_features, int64_t out_features, LinearOptions o = {});
  Tensor forward(const Tensor& x1, const Tensor& x2);
  Tensor operator()(const Tensor& x1, const Tensor& x2) { return forward(x1, x2); }
  Tensor weight, bias;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride = {0, 0},
                     std::array<int64_t, 2> padding = {0, 0})
      : Module("MaxPool2d"), kernel_(kernel), stride_(stride), padding_(padding) {}
  explicit MaxPool2d(int64_t k) : MaxPool2d({k, k}) {}
  Tensor forward(const Tensor& x) override;

 private:
  std::array<int64_t, 2> kernel_, stride_, padding_;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride = {0, 0},
                     std::array<int64_t, 2> padding = {0, 0})
      : Module("AvgPool2d"), kernel_(kernel), stride_(stride), padding_(padding) {}
  explicit AvgPool2d(int64_t k) : AvgPool2d({k, k}) {}
  Tensor forward(const Tensor& x) override;

 private:
  std::array<int64_t, 2> kernel_, stride_, padding_;
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(std::array<int64_t, 2> out) : Module("AdaptiveAvgPool2d"), out_(out) {}
  Tensor forward(const Tensor& x) override;

 private:
  std::array<int64_t, 2> out_;
};

class ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Tensor forward(const Tensor& x) override;
};
// prelu with a learnable weight of num_parameters values (1, or the input's channels), each
// init, as torch.nn.PReLU.
class PReLU : public Module {
 public:
  explicit PReLU(int64_t num_parameters = 1, double init = 0.25, TensorOptions o = {});
  Tensor forward(const Tensor& x) override;
  Tensor weight;
};
// gelu, exact ("none") or its tanh approximation ("tanh"), as torch.nn.GELU(approximate).
class GELU : public Module {
 public:
  explicit GELU(std::string approximate = "none");
  Tensor forward(const Tensor& x) override;
  const std::string& approximate() const { return approximate_; }

 private:
  std::string approximate_;
};
class Tanh : public Module {
 public:
  Tanh() : Module("Tanh") {}
  Tensor forward(const Tensor& x) override;
};
class Sigmoid : public Module {
 public:
  Sigmoid() : Module("Sigmoid") {}
  Tensor forward(const Tensor& x) override;
};

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5) : Module("Dropout"), p_(p) {}
  Tensor forward(const Tensor& x) override;

 private:
  double p_;
};

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : Module("Flatten"), start_(start_dim), end_(end_dim) {}
  Tensor forward(const Tensor& x) override;

 private:
  int64_t start_, end_;
};

// Resamples [N, C, d1, ...] as interpolate(x, options) does (ops/nn_ops.h), as torch.nn.Upsample:
// Upsample(InterpolateOptions().scale_factor({2}).mode(InterpolateMode::bilinear)).
class Upsample : public Module {
 public:
  explicit Upsample(InterpolateOptions options) : Module("Upsample"), options(std::move(options)) {}
  Tensor forward(const Tensor& x) override { return interpolate(x, options); }
  InterpolateOptions options;
};

// Running statistics and the affine parameters are float32 whatever the input dtype, so
// under autocast (or with 16-bit activations) the statistics keep their precision.
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, TensorOptions o = {});
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  double eps_, momentum_;
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, TensorOptions o = {});
  Tensor forward(const Tensor& x) override;
  // {this(x + residual), x + residual} in one op (add_layer_norm): a pre-norm transformer's
  // residual add and the norm after it.
  std::pair<Tensor, Tensor> add_and_norm(const Tensor& x, const Tensor& residual);
  Tensor weight, bias;

 private:
  Shape shape_;
  double eps_;
};

// group_norm over num_groups groups of num_channels; affine: weight (ones) and bias (zeros)
// of [num_channels], as torch.nn.GroupNorm.
class GroupNorm : public Module {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true, TensorOptions o = {});
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;  // undefined without affine
  int64_t num_groups, num_channels;
  double eps;
};

}  // namespace ampgrad::nn
