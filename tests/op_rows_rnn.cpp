// The op table's rows of the recurrent cells, their fused pointwise parts and unbind (Note [Op
// table] in op_table.h). The GEMMs make them sums (Tol::sum).
#include <cmath>

#include "op_rows.h"

namespace op_table {

namespace {

// An LSTM cell state on the 16-bit grid (odd multiples of 1/64 in (-1, 1): exact in float16
// and bfloat16, never 0). Autocast leaves a float32 cx as it is (Note [Cell state precision]
// in ops/rnn_cells.cpp) while the autocast check's hand-cast casts it: on this grid both runs
// read the same values, and the check compares the rest of the op bitwise.
In grid_state(S s) {
  return In{std::move(s), [](const ag::Shape& shape, int64_t n, const V& earlier) {
              const ag::Tensor u = uniform(-1, 1)(shape, n, earlier);
              return (ag::floor(u * 32.0) + 0.5) / 32.0;
            }};
}
// A bias of magnitude 9 to 10, signs by turns: with inputs in [-1, 1) and at most 8 products
// besides it, relu's pre-activation never comes near its kink.
In far(S s) {
  return In{std::move(s), [](const ag::Shape& shape, int64_t n, const V& earlier) {
              const ag::Tensor u = uniform(9, 10)(shape, n, earlier);
              std::vector<double> sign(static_cast<size_t>(u.numel()));
              for (size_t i = 0; i < sign.size(); ++i) sign[i] = i % 2 ? -1.0 : 1.0;
              return u * ag::tensor(sign, shape);
            }};
}

}  // namespace

std::vector<Row> rnn_rows() {
  return {
      // ---- Cells (ops/rnn_cells.cpp) ---------------------------------------------------------
      sum_row("rnn_tanh_cell", "batched, biases", {sy({N, 3}), sy({N, 4}), sy({4, 3}), sy({4, 4}), sy({4}), sy({4})},
              [](const V& v) { return ag::rnn_tanh_cell(v[0], v[1], v[2], v[3], v[4], v[5]); }),
      sum_row("rnn_tanh_cell", "unbatched, no biases", {sy({N}), sy({4}), sy({4, N}), sy({4, 4})},
              [](const V& v) { return ag::rnn_tanh_cell(v[0], v[1], v[2], v[3]); }),
      sum_row("rnn_relu_cell", "batched, biases far from the kink", {sy({N, 3}), sy({N, 4}), sy({4, 3}), sy({4, 4}), far({4}), sy({4})},
              [](const V& v) { return ag::rnn_relu_cell(v[0], v[1], v[2], v[3], v[4], v[5]); }),
      sum_row("lstm_cell", "hy, batched, biases",
              {sy({N, 3}), sy({N, 2}), grid_state({N, 2}), sy({8, 3}), sy({8, 2}), sy({8}), sy({8})},
              [](const V& v) { return ag::lstm_cell(v[0], v[1], v[2], v[3], v[4], v[5], v[6]).first; }),
      // cy keeps a float32 cx's dtype under autocast: not the autocast dtype, so no autocast row.
      sum_row("lstm_cell", "cy, unbatched, no biases", {sy({N}), sy({2}), grid_state({2}), sy({8, N}), sy({8, 2})},
              [](const V& v) { return ag::lstm_cell(v[0], v[1], v[2], v[3], v[4]).second; })
          .no_autocast(),
      sum_row("lstm_cell", "hy and cy together", {sy({N, 3}), sy({N, 2}), grid_state({N, 2}), sy({8, 3}), sy({8, 2}), sy({8}), sy({8})},
              [](const V& v) {
                auto [hy, cy] = ag::lstm_cell(v[0], v[1], v[2], v[3], v[4], v[5], v[6]);
                return ag::cat({hy, cy}, 1);
              })
          .no_autocast(),
      sum_row("gru_cell", "batched, biases", {sy({N, 3}), sy({N, 2}), sy({6, 3}), sy({6, 2}), sy({6}), sy({6})},
              [](const V& v) { return ag::gru_cell(v[0], v[1], v[2], v[3], v[4], v[5]); }),
      sum_row("gru_cell", "unbatched, no biases", {sy({N}), sy({2}), sy({6, N}), sy({6, 2})},
              [](const V& v) { return ag::gru_cell(v[0], v[1], v[2], v[3]); }),

      // ---- Fused pointwise parts --------------------------------------------------------------
      row("_fused_rnn_cell", "tanh, biases", {nrm({N, 4}), nrm({N, 4}), nrm({4}), nrm({4})},
          [](const V& v) { return ag::_fused_rnn_cell(v[0], v[1], v[2], v[3]); }),
      row("_fused_rnn_cell", "relu, a bias far from the kink", {sy({N, 4}), sy({N, 4}), far({4}), sy({4})},
          [](const V& v) { return ag::_fused_rnn_cell(v[0], v[1], v[2], v[3], true); }),
      row("_fused_rnn_cell", "tanh, no biases, transposed gates", {nrm({4, N}), nrm({N, 4})},
          [](const V& v) { return ag::_fused_rnn_cell(v[0].t(), v[1]); }),
      row("_thnn_fused_lstm_cell", "hy, biases", {nrm({N, 8}), nrm({N, 8}), grid_state({N, 2}), nrm({8}), nrm({8})},
          [](const V& v) { return ag::_thnn_fused_lstm_cell(v[0], v[1], v[2], v[3], v[4]).first; }),
      row("_thnn_fused_lstm_cell", "cy, no biases", {nrm({N, 8}), nrm({N, 8}), nrm({N, 2})},
          [](const V& v) { return ag::_thnn_fused_lstm_cell(v[0], v[1], v[2]).second; })
          .no_autocast(),
      row("_thnn_fused_gru_cell", "biases", {nrm({N, 6}), nrm({N, 6}), sy({N, 2}), nrm({6}), nrm({6})},
          [](const V& v) { return ag::_thnn_fused_gru_cell(v[0], v[1], v[2], v[3], v[4]); }),
      row("_thnn_fused_gru_cell", "hidden bias only", {nrm({N, 6}), nrm({N, 6}), sy({N, 2}), nrm({6})},
          [](const V& v) { return ag::_thnn_fused_gru_cell(v[0], v[1], v[2], ag::Tensor(), v[3]); }),

      // ---- The LSTM layer (ops/rnn_sequence.cpp) -----------------------------------------------
      // Over several steps autocast keeps the cell state float32 where the hand-cast inputs
      // round it at every step (Note [Cell state precision]): autocast's bitwise check takes
      // the one-step row.
      sum_row("_lstm_layer", "one step, output", {sy({1, N, 8}), sy({8, 2}), sy({N, 2}), grid_state({N, 2})},
              [](const V& v) { return ag::_lstm_layer(v[0], v[1], v[2], v[3])[0]; }),
      sum_row("_lstm_layer", "output, forward", {sy({5, N, 8}), sy({8, 2}), sy({N, 2}), grid_state({N, 2})},
              [](const V& v) { return ag::_lstm_layer(v[0], v[1], v[2], v[3])[0]; })
          .no_autocast(),
      sum_row("_lstm_layer", "output, h_n and c_n, reverse", {sy({4, N, 8}), sy({8, 2}), sy({N, 2}), grid_state({N, 2})},
              [](const V& v) {
                const std::vector<ag::Tensor> r = ag::_lstm_layer(v[0], v[1], v[2], v[3], true);
                return ag::sum(r[0], {0}) * 0.5 + r[1] + r[2].to(r[0].dtype()) * 2.0;
              })
          .no_autocast(),
      sum_row("_lstm_layer", "one step, c_n only", {sy({1, N, 8}), sy({8, 2}), sy({N, 2}), sy({N, 2})},
              [](const V& v) { return ag::_lstm_layer(v[0], v[1], v[2], v[3])[2]; })
          .no_autocast(),

      // ---- unbind ------------------------------------------------------------------------------
      row("unbind", "dim 1, stacked back", {nrm({3, N})}, [](const V& v) { return ag::stack(ag::unbind(v[0], 1), 0); }),
      row("unbind", "one slice of three used", {nrm({3, N})}, [](const V& v) { return ag::unbind(v[0], 0)[1] * 2.0; }),
  };
}

}  // namespace op_table
