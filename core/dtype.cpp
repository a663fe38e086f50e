// Type promotion between two tensor dtypes, as torch.promote_types.
#include <ampgrad/core/dtype.h>

#include <atomic>

#include <ampgrad/core/dispatch.h>
#include <ampgrad/core/error.h>
#include <cstdlib>

namespace ampgrad {

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  AG_CHECK(!is_float8(a) && !is_float8(b),
           "promote_types: promotion of float8 types is not supported ({} with {}); cast with to() first",
           dtype_name(a), dtype_name(b));
  const auto& ta = traits(a);
  const auto& tb = traits(b);
  if (ta.is_floating || tb.is_floating) {
    if (!ta.is_floating) return b;
    if (!tb.is_floating) return a;
    if (ta.float_rank != tb.float_rank) return ta.float_rank > tb.float_rank ? a : b;
    return DType::Float32;  // float16 with bfloat16: neither holds the other
  }
  // Integers and bool: bool < uint8 < int32 < int64; uint8 with a signed type needs the signed one.
  auto rank = [](DType t) {
    switch (t) {
      case DType::Bool: return 0;
      case DType::UInt8: return 1;
      case DType::Int32: return 2;
      default: return 3;
    }
  };
  if (a == DType::UInt8 && b == DType::Bool) return a;
  if (b == DType::UInt8 && a == DType::Bool) return b;
  return rank(a) > rank(b) ? a : b;
}

namespace {
std::atomic<DType> g_default_dtype{DType::Float32};
}

DType get_default_dtype() { return g_default_dtype.load(std::memory_order_relaxed); }

void set_default_dtype(DType dtype) {
  AG_CHECK(is_floating(dtype) && !is_float8(dtype), "set_default_dtype: only floating dtypes can be the default, got {}",
           dtype_name(dtype));
  g_default_dtype.store(dtype, std::memory_order_relaxed);
}

namespace detail {
void float8_unsupported(DType t) {
  const std::string op = CurrentOp::label();
  AG_CHECK(false, "{}: not implemented for {} (float8 tensors are data: to(), copies, views, printing and "
           "safetensors; FP8 compute runs under autocast)", op.empty() ? std::string("this kernel") : op,
           dtype_name(t));
  std::abort();  // unreachable: AG_CHECK threw
}
}  // namespace detail

}  // namespace ampgrad
