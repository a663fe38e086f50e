// ag::nn::functional: the stateless forms of the layers, as torch.nn.functional.
#pragma once

#include "ops/nn_ops.h"
#include "ops/ops.h"

namespace ampgrad::nn::functional {

using ampgrad::adaptive_avg_pool2d;
using ampgrad::avg_pool2d;
using ampgrad::batch_norm;
using ampgrad::binary_cross_entropy;
using ampgrad::binary_cross_entropy_with_logits;
using ampgrad::conv2d;
using ampgrad::cross_entropy;
using ampgrad::dropout;
using ampgrad::gelu;
using ampgrad::layer_norm;
using ampgrad::linear;
using ampgrad::linear_relu;
using ampgrad::log_softmax;
using ampgrad::max_pool2d;
using ampgrad::mse_loss;
using ampgrad::nll_loss;
using ampgrad::relu;
using ampgrad::sigmoid;
using ampgrad::softmax;
using ampgrad::tanh;

}  // namespace ampgrad::nn::functional
