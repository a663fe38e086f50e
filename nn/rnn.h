// The recurrent layers: RNNCell, LSTMCell, GRUCell (one step) and RNN, LSTM, GRU (whole
// sequences, stacked and bidirectional), with PyTorch's parameter names, shapes and init.
#pragma once

#include <utility>
#include <vector>

#include <ampgrad/nn/module.h>
#include <ampgrad/ops/rnn_ops.h>

namespace ampgrad::nn {

enum class RnnNonlinearity { tanh, relu };

struct RNNCellOptions {
  bool bias = true;
  RnnNonlinearity nonlinearity = RnnNonlinearity::tanh;  // RNNCell only
  TensorOptions options;  // dtype/device of the parameters
};

// The cells hold weight_ih [G * hidden, input], weight_hh [G * hidden, hidden], bias_ih and
// bias_hh [G * hidden] (G = 1, 4, 3), all uniform in +-1/sqrt(hidden_size) as PyTorch's. An
// undefined hx (and cx) is zeros; inputs are [batch, input_size] or unbatched [input_size].
class RNNCellBase : public Module {
 public:
  Tensor weight_ih, weight_hh, bias_ih, bias_hh;

 protected:
  RNNCellBase(std::string name, int64_t gates, int64_t input_size, int64_t hidden_size, const RNNCellOptions& o);
};

class RNNCell : public RNNCellBase {
 public:
  RNNCell(int64_t input_size, int64_t hidden_size, RNNCellOptions o = {});
  Tensor forward(const Tensor& x) override { return forward(x, Tensor()); }
  Tensor forward(const Tensor& x, const Tensor& hx);
  Tensor operator()(const Tensor& x, const Tensor& hx = Tensor()) { return forward(x, hx); }

 private:
  RnnNonlinearity nonlinearity_;
};

// (hy, cy). The zero cell state is float32 for float32 and 16-bit inputs, so under autocast
// the state stays float32 (Note [Cell state precision] in ops/rnn_cells.cpp).
class LSTMCell : public RNNCellBase {
 public:
  LSTMCell(int64_t input_size, int64_t hidden_size, RNNCellOptions o = {});
  Tensor forward(const Tensor& x) override { return forward(x, Tensor(), Tensor()).first; }
  std::pair<Tensor, Tensor> forward(const Tensor& x, const Tensor& hx, const Tensor& cx);
  std::pair<Tensor, Tensor> operator()(const Tensor& x, const Tensor& hx = Tensor(), const Tensor& cx = Tensor()) {
    return forward(x, hx, cx);
  }
};

class GRUCell : public RNNCellBase {
 public:
  GRUCell(int64_t input_size, int64_t hidden_size, RNNCellOptions o = {});
  Tensor forward(const Tensor& x) override { return forward(x, Tensor()); }
  Tensor forward(const Tensor& x, const Tensor& hx);
  Tensor operator()(const Tensor& x, const Tensor& hx = Tensor()) { return forward(x, hx); }
};

struct RNNOptions {
  int64_t num_layers = 1;
  bool bias = true;
  bool batch_first = false;  // input and output [batch, seq, feature] instead of [seq, batch, feature]
  double dropout = 0;  // on every layer's output but the last, in training
  bool bidirectional = false;
  RnnNonlinearity nonlinearity = RnnNonlinearity::tanh;  // RNN only
  TensorOptions options;
};

// What a sequence module returns: output [seq, batch, directions * hidden] (batch_first:
// [batch, seq, ..]; unbatched: [seq, ..]), h_n [layers * directions, batch, hidden] (unbatched:
// [layers * directions, hidden]) and, for LSTM, c_n of h_n's shape (undefined otherwise).
struct RNNResult {
  Tensor output, h_n, c_n;
};

// Note [Sequence modules]
// Per layer and direction, the input projections of all steps are one GEMM (linear over
// [seq, batch, input], the biases folded in: b_ih + b_hh for RNN and LSTM, b_ih for GRU whose
// b_hn sits inside r * (..)); unbind hands each step its slice as a view with one backward node
// for all of them, and each step is one GEMM (h @ w_hh^T) and the fused cell op (Note [Fused
// recurrent cells] in ops/rnn_cells.cpp). The steps' outputs are stacked once per layer. h0
// and c0 are split the same way. The LSTM cell state is float32 (for float32 and 16-bit
// inputs) unless c0 says otherwise. Parameters are registered in PyTorch's order and names
// (weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0, then _reverse, then layer 1, ...), so a
// PyTorch state_dict loads as it is.
class RNNBase : public Module {
 public:
  enum class Mode { rnn_tanh, rnn_relu, lstm, gru };
  RNNBase(std::string name, Mode mode, int64_t input_size, int64_t hidden_size, RNNOptions o);
  // h0 and c0 undefined: zeros. c0 is for LSTM only.
  RNNResult forward(const Tensor& x, const Tensor& h0, const Tensor& c0);
  Tensor forward(const Tensor& x) override { return forward(x, Tensor(), Tensor()).output; }

  int64_t input_size() const { return input_size_; }
  int64_t hidden_size() const { return hidden_size_; }
  const RNNOptions& options() const { return opts_; }
  // weight_ih, weight_hh, bias_ih, bias_hh (the biases undefined without bias) of one layer
  // and direction (0 forward, 1 reverse).
  std::vector<Tensor> weights(int64_t layer, int64_t direction) const;

 private:
  Mode mode_;
  int64_t input_size_, hidden_size_;
  RNNOptions opts_;
  std::vector<std::vector<Tensor>> weights_;  // per layer * directions + direction
};

class RNN : public RNNBase {
 public:
  RNN(int64_t input_size, int64_t hidden_size, RNNOptions o = {});
  RNNResult operator()(const Tensor& x, const Tensor& h0 = Tensor()) { return RNNBase::forward(x, h0, Tensor()); }
};

class LSTM : public RNNBase {
 public:
  LSTM(int64_t input_size, int64_t hidden_size, RNNOptions o = {});
  RNNResult operator()(const Tensor& x, const Tensor& h0 = Tensor(), const Tensor& c0 = Tensor()) {
    return RNNBase::forward(x, h0, c0);
  }
};

class GRU : public RNNBase {
 public:
  GRU(int64_t input_size, int64_t hidden_size, RNNOptions o = {});
  RNNResult operator()(const Tensor& x, const Tensor& h0 = Tensor()) { return RNNBase::forward(x, h0, Tensor()); }
};

}  // namespace ampgrad::nn
