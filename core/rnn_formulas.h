// The recurrent cells' pointwise formulas for one hidden unit, forward beside backward, that
// the CPU reference (ops/cpu_rnn.cpp) and the CUDA kernels (cuda/rnn.cu) both evaluate, in
// float for 16-bit values (double for float64), as PyTorch's fused cells do.
#pragma once

#include <ampgrad/core/kernel_kinds.h>

namespace ampgrad::formulas {

// LSTM: the four pre-activations (gi + b_ih + gh + b_hh per gate) and the old cell state.
template <class A> struct LstmStep {
  A i, f, g, o;  // activated gates
  A cy, hy;
};
template <class A> AG_HOST_DEVICE inline LstmStep<A> lstm_forward(A pi, A pf, A pg, A po, A cx) {
  LstmStep<A> s;
  s.i = math::sigmoid(pi);
  s.f = math::sigmoid(pf);
  s.g = math::tanh(pg);
  s.o = math::sigmoid(po);
  s.cy = s.f * cx + s.i * s.g;
  s.hy = s.o * math::tanh(s.cy);
  return s;
}
// The gates' pre-activation gradients and grad_cx, from the activated gates, cx and the cy
// that was stored (its tanh recomputed, as PyTorch's _thnn_fused_lstm_cell_backward).
template <class A> struct LstmGrads {
  A gi, gf, gg, go, gcx;
};
template <class A>
AG_HOST_DEVICE inline LstmGrads<A> lstm_backward(A ghy, A gcy, A i, A f, A g, A o, A cx, A cy) {
  const A tc = math::tanh(cy);
  const A gc = ghy * o * (A(1) - tc * tc) + gcy;  // the whole gradient of cy
  LstmGrads<A> r;
  r.gi = gc * g * i * (A(1) - i);
  r.gf = gc * cx * f * (A(1) - f);
  r.gg = gc * i * (A(1) - g * g);
  r.go = ghy * tc * o * (A(1) - o);
  r.gcx = gc * f;
  return r;
}

// GRU: r = sigmoid(i_r + h_r), z = sigmoid(i_z + h_z), n = tanh(i_n + r * h_n), with the
// biases inside each term (h_n = gh_n + b_hn), hy = (1 - z) n + z hx.
template <class A> struct GruStep {
  A r, z, n, hy;
};
template <class A> AG_HOST_DEVICE inline GruStep<A> gru_forward(A ir, A iz, A in, A hr, A hz, A hn, A hx) {
  GruStep<A> s;
  s.r = math::sigmoid(ir + hr);
  s.z = math::sigmoid(iz + hz);
  s.n = math::tanh(in + s.r * hn);
  s.hy = s.n + s.z * (hx - s.n);
  return s;
}
template <class A> struct GruGrads {
  A gir, giz, gin, ghn, ghx;  // gh's r and z gradients are gir and giz
};
template <class A> AG_HOST_DEVICE inline GruGrads<A> gru_backward(A ghy, A r, A z, A n, A hn, A hx) {
  GruGrads<A> g;
  g.gin = ghy * (A(1) - z) * (A(1) - n * n);
  g.giz = ghy * (hx - n) * z * (A(1) - z);
  g.gir = g.gin * hn * r * (A(1) - r);
  g.ghn = g.gin * r;
  g.ghx = ghy * z;
  return g;
}

// Elman cells: tanh or relu of the summed pre-activation, and its gradient from the output.
// The relu is relu's (Relu in core/elementwise_kinds.def): a NaN stays, and its gradient passes.
template <class A> AG_HOST_DEVICE inline A rnn_forward(bool relu, A pre) {
  return relu ? (pre <= A(0) ? A(0) : pre) : math::tanh(pre);
}
template <class A> AG_HOST_DEVICE inline A rnn_backward(bool relu, A ghy, A hy) {
  return relu ? (hy <= A(0) ? A(0) : ghy) : ghy * (A(1) - hy * hy);
}

}  // namespace ampgrad::formulas
