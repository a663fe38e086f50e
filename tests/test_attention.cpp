// Attention: scaled_dot_product_attention against a float64 reference (values, masks, the rows
// with nothing to attend to, dropout, errors), MultiheadAttention against the same reference
// built from its parameters, and gelu's tanh approximation.
#include <cmath>
#include <vector>

#include "common.h"

namespace {

using Vec = std::vector<double>;

// softmax(q k^T * scale + add) v for each of `batch` independent problems, row-major: q [L, E],
// k [S, E], v [S, Ev] each; add [L, S] per problem (empty: none; -inf: may not attend). A row
// with nothing to attend to gives zeros (safe) or NaN.
Vec attend(const Vec& q, const Vec& k, const Vec& v, const Vec& add, int64_t batch, int64_t L, int64_t S, int64_t E,
           int64_t Ev, double scale, bool safe = true) {
  Vec out(static_cast<size_t>(batch * L * Ev), 0.0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < L; ++i) {
      Vec s(static_cast<size_t>(S));
      double m = -INFINITY;
      for (int64_t j = 0; j < S; ++j) {
        double d = 0;
        for (int64_t e = 0; e < E; ++e) d += q[(b * L + i) * E + e] * k[(b * S + j) * E + e];
        s[j] = d * scale + (add.empty() ? 0.0 : add[(b * L + i) * S + j]);
        m = std::max(m, s[j]);
      }
      if (m == -INFINITY) {
        if (!safe)
          for (int64_t c = 0; c < Ev; ++c) out[(b * L + i) * Ev + c] = NAN;
        continue;
      }
      double z = 0;
      for (double& x : s) z += (x = std::exp(x - m));
      for (int64_t j = 0; j < S; ++j)
        for (int64_t c = 0; c < Ev; ++c) out[(b * L + i) * Ev + c] += s[j] / z * v[(b * S + j) * Ev + c];
    }
  return out;
}

Vec values(const ag::Tensor& t) { return t.contiguous().to_vector<double>(); }

// x [rows, in] @ w^T [in, out] + b, in float64.
Vec affine(const Vec& x, const Vec& w, const Vec& b, int64_t rows, int64_t in, int64_t out) {
  Vec y(static_cast<size_t>(rows * out));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double d = b.empty() ? 0.0 : b[o];
      for (int64_t i = 0; i < in; ++i) d += x[r * in + i] * w[o * in + i];
      y[r * out + o] = d;
    }
  return y;
}

}  // namespace

TEST_CASE("attention: scaled_dot_product_attention matches a float64 reference", "[attention]") {
  ag::manual_seed(3);
  const int64_t B = 2, H = 3, L = 5, S = 7, E = 4, Ev = 6;
  const ag::Tensor q = ag::randn({B, H, L, E}), k = ag::randn({B, H, S, E}), v = ag::randn({B, H, S, Ev});
  const Vec qv = values(q), kv = values(k), vv = values(v);
  const double scale = 1 / std::sqrt(static_cast<double>(E));
  check_close(ag::scaled_dot_product_attention(q, k, v), attend(qv, kv, vv, {}, B * H, L, S, E, Ev, scale), 1e-6, 1e-5);
  // A scale of one's own.
  check_close(ag::scaled_dot_product_attention(q, k, v, {}, 0.0, false, 0.7),
              attend(qv, kv, vv, {}, B * H, L, S, E, Ev, 0.7), 1e-6, 1e-5);
  // is_causal: position i attends to j <= i (top-left, also when S > L).
  Vec causal(static_cast<size_t>(B * H * L * S));
  for (int64_t b = 0; b < B * H; ++b)
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < S; ++j) causal[(b * L + i) * S + j] = j <= i ? 0.0 : -INFINITY;
  check_close(ag::scaled_dot_product_attention(q, k, v, {}, 0.0, true), attend(qv, kv, vv, causal, B * H, L, S, E, Ev, scale),
              1e-6, 1e-5);
  // A bool mask [L, S] broadcast over batch and heads (true: may attend), its row 2 all false.
  std::vector<bool> allowed(static_cast<size_t>(L * S));
  Vec add(static_cast<size_t>(B * H * L * S));
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < S; ++j) allowed[i * S + j] = i != 2 && (i + j) % 3 != 0;
  for (int64_t b = 0; b < B * H; ++b)
    for (int64_t i = 0; i < L * S; ++i) add[b * L * S + i] = allowed[i] ? 0.0 : -INFINITY;
  const ag::Tensor bool_mask = ag::tensor(allowed, {L, S});
  const ag::Tensor masked = ag::scaled_dot_product_attention(q, k, v, bool_mask);
  check_close(masked, attend(qv, kv, vv, add, B * H, L, S, E, Ev, scale), 1e-6, 1e-5);
  // The row with nothing to attend to is zeros, and so is its gradient (not NaN).
  CHECK(values(masked.select(2, 2)) == Vec(static_cast<size_t>(B * H * Ev), 0.0));
  const ag::Tensor qg = q.detach().requires_grad_(true), kg = k.detach().requires_grad_(true);
  ag::scaled_dot_product_attention(qg, kg, v, bool_mask).sum().backward();
  CHECK(values(qg.grad().select(2, 2)) == Vec(static_cast<size_t>(B * H * E), 0.0));
  for (double g : values(kg.grad())) CHECK(std::isfinite(g));
  // A float mask is added to the scores.
  const ag::Tensor float_mask = ag::randn({B, 1, L, S});
  const Vec fm = values(float_mask);
  Vec fadd(static_cast<size_t>(B * H * L * S));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L * S; ++i) fadd[(b * H + h) * L * S + i] = fm[b * L * S + i];
  check_close(ag::scaled_dot_product_attention(q, k, v, float_mask), attend(qv, kv, vv, fadd, B * H, L, S, E, Ev, scale),
              1e-6, 1e-5);
  // 2-D inputs: one problem; float64 in, float64 out.
  const ag::Tensor q2 = ag::randn({L, E}, ag::TensorOptions(ag::kFloat64)), k2 = ag::randn({S, E}, ag::TensorOptions(ag::kFloat64)),
                   v2 = ag::randn({S, Ev}, ag::TensorOptions(ag::kFloat64));
  const ag::Tensor o2 = ag::scaled_dot_product_attention(q2, k2, v2);
  CHECK(o2.dtype() == ag::kFloat64);
  check_close(o2, attend(values(q2), values(k2), values(v2), {}, 1, L, S, E, Ev, scale), 1e-12, 1e-12);
}

TEST_CASE("attention: scaled_dot_product_attention's dropout", "[attention]") {
  ag::manual_seed(4);
  const ag::Tensor q = ag::randn({2, 16, 8}), k = ag::randn({2, 16, 8}), v = ag::ones({2, 16, 8});
  // All weights dropped: zeros. None: the plain result.
  check_close(ag::scaled_dot_product_attention(q, k, v, {}, 1.0), Vec(2 * 16 * 8, 0.0), 0, 0);
  check_close(ag::scaled_dot_product_attention(q, k, v, {}, 0.0), Vec(2 * 16 * 8, 1.0), 1e-6, 1e-6);
  // With v all ones, a row's output is its kept weights' sum, scaled by 1/(1-p): on average 1,
  // not all 1, and the same from the same seed.
  ag::manual_seed(5);
  const Vec a = values(ag::scaled_dot_product_attention(q, k, v, {}, 0.5));
  ag::manual_seed(5);
  const Vec b = values(ag::scaled_dot_product_attention(q, k, v, {}, 0.5));
  CHECK(a == b);
  double mean = 0;
  int off = 0;
  for (double x : a) {
    mean += x / static_cast<double>(a.size());
    off += std::abs(x - 1) > 1e-3;
  }
  CHECK(off > 100);
  CHECK(mean == Approx(1.0).margin(0.25));
}

TEST_CASE("attention: scaled_dot_product_attention refuses what PyTorch refuses", "[attention][errors]") {
  const ag::Tensor q = ag::randn({2, 5, 4}), k = ag::randn({2, 7, 4}), v = ag::randn({2, 7, 3});
  CHECK_THROWS_WITH(ag::scaled_dot_product_attention(q, ag::randn({2, 7, 5}), v),
                    Catch::StartsWith("scaled_dot_product_attention: query and key must have the same head dim"));
  CHECK_THROWS_WITH(ag::scaled_dot_product_attention(q, k, ag::randn({2, 6, 3})),
                    Catch::StartsWith("scaled_dot_product_attention: key and value must have the same sequence length"));
  CHECK_THROWS_WITH(ag::scaled_dot_product_attention(q, ag::randn({3, 7, 4}), ag::randn({3, 7, 3})),
                    Catch::Contains("do not broadcast"));
  CHECK_THROWS_WITH(ag::scaled_dot_product_attention(q, k.to(ag::kFloat64), v),
                    Catch::StartsWith("scaled_dot_product_attention: query, key and value must have one floating dtype"));
  CHECK_THROWS_WITH(ag::scaled_dot_product_attention(ag::randn({4}), k, v), Catch::Contains("at least 2-D"));
  CHECK_THROWS_WITH(ag::scaled_dot_product_attention(q, k, v, ag::zeros({5, 6})),
                    Catch::Contains("attn_mask float32 [5, 6] on cpu does not broadcast to the attention scores' shape [2, 5, 7]"));
  CHECK_THROWS_WITH(ag::scaled_dot_product_attention(q, k, v, ag::zeros({5, 7}, ag::TensorOptions(ag::kFloat64))),
                    Catch::Contains("attn_mask must be bool or have the query's dtype float32"));
  CHECK_THROWS_WITH(ag::scaled_dot_product_attention(q, k, v, ag::zeros({5, 7}), 0.0, true),
                    Catch::Contains("must not be given with is_causal=true"));
  CHECK_THROWS_WITH(ag::scaled_dot_product_attention(q, k, v, {}, 1.5), Catch::Contains("dropout_p must be in [0, 1]"));
}

TEST_CASE("attention: MultiheadAttention matches the reference built from its parameters", "[attention][nn]") {
  ag::manual_seed(6);
  const int64_t E = 8, H = 2, D = E / H, L = 3, S = 5, N = 2;
  for (bool batch_first : {false, true}) {
    ag::nn::MultiheadAttentionOptions o;
    o.batch_first = batch_first;
    ag::nn::MultiheadAttention mha(E, H, o);
    // PyTorch's parameters, names and shapes; biases start at zero, so draw others.
    const ag::nn::StateDict sd = mha.state_dict();
    CHECK(sd.size() == 4);
    CHECK(sd.at("in_proj_weight").shape() == ag::Shape{3 * E, E});
    CHECK(sd.at("in_proj_bias").shape() == ag::Shape{3 * E});
    CHECK(sd.at("out_proj.weight").shape() == ag::Shape{E, E});
    CHECK(values(sd.at("in_proj_bias")) == Vec(3 * E, 0.0));
    {
      ag::NoGradGuard no_grad;
      mha.in_proj_bias.copy_(ag::randn({3 * E}));
      mha.out_proj->bias.copy_(ag::randn({E}));
    }
    // Sequence-first [L, N, E] (or [N, L, E]); key and value different tensors.
    const ag::Tensor qs = ag::randn({L, N, E}), ks = ag::randn({S, N, E}), vs = ag::randn({S, N, E});
    auto in = [&](const ag::Tensor& t) { return batch_first ? t.transpose(0, 1).contiguous() : t; };
    std::vector<bool> pad(static_cast<size_t>(N * S), false);
    pad[0 * S + 4] = pad[1 * S + 1] = pad[1 * S + 2] = true;  // true: ignore this key
    const ag::Tensor kpm = ag::tensor(pad, {N, S});
    auto [out, w] = mha(in(qs), in(ks), in(vs), kpm);
    // The reference, per batch element and head, in float64.
    const Vec W = values(mha.in_proj_weight), Bi = values(mha.in_proj_bias), Wo = values(mha.out_proj->weight),
              Bo = values(mha.out_proj->bias);
    auto slice = [](const Vec& x, int64_t from, int64_t n) { return Vec(x.begin() + from, x.begin() + from + n); };
    Vec want(static_cast<size_t>(L * N * E)), want_w(static_cast<size_t>(N * L * S), 0.0);
    for (int64_t n = 0; n < N; ++n) {
      const Vec xq = values(qs.select(1, n)), xk = values(ks.select(1, n)), xv = values(vs.select(1, n));
      const Vec pq = affine(xq, slice(W, 0, E * E), slice(Bi, 0, E), L, E, E);
      const Vec pk = affine(xk, slice(W, E * E, E * E), slice(Bi, E, E), S, E, E);
      const Vec pv = affine(xv, slice(W, 2 * E * E, E * E), slice(Bi, 2 * E, E), S, E, E);
      Vec heads(static_cast<size_t>(L * E));
      for (int64_t h = 0; h < H; ++h) {
        Vec hq(static_cast<size_t>(L * D)), hk(static_cast<size_t>(S * D)), hv(static_cast<size_t>(S * D)), add(static_cast<size_t>(L * S));
        for (int64_t i = 0; i < L; ++i)
          for (int64_t d = 0; d < D; ++d) hq[i * D + d] = pq[i * E + h * D + d];
        for (int64_t j = 0; j < S; ++j)
          for (int64_t d = 0; d < D; ++d) hk[j * D + d] = pk[j * E + h * D + d], hv[j * D + d] = pv[j * E + h * D + d];
        for (int64_t i = 0; i < L; ++i)
          for (int64_t j = 0; j < S; ++j) add[i * S + j] = pad[n * S + j] ? -INFINITY : 0.0;
        const Vec o = attend(hq, hk, hv, add, 1, L, S, D, D, 1 / std::sqrt(static_cast<double>(D)));
        for (int64_t i = 0; i < L; ++i)
          for (int64_t d = 0; d < D; ++d) heads[i * E + h * D + d] = o[i * D + d];
        // The head's weights, for the average: attention of a one-hot value.
        for (int64_t j = 0; j < S; ++j) {
          Vec onehot(static_cast<size_t>(S), 0.0);
          onehot[j] = 1;
          const Vec wj = attend(hq, hk, onehot, add, 1, L, S, D, 1, 1 / std::sqrt(static_cast<double>(D)));
          for (int64_t i = 0; i < L; ++i) want_w[(n * L + i) * S + j] += wj[i] / H;
        }
      }
      const Vec y = affine(heads, Wo, Bo, L, E, E);
      for (int64_t i = 0; i < L; ++i)
        for (int64_t e = 0; e < E; ++e) want[(i * N + n) * E + e] = y[i * E + e];
    }
    const ag::Tensor out_lne = batch_first ? out.transpose(0, 1) : out;
    CHECK(out.shape() == (batch_first ? ag::Shape{N, L, E} : ag::Shape{L, N, E}));
    check_close(out_lne, want, 1e-5, 1e-5);
    CHECK(w.shape() == ag::Shape{N, L, S});
    check_close(w, want_w, 1e-6, 1e-5);
    // Without weights: the fused-attention path, the same output.
    auto [out2, w2] = mha(in(qs), in(ks), in(vs), kpm, /*need_weights=*/false);
    CHECK_FALSE(w2.defined());
    check_close(out2, values(out), 1e-6, 1e-5);
    // Per-head weights.
    CHECK(mha(in(qs), in(ks), in(vs), kpm, true, {}, /*average_attn_weights=*/false).second.shape() == ag::Shape{N, H, L, S});
  }
}

TEST_CASE("attention: MultiheadAttention's self-attention, masks, unbatched input, kdim and vdim, errors",
          "[attention][nn]") {
  ag::manual_seed(7);
  const int64_t E = 6, H = 3, L = 4, N = 2;
  ag::nn::MultiheadAttention mha(E, H);
  const ag::Tensor x = ag::randn({L, N, E});
  // Self-attention (one tensor for query, key and value: one projection GEMM) equals the same
  // values passed as three tensors.
  const ag::Tensor y_self = mha(x, x, x).first;
  check_close(y_self, values(mha(x, x.clone(), x.clone()).first), 1e-6, 1e-6);
  // A causal bool attn_mask (true above the diagonal: may not attend), with and without the
  // is_causal hint, and as the equivalent float mask.
  const ag::Tensor causal = ag::gt(ag::triu(ag::ones({L, L}), 1), 0.0);
  const Vec y_causal = values(mha(x, x, x, {}, false, causal).first);
  check_close(mha(x, x, x, {}, false, causal, true, /*is_causal=*/true).first, y_causal, 1e-6, 1e-6);
  check_close(mha(x, x, x, {}, true, ag::masked_fill(ag::zeros({L, L}), causal, -INFINITY)).first, y_causal, 1e-6, 1e-6);
  CHECK(values(mha(x, x, x, {}, false, causal).first) != values(y_self));
  // Unbatched [L, E]: batch element 1's result.
  const ag::Tensor x1 = x.select(1, 1).contiguous();
  auto [u, uw] = mha(x1, x1, x1);
  CHECK(u.shape() == ag::Shape{L, E});
  CHECK(uw.shape() == ag::Shape{L, L});
  check_close(u, values(y_self.select(1, 1)), 1e-6, 1e-6);
  // Key and value of other sizes: separate projections, PyTorch's names.
  ag::nn::MultiheadAttentionOptions kv;
  kv.kdim = 5;
  kv.vdim = 3;
  ag::nn::MultiheadAttention cross(E, H, kv);
  const ag::nn::StateDict sd = cross.state_dict();
  CHECK(sd.count("q_proj_weight") == 1);
  CHECK(sd.at("k_proj_weight").shape() == ag::Shape{E, 5});
  CHECK(sd.at("v_proj_weight").shape() == ag::Shape{E, 3});
  CHECK(sd.count("in_proj_weight") == 0);
  CHECK(cross(x, ag::randn({7, N, 5}), ag::randn({7, N, 3})).first.shape() == ag::Shape{L, N, E});
  // Training-mode dropout changes the result; eval does not drop.
  ag::nn::MultiheadAttentionOptions d;
  d.dropout = 0.5;
  ag::nn::MultiheadAttention drop(E, H, d);
  const Vec train_y = values(drop(x, x, x).first);
  drop.eval();
  const Vec eval_y = values(drop(x, x, x).first);
  CHECK(train_y != eval_y);
  check_close(drop(x, x, x).first, eval_y, 0, 0);
  // Gradients reach every parameter.
  mha(x, x, x).first.sum().backward();
  for (const auto& [name, p] : mha.named_parameters()) {
    INFO(name);
    REQUIRE(p.grad().defined());
    double total = 0;
    for (double g : values(p.grad())) total += std::abs(g);
    CHECK(total > 0);
  }
  // Bad input names what is wrong.
  CHECK_THROWS_WITH(ag::nn::MultiheadAttention(10, 3), Catch::Contains("embed_dim 10 must be divisible by num_heads 3"));
  CHECK_THROWS_WITH(mha(ag::randn({L, N, 5}), x, x), Catch::Contains("expected query, key and value with 6, 6 and 6 features"));
  CHECK_THROWS_WITH(mha(x, ag::randn({3, N, E}), ag::randn({4, N, E})), Catch::Contains("same sequence length"));
  CHECK_THROWS_WITH(mha(x, x, x, ag::zeros({N, L + 1}).to(ag::kBool)), Catch::Contains("key_padding_mask must be [2, 4]"));
  CHECK_THROWS_WITH(mha(x, x, x, {}, true, ag::zeros({L, L + 1})), Catch::Contains("a 2-D attn_mask must be [L, S] = [4, 4]"));
  CHECK_THROWS_WITH(mha(x, x, x, {}, false, {}, true, true), Catch::Contains("is_causal is a hint"));
}

TEST_CASE("attention: gelu's tanh approximation, as PyTorch's", "[attention][ops]") {
  const ag::Tensor x = ag::tensor({-3.0, -1.0, -0.25, 0.0, 0.5, 2.0, 4.0}, {7}).to(ag::kFloat64);
  Vec want;
  for (double v : values(x)) want.push_back(0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))));
  check_close(ag::gelu(x, "tanh"), want, 1e-15, 1e-14);
  // Not the exact gelu: they differ by up to ~1e-3.
  CHECK(values(ag::gelu(x, "tanh")) != values(ag::gelu(x)));
  // The gradient, against central differences.
  const ag::Tensor xg = x.detach().requires_grad_(true);
  ag::gelu(xg, "tanh").sum().backward();
  const Vec g = values(xg.grad());
  for (size_t i = 0; i < want.size(); ++i) {
    const double v = values(x)[i], h = 1e-6;
    auto f = [](double t) { return 0.5 * t * (1 + std::tanh(std::sqrt(2 / M_PI) * (t + 0.044715 * t * t * t))); };
    CHECK(g[i] == Approx((f(v + h) - f(v - h)) / (2 * h)).epsilon(1e-7));
  }
  check_close(ag::nn::GELU("tanh")(x), want, 1e-15, 1e-14);
  CHECK_THROWS_WITH(ag::gelu(x, "fast"), Catch::StartsWith("gelu: approximate must be \"none\" or \"tanh\", got \"fast\""));
  CHECK_THROWS_WITH(ag::nn::GELU("erf"), Catch::StartsWith("GELU: approximate must be"));
}

namespace {

// ||got - ref|| / ||ref|| over every element.
double rel_err(const ag::Tensor& got, const ag::Tensor& ref) {
  const Vec a = values(got), b = values(ref);
  REQUIRE(a.size() == b.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

// The implementation the trace says the last scaled_dot_product_attention call took.
std::string sdpa_path(const ag::amp::Trace& t) {
  for (auto it = t.records().rbegin(); it != t.records().rend(); ++it)
    if (it->op == "scaled_dot_product_attention") return it->path;
  return "(not traced)";
}

}  // namespace

TEST_CASE("attention: the fused CUDA path matches the float64 math path, forward and backward",
          "[attention][cuda]") {
  if (skip_without_cuda()) return;
  ag::manual_seed(11);
  const ag::TensorOptions on = ag::TensorOptions().device(ag::Device(ag::kCUDA));
  struct Case {
    ag::DType dtype;
    int64_t b, h, l, s, e;
    bool causal, heads_last;  // heads_last: q, k, v are [B, T, H, E] tensors viewed as [B, H, T, E]
  };
  const Case cases[] = {
      {ag::kFloat16, 2, 3, 128, 128, 64, false, false}, {ag::kFloat16, 2, 3, 128, 128, 64, true, false},
      {ag::kBFloat16, 2, 3, 128, 128, 64, true, false}, {ag::kFloat16, 1, 4, 128, 256, 32, false, true},
      {ag::kFloat16, 2, 2, 256, 256, 128, true, true},  {ag::kBFloat16, 1, 2, 64, 128, 128, false, true},
      {ag::kFloat16, 8, 4, 32, 32, 16, true, true},     {ag::kFloat16, 2, 3, 64, 96, 64, false, false},
  };
  for (const Case& c : cases) {
    CAPTURE(ag::dtype_name(c.dtype), c.b, c.h, c.l, c.s, c.e, c.causal, c.heads_last);
    auto make = [&](int64_t t) {
      ag::Tensor x = c.heads_last ? ag::randn({c.b, t, c.h, c.e}, on).to(c.dtype).transpose(1, 2)
                                  : ag::randn({c.b, c.h, t, c.e}, on).to(c.dtype);
      return x.detach().requires_grad_(true);
    };
    ag::Tensor q = make(c.l), k = make(c.s), v = make(c.s);
    ag::Tensor out;
    {
      // Autocast on, so that the call is traced (the inputs are 16-bit already: no casts).
      ag::amp::Trace trace;
      ag::amp::AutocastGuard autocast(ag::kCUDA, c.dtype);
      out = ag::scaled_dot_product_attention(q, k, v, {}, 0.0, c.causal);
      const std::string taken = sdpa_path(trace);
      INFO(taken);
      // (S not a multiple of 128 with a gradient: before cuDNN 9.16, through full-length padding.)
      CHECK(taken.find("fused") == 0);
    }
    CHECK(out.dtype() == c.dtype);
    CHECK(out.shape() == ag::Shape{c.b, c.h, c.l, c.e});
    const ag::Tensor g = ag::randn(out.shape(), on).to(c.dtype);
    out.backward(g);
    auto ref_of = [](const ag::Tensor& t) { return t.detach().to(ag::kFloat64).requires_grad_(true); };
    ag::Tensor q64 = ref_of(q), k64 = ref_of(k), v64 = ref_of(v);
    ag::Tensor ref = ag::scaled_dot_product_attention(q64, k64, v64, {}, 0.0, c.causal);
    ref.backward(g.to(ag::kFloat64));
    const double tol = c.dtype == ag::kFloat16 ? 4e-3 : 2.5e-2;
    CHECK(rel_err(out, ref) < tol);
    CHECK(rel_err(q.grad(), q64.grad()) < tol);
    CHECK(rel_err(k.grad(), k64.grad()) < tol);
    CHECK(rel_err(v.grad(), v64.grad()) < tol);
    CHECK(q.grad().shape() == q.shape());
  }
}

TEST_CASE("attention: masks on the fused CUDA path match the float64 math path, empty rows included",
          "[attention][cuda]") {
  if (skip_without_cuda()) return;
  ag::manual_seed(14);
  const ag::Device cuda(ag::kCUDA);
  const ag::TensorOptions on = ag::TensorOptions().device(cuda);
  const int64_t B = 2, H = 2, L = 64, S = 128, E = 64;
  // A key-padding mask [B, 1, 1, S]: batch 0 sees its first 88 keys, batch 1 none (its rows are
  // empty: zeros out, zero gradients). A float mask [1, H, L, S]: finite values and -inf.
  const ag::Tensor col = ag::arange(S, ag::TensorOptions(ag::kInt64).device(cuda)).reshape({1, 1, 1, S});
  const ag::Tensor limit = ag::tensor({88.0f, 0.0f}, {B, 1, 1, 1}).to(ag::kInt64).to(cuda);
  const ag::Tensor padding = ag::lt(col, limit);
  for (ag::DType dt : {ag::kFloat16, ag::kBFloat16}) {
    // Row 3 all -inf (empty: zeros, as the math path), row 5 all the dtype's lowest value
    // (finite: a softmax over its keys, as the math path).
    const double lowest = dt == ag::kFloat16 ? -65504.0 : -3.38953138925153547590e38;
    const ag::Tensor row = ag::arange(L, ag::TensorOptions(ag::kInt64).device(cuda)).reshape({1, 1, L, 1});
    const ag::Tensor noise = ag::rand({1, H, L, S}, on) * -2.0;
    ag::Tensor floats = ag::where(ag::gt(ag::rand({1, H, L, S}, on), 0.3), noise, -INFINITY);
    floats = ag::where(ag::eq(row, 3), ag::full({1, H, L, S}, -INFINITY, on), floats);
    floats = ag::where(ag::eq(row, 5), ag::full({1, H, L, S}, lowest, on), floats).to(dt);
    for (const ag::Tensor& mask : {padding, floats}) {
      CAPTURE(ag::dtype_name(dt), mask.desc());
      auto make = [&](int64_t t) { return ag::randn({B, H, t, E}, on).to(dt).detach().requires_grad_(true); };
      ag::Tensor q = make(L), k = make(S), v = make(S), out;
      {
        ag::amp::Trace trace;
        ag::amp::AutocastGuard autocast(ag::kCUDA, dt);
        out = ag::scaled_dot_product_attention(q, k, v, mask, 0.0, false);
        // (bfloat16 float masks: the math path, Note [Masks on the fused path].)
        const bool fused = mask.dtype() == ag::kBool || dt == ag::kFloat16;
        CHECK(sdpa_path(trace).find(fused ? "fused (cuDNN flash attention, the mask as a bias)"
                                          : "math path: a bfloat16 float attn_mask") == 0);
      }
      const ag::Tensor g = ag::randn(out.shape(), on).to(dt);
      out.backward(g);
      auto ref_of = [](const ag::Tensor& t) { return t.detach().to(ag::kFloat64).requires_grad_(true); };
      ag::Tensor q64 = ref_of(q), k64 = ref_of(k), v64 = ref_of(v);
      const ag::Tensor m64 = mask.dtype() == ag::kBool ? mask : mask.to(ag::kFloat64);
      ag::Tensor ref = ag::scaled_dot_product_attention(q64, k64, v64, m64, 0.0, false);
      ref.backward(g.to(ag::kFloat64));
      const double tol = dt == ag::kFloat16 ? 4e-3 : 2.5e-2;
      CHECK(rel_err(out, ref) < tol);
      CHECK(rel_err(q.grad(), q64.grad()) < tol);
      CHECK(rel_err(k.grad(), k64.grad()) < tol);
      CHECK(rel_err(v.grad(), v64.grad()) < tol);
      if (mask.dtype() == ag::kBool) {  // batch 1 attends to nothing
        CHECK(ag::max(out.detach().select(0, 1).abs()).item<double>() == 0);
        CHECK(ag::max(q.grad().select(0, 1).abs()).item<double>() == 0);
      } else {  // row 3 attends to nothing, row 5 to every key
        CHECK(ag::max(out.detach().select(2, 3).abs()).item<double>() == 0);
        CHECK(ag::max(out.detach().select(2, 5).abs()).item<double>() > 0);
      }
    }
  }
}

TEST_CASE("attention: the fused CUDA path's dropout drops weights as its gradients say", "[attention][cuda]") {
  if (skip_without_cuda()) return;
  ag::manual_seed(12);
  const ag::TensorOptions on = ag::TensorOptions().device(ag::Device(ag::kCUDA));
  const int64_t B = 1, H = 2, L = 128, S = 128, E = 128;
  const double p = 0.25;
  ag::Tensor q = ag::randn({B, H, L, E}, on).to(ag::kFloat16).requires_grad_(true);
  ag::Tensor k = ag::randn({B, H, S, E}, on).to(ag::kFloat16).requires_grad_(true);
  // v the identity: the output is the dropped weights themselves, softmax * mask / (1 - p).
  const ag::Tensor idx = ag::arange(S, ag::TensorOptions(ag::kInt64).device(ag::Device(ag::kCUDA)));
  ag::Tensor v = ag::eq(idx.reshape({S, 1}), idx.reshape({1, E})).to(ag::kFloat16).reshape({1, 1, S, E});
  v = v.expand({B, H, S, E}).contiguous();
  v = v.detach().requires_grad_(true);
  ag::Tensor out;
  {
    ag::amp::Trace trace;
    ag::amp::AutocastGuard autocast(ag::kCUDA, ag::kFloat16);
    out = ag::scaled_dot_product_attention(q, k, v, {}, p, false);
    REQUIRE(sdpa_path(trace).find("fused") == 0);
  }
  const ag::Tensor g = ag::randn(out.shape(), on).to(ag::kFloat16);
  out.backward(g);
  // The mask the output shows, and the kept share.
  const ag::Tensor kept = ag::ne(out.detach(), 0.0).to(ag::kFloat64);
  const double share = kept.mean().item<double>();
  CHECK(share == Approx(1 - p).margin(0.02));
  // The math path with that mask, in float64: same output and gradients.
  auto ref_of = [](const ag::Tensor& t) { return t.detach().to(ag::kFloat64).requires_grad_(true); };
  ag::Tensor q64 = ref_of(q), k64 = ref_of(k), v64 = ref_of(v);
  const ag::Tensor w = ag::softmax(ag::matmul(q64, k64.transpose(-2, -1)) / std::sqrt(double(E)), -1);
  ag::Tensor ref = ag::matmul(w * kept / (1 - p), v64);
  ref.backward(g.to(ag::kFloat64));
  CHECK(rel_err(out, ref) < 4e-3);
  CHECK(rel_err(q.grad(), q64.grad()) < 4e-3);
  CHECK(rel_err(k.grad(), k64.grad()) < 4e-3);
  CHECK(rel_err(v.grad(), v64.grad()) < 4e-3);
  // Another draw, another mask.
  ag::Tensor again = ag::scaled_dot_product_attention(q.detach(), k.detach(), v.detach(), {}, p, false);
  CHECK(ag::ne(ag::ne(again, 0.0).to(ag::kFloat64), kept).to(ag::kFloat64).sum().item<double>() > 100);
}

TEST_CASE("attention: what the fused CUDA path does not take runs the math path, and the trace says why",
          "[attention][cuda]") {
  if (skip_without_cuda()) return;
  ag::manual_seed(13);
  const ag::TensorOptions on = ag::TensorOptions().device(ag::Device(ag::kCUDA));
  auto path = [&](const ag::Tensor& q, const ag::Tensor& k, const ag::Tensor& mask, bool causal) {
    ag::Tensor out;
    std::string taken;
    {
      ag::amp::Trace trace;
      ag::amp::AutocastGuard autocast(ag::kCUDA, ag::kFloat16);
      out = ag::scaled_dot_product_attention(q, k, k, mask, 0.0, causal);
      taken = sdpa_path(trace);
    }
    const ag::Tensor ref = ag::scaled_dot_product_attention(q.to(ag::kFloat64), k.to(ag::kFloat64),
                                                            k.to(ag::kFloat64), mask, 0.0, causal);
    CHECK(rel_err(out, ref) < 4e-3);
    return taken;
  };
  const ag::Tensor q = ag::randn({2, 2, 64, 64}, on).to(ag::kFloat16), k = ag::randn({2, 2, 96, 64}, on).to(ag::kFloat16);
  CHECK(path(q, k, {}, false).find("fused") == 0);  // no gradient wanted: any S
  const ag::Tensor mask = ag::gt(ag::rand({64, 96}, on), 0.2);
  CHECK(path(q, k, mask, false).find("fused (cuDNN flash attention, the mask as a bias)") == 0);
  const ag::Tensor k90 = ag::randn({2, 2, 90, 64}, on).to(ag::kFloat16);
  CHECK(path(q, k90, ag::gt(ag::rand({64, 90}, on), 0.2), false).find("S not a multiple of 8") != std::string::npos);
  const ag::Tensor q3 = ag::randn({2, 64, 64}, on).to(ag::kFloat16), k3 = ag::randn({2, 96, 64}, on).to(ag::kFloat16);
  CHECK(path(q3, k3, {}, false).find("4-D") != std::string::npos);
  // S = 96 with a gradient wanted (before cuDNN 9.16 through the full-length padding mask).
  const ag::Tensor qg = q.detach().requires_grad_(true);
  CHECK(path(qg, k, {}, true).find("fused") == 0);
}

TEST_CASE("attention: the one-tile kernel for short sequences matches the float64 math path, forward and backward",
          "[attention][cuda]") {
  if (skip_without_cuda()) return;
  // The kernel is off by default until its first H200 run (Note [Attention paths]): on here,
  // and as it was afterwards.
  struct TileOn {
    bool was = ag::tile_sdp_enabled();
    TileOn() { ag::enable_tile_sdp(true); }
    ~TileOn() { ag::enable_tile_sdp(was); }
  } tile_on;
  ag::manual_seed(15);
  const ag::TensorOptions on = ag::TensorOptions().device(ag::Device(ag::kCUDA));
  struct Case {
    ag::DType dtype;
    int64_t b, h, l, s, e;
    bool causal, packed;  // packed: q, k, v slices of one [B, T, 3, H, E] tensor (self-attention, L == S)
  };
  // Sizes that pad (L, S not multiples of 16), L != S causal (S above and below L), one row.
  const Case cases[] = {
      {ag::kFloat16, 4, 8, 128, 128, 32, true, true},   {ag::kBFloat16, 2, 4, 128, 128, 32, true, true},
      {ag::kFloat16, 1, 2, 17, 5, 16, false, false},    {ag::kBFloat16, 2, 2, 100, 77, 64, true, false},
      {ag::kFloat16, 1, 1, 1, 3, 32, false, false},     {ag::kFloat16, 3, 2, 33, 128, 64, false, false},
      {ag::kFloat16, 2, 3, 77, 100, 32, true, false},   {ag::kBFloat16, 2, 4, 128, 128, 16, false, false},
      {ag::kFloat16, 2, 2, 40, 40, 64, true, true},
  };
  for (const Case& c : cases) {
    CAPTURE(ag::dtype_name(c.dtype), c.b, c.h, c.l, c.s, c.e, c.causal, c.packed);
    ag::Tensor packed, q, k, v;
    if (c.packed) {
      packed = ag::randn({c.b, c.l, 3, c.h, c.e}, on).to(c.dtype).detach().requires_grad_(true);
      const std::vector<ag::Tensor> qkv = ag::unbind(packed, 2);
      q = qkv[0].permute({0, 2, 1, 3}), k = qkv[1].permute({0, 2, 1, 3}), v = qkv[2].permute({0, 2, 1, 3});
    } else {
      auto make = [&](int64_t t) { return ag::randn({c.b, c.h, t, c.e}, on).to(c.dtype).detach().requires_grad_(true); };
      q = make(c.l), k = make(c.s), v = make(c.s);
    }
    auto run = [&] {
      ag::amp::Trace trace;
      ag::amp::AutocastGuard autocast(ag::kCUDA, c.dtype);
      ag::Tensor out = ag::scaled_dot_product_attention(q, k, v, {}, 0.0, c.causal);
      return std::make_pair(out, sdpa_path(trace));
    };
    const auto [out, taken] = run();
    CHECK(taken == "fused (one-tile kernel: L, S <= 128)");
    CHECK(out.dtype() == c.dtype);
    REQUIRE(out.shape() == ag::Shape{c.b, c.h, c.l, c.e});
    const ag::Tensor g = ag::randn(out.shape(), on).to(c.dtype);
    out.backward(g);
    auto ref_of = [](const ag::Tensor& t) { return t.detach().to(ag::kFloat64).requires_grad_(true); };
    const double tol = c.dtype == ag::kFloat16 ? 4e-3 : 2.5e-2;
    if (c.packed) {
      ag::Tensor p64 = ref_of(packed);
      const std::vector<ag::Tensor> qkv = ag::unbind(p64, 2);
      ag::Tensor ref = ag::scaled_dot_product_attention(qkv[0].permute({0, 2, 1, 3}), qkv[1].permute({0, 2, 1, 3}),
                                                        qkv[2].permute({0, 2, 1, 3}), {}, 0.0, c.causal);
      ref.backward(g.to(ag::kFloat64));
      CHECK(rel_err(out, ref) < tol);
      for (int64_t i = 0; i < 3; ++i) CHECK(rel_err(packed.grad().select(2, i), p64.grad().select(2, i)) < tol);
    } else {
      ag::Tensor q64 = ref_of(q), k64 = ref_of(k), v64 = ref_of(v);
      ag::Tensor ref = ag::scaled_dot_product_attention(q64, k64, v64, {}, 0.0, c.causal);
      ref.backward(g.to(ag::kFloat64));
      CHECK(rel_err(out, ref) < tol);
      CHECK(rel_err(q.grad(), q64.grad()) < tol);
      CHECK(rel_err(k.grad(), k64.grad()) < tol);
      CHECK(rel_err(v.grad(), v64.grad()) < tol);
      // No atomics: the same call gives the same bits.
      const Vec gq = values(q.grad()), gk = values(k.grad()), gv = values(v.grad());
      q.grad().zero_(), k.grad().zero_(), v.grad().zero_();
      run().first.backward(g);
      CHECK(values(q.grad()) == gq);
      CHECK(values(k.grad()) == gk);
      CHECK(values(v.grad()) == gv);
      // Off, the same call goes elsewhere (cuDNN, or the math path where cuDNN refuses the
      // size), within the same tolerance of the reference.
      ag::enable_tile_sdp(false);
      const auto [off, off_path] = run();
      ag::enable_tile_sdp(true);
      CHECK(off_path.find("one-tile") == std::string::npos);
      CHECK(rel_err(off, ref) < tol);
    }
  }
  // What the kernel does not take goes to cuDNN: a mask, dropout, E 128, S 256.
  const ag::Tensor q = ag::randn({2, 2, 64, 64}, on).to(ag::kFloat16);
  auto path = [&](const ag::Tensor& qq, const ag::Tensor& kk, const ag::Tensor& mask, double p) {
    ag::amp::Trace trace;
    ag::amp::AutocastGuard autocast(ag::kCUDA, ag::kFloat16);
    (void)ag::scaled_dot_product_attention(qq, kk, kk, mask, p, false);
    return sdpa_path(trace);
  };
  CHECK(path(q, q, ag::gt(ag::rand({64, 64}, on), 0.2), 0.0).find("cuDNN") != std::string::npos);
  CHECK(path(q, q, {}, 0.1).find("cuDNN") != std::string::npos);
  const ag::Tensor q128 = ag::randn({1, 2, 64, 128}, on).to(ag::kFloat16);
  CHECK(path(q128, q128, {}, 0.0).find("cuDNN") != std::string::npos);
  const ag::Tensor k256 = ag::randn({2, 2, 256, 64}, on).to(ag::kFloat16);
  CHECK(path(q, k256, {}, 0.0).find("cuDNN") != std::string::npos);
}
