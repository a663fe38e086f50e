// The recurrent cells (torch.rnn_tanh_cell, rnn_relu_cell, lstm_cell, gru_cell) and their
// fused pointwise parts; nn/rnn.h builds the cell and sequence modules on them.
#pragma once

#include <utility>
#include <vector>

#include <ampgrad/core/tensor.h>

namespace ampgrad {

// One step of an Elman cell: hy = tanh (or relu) of input @ w_ih^T + b_ih + hx @ w_hh^T + b_hh.
// input [B, I] or unbatched [I]; hx [B, H] or [H]; w_ih [H, I], w_hh [H, H]; biases [H] or
// undefined. As PyTorch, hx is required here (the modules default it to zeros).
Tensor rnn_tanh_cell(const Tensor& input, const Tensor& hx, const Tensor& w_ih, const Tensor& w_hh,
                     const Tensor& b_ih = Tensor(), const Tensor& b_hh = Tensor());
Tensor rnn_relu_cell(const Tensor& input, const Tensor& hx, const Tensor& w_ih, const Tensor& w_hh,
                     const Tensor& b_ih = Tensor(), const Tensor& b_hh = Tensor());
// One LSTM step, gates i, f, g, o stacked in w_ih [4H, I] and w_hh [4H, H]: returns (hy, cy).
// cx may be float32 while the rest is 16-bit: autocast leaves it so, and cy keeps cx's dtype
// (Note [Cell state precision] in ops/rnn_cells.cpp).
std::pair<Tensor, Tensor> lstm_cell(const Tensor& input, const Tensor& hx, const Tensor& cx, const Tensor& w_ih,
                                    const Tensor& w_hh, const Tensor& b_ih = Tensor(), const Tensor& b_hh = Tensor());
// One GRU step, gates r, z, n in w_ih [3H, I] and w_hh [3H, H]:
// n = tanh(W_in x + b_in + r * (W_hn h + b_hn)), hy = (1 - z) * n + z * hx.
Tensor gru_cell(const Tensor& input, const Tensor& hx, const Tensor& w_ih, const Tensor& w_hh,
                const Tensor& b_ih = Tensor(), const Tensor& b_hh = Tensor());

// The fused pointwise parts, from the gates' pre-activations of the two GEMMs (as PyTorch's
// _thnn_fused_lstm_cell and _thnn_fused_gru_cell): [B, G * H] each, biases [G * H] or
// undefined. The sequence modules call them once per step after one input GEMM for all steps.
std::pair<Tensor, Tensor> _thnn_fused_lstm_cell(const Tensor& input_gates, const Tensor& hidden_gates,
                                                const Tensor& cx, const Tensor& input_bias = Tensor(),
                                                const Tensor& hidden_bias = Tensor());
Tensor _thnn_fused_gru_cell(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& hx,
                            const Tensor& input_bias = Tensor(), const Tensor& hidden_bias = Tensor());
// One direction of one LSTM layer over a sequence (nn::LSTM's time loop as one op, Note [LSTM
// layer] in ops/rnn_sequence.cpp): input_gates [T, B, 4H] are the input projections of every
// step with both biases added, w_hh [4H, H], h0 [B, H], c0 [B, H] (float32 allowed with 16-bit
// gates; not cast by autocast). Steps run from t = 0, or from t = T - 1 when reverse. Returns
// {output [T, B, H] (each time's hy, in time order), h_n, c_n}.
std::vector<Tensor> _lstm_layer(const Tensor& input_gates, const Tensor& w_hh, const Tensor& h0, const Tensor& c0,
                                bool reverse = false);
// tanh (relu: relu) of input_gates + hidden_gates + the biases, in one kernel.
Tensor _fused_rnn_cell(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& input_bias = Tensor(),
                       const Tensor& hidden_bias = Tensor(), bool relu = false);

}  // namespace ampgrad
