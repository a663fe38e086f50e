// The neural-network ops (ag::conv2d, pooling, norms, dropout, losses): what nn/ layers call.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <utility>

#include <ampgrad/core/conv_params.h>
#include <ampgrad/core/tensor.h>

namespace ampgrad {

// Convolutions (ops/conv.cpp), as torch.nn.functional's: input [N, C_in, spatial...] (or
// unbatched, without N), weight [C_out, C_in/groups, k...], bias [C_out] or undefined. A 4-D
// input in NCHW or channels-last memory format gives an output in its format.
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), int64_t stride = 1,
              int64_t padding = 0, int64_t dilation = 1, int64_t groups = 1);
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              std::array<int64_t, 2> stride = {1, 1}, std::array<int64_t, 2> padding = {0, 0},
              std::array<int64_t, 2> dilation = {1, 1}, int64_t groups = 1);
Tensor conv3d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              std::array<int64_t, 3> stride = {1, 1, 1}, std::array<int64_t, 3> padding = {0, 0, 0},
              std::array<int64_t, 3> dilation = {1, 1, 1}, int64_t groups = 1);
// Transposed convolutions, PyTorch's argument order: weight [C_in, C_out/groups, k...];
// output size (in - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1, with
// 0 <= output_padding < stride (PyTorch also takes output_padding < dilation). Padding is a
// number per side for both kinds: PyTorch's padding="same"/"valid" and padding_mode are not
// taken.
Tensor conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), int64_t stride = 1,
                        int64_t padding = 0, int64_t output_padding = 0, int64_t groups = 1, int64_t dilation = 1);
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                        std::array<int64_t, 2> stride = {1, 1}, std::array<int64_t, 2> padding = {0, 0},
                        std::array<int64_t, 2> output_padding = {0, 0}, int64_t groups = 1,
                        std::array<int64_t, 2> dilation = {1, 1});
Tensor conv_transpose3d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                        std::array<int64_t, 3> stride = {1, 1, 1}, std::array<int64_t, 3> padding = {0, 0, 0},
                        std::array<int64_t, 3> output_padding = {0, 0, 0}, int64_t groups = 1,
                        std::array<int64_t, 3> dilation = {1, 1, 1});
// Windows (ops/conv.cpp, ops/pool.cpp): inputs [N, C, H, W].
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
// A pre-norm transformer's residual add and the next layer norm in one op (Note [Add and
// layer norm] in ops/norm.cpp): returns {layer_norm(x + residual), x + residual}, the values
// and gradients of `s = x + residual; layer_norm(s, ...)` (under autocast too: the add
// promotes, layer_norm computes in float32). x and residual have one shape. On CUDA, a
// float32 sum (x and residual float32, or one of them float16/bfloat16) takes one kernel
// forward where the pair took two; elsewhere it is that pair of ops.
std::pair<Tensor, Tensor> add_layer_norm(const Tensor& x, const Tensor& residual, const Shape& normalized_shape,
                                         const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                                         double eps = 1e-5);
// x [N, C, *]: each sample's C channels in num_groups groups, each normalized over its
// channels and positions; weight and bias [C] (optional).
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                  double eps = 1e-5);

// x where x > 0, weight * x elsewhere; weight holds 1 value or one per channel (dim 1; an
// input of fewer than 2 dims has one channel) (ops/prelu.cpp).
Tensor prelu(const Tensor& x, const Tensor& weight);

// The rows of weight [num_embeddings, embedding_dim] picked by input (int64 or int32 indices,
// any shape): input.shape() + [embedding_dim], as torch.nn.functional.embedding. padding_idx
// (negative counts from the end) gets no gradient; scale_grad_by_freq divides each row's
// gradient by its index's count in input. The backward is deterministic (ops/embedding.cpp).
Tensor embedding(const Tensor& input, const Tensor& weight, std::optional<int64_t> padding_idx = std::nullopt,
                 bool scale_grad_by_freq = false);

// softmax(query key^T * scale + mask) value over the last two dims, as
// torch.nn.functional.scaled_dot_product_attention: query [..., L, E], key [..., S, E], value
// [..., S, Ev] (leading dims broadcast) give [..., L, Ev]; scale defaults to 1/sqrt(E). attn_mask
// broadcasts to [..., L, S]: bool (true: may attend) or query's dtype (added to the scores);
// is_causal lets position i attend to j <= i (no attn_mask with it). A row left with nothing to
// attend to gives zeros. dropout_p drops attention weights whenever it is > 0 (ops/attention.cpp).
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask = Tensor(), double dropout_p = 0.0, bool is_causal = false,
                                    std::optional<double> scale = std::nullopt);

// Whether the fused CUDA path may take its one-tile kernel for short sequences (L and S at
// most 128: Note [Attention in one tile] in cuda/attention_tile.cu), as
// torch.backends.cuda.enable_flash_sdp switches a backend; process-wide. On by default; off
// (enable_tile_sdp(false), or AMPGRAD_TILE_SDP=0 at start), those calls go to cuDNN's flash
// attention.
void enable_tile_sdp(bool enabled);
bool tile_sdp_enabled();

// Zeroes each element with probability p and scales the rest by 1/(1-p) (training only).
// Masks come from a counter-based hash, identical on the CPU and CUDA for the same seed.
Tensor dropout(const Tensor& x, double p, bool training = true);

// Losses (ops/loss.cpp, ops/pointwise_loss.cpp, ops/pair_loss.cpp). reduction as PyTorch's:
// None keeps one loss per element (per sample for the classification and pair losses), Mean
// averages them (nll_loss and cross_entropy over the rows not ignored), Sum adds them;
// BatchMean (kl_div only) adds them and divides by the batch size, input.size(0). The target
// has the input's shape unless an op says otherwise (PyTorch broadcasts l1/mse/smooth_l1/huber
// targets with a warning; ampgrad refuses), and the pointwise losses want a floating target
// (PyTorch's backward fails on an integer one); a wrong shape or dtype is an ag::Error.
enum class Reduction { None, Mean, Sum, BatchMean };

// nll_loss and cross_entropy take input [N, C] with target [N] (int64 class indices), [C] with
// a 0-dim target, or [N, C, d1, ...] with target [N, d1, ...] (a loss per position:
// segmentation). weight [C] (optional, the input's dtype) scales each class's losses, and Mean
// then divides by the counted rows' total weight, as PyTorch's. Rows whose target is
// ignore_index count for nothing. cross_entropy's label_smoothing mixes the target with the
// uniform distribution over classes.
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, int64_t ignore_index = -100);
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const Tensor& weight, int64_t ignore_index = -100,
                Reduction reduction = Reduction::Mean);
Tensor cross_entropy(const Tensor& logits, const Tensor& target, double label_smoothing = 0.0,
                     int64_t ignore_index = -100);
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight, int64_t ignore_index = -100,
                     Reduction reduction = Reduction::Mean, double label_smoothing = 0.0);
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
// Quadratic where |input - target| < beta, linear outside; beta = 0 is l1_loss.
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                      double beta = 1.0);
// Quadratic where |input - target| <= delta, linear with slope delta outside.
Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                  double delta = 1.0);
// log(1 + exp(-target * input)), target labels 1 and -1.
Tensor soft_margin_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
// input log-probabilities, target probabilities (log-probabilities with log_target):
// target * (log(target) - input). PyTorch's mean divides by every element; BatchMean is the
// KL divergence per sample.
Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
              bool log_target = false);
// log_input: exp(input) - target * input; else input - target * log(input + eps). full adds
// Stirling's approximation of log(target!) where target > 1.
Tensor poisson_nll_loss(const Tensor& input, const Tensor& target, bool log_input = true, bool full = false,
                        double eps = 1e-8, Reduction reduction = Reduction::Mean);
// input where target is 1, max(0, margin - input) where it is -1.
Tensor hinge_embedding_loss(const Tensor& input, const Tensor& target, double margin = 1.0,
                            Reduction reduction = Reduction::Mean);
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        Reduction reduction = Reduction::Mean);
// max(0, -target * (input1 - input2) + margin), labels 1 and -1.
Tensor margin_ranking_loss(const Tensor& input1, const Tensor& input2, const Tensor& target, double margin = 0.0,
                           Reduction reduction = Reduction::Mean);
// Inputs [N, D] (or [D]), target [N] (or 0-dim) of labels 1 and -1: 1 - cos(x1, x2) where 1,
// max(0, cos(x1, x2) - margin) where -1.
Tensor cosine_embedding_loss(const Tensor& input1, const Tensor& input2, const Tensor& target, double margin = 0.0,
                             Reduction reduction = Reduction::Mean);
// max(0, d(anchor, positive) - d(anchor, negative) + margin), d = pairwise_distance(p, eps);
// swap takes d(positive, negative) where it is smaller.
Tensor triplet_margin_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative, double margin = 1.0,
                           double p = 2, double eps = 1e-6, bool swap = false, Reduction reduction = Reduction::Mean);
// Input [N, C] (or [C]), int64 target [N]: the multi-class hinge loss, sum over j != y of
// max(0, margin - x[y] + x[j])^p (p 1 or 2, times weight[y] when given) / C.
Tensor multi_margin_loss(const Tensor& input, const Tensor& target, int64_t p = 1, double margin = 1.0,
                         const Tensor& weight = Tensor(), Reduction reduction = Reduction::Mean);
// Input [N, C] (or [C]), int64 target of the same shape: each row's target classes, ended by
// the first -1. Sum over targets j and non-targets i of max(0, 1 - (x[j] - x[i])) / C.
Tensor multilabel_margin_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
// Banned under float16 autocast (use binary_cross_entropy_with_logits).
Tensor binary_cross_entropy(const Tensor& probs, const Tensor& target, Reduction reduction = Reduction::Mean);

// Vector norms and distances (ops/vector_norm.cpp). norm: the p-norm over dims (every dim
// when empty), as torch.linalg.vector_norm: p = 2 (the Frobenius norm of the dims), 1, inf,
// -inf, 0 (the count of nonzeros) or any p > 0; p < 0 other than -inf is an ag::Error.
Tensor norm(const Tensor& x, double p = 2, const Shape& dims = {}, bool keepdim = false);
Tensor dist(const Tensor& a, const Tensor& b, double p = 2);  // norm(a - b, p), broadcasting
// x / max(norm(x, p, dim), eps), as torch.nn.functional.normalize.
Tensor normalize(const Tensor& x, double p = 2, int64_t dim = 1, double eps = 1e-12);
Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, int64_t dim = 1, double eps = 1e-8);
// norm(x1 - x2 + eps, p) over the last dim.
Tensor pairwise_distance(const Tensor& x1, const Tensor& x2, double p = 2, double eps = 1e-6, bool keepdim = false);
// [..., P, M] and [..., R, M] -> [..., P, R]: the p-norm distance of every pair of rows.
Tensor cdist(const Tensor& x1, const Tensor& x2, double p = 2);
// [N, M] -> [N (N - 1) / 2]: the distances of rows i < j, row by row.
Tensor pdist(const Tensor& x, double p = 2);
// Each slice along dim whose p-norm exceeds maxnorm, scaled to norm maxnorm.
Tensor renorm(const Tensor& x, double p, int64_t dim, double maxnorm);

// x1 [*, in1], x2 [*, in2], weight [out, in1, in2], bias [out] -> [*, out]:
// y = x1^T W x2 + b (ops/products.cpp).
Tensor bilinear(const Tensor& x1, const Tensor& x2, const Tensor& weight, const Tensor& bias = Tensor());

// input [N, C, H, W] sampled at grid [N, Ho, Wo, 2] (normalized x, y in [-1, 1]) ->
// [N, C, Ho, Wo], as torch.nn.functional.grid_sample (ops/grid_sample.cpp). align_corners:
// -1 and 1 are the corner pixels' centres (else their outer edges).
enum class GridMode { bilinear, nearest };
enum class GridPadding { zeros, border, reflection };
Tensor grid_sample(const Tensor& input, const Tensor& grid, GridMode mode = GridMode::bilinear,
                   GridPadding padding = GridPadding::zeros, bool align_corners = false);

// Resampling of input [N, C, d1, ...] (1 to 3 spatial dims) to `size` or by `scale_factor`
// (one value for every spatial dim, or one per dim), as torch.nn.functional.interpolate
// (ops/interpolate.cpp): nearest (PyTorch's default), nearest_exact (pixel centres, as
// Pillow), linear (3-D input), bilinear and bicubic (4-D), trilinear (5-D), area (4-D: an
// adaptive average pool). align_corners (linear modes only; default false): the corner
// pixels' centres map to each other. A given scale_factor maps coordinates unless
// recompute_scale_factor asks for input / output sizes instead, as PyTorch's.
enum class InterpolateMode { nearest, nearest_exact, linear, bilinear, bicubic, trilinear, area };
struct InterpolateOptions {
  InterpolateOptions& size(Shape v) { size_ = std::move(v); return *this; }
  InterpolateOptions& scale_factor(std::vector<double> v) { scale_factor_ = std::move(v); return *this; }
  InterpolateOptions& mode(InterpolateMode v) { mode_ = v; return *this; }
  InterpolateOptions& align_corners(bool v) { align_corners_ = v; return *this; }
  InterpolateOptions& recompute_scale_factor(bool v) { recompute_scale_factor_ = v; return *this; }
  std::optional<Shape> size_;
  std::optional<std::vector<double>> scale_factor_;
  InterpolateMode mode_ = InterpolateMode::nearest;
  std::optional<bool> align_corners_, recompute_scale_factor_;
};
Tensor interpolate(const Tensor& input, const InterpolateOptions& options);

// Memory formats (ops/memory_format.cpp).
bool is_channels_last(const Tensor& t);  // 4-D with NHWC strides
Tensor empty_channels_last(const Shape& shape, TensorOptions options);

}  // namespace ampgrad
