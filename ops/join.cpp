// cat, stack and index_select: ops that gather data from several places.
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
const OpInfo kCat{"cat", Category::promote, true,
                  "mixes inputs: all are cast to the widest dtype (as PyTorch's type promotion does)"};
const OpInfo kStack{"stack", Category::promote, true,
                    "mixes inputs: all are cast to the widest dtype (as PyTorch's type promotion does)"};
const OpInfo kIndexSelect{"index_select", Category::passthrough, true, "gathers values unchanged"};

Tensor cat_impl(const OpInfo& op, std::vector<Tensor> ts, int64_t dim) {
  AG_CHECK(!ts.empty(), "{}: expected a non-empty list of tensors", op.name);
  for (size_t i = 0; i < ts.size(); ++i) check_defined(op, ts[i], fmt::format("tensor {}", i));
  const Tensor& first = ts[0];
  const int64_t d = wrap_dim(op.name, dim, first.dim());
  AG_CHECK(first.dim() > 0, "{}: zero-dimensional tensor {} cannot be concatenated", op.name, first.desc());
  DType dt = first.dtype();
  int64_t total = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    check_same_device(op, first, t);
    AG_CHECK(t.dim() == first.dim(), "{}: tensor {} has {} dims but tensor 0 has {} ({} vs {})", op.name, i, t.dim(),
             first.dim(), t.desc(), first.desc());
    for (int64_t k = 0; k < t.dim(); ++k)
      AG_CHECK(k == d || t.shape()[k] == first.shape()[k],
               "{}: sizes must match except in dimension {}; tensor {} is {} but tensor 0 is {}", op.name, d, i,
               shape_str(t.shape()), shape_str(first.shape()));
    AG_CHECK(!__builtin_add_overflow(total, t.shape()[d], &total),
             "{}: the sizes along dimension {} add up past int64's reach (tensor {} is {})", op.name, d, i,
             shape_str(t.shape()));
    dt = promote_types(dt, t.dtype());
  }
  Shape shape = first.shape();
  shape[d] = total;
  Tensor out = empty(shape, TensorOptions(dt).device(first.device()));
  {
    NoGradGuard no_grad;
    int64_t at = 0;
    for (const Tensor& t : ts) {
      Tensor part = slice(out, d, at, at + t.shape()[d]);
      copy_into(part, t);
      at += t.shape()[d];
    }
  }
  if (autograd::any_requires_grad(ts) && is_floating(dt)) {
    Shape sizes;
    for (const Tensor& t : ts) sizes.push_back(t.shape()[d]);
    autograd::record(op, out, ts, {}, [sizes, d](const Tensor& g, const Saved&) {
      Grads grads;
      int64_t at = 0;
      for (int64_t n : sizes) {
        grads.push_back(slice(g, d, at, at + n));
        at += n;
      }
      return grads;
    });
  }
  return out;
}
}  // namespace

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  std::vector<Tensor> ts = tensors;
  OpScope scope(kCat, ts);
  return scope.finish(cat_impl(kCat, ts, dim));
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  std::vector<Tensor> ts = tensors;
  OpScope scope(kStack, ts);
  AG_CHECK(!ts.empty(), "stack: expected a non-empty list of tensors");
  for (size_t i = 0; i < ts.size(); ++i) {
    check_defined(kStack, ts[i], fmt::format("tensor {}", i));
    AG_CHECK(ts[i].shape() == ts[0].shape(), "stack: all tensors must have the same shape; tensor {} is {} but tensor 0 is {}",
             i, shape_str(ts[i].shape()), shape_str(ts[0].shape()));
  }
  const int64_t d = wrap_dim(kStack.name, dim, ts[0].dim() + 1);
  for (Tensor& t : ts) t = unsqueeze(t, d);
  return scope.finish(cat_impl(kStack, ts, d));
}

Tensor index_select(const Tensor& a0, int64_t dim, const Tensor& index0) {
  Tensor a = a0, index = index0;
  OpScope scope(kIndexSelect, a, index);
  check_defined(kIndexSelect, a, "input");
  check_defined(kIndexSelect, index, "index");
  AG_CHECK(index.dtype() == kInt64 || index.dtype() == kInt32, "index_select: index must be int64 or int32, got {}",
           index.desc());
  AG_CHECK(index.dim() <= 1, "index_select: index must be 0- or 1-dimensional, got {}", index.desc());
  check_same_device(kIndexSelect, a, index);
  const int64_t d = wrap_dim(kIndexSelect.name, dim, a.dim());
  const int64_t size = a.dim() == 0 ? 1 : a.shape()[d];
  Tensor idx = contiguous(index.to(kInt64)).reshape({-1});
  if (idx.is_cpu()) {
    for (int64_t v : idx.to_vector<int64_t>())
      AG_CHECK(v >= 0 && v < size, "index_select: index {} is out of range for dimension {} of size {} ({})", v, d,
               size, a.desc());
  }
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < d; ++i) outer *= a.shape()[i];
  for (int64_t i = d + 1; i < a.dim(); ++i) inner *= a.shape()[i];
  Shape shape = a.shape();
  if (a.dim() > 0) shape[d] = idx.numel();
  Tensor out = empty(shape, a.options());
  if (out.numel()) {
    NoGradGuard no_grad;
    kernel::index_select(out.device(), contiguous(a).view({outer, size, inner}), idx, out.view({outer, idx.numel(), inner}));
  }
  if (autograd::any_requires_grad({&a}) && is_floating(a.dtype())) {
    Shape in_shape = a.shape();
    autograd::record(kIndexSelect, out, {a, Tensor()}, {idx},
                     [in_shape, outer, size, inner](const Tensor& g, const Saved& s) {
                       Tensor ga = zeros(in_shape, g.options());
                       kernel::index_add(ga.device(), ga.view({outer, size, inner}), s[0],
                                         contiguous(g).view({outer, s[0].numel(), inner}));
                       return Grads{ga, Tensor()};
                     });
  }
  return scope.finish(out);
}

}  // namespace ampgrad
