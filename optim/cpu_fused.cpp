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

// The elements of a contiguous floating tensor, read as double and written through float (as
// the CUDA kernels round: float math, one rounding on store). The dtype is resolved once per
// tensor: a step reads and writes each element of several tensors, and dispatching on the
// dtype per element was most of a small CPU training step (the 784-512-512-10 MLP's SGD step).
struct Elems {
  void* p = nullptr;
  double (*load)(const void*, int64_t) = nullptr;
  void (*store)(void*, int64_t, double) = nullptr;
  double operator[](int64_t i) const { return load(p, i); }
  void put(int64_t i, double v) const { store(p, i, v); }
};
template <class T> double load_as(const void* p, int64_t i) { return static_cast<double>(static_cast<const T*>(p)[i]); }
template <class T> void store_as(void* p, int64_t i, double v) {
  if constexpr (std::is_same_v<T, double>) static_cast<T*>(p)[i] = v;
  else static_cast<T*>(p)[i] = T(static_cast<float>(v));
}
// The same for a tensor known to be float32 (the common case), without the indirect calls.
struct Floats {
  float* p = nullptr;
  double operator[](int64_t i) const { return static_cast<double>(p[i]); }
  void put(int64_t i, double v) const { p[i] = static_cast<float>(v); }
};
bool all_float(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (t->defined() && t->dtype() != kFloat32) return false;
  return true;
}
Floats floats(const Tensor& t) { return {t.defined() ? static_cast<float*>(t.data_ptr()) : nullptr}; }

Elems elems(const Tensor& t) {
  Elems e;
  with_floating(t, [&](auto* p) {
    using T = std::remove_pointer_t<decltype(p)>;
    e = {p, &load_as<T>, &store_as<T>};
  });
  return e;
}

void advance_steps(const std::vector<Tensor>& steps) {
  for (const Tensor& st : steps) *static_cast<float*>(st.data_ptr()) += 1.0f;
}

void write_working(const FusedStep& s, size_t k) {
  if (s.working.empty() || !s.working[k].defined()) return;
  const Tensor& w = s.working[k];
  const Elems out = elems(w), in = elems(s.params[k]);
  for (int64_t i = 0; i < w.numel(); ++i) out.put(i, in[i]);
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
    const Elems ge = elems(g);
    for (int64_t i = 0; i < g.numel(); ++i) {
      double v = ge[i];
      if (!std::isfinite(v)) bad = true;
      if (write_back) ge.put(i, v * inv);
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
      const int64_t n = p.numel();
      const Tensor none;
      const Tensor& buf = h.momentum != 0 ? momentum_bufs[k] : none;
      auto update = [&](auto pe, auto ge, auto be) {
        for (int64_t i = 0; i < n; ++i) {
          double g = ge[i] * inv;
          if (h.maximize) g = -g;
          const double x = pe[i];
          if (h.weight_decay != 0) g += h.weight_decay * x;
          if (h.momentum != 0) {
            double b = first ? g : h.momentum * be[i] + (1 - h.dampening) * g;
            be.put(i, b);
            b = be[i];  // as stored
            g = h.nesterov ? g + h.momentum * b : b;
          }
          pe.put(i, x - h.lr * g);
        }
      };
      if (all_float({&p, &s.grads[k], &buf})) update(floats(p), floats(s.grads[k]), floats(buf));
      else update(elems(p), elems(s.grads[k]), buf.defined() ? elems(buf) : Elems{});
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
      const int64_t n = p.numel();
      const Tensor none;
      const Tensor& vmax = h.amsgrad ? max_exp_avg_sqs[k] : none;
      auto update = [&](auto pe, auto ge, auto me, auto ve, auto xe) {
        for (int64_t i = 0; i < n; ++i) {
          double g = ge[i] * inv;
          if (h.maximize) g = -g;
          double x = pe[i];
          if (h.weight_decay != 0) {
            if (h.decoupled_weight_decay) x *= 1 - h.lr * h.weight_decay;
            else g += h.weight_decay * x;
          }
          const double m = h.beta1 * me[i] + (1 - h.beta1) * g;
          const double v = h.beta2 * ve[i] + (1 - h.beta2) * g * g;
          me.put(i, m);
          ve.put(i, v);
          double vv = v;
          if (h.amsgrad) {
            vv = std::max(xe[i], v);
            xe.put(i, vv);
          }
          const double denom = std::sqrt(vv) / std::sqrt(bc2) + h.eps;
          pe.put(i, x - (h.lr / bc1) * m / denom);
        }
      };
      if (all_float({&p, &s.grads[k], &exp_avgs[k], &exp_avg_sqs[k], &vmax}))
        update(floats(p), floats(s.grads[k]), floats(exp_avgs[k]), floats(exp_avg_sqs[k]), floats(vmax));
      else
        update(elems(p), elems(s.grads[k]), elems(exp_avgs[k]), elems(exp_avg_sqs[k]),
               vmax.defined() ? elems(vmax) : Elems{});
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
