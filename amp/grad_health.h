// Gradient health in float16 terms: how much of a gradient would underflow without loss
// scaling, how much still does with it, and how close it comes to overflowing.
#pragma once

#include <string>

#include <ampgrad/core/tensor.h>

namespace ampgrad::amp {

inline constexpr double kFp16MinNormal = 6.103515625e-05;  // 2^-14
inline constexpr double kFp16Max = 65504.0;

struct GradHealth {
  int64_t numel = 0;
  double zero = 0;                // fraction of exact zeros (dead ReLU units, say)
  double underflow_unscaled = 0;  // fraction of non-zero values with |g| < 2^-14, the true gradient
  double underflow_scaled = 0;    // the same for |g * scale|, what a float16 backward carries
  double max_scaled = 0;          // largest finite |g * scale|
  bool nonfinite = false;         // any inf or NaN in the scaled gradient
};

// `scaled_grad` is a gradient as backward left it after scaler.scale(loss): scale * g.
// Computed on the tensor's device; reads back five numbers.
GradHealth grad_health(const Tensor& scaled_grad, double scale);

}  // namespace ampgrad::amp
