// CPU reference versions of the loss-scaler and optimizer kernels (Note [Fused steps]): plain
// loops over the formulas of core/step_formulas.h.
#include <cstring>
#include <type_traits>

#include <ampgrad/core/fused_kernels.h>
#include <ampgrad/core/step_formulas.h>

namespace ampgrad::cpu {

namespace {

using step_formulas::ScaleState;

float read1(const Tensor& t) { return *static_cast<const float*>(t.data_ptr()); }
bool skipped(const FusedStep& s) { return s.found_inf.defined() && read1(s.found_inf) != 0.0f; }

// The elements of a contiguous floating tensor, loaded as A and stored from A (rounded once to
// the tensor's dtype). The dtype is resolved once per tensor, not per element.
template <class A> struct Elems {
  void* p = nullptr;
  A (*load)(const void*, int64_t) = nullptr;
  void (*store)(void*, int64_t, A) = nullptr;
  explicit operator bool() const { return p != nullptr; }
  A operator[](int64_t i) const { return load(p, i); }
  void put(int64_t i, A v) const { store(p, i, v); }
  // Stores v and returns it as stored.
  A keep(int64_t i, A v) const {
    store(p, i, v);
    return load(p, i);
  }
};
template <class A, class T> A load_as(const void* p, int64_t i) { return static_cast<A>(static_cast<const T*>(p)[i]); }
template <class A, class T> void store_as(void* p, int64_t i, A v) { static_cast<T*>(p)[i] = static_cast<T>(v); }

// Undefined: no elements (the Elems is false).
template <class A> Elems<A> elems(const Tensor& t) {
  Elems<A> e;
  if (!t.defined()) return e;
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Half> ||
                  std::is_same_v<T, BFloat16>) {
      e = {t.data_ptr(), &load_as<A, T>, &store_as<A, T>};
    } else {
      AG_INTERNAL_ASSERT(false, "fused kernel on a non-floating tensor {}", t.desc());
    }
  });
  return e;
}

// Calls f(A{}) with A the type a tensor of `dtype` computes in (Note [Step formulas]).
template <class F> void with_math_type(DType dtype, F&& f) {
  if (dtype == kFloat64) f(double{});
  else f(float{});
}

const Tensor& working_of(const FusedStep& s, size_t k) {
  static const Tensor none;
  return s.working.empty() ? none : s.working[k];
}

void advance_steps(const std::vector<Tensor>& steps) {
  for (const Tensor& st : steps) *static_cast<float*>(st.data_ptr()) += 1.0f;
}

}  // namespace

void zero_tensors(const std::vector<Tensor>& ts) {
  for (const Tensor& t : ts) std::memset(t.data_ptr(), 0, t.nbytes());
}

void amp_check_and_unscale(const std::vector<Tensor>& grads, const Tensor& found_inf, const Tensor& inv_scale,
                           bool write_back) {
  bool found = false;
  for (const Tensor& g : grads) {
    with_math_type(g.dtype(), [&](auto a) {
      using A = decltype(a);
      const A inv = write_back ? static_cast<A>(read1(inv_scale)) : A(1);
      const Elems<A> e = elems<A>(g);
      for (int64_t i = 0, n = g.numel(); i < n; ++i) {
        const A v = step_formulas::unscale(e[i], inv, found);
        if (write_back) e.put(i, v);
      }
    });
  }
  if (found) *static_cast<float*>(found_inf.data_ptr()) = 1.0f;
}

void amp_update_scale(const ScaleUpdate& u, const Tensor& found_inf) {
  float& scale = *static_cast<float*>(u.scale.data_ptr());
  int32_t& growth = *static_cast<int32_t*>(u.growth_tracker.data_ptr());
  int32_t& hysteresis = *static_cast<int32_t*>(u.hysteresis_left.data_ptr());
  const float found = read1(found_inf);
  *static_cast<float*>(u.rec.last_scale.data_ptr()) = scale;
  *static_cast<float*>(u.rec.last_found.data_ptr()) = found;
  if (u.rec.clear_found) *static_cast<float*>(found_inf.data_ptr()) = 0.0f;
  const ScaleState next = step_formulas::next_scale_state({scale, growth, hysteresis}, found != 0.0f, u.rule);
  scale = next.scale;
  growth = next.growth_tracker;
  hysteresis = next.hysteresis_left;
  *static_cast<float*>(u.rec.inv_scale.data_ptr()) = 1.0f / scale;
}

namespace {
// A fused step as FusedStep describes: the check, the (gated) update, the scale update.
template <class F> void scaled_step(const FusedStep& s, F&& update) {
  AG_INTERNAL_ASSERT(!s.check_grads || s.update, "a fused step checks its gradients only with a scale update");
  if (s.check_grads) amp_check_and_unscale(s.grads, s.found_inf, Tensor(), /*write_back=*/false);
  if (!skipped(s)) update();
  if (s.update) amp_update_scale(*s.update, s.found_inf);
}
}  // namespace

void sgd_step(const FusedStep& s, const std::vector<Tensor>& momentum_bufs, const std::vector<Tensor>& steps,
              const SgdHyper& h) {
  scaled_step(s, [&] {
    for (size_t k = 0; k < s.params.size(); ++k) {
      with_math_type(s.params[k].dtype(), [&](auto a) {
        using A = decltype(a);
        const Elems<A> x = elems<A>(s.params[k]), g = elems<A>(s.grads[k]), w = elems<A>(working_of(s, k));
        const Elems<A> b = h.momentum != 0 ? elems<A>(momentum_bufs[k]) : Elems<A>{};
        const A inv = s.inv_scale.defined() ? static_cast<A>(read1(s.inv_scale)) : A(1);
        const bool first = read1(steps[k]) == 0.0f;
        for (int64_t i = 0; i < s.params[k].numel(); ++i) {
          A bi = b ? b[i] : A(0);
          x.put(i, step_formulas::sgd_update(g[i], x[i], bi, first, h, inv, [&](A v) { return b.keep(i, v); }));
          if (w) w.put(i, x[i]);
        }
      });
    }
    advance_steps(steps);
  });
}

void adam_step(const FusedStep& s, const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
               const std::vector<Tensor>& max_exp_avg_sqs, const std::vector<Tensor>& steps, const AdamHyper& h) {
  scaled_step(s, [&] {
    for (size_t k = 0; k < s.params.size(); ++k) {
      with_math_type(s.params[k].dtype(), [&](auto a) {
        using A = decltype(a);
        const Elems<A> x = elems<A>(s.params[k]), g = elems<A>(s.grads[k]), w = elems<A>(working_of(s, k));
        const Elems<A> m = elems<A>(exp_avgs[k]), v = elems<A>(exp_avg_sqs[k]);
        const Elems<A> vmax = h.amsgrad ? elems<A>(max_exp_avg_sqs[k]) : Elems<A>{};
        const A inv = s.inv_scale.defined() ? static_cast<A>(read1(s.inv_scale)) : A(1);
        const auto c = step_formulas::adam_corrections<A>(h, static_cast<int64_t>(read1(steps[k])) + 1);
        for (int64_t i = 0; i < s.params[k].numel(); ++i) {
          A mi = m[i], vi = v[i], vmaxi = vmax ? vmax[i] : A(0);
          const A xn = step_formulas::adam_update(g[i], x[i], mi, vi, vmaxi, h, c, inv);
          m.put(i, mi);
          v.put(i, vi);
          if (vmax) vmax.put(i, vmaxi);
          x.put(i, xn);
          if (w) w.put(i, x[i]);
        }
      });
    }
    advance_steps(steps);
  });
}

AG_REGISTER_KERNEL(kernel::zero_tensors, kCPU, zero_tensors);
AG_REGISTER_KERNEL(kernel::amp_check_and_unscale, kCPU, amp_check_and_unscale);
AG_REGISTER_KERNEL(kernel::amp_update_scale, kCPU, amp_update_scale);
AG_REGISTER_KERNEL(kernel::sgd_step, kCPU, sgd_step);
AG_REGISTER_KERNEL(kernel::adam_step, kCPU, adam_step);

}  // namespace ampgrad::cpu
