// Parameter initialization, in place and without autograd, as torch.nn.init.
#pragma once

#include <string>

#include <ampgrad/core/tensor.h>

namespace ampgrad::nn::init {

// fan_in = size(1) * receptive field, fan_out = size(0) * receptive field.
std::pair<int64_t, int64_t> fans(const Tensor& t);
// nonlinearity: "linear", "relu", "leaky_relu" (with a), "tanh", "sigmoid".
double calculate_gain(const std::string& nonlinearity, double a = 0.01);

void uniform_(const Tensor& t, double low, double high);
void normal_(const Tensor& t, double mean, double std);
void constant_(const Tensor& t, double value);
void zeros_(const Tensor& t);
void ones_(const Tensor& t);
// Kaiming (He): std = gain / sqrt(fan_in); a is leaky_relu's negative slope.
void kaiming_uniform_(const Tensor& t, double a = 0, const std::string& nonlinearity = "leaky_relu");
void kaiming_normal_(const Tensor& t, double a = 0, const std::string& nonlinearity = "leaky_relu");
// Xavier (Glorot): std = gain * sqrt(2 / (fan_in + fan_out)).
void xavier_uniform_(const Tensor& t, double gain = 1.0);
void xavier_normal_(const Tensor& t, double gain = 1.0);

}  // namespace ampgrad::nn::init
