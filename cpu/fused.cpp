// Fast CPU optimizer steps and gradient checks (Note [Fused steps] in core/fused_kernels.h): the
// formulas of core/step_formulas.h, as the reference loops (optim/cpu_fused.cpp) and the CUDA
// kernels run them, with each tensor's dtype resolved at compile time, a 16-bit working copy
// written in the same pass, and every tensor's elements cut into chunks on the thread team
// (elements are independent, so results do not depend on the thread count, and equal the
// reference's bit for bit). Parameters and optimizer state in float32, gradients and working
// copies in float32, bfloat16 or float16; anything else runs the reference.
#include <atomic>
#include <cmath>
#include <type_traits>

#include <ampgrad/core/dispatch.h>
#include <ampgrad/core/fused_kernels.h>
#include <ampgrad/core/step_formulas.h>
#include <ampgrad/cpu/parallel.h>

namespace ampgrad::cpu {

namespace {

constexpr int64_t kGrain = 16384;

float read1(const Tensor& t) { return *static_cast<const float*>(t.data_ptr()); }
bool f32(const Tensor& t) { return !t.defined() || t.dtype() == kFloat32; }
bool f32_or_16(const Tensor& t) {
  return !t.defined() || t.dtype() == kFloat32 || t.dtype() == kBFloat16 || t.dtype() == kFloat16;
}

// Calls f(G{}, W{}) for a gradient dtype and a working-copy dtype (float for none: unused).
template <class F> void visit_gw(const Tensor& g, const Tensor& w, F&& f) {
  auto with_w = [&](auto gtag) {
    if (!w.defined() || w.dtype() == kFloat32) f(gtag, float{});
    else if (w.dtype() == kBFloat16) f(gtag, BFloat16{});
    else f(gtag, Half{});
  };
  if (g.dtype() == kFloat32) with_w(float{});
  else if (g.dtype() == kBFloat16) with_w(BFloat16{});
  else with_w(Half{});
}

// Whether every tensor of the step is one this file takes.
bool takes(const FusedStep& s, std::initializer_list<const std::vector<Tensor>*> state) {
  for (size_t k = 0; k < s.params.size(); ++k) {
    if (!f32(s.params[k]) || !f32_or_16(s.grads[k]) || !s.params[k].is_contiguous() || !s.grads[k].is_contiguous())
      return false;
    if (!s.working.empty() && !f32_or_16(s.working[k])) return false;
  }
  for (const std::vector<Tensor>* v : state)
    for (const Tensor& t : *v)
      if (!f32(t)) return false;
  return true;
}

// SgdHyper's fields for the common step, the flags constant (step_formulas::sgd_update).
struct PlainMomentum {
  double lr, momentum, dampening;
  static constexpr double weight_decay = 0;
  static constexpr bool nesterov = false, maximize = false;
};

// AdamHyper's fields for the common steps, amsgrad and maximize constant (step_formulas::adam_update).
template <bool kDecoupled> struct PlainAdam {
  double lr, beta1, beta2, eps, weight_decay;
  static constexpr bool decoupled_weight_decay = kDecoupled, amsgrad = false, maximize = false;
};

const Tensor& working_of(const FusedStep& s, size_t k) {
  static const Tensor none;
  return s.working.empty() ? none : s.working[k];
}

// found_inf from s's own gradients when the step checks them (the reference's check).
bool any_nonfinite(const std::vector<Tensor>& grads) {
  std::atomic<bool> bad{false};
  for (const Tensor& g : grads) {
    if (bad) break;
    visit_gw(g, Tensor(), [&](auto gtag, auto) {
      using G = decltype(gtag);
      const G* pg = static_cast<const G*>(g.data_ptr());
      parallel_for(g.numel(), kGrain, [&](int64_t b, int64_t e) {
        bool local = false;
        for (int64_t i = b; i < e; ++i) step_formulas::unscale(static_cast<float>(pg[i]), 1.0f, local);
        if (local) bad = true;
      });
    });
  }
  return bad;
}

template <class F> bool scaled_step(const FusedStep& s, F&& update) {
  if (s.check_grads && any_nonfinite(s.grads)) *static_cast<float*>(s.found_inf.data_ptr()) = 1.0f;
  if (!(s.found_inf.defined() && read1(s.found_inf) != 0.0f)) update();
  if (s.update) kernel::amp_update_scale(Device(kCPU), *s.update, s.found_inf);
  return true;
}

void sgd_step(const FusedStep& s, const std::vector<Tensor>& momentum_bufs, const std::vector<Tensor>& steps,
              const SgdHyper& h) {
  if (!takes(s, {&momentum_bufs}) || (s.check_grads && !s.update))
    return kernel::sgd_step.reference(s, momentum_bufs, steps, h);
  scaled_step(s, [&] {
    const float inv = s.inv_scale.defined() ? read1(s.inv_scale) : 1.0f;
    for (size_t k = 0; k < s.params.size(); ++k) {
      const Tensor& w = working_of(s, k);
      visit_gw(s.grads[k], w, [&](auto gtag, auto wtag) {
        using G = decltype(gtag);
        using W = decltype(wtag);
        float* pp = static_cast<float*>(s.params[k].data_ptr());
        const G* pg = static_cast<const G*>(s.grads[k].data_ptr());
        float* pb = h.momentum != 0 ? static_cast<float*>(momentum_bufs[k].data_ptr()) : nullptr;
        W* pw = w.defined() ? static_cast<W*>(w.data_ptr()) : nullptr;
        const bool first = read1(steps[k]) == 0.0f;
        const auto as_stored = [](float v) { return v; };  // float32 state: stored as computed
        // The common step (momentum past the first step, no weight decay, no Nesterov, not
        // maximizing): the same formula with those fields constant, a loop without branches or
        // aliasing, so it vectorizes.
        const bool common = pb && !first && h.weight_decay == 0 && !h.nesterov && !h.maximize;
        const PlainMomentum plain{h.lr, h.momentum, h.dampening};
        parallel_for(s.params[k].numel(), kGrain, [&](int64_t b, int64_t e) {
          if (common) {
            float* __restrict__ x = pp;
            float* __restrict__ buf = pb;
            const G* __restrict__ g = pg;
            for (int64_t i = b; i < e; ++i) {
              float bi = buf[i];
              x[i] = step_formulas::sgd_update(static_cast<float>(g[i]), x[i], bi, false, plain, inv, as_stored);
              buf[i] = bi;
            }
          } else {
            for (int64_t i = b; i < e; ++i) {
              float bi = pb ? pb[i] : 0.0f;
              const float xn = step_formulas::sgd_update(static_cast<float>(pg[i]), pp[i], bi, first, h, inv, as_stored);
              if (pb) pb[i] = bi;
              pp[i] = xn;
            }
          }
          if (pw) {
            W* __restrict__ w = pw;
            const float* __restrict__ x = pp;
            for (int64_t i = b; i < e; ++i) w[i] = static_cast<W>(x[i]);
          }
        });
      });
    }
    for (const Tensor& st : steps) *static_cast<float*>(st.data_ptr()) += 1.0f;
  });
}

void adam_step(const FusedStep& s, const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
               const std::vector<Tensor>& max_exp_avg_sqs, const std::vector<Tensor>& steps, const AdamHyper& h) {
  if (!takes(s, {&exp_avgs, &exp_avg_sqs, &max_exp_avg_sqs}) || (s.check_grads && !s.update))
    return kernel::adam_step.reference(s, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, h);
  scaled_step(s, [&] {
    const float inv = s.inv_scale.defined() ? read1(s.inv_scale) : 1.0f;
    for (size_t k = 0; k < s.params.size(); ++k) {
      const Tensor& w = working_of(s, k);
      const auto c = step_formulas::adam_corrections<float>(h, static_cast<int64_t>(read1(steps[k])) + 1);
      visit_gw(s.grads[k], w, [&](auto gtag, auto wtag) {
        using G = decltype(gtag);
        using W = decltype(wtag);
        float* pp = static_cast<float*>(s.params[k].data_ptr());
        const G* pg = static_cast<const G*>(s.grads[k].data_ptr());
        float* pm = static_cast<float*>(exp_avgs[k].data_ptr());
        float* pv = static_cast<float*>(exp_avg_sqs[k].data_ptr());
        float* px = h.amsgrad ? static_cast<float*>(max_exp_avg_sqs[k].data_ptr()) : nullptr;
        W* pw = w.defined() ? static_cast<W*>(w.data_ptr()) : nullptr;
        // Adam and AdamW without amsgrad, not maximizing: the same formula with those flags
        // constant, over restrict pointers, so the loop vectorizes.
        auto common = [&](auto plain, int64_t b, int64_t e) {
          float* __restrict__ x = pp;
          float* __restrict__ m = pm;
          float* __restrict__ v = pv;
          const G* __restrict__ g = pg;
          for (int64_t i = b; i < e; ++i) {
            float mi = m[i], vi = v[i], unused = 0.0f;
            x[i] = step_formulas::adam_update(static_cast<float>(g[i]), x[i], mi, vi, unused, plain, c, inv);
            m[i] = mi;
            v[i] = vi;
          }
        };
        parallel_for(s.params[k].numel(), kGrain, [&](int64_t b, int64_t e) {
          if (!h.amsgrad && !h.maximize && h.decoupled_weight_decay) {
            common(PlainAdam<true>{h.lr, h.beta1, h.beta2, h.eps, h.weight_decay}, b, e);
          } else if (!h.amsgrad && !h.maximize) {
            common(PlainAdam<false>{h.lr, h.beta1, h.beta2, h.eps, h.weight_decay}, b, e);
          } else {
            for (int64_t i = b; i < e; ++i) {
              float mi = pm[i], vi = pv[i], vmax = px ? px[i] : 0.0f;
              const float xn = step_formulas::adam_update(static_cast<float>(pg[i]), pp[i], mi, vi, vmax, h, c, inv);
              pm[i] = mi;
              pv[i] = vi;
              if (px) px[i] = vmax;
              pp[i] = xn;
            }
          }
          if (pw) {
            W* __restrict__ wo = pw;
            const float* __restrict__ x = pp;
            for (int64_t i = b; i < e; ++i) wo[i] = static_cast<W>(x[i]);
          }
        });
      });
    }
    for (const Tensor& st : steps) *static_cast<float*>(st.data_ptr()) += 1.0f;
  });
}

}  // namespace

AG_REGISTER_FAST_KERNEL(kernel::sgd_step, sgd_step);
AG_REGISTER_FAST_KERNEL(kernel::adam_step, adam_step);

}  // namespace ampgrad::cpu
