// The op registry (Note [Op registry]), loading a library of ops, and the shared op checks.
#include <dlfcn.h>

#include <ampgrad/ops/internal.h>
#include <ampgrad/ops/op.h>
#include <ampgrad/ops/op_scope.h>

namespace ampgrad {

namespace {
std::vector<const OpInfo*>& registry() {
  static std::vector<const OpInfo*> ops;
  return ops;
}
}  // namespace

OpInfo::OpInfo(std::string_view name_, amp::Category category_, bool differentiable_, std::string_view reason_,
               std::string_view alternative_, bool reads_16bit_, bool moves_float8_)
    : name(name_),
      category(category_),
      differentiable(differentiable_),
      reason(reason_),
      alternative(alternative_),
      reads_16bit(reads_16bit_),
      moves_float8(moves_float8_) {
  duplicate = find_op(name) != nullptr;
  if (!duplicate) registry().push_back(this);
}

void OpScope::refuse_duplicate() const {
  AG_CHECK(false, "{}: another op is already registered under this name (op names are unique; rename this one)",
           op_.name);
}

void OpScope::refuse_float8(const Tensor& t) const {
  AG_CHECK(false,
           "{}: not implemented for {} (got {}): float8 tensors support only to(), copies, views, printing and "
           "safetensors; cast to a wider dtype first, or let autocast run FP8 matmuls",
           op_.name, dtype_name(t.dtype()), t.desc());
}

const std::vector<const OpInfo*>& op_registry() { return registry(); }

void load_op_library(const std::string& path) {
  // Never closed: the library's records stay in the registry for the process's life.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  AG_CHECK(handle != nullptr, "load_op_library: cannot load {}: {}", path, dlerror());
}

const OpInfo* find_op(std::string_view name) {
  for (const OpInfo* op : registry())
    if (op->name == name) return op;
  return nullptr;
}

void check_same_device(const OpInfo& op, const Tensor& a, const Tensor& b) {
  AG_CHECK(a.device() == b.device(), "{}: expected all tensors on the same device, got {} and {}", op.name, a.desc(),
           b.desc());
}

void check_defined(const OpInfo& op, const Tensor& t, std::string_view what) {
  AG_CHECK(t.defined(), "{}: {} is an undefined tensor", op.name, what);
}

DType float_compute_dtype(DType t) { return is_floating(t) ? t : get_default_dtype(); }

DType scalar_result_dtype(DType tensor_dtype, const Scalar& s) {
  if (is_floating(tensor_dtype)) return tensor_dtype;
  if (s.is_floating()) return get_default_dtype();
  if (tensor_dtype == DType::Bool && s.is_integral()) return DType::Int64;
  return tensor_dtype;
}

Tensor broadcast_to(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t;
  const size_t n = shape.size(), m = t.shape().size();
  Shape strides(n, 0);
  for (size_t i = 0; i < m; ++i) {
    size_t j = n - m + i;
    strides[j] = t.shape()[i] == 1 && shape[j] != 1 ? 0 : t.strides()[i];
  }
  return alias_with(t, shape, strides, t.storage_offset());
}

}  // namespace ampgrad
