// The recurrent layers (Note [Sequence modules] in nn/rnn.h): PyTorch's init and the time loop.
#include <ampgrad/nn/rnn.h>

#include <cmath>

#include <fmt/format.h>

#include <ampgrad/nn/init.h>
#include <ampgrad/ops/nn_ops.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad::nn {

namespace {

// weight_ih, weight_hh, bias_ih, bias_hh of `gates` * hidden rows, uniform in +-1/sqrt(hidden)
// in registration order, as PyTorch's reset_parameters.
std::vector<Tensor> make_weights(int64_t gates, int64_t in, int64_t hidden, bool bias, const TensorOptions& o) {
  std::vector<Tensor> w{empty({gates * hidden, in}, o), empty({gates * hidden, hidden}, o)};
  if (bias) {
    w.push_back(empty({gates * hidden}, o));
    w.push_back(empty({gates * hidden}, o));
  } else {
    w.resize(4);
  }
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden));
  for (const Tensor& t : w)
    if (t.defined()) init::uniform_(t, -bound, bound);
  return w;
}

void check_sizes(const char* what, int64_t input_size, int64_t hidden_size) {
  AG_CHECK(input_size > 0 && hidden_size > 0, "{}: input_size {} and hidden_size {} must be positive", what,
           input_size, hidden_size);
}

// The zero state of a cell: hx in the input's dtype; an LSTM's cx float32 unless the input is
// float64 (Note [Cell state precision]).
Tensor zero_state(const Tensor& x, int64_t hidden, DType dtype) {
  Shape s = x.dim() == 2 ? Shape{x.size(0), hidden} : Shape{hidden};
  return zeros(s, x.options().dtype(dtype));
}
DType state_dtype(const Tensor& x) { return x.dtype() == kFloat64 ? kFloat64 : kFloat32; }

}  // namespace

// ---- Cells ----------------------------------------------------------------------------------

RNNCellBase::RNNCellBase(std::string name, int64_t gates, int64_t input_size, int64_t hidden_size,
                         const RNNCellOptions& o)
    : Module(std::move(name)) {
  check_sizes(this->name().c_str(), input_size, hidden_size);
  std::vector<Tensor> w = make_weights(gates, input_size, hidden_size, o.bias, o.options);
  weight_ih = register_parameter("weight_ih", w[0]);
  weight_hh = register_parameter("weight_hh", w[1]);
  if (o.bias) {
    bias_ih = register_parameter("bias_ih", w[2]);
    bias_hh = register_parameter("bias_hh", w[3]);
  }
}

RNNCell::RNNCell(int64_t input_size, int64_t hidden_size, RNNCellOptions o)
    : RNNCellBase("RNNCell", 1, input_size, hidden_size, o), nonlinearity_(o.nonlinearity) {}

Tensor RNNCell::forward(const Tensor& x, const Tensor& hx) {
  const Tensor h = hx.defined() ? hx : zero_state(x, weight_hh.size(1), x.dtype());
  return nonlinearity_ == RnnNonlinearity::relu ? rnn_relu_cell(x, h, weight_ih, weight_hh, bias_ih, bias_hh)
                                                : rnn_tanh_cell(x, h, weight_ih, weight_hh, bias_ih, bias_hh);
}

LSTMCell::LSTMCell(int64_t input_size, int64_t hidden_size, RNNCellOptions o)
    : RNNCellBase("LSTMCell", 4, input_size, hidden_size, o) {}

std::pair<Tensor, Tensor> LSTMCell::forward(const Tensor& x, const Tensor& hx, const Tensor& cx) {
  const int64_t hidden = weight_hh.size(1);
  const Tensor h = hx.defined() ? hx : zero_state(x, hidden, x.dtype());
  const Tensor c = cx.defined() ? cx : zero_state(x, hidden, state_dtype(x));
  return lstm_cell(x, h, c, weight_ih, weight_hh, bias_ih, bias_hh);
}

GRUCell::GRUCell(int64_t input_size, int64_t hidden_size, RNNCellOptions o)
    : RNNCellBase("GRUCell", 3, input_size, hidden_size, o) {}

Tensor GRUCell::forward(const Tensor& x, const Tensor& hx) {
  const Tensor h = hx.defined() ? hx : zero_state(x, weight_hh.size(1), x.dtype());
  return gru_cell(x, h, weight_ih, weight_hh, bias_ih, bias_hh);
}

// ---- Sequences ------------------------------------------------------------------------------

namespace {
int64_t gates_of(RNNBase::Mode m) {
  return m == RNNBase::Mode::lstm ? 4 : (m == RNNBase::Mode::gru ? 3 : 1);
}
}  // namespace

RNNBase::RNNBase(std::string name, Mode mode, int64_t input_size, int64_t hidden_size, RNNOptions o)
    : Module(std::move(name)), mode_(mode), input_size_(input_size), hidden_size_(hidden_size), opts_(o) {
  check_sizes(this->name().c_str(), input_size, hidden_size);
  AG_CHECK(o.num_layers > 0, "{}: num_layers must be positive, got {}", this->name(), o.num_layers);
  AG_CHECK(o.dropout >= 0 && o.dropout <= 1, "{}: dropout must be in [0, 1], got {}", this->name(), o.dropout);
  const int64_t dirs = o.bidirectional ? 2 : 1;
  for (int64_t layer = 0; layer < o.num_layers; ++layer) {
    for (int64_t d = 0; d < dirs; ++d) {
      const int64_t in = layer == 0 ? input_size : hidden_size * dirs;
      std::vector<Tensor> w = make_weights(gates_of(mode), in, hidden_size, o.bias, o.options);
      const std::string suffix = fmt::format("_l{}{}", layer, d == 1 ? "_reverse" : "");
      w[0] = register_parameter("weight_ih" + suffix, w[0]);
      w[1] = register_parameter("weight_hh" + suffix, w[1]);
      if (o.bias) {
        w[2] = register_parameter("bias_ih" + suffix, w[2]);
        w[3] = register_parameter("bias_hh" + suffix, w[3]);
      }
      weights_.push_back(std::move(w));
    }
  }
}

std::vector<Tensor> RNNBase::weights(int64_t layer, int64_t direction) const {
  const int64_t dirs = opts_.bidirectional ? 2 : 1;
  AG_CHECK(layer >= 0 && layer < opts_.num_layers && direction >= 0 && direction < dirs,
           "{}: no layer {} direction {} ({} layers, {} directions)", name(), layer, direction, opts_.num_layers, dirs);
  return weights_[static_cast<size_t>(layer * dirs + direction)];
}

RNNResult RNNBase::forward(const Tensor& x, const Tensor& h0, const Tensor& c0) {
  const std::string& op = name();
  AG_CHECK(x.defined() && (x.dim() == 2 || x.dim() == 3),
           "{}: expected input of 3 dims ({}) or 2 (unbatched: seq, input_size), got {}", op,
           opts_.batch_first ? "batch, seq, input_size" : "seq, batch, input_size", x.desc());
  AG_CHECK(x.size(-1) == input_size_, "{}: input {} has {} features, but input_size is {}", op, x.desc(), x.size(-1),
           input_size_);
  const bool batched = x.dim() == 3, lstm = mode_ == Mode::lstm;
  const int64_t dirs = opts_.bidirectional ? 2 : 1, states = opts_.num_layers * dirs;
  // Time-major [seq, batch, input]; the unbatched input is a batch of one.
  const Tensor seq = !batched ? unsqueeze(x, 1) : (opts_.batch_first ? x.transpose(0, 1) : x);
  const int64_t steps = seq.size(0), batch = seq.size(1);
  const Shape state_shape = batched ? Shape{states, batch, hidden_size_} : Shape{states, hidden_size_};
  auto check_state = [&](const Tensor& s, const char* what) {
    AG_CHECK(s.shape() == state_shape, "{}: {} {} must be {} ({}{}hidden_size) for input {}", op, what, s.desc(),
             shape_str(state_shape), "num_layers * num_directions, ", batched ? "batch, " : "", x.desc());
  };
  AG_CHECK(lstm || !c0.defined(), "{}: c0 is an LSTM's cell state; {} takes h0 only", op, op);
  if (h0.defined()) check_state(h0, "h0");
  if (c0.defined()) check_state(c0, "c0");
  AG_CHECK(steps > 0, "{}: expected a sequence of at least one step, got input {}", op, x.desc());
  const Shape one_state{batch, hidden_size_};
  auto initial = [&](const Tensor& given, DType dtype) {
    if (given.defined()) return unbind(batched ? given : unsqueeze(given, 1), 0);
    const Tensor z = zeros(one_state, seq.options().dtype(dtype));
    return std::vector<Tensor>(static_cast<size_t>(states), z);
  };
  const std::vector<Tensor> hs0 = initial(h0, x.dtype()), cs0 = lstm ? initial(c0, state_dtype(x)) : std::vector<Tensor>();

  std::vector<Tensor> h_n, c_n;
  Tensor layer_in = seq;
  for (int64_t layer = 0; layer < opts_.num_layers; ++layer) {
    std::vector<Tensor> outs;
    for (int64_t d = 0; d < dirs; ++d) {
      const size_t idx = static_cast<size_t>(layer * dirs + d);
      const std::vector<Tensor>& w = weights_[idx];
      // One GEMM for every step's input projection, the biases folded in where they can be.
      Tensor folded;
      if (w[2].defined()) folded = mode_ == Mode::gru ? w[2] : add(w[2], w[3]);
      if (lstm) {  // the time loop as one op (Note [LSTM layer] in ops/rnn_sequence.cpp)
        const std::vector<Tensor> r = _lstm_layer(linear(layer_in, w[0], folded), w[1], hs0[idx], cs0[idx], d == 1);
        outs.push_back(r[0]);
        h_n.push_back(r[1]);
        c_n.push_back(r[2]);
        continue;
      }
      // GRU and Elman cells: one GEMM and the fused cell per step.
      const std::vector<Tensor> gi = unbind(linear(layer_in, w[0], folded), 0);
      Tensor h = hs0[idx];
      std::vector<Tensor> ys(static_cast<size_t>(steps));
      for (int64_t s = 0; s < steps; ++s) {
        const size_t t = static_cast<size_t>(d == 0 ? s : steps - 1 - s);
        const Tensor gh = linear(h, w[1]);
        h = mode_ == Mode::gru ? _thnn_fused_gru_cell(gi[t], gh, h, Tensor(), w[3])
                               : _fused_rnn_cell(gi[t], gh, Tensor(), Tensor(), mode_ == Mode::rnn_relu);
        ys[t] = h;
      }
      outs.push_back(stack(ys, 0));
      h_n.push_back(h);
    }
    layer_in = dirs == 2 ? cat(outs, 2) : outs[0];
    if (opts_.dropout > 0 && is_training() && layer + 1 < opts_.num_layers) layer_in = dropout(layer_in, opts_.dropout, true);
  }
  RNNResult r;
  r.output = !batched ? squeeze(layer_in, 1) : (opts_.batch_first ? layer_in.transpose(0, 1) : layer_in);
  r.h_n = stack(h_n, 0);
  if (!batched) r.h_n = squeeze(r.h_n, 1);
  if (lstm) {
    r.c_n = stack(c_n, 0);
    if (!batched) r.c_n = squeeze(r.c_n, 1);
  }
  return r;
}

RNN::RNN(int64_t input_size, int64_t hidden_size, RNNOptions o)
    : RNNBase("RNN", o.nonlinearity == RnnNonlinearity::relu ? Mode::rnn_relu : Mode::rnn_tanh, input_size, hidden_size,
              o) {}
LSTM::LSTM(int64_t input_size, int64_t hidden_size, RNNOptions o) : RNNBase("LSTM", Mode::lstm, input_size, hidden_size, o) {}
GRU::GRU(int64_t input_size, int64_t hidden_size, RNNOptions o) : RNNBase("GRU", Mode::gru, input_size, hidden_size, o) {}

}  // namespace ampgrad::nn
