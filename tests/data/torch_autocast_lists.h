// PyTorch 2.x's CUDA autocast op lists, as data: aten/src/ATen/autocast_mode.cpp of
// pytorch/pytorch at commit cfed411fae0c18aa3d20351bc8dc8e1218db77ff (the 2.x line, about v2.1),
// the KERNEL_CUDA registrations with their cast policies, overloads collapsed to one name.
// fp32_set_opt_dtype and fp32_append_dtype (ops that take a dtype argument) are float32 here.
// Read by tests/test_amp.cpp, which checks ampgrad's category of every op both have. cat,
// stack and where are in no list: PyTorch's own type promotion widens their inputs.
#pragma once

#include <string_view>

namespace torch_autocast {

enum class Policy { lower_precision_fp, fp32, fp32_set_opt_dtype, fp32_append_dtype, promote, banned };

struct Entry {
  std::string_view op;
  Policy policy;
};

inline constexpr Entry kCudaLists[] = {
    // lower_precision_fp
    {"_convolution", Policy::lower_precision_fp}, {"conv1d", Policy::lower_precision_fp},
    {"conv2d", Policy::lower_precision_fp}, {"conv3d", Policy::lower_precision_fp},
    {"conv_tbc", Policy::lower_precision_fp}, {"conv_transpose1d", Policy::lower_precision_fp},
    {"conv_transpose2d", Policy::lower_precision_fp}, {"conv_transpose3d", Policy::lower_precision_fp},
    {"convolution", Policy::lower_precision_fp}, {"cudnn_convolution", Policy::lower_precision_fp},
    {"cudnn_convolution_transpose", Policy::lower_precision_fp}, {"prelu", Policy::lower_precision_fp},
    {"addmm", Policy::lower_precision_fp}, {"addmv", Policy::lower_precision_fp},
    {"addr", Policy::lower_precision_fp}, {"matmul", Policy::lower_precision_fp},
    {"einsum", Policy::lower_precision_fp}, {"mm", Policy::lower_precision_fp},
    {"mv", Policy::lower_precision_fp}, {"linear", Policy::lower_precision_fp},
    {"addbmm", Policy::lower_precision_fp}, {"baddbmm", Policy::lower_precision_fp},
    {"bmm", Policy::lower_precision_fp}, {"chain_matmul", Policy::lower_precision_fp},
    {"linalg_multi_dot", Policy::lower_precision_fp}, {"_thnn_fused_lstm_cell", Policy::lower_precision_fp},
    {"_thnn_fused_gru_cell", Policy::lower_precision_fp}, {"lstm_cell", Policy::lower_precision_fp},
    {"gru_cell", Policy::lower_precision_fp}, {"rnn_tanh_cell", Policy::lower_precision_fp},
    {"rnn_relu_cell", Policy::lower_precision_fp},
    {"_scaled_dot_product_flash_attention", Policy::lower_precision_fp},
    {"scaled_dot_product_attention", Policy::lower_precision_fp},
    // fp32
    {"acos", Policy::fp32}, {"asin", Policy::fp32}, {"cosh", Policy::fp32}, {"erfinv", Policy::fp32},
    {"exp", Policy::fp32}, {"expm1", Policy::fp32}, {"log", Policy::fp32}, {"log10", Policy::fp32},
    {"log2", Policy::fp32}, {"log1p", Policy::fp32}, {"reciprocal", Policy::fp32}, {"rsqrt", Policy::fp32},
    {"sinh", Policy::fp32}, {"tan", Policy::fp32}, {"pow", Policy::fp32}, {"softplus", Policy::fp32},
    {"layer_norm", Policy::fp32}, {"native_layer_norm", Policy::fp32}, {"group_norm", Policy::fp32},
    {"frobenius_norm", Policy::fp32}, {"nuclear_norm", Policy::fp32}, {"cosine_similarity", Policy::fp32},
    {"poisson_nll_loss", Policy::fp32}, {"cosine_embedding_loss", Policy::fp32}, {"nll_loss", Policy::fp32},
    {"nll_loss2d", Policy::fp32}, {"hinge_embedding_loss", Policy::fp32}, {"kl_div", Policy::fp32},
    {"l1_loss", Policy::fp32}, {"smooth_l1_loss", Policy::fp32}, {"huber_loss", Policy::fp32},
    {"mse_loss", Policy::fp32}, {"margin_ranking_loss", Policy::fp32},
    {"multilabel_margin_loss", Policy::fp32}, {"soft_margin_loss", Policy::fp32},
    {"triplet_margin_loss", Policy::fp32}, {"multi_margin_loss", Policy::fp32},
    {"binary_cross_entropy_with_logits", Policy::fp32}, {"dist", Policy::fp32}, {"pdist", Policy::fp32},
    {"cdist", Policy::fp32}, {"renorm", Policy::fp32}, {"logsumexp", Policy::fp32},
    // fp32_set_opt_dtype
    {"prod", Policy::fp32_set_opt_dtype}, {"softmax", Policy::fp32_set_opt_dtype},
    {"log_softmax", Policy::fp32_set_opt_dtype}, {"cumprod", Policy::fp32_set_opt_dtype},
    {"cumsum", Policy::fp32_set_opt_dtype}, {"linalg_vector_norm", Policy::fp32_set_opt_dtype},
    {"linalg_matrix_norm", Policy::fp32_set_opt_dtype}, {"sum", Policy::fp32_set_opt_dtype},
    // fp32_append_dtype
    {"norm", Policy::fp32_append_dtype},
    // promote
    {"addcdiv", Policy::promote}, {"addcmul", Policy::promote}, {"atan2", Policy::promote},
    {"bilinear", Policy::promote}, {"cross", Policy::promote}, {"dot", Policy::promote},
    {"grid_sampler", Policy::promote}, {"index_put", Policy::promote}, {"tensordot", Policy::promote},
    {"scatter_add", Policy::promote},
    // Registered under AutocastCUDA in PyTorch 2.11.0+cu130 as well (its dispatcher's list on the
    // H200, torch._C._dispatch_get_registrations_for_dispatch_key("AutocastCUDA"): these 111
    // names and no others), with the policies of its AT_FORALL_* lists; _cudnn_rnn casts to
    // the lower precision (aten/src/ATen/native/cudnn/AutocastRNN.cpp).
    {"linalg_vecdot", Policy::lower_precision_fp}, {"_cudnn_rnn", Policy::lower_precision_fp},
    {"upsample_nearest1d", Policy::fp32}, {"upsample_nearest2d", Policy::fp32}, {"upsample_nearest3d", Policy::fp32},
    {"_upsample_nearest_exact1d", Policy::fp32}, {"_upsample_nearest_exact2d", Policy::fp32},
    {"_upsample_nearest_exact3d", Policy::fp32}, {"upsample_linear1d", Policy::fp32},
    {"upsample_bilinear2d", Policy::fp32}, {"_upsample_bilinear2d_aa", Policy::fp32},
    {"upsample_trilinear3d", Policy::fp32}, {"upsample_bicubic2d", Policy::fp32},
    {"_upsample_bicubic2d_aa", Policy::fp32}, {"vdot", Policy::promote},
    // banned
    {"binary_cross_entropy", Policy::banned},
};

}  // namespace torch_autocast
