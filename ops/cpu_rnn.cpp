// CPU reference kernels of the recurrent cells' fused pointwise parts (core/kernels.h,
// Note [Fused recurrent cells] in ops/rnn_cells.cpp): a loop over B rows and H units that
// evaluates core/rnn_formulas.h in each dtype's accumulation type, rounding on store.
#include <ampgrad/core/kernels.h>
#include <ampgrad/core/rnn_formulas.h>
#include <ampgrad/ops/cpu_values.h>

namespace ampgrad::cpu {

namespace {

// f(T{}, S{}): T the gates' element type, S the state's (T, or float for a float32 state of
// 16-bit gates).
template <class F> void visit_gates_and_state(const Tensor& gates, DType state, const char* what, F&& f) {
  visit_floating(gates, what, [&](auto tag) {
    using T = decltype(tag);
    if (state == gates.dtype()) {
      f(tag, tag);
    } else {
      AG_INTERNAL_ASSERT(state == kFloat32 && is_reduced_float(gates.dtype()), "{}: state {} for gates {}", what,
                         dtype_name(state), gates.desc());
      if constexpr (!std::is_same_v<acc_t<T>, T>) f(tag, float{});
    }
  });
}

template <class T> const T* data(const Tensor& t) { return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr; }
template <class T> T* out(const Tensor& t) { return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr; }
// Element k of an optional bias (0 when there is none) or of an optional gradient.
template <class T> acc_t<T> at(const T* p, int64_t k) { return p ? static_cast<acc_t<T>>(p[k]) : acc_t<T>(0); }
template <class T, class A> void put(T* p, int64_t k, A v) {
  if (p) p[k] = static_cast<T>(static_cast<acc_t<T>>(v));
}

}  // namespace

void rnn_cell_forward(bool relu, const Tensor& gi, const Tensor& gh, const Tensor& b_ih, const Tensor& b_hh,
                      const Tensor& hy) {
  const int64_t rows = hy.size(0), h = hy.size(1);
  visit_floating(gi, "rnn cell", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const T *pi = data<T>(gi), *ph = data<T>(gh), *bi = data<T>(b_ih), *bh = data<T>(b_hh);
    T* py = out<T>(hy);
    for (int64_t b = 0; b < rows; ++b)
      for (int64_t k = 0; k < h; ++k) {
        const A pre = at(pi, b * h + k) + at(bi, k) + at(ph, b * h + k) + at(bh, k);
        put(py, b * h + k, formulas::rnn_forward(relu, pre));
      }
  });
}

void rnn_cell_backward(bool relu, const Tensor& grad_hy, const Tensor& hy, const Tensor& grad_pre) {
  visit_floating(hy, "rnn cell backward", [&](auto tag) {
    using T = decltype(tag);
    const T *pg = data<T>(grad_hy), *py = data<T>(hy);
    T* po = out<T>(grad_pre);
    for (int64_t e = 0; e < hy.numel(); ++e) put(po, e, formulas::rnn_backward(relu, at(pg, e), at(py, e)));
  });
}

void lstm_cell_forward(const Tensor& gi, const Tensor& gh, const Tensor& b_ih, const Tensor& b_hh, const Tensor& cx,
                       const Tensor& hy, const Tensor& cy, const Tensor& ws) {
  const int64_t rows = hy.size(0), h = hy.size(1);
  visit_gates_and_state(gi, cx.dtype(), "lstm cell", [&](auto tt, auto ts) {
    using T = decltype(tt);
    using S = decltype(ts);
    using A = acc_t<T>;
    const T *pi = data<T>(gi), *ph = data<T>(gh), *bi = data<T>(b_ih), *bh = data<T>(b_hh);
    const S* pc = data<S>(cx);
    T* py = out<T>(hy);
    S *pcy = out<S>(cy), *pw = out<S>(ws);
    for (int64_t b = 0; b < rows; ++b)
      for (int64_t k = 0; k < h; ++k) {
        A pre[4];
        for (int q = 0; q < 4; ++q) {
          const int64_t j = q * h + k;
          pre[q] = at(pi, b * 4 * h + j) + at(bi, j) + at(ph, b * 4 * h + j) + at(bh, j);
        }
        const auto s = formulas::lstm_forward<A>(pre[0], pre[1], pre[2], pre[3], static_cast<A>(at(pc, b * h + k)));
        put(py, b * h + k, s.hy);
        put(pcy, b * h + k, s.cy);
        const A act[4] = {s.i, s.f, s.g, s.o};
        for (int q = 0; q < 4; ++q) put(pw, b * 4 * h + q * h + k, act[q]);
      }
  });
}

void lstm_cell_backward(const Tensor& grad_hy, const Tensor& grad_cy, const Tensor& cx, const Tensor& cy,
                        const Tensor& ws, const Tensor& grad_gates, const Tensor& grad_cx) {
  const int64_t rows = cx.size(0), h = cx.size(1);
  visit_gates_and_state(grad_gates, cx.dtype(), "lstm cell backward", [&](auto tt, auto ts) {
    using T = decltype(tt);
    using S = decltype(ts);
    using A = acc_t<T>;
    const T* pgh = data<T>(grad_hy);
    const S *pgc = data<S>(grad_cy), *pc = data<S>(cx), *pcy = data<S>(cy), *pw = data<S>(ws);
    T* pg = out<T>(grad_gates);
    S* pgx = out<S>(grad_cx);
    for (int64_t b = 0; b < rows; ++b)
      for (int64_t k = 0; k < h; ++k) {
        const int64_t e = b * h + k, w = b * 4 * h + k;
        auto act = [&](int q) { return static_cast<A>(at(pw, w + q * h)); };
        const auto r = formulas::lstm_backward<A>(at(pgh, e), static_cast<A>(at(pgc, e)), act(0), act(1), act(2),
                                                  act(3), static_cast<A>(at(pc, e)), static_cast<A>(at(pcy, e)));
        put(pg, w, r.gi);
        put(pg, w + h, r.gf);
        put(pg, w + 2 * h, r.gg);
        put(pg, w + 3 * h, r.go);
        put(pgx, e, r.gcx);
      }
  });
}

void gru_cell_forward(const Tensor& gi, const Tensor& gh, const Tensor& b_ih, const Tensor& b_hh, const Tensor& hx,
                      const Tensor& hy, const Tensor& ws) {
  const int64_t rows = hy.size(0), h = hy.size(1);
  visit_floating(gi, "gru cell", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const T *pi = data<T>(gi), *ph = data<T>(gh), *bi = data<T>(b_ih), *bh = data<T>(b_hh), *px = data<T>(hx);
    T *py = out<T>(hy), *pw = out<T>(ws);
    for (int64_t b = 0; b < rows; ++b)
      for (int64_t k = 0; k < h; ++k) {
        auto in = [&](int q) { return at(pi, b * 3 * h + q * h + k) + at(bi, q * h + k); };
        auto hid = [&](int q) { return at(ph, b * 3 * h + q * h + k) + at(bh, q * h + k); };
        const auto s = formulas::gru_forward<A>(in(0), in(1), in(2), hid(0), hid(1), hid(2), at(px, b * h + k));
        put(py, b * h + k, s.hy);
        const A keep[4] = {s.r, s.z, s.n, hid(2)};
        for (int q = 0; q < 4; ++q) put(pw, b * 4 * h + q * h + k, keep[q]);
      }
  });
}

void gru_cell_backward(const Tensor& grad_hy, const Tensor& hx, const Tensor& ws, const Tensor& grad_gi,
                       const Tensor& grad_gh, const Tensor& grad_hx) {
  const int64_t rows = hx.size(0), h = hx.size(1);
  visit_floating(hx, "gru cell backward", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const T *pg = data<T>(grad_hy), *px = data<T>(hx), *pw = data<T>(ws);
    T *gi = out<T>(grad_gi), *gh = out<T>(grad_gh), *gx = out<T>(grad_hx);
    for (int64_t b = 0; b < rows; ++b)
      for (int64_t k = 0; k < h; ++k) {
        const int64_t e = b * h + k, w = b * 4 * h + k, g3 = b * 3 * h + k;
        const auto r = formulas::gru_backward<A>(at(pg, e), at(pw, w), at(pw, w + h), at(pw, w + 2 * h),
                                                 at(pw, w + 3 * h), at(px, e));
        put(gi, g3, r.gir);
        put(gi, g3 + h, r.giz);
        put(gi, g3 + 2 * h, r.gin);
        put(gh, g3, r.gir);
        put(gh, g3 + h, r.giz);
        put(gh, g3 + 2 * h, r.ghn);
        put(gx, e, r.ghx);
      }
  });
}

AG_REGISTER_KERNEL(kernel::rnn_cell_forward, kCPU, rnn_cell_forward);
AG_REGISTER_KERNEL(kernel::rnn_cell_backward, kCPU, rnn_cell_backward);
AG_REGISTER_KERNEL(kernel::lstm_cell_forward, kCPU, lstm_cell_forward);
AG_REGISTER_KERNEL(kernel::lstm_cell_backward, kCPU, lstm_cell_backward);
AG_REGISTER_KERNEL(kernel::gru_cell_forward, kCPU, gru_cell_forward);
AG_REGISTER_KERNEL(kernel::gru_cell_backward, kCPU, gru_cell_backward);

}  // namespace ampgrad::cpu
