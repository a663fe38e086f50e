// ag::nn::functional: the stateless forms of the layers, as torch.nn.functional.
#pragma once

#include <ampgrad/ops/nn_ops.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad::nn::functional {

using ampgrad::adaptive_avg_pool2d;
using ampgrad::cosine_embedding_loss;
using ampgrad::cosine_similarity;
using ampgrad::grid_sample;
using ampgrad::group_norm;
using ampgrad::hinge_embedding_loss;
using ampgrad::interpolate;
using ampgrad::InterpolateMode;
using ampgrad::InterpolateOptions;
using ampgrad::huber_loss;
using ampgrad::kl_div;
using ampgrad::l1_loss;
using ampgrad::margin_ranking_loss;
using ampgrad::multi_margin_loss;
using ampgrad::multilabel_margin_loss;
using ampgrad::normalize;
using ampgrad::pairwise_distance;
using ampgrad::pdist;
using ampgrad::poisson_nll_loss;
using ampgrad::prelu;
using ampgrad::smooth_l1_loss;
using ampgrad::soft_margin_loss;
using ampgrad::softmin;
using ampgrad::triplet_margin_loss;
using ampgrad::avg_pool2d;
using ampgrad::batch_norm;
using ampgrad::bilinear;
using ampgrad::binary_cross_entropy;
using ampgrad::binary_cross_entropy_with_logits;
using ampgrad::conv1d;
using ampgrad::conv2d;
using ampgrad::conv3d;
using ampgrad::conv_transpose1d;
using ampgrad::conv_transpose2d;
using ampgrad::conv_transpose3d;
using ampgrad::cross_entropy;
using ampgrad::dropout;
using ampgrad::embedding;
using ampgrad::scaled_dot_product_attention;
using ampgrad::gelu;
using ampgrad::layer_norm;
using ampgrad::linear;
using ampgrad::linear_gelu;
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
