// The op table's rows of the losses, norms, distances, grid_sample, scans and group norm
// (Note [Op table] in op_table.h).
// Inputs keep away from each loss's kinks: a difference away from 0 and from beta, a margin
// crossed by no element.
#include <cmath>

#include "op_rows.h"

namespace op_table {

namespace {

using R = ag::Reduction;
constexpr double kInf = INFINITY;

// x and a target y = x + a difference away from 0 and +-1 (l1's kink; beta's and delta's).
std::vector<In> regression(S s) {
  return {nrm(s), In{s, shifted(0, away({0, -1, 1}, 1.5, 0.05))}};
}
In lab(S s) { return In{std::move(s), labels()}; }
// Labels the loss compares (y == 1): a perturbed label is another case, so no gradcheck in them.
In fixed_lab(S s) { return fixed(lab(std::move(s))); }

Row loss_row(std::string op, std::string form, std::vector<In> in, Fn run) {
  return row(std::move(op), std::move(form), std::move(in), std::move(run)).tolerance(Tol::normalized);
}
// A pointwise loss with reduction none: elementwise, against its reference, at equal shapes.
Row each_row(std::string op, std::string form, std::vector<In> in, Fn run) {
  return row(std::move(op), std::move(form), std::move(in), std::move(run)).same_shapes();
}

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

}  // namespace

std::vector<Row> nn_rows() {
  return {
      // ---- Pointwise losses (core/loss_kinds.def) -------------------------------------------
      each_row("l1_loss", "none", regression({3, N}), [](const V& v) { return ag::l1_loss(v[0], v[1], R::None); })
          .reference([](double x, double y) { return std::abs(x - y); }),
      loss_row("l1_loss", "mean", regression({3, N}), [](const V& v) { return ag::l1_loss(v[0], v[1]); }),
      loss_row("l1_loss", "sum of a transpose", regression({N, 3}), [](const V& v) { return ag::l1_loss(v[0].t(), v[1].t(), R::Sum); }),
      each_row("mse_loss", "none", regression({3, N}), [](const V& v) { return ag::mse_loss(v[0], v[1], R::None); })
          .reference([](double x, double y) { return (x - y) * (x - y); }),
      loss_row("mse_loss", "sum", regression({3, N}), [](const V& v) { return ag::mse_loss(v[0], v[1], R::Sum); }),
      each_row("smooth_l1_loss", "none, beta 1", regression({3, N}), [](const V& v) { return ag::smooth_l1_loss(v[0], v[1], R::None); })
          .reference([](double x, double y) { return std::abs(x - y) < 1 ? 0.5 * (x - y) * (x - y) : std::abs(x - y) - 0.5; }),
      loss_row("smooth_l1_loss", "mean, beta 0.5", {nrm({3, N}), In{{3, N}, shifted(0, away({0, -0.5, 0.5}, 1, 0.05))}},
               [](const V& v) { return ag::smooth_l1_loss(v[0], v[1], R::Mean, 0.5); }),
      loss_row("smooth_l1_loss", "beta 0 is l1", regression({3, N}), [](const V& v) { return ag::smooth_l1_loss(v[0], v[1], R::Sum, 0.0); }),
      each_row("huber_loss", "none, delta 1", regression({3, N}), [](const V& v) { return ag::huber_loss(v[0], v[1], R::None); })
          .reference([](double x, double y) { return std::abs(x - y) <= 1 ? 0.5 * (x - y) * (x - y) : std::abs(x - y) - 0.5; }),
      loss_row("huber_loss", "mean, delta 0.5", {nrm({3, N}), In{{3, N}, shifted(0, away({0, -0.5, 0.5}, 1, 0.05))}},
               [](const V& v) { return ag::huber_loss(v[0], v[1], R::Mean, 0.5); }),
      each_row("soft_margin_loss", "none", {nrm({3, N}), lab({3, N})}, [](const V& v) { return ag::soft_margin_loss(v[0], v[1], R::None); })
          .reference([](double x, double y) { return std::log1p(std::exp(-y * x)); }),
      loss_row("soft_margin_loss", "mean", {nrm({3, N}), lab({3, N})}, [](const V& v) { return ag::soft_margin_loss(v[0], v[1]); }),
      each_row("kl_div", "none", {nrm({3, N}), uni({3, N}, 0.05, 1)}, [](const V& v) { return ag::kl_div(v[0], v[1], R::None); })
          .reference([](double x, double y) { return y * (std::log(y) - x); }),
      loss_row("kl_div", "batchmean of log_softmax", {nrm({N, 5}), uni({N, 5}, 0.05, 1)},
               [](const V& v) { return ag::kl_div(ag::log_softmax(v[0], 1), v[1], R::BatchMean); }),
      each_row("kl_div", "none, log_target", {nrm({3, N}), nrm({3, N})}, [](const V& v) { return ag::kl_div(v[0], v[1], R::None, true); })
          .reference([](double x, double y) { return std::exp(y) * (y - x); }),
      loss_row("kl_div", "sum, log_target", {nrm({3, N}), nrm({3, N})}, [](const V& v) { return ag::kl_div(v[0], v[1], R::Sum, true); }),
      each_row("poisson_nll_loss", "none, log_input", {nrm({3, N}), uni({3, N}, 0, 3)},
          [](const V& v) { return ag::poisson_nll_loss(v[0], v[1], true, false, 1e-8, R::None); })
          .reference([](double x, double y) { return std::exp(x) - y * x; })
          .tolerance(Tol::elementwise, 2),  // exp's last bit differs between CUDA and glibc
      loss_row("poisson_nll_loss", "mean, log_input", {nrm({3, N}), uni({3, N}, 0, 3)},
               [](const V& v) { return ag::poisson_nll_loss(v[0], v[1]); }),
      each_row("poisson_nll_loss", "none, rates, eps 0.01", {uni({3, N}, 0.5, 2), uni({3, N}, 0, 3)},
          [](const V& v) { return ag::poisson_nll_loss(v[0], v[1], false, false, 0.01, R::None); })
          .reference([](double x, double y) { return x - y * std::log(x + 0.01); }),
      each_row("poisson_nll_loss", "none, full (targets > 1)", {nrm({3, N}), uni({3, N}, 1.2, 4)},
          [](const V& v) { return ag::poisson_nll_loss(v[0], v[1], true, true, 1e-8, R::None); })
          .reference([](double x, double y) {
            return std::exp(x) - y * x + y * std::log(y) - y + 0.5 * std::log(2 * M_PI * y);
          })
          // Five terms as large as 20 (e^x, y x) summed to results near 1: each device's
          // roundings of the terms show at 8 ulp of the result (seen on the H200: 1.4e-6 at 1.6).
          .tolerance(Tol::elementwise, 8),
      loss_row("poisson_nll_loss", "sum, full (targets < 1 take no term)", {nrm({3, N}), uni({3, N}, 0.1, 0.9)},
               [](const V& v) { return ag::poisson_nll_loss(v[0], v[1], true, true, 1e-8, R::Sum); }),
      each_row("hinge_embedding_loss", "none, margin 1", {kinked({3, N}, {1}), fixed_lab({3, N})},
          [](const V& v) { return ag::hinge_embedding_loss(v[0], v[1], 1.0, R::None); })
          .reference([](double x, double y) { return y == 1 ? x : std::max(0.0, 1 - x); }),
      loss_row("hinge_embedding_loss", "mean, margin 0.5", {kinked({3, N}, {0.5}), fixed_lab({3, N})},
               [](const V& v) { return ag::hinge_embedding_loss(v[0], v[1], 0.5); }),
      each_row("binary_cross_entropy_with_logits", "none", {nrm({3, N}), uni({3, N}, 0, 1)},
          [](const V& v) { return ag::binary_cross_entropy_with_logits(v[0], v[1], R::None); })
          .reference([](double x, double y) { return -(y * std::log(sigmoid(x)) + (1 - y) * std::log(1 - sigmoid(x))); }),
      loss_row("binary_cross_entropy_with_logits", "sum", {nrm({3, N}), uni({3, N}, 0, 1)},
               [](const V& v) { return ag::binary_cross_entropy_with_logits(v[0], v[1], R::Sum); }),
      loss_row("binary_cross_entropy", "none", {uni({3, N}, 0.05, 0.95), uni({3, N}, 0, 1)},
               [](const V& v) { return ag::binary_cross_entropy(v[0], v[1], R::None); }),

      // ---- Losses composed of ops -------------------------------------------------------------
      loss_row("margin_ranking_loss", "mean, margin 0.5", {nrm({N}), In{{N}, shifted(0, away({-0.5, 0.5}))}, lab({N})},
               [](const V& v) { return ag::margin_ranking_loss(v[0], v[1], v[2], 0.5); }),
      loss_row("margin_ranking_loss", "none, margin 0", {nrm({N}), In{{N}, shifted(0, away({0}))}, lab({N})},
               [](const V& v) { return ag::margin_ranking_loss(v[0], v[1], v[2], 0.0, R::None); }),
      loss_row("cosine_embedding_loss", "mean, margin 0.2", {nrm({N, 3}), nrm({N, 3}), fixed_lab({N})},
               [](const V& v) { return ag::cosine_embedding_loss(v[0], v[1], v[2], 0.2); }),
      loss_row("cosine_embedding_loss", "none, one pair [D]", {nrm({N}), nrm({N}), fixed_lab({})},
               [](const V& v) { return ag::cosine_embedding_loss(v[0], v[1], v[2], 0.0, R::None); }),
      loss_row("triplet_margin_loss", "mean", {nrm({N, 3}), nrm({N, 3}), nrm({N, 3}, 2)},
               [](const V& v) { return ag::triplet_margin_loss(v[0], v[1], v[2]); }),
      loss_row("triplet_margin_loss", "p 1, swap, sum", {nrm({N, 3}), nrm({N, 3}), nrm({N, 3}, 2)},
               [](const V& v) { return ag::triplet_margin_loss(v[0], v[1], v[2], 1.0, 1, 1e-6, true, R::Sum); }),
      loss_row("multi_margin_loss", "mean", {nrm({N, 5}), In{{N}, indices(5)}},
               [](const V& v) { return ag::multi_margin_loss(v[0], v[1]); }),
      loss_row("multi_margin_loss", "p 2, margin 0.5, weight, none", {nrm({N, 5}), In{{N}, indices(5)}, pos({5})},
               [](const V& v) { return ag::multi_margin_loss(v[0], v[1], 2, 0.5, v[2], R::None); }),
      loss_row("multilabel_margin_loss", "mean", {nrm({N, 5}), In{{N, 5}, multilabel(5)}},
               [](const V& v) { return ag::multilabel_margin_loss(v[0], v[1]); }),
      loss_row("multilabel_margin_loss", "none, one sample [C]", {nrm({6}), In{{6}, multilabel(6)}},
               [](const V& v) { return ag::multilabel_margin_loss(v[0], v[1], R::None); }),

      // ---- Norms and distances ----------------------------------------------------------------
      sum_row("norm", "p 2, all", {nz({3, N})}, [](const V& v) { return ag::norm(v[0]); }),
      sum_row("norm", "p 1, dim 1", {nz({3, N})}, [](const V& v) { return ag::norm(v[0], 1, {1}); }),
      sum_row("norm", "p inf, dim 0 keepdim", {nz({3, N})}, [](const V& v) { return ag::norm(v[0], kInf, {0}, true); }),
      sum_row("norm", "p -inf, dim 1", {nz({3, N})}, [](const V& v) { return ag::norm(v[0], -kInf, {1}); }),
      sum_row("norm", "p 3, dims {0, 2}", {nz({2, 3, N})}, [](const V& v) { return ag::norm(v[0], 3, {0, 2}); }),
      sum_row("norm", "p 0.5, dim 1", {nz({3, N})}, [](const V& v) { return ag::norm(v[0], 0.5, {1}); }),
      sum_row("norm", "p 1.5 of a transpose", {nz({N, 3})}, [](const V& v) { return ag::norm(v[0].t(), 1.5, {1}); }),
      sum_row("norm", "p 0 counts nonzeros", {In{{3, N}, with_zeros()}}, [](const V& v) { return ag::norm(v[0], 0, {1}); }),
      sum_row("dist", "p 2, broadcast", {nrm({3, N}), nrm({N})}, [](const V& v) { return ag::dist(v[0], v[1]); }),
      sum_row("dist", "p 1", {nrm({3, N}), In{{3, N}, untied(0)}}, [](const V& v) { return ag::dist(v[0], v[1], 1); }),
      row("normalize", "p 2, dim 1", {nz({3, N})}, [](const V& v) { return ag::normalize(v[0]); }).tolerance(Tol::normalized),
      row("normalize", "p 1, dim 0", {nz({3, N})}, [](const V& v) { return ag::normalize(v[0], 1, 0); }).tolerance(Tol::normalized),
      row("cosine_similarity", "dim 1", {nrm({N, 4}), nrm({N, 4})}, [](const V& v) { return ag::cosine_similarity(v[0], v[1]); })
          .tolerance(Tol::normalized),
      row("cosine_similarity", "dim 0, broadcast", {nrm({3, N}), nrm({3, 1})},
          [](const V& v) { return ag::cosine_similarity(v[0], v[1], 0); })
          .tolerance(Tol::normalized),
      sum_row("pairwise_distance", "p 2", {nrm({N, 4}), nrm({N, 4})}, [](const V& v) { return ag::pairwise_distance(v[0], v[1]); }),
      sum_row("pairwise_distance", "p 1, keepdim", {nrm({N, 4}), In{{N, 4}, untied(0)}},
              [](const V& v) { return ag::pairwise_distance(v[0], v[1], 1, 1e-6, true); }),
      sum_row("cdist", "p 2", {nrm({N, 3}), nrm({5, 3})}, [](const V& v) { return ag::cdist(v[0], v[1]); }),
      sum_row("cdist", "p 1, batched", {nrm({2, N, 3}), nrm({2, 4, 3})}, [](const V& v) { return ag::cdist(v[0], v[1], 1); }),
      sum_row("cdist", "p inf", {nrm({N, 3}), nrm({4, 3})}, [](const V& v) { return ag::cdist(v[0], v[1], kInf); }),
      sum_row("pdist", "p 2", {nrm({N, 3})}, [](const V& v) { return ag::pdist(v[0]); }).at_sizes({2, 7, 33}, 4),
      // ---- scaled_dot_product_attention (#27), the math path: sums of n products over the
      // sequence (N the query's and key's length; the scores are n x n) ----------------------
      sum_row("scaled_dot_product_attention", "[2,2,n,4] heads, no mask",
              {sy({2, 2, N, 4}), sy({2, 2, N, 4}), sy({2, 2, N, 3})},
              [](const V& v) { return ag::scaled_dot_product_attention(v[0], v[1], v[2]); })
          .at_sizes({1, 7, 130}, 4),
      sum_row("scaled_dot_product_attention", "is_causal", {sy({2, N, 4}), sy({2, N, 4}), sy({2, N, 3})},
              [](const V& v) { return ag::scaled_dot_product_attention(v[0], v[1], v[2], {}, 0.0, true); })
          .at_sizes({1, 7, 130}, 4),
      // Random masks leave some rows with nothing to attend to at small n: their zeros are tested too.
      sum_row("scaled_dot_product_attention", "bool mask [n,n] broadcast, scale 0.3",
              {sy({2, N, 4}), sy({2, N, 4}), sy({2, N, 3}), In{{N, N}, mask()}},
              [](const V& v) { return ag::scaled_dot_product_attention(v[0], v[1], v[2], v[3], 0.0, false, 0.3); })
          .at_sizes({1, 7, 130}, 4),
      sum_row("scaled_dot_product_attention", "float mask [2,1,n,n], key of another length",
              {sy({2, 2, 3, 4}), sy({2, 2, N, 4}), sy({2, 2, N, 3}), sy({2, 1, 3, N})},
              [](const V& v) { return ag::scaled_dot_product_attention(v[0], v[1], v[2], v[3]); })
          .at_sizes({1, 7, 130}, 4),
      sum_row("scaled_dot_product_attention", "batch broadcast: key and value [1,n,4]",
              {sy({3, N, 4}), sy({1, N, 4}), sy({1, N, 4})},
              [](const V& v) { return ag::scaled_dot_product_attention(v[0], v[1], v[2]); })
          .at_sizes({1, 7, 130}, 4),
      sum_row("pdist", "p 1.5", {nrm({N, 3})}, [](const V& v) { return ag::pdist(v[0], 1.5); }).at_sizes({3, 9}, 4),
      sum_row("renorm", "p 2, dim 0, maxnorm 1.5", {nrm({3, N})}, [](const V& v) { return ag::renorm(v[0], 2, 0, 1.5); }),
      sum_row("renorm", "p 1, dim 1, maxnorm 2", {nrm({3, N})}, [](const V& v) { return ag::renorm(v[0], 1, 1, 2.0); }),

      // ---- interpolate (Note [Interpolation] in ops/interpolate.cpp) --------------------------
      image_row("interpolate", "nearest, scale 2", {nrm({2, 3, N, N})},
                [](const V& v) { return ag::interpolate(v[0], ag::InterpolateOptions().scale_factor({2.0})); }),
      image_row("interpolate", "nearest-exact, size 7 x 3", {nrm({2, 3, N, N})},
                [](const V& v) {
                  return ag::interpolate(v[0], ag::InterpolateOptions().size({7, 3}).mode(ag::InterpolateMode::nearest_exact));
                }),
      image_row("interpolate", "bilinear, size 7 x 5", {nrm({2, 3, N, N})},
                [](const V& v) {
                  return ag::interpolate(v[0], ag::InterpolateOptions().size({7, 5}).mode(ag::InterpolateMode::bilinear));
                }),
      image_row("interpolate", "bicubic, align_corners, scale 1.5", {nrm({2, 3, N, N})},
                [](const V& v) {
                  return ag::interpolate(
                      v[0], ag::InterpolateOptions().scale_factor({1.5}).mode(ag::InterpolateMode::bicubic).align_corners(true));
                }),
      row("interpolate", "linear, scale 2", {nrm({2, 3, N})},
          [](const V& v) {
            return ag::interpolate(v[0], ag::InterpolateOptions().scale_factor({2.0}).mode(ag::InterpolateMode::linear));
          }),
      row("interpolate", "trilinear, size 3 x 5 x 4", {nrm({1, 2, 2, N, 3})},
          [](const V& v) {
            return ag::interpolate(v[0], ag::InterpolateOptions().size({3, 5, 4}).mode(ag::InterpolateMode::trilinear));
          })
          .at_sizes({1, 7, 1023}, 2),

      // ---- grid_sample -------------------------------------------------------------------------
      image_row("grid_sample", "bilinear, zeros, some points outside", {nrm({2, 3, N, N}), uni({2, 4, 5, 2}, -1.15, 1.15)},
                [](const V& v) { return ag::grid_sample(v[0], v[1]); }),
      image_row("grid_sample", "bilinear, border, align_corners", {nrm({2, 3, N, N}), uni({2, 4, 5, 2}, -1.3, 1.3)},
                [](const V& v) { return ag::grid_sample(v[0], v[1], ag::GridMode::bilinear, ag::GridPadding::border, true); }),
      image_row("grid_sample", "bilinear, reflection", {nrm({2, 3, N, N}), uni({2, 4, 5, 2}, -1.6, 1.6)},
                [](const V& v) { return ag::grid_sample(v[0], v[1], ag::GridMode::bilinear, ag::GridPadding::reflection); }),
      image_row("grid_sample", "nearest, zeros", {nrm({2, 3, N, N}), uni({2, 4, 5, 2}, -1.1, 1.1)},
                [](const V& v) { return ag::grid_sample(v[0], v[1], ag::GridMode::nearest); }),

      // ---- Scans, softmin, group norm ---------------------------------------------------------
      sum_row("cumprod", "dim 1", {In{{3, N}, near_one()}}, [](const V& v) { return ag::cumprod(v[0], 1); }),
      sum_row("cumprod", "dim 0, zeros in the lines", {In{{4, N}, with_zeros()}}, [](const V& v) { return ag::cumprod(v[0], 0); }),
      sum_row("cumprod", "dim 1 with zeros, long lines", {In{{2, N}, with_zeros()}}, [](const V& v) { return ag::cumprod(v[0], -1); })
          .at_sizes({7, 70}, 5),
      sum_row("cumprod", "many lines of 72 (a warp each on CUDA)", {In{{N, 72}, near_one()}}, [](const V& v) { return ag::cumprod(v[0], 1); }),
      sum_row("cumprod", "int64 input", {In{{3, N}, indices(3)}}, [](const V& v) { return ag::cumprod(v[0], 1); })
          .at_sizes({1, 7, 20}, 4)
          .no_gradcheck(),
      row("softmin", "dim 1", {uni({3, N}, -4, 4)}, [](const V& v) { return ag::softmin(v[0], 1); }).tolerance(Tol::normalized),
      row("group_norm", "2 groups, affine", {nrm({2, 4, N}), pos({4}), sy({4})},
          [](const V& v) { return ag::group_norm(v[0], 2, v[1], v[2]); })
          .tolerance(Tol::normalized),
      row("group_norm", "1 group of images, no affine", {nrm({2, 3, N, 2})}, [](const V& v) { return ag::group_norm(v[0], 1); })
          .tolerance(Tol::normalized),
  };
}

}  // namespace op_table
