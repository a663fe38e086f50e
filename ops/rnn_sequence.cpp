// _lstm_layer: one direction of one LSTM layer over a whole sequence, the time loop of
// nn::LSTM as one op with one backward node (Note [LSTM layer]).
#include <ampgrad/autograd/multi_output.h>
#include <ampgrad/autograd/node.h>
#include <ampgrad/core/kernels.h>
#include <ampgrad/ops/internal.h>
#include <ampgrad/ops/op_scope.h>
#include <ampgrad/ops/ops.h>
#include <ampgrad/ops/rnn_ops.h>

namespace ampgrad {

using autograd::Grads;
using Saved = std::vector<Tensor>;

// Note [LSTM layer]
// Recorded step by step (a GEMM and _thnn_fused_lstm_cell per step), a 2-layer LSTM of 64
// steps was ~2000 nodes and ~6 kernels per step backward: the step ran at the host's pace
// (12 ms eager on the H200 for the char model, PyTorch's cuDNN LSTM 9 ms). As one op the
// forward is, per step, the hidden GEMM (h @ w_hh^T) and the fused cell kernel writing hy into
// the output's row t, cy and the activated gates into buffers [T, B, H] and [T, B, 4H]. The
// backward walks the steps in reverse: the fused cell backward (the gates' pre-activation
// gradient into row t of one [T, B, 4H] tensor, and the cell state's gradient), then
// dh = grad_y[t'] + dgates[t] @ w_hh as one GEMM with its addend (cuBLASLt's C). What does not
// depend on the recurrence comes after the loop, as one GEMM each: w_hh's gradient over all
// steps (dgates as [T B, 4H] against the previous hidden states), and the input projections'
// gradient is dgates itself (its GEMM, and the biases' sum, belong to the linear that made
// them). Per step: two kernels forward, two backward. The cell state keeps c0's dtype (float32
// under autocast: Note [Cell state precision]); c0 is not cast.

namespace {

const OpInfo kLstmLayer{"_lstm_layer", amp::Category::lower, true,
                        "nn::LSTM's time loop for one layer and direction, as PyTorch's _cudnn_rnn (its "
                        "lower-precision list): hidden GEMMs and gates in 16 bits, the cell state in c0's dtype "
                        "(float32 under autocast: Note [Cell state precision])"};

}  // namespace

std::vector<Tensor> _lstm_layer(const Tensor& input_gates, const Tensor& w_hh, const Tensor& h0, const Tensor& c0,
                                bool reverse) {
  Tensor gates0 = input_gates, w0 = w_hh, hx0 = h0;
  OpScope scope(kLstmLayer, gates0, w0, hx0);  // c0 is not cast: Note [Cell state precision]
  check_defined(kLstmLayer, gates0, "input_gates");
  check_defined(kLstmLayer, w0, "w_hh");
  check_defined(kLstmLayer, hx0, "h0");
  check_defined(kLstmLayer, c0, "c0");
  for (const Tensor* t : std::initializer_list<const Tensor*>{&w0, &hx0, &c0}) check_same_device(kLstmLayer, gates0, *t);
  AG_CHECK(gates0.dim() == 3 && gates0.size(2) % 4 == 0 && gates0.size(0) > 0,
           "_lstm_layer: input_gates {} must be [seq > 0, batch, 4 * hidden_size]", gates0.desc());
  const int64_t steps = gates0.size(0), batch = gates0.size(1), hidden = gates0.size(2) / 4;
  AG_CHECK(is_floating(gates0.dtype()) && w0.dtype() == gates0.dtype() && hx0.dtype() == gates0.dtype(),
           "_lstm_layer: input_gates {}, w_hh {} and h0 {} must share a floating dtype", gates0.desc(), w0.desc(),
           hx0.desc());
  AG_CHECK(w0.dim() == 2 && w0.size(0) == 4 * hidden && w0.size(1) == hidden,
           "_lstm_layer: w_hh {} must be [{}, {}] for input_gates {}", w0.desc(), 4 * hidden, hidden, gates0.desc());
  const Shape state{batch, hidden};
  AG_CHECK(hx0.shape() == state && c0.shape() == state, "_lstm_layer: h0 {} and c0 {} must be {}", hx0.desc(),
           c0.desc(), shape_str(state));
  AG_CHECK(c0.dtype() == gates0.dtype() || (c0.dtype() == kFloat32 && is_reduced_float(gates0.dtype())),
           "_lstm_layer: c0 {} must have the gates' dtype ({}) or be float32 with 16-bit gates", c0.desc(),
           dtype_name(gates0.dtype()));
  const Tensor gates = contiguous(gates0), w = contiguous(w0), hx = contiguous(hx0), cx = contiguous(c0);
  const bool grad = autograd::any_requires_grad({&gates, &w, &hx, &cx});
  const TensorOptions state_opts = cx.options();
  Tensor y = empty({steps, batch, hidden}, gates.options());
  Tensor cs = empty({steps, batch, hidden}, state_opts);
  Tensor ws = grad ? empty({steps, batch, 4 * hidden}, state_opts) : Tensor();
  auto at = [steps, reverse](int64_t s) { return reverse ? steps - 1 - s : s; };  // the time of step s
  if (y.numel()) {
    NoGradGuard no_grad;
    const Tensor wt = w.t().unsqueeze(0);  // [1, H, 4H]: the kernels' batch of one
    const Tensor gh = empty({1, batch, 4 * hidden}, gates.options());  // reused by every step
    Tensor h = hx, c = cx;
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t t = at(s);
      const Tensor yt = y.select(0, t), ct = cs.select(0, t);
      kernel::gemm(y.device(), h.unsqueeze(0), wt, gh, 1.0, 0.0);
      kernel::lstm_cell_forward(y.device(), gates.select(0, t), gh.select(0, 0), Tensor(), Tensor(), c, yt, ct,
                                grad ? ws.select(0, t) : Tensor());
      h = yt;
      c = ct;
    }
  }
  const Tensor h_n = y.select(0, at(steps - 1)), c_n = cs.select(0, at(steps - 1));
  if (grad) {
    const bool need_c0 = cx.requires_grad(), need_h0 = hx.requires_grad();
    autograd::record_outputs(
        kLstmLayer, {y, h_n, c_n}, {gates, w, hx, cx}, {w, hx, cx, y, cs, ws},
        [steps, reverse, at, need_c0, need_h0](const std::vector<Tensor>& g, const Saved& s) {
          const Tensor &w = s[0], &hx = s[1], &cx = s[2], &y = s[3], &cs = s[4], &ws = s[5];
          const Device dev = y.device();
          Tensor dgates = empty(ws.shape(), y.options());
          // dy[t] becomes the hidden state's whole gradient at time t: the output's gradient,
          // plus (one GEMM into it, beta 1) what the recurrence carries back from the next step.
          Tensor dy = g[0].defined() ? empty(y.shape(), y.options()) : zeros(y.shape(), y.options());
          if (g[0].defined()) kernel::copy(dev, dy, g[0]);  // one copy, from any strides
          if (g[1].defined()) {
            const Tensor last = dy.select(0, at(steps - 1));
            kernel::binary(dev, BinaryKind::Add, last, g[1].to(y.dtype()), last);
          }
          Tensor dc = g[2].defined() ? contiguous(g[2]) : Tensor();
          // Two buffers for the cell state's gradient, by turns (the kernel reads one, writes the other).
          const Tensor dc_buf[2] = {empty(cx.shape(), cx.options()), empty(cx.shape(), cx.options())};
          const Tensor wk = w.unsqueeze(0);  // [1, 4H, H]
          Tensor dh0 = need_h0 ? empty({1, y.size(1), y.size(2)}, y.options()) : Tensor();
          for (int64_t st = steps - 1; st >= 0; --st) {
            const int64_t t = at(st);
            const Tensor c_prev = st == 0 ? cx : cs.select(0, at(st - 1));
            const Tensor dc_prev = st > 0 || need_c0 ? dc_buf[st % 2] : Tensor();
            const Tensor dg = dgates.select(0, t);
            if (dg.numel())
              kernel::lstm_cell_backward(dev, dy.select(0, t), dc, c_prev, cs.select(0, t), ws.select(0, t), dg, dc_prev);
            const Tensor into = st > 0 ? dy.select(0, at(st - 1)).unsqueeze(0) : dh0;
            if (into.defined() && into.numel()) kernel::gemm(dev, dg.unsqueeze(0), wk, into, 1.0, st > 0 ? 1.0 : 0.0);
            dc = dc_prev;
          }
          Tensor dh = need_h0 ? dh0.select(0, 0) : Tensor();
          // The hidden states each step read: h0, then the outputs in the order of the steps.
          const int64_t b = y.size(1), h = y.size(2);
          Tensor h_prev = steps == 1 ? hx.unsqueeze(0)
                          : reverse  ? cat({y.narrow(0, 1, steps - 1), hx.unsqueeze(0)}, 0)
                                     : cat({hx.unsqueeze(0), y.narrow(0, 0, steps - 1)}, 0);
          const Tensor gw = mm(dgates.reshape({steps * b, 4 * h}).t(), h_prev.reshape({steps * b, h}));
          return Grads{dgates, gw, dh, dc};
        });
  }
  scope.finish(y);
  return {y, h_n, c_n};
}

}  // namespace ampgrad
