// The convolution layers: construction with PyTorch's initialization, and forward.
#include <ampgrad/nn/conv.h>

#include <cmath>

#include <ampgrad/nn/init.h>
#include <ampgrad/ops/nn_ops.h>

namespace ampgrad::nn {

namespace {
// Checks a layer's channels and kernel and gives its weight's shape: [out, in/groups, k...],
// or [in, out/groups, k...] for a transposed layer.
Shape conv_weight_shape(const char* layer, int64_t in, int64_t out, int64_t groups, const Shape& kernel,
                        bool transposed) {
  AG_CHECK(in > 0 && out > 0 && groups > 0 && in % groups == 0 && out % groups == 0,
           "{}: channels in {} and out {} must be positive multiples of groups {}", layer, in, out, groups);
  for (int64_t k : kernel) AG_CHECK(k > 0, "{}: kernel size {} must be positive", layer, shape_str(kernel));
  Shape s = transposed ? Shape{in, out / groups} : Shape{out, in / groups};
  s.insert(s.end(), kernel.begin(), kernel.end());
  return s;
}

// PyTorch's _ConvNd.reset_parameters: kaiming_uniform_(a = sqrt(5)) on the weight (a bound of
// 1/sqrt(fan_in)), the bias uniform in +-1/sqrt(fan_in); fan_in is weight.size(1) times the
// kernel's volume, for a transposed layer's weight too.
void conv_init(const Tensor& weight, const Tensor& bias) {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(init::fans(weight).first));
    init::uniform_(bias, -bound, bound);
  }
}
}  // namespace

// The constructors of the six layers: weight, optional bias, PyTorch's initialization.
#define AG_CONV_LAYER_INIT(Layer, kernel, transposed)                                                   \
  weight = register_parameter("weight", empty(conv_weight_shape(#Layer, in, out, o.groups, kernel, transposed), \
                                              o.options));                                             \
  if (o.bias) bias = register_parameter("bias", empty({out}, o.options));                                \
  conv_init(weight, bias)

Conv1d::Conv1d(int64_t in, int64_t out, int64_t k, Conv1dOptions o) : Module("Conv1d"), opts(o) {
  AG_CONV_LAYER_INIT(Conv1d, Shape{k}, false);
}
Tensor Conv1d::forward(const Tensor& x) {
  return conv1d(x, weight, bias, opts.stride, opts.padding, opts.dilation, opts.groups);
}

Conv2d::Conv2d(int64_t in, int64_t out, std::array<int64_t, 2> k, Conv2dOptions o) : Module("Conv2d"), opts(o) {
  AG_CONV_LAYER_INIT(Conv2d, (Shape{k[0], k[1]}), false);
}
Tensor Conv2d::forward(const Tensor& x) {
  return conv2d(x, weight, bias, opts.stride, opts.padding, opts.dilation, opts.groups);
}

Conv3d::Conv3d(int64_t in, int64_t out, std::array<int64_t, 3> k, Conv3dOptions o) : Module("Conv3d"), opts(o) {
  AG_CONV_LAYER_INIT(Conv3d, (Shape{k[0], k[1], k[2]}), false);
}
Tensor Conv3d::forward(const Tensor& x) {
  return conv3d(x, weight, bias, opts.stride, opts.padding, opts.dilation, opts.groups);
}

ConvTranspose1d::ConvTranspose1d(int64_t in, int64_t out, int64_t k, ConvTranspose1dOptions o)
    : Module("ConvTranspose1d"), opts(o) {
  AG_CONV_LAYER_INIT(ConvTranspose1d, Shape{k}, true);
}
Tensor ConvTranspose1d::forward(const Tensor& x) {
  return conv_transpose1d(x, weight, bias, opts.stride, opts.padding, opts.output_padding, opts.groups, opts.dilation);
}

ConvTranspose2d::ConvTranspose2d(int64_t in, int64_t out, std::array<int64_t, 2> k, ConvTranspose2dOptions o)
    : Module("ConvTranspose2d"), opts(o) {
  AG_CONV_LAYER_INIT(ConvTranspose2d, (Shape{k[0], k[1]}), true);
}
Tensor ConvTranspose2d::forward(const Tensor& x) {
  return conv_transpose2d(x, weight, bias, opts.stride, opts.padding, opts.output_padding, opts.groups, opts.dilation);
}

ConvTranspose3d::ConvTranspose3d(int64_t in, int64_t out, std::array<int64_t, 3> k, ConvTranspose3dOptions o)
    : Module("ConvTranspose3d"), opts(o) {
  AG_CONV_LAYER_INIT(ConvTranspose3d, (Shape{k[0], k[1], k[2]}), true);
}
Tensor ConvTranspose3d::forward(const Tensor& x) {
  return conv_transpose3d(x, weight, bias, opts.stride, opts.padding, opts.output_padding, opts.groups, opts.dilation);
}

#undef AG_CONV_LAYER_INIT

}  // namespace ampgrad::nn
