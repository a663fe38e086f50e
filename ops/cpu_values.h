// Helpers of the CPU reference kernels: a visit of the floating dtypes, and values read as
// doubles and written back rounded through the dtype's accumulation type, as the CUDA kernels
// round. read_doubles / write_doubles go in memory order (the caller's tensors are dense; their
// layout is the caller's business).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include <ampgrad/core/error.h>
#include <ampgrad/core/tensor.h>

namespace ampgrad::cpu {

// Calls f(T{}) for t's element type T, which must be floating: the ops check dtypes before
// their kernels run, so anything else is an internal error.
template <class F> void visit_floating(const Tensor& t, const char* what, F&& f) {
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<acc_t<T>>) {
      f(tag);
    } else {
      AG_INTERNAL_ASSERT(false, "{} on a non-floating tensor {}", what, t.desc());
    }
  });
}

template <class T> double to_double(T v) { return static_cast<double>(static_cast<acc_t<T>>(v)); }
template <class T> T from_double(double v) { return static_cast<T>(static_cast<acc_t<T>>(v)); }

// The largest m of the r values v[first], v[first + stride], ..., and s = the sum of
// exp(v - m): the stable pieces of a softmax (logsumexp = m + log(s)).
inline void max_and_sum_exp(const std::vector<double>& v, size_t first, int64_t r, int64_t stride, double& m,
                            double& s) {
  auto at = [&](int64_t j) { return v[first + static_cast<size_t>(j * stride)]; };
  m = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < r; ++j) m = std::max(m, at(j));
  s = 0;
  for (int64_t j = 0; j < r; ++j) s += std::exp(at(j) - m);
}

inline std::vector<double> read_doubles(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  visit_floating(t, "read_doubles", [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(t.data_ptr());
    for (size_t i = 0; i < v.size(); ++i) v[i] = to_double(p[i]);
  });
  return v;
}

// Element i of a floating tensor = v, rounded.
inline void store_double(const Tensor& t, int64_t i, double v) {
  visit_floating(t, "store_double", [&](auto tag) {
    using T = decltype(tag);
    static_cast<T*>(t.data_ptr())[i] = from_double<T>(v);
  });
}

inline void write_doubles(const Tensor& t, const std::vector<double>& v) {
  visit_floating(t, "write_doubles", [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(t.data_ptr());
    for (size_t i = 0; i < v.size(); ++i) p[i] = from_double<T>(v[i]);
  });
}

}  // namespace ampgrad::cpu
