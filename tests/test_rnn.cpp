// The recurrent family: the sequence modules against a float64 composition of cells written
// here, their shapes, gradients, states, dropout and PyTorch names; the cell state's precision
// under autocast; CPU against CUDA for the modules.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "common.h"

namespace ag = ampgrad;
namespace nn = ag::nn;
using Mode = nn::RNNBase::Mode;

namespace {

double sigm(double x) { return 1 / (1 + std::exp(-x)); }

struct RefOut {
  std::vector<double> out, hn, cn;  // out time-major [T, B, D * H]; hn, cn [L * D, B, H]
};

// The module's math in float64 from its weights: x time-major [T, B, I], h0 and c0 [L * D, B, H].
RefOut reference(const nn::RNNBase& m, Mode mode, const std::vector<double>& x, int64_t T, int64_t B,
                 const std::vector<double>& h0, const std::vector<double>& c0) {
  const int64_t H = m.hidden_size(), L = m.options().num_layers, D = m.options().bidirectional ? 2 : 1;
  const int64_t G = mode == Mode::lstm ? 4 : (mode == Mode::gru ? 3 : 1);
  std::vector<double> in = x;
  int64_t I = m.input_size();
  RefOut r;
  r.hn.assign(static_cast<size_t>(L * D * B * H), 0);
  r.cn = r.hn;
  for (int64_t l = 0; l < L; ++l) {
    std::vector<double> out(static_cast<size_t>(T * B * D * H));
    for (int64_t d = 0; d < D; ++d) {
      const std::vector<ag::Tensor> w = m.weights(l, d);
      const std::vector<double> wih = w[0].to_vector<double>(), whh = w[1].to_vector<double>();
      const std::vector<double> bih = w[2].defined() ? w[2].to_vector<double>() : std::vector<double>(G * H, 0.0);
      const std::vector<double> bhh = w[3].defined() ? w[3].to_vector<double>() : std::vector<double>(G * H, 0.0);
      const int64_t s = l * D + d;
      std::vector<double> h(h0.begin() + s * B * H, h0.begin() + (s + 1) * B * H);
      std::vector<double> c = mode == Mode::lstm ? std::vector<double>(c0.begin() + s * B * H, c0.begin() + (s + 1) * B * H)
                                                 : std::vector<double>();
      for (int64_t step = 0; step < T; ++step) {
        const int64_t t = d == 0 ? step : T - 1 - step;
        std::vector<double> nh(static_cast<size_t>(B * H)), nc = c;
        for (int64_t b = 0; b < B; ++b) {
          std::vector<double> gi(G * H), gh(G * H);
          for (int64_t j = 0; j < G * H; ++j) {
            gi[j] = bih[j];
            gh[j] = bhh[j];
            for (int64_t k = 0; k < I; ++k) gi[j] += wih[j * I + k] * in[(t * B + b) * I + k];
            for (int64_t k = 0; k < H; ++k) gh[j] += whh[j * H + k] * h[b * H + k];
          }
          for (int64_t k = 0; k < H; ++k) {
            const size_t e = static_cast<size_t>(b * H + k);
            if (mode == Mode::lstm) {
              auto pre = [&](int q) { return gi[q * H + k] + gh[q * H + k]; };
              const double ig = sigm(pre(0)), fg = sigm(pre(1)), gg = std::tanh(pre(2)), og = sigm(pre(3));
              nc[e] = fg * c[e] + ig * gg;
              nh[e] = og * std::tanh(nc[e]);
            } else if (mode == Mode::gru) {
              const double rg = sigm(gi[k] + gh[k]), zg = sigm(gi[H + k] + gh[H + k]);
              const double ng = std::tanh(gi[2 * H + k] + rg * gh[2 * H + k]);
              nh[e] = (1 - zg) * ng + zg * h[e];
            } else {
              const double pre = gi[k] + gh[k];
              nh[e] = mode == Mode::rnn_relu ? std::max(pre, 0.0) : std::tanh(pre);
            }
          }
        }
        h = nh;
        c = nc;
        for (int64_t b = 0; b < B; ++b)
          for (int64_t k = 0; k < H; ++k) out[((t * B + b) * D + d) * H + k] = h[b * H + k];
      }
      std::copy(h.begin(), h.end(), r.hn.begin() + s * B * H);
      if (mode == Mode::lstm) std::copy(c.begin(), c.end(), r.cn.begin() + s * B * H);
    }
    in = out;
    I = D * H;
  }
  r.out = in;
  return r;
}

std::shared_ptr<nn::RNNBase> make(Mode mode, int64_t in, int64_t hidden, nn::RNNOptions o) {
  switch (mode) {
    case Mode::lstm: return std::make_shared<nn::LSTM>(in, hidden, o);
    case Mode::gru: return std::make_shared<nn::GRU>(in, hidden, o);
    case Mode::rnn_relu: o.nonlinearity = nn::RnnNonlinearity::relu; return std::make_shared<nn::RNN>(in, hidden, o);
    case Mode::rnn_tanh: break;
  }
  return std::make_shared<nn::RNN>(in, hidden, o);
}

const char* mode_name(Mode m) {
  return m == Mode::lstm ? "LSTM" : (m == Mode::gru ? "GRU" : (m == Mode::rnn_relu ? "RNN relu" : "RNN tanh"));
}

// Time-major values of a module's [.., .., F] input or output.
std::vector<double> time_major(const ag::Tensor& t, bool batch_first) {
  return (batch_first ? t.transpose(0, 1) : t).contiguous().to_vector<double>();
}

}  // namespace

TEST_CASE("rnn: output and state shapes of every configuration", "[rnn]") {
  ag::manual_seed(11);
  for (Mode mode : {Mode::rnn_tanh, Mode::rnn_relu, Mode::lstm, Mode::gru})
    for (int64_t layers : {1, 2})
      for (bool bidi : {false, true})
        for (bool bf : {false, true})
          for (bool batched : {true, false}) {
            INFO(mode_name(mode) << " layers " << layers << " bidirectional " << bidi << " batch_first " << bf
                                 << " batched " << batched);
            nn::RNNOptions o;
            o.num_layers = layers;
            o.bidirectional = bidi;
            o.batch_first = bf;
            auto m = make(mode, 3, 5, o);
            const int64_t T = 4, B = 2, D = bidi ? 2 : 1;
            const ag::Tensor x = batched ? ag::randn(bf ? ag::Shape{B, T, 3} : ag::Shape{T, B, 3}) : ag::randn({T, 3});
            const nn::RNNResult r = m->forward(x, ag::Tensor(), ag::Tensor());
            const ag::Shape out = batched ? (bf ? ag::Shape{B, T, D * 5} : ag::Shape{T, B, D * 5}) : ag::Shape{T, D * 5};
            const ag::Shape state = batched ? ag::Shape{layers * D, B, 5} : ag::Shape{layers * D, 5};
            CHECK(r.output.shape() == out);
            CHECK(r.h_n.shape() == state);
            CHECK(r.c_n.defined() == (mode == Mode::lstm));
            if (mode == Mode::lstm) CHECK(r.c_n.shape() == state);
          }
}

TEST_CASE("rnn: stacked, bidirectional and batch_first modules equal a float64 composition of cells", "[rnn]") {
  ag::manual_seed(fresh_seed());
  struct Config {
    Mode mode;
    int64_t layers;
    bool bidi, bf, bias;
  };
  for (const Config& c : {Config{Mode::lstm, 2, true, true, true}, Config{Mode::lstm, 3, false, false, false},
                          Config{Mode::gru, 2, true, false, true}, Config{Mode::gru, 1, false, true, false},
                          Config{Mode::rnn_tanh, 3, true, false, true}, Config{Mode::rnn_relu, 2, true, true, true}}) {
    INFO(mode_name(c.mode) << " layers " << c.layers << " bidirectional " << c.bidi << " batch_first " << c.bf
                           << " bias " << c.bias);
    nn::RNNOptions o;
    o.num_layers = c.layers;
    o.bidirectional = c.bidi;
    o.batch_first = c.bf;
    o.bias = c.bias;
    auto m = make(c.mode, 3, 4, o);
    const int64_t T = 5, B = 3, S = c.layers * (c.bidi ? 2 : 1);
    const ag::Tensor x = ag::randn(c.bf ? ag::Shape{B, T, 3} : ag::Shape{T, B, 3});
    const ag::Tensor h0 = ag::randn({S, B, 4}) * 0.5, c0 = ag::randn({S, B, 4}) * 0.5;
    const bool lstm = c.mode == Mode::lstm;
    const nn::RNNResult r = m->forward(x, h0, lstm ? c0 : ag::Tensor());
    const RefOut ref = reference(*m, c.mode, time_major(x, c.bf), T, B, h0.to_vector<double>(), c0.to_vector<double>());
    const ag::Tensor got = c.bf ? r.output.transpose(0, 1).contiguous() : r.output;
    check_close(got, ref.out, 1e-5, 1e-4);
    check_close(r.h_n, ref.hn, 1e-5, 1e-4);
    if (lstm) check_close(r.c_n, ref.cn, 1e-5, 1e-4);
  }
}

TEST_CASE("rnn: unbatched input equals a batch of one", "[rnn]") {
  ag::manual_seed(fresh_seed());
  nn::RNNOptions o;
  o.num_layers = 2;
  o.bidirectional = true;
  nn::LSTM m(3, 4, o);
  const ag::Tensor x = ag::randn({5, 3}), h0 = ag::randn({4, 4}), c0 = ag::randn({4, 4});
  const nn::RNNResult one = m(x, h0, c0);
  const nn::RNNResult batch = m(x.unsqueeze(1), h0.unsqueeze(1), c0.unsqueeze(1));
  check_close(one.output, batch.output.squeeze(1).to_vector<double>(), 0, 0);
  check_close(one.h_n, batch.h_n.squeeze(1).to_vector<double>(), 0, 0);
  check_close(one.c_n, batch.c_n.squeeze(1).to_vector<double>(), 0, 0);
}

TEST_CASE("rnn: gradcheck of each module on a tiny config", "[rnn]") {
  ag::manual_seed(fresh_seed());
  for (Mode mode : {Mode::rnn_tanh, Mode::lstm, Mode::gru}) {
    INFO(mode_name(mode));
    nn::RNNOptions o;
    o.num_layers = 2;
    o.bidirectional = true;
    o.batch_first = true;
    o.options = ag::TensorOptions(ag::kFloat64);
    auto m = make(mode, 2, 2, o);
    const bool lstm = mode == Mode::lstm;
    std::vector<ag::Tensor> in{ag::randn({2, 3, 2}, ag::kFloat64).requires_grad_(),
                               (ag::randn({4, 2, 2}, ag::kFloat64) * 0.5).requires_grad_()};
    if (lstm) in.push_back((ag::randn({4, 2, 2}, ag::kFloat64) * 0.5).requires_grad_());
    const size_t states = in.size();
    for (const ag::Tensor& p : m->parameters()) in.push_back(p);
    auto fn = [&](const std::vector<ag::Tensor>& v) {
      const nn::RNNResult r = m->forward(v[0], v[1], lstm ? v[2] : ag::Tensor());
      std::vector<ag::Tensor> parts{r.output.reshape({-1}), r.h_n.reshape({-1})};
      if (lstm) parts.push_back(r.c_n.reshape({-1}));
      return ag::cat(parts, 0);
    };
    const ag::autograd::GradcheckResult res = ag::autograd::gradcheck(fn, in);
    INFO(res.message);
    CHECK(res.ok);
    CHECK(in.size() == states + 16);
  }
}

TEST_CASE("rnn: h0 and c0 carry a sequence on: two halves equal the whole", "[rnn]") {
  ag::manual_seed(fresh_seed());
  for (Mode mode : {Mode::lstm, Mode::gru, Mode::rnn_tanh}) {
    INFO(mode_name(mode));
    nn::RNNOptions o;
    o.num_layers = 2;
    auto m = make(mode, 3, 4, o);
    const ag::Tensor x = ag::randn({6, 2, 3});
    const nn::RNNResult whole = m->forward(x, ag::Tensor(), ag::Tensor());
    const nn::RNNResult first = m->forward(x.slice(0, 0, 2), ag::Tensor(), ag::Tensor());
    const nn::RNNResult second = m->forward(x.slice(0, 2, 6), first.h_n, first.c_n);
    check_close(second.output, whole.output.slice(0, 2, 6).contiguous().to_vector<double>(), 1e-6, 1e-5);
    check_close(second.h_n, whole.h_n.to_vector<double>(), 1e-6, 1e-5);
    if (mode == Mode::lstm) check_close(second.c_n, whole.c_n.to_vector<double>(), 1e-6, 1e-5);
    // A given zero state is the default one.
    const ag::Tensor z = ag::zeros({2, 2, 4});
    check_close(m->forward(x, z, mode == Mode::lstm ? z : ag::Tensor()).output, whole.output.to_vector<double>(), 0, 0);
  }
}

TEST_CASE("rnn: dropout acts between layers in training only, never after the last", "[rnn]") {
  ag::manual_seed(fresh_seed());
  nn::RNNOptions o;
  o.num_layers = 2;
  o.dropout = 0.5;
  nn::GRU dropped(3, 4, o);
  o.dropout = 0;
  nn::GRU plain(3, 4, o);
  plain.load_state_dict(dropped.state_dict());
  const ag::Tensor x = ag::randn({5, 2, 3});
  const std::vector<double> want = plain(x).output.to_vector<double>();
  const std::vector<double> a = dropped(x).output.to_vector<double>(), b = dropped(x).output.to_vector<double>();
  CHECK(a != want);  // training: the first layer's output is dropped
  CHECK(a != b);     // a fresh mask each call
  dropped.eval();
  check_close(dropped(x).output, want, 0, 0);
  // One layer: nothing to drop between layers, in training too.
  o.num_layers = 1;
  o.dropout = 0.5;
  nn::LSTM single(3, 4, o);
  const std::vector<double> train = single(x).output.to_vector<double>();
  single.eval();
  check_close(single(x).output, train, 0, 0);
}

TEST_CASE("rnn: parameters have PyTorch's names, shapes and init bound", "[rnn]") {
  ag::manual_seed(3);
  nn::RNNOptions o;
  o.num_layers = 2;
  o.bidirectional = true;
  nn::LSTM m(3, 5, o);
  const std::vector<std::string> names{"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0",
                                       "weight_ih_l0_reverse", "weight_hh_l0_reverse", "bias_ih_l0_reverse", "bias_hh_l0_reverse",
                                       "weight_ih_l1", "weight_hh_l1", "bias_ih_l1", "bias_hh_l1",
                                       "weight_ih_l1_reverse", "weight_hh_l1_reverse", "bias_ih_l1_reverse", "bias_hh_l1_reverse"};
  const auto params = m.named_parameters();
  REQUIRE(params.size() == names.size());
  const double bound = 1 / std::sqrt(5.0);
  for (size_t i = 0; i < names.size(); ++i) {
    CHECK(params[i].first == names[i]);
    for (double v : params[i].second.to_vector<double>()) CHECK(std::abs(v) <= bound);
  }
  CHECK(params[0].second.shape() == ag::Shape{20, 3});
  CHECK(params[1].second.shape() == ag::Shape{20, 5});
  CHECK(params[8].second.shape() == ag::Shape{20, 10});  // layer 1 reads both directions
  CHECK(params[2].second.shape() == ag::Shape{20});
  nn::GRU g(3, 5, nn::RNNOptions{1, false});
  CHECK(g.named_parameters().size() == 2);
  CHECK(g.named_parameters()[1].second.shape() == ag::Shape{15, 5});
  nn::GRUCell cell(3, 5);
  CHECK(cell.named_parameters()[0].first == "weight_ih");
  CHECK(cell.named_parameters()[3].first == "bias_hh");
}

TEST_CASE("rnn: cell modules are the cell ops with zero default states", "[rnn]") {
  ag::manual_seed(fresh_seed());
  const ag::Tensor x = ag::randn({3, 4});
  nn::RNNCell relu(4, 5, nn::RNNCellOptions{true, nn::RnnNonlinearity::relu});
  const ag::Tensor z = ag::zeros({3, 5});
  check_close(relu(x), ag::rnn_relu_cell(x, z, relu.weight_ih, relu.weight_hh, relu.bias_ih, relu.bias_hh).to_vector<double>(), 0, 0);
  nn::GRUCell gru(4, 5);
  check_close(gru(x), ag::gru_cell(x, z, gru.weight_ih, gru.weight_hh, gru.bias_ih, gru.bias_hh).to_vector<double>(), 0, 0);
  nn::LSTMCell lstm(4, 5);
  auto [hy, cy] = lstm(x);
  auto [hy2, cy2] = ag::lstm_cell(x, z, z, lstm.weight_ih, lstm.weight_hh, lstm.bias_ih, lstm.bias_hh);
  check_close(hy, hy2.to_vector<double>(), 0, 0);
  check_close(cy, cy2.to_vector<double>(), 0, 0);
  // A loop of cells equals the sequence module with the same weights.
  nn::LSTM seq(4, 5);
  seq.load_state_dict({{"weight_ih_l0", lstm.weight_ih}, {"weight_hh_l0", lstm.weight_hh},
                       {"bias_ih_l0", lstm.bias_ih}, {"bias_hh_l0", lstm.bias_hh}});
  const ag::Tensor xs = ag::randn({4, 3, 4});
  ag::Tensor h = z, c = z;
  for (int64_t t = 0; t < 4; ++t) std::tie(h, c) = lstm(xs.select(0, t), h, c);
  const nn::RNNResult r = seq(xs);
  check_close(r.h_n.squeeze(0), h.to_vector<double>(), 1e-6, 1e-5);
  check_close(r.c_n.squeeze(0), c.to_vector<double>(), 1e-6, 1e-5);
}

TEST_CASE("rnn: under autocast the LSTM cell state stays float32 and the gates run in 16 bits", "[rnn]") {
  ag::manual_seed(fresh_seed());
  nn::LSTM m(3, 4, nn::RNNOptions{2});
  nn::LSTMCell cell(3, 4);
  const ag::Tensor x = ag::randn({5, 2, 3});
  ag::amp::AutocastGuard autocast(ag::kCPU, ag::kBFloat16);
  const nn::RNNResult r = m(x);
  CHECK(r.output.dtype() == ag::kBFloat16);
  CHECK(r.h_n.dtype() == ag::kBFloat16);
  CHECK(r.c_n.dtype() == ag::kFloat32);
  auto [hy, cy] = cell(x.select(0, 0));
  CHECK(hy.dtype() == ag::kBFloat16);
  CHECK(cy.dtype() == ag::kFloat32);
  // The op: a float32 cx is not cast, a 16-bit one stays 16-bit.
  const ag::Tensor h = ag::randn({2, 4}), c = ag::randn({2, 4});
  auto [hy32, cy32] = ag::lstm_cell(x.select(0, 0), h, c, cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh);
  CHECK(cy32.dtype() == ag::kFloat32);
  auto [hy16, cy16] = ag::lstm_cell(x.select(0, 0), h, c.to(ag::kBFloat16), cell.weight_ih, cell.weight_hh);
  CHECK(cy16.dtype() == ag::kBFloat16);
  // The float32 state agrees with the float32 run to bfloat16's rounding of the gates.
  ag::amp::AutocastGuard off(ag::kCPU, std::nullopt, false);
  const nn::RNNResult full = m(x);
  check_close(r.c_n, full.c_n.to_vector<double>(), 0.05, 0.05);
  // Backward reaches the float32 parameters from the mixed graph.
  (r.output.to(ag::kFloat32).sum() + r.c_n.sum()).backward();
  for (const ag::Tensor& p : m.parameters()) {
    REQUIRE(p.grad().defined());
    CHECK(p.grad().dtype() == ag::kFloat32);
  }
}

TEST_CASE("rnn: lstm_cell's two outputs share one backward node", "[rnn]") {
  ag::manual_seed(fresh_seed());
  const ag::Tensor x = ag::randn({2, 3}, ag::kFloat64), h = ag::randn({2, 2}, ag::kFloat64);
  const ag::Tensor c = ag::randn({2, 2}, ag::kFloat64).requires_grad_();
  const ag::Tensor wi = ag::randn({8, 3}, ag::kFloat64).requires_grad_(), wh = ag::randn({8, 2}, ag::kFloat64);
  auto [hy, cy] = ag::lstm_cell(x, h, c, wi, wh);
  // Only cy used: hy's gradient is zero, not missing.
  cy.sum().backward(ag::Tensor(), true);
  const std::vector<double> only_c = c.grad().to_vector<double>(), wi_c = wi.grad().to_vector<double>();
  c.set_grad(ag::Tensor());
  wi.set_grad(ag::Tensor());
  hy.sum().backward(ag::Tensor(), true);
  const std::vector<double> only_h = c.grad().to_vector<double>(), wi_h = wi.grad().to_vector<double>();
  c.set_grad(ag::Tensor());
  wi.set_grad(ag::Tensor());
  (hy.sum() + cy.sum()).backward();
  std::vector<double> both(only_c.size()), wboth(wi_c.size());
  for (size_t i = 0; i < both.size(); ++i) both[i] = only_c[i] + only_h[i];
  for (size_t i = 0; i < wboth.size(); ++i) wboth[i] = wi_c[i] + wi_h[i];
  check_close(c.grad(), both, 1e-12, 1e-12);
  check_close(wi.grad(), wboth, 1e-12, 1e-12);
}

TEST_CASE("rnn: CPU and CUDA modules agree in float32 and under float16 autocast", "[rnn][cuda]") {
  if (skip_without_cuda()) return;
  ag::manual_seed(fresh_seed());
  for (Mode mode : {Mode::lstm, Mode::gru, Mode::rnn_tanh}) {
    for (bool amp : {false, true}) {
      INFO(mode_name(mode) << (amp ? " under float16 autocast" : " in float32"));
      nn::RNNOptions o;
      o.num_layers = 2;
      o.bidirectional = true;
      o.batch_first = true;
      auto cpu = make(mode, 6, 16, o);
      auto gpu = make(mode, 6, 16, o);
      gpu->load_state_dict(cpu->state_dict());
      gpu->to(ag::Device(ag::kCUDA));
      const ag::Tensor x = ag::randn({4, 7, 6});
      nn::RNNResult rc, rg;
      {
        ag::amp::AutocastGuard g(ag::kCPU, ag::kFloat16, amp);
        rc = cpu->forward(x, ag::Tensor(), ag::Tensor());
      }
      {
        ag::amp::AutocastGuard g(ag::kCUDA, ag::kFloat16, amp);
        rg = gpu->forward(x.cuda(), ag::Tensor(), ag::Tensor());
      }
      REQUIRE(rg.output.dtype() == rc.output.dtype());
      const double tol = amp ? 1e-2 : 1e-5;
      check_close(rg.output, rc.output.to_vector<double>(), tol, tol);
      check_close(rg.h_n, rc.h_n.to_vector<double>(), tol, tol);
      if (mode == Mode::lstm) {
        CHECK(rg.c_n.dtype() == ag::kFloat32);
        check_close(rg.c_n, rc.c_n.to_vector<double>(), tol, tol);
      }
      rc.output.to(ag::kFloat32).sum().backward();
      rg.output.to(ag::kFloat32).sum().backward();
      const auto pc = cpu->named_parameters(), pg = gpu->named_parameters();
      for (size_t i = 0; i < pc.size(); ++i) {
        INFO(pc[i].first);
        check_close(pg[i].second.grad(), pc[i].second.grad().to_vector<double>(), 10 * tol, 10 * tol);
      }
    }
  }
}

TEST_CASE("rnn: the fused LSTM kernel takes a float32 cx with 16-bit gates on CUDA as on the CPU", "[rnn][cuda]") {
  if (skip_without_cuda()) return;
  ag::manual_seed(fresh_seed());
  for (ag::DType d : {ag::kFloat16, ag::kBFloat16}) {
    INFO(ag::dtype_name(d));
    const ag::Tensor gi = ag::randn({37, 4 * 19}).to(d), gh = ag::randn({37, 4 * 19}).to(d), cx = ag::randn({37, 19});
    const ag::Tensor b1 = ag::randn({4 * 19}).to(d), b2 = ag::randn({4 * 19}).to(d);
    auto [hc, cc] = ag::_thnn_fused_lstm_cell(gi, gh, cx, b1, b2);
    auto [hg, cg] = ag::_thnn_fused_lstm_cell(gi.cuda(), gh.cuda(), cx.cuda(), b1.cuda(), b2.cuda());
    CHECK(cg.dtype() == ag::kFloat32);
    CHECK(hg.dtype() == d);
    check_close(hg, hc.to_vector<double>(), 0, 2 * eps_of(d));
    check_close(cg, cc.to_vector<double>(), 1e-6, 1e-5);
  }
}
