// Dumps ampgrad's results for a list of op calls, with their inputs and gradients, as JSON
// lines that benchmarks/torch_semantics.py replays in PyTorch and compares: the check that an
// op means what PyTorch's does (names, defaults, reductions, edge values), not only that the
// two devices agree.
//
// Usage: torch_semantics [cpu|cuda] > ag.jsonl && python3 benchmarks/torch_semantics.py ag.jsonl [cpu|cuda]
// Each case's inputs are fixed values (sin of the index, scaled and shifted per input); its
// gradients are those of sum(out * w), w = cos(index), for the floating inputs.
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <ampgrad/ampgrad.h>

namespace ag = ampgrad;
using V = std::vector<ag::Tensor>;
using R = ag::Reduction;

namespace {

struct In {
  ag::Shape shape;
  double scale = 1, shift = 0;
  enum Kind { values, labels, classes, multilabel, zeros_in } kind = values;
  int64_t classes_n = 0;
  bool grad = true;  // false: PyTorch takes no gradient for it (multi_margin_loss's weight)
};

ag::Tensor make(const In& in, int salt) {
  const int64_t n = ag::shape_numel(in.shape);
  if (in.kind == In::classes || in.kind == In::multilabel) {
    std::vector<int64_t> t(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) t[i] = (i * 7 + salt * 3 + 1) % in.classes_n;
    if (in.kind == In::multilabel)
      for (int64_t row = 0; row < n / in.classes_n; ++row) {
        const int64_t k = row % in.classes_n;  // targets before the first -1
        for (int64_t c = 0; c < in.classes_n; ++c) t[row * in.classes_n + c] = c < k ? (row + 2 * c) % in.classes_n : (c == k ? -1 : c % 3);
      }
    return ag::tensor(t, in.shape);
  }
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const double s = std::sin(1.7 * static_cast<double>(i) + 0.9 * salt + 0.3);
    v[i] = in.kind == In::labels ? (s > 0 ? 1.0 : -1.0) : in.shift + in.scale * s;
    if (in.kind == In::zeros_in && i % 3 == 1) v[i] = 0;
  }
  return ag::tensor(v, in.shape);
}

struct Case {
  std::string name;
  std::vector<In> in;
  std::function<ag::Tensor(const V&)> run;
};

// A case whose inputs are copied into a module (a state_dict loaded the PyTorch way) names
// here, per input, the tensor whose gradient stands for that input's: the module's parameter
// it was loaded into (undefined: the input itself).
V g_grad_of;

// Loads v[first...] into m's parameters by name, in named_parameters() order, and names
// those parameters as the tensors whose gradients stand for those inputs' (g_grad_of).
void load_params(ag::nn::Module& m, const V& v, size_t first) {
  ag::nn::StateDict sd;
  const auto params = m.named_parameters();
  g_grad_of.assign(v.size(), ag::Tensor());
  for (size_t i = 0; i < params.size(); ++i) {
    sd[params[i].first] = v[first + i];
    g_grad_of[first + i] = params[i].second;
  }
  m.load_state_dict(sd);
}

// The recurrent modules: input x, h0 (and c0 for LSTM), then every parameter in PyTorch's
// order, loaded by name with load_state_dict; the case's output is output, h_n (and c_n)
// flattened and joined.
Case module_case(std::string name, ag::nn::RNNBase::Mode mode, int64_t input, int64_t hidden, ag::nn::RNNOptions o,
                 ag::Shape x) {
  auto make_module = [mode, input, hidden, o](ag::DType dt) -> std::shared_ptr<ag::nn::RNNBase> {
    ag::nn::RNNOptions mo = o;
    mo.options = ag::TensorOptions(dt);
    switch (mode) {
      case ag::nn::RNNBase::Mode::lstm: return std::make_shared<ag::nn::LSTM>(input, hidden, mo);
      case ag::nn::RNNBase::Mode::gru: return std::make_shared<ag::nn::GRU>(input, hidden, mo);
      default: return std::make_shared<ag::nn::RNN>(input, hidden, mo);
    }
  };
  const bool lstm = mode == ag::nn::RNNBase::Mode::lstm;
  const int64_t states = o.num_layers * (o.bidirectional ? 2 : 1), batch = x.size() == 3 ? x[o.batch_first ? 0 : 1] : 0;
  const ag::Shape state = x.size() == 3 ? ag::Shape{states, batch, hidden} : ag::Shape{states, hidden};
  std::vector<In> ins{{x}, {state, 0.5}};
  if (lstm) ins.push_back({state, 0.5, 0.1});
  const size_t first_param = ins.size();
  for (const auto& [pname, p] : make_module(ag::kFloat64)->named_parameters()) ins.push_back({p.shape(), 0.4, 0.05});
  return {std::move(name), ins, [make_module, lstm, first_param](const V& v) {
            auto m = make_module(v[0].dtype());
            m->to(v[0].device());
            load_params(*m, v, first_param);
            const ag::nn::RNNResult r = m->forward(v[0], v[1], lstm ? v[2] : ag::Tensor());
            V parts{r.output.reshape({-1}), r.h_n.reshape({-1})};
            if (lstm) parts.push_back(r.c_n.reshape({-1}));
            return ag::cat(parts, 0);
          }};
}

// The attention cases' bool mask [L, S]: true (may attend) where i != 1 and (i + j) % 3 != 0, so
// row 1 has nothing to attend to (torch_semantics.py builds the same).
ag::Tensor pattern_mask(int64_t L, int64_t S, ag::Device dev) {
  std::vector<bool> m(static_cast<size_t>(L * S));
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < S; ++j) m[static_cast<size_t>(i * S + j)] = i != 1 && (i + j) % 3 != 0;
  return ag::tensor(m, {L, S}).to(dev);
}

// MultiheadAttention(E, H): query, key, value, then its parameters in PyTorch's order, loaded by
// name; the output and, with need_weights, the averaged weights, flattened and joined. The key
// padding mask (N, S), when asked for: true (ignore) where (n + j) % 4 == 3.
Case mha_case(std::string name, int64_t E, int64_t H, bool batch_first, ag::Shape q, ag::Shape kv, bool need_weights,
              bool padding, bool self_causal) {
  auto make_module = [E, H, batch_first](ag::DType dt) {
    ag::nn::MultiheadAttentionOptions o;
    o.batch_first = batch_first;
    o.options = ag::TensorOptions(dt);
    return std::make_shared<ag::nn::MultiheadAttention>(E, H, o);
  };
  std::vector<In> ins{{q}, {kv, 0.8, 0.1}, {kv, 0.9, -0.1}};
  const size_t first_param = ins.size();
  for (const auto& [pname, p] : make_module(ag::kFloat64)->named_parameters()) ins.push_back({p.shape(), 0.4, 0.05});
  return {std::move(name), ins,
          [make_module, first_param, batch_first, need_weights, padding, self_causal, kv](const V& v) {
            auto m = make_module(v[0].dtype());
            m->to(v[0].device());
            load_params(*m, v, first_param);
            const int64_t N = kv[batch_first ? 0 : 1], S = kv[batch_first ? 1 : 0];
            ag::Tensor kpm;
            if (padding) {
              std::vector<bool> pm(static_cast<size_t>(N * S));
              for (int64_t n = 0; n < N; ++n)
                for (int64_t j = 0; j < S; ++j) pm[static_cast<size_t>(n * S + j)] = (n + j) % 4 == 3;
              kpm = ag::tensor(pm, {N, S}).to(v[0].device());
            }
            std::pair<ag::Tensor, ag::Tensor> r;
            if (self_causal) {
              const ag::Tensor upper = ag::gt(ag::triu(ag::ones({S, S}, ag::TensorOptions().device(v[0].device())), 1), 0.0);
              r = (*m)(v[0], v[0], v[0], kpm, need_weights, upper, true, /*is_causal=*/true);
            } else {
              r = (*m)(v[0], v[1], v[2], kpm, need_weights);
            }
            return need_weights ? ag::cat({r.first.reshape({-1}), r.second.reshape({-1})}, 0) : r.first;
          }};
}

std::string json_values(const ag::Tensor& t) {
  std::vector<double> v = t.to(ag::kCPU).to(ag::kFloat64).contiguous().to_vector<double>();
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + (std::isfinite(v[i]) ? fmt::format("{:.17g}", v[i]) : (std::isnan(v[i]) ? std::string("\"nan\"") : std::string(v[i] > 0 ? "\"inf\"" : "\"-inf\"")));
  return s + "]";
}

std::string json_tensor(const ag::Tensor& t) {
  return fmt::format("{{\"shape\":[{}],\"dtype\":\"{}\",\"values\":{}}}", fmt::join(t.shape(), ","), ag::dtype_name(t.dtype()),
                     json_values(t));
}

std::vector<Case> cases() {
  const In x34{{3, 4}}, t34{{3, 4}, 0.8, 0.3};
  const In lab34{{3, 4}, 1, 0, In::labels};
  const In pos34{{3, 4}, 0.4, 0.6};
  auto lab = [](ag::Shape s) { return In{std::move(s), 1, 0, In::labels}; };
  auto cls = [](ag::Shape s, int64_t c) { return In{std::move(s), 1, 0, In::classes, c}; };
  using Mode = ag::nn::RNNBase::Mode;
  ag::nn::RNNOptions two_bidi_bf, three_plain, two_bidi, relu_bidi, one_unbatched;
  two_bidi_bf.num_layers = 2;
  two_bidi_bf.bidirectional = true;
  two_bidi_bf.batch_first = true;
  three_plain.num_layers = 3;
  three_plain.bias = false;
  two_bidi.num_layers = 2;
  two_bidi.bidirectional = true;
  relu_bidi = two_bidi_bf;
  relu_bidi.nonlinearity = ag::nn::RnnNonlinearity::relu;
  const In xc{{3, 4}}, hc{{3, 5}, 0.5}, cc{{3, 5}, 0.5, 0.1};
  auto w = [](ag::Shape s) { return In{std::move(s), 0.4, 0.05}; };
  std::vector<Case> recurrent = {
      {"rnn_tanh_cell", {xc, hc, w({5, 4}), w({5, 5}), w({5}), w({5})}, [](const V& v) { return ag::rnn_tanh_cell(v[0], v[1], v[2], v[3], v[4], v[5]); }},
      {"rnn_relu_cell", {xc, hc, w({5, 4}), w({5, 5}), w({5}), w({5})}, [](const V& v) { return ag::rnn_relu_cell(v[0], v[1], v[2], v[3], v[4], v[5]); }},
      {"rnn_tanh_cell_unbatched_nobias", {{{4}}, {{5}, 0.5}, w({5, 4}), w({5, 5})}, [](const V& v) { return ag::rnn_tanh_cell(v[0], v[1], v[2], v[3]); }},
      {"lstm_cell", {xc, hc, cc, w({20, 4}), w({20, 5}), w({20}), w({20})}, [](const V& v) {
         auto [hy, cy] = ag::lstm_cell(v[0], v[1], v[2], v[3], v[4], v[5], v[6]);
         return ag::cat({hy, cy}, 1);
       }},
      {"lstm_cell_unbatched_nobias", {{{4}}, {{5}, 0.5}, {{5}, 0.5, 0.1}, w({20, 4}), w({20, 5})}, [](const V& v) {
         auto [hy, cy] = ag::lstm_cell(v[0], v[1], v[2], v[3], v[4]);
         return ag::cat({hy, cy}, 0);
       }},
      {"gru_cell", {xc, hc, w({15, 4}), w({15, 5}), w({15}), w({15})}, [](const V& v) { return ag::gru_cell(v[0], v[1], v[2], v[3], v[4], v[5]); }},
      {"gru_cell_unbatched_nobias", {{{4}}, {{5}, 0.5}, w({15, 4}), w({15, 5})}, [](const V& v) { return ag::gru_cell(v[0], v[1], v[2], v[3]); }},
      module_case("lstm_2layer_bidir_batch_first", Mode::lstm, 3, 5, two_bidi_bf, {2, 4, 3}),
      module_case("lstm_3layer_nobias", Mode::lstm, 3, 4, three_plain, {4, 2, 3}),
      module_case("lstm_unbatched", Mode::lstm, 3, 4, one_unbatched, {5, 3}),
      module_case("gru_2layer_bidir", Mode::gru, 3, 5, two_bidi, {4, 2, 3}),
      module_case("gru_3layer_nobias", Mode::gru, 3, 4, three_plain, {4, 2, 3}),
      module_case("rnn_tanh_2layer_bidir", Mode::rnn_tanh, 3, 5, two_bidi, {4, 2, 3}),
      module_case("rnn_relu_2layer_bidir_batch_first", Mode::rnn_relu, 3, 5, relu_bidi, {2, 4, 3}),
  };
  std::vector<Case> all = {
      {"l1_loss_none", {x34, t34}, [](const V& v) { return ag::l1_loss(v[0], v[1], R::None); }},
      {"l1_loss_mean", {x34, t34}, [](const V& v) { return ag::l1_loss(v[0], v[1]); }},
      {"l1_loss_sum", {x34, t34}, [](const V& v) { return ag::l1_loss(v[0], v[1], R::Sum); }},
      {"mse_loss_none", {x34, t34}, [](const V& v) { return ag::mse_loss(v[0], v[1], R::None); }},
      {"mse_loss_mean", {x34, t34}, [](const V& v) { return ag::mse_loss(v[0], v[1]); }},
      {"smooth_l1_loss_mean", {{{3, 4}, 2}, t34}, [](const V& v) { return ag::smooth_l1_loss(v[0], v[1]); }},
      {"smooth_l1_loss_beta05_none", {{{3, 4}, 2}, t34}, [](const V& v) { return ag::smooth_l1_loss(v[0], v[1], R::None, 0.5); }},
      {"smooth_l1_loss_beta0_sum", {{{3, 4}, 2}, t34}, [](const V& v) { return ag::smooth_l1_loss(v[0], v[1], R::Sum, 0.0); }},
      {"huber_loss_mean", {{{3, 4}, 2}, t34}, [](const V& v) { return ag::huber_loss(v[0], v[1]); }},
      {"huber_loss_delta05_none", {{{3, 4}, 2}, t34}, [](const V& v) { return ag::huber_loss(v[0], v[1], R::None, 0.5); }},
      {"soft_margin_loss_mean", {x34, lab34}, [](const V& v) { return ag::soft_margin_loss(v[0], v[1]); }},
      {"soft_margin_loss_none", {x34, lab34}, [](const V& v) { return ag::soft_margin_loss(v[0], v[1], R::None); }},
      {"kl_div_none", {x34, pos34}, [](const V& v) { return ag::kl_div(v[0], v[1], R::None); }},
      {"kl_div_mean", {x34, pos34}, [](const V& v) { return ag::kl_div(v[0], v[1]); }},
      {"kl_div_batchmean", {x34, pos34}, [](const V& v) { return ag::kl_div(v[0], v[1], R::BatchMean); }},
      {"kl_div_log_target_sum", {x34, t34}, [](const V& v) { return ag::kl_div(v[0], v[1], R::Sum, true); }},
      {"kl_div_zero_target_none", {x34, {{3, 4}, 0.4, 0.6, In::zeros_in}}, [](const V& v) { return ag::kl_div(v[0], v[1], R::None); }},
      {"poisson_nll_loss_mean", {x34, {{3, 4}, 1.5, 1.5}}, [](const V& v) { return ag::poisson_nll_loss(v[0], v[1]); }},
      {"poisson_nll_loss_rates_none", {pos34, {{3, 4}, 1.5, 1.5}}, [](const V& v) { return ag::poisson_nll_loss(v[0], v[1], false, false, 1e-8, R::None); }},
      {"poisson_nll_loss_full_none", {x34, {{3, 4}, 1.5, 1.5}}, [](const V& v) { return ag::poisson_nll_loss(v[0], v[1], true, true, 1e-8, R::None); }},
      {"hinge_embedding_loss_none", {x34, lab34}, [](const V& v) { return ag::hinge_embedding_loss(v[0], v[1], 1.0, R::None); }},
      {"hinge_embedding_loss_margin05_mean", {x34, lab34}, [](const V& v) { return ag::hinge_embedding_loss(v[0], v[1], 0.5); }},
      {"bce_with_logits_none", {{{3, 4}, 3}, {{3, 4}, 0.5, 0.5}}, [](const V& v) { return ag::binary_cross_entropy_with_logits(v[0], v[1], R::None); }},
      {"bce_with_logits_sum", {{{3, 4}, 3}, {{3, 4}, 0.5, 0.5}}, [](const V& v) { return ag::binary_cross_entropy_with_logits(v[0], v[1], R::Sum); }},
      {"bce_none", {{{3, 4}, 0.45, 0.5}, {{3, 4}, 0.5, 0.5}}, [](const V& v) { return ag::binary_cross_entropy(v[0], v[1], R::None); }},
      {"margin_ranking_loss_margin05", {{{6}}, {{6}, 0.7, 0.2}, lab({6})}, [](const V& v) { return ag::margin_ranking_loss(v[0], v[1], v[2], 0.5); }},
      {"margin_ranking_loss_none", {{{6}}, {{6}, 0.7, 0.2}, lab({6})}, [](const V& v) { return ag::margin_ranking_loss(v[0], v[1], v[2], 0.0, R::None); }},
      {"cosine_embedding_loss_margin02", {{{4, 3}}, {{4, 3}, 0.9, 0.1}, lab({4})}, [](const V& v) { return ag::cosine_embedding_loss(v[0], v[1], v[2], 0.2); }},
      {"cosine_embedding_loss_none", {{{4, 3}}, {{4, 3}, 0.9, 0.1}, lab({4})}, [](const V& v) { return ag::cosine_embedding_loss(v[0], v[1], v[2], 0.0, R::None); }},
      {"triplet_margin_loss", {{{4, 3}}, {{4, 3}, 0.9}, {{4, 3}, 1.3, 0.2}}, [](const V& v) { return ag::triplet_margin_loss(v[0], v[1], v[2]); }},
      {"triplet_margin_loss_p1_swap_none", {{{4, 3}}, {{4, 3}, 0.9}, {{4, 3}, 1.3, 0.2}}, [](const V& v) { return ag::triplet_margin_loss(v[0], v[1], v[2], 0.7, 1, 1e-6, true, R::None); }},
      {"multi_margin_loss", {{{4, 5}}, cls({4}, 5)}, [](const V& v) { return ag::multi_margin_loss(v[0], v[1]); }},
      {"multi_margin_loss_p2_w_none", {{{4, 5}}, cls({4}, 5), In{{5}, 0.3, 1, In::values, 0, false}}, [](const V& v) { return ag::multi_margin_loss(v[0], v[1], 2, 0.5, v[2], R::None); }},
      {"multilabel_margin_loss", {{{4, 5}}, In{{4, 5}, 1, 0, In::multilabel, 5}}, [](const V& v) { return ag::multilabel_margin_loss(v[0], v[1]); }},
      {"multilabel_margin_loss_none", {{{4, 5}}, In{{4, 5}, 1, 0, In::multilabel, 5}}, [](const V& v) { return ag::multilabel_margin_loss(v[0], v[1], R::None); }},
      {"norm_default", {x34}, [](const V& v) { return ag::norm(v[0]); }},
      {"norm_p1_dim1", {x34}, [](const V& v) { return ag::norm(v[0], 1, {1}); }},
      {"norm_inf_dim0_keep", {x34}, [](const V& v) { return ag::norm(v[0], INFINITY, {0}, true); }},
      {"norm_neginf_dim1", {x34}, [](const V& v) { return ag::norm(v[0], -INFINITY, {1}); }},
      {"norm_p3", {x34}, [](const V& v) { return ag::norm(v[0], 3); }},
      {"norm_p05_dim1", {x34}, [](const V& v) { return ag::norm(v[0], 0.5, {1}); }},
      {"norm_p0_dim1", {{{3, 4}, 1, 0, In::zeros_in}}, [](const V& v) { return ag::norm(v[0], 0, {1}); }},
      {"norm_zero_row_p2", {{{2, 3}, 0, 0}}, [](const V& v) { return ag::norm(v[0], 2, {1}); }},
      {"dist_p2", {x34, {{4}, 0.5}}, [](const V& v) { return ag::dist(v[0], v[1]); }},
      {"dist_p1", {x34, t34}, [](const V& v) { return ag::dist(v[0], v[1], 1); }},
      {"normalize_default", {x34}, [](const V& v) { return ag::normalize(v[0]); }},
      {"normalize_p1_dim0", {x34}, [](const V& v) { return ag::normalize(v[0], 1, 0); }},
      {"cosine_similarity_dim1", {x34, t34}, [](const V& v) { return ag::cosine_similarity(v[0], v[1]); }},
      {"cosine_similarity_dim0_bcast", {x34, {{3, 1}, 0.8}}, [](const V& v) { return ag::cosine_similarity(v[0], v[1], 0); }},
      {"pairwise_distance", {x34, t34}, [](const V& v) { return ag::pairwise_distance(v[0], v[1]); }},
      {"pairwise_distance_p1_keep", {x34, t34}, [](const V& v) { return ag::pairwise_distance(v[0], v[1], 1, 1e-6, true); }},
      {"cdist_p2", {{{5, 3}}, {{4, 3}, 0.8, 0.1}}, [](const V& v) { return ag::cdist(v[0], v[1]); }},
      {"cdist_p1_batched", {{{2, 5, 3}}, {{2, 4, 3}, 0.8, 0.1}}, [](const V& v) { return ag::cdist(v[0], v[1], 1); }},
      {"cdist_inf", {{{5, 3}}, {{4, 3}, 0.8, 0.1}}, [](const V& v) { return ag::cdist(v[0], v[1], INFINITY); }},
      {"pdist_p2", {{{5, 3}}}, [](const V& v) { return ag::pdist(v[0]); }},
      {"pdist_p15", {{{5, 3}}}, [](const V& v) { return ag::pdist(v[0], 1.5); }},
      {"renorm_p2_dim0", {{{3, 4}, 1.5}}, [](const V& v) { return ag::renorm(v[0], 2, 0, 1.5); }},
      {"renorm_p1_dim1", {{{3, 4}, 1.5}}, [](const V& v) { return ag::renorm(v[0], 1, 1, 2.0); }},
      {"cumprod_dim1", {x34}, [](const V& v) { return ag::cumprod(v[0], 1); }},
      {"cumprod_zeros_dim1", {{{3, 6}, 1, 0, In::zeros_in}}, [](const V& v) { return ag::cumprod(v[0], 1); }},
      {"cumprod_zeros_dim0", {{{6, 2}, 1, 0, In::zeros_in}}, [](const V& v) { return ag::cumprod(v[0], 0); }},
      {"softmin_dim1", {x34}, [](const V& v) { return ag::softmin(v[0], 1); }},
      {"group_norm_2_affine", {{{2, 4, 3}}, {{4}, 0.3, 1}, {{4}, 0.5}}, [](const V& v) { return ag::group_norm(v[0], 2, v[1], v[2]); }},
      {"group_norm_1_images", {{{2, 3, 2, 2}}}, [](const V& v) { return ag::group_norm(v[0], 1); }},
      {"addcmul_bcast", {x34, {{4}}, {{3, 1}, 0.5}}, [](const V& v) { return ag::addcmul(v[0], v[1], v[2], 0.5); }},
      {"addcdiv", {x34, t34, {{3, 4}, 0.5, 1.2}}, [](const V& v) { return ag::addcdiv(v[0], v[1], v[2], -2); }},
      {"lerp_tensor", {x34, t34, {{3, 4}, 0.7, 0.5}}, [](const V& v) { return ag::lerp(v[0], v[1], v[2]); }},
      {"lerp_scalar", {x34, {{4}}}, [](const V& v) { return ag::lerp(v[0], v[1], 0.3); }},
      {"dot", {{{7}}, {{7}, 0.5}}, [](const V& v) { return ag::dot(v[0], v[1]); }},
      {"tensordot_2", {{{2, 3, 4}}, {{3, 4, 5}}}, [](const V& v) { return ag::tensordot(v[0], v[1], 2); }},
      {"tensordot_lists", {{{4, 3, 2}}, {{2, 4, 5}}}, [](const V& v) { return ag::tensordot(v[0], v[1], {0, 2}, {1, 0}); }},
      {"bilinear", {{{4, 3}}, {{4, 2}}, {{5, 3, 2}}, {{5}}}, [](const V& v) { return ag::bilinear(v[0], v[1], v[2], v[3]); }},
      {"cross_default_dim", {{{3, 4}}, {{3, 4}, 0.7}}, [](const V& v) { return ag::cross(v[0], v[1]); }},
      {"cross_dim_last", {{{4, 3}}, {{4, 3}, 0.7}}, [](const V& v) { return ag::cross(v[0], v[1], -1); }},
      {"index_add_alpha", {{{5, 3}}, cls({4}, 5), {{4, 3}}}, [](const V& v) { return ag::index_add(v[0], 0, v[1], v[2], 2); }},
      {"index_copy_dim1", {{{3, 5}}, In{{2}, 1, 0, In::classes, 5}, {{3, 2}}}, [](const V& v) { return ag::index_copy(v[0], 1, v[1], v[2]); }},
      {"gather_dim1", {{{3, 5}}, cls({3, 4}, 5)}, [](const V& v) { return ag::gather(v[0], 1, v[1]); }},
      {"scatter_add_dim0", {{{4, 3}}, cls({5, 2}, 4), {{6, 3}}}, [](const V& v) { return ag::scatter_add(v[0], 0, v[1], v[2]); }},
      {"index_put_two_dims", {{{4, 5, 2}}, In{{3}, 1, 0, In::classes, 4}, In{{3}, 1, 0, In::classes, 5}, {{2}}}, [](const V& v) { return ag::index_put(v[0], {v[1], v[2]}, v[3]); }},
      {"index_put_accumulate", {{{5, 3}}, cls({6}, 5), {{6, 3}}}, [](const V& v) { return ag::index_put(v[0], {v[1]}, v[2], true); }},
      {"grid_sample_bilinear_zeros", {{{1, 2, 4, 5}}, {{1, 3, 3, 2}, 1.15}}, [](const V& v) { return ag::grid_sample(v[0], v[1]); }},
      {"grid_sample_bilinear_border_ac", {{{1, 2, 4, 5}}, {{1, 3, 3, 2}, 1.3}}, [](const V& v) { return ag::grid_sample(v[0], v[1], ag::GridMode::bilinear, ag::GridPadding::border, true); }},
      {"grid_sample_bilinear_reflection", {{{1, 2, 4, 5}}, {{1, 3, 3, 2}, 1.7}}, [](const V& v) { return ag::grid_sample(v[0], v[1], ag::GridMode::bilinear, ag::GridPadding::reflection); }},
      {"mv", {{{4, 3}}, {{3}}}, [](const V& v) { return ag::mv(v[0], v[1]); }},
      {"addmv", {{{4}}, {{4, 3}}, {{3}}}, [](const V& v) { return ag::addmv(v[0], v[1], v[2], 0.5, 2); }},
      {"addr", {{{4, 3}}, {{4}}, {{3}}}, [](const V& v) { return ag::addr(v[0], v[1], v[2], 2, -1); }},
      {"baddbmm", {{{2, 4, 3}}, {{2, 4, 5}}, {{2, 5, 3}}}, [](const V& v) { return ag::baddbmm(v[0], v[1], v[2], 0.5, 1.5); }},
      {"addbmm", {{{4, 3}}, {{2, 4, 5}}, {{2, 5, 3}}}, [](const V& v) { return ag::addbmm(v[0], v[1], v[2], 2); }},
      {"multi_dot_1d_ends", {{{4}}, {{4, 3}}, {{3, 5}}, {{5}}}, [](const V& v) { return ag::multi_dot({v[0], v[1], v[2], v[3]}); }},
      {"chain_matmul", {{{4, 2}}, {{2, 5}}, {{5, 3}}}, [](const V& v) { return ag::chain_matmul({v[0], v[1], v[2]}); }},
      {"matmul_1d_1d", {{{5}}, {{5}, 0.5}}, [](const V& v) { return ag::matmul(v[0], v[1]); }},
      {"matmul_1d_3d", {{{4}}, {{2, 4, 3}}}, [](const V& v) { return ag::matmul(v[0], v[1]); }},
      {"matmul_3d_1d", {{{2, 3, 4}}, {{4}}}, [](const V& v) { return ag::matmul(v[0], v[1]); }},
      {"matmul_bcast", {{{2, 1, 3, 4}}, {{3, 4, 2}}}, [](const V& v) { return ag::matmul(v[0], v[1]); }},
      {"prelu_one", {x34, {{1}, 0.1, 0.25}}, [](const V& v) { return ag::prelu(v[0], v[1]); }},
      {"prelu_channels", {{{2, 4, 3}}, {{4}, 0.1, 0.25}}, [](const V& v) { return ag::prelu(v[0], v[1]); }},
      {"grid_sample_nearest", {{{1, 2, 4, 5}}, {{1, 3, 3, 2}, 1.1}}, [](const V& v) { return ag::grid_sample(v[0], v[1], ag::GridMode::nearest); }},
      {"conv1d_s2_p1", {{{2, 3, 9}}, {{4, 3, 3}}, {{4}}}, [](const V& v) { return ag::conv1d(v[0], v[1], v[2], 2, 1); }},
      {"conv1d_d2_g2", {{{1, 4, 9}}, {{6, 2, 3}}}, [](const V& v) { return ag::conv1d(v[0], v[1], {}, 1, 0, 2, 2); }},
      {"conv1d_unbatched", {{{3, 7}}, {{2, 3, 2}}}, [](const V& v) { return ag::conv1d(v[0], v[1]); }},
      {"conv3d_p1", {{{2, 2, 4, 4, 3}}, {{3, 2, 3, 3, 2}}, {{3}}}, [](const V& v) { return ag::conv3d(v[0], v[1], v[2], {1, 1, 1}, {1, 1, 1}); }},
      {"conv3d_s_d_g2", {{{1, 4, 5, 6, 5}}, {{2, 2, 2, 2, 3}}}, [](const V& v) { return ag::conv3d(v[0], v[1], {}, {2, 1, 2}, {0, 1, 1}, {1, 2, 1}, 2); }},
      {"conv_transpose1d_s2_p1_op1", {{{2, 3, 5}}, {{3, 2, 3}}, {{2}}}, [](const V& v) { return ag::conv_transpose1d(v[0], v[1], v[2], 2, 1, 1); }},
      {"conv_transpose1d_g2_d2", {{{1, 4, 6}}, {{4, 3, 2}}}, [](const V& v) { return ag::conv_transpose1d(v[0], v[1], {}, 1, 0, 0, 2, 2); }},
      {"conv_transpose2d_s2_p1_op1", {{{2, 3, 4, 3}}, {{3, 4, 3, 3}}, {{4}}}, [](const V& v) { return ag::conv_transpose2d(v[0], v[1], v[2], {2, 2}, {1, 1}, {1, 1}); }},
      {"conv_transpose2d_mixed", {{{1, 4, 4, 5}}, {{4, 1, 2, 3}}}, [](const V& v) { return ag::conv_transpose2d(v[0], v[1], {}, {1, 2}, {0, 1}, {0, 1}, 2, {2, 1}); }},
      {"gelu_tanh", {{{3, 4}, 2.5}}, [](const V& v) { return ag::gelu(v[0], "tanh"); }},
      {"masked_fill_bcast", {x34, cls({4}, 2)}, [](const V& v) { return ag::masked_fill(v[0], ag::ne(v[1], 0), -1.5); }},
      {"tril_diag1", {{{2, 3, 4}}}, [](const V& v) { return ag::tril(v[0], 1); }},
      {"triu_diag_neg1", {{{4, 3}}}, [](const V& v) { return ag::triu(v[0], -1); }},
      {"embedding", {cls({2, 3}, 5), {{5, 4}}}, [](const V& v) { return ag::embedding(v[0], v[1]); }},
      {"embedding_padding_idx", {cls({7}, 5), {{5, 4}}}, [](const V& v) { return ag::embedding(v[0], v[1], 2); }},
      {"sdpa", {{{2, 3, 5, 4}}, {{2, 3, 6, 4}, 0.9, 0.1}, {{2, 3, 6, 3}, 1.1}},
       [](const V& v) { return ag::scaled_dot_product_attention(v[0], v[1], v[2]); }},
      {"sdpa_causal_scale", {{{2, 5, 4}}, {{2, 7, 4}, 0.9, 0.1}, {{2, 7, 3}, 1.1}},
       [](const V& v) { return ag::scaled_dot_product_attention(v[0], v[1], v[2], {}, 0.0, true, 0.4); }},
      {"sdpa_bool_mask_dead_row", {{{2, 5, 4}}, {{2, 6, 4}, 0.9, 0.1}, {{2, 6, 3}, 1.1}},
       [](const V& v) { return ag::scaled_dot_product_attention(v[0], v[1], v[2], pattern_mask(5, 6, v[0].device())); }},
      {"sdpa_float_mask", {{{2, 2, 5, 4}}, {{2, 2, 6, 4}, 0.9, 0.1}, {{2, 2, 6, 3}, 1.1}, {{2, 1, 5, 6}, 0.7}},
       [](const V& v) { return ag::scaled_dot_product_attention(v[0], v[1], v[2], v[3]); }},
      mha_case("mha_padding_weights", 8, 2, false, {3, 2, 8}, {5, 2, 8}, true, true, false),
      mha_case("mha_batch_first_noweights", 8, 4, true, {2, 3, 8}, {2, 5, 8}, false, true, false),
      mha_case("mha_self_causal_batch_first", 8, 2, true, {2, 4, 8}, {2, 4, 8}, false, false, true),
      {"conv_transpose3d_s2", {{{1, 2, 3, 3, 2}}, {{2, 3, 2, 3, 2}}, {{3}}}, [](const V& v) { return ag::conv_transpose3d(v[0], v[1], v[2], {2, 2, 2}, {0, 1, 0}, {1, 0, 1}); }},
  };
  for (Case& c : recurrent) all.push_back(std::move(c));
  return all;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dev_name = argc > 1 ? argv[1] : "cpu";
  const ag::Device dev = dev_name == "cuda" ? ag::Device(ag::kCUDA) : ag::Device(ag::kCPU);
  for (ag::DType dt : {ag::kFloat64, ag::kFloat32}) {
    for (const Case& c : cases()) {
      V inputs;
      std::vector<std::string> ins;
      for (size_t i = 0; i < c.in.size(); ++i) {
        ag::Tensor t = make(c.in[i], static_cast<int>(i));
        if (t.is_floating_point()) t = t.to(dt);
        ins.push_back(json_tensor(t));
        t = t.to(dev);
        if (t.is_floating_point() && c.in[i].kind != In::labels && c.in[i].grad) t.requires_grad_(true);
        inputs.push_back(t);
      }
      std::string line = fmt::format("{{\"name\":\"{}\",\"device\":\"{}\",\"inputs\":[{}]", c.name, dev_name, fmt::join(ins, ","));
      try {
        g_grad_of.clear();
        ag::Tensor out = c.run(inputs);
        const int64_t n = out.numel();
        std::vector<double> w(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) w[i] = std::cos(static_cast<double>(i));
        ag::Tensor wt = ag::tensor(w, out.shape()).to(out.dtype()).to(dev);
        ag::sum(out * wt).backward();
        std::vector<std::string> grads;
        for (size_t i = 0; i < inputs.size(); ++i) {
          const ag::Tensor& t = i < g_grad_of.size() && g_grad_of[i].defined() ? g_grad_of[i] : inputs[i];
          grads.push_back(t.requires_grad() && t.grad().defined() ? json_tensor(t.grad()) : "null");
        }
        line += fmt::format(",\"out\":{},\"grads\":[{}]}}", json_tensor(out), fmt::join(grads, ","));
      } catch (const ag::Error& e) {
        line += fmt::format(",\"error\":{:?}}}", std::string(e.what()));
      }
      fmt::print("{}\n", line);
    }
  }
  // test01: the default dtype, then tensor(3.14)'s dtype under it and under a float16 default.
  fmt::print("{{\"name\":\"test01\",\"lines\":[\"{}\",\"{}\",", ag::dtype_name(ag::get_default_dtype()), ag::dtype_name(ag::tensor(3.14f).dtype()));
  ag::set_default_dtype(ag::kFloat16);
  fmt::print("\"{}\"]}}\n", ag::dtype_name(ag::tensor(3.14f).dtype()));
  return 0;
}
