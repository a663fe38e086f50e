// Runtime element types with a constexpr traits table, and PyTorch's type promotion.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <utility>

#include <ampgrad/core/float8.h>
#include <ampgrad/core/half.h>

namespace ampgrad {

enum class DType : uint8_t {
  Float32, Float16, BFloat16, Float64, Int64, Int32, Bool, UInt8, Float8_e4m3fn, Float8_e5m2
};
inline constexpr int kNumDTypes = 10;

inline constexpr DType kFloat32 = DType::Float32;
inline constexpr DType kFloat = DType::Float32;
inline constexpr DType kFloat16 = DType::Float16;
inline constexpr DType kHalf = DType::Float16;
inline constexpr DType kBFloat16 = DType::BFloat16;
inline constexpr DType kFloat64 = DType::Float64;
inline constexpr DType kDouble = DType::Float64;
inline constexpr DType kInt64 = DType::Int64;
inline constexpr DType kLong = DType::Int64;
inline constexpr DType kInt32 = DType::Int32;
inline constexpr DType kInt = DType::Int32;
inline constexpr DType kBool = DType::Bool;
inline constexpr DType kUInt8 = DType::UInt8;
inline constexpr DType kFloat8_e4m3fn = DType::Float8_e4m3fn;
inline constexpr DType kFloat8_e5m2 = DType::Float8_e5m2;

struct DTypeTraits {
  std::string_view name;  // as PyTorch prints it: float32, float16, ...
  std::string_view short_name;  // f32, f16, ...
  uint8_t itemsize;
  bool is_floating;
  bool is_signed;
  uint8_t float_rank;  // promotion rank among floating types (bf16 and f16 share rank 1)
};

// Indexed by DType. Order must follow the enum.
inline constexpr std::array<DTypeTraits, kNumDTypes> kDTypeTraits{{
    {"float32", "f32", 4, true, true, 2},
    {"float16", "f16", 2, true, true, 1},
    {"bfloat16", "bf16", 2, true, true, 1},
    {"float64", "f64", 8, true, true, 3},
    {"int64", "i64", 8, false, true, 0},
    {"int32", "i32", 4, false, true, 0},
    {"bool", "bool", 1, false, false, 0},
    {"uint8", "u8", 1, false, false, 0},
    {"float8_e4m3fn", "f8e4m3", 1, true, true, 0},
    {"float8_e5m2", "f8e5m2", 1, true, true, 0},
}};

constexpr const DTypeTraits& traits(DType t) { return kDTypeTraits[static_cast<int>(t)]; }
constexpr size_t itemsize(DType t) { return traits(t).itemsize; }
constexpr bool is_floating(DType t) { return traits(t).is_floating; }
constexpr bool is_reduced_float(DType t) { return t == DType::Float16 || t == DType::BFloat16; }
constexpr std::string_view dtype_name(DType t) { return traits(t).name; }

// Note [Float8 tensors]
// float8_e4m3fn and float8_e5m2 tensors hold data (Note [FP8 formats] in core/float8.h): they
// are made (empty, zeros, full, ones), cast both ways with to() (round to nearest even;
// overflow is NaN in e4m3fn and inf in e5m2, as PyTorch's), copied, viewed, printed and
// saved (safetensors F8_E4M3, F8_E5M2). Any other op given one raises an ag::Error naming the
// op, as PyTorch's "not implemented for 'Float8_e4m3fn'": FP8 arithmetic is autocast's
// (Note [FP8 autocast] in amp/autocast.h), not the ops'. They promote with nothing but
// themselves (promote_types throws), and kernels' visit_dtype does not visit them: a kernel
// reached with one throws.
constexpr bool is_float8(DType t) { return t == DType::Float8_e4m3fn || t == DType::Float8_e5m2; }

// Result type of a binary op between two tensors, as torch.promote_types.
DType promote_types(DType a, DType b);

// The dtype of floating tensors made without an explicit dtype, as torch.get_default_dtype:
// factories (zeros, randn, tensor of floats, arange with a floating bound), layers'
// parameters, and integer inputs of ops that compute in floating point (sqrt of an int64
// tensor, an int64 tensor times 2.5, true division of integers). float32 unless set;
// process-wide, as PyTorch's. set_default_dtype takes a floating dtype only (else ag::Error).
DType get_default_dtype();
void set_default_dtype(DType dtype);

// Sets the default dtype for a scope and restores the previous one when it ends. The default
// is process-wide, as PyTorch's: guards on several threads at once restore out of order.
class DefaultDTypeGuard {
 public:
  explicit DefaultDTypeGuard(DType dtype) : previous_(get_default_dtype()) { set_default_dtype(dtype); }
  DefaultDTypeGuard(const DefaultDTypeGuard&) = delete;
  DefaultDTypeGuard& operator=(const DefaultDTypeGuard&) = delete;
  ~DefaultDTypeGuard() { set_default_dtype(previous_); }

 private:
  DType previous_;
};

// The C++ type stored for each DType.
template <DType D> struct CppType;
template <> struct CppType<DType::Float32> { using type = float; };
template <> struct CppType<DType::Float16> { using type = Half; };
template <> struct CppType<DType::BFloat16> { using type = BFloat16; };
template <> struct CppType<DType::Float64> { using type = double; };
template <> struct CppType<DType::Int64> { using type = int64_t; };
template <> struct CppType<DType::Int32> { using type = int32_t; };
template <> struct CppType<DType::Bool> { using type = bool; };
template <> struct CppType<DType::UInt8> { using type = uint8_t; };
template <> struct CppType<DType::Float8_e4m3fn> { using type = Float8_e4m3fn; };
template <> struct CppType<DType::Float8_e5m2> { using type = Float8_e5m2; };

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::Float32; }
template <> constexpr DType dtype_of<Half>() { return DType::Float16; }
template <> constexpr DType dtype_of<BFloat16>() { return DType::BFloat16; }
template <> constexpr DType dtype_of<double>() { return DType::Float64; }
template <> constexpr DType dtype_of<int64_t>() { return DType::Int64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::Int32; }
template <> constexpr DType dtype_of<bool>() { return DType::Bool; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::UInt8; }
template <> constexpr DType dtype_of<Float8_e4m3fn>() { return DType::Float8_e4m3fn; }
template <> constexpr DType dtype_of<Float8_e5m2>() { return DType::Float8_e5m2; }

// Arithmetic type a kernel computes in: float for 16-bit floats (load, compute, round on store).
template <class T> struct AccType { using type = T; };
template <> struct AccType<Half> { using type = float; };
template <> struct AccType<BFloat16> { using type = float; };
template <> struct AccType<bool> { using type = int64_t; };
template <> struct AccType<uint8_t> { using type = int64_t; };
template <> struct AccType<int32_t> { using type = int64_t; };
template <class T> using acc_t = typename AccType<T>::type;

namespace detail {
// Throws the ag::Error of a kernel reached with a float8 tensor, naming the current op.
[[noreturn]] void float8_unsupported(DType t);
}  // namespace detail

// Calls f(T{}) with T the C++ type of `t`: `visit_dtype(t, [&](auto tag) { using T = decltype(tag); })`.
// Float8 dtypes are not visited (Note [Float8 tensors]): visit_float8 takes those.
template <class F> decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
    case DType::Float32: return f(float{});
    case DType::Float16: return f(Half{});
    case DType::BFloat16: return f(BFloat16{});
    case DType::Float64: return f(double{});
    case DType::Int64: return f(int64_t{});
    case DType::Int32: return f(int32_t{});
    case DType::Bool: return f(bool{});
    case DType::UInt8: return f(uint8_t{});
    case DType::Float8_e4m3fn:
    case DType::Float8_e5m2: detail::float8_unsupported(t);
  }
  return f(float{});  // unreachable: every enumerator is handled above
}

// As visit_dtype, float8 dtypes included: the kernels that move and convert values (copy,
// fill, printing, safetensors).
template <class F> decltype(auto) visit_dtype_with_float8(DType t, F&& f) {
  if (t == DType::Float8_e4m3fn) return f(Float8_e4m3fn{});
  if (t == DType::Float8_e5m2) return f(Float8_e5m2{});
  return visit_dtype(t, std::forward<F>(f));
}

}  // namespace ampgrad
