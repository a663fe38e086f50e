// CPU reference kernels of nll_loss: the picked log-probabilities summed in double.
#include <type_traits>

#include "core/kernels.h"

namespace ampgrad::cpu {

namespace {

template <class T> T from_double(double v) {
  return static_cast<T>(static_cast<acc_t<T>>(v));
}

// A counted row whose target lies outside [0, C) contributes 0 (CUDA cannot raise from a
// kernel; the op checks targets on the CPU before it gets here).
bool in_range(int64_t t, int64_t c) { return t >= 0 && t < c; }

}  // namespace

void nll_loss_forward(const Tensor& lp, const Tensor& target, int64_t ignore_index, const Tensor& loss,
                      const Tensor& count) {
  const int64_t n = lp.size(0), c = lp.size(1);
  const int64_t* t = static_cast<const int64_t*>(target.data_ptr());
  visit_dtype(lp.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<acc_t<T>>) {
      const T* p = static_cast<const T*>(lp.data_ptr());
      double total = 0, counted = 0;
      for (int64_t i = 0; i < n; ++i) {
        if (t[i] == ignore_index) continue;
        counted += 1;
        if (in_range(t[i], c)) total += static_cast<double>(static_cast<acc_t<T>>(p[i * c + t[i]]));
      }
      *static_cast<T*>(loss.data_ptr()) = from_double<T>(-total / counted);
      *static_cast<float*>(count.data_ptr()) = static_cast<float>(counted);
    }
  });
}

void nll_loss_backward(const Tensor& grad, const Tensor& target, const Tensor& count, int64_t ignore_index,
                       const Tensor& grad_lp) {
  const int64_t n = grad_lp.size(0), c = grad_lp.size(1);
  const int64_t* t = static_cast<const int64_t*>(target.data_ptr());
  visit_dtype(grad_lp.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<acc_t<T>>) {
      const double g = static_cast<double>(static_cast<acc_t<T>>(*static_cast<const T*>(grad.data_ptr())));
      const double scale = -g / static_cast<double>(*static_cast<const float*>(count.data_ptr()));
      T* out = static_cast<T*>(grad_lp.data_ptr());
      for (int64_t i = 0; i < n * c; ++i) out[i] = from_double<T>(0.0);
      for (int64_t i = 0; i < n; ++i)
        if (t[i] != ignore_index && in_range(t[i], c)) out[i * c + t[i]] = from_double<T>(scale);
    }
  });
}

}  // namespace ampgrad::cpu
