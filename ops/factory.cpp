// Factories: tensors from values, constants, ranges and random draws.
#include <cmath>
#include <cstring>

#include <ampgrad/core/kernels.h>
#include <ampgrad/ops/internal.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad {

namespace {
// Builds a CPU tensor of dtype `from` holding `data`, then converts/moves it per `options`.
// out, requiring grad when options say so (floating dtypes only).
Tensor with_requires_grad(Tensor out, const TensorOptions& options, const char* what) {
  if (options.requires_grad()) {
    AG_CHECK(is_floating(out.dtype()), "{}: only floating tensors can require grad, got {}", what,
             dtype_name(out.dtype()));
    out.requires_grad_(true);
  }
  return out;
}

Tensor from_host(const void* data, DType from, const Shape& shape, const TensorOptions& options, const char* what) {
  Tensor host = empty(shape, TensorOptions(from));
  if (host.nbytes()) std::memcpy(host.data_ptr(), data, host.nbytes());
  return with_requires_grad(host.to(options.device(), options.dtype()), options, what);
}

void check_count(const char* what, size_t n, const Shape& shape) {
  AG_CHECK(static_cast<int64_t>(n) == shape_numel(shape), "{}: {} values cannot fill shape {} ({} elements)", what,
           n, shape_str(shape), shape_numel(shape));
}
}  // namespace

Tensor tensor(const std::vector<float>& values, const Shape& shape, TensorOptions options) {
  check_count("tensor", values.size(), shape);
  return from_host(values.data(), kFloat32, shape, options, "tensor");
}
Tensor tensor(const std::vector<float>& values, TensorOptions options) {
  return tensor(values, Shape{static_cast<int64_t>(values.size())}, options);
}
Tensor tensor(std::initializer_list<float> values, const Shape& shape, TensorOptions options) {
  return tensor(std::vector<float>(values), shape, options);
}
Tensor tensor(std::initializer_list<float> values, TensorOptions options) {
  return tensor(std::vector<float>(values), options);
}
Tensor tensor(const std::vector<double>& values, const Shape& shape, TensorOptions options) {
  check_count("tensor", values.size(), shape);
  return from_host(values.data(), kFloat64, shape, options, "tensor");
}
Tensor tensor(const std::vector<int64_t>& values, const Shape& shape, TensorOptions options) {
  check_count("tensor", values.size(), shape);
  return from_host(values.data(), kInt64, shape, options, "tensor");
}
Tensor tensor(const std::vector<int64_t>& values, TensorOptions options) {
  return tensor(values, Shape{static_cast<int64_t>(values.size())}, options);
}
Tensor tensor(const std::vector<bool>& values, const Shape& shape, TensorOptions options) {
  check_count("tensor", values.size(), shape);
  std::vector<uint8_t> bytes(values.begin(), values.end());
  return from_host(bytes.data(), kBool, shape, options, "tensor");
}
Tensor tensor(float value, TensorOptions options) { return from_host(&value, kFloat32, {}, options, "tensor"); }

Tensor scalar_tensor(const Scalar& value, TensorOptions options) { return full({}, value, options); }

namespace {
// `shape` filled with `value`; `op` names the factory in errors (a shape whose size overflows).
Tensor filled(std::string_view op, const Shape& shape, double value, TensorOptions options) {
  CurrentOp current(op);
  Tensor out = empty(shape, TensorOptions(options.dtype()).device(options.device()));
  fill_into(out, value);
  if (options.requires_grad()) out.requires_grad_(true);
  return out;
}
}  // namespace

Tensor full(const Shape& shape, const Scalar& value, TensorOptions options) {
  return filled("full", shape, value.to_double(), options);
}
Tensor zeros(const Shape& shape, TensorOptions options) { return filled("zeros", shape, 0, options); }
Tensor ones(const Shape& shape, TensorOptions options) { return filled("ones", shape, 1, options); }
Tensor zeros_like(const Tensor& t) { return full(t.shape(), 0, t.options()); }
Tensor ones_like(const Tensor& t) { return full(t.shape(), 1, t.options()); }
Tensor full_like(const Tensor& t, const Scalar& value) { return full(t.shape(), value, t.options()); }

Tensor arange(const Scalar& end, TensorOptions options) { return arange(0, end, 1, options); }
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step, TensorOptions options) {
  const double s = start.to_double(), e = end.to_double(), st = step.to_double();
  AG_CHECK(st != 0, "arange: step must be non-zero");
  AG_CHECK((e - s) / st >= 0, "arange: start {} cannot reach end {} with step {}", s, e, st);
  const auto n = static_cast<int64_t>(std::ceil((e - s) / st));
  if (!options.has_dtype()) {
    const bool integral = !start.is_floating() && !end.is_floating() && !step.is_floating();
    options = options.dtype(integral ? kInt64 : get_default_dtype());
  }
  // On the device where it can: a CUDA graph captures a kernel, not a copy from host memory
  // that is gone when the graph replays (Note [Host values in a capture] in cuda/runtime.cpp).
  if (kernel::arange.has(options.device()) && n < INT32_MAX) {
    Tensor out = empty({n}, options.requires_grad(false));
    kernel::arange(out.device(), out, s, st);
    return with_requires_grad(out, options, "arange");
  }
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = s + st * static_cast<double>(i);
  return from_host(v.data(), kFloat64, {n}, options, "arange");
}

Tensor rand(const Shape& shape, Generator& gen, TensorOptions options) {
  AG_CHECK(is_floating(options.dtype()), "rand: expected a floating dtype, got {}", dtype_name(options.dtype()));
  AG_CHECK(!is_float8(options.dtype()), "rand: not implemented for {} (as PyTorch: draw in another dtype, then cast)",
           dtype_name(options.dtype()));
  CurrentOp current("rand");
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  // As many random bits as the dtype has significand digits (53, 24, 11, 8), so that every
  // draw is exact in the dtype and rounding never reaches 1.0.
  const int digits = options.dtype() == kFloat64 ? 53 : options.dtype() == kFloat16 ? 11
                   : options.dtype() == kBFloat16 ? 8 : 24;
  const double scale = std::ldexp(1.0, -digits);
  for (double& x : v) x = static_cast<double>(gen.next_u64() >> (64 - digits)) * scale;
  return from_host(v.data(), kFloat64, shape, options, "rand");
}
Tensor randn(const Shape& shape, Generator& gen, TensorOptions options) {
  AG_CHECK(is_floating(options.dtype()), "randn: expected a floating dtype, got {}", dtype_name(options.dtype()));
  AG_CHECK(!is_float8(options.dtype()), "randn: not implemented for {} (as PyTorch: draw in another dtype, then cast)",
           dtype_name(options.dtype()));
  CurrentOp current("randn");
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) x = gen.normal();
  return from_host(v.data(), kFloat64, shape, options, "randn");
}
Tensor rand(const Shape& shape, TensorOptions options) { return rand(shape, default_generator(), options); }
Tensor randn(const Shape& shape, TensorOptions options) { return randn(shape, default_generator(), options); }

}  // namespace ampgrad
