// CPU reference versions of the loss-scaler and optimizer kernels (Note [Fused steps]).
#include <cstring>
#include <cmath>
#include <type_traits>

#include <ampgrad/core/fused_kernels.h>

namespace ampgrad::cpu {

namespace {

float read1(const Tensor& t) { return *static_cast<const float*>(t.data_ptr()); }
bool skipped(const FusedStep& s) { return s.found_inf.defined() && read1(s.found_inf) != 0.0f; }
double inv_scale_of(const FusedStep& s) { return s.inv_scale.defined() ? read1(s.inv_scale) : 1.0; }

// Calls f(T*) with the typed data pointer of a contiguous floating tensor.
template <class F> void with_floating(const Tensor& t, F&& f) {
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Half> ||
                  std::is_same_v<T, BFloat16>) {
      f(static_cast<T*>(t.data_ptr()));
    } else {
      AG_INTERNAL_ASSERT(false, "fused kernel on a non-floating tensor {}", t.desc());
    }
  });
}

// Element i of a contiguous floating tensor, as double.
double get(const Tensor& t, int64_t i) {
  double v = 0;
  with_floating(t, [&](auto* p) { v = static_cast<double>(p[i]); });
  return v;
}
void set(const Tensor& t, int64_t i, double v) {
  with_floating(t, [&](auto* p) {
    using T = std::remove_pointer_t<decltype(p)>;
    if constexpr (std::is_same_v<T, double>) p[i] = v;
    else p[i] = T(static_cast<float>(v));
  });
}

void advance_steps(const std::vector<Tensor>& steps) {
  for (const Tensor& st : steps) *static_cast<float*>(st.data_ptr()) += 1.0f;
}

void write_working(const FusedStep& s, size_t k) {
  if (s.working.empty() || !s.working[k].defined()) return;
  const Tensor& w = s.working[k];
  for (int64_t i = 0; i < w.numel(); ++i) set(w, i, get(s.params[k], i));
}

}  // namespace

void zero_tensors(const std::vector<Tensor>& ts) {
  for (const Tensor& t : ts) std::memset(t.data_ptr(), 0, t.nbytes());
}

void amp_check_and_unscale(const std::vector<Tensor>& grads, const Tensor& found_inf, const Tensor& inv_scale,
                           bool write_back) {
  const double inv = write_back ? read1(inv_scale) : 1.0;
  bool bad = false;
  for (const Tensor& g : grads) {
    for (int64_t i = 0; i < g.numel(); ++i) {
      double v = get(g, i);
      if (!std::isfinite(v)) bad = true;
      if (write_back) set(g, i, v * inv);
    }
  }
  if (bad) *static_cast<float*>(found_inf.data_ptr()) = 1.0f;
}

void amp_update_scale(const ScaleUpdate& u, const Tensor& found_inf) {
  const ScaleRule& r = u.rule;
  const ScaleRecord& rec = u.rec;
  float& sc = *static_cast<float*>(u.scale.data_ptr());
  int32_t& growth = *static_cast<int32_t*>(u.growth_tracker.data_ptr());
  int32_t& hyst = *static_cast<int32_t*>(u.hysteresis_left.data_ptr());
  const float found = read1(found_inf);
  *static_cast<float*>(rec.last_scale.data_ptr()) = sc;
  *static_cast<float*>(rec.last_found.data_ptr()) = found;
  if (rec.last_inv_scale.defined()) *static_cast<float*>(rec.last_inv_scale.data_ptr()) = read1(rec.inv_scale);
  if (rec.last_growth.defined()) *static_cast<int32_t*>(rec.last_growth.data_ptr()) = growth;
  if (rec.last_hysteresis.defined()) *static_cast<int32_t*>(rec.last_hysteresis.data_ptr()) = hyst;
  if (rec.clear_found) *static_cast<float*>(found_inf.data_ptr()) = 0.0f;
  if (found != 0.0f) {
    growth = 0;
    if (--hyst <= 0) {
      sc = static_cast<float>(std::max(static_cast<double>(sc) * r.backoff_factor, r.min_scale));
      hyst = static_cast<int32_t>(r.hysteresis);
    }
  } else if (++growth >= r.growth_interval) {
    const double grown = static_cast<double>(sc) * r.growth_factor;
    // As PyTorch: never grow into inf.
    if (std::isfinite(static_cast<float>(grown))) sc = static_cast<float>(std::min(grown, r.max_scale));
    growth = 0;
    hyst = static_cast<int32_t>(r.hysteresis);
  }
  *static_cast<float*>(rec.inv_scale.data_ptr()) = 1.0f / sc;
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
    const double inv = inv_scale_of(s);
    for (size_t k = 0; k < s.params.size(); ++k) {
      const Tensor& p = s.params[k];
      const bool first = read1(steps[k]) == 0.0f;
      for (int64_t i = 0; i < p.numel(); ++i) {
        double g = get(s.grads[k], i) * inv;
        if (h.maximize) g = -g;
        const double x = get(p, i);
        if (h.weight_decay != 0) g += h.weight_decay * x;
        if (h.momentum != 0) {
          double b = first ? g : h.momentum * get(momentum_bufs[k], i) + (1 - h.dampening) * g;
          set(momentum_bufs[k], i, b);
          b = get(momentum_bufs[k], i);  // as stored
          g = h.nesterov ? g + h.momentum * b : b;
        }
        set(p, i, x - h.lr * g);
      }
      write_working(s, k);
    }
    advance_steps(steps);
  });
}

void adam_step(const FusedStep& s, const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
               const std::vector<Tensor>& max_exp_avg_sqs, const std::vector<Tensor>& steps, const AdamHyper& h) {
  scaled_step(s, [&] {
    const double inv = inv_scale_of(s);
    for (size_t k = 0; k < s.params.size(); ++k) {
      const Tensor& p = s.params[k];
      const double step = static_cast<double>(read1(steps[k])) + 1;
      const double bc1 = 1 - std::pow(h.beta1, step), bc2 = 1 - std::pow(h.beta2, step);
      for (int64_t i = 0; i < p.numel(); ++i) {
        double g = get(s.grads[k], i) * inv;
        if (h.maximize) g = -g;
        double x = get(p, i);
        if (h.weight_decay != 0) {
          if (h.decoupled_weight_decay) x *= 1 - h.lr * h.weight_decay;
          else g += h.weight_decay * x;
        }
        const double m = h.beta1 * get(exp_avgs[k], i) + (1 - h.beta1) * g;
        const double v = h.beta2 * get(exp_avg_sqs[k], i) + (1 - h.beta2) * g * g;
        set(exp_avgs[k], i, m);
        set(exp_avg_sqs[k], i, v);
        double vv = v;
        if (h.amsgrad) {
          vv = std::max(get(max_exp_avg_sqs[k], i), v);
          set(max_exp_avg_sqs[k], i, vv);
        }
        const double denom = std::sqrt(vv) / std::sqrt(bc2) + h.eps;
        set(p, i, x - (h.lr / bc1) * m / denom);
      }
      write_working(s, k);
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
