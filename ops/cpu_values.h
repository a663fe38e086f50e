// The CPU reference kernels that compute in double (softmax, cross-entropy, batch norm): a
// floating tensor's elements read as doubles and written back rounded, in memory order (the
// caller's tensors are dense; their layout is the caller's business).
#pragma once

#include <type_traits>
#include <vector>

#include "core/tensor.h"

namespace ampgrad::cpu {

inline std::vector<double> read_doubles(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(t.data_ptr());
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(static_cast<acc_t<T>>(p[i]));
  });
  return v;
}

// Element i of a floating tensor = v, rounded through the dtype's accumulation type as the
// CUDA kernels round.
inline void store_double(const Tensor& t, int64_t i, double v) {
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<acc_t<T>>) static_cast<T*>(t.data_ptr())[i] = static_cast<T>(static_cast<acc_t<T>>(v));
  });
}

inline void write_doubles(const Tensor& t, const std::vector<double>& v) {
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<acc_t<T>>) {
      T* p = static_cast<T*>(t.data_ptr());
      for (size_t i = 0; i < v.size(); ++i) p[i] = static_cast<T>(static_cast<acc_t<T>>(v[i]));
    }
  });
}

}  // namespace ampgrad::cpu
