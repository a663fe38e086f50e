// The neural-network ops (ag::conv2d, pooling, norms, dropout, losses): what nn/ layers call.
#pragma once

#include <array>
#include <optional>
#include <string>

#include "core/conv_params.h"
#include "core/tensor.h"

namespace ampgrad {

// Convolution and windows (ops/conv.cpp, ops/pool.cpp). Inputs are [N, C, H, W], in NCHW or
// channels-last memory format; conv2d's output keeps the input's format.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              std::array<int64_t, 2> stride = {1, 1}, std::array<int64_t, 2> padding = {0, 0},
              std::array<int64_t, 2> dilation = {1, 1}, int64_t groups = 1);
// im2col as an op: [N, C, H, W] -> [N, C*kh*kw, oh*ow], pad_value outside the image.
Tensor unfold(const Tensor& x, const Window2d& w, double pad_value = 0.0);
Tensor max_pool2d(const Tensor& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride = {0, 0},
                  std::array<int64_t, 2> padding = {0, 0}, std::array<int64_t, 2> dilation = {1, 1});
// count_include_pad = true, as PyTorch's default.
Tensor avg_pool2d(const Tensor& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride = {0, 0},
                  std::array<int64_t, 2> padding = {0, 0});
Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> output_size);

// Normalization (ops/norm.cpp). batch_norm normalizes over (N, H, W) per channel; in
// training it uses the batch's statistics and updates running_mean/var in place (momentum
// as PyTorch: new = (1 - m) * old + m * batch; the running variance is unbiased). The
// statistics are computed in float32 whatever the input dtype; the output has the input's dtype.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum = 0.1, double eps = 1e-5);
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

// Zeroes each element with probability p and scales the rest by 1/(1-p) (training only).
// Masks come from a counter-based hash, identical on the CPU and CUDA for the same seed.
Tensor dropout(const Tensor& x, double p, bool training = true);

// Losses (ops/loss.cpp): mean over the batch (ignored targets excluded).
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, int64_t ignore_index = -100);
Tensor cross_entropy(const Tensor& logits, const Tensor& target, double label_smoothing = 0.0,
                     int64_t ignore_index = -100);
Tensor mse_loss(const Tensor& input, const Tensor& target);
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target);
// Banned under float16 autocast (use binary_cross_entropy_with_logits).
Tensor binary_cross_entropy(const Tensor& probs, const Tensor& target);

// Memory formats (ops/memory_format.cpp).
bool is_channels_last(const Tensor& t);  // 4-D with NHWC strides
Tensor empty_channels_last(const Shape& shape, TensorOptions options);

}  // namespace ampgrad
