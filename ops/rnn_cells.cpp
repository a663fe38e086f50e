// The recurrent cells rnn_tanh_cell, rnn_relu_cell, lstm_cell and gru_cell, as PyTorch's, and
// their fused pointwise parts _fused_rnn_cell, _thnn_fused_lstm_cell and _thnn_fused_gru_cell.
#include <ampgrad/autograd/multi_output.h>
#include <ampgrad/autograd/node.h>
#include <ampgrad/core/kernels.h>
#include <ampgrad/ops/internal.h>
#include <ampgrad/ops/op_scope.h>
#include <ampgrad/ops/ops.h>
#include <ampgrad/ops/rnn_ops.h>

namespace ampgrad {

using amp::Category;
using autograd::Grads;
using Saved = std::vector<Tensor>;

// Note [Fused recurrent cells]
// A cell step is two GEMMs and a handful of pointwise ops on their sum: LSTM's four gates
// composed of ops were ~12 kernels forward and as many backward, each reading and writing
// [B, 4H]. As PyTorch's _thnn_fused_lstm_cell, the GEMMs (input @ w_ih^T, hx @ w_hh^T) run
// through linear (cuBLAS, float32 accumulation), and one kernel takes both pre-activations,
// the two biases and cx, and writes hy, cy and the activated gates (the workspace backward
// reads); backward is one kernel from grad_hy, grad_cy and the workspace to the gates'
// pre-activation gradient (one tensor for both GEMMs: their sum's gradient) and grad_cx. The
// biases' gradients are that tensor summed over the batch (Note [Grad shape and dtype]). The
// cell ops pass their biases to the linears instead (cuBLASLt's bias epilogues: no reduction
// kernels per step), and the sequence modules fold them into their one input GEMM for all
// steps. GRU's
// kernel keeps r, z, n and the hidden n part (gh_n + b_hn) and writes separate gradients for
// the input and hidden GEMMs (r scales the hidden n part); Elman cells save only hy. The cell
// ops are composed of linear and the fused op, so autocast acts once, at the cell. Kernels
// compute each unit in float (double for float64) and round on store; formulas are shared by
// both devices (core/rnn_formulas.h). lstm_cell's hy and cy come from one node (Note [Several
// outputs] in autograd/multi_output.h).
//
// Note [Cell state precision]
// Under float16 autocast the GEMMs and the gates run in float16, as PyTorch's lower-precision
// list says for lstm_cell. PyTorch casts cx too, so the cell state, a running sum over every
// step of the sequence (cy = f * cx + i * g), is rounded to 11 bits at each step, and small
// updates to a large state vanish. Here cx is not an argument the policy sees (it is left out
// of the OpScope): a float32 cx stays float32, the kernel reads it as is, and writes cy in
// cx's dtype, so the state keeps float32 through the sequence while hy (the next GEMM's input)
// is float16. The workspace is kept in cx's dtype too. A 16-bit cx of the other 16-bit dtype is
// cast with the rest, as PyTorch casts it (a float16 state under bfloat16 autocast gives
// bfloat16 hy and cy); outside autocast a cx of neither the gates' dtype nor float32 is refused.
// nn::LSTM and nn::LSTMCell start from a float32 state.

namespace {

const OpInfo kRnnTanhCell{"rnn_tanh_cell", Category::lower, true,
                          "as PyTorch's lower-precision list: two GEMMs on tensor cores, then a fused tanh"};
const OpInfo kRnnReluCell{"rnn_relu_cell", Category::lower, true,
                          "as PyTorch's lower-precision list: two GEMMs on tensor cores, then a fused relu"};
const OpInfo kLstmCell{"lstm_cell", Category::lower, true,
                       "as PyTorch's lower-precision list (GEMMs and gates in 16 bits), except that a float32 cx "
                       "is not cast: the cell state and cy stay float32 (Note [Cell state precision]); a 16-bit cx "
                       "is cast, as PyTorch's"};
const OpInfo kGruCell{"gru_cell", Category::lower, true,
                      "as PyTorch's lower-precision list: two GEMMs on tensor cores, then fused gates"};
const OpInfo kFusedRnn{"_fused_rnn_cell", Category::lower, true,
                       "the pointwise part of rnn_*_cell (PyTorch composes it of add and tanh), run in the "
                       "cell's dtype"};
const OpInfo kFusedLstm{"_thnn_fused_lstm_cell", Category::lower, true,
                        "as PyTorch's lower-precision list (lstm_cell's fused gates), except that a float32 cx is "
                        "not cast (Note [Cell state precision])"};
const OpInfo kFusedGru{"_thnn_fused_gru_cell", Category::lower, true,
                       "as PyTorch's lower-precision list: gru_cell's fused gates"};

// The fused ops' checks: gates [B, G * H] of one floating dtype, biases [G * H] or undefined.
void check_gates(const OpInfo& op, int64_t gates, const Tensor& gi, const Tensor& gh, const Tensor& bi,
                 const Tensor& bh) {
  check_defined(op, gi, "input_gates");
  check_defined(op, gh, "hidden_gates");
  check_same_device(op, gi, gh);
  AG_CHECK(is_floating(gi.dtype()) && gh.dtype() == gi.dtype(),
           "{}: expected input_gates and hidden_gates of one floating dtype, got {} and {}", op.name, gi.desc(),
           gh.desc());
  AG_CHECK(gi.dim() == 2 && gi.shape() == gh.shape() && gi.size(1) % gates == 0,
           "{}: input_gates {} and hidden_gates {} must both be [batch, {} * hidden_size]", op.name, gi.desc(),
           gh.desc(), gates);
  for (const Tensor* b : {&bi, &bh}) {
    if (!b->defined()) continue;
    check_same_device(op, gi, *b);
    AG_CHECK(b->dtype() == gi.dtype() && b->dim() == 1 && b->size(0) == gi.size(1),
             "{}: bias {} must be [{}] of the gates' dtype ({})", op.name, b->desc(), gi.size(1), gi.desc());
  }
}

Tensor contiguous_or_none(const Tensor& t) { return t.defined() ? contiguous(t) : t; }

}  // namespace

// ---- The fused pointwise parts ----------------------------------------------------------------

Tensor _fused_rnn_cell(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& input_bias,
                       const Tensor& hidden_bias, bool relu) {
  Tensor gi0 = input_gates, gh0 = hidden_gates, bi0 = input_bias, bh0 = hidden_bias;
  OpScope scope(kFusedRnn, gi0, gh0, bi0, bh0);
  check_gates(kFusedRnn, 1, gi0, gh0, bi0, bh0);
  const Tensor gi = contiguous(gi0), gh = contiguous(gh0), bi = contiguous_or_none(bi0), bh = contiguous_or_none(bh0);
  Tensor hy = empty_as(gi.shape(), gi.dtype(), gi);
  if (hy.numel()) kernel::rnn_cell_forward(hy.device(), relu, gi, gh, bi, bh, hy);
  if (autograd::any_requires_grad({&gi, &gh, &bi, &bh})) {
    autograd::record(kFusedRnn, hy, {gi, gh, bi, bh}, {hy}, [relu](const Tensor& g, const Saved& s) {
      Tensor gp = empty(s[0].shape(), s[0].options());
      if (gp.numel()) kernel::rnn_cell_backward(gp.device(), relu, contiguous(g), s[0], gp);
      return Grads{gp, gp, gp, gp};
    });
  }
  return scope.finish(hy);
}

namespace {
// Under autocast, a 16-bit cx of another dtype than the autocast one, cast as PyTorch casts it;
// a float32 cx as it is (Note [Cell state precision]).
Tensor autocast_cell_state(const OpScope& scope, const Tensor& cx) {
  const std::optional<DType> ac = scope.autocast_dtype();
  return ac && cx.defined() && is_reduced_float(cx.dtype()) && cx.dtype() != *ac ? cx.to(*ac) : cx;
}
}  // namespace

std::pair<Tensor, Tensor> _thnn_fused_lstm_cell(const Tensor& input_gates, const Tensor& hidden_gates,
                                                const Tensor& cx_in, const Tensor& input_bias,
                                                const Tensor& hidden_bias) {
  Tensor gi0 = input_gates, gh0 = hidden_gates, bi0 = input_bias, bh0 = hidden_bias;
  OpScope scope(kFusedLstm, gi0, gh0, bi0, bh0);  // cx apart: Note [Cell state precision]
  const Tensor cx0 = autocast_cell_state(scope, cx_in);
  check_gates(kFusedLstm, 4, gi0, gh0, bi0, bh0);
  check_defined(kFusedLstm, cx0, "cx");
  check_same_device(kFusedLstm, gi0, cx0);
  const int64_t batch = gi0.size(0), hidden = gi0.size(1) / 4;
  AG_CHECK(cx0.dim() == 2 && cx0.size(0) == batch && cx0.size(1) == hidden,
           "{}: cx {} must be [{}, {}] (batch, hidden_size) for gates {}", kFusedLstm.name, cx0.desc(), batch, hidden,
           gi0.desc());
  AG_CHECK(cx0.dtype() == gi0.dtype() || (cx0.dtype() == kFloat32 && is_reduced_float(gi0.dtype())),
           "{}: cx {} must have the gates' dtype ({}) or be float32 with 16-bit gates", kFusedLstm.name, cx0.desc(),
           dtype_name(gi0.dtype()));
  const Tensor gi = contiguous(gi0), gh = contiguous(gh0), bi = contiguous_or_none(bi0), bh = contiguous_or_none(bh0);
  const Tensor cx = contiguous(cx0);
  const bool grad = autograd::any_requires_grad({&gi, &gh, &bi, &bh, &cx});
  Tensor hy = empty_as({batch, hidden}, gi.dtype(), gi), cy = empty_as({batch, hidden}, cx.dtype(), gi);
  Tensor ws = grad ? empty_as(gi.shape(), cx.dtype(), gi) : Tensor();
  if (hy.numel()) kernel::lstm_cell_forward(hy.device(), gi, gh, bi, bh, cx, hy, cy, ws);
  if (grad) {
    const bool need_cx = cx.requires_grad();
    const DType gates_dtype = gi.dtype();
    autograd::record_outputs(kFusedLstm, {hy, cy}, {gi, gh, bi, bh, cx}, {cx, cy, ws},
                             [need_cx, gates_dtype](const std::vector<Tensor>& g, const Saved& s) {
                               const Tensor& cx = s[0];
                               Tensor gg = empty(s[2].shape(), s[2].options().dtype(gates_dtype));
                               Tensor gcx = need_cx ? empty(cx.shape(), cx.options()) : Tensor();
                               if (gg.numel())
                                 kernel::lstm_cell_backward(gg.device(), contiguous_or_none(g[0]), contiguous_or_none(g[1]),
                                                            cx, s[1], s[2], gg, gcx);
                               return Grads{gg, gg, gg, gg, gcx};
                             });
  }
  scope.finish(hy);
  return {hy, cy};
}

Tensor _thnn_fused_gru_cell(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& hx0,
                            const Tensor& input_bias, const Tensor& hidden_bias) {
  Tensor gi0 = input_gates, gh0 = hidden_gates, h0 = hx0, bi0 = input_bias, bh0 = hidden_bias;
  OpScope scope(kFusedGru, gi0, gh0, h0, bi0, bh0);
  check_gates(kFusedGru, 3, gi0, gh0, bi0, bh0);
  check_defined(kFusedGru, h0, "hx");
  check_same_device(kFusedGru, gi0, h0);
  const int64_t batch = gi0.size(0), hidden = gi0.size(1) / 3;
  AG_CHECK(h0.dim() == 2 && h0.size(0) == batch && h0.size(1) == hidden && h0.dtype() == gi0.dtype(),
           "{}: hx {} must be [{}, {}] (batch, hidden_size) of the gates' dtype for gates {}", kFusedGru.name,
           h0.desc(), batch, hidden, gi0.desc());
  const Tensor gi = contiguous(gi0), gh = contiguous(gh0), hx = contiguous(h0), bi = contiguous_or_none(bi0),
               bh = contiguous_or_none(bh0);
  const bool grad = autograd::any_requires_grad({&gi, &gh, &hx, &bi, &bh});
  Tensor hy = empty_as({batch, hidden}, gi.dtype(), gi);
  Tensor ws = grad ? empty_as({batch, 4 * hidden}, gi.dtype(), gi) : Tensor();
  if (hy.numel()) kernel::gru_cell_forward(hy.device(), gi, gh, bi, bh, hx, hy, ws);
  if (grad) {
    autograd::record(kFusedGru, hy, {gi, gh, hx, bi, bh}, {hx, ws}, [](const Tensor& g, const Saved& s) {
      const Tensor& hx = s[0];
      const Shape gates{hx.size(0), 3 * hx.size(1)};
      Tensor ggi = empty(gates, hx.options()), ggh = empty(gates, hx.options()), ghx = empty(hx.shape(), hx.options());
      if (ghx.numel()) kernel::gru_cell_backward(hx.device(), contiguous(g), hx, s[1], ggi, ggh, ghx);
      return Grads{ggi, ggh, ghx, ggi, ggh};
    });
  }
  return scope.finish(hy);
}

// ---- The cells ----------------------------------------------------------------------------

namespace {

// The checks every cell shares; `gates` rows of weight per hidden unit. Returns hidden_size.
int64_t check_cell(const OpInfo& op, int64_t gates, const Tensor& input, const Tensor& hx, const Tensor& w_ih,
                   const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh) {
  check_defined(op, input, "input");
  check_defined(op, hx, "hx");
  check_defined(op, w_ih, "weight_ih");
  check_defined(op, w_hh, "weight_hh");
  AG_CHECK(input.dim() == 1 || input.dim() == 2,
           "{}: expected input of 1 (input_size) or 2 (batch, input_size) dims, got {}", op.name, input.desc());
  AG_CHECK(w_hh.dim() == 2 && w_hh.size(0) == gates * w_hh.size(1),
           "{}: weight_hh {} must be [{} * hidden_size, hidden_size]", op.name, w_hh.desc(), gates);
  const int64_t hidden = w_hh.size(1);
  AG_CHECK(w_ih.dim() == 2 && w_ih.size(0) == gates * hidden,
           "{}: weight_ih {} must be [{}, input_size] ({} * hidden_size {}, as weight_hh {})", op.name, w_ih.desc(),
           gates * hidden, gates, hidden, w_hh.desc());
  AG_CHECK(input.size(-1) == w_ih.size(1), "{}: input {} has {} features, but weight_ih {} expects input_size {}",
           op.name, input.desc(), input.size(-1), w_ih.desc(), w_ih.size(1));
  const Shape want_h = input.dim() == 2 ? Shape{input.size(0), hidden} : Shape{hidden};
  AG_CHECK(hx.shape() == want_h, "{}: hx {} must be {} ({}hidden_size {}) for input {}", op.name, hx.desc(),
           shape_str(want_h), input.dim() == 2 ? "batch, " : "", hidden, input.desc());
  for (const Tensor* b : {&b_ih, &b_hh})
    AG_CHECK(!b->defined() || (b->dim() == 1 && b->size(0) == gates * hidden),
             "{}: bias {} must be [{}] ({} * hidden_size {})", op.name, b->desc(), gates * hidden, gates, hidden);
  for (const Tensor* t : {&hx, &w_ih, &w_hh, &b_ih, &b_hh})
    if (t->defined()) check_same_device(op, input, *t);
  bool one_dtype = is_floating(input.dtype());
  for (const Tensor* t : {&hx, &w_ih, &w_hh, &b_ih, &b_hh}) one_dtype = one_dtype && (!t->defined() || t->dtype() == input.dtype());
  AG_CHECK(one_dtype,
           "{}: input, hx, weights and biases must share one floating dtype; got input {}, hx {}, weight_ih {}, "
           "weight_hh {}, bias_ih {}, bias_hh {}",
           op.name, input.desc(), hx.desc(), w_ih.desc(), w_hh.desc(), b_ih.desc(), b_hh.desc());
  return hidden;
}

Tensor batch_of(const Tensor& t) { return t.dim() == 1 ? unsqueeze(t, 0) : t; }
Tensor unbatch(const Tensor& t, bool batched) { return batched ? t : squeeze(t, 0); }

Tensor elman_cell(const OpInfo& op, bool relu, const Tensor& input0, const Tensor& hx0, const Tensor& w_ih0,
                  const Tensor& w_hh0, const Tensor& b_ih0, const Tensor& b_hh0) {
  Tensor input = input0, hx = hx0, w_ih = w_ih0, w_hh = w_hh0, b_ih = b_ih0, b_hh = b_hh0;
  OpScope scope(op, input, hx, w_ih, w_hh, b_ih, b_hh);
  check_cell(op, 1, input, hx, w_ih, w_hh, b_ih, b_hh);
  const Tensor gi = linear(batch_of(input), w_ih, b_ih), gh = linear(batch_of(hx), w_hh, b_hh);  // as lstm_cell's
  return scope.finish(unbatch(_fused_rnn_cell(gi, gh, Tensor(), Tensor(), relu), input.dim() == 2));
}

}  // namespace

Tensor rnn_tanh_cell(const Tensor& input, const Tensor& hx, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                     const Tensor& b_hh) {
  return elman_cell(kRnnTanhCell, false, input, hx, w_ih, w_hh, b_ih, b_hh);
}

Tensor rnn_relu_cell(const Tensor& input, const Tensor& hx, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                     const Tensor& b_hh) {
  return elman_cell(kRnnReluCell, true, input, hx, w_ih, w_hh, b_ih, b_hh);
}

std::pair<Tensor, Tensor> lstm_cell(const Tensor& input0, const Tensor& hx0, const Tensor& cx0, const Tensor& w_ih0,
                                    const Tensor& w_hh0, const Tensor& b_ih0, const Tensor& b_hh0) {
  Tensor input = input0, hx = hx0, w_ih = w_ih0, w_hh = w_hh0, b_ih = b_ih0, b_hh = b_hh0;
  OpScope scope(kLstmCell, input, hx, w_ih, w_hh, b_ih, b_hh);  // cx apart: Note [Cell state precision]
  const Tensor cx = autocast_cell_state(scope, cx0);
  const int64_t hidden = check_cell(kLstmCell, 4, input, hx, w_ih, w_hh, b_ih, b_hh);
  check_defined(kLstmCell, cx, "cx");
  AG_CHECK(cx.shape() == hx.shape(), "lstm_cell: cx {} must be {} (hx's shape: {}hidden_size {}) for input {}",
           cx.desc(), shape_str(hx.shape()), input.dim() == 2 ? "batch, " : "", hidden, input.desc());
  check_same_device(kLstmCell, input, cx);
  AG_CHECK(cx.dtype() == input.dtype() || (cx.dtype() == kFloat32 && is_reduced_float(input.dtype())),
           "lstm_cell: cx {} must have the input's dtype ({}) or be float32 with a 16-bit input", cx.desc(),
           dtype_name(input.dtype()));
  // The biases ride in the GEMMs (cuBLASLt's bias epilogue forward, bias-gradient epilogue
  // backward): two reductions a step fewer than the fused op's bias gradients.
  const Tensor gi = linear(batch_of(input), w_ih, b_ih), gh = linear(batch_of(hx), w_hh, b_hh);
  auto [hy, cy] = _thnn_fused_lstm_cell(gi, gh, batch_of(cx));
  const bool batched = input.dim() == 2;
  scope.finish(hy);
  return {unbatch(hy, batched), unbatch(cy, batched)};
}

Tensor gru_cell(const Tensor& input0, const Tensor& hx0, const Tensor& w_ih0, const Tensor& w_hh0, const Tensor& b_ih0,
                const Tensor& b_hh0) {
  Tensor input = input0, hx = hx0, w_ih = w_ih0, w_hh = w_hh0, b_ih = b_ih0, b_hh = b_hh0;
  OpScope scope(kGruCell, input, hx, w_ih, w_hh, b_ih, b_hh);
  check_cell(kGruCell, 3, input, hx, w_ih, w_hh, b_ih, b_hh);
  const Tensor h = batch_of(hx);
  // The biases ride in the GEMMs, as lstm_cell's (r scales gh's n part, b_hn included).
  const Tensor gi = linear(batch_of(input), w_ih, b_ih), gh = linear(h, w_hh, b_hh);
  return scope.finish(unbatch(_thnn_fused_gru_cell(gi, gh, h), input.dim() == 2));
}

}  // namespace ampgrad
