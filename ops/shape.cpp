// View ops: they share storage with their input and only change sizes, strides and offset.
#include <numeric>

#include <ampgrad/autograd/node.h>
#include <ampgrad/core/kernels.h>
#include <ampgrad/ops/internal.h>
#include <ampgrad/ops/op_scope.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad {

using autograd::Grads;
using Saved = std::vector<Tensor>;
using amp::Category;

namespace {

const OpInfo kView{"view", Category::passthrough, true, "a view: no data changes", {}, false, kMovesFloat8};
const OpInfo kReshape{"reshape", Category::passthrough, true, "a view, or a copy when strides forbid one", {}, false, kMovesFloat8};
const OpInfo kTranspose{"transpose", Category::passthrough, true, "a view: no data changes", {}, false, kMovesFloat8};
const OpInfo kPermute{"permute", Category::passthrough, true, "a view: no data changes", {}, false, kMovesFloat8};
const OpInfo kSlice{"slice", Category::passthrough, true, "a view: no data changes", {}, false, kMovesFloat8};
const OpInfo kSelect{"select", Category::passthrough, true, "a view: no data changes", {}, false, kMovesFloat8};
const OpInfo kExpand{"expand", Category::passthrough, true, "a view: no data changes", {}, false, kMovesFloat8};
const OpInfo kSqueeze{"squeeze", Category::passthrough, true, "a view: no data changes", {}, false, kMovesFloat8};
const OpInfo kUnsqueeze{"unsqueeze", Category::passthrough, true, "a view: no data changes", {}, false, kMovesFloat8};

// Records a view whose gradient is `bw(g)`.
template <class Backward> Tensor view_result(const OpInfo& op, const Tensor& in, Tensor out, Backward bw) {
  if (autograd::any_requires_grad({&in}) && is_floating(in.dtype())) {
    autograd::record(op, out, {in}, {}, [bw](const Tensor& g, const Saved&) { return Grads{bw(g)}; });
    count_tracked_view(out, in);  // when it shares in's memory (Note [In-place autograd])
  }
  return out;
}

Shape infer_shape(std::string_view op, const Tensor& a, const Shape& shape) {
  Shape out = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      AG_CHECK(infer < 0, "{}: only one dimension can be -1 in {}", op, shape_str(shape));
      infer = static_cast<int64_t>(i);
    } else {
      AG_CHECK(out[i] >= 0, "{}: invalid size {} in {}", op, out[i], shape_str(shape));
      AG_CHECK(!__builtin_mul_overflow(known, out[i], &known),
               "{}: shape {} has more elements than an int64 can count (storage size calculation overflowed)", op,
               shape_str(shape));
    }
  }
  if (infer >= 0) {
    AG_CHECK(known != 0 && a.numel() % known == 0, "{}: shape {} is invalid for input {} ({} elements)", op,
             shape_str(shape), a.desc(), a.numel());
    out[infer] = a.numel() / known;
  }
  AG_CHECK(shape_numel(out) == a.numel(), "{}: shape {} is invalid for input {} ({} elements)", op, shape_str(shape),
           a.desc(), a.numel());
  return out;
}

}  // namespace

Tensor view(const Tensor& a0, const Shape& shape) {
  Tensor a = a0;
  OpScope scope(kView, a);
  check_defined(kView, a, "input");
  Shape s = infer_shape(kView.name, a, shape);
  AG_CHECK(a.is_contiguous(),
           "view: input {} is not contiguous (strides {}); use reshape(), which copies when it must, or call "
           "contiguous() first",
           a.desc(), shape_str(a.strides()));
  Shape in_shape = a.shape();
  Tensor out = alias_with(a, s, contiguous_strides(s), a.storage_offset());
  return scope.finish(view_result(kView, a, out, [in_shape](const Tensor& g) { return reshape(g, in_shape); }));
}

Tensor reshape(const Tensor& a0, const Shape& shape) {
  Tensor a = a0;
  OpScope scope(kReshape, a);
  check_defined(kReshape, a, "input");
  Shape s = infer_shape(kReshape.name, a, shape);
  Shape in_shape = a.shape();
  Tensor out;
  if (a.is_contiguous()) {
    out = alias_with(a, s, contiguous_strides(s), a.storage_offset());
  } else {
    NoGradGuard no_grad;
    out = clone_op(a);
    out = alias_with(out, s, contiguous_strides(s), 0);
  }
  return scope.finish(view_result(kReshape, a, out, [in_shape](const Tensor& g) { return reshape(g, in_shape); }));
}

Tensor flatten(const Tensor& a, int64_t start_dim, int64_t end_dim) {
  if (a.dim() == 0) return reshape(a, {1});
  int64_t s = wrap_dim("flatten", start_dim, a.dim()), e = wrap_dim("flatten", end_dim, a.dim());
  AG_CHECK(s <= e, "flatten: start_dim {} comes after end_dim {}", start_dim, end_dim);
  Shape out;
  for (int64_t i = 0; i < s; ++i) out.push_back(a.shape()[i]);
  int64_t mid = 1;
  for (int64_t i = s; i <= e; ++i) mid *= a.shape()[i];
  out.push_back(mid);
  for (int64_t i = e + 1; i < a.dim(); ++i) out.push_back(a.shape()[i]);
  return reshape(a, out);
}

Tensor transpose(const Tensor& a0, int64_t d0, int64_t d1) {
  Tensor a = a0;
  OpScope scope(kTranspose, a);
  check_defined(kTranspose, a, "input");
  if (a.dim() == 0) return scope.finish(a);
  int64_t i = wrap_dim(kTranspose.name, d0, a.dim()), j = wrap_dim(kTranspose.name, d1, a.dim());
  Shape sz = a.shape(), st = a.strides();
  std::swap(sz[i], sz[j]);
  std::swap(st[i], st[j]);
  Tensor out = alias_with(a, sz, st, a.storage_offset());
  return scope.finish(view_result(kTranspose, a, out, [i, j](const Tensor& g) { return transpose(g, i, j); }));
}

Tensor t(const Tensor& a) {
  AG_CHECK(a.dim() <= 2, "t: expects a tensor with at most 2 dimensions, got {}; use transpose()", a.desc());
  return a.dim() < 2 ? a : transpose(a, 0, 1);
}

Tensor permute(const Tensor& a0, const Shape& dims) {
  Tensor a = a0;
  OpScope scope(kPermute, a);
  check_defined(kPermute, a, "input");
  AG_CHECK(static_cast<int64_t>(dims.size()) == a.dim(), "permute: {} dims given for input {}", dims.size(),
           a.desc());
  Shape sz(dims.size()), st(dims.size()), inverse(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim(kPermute.name, dims[i], a.dim());
    AG_CHECK(!seen[d], "permute: dimension {} repeats in {}", d, shape_str(dims));
    seen[d] = true;
    sz[i] = a.shape()[d];
    st[i] = a.strides()[d];
    inverse[d] = static_cast<int64_t>(i);
  }
  Tensor out = alias_with(a, sz, st, a.storage_offset());
  return scope.finish(view_result(kPermute, a, out, [inverse](const Tensor& g) { return permute(g, inverse); }));
}

Tensor slice(const Tensor& a0, int64_t dim, int64_t start, int64_t end, int64_t step) {
  Tensor a = a0;
  OpScope scope(kSlice, a);
  check_defined(kSlice, a, "input");
  AG_CHECK(a.dim() > 0, "slice: cannot slice a 0-dim tensor");
  int64_t d = wrap_dim(kSlice.name, dim, a.dim());
  AG_CHECK(step > 0, "slice: step must be positive, got {}", step);
  const int64_t n = a.shape()[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape sz = a.shape(), st = a.strides();
  sz[d] = (end - start + step - 1) / step;
  st[d] *= step;
  Tensor out = alias_with(a, sz, st, a.storage_offset() + start * a.strides()[d]);
  Shape in_shape = a.shape();
  return scope.finish(view_result(kSlice, a, out, [in_shape, d, start, end, step](const Tensor& g) {
    // The whole dim: the gradient is g itself (no zeros to fill, nothing to copy).
    if (start == 0 && end == in_shape[d] && step == 1) return g;
    Tensor full_grad = zeros(in_shape, g.options());
    Tensor part = slice(full_grad, d, start, end, step);
    copy_into(part, g);
    return full_grad;
  }));
}

Tensor narrow(const Tensor& a, int64_t dim, int64_t start, int64_t length) {
  check_defined(kSlice, a, "input");
  int64_t d = wrap_dim("narrow", dim, a.dim());
  const int64_t n = a.shape()[d];
  if (start < 0) start += n;
  AG_CHECK(start >= 0 && length >= 0 && start + length <= n,
           "narrow: start {} and length {} are out of range for dimension {} of size {} ({})", start, length, d, n,
           a.desc());
  return slice(a, d, start, start + length);
}

Tensor select(const Tensor& a0, int64_t dim, int64_t index) {
  Tensor a = a0;
  OpScope scope(kSelect, a);
  check_defined(kSelect, a, "input");
  AG_CHECK(a.dim() > 0, "select: cannot index a 0-dim tensor");
  int64_t d = wrap_dim(kSelect.name, dim, a.dim());
  const int64_t n = a.shape()[d];
  AG_CHECK(index >= -n && index < n, "select: index {} is out of range for dimension {} of size {} ({})", index, d, n,
           a.desc());
  if (index < 0) index += n;
  Shape sz = a.shape(), st = a.strides();
  sz.erase(sz.begin() + d);
  st.erase(st.begin() + d);
  Tensor out = alias_with(a, sz, st, a.storage_offset() + index * a.strides()[d]);
  Shape in_shape = a.shape();
  return scope.finish(view_result(kSelect, a, out, [in_shape, d, index](const Tensor& g) {
    Tensor full_grad = zeros(in_shape, g.options());
    Tensor part = select(full_grad, d, index);
    copy_into(part, g);
    return full_grad;
  }));
}

Tensor expand(const Tensor& a0, const Shape& shape) {
  Tensor a = a0;
  OpScope scope(kExpand, a);
  check_defined(kExpand, a, "input");
  AG_CHECK(shape.size() >= a.shape().size(), "expand: cannot expand {} to fewer dimensions {}", a.desc(),
           shape_str(shape));
  Shape target = shape;
  const size_t lead = shape.size() - a.shape().size();
  for (size_t i = 0; i < shape.size(); ++i) {
    int64_t cur = i < lead ? 1 : a.shape()[i - lead];
    if (target[i] == -1) {
      AG_CHECK(i >= lead, "expand: -1 is not allowed for a new leading dimension in {}", shape_str(shape));
      target[i] = cur;
    }
    AG_CHECK(cur == target[i] || cur == 1, "expand: cannot expand {} to {} (dimension {}: {} vs {})", a.desc(),
             shape_str(shape), i, cur, target[i]);
  }
  (void)shape_numel(target);  // an element count past int64 is an error, not a wrapped count
  Tensor out = broadcast_to(a, target);
  if (out.is_same(a)) return scope.finish(a);
  // The engine sums the gradient back to the input's shape (Note [Grad shape and dtype]).
  return scope.finish(view_result(kExpand, a, out, [](const Tensor& g) { return g; }));
}

Tensor squeeze(const Tensor& a0, int64_t dim) {
  Tensor a = a0;
  OpScope scope(kSqueeze, a);
  check_defined(kSqueeze, a, "input");
  if (a.dim() == 0) return scope.finish(a);
  int64_t d = wrap_dim(kSqueeze.name, dim, a.dim());
  if (a.shape()[d] != 1) return scope.finish(a);
  Shape sz = a.shape(), st = a.strides();
  sz.erase(sz.begin() + d);
  st.erase(st.begin() + d);
  Shape in_shape = a.shape();
  Tensor out = alias_with(a, sz, st, a.storage_offset());
  return scope.finish(view_result(kSqueeze, a, out, [in_shape](const Tensor& g) { return reshape(g, in_shape); }));
}

Tensor squeeze(const Tensor& a0) {
  Tensor a = a0;
  OpScope scope(kSqueeze, a);
  check_defined(kSqueeze, a, "input");
  Shape sz, st;
  for (int64_t i = 0; i < a.dim(); ++i)
    if (a.shape()[i] != 1) {
      sz.push_back(a.shape()[i]);
      st.push_back(a.strides()[i]);
    }
  Shape in_shape = a.shape();
  Tensor out = alias_with(a, sz, st, a.storage_offset());
  return scope.finish(view_result(kSqueeze, a, out, [in_shape](const Tensor& g) { return reshape(g, in_shape); }));
}

Tensor unsqueeze(const Tensor& a0, int64_t dim) {
  Tensor a = a0;
  OpScope scope(kUnsqueeze, a);
  check_defined(kUnsqueeze, a, "input");
  int64_t d = wrap_dim(kUnsqueeze.name, dim, a.dim() + 1);
  Shape sz = a.shape(), st = a.strides();
  int64_t stride = d < a.dim() ? a.strides()[d] * a.shape()[d] : 1;
  sz.insert(sz.begin() + d, 1);
  st.insert(st.begin() + d, stride);
  Shape in_shape = a.shape();
  Tensor out = alias_with(a, sz, st, a.storage_offset());
  return scope.finish(view_result(kUnsqueeze, a, out, [in_shape](const Tensor& g) { return reshape(g, in_shape); }));
}

}  // namespace ampgrad
