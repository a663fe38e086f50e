// Initializers: draws on the CPU from the default generator, then one copy into the tensor.
#include <ampgrad/nn/init.h>

#include <cmath>

#include <ampgrad/autograd/node.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad::nn::init {

std::pair<int64_t, int64_t> fans(const Tensor& t) {
  AG_CHECK(t.dim() >= 2, "init: fan in and fan out need a tensor with at least 2 dims, got {}", t.desc());
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

double calculate_gain(const std::string& nl, double a) {
  if (nl == "linear" || nl == "sigmoid" || nl == "conv2d") return 1.0;
  if (nl == "tanh") return 5.0 / 3.0;
  if (nl == "relu") return std::sqrt(2.0);
  if (nl == "leaky_relu") return std::sqrt(2.0 / (1 + a * a));
  AG_CHECK(false, "init: unknown nonlinearity '{}' (linear, relu, leaky_relu, tanh, sigmoid)", nl);
  return 1.0;
}

void uniform_(const Tensor& t, double low, double high) {
  NoGradGuard no_grad;
  Tensor r = rand(t.shape(), TensorOptions(kFloat64)) * (high - low) + low;
  Tensor(t).copy_(r);
}

void normal_(const Tensor& t, double mean, double std) {
  NoGradGuard no_grad;
  Tensor r = randn(t.shape(), TensorOptions(kFloat64)) * std + mean;
  Tensor(t).copy_(r);
}

void constant_(const Tensor& t, double value) {
  NoGradGuard no_grad;
  Tensor(t).fill_(value);
}
void zeros_(const Tensor& t) { constant_(t, 0); }
void ones_(const Tensor& t) { constant_(t, 1); }

void kaiming_uniform_(const Tensor& t, double a, const std::string& nl) {
  const double std = calculate_gain(nl, a) / std::sqrt(static_cast<double>(fans(t).first));
  const double bound = std::sqrt(3.0) * std;
  uniform_(t, -bound, bound);
}

void kaiming_normal_(const Tensor& t, double a, const std::string& nl) {
  normal_(t, 0, calculate_gain(nl, a) / std::sqrt(static_cast<double>(fans(t).first)));
}

void xavier_uniform_(const Tensor& t, double gain) {
  auto [fi, fo] = fans(t);
  const double bound = gain * std::sqrt(6.0 / static_cast<double>(fi + fo));
  uniform_(t, -bound, bound);
}

void xavier_normal_(const Tensor& t, double gain) {
  auto [fi, fo] = fans(t);
  normal_(t, 0, gain * std::sqrt(2.0 / static_cast<double>(fi + fo)));
}

}  // namespace ampgrad::nn::init
