// A Python-style number: an operand that does not upcast the tensor it meets.
#pragma once

#include <cstdint>
#include <type_traits>

namespace ampgrad {

class Scalar {
 public:
  Scalar() = default;
  template <class T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
  Scalar(T v) {  // NOLINT: implicit, so that t + 3 and t * 0.5f read naturally
    if constexpr (std::is_same_v<T, bool>) {
      is_bool_ = true;
      i_ = v;
      d_ = v;
    } else if constexpr (std::is_integral_v<T>) {
      is_int_ = true;
      i_ = static_cast<int64_t>(v);
      d_ = static_cast<double>(v);
    } else {
      d_ = static_cast<double>(v);
      i_ = static_cast<int64_t>(v);
    }
  }
  double to_double() const { return d_; }
  int64_t to_int() const { return i_; }
  bool is_floating() const { return !is_int_ && !is_bool_; }
  bool is_integral() const { return is_int_; }
  bool is_bool() const { return is_bool_; }

 private:
  double d_ = 0;
  int64_t i_ = 0;
  bool is_int_ = false;
  bool is_bool_ = false;
};

}  // namespace ampgrad
