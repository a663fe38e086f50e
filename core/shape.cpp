// Shape helpers: element counts, contiguous strides, broadcasting and dim wrapping.
#include <ampgrad/core/shape.h>

#include <ampgrad/core/dispatch.h>
#include <ampgrad/core/error.h>

namespace ampgrad {

namespace {
[[noreturn]] void raise_numel_overflow(const Shape& s) {
  const std::string op = CurrentOp::label();
  detail::throw_error(fmt::format("{}shape {} has more elements than an int64 can count (storage size calculation "
                                  "overflowed)",
                                  op.empty() ? "" : op + ": ", shape_str(s)));
}
}  // namespace

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s)
    if (__builtin_mul_overflow(n, d, &n)) [[unlikely]] raise_numel_overflow(s);
  return n;
}

Shape contiguous_strides(const Shape& sizes) {
  Shape strides(sizes.size());
  int64_t acc = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = acc;
    acc *= std::max<int64_t>(sizes[i], 1);
  }
  return strides;
}

std::string shape_str(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

Shape broadcast_shapes(std::string_view op, const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    AG_CHECK(da == db || da == 1 || db == 1,
             "{}: shapes {} and {} cannot be broadcast (dimension {}: {} vs {})", op, shape_str(a), shape_str(b),
             i, da, db);
    out[i] = da == 1 ? db : da;
  }
  (void)shape_numel(out);  // an element count past int64 is an error here, not a wrapped count later
  return out;
}

int64_t wrap_dim(std::string_view op, int64_t dim, int64_t ndim) {
  int64_t n = std::max<int64_t>(ndim, 1);  // a 0-d tensor accepts dim 0 and -1, as in PyTorch
  AG_CHECK(dim >= -n && dim < n, "{}: dimension {} is out of range for a tensor of {} dimension{} (expected {} to {})",
           op, dim, ndim, ndim == 1 ? "" : "s", -n, n - 1);
  return dim < 0 ? dim + n : dim;
}

}  // namespace ampgrad
