// Indexing ops that write: index_add, index_copy, index_put, scatter_add, and gather (their
// adjoint). Index tensors are int64; on the CPU every index is checked against its dim; a
// CUDA index is checked by the kernels, which report it at the next synchronization (Note
// [Device-side errors] in cuda/device_error.h).
#include <ampgrad/autograd/node.h>
#include <ampgrad/core/kernels.h>
#include <ampgrad/ops/internal.h>
#include <ampgrad/ops/op_scope.h>
#include <ampgrad/ops/ops.h>
#include <ampgrad/ops/reduce_geometry.h>

namespace ampgrad {

using amp::Category;
using autograd::Grads;
using Saved = std::vector<Tensor>;

namespace {

const OpInfo kIndexAdd{"index_add", Category::promote, true,
                       "mixes two inputs: both are cast to the wider dtype (PyTorch 2.11 wants one dtype)"};
const OpInfo kIndexCopy{"index_copy", Category::passthrough, true,
                        "copies rows of one dtype: input and source must share it, with no autocast action, as "
                        "PyTorch 2.11's (not on its promote list)"};
const OpInfo kIndexPut{"index_put", Category::promote, true, "mixes two inputs: both are cast to the wider dtype"};
const OpInfo kGather{"gather", Category::passthrough, true, "moves values: exact in any dtype"};
const OpInfo kScatterAdd{"scatter_add", Category::promote, true, "mixes two inputs: both are cast to the wider dtype"};

void check_index(const OpInfo& op, const Tensor& index, int64_t size, int64_t dim, const Tensor& self) {
  AG_CHECK(index.dtype() == kInt64, "{}: index must be int64, got {}", op.name, index.desc());
  check_same_device(op, self, index);
  if (index.is_cpu()) {
    for (int64_t v : contiguous(index).to_vector<int64_t>())
      AG_CHECK(v >= 0 && v < size, "{}: index {} is out of range for dimension {} of size {} ({})", op.name, v, dim,
               size, self.desc());
  }
}

// self's shape with dim's size replaced by n: the shape of index_add's and index_copy's source.
Shape with_size(Shape s, int64_t dim, int64_t n) {
  if (!s.empty()) s[dim] = n;
  return s;
}

// The [outer, d, inner] view of a contiguous t around dim (a 0-dim t is [1, 1, 1]).
Tensor rows(const Tensor& t, int64_t dim) { return t.dim() == 0 ? t.view({1, 1, 1}) : t.view(rows_around(t.shape(), dim)); }

// The checks and dtype of the row-indexed writes: source has self's shape but n rows along dim.
struct RowWrite {
  int64_t dim;
  Tensor index, source;  // index contiguous [n]; source cast to self's dtype, contiguous
};
RowWrite row_write(const OpInfo& op, const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source) {
  check_defined(op, self, "input");
  check_defined(op, index, "index");
  check_defined(op, source, "source");
  check_same_device(op, self, source);
  const int64_t d = self.dim() == 0 ? 0 : wrap_dim(op.name, dim, self.dim());
  AG_CHECK(index.dim() <= 1, "{}: index must be 0- or 1-dimensional, got {}", op.name, index.desc());
  check_index(op, index, self.dim() == 0 ? 1 : self.size(d), d, self);
  AG_CHECK(source.shape() == with_size(self.shape(), d, index.numel()) || (self.dim() == 0 && source.numel() == 1),
           "{}: source {} must be input {} with {} rows along dim {}", op.name, source.desc(), self.desc(),
           index.numel(), d);
  AG_CHECK(source.dtype() == self.dtype(), "{}: input {} and source {} must have the same dtype", op.name, self.desc(),
           source.desc());
  return {d, contiguous(index).reshape({-1}), contiguous(source)};
}

}  // namespace

Tensor index_add(const Tensor& self0, int64_t dim, const Tensor& index0, const Tensor& source0, const Scalar& alpha) {
  Tensor self = self0, index = index0, source = source0;
  OpScope scope(kIndexAdd, self, index, source);
  RowWrite w = row_write(kIndexAdd, self, dim, index, source);
  Tensor out = contiguous(self).clone();
  const Tensor src = alpha.to_double() == 1 ? w.source : contiguous(w.source * alpha);
  if (src.numel()) {
    NoGradGuard no_grad;
    kernel::index_add(out.device(), rows(out, w.dim), w.index, rows(src, w.dim));
  }
  if (autograd::any_requires_grad({&self, &source}) && is_floating(out.dtype())) {
    const int64_t d = w.dim;
    autograd::record(kIndexAdd, out, {self, Tensor(), source}, {w.index}, [d, alpha](const Tensor& g, const Saved& s) {
      Tensor gs = index_select(g, d, s[0]);
      return Grads{g, Tensor(), alpha.to_double() == 1 ? gs : gs * alpha};
    });
  }
  return scope.finish(out);
}

Tensor index_copy(const Tensor& self0, int64_t dim, const Tensor& index0, const Tensor& source0) {
  Tensor self = self0, index = index0, source = source0;
  OpScope scope(kIndexCopy, self, index, source);
  RowWrite w = row_write(kIndexCopy, self, dim, index, source);
  Tensor out = contiguous(self).clone();
  if (w.source.numel()) {
    NoGradGuard no_grad;
    kernel::index_copy(out.device(), rows(out, w.dim), w.index, rows(w.source, w.dim));
  }
  if (autograd::any_requires_grad({&self, &source}) && is_floating(out.dtype())) {
    const int64_t d = w.dim;
    autograd::record(kIndexCopy, out, {self, Tensor(), source}, {w.index}, [d](const Tensor& g, const Saved& s) {
      // The copied rows take nothing from self: its gradient has them zeroed.
      Tensor gsrc = index_select(g, d, s[0]);
      return Grads{index_copy(g, d, s[0], zeros_like(gsrc)), Tensor(), gsrc};
    });
  }
  return scope.finish(out);
}

Tensor gather(const Tensor& self0, int64_t dim, const Tensor& index0) {
  Tensor self = self0, index = index0;
  OpScope scope(kGather, self, index);
  check_defined(kGather, self, "input");
  check_defined(kGather, index, "index");
  AG_CHECK(index.dim() == self.dim(), "gather: index {} must have the input's rank ({})", index.desc(), self.desc());
  const int64_t d = self.dim() == 0 ? 0 : wrap_dim(kGather.name, dim, self.dim());
  for (int64_t i = 0; i < self.dim(); ++i)
    AG_CHECK(i == d || index.size(i) <= self.size(i), "gather: index {} is larger than input {} in dim {}",
             index.desc(), self.desc(), i);
  check_index(kGather, index, self.dim() == 0 ? 1 : self.size(d), d, self);
  if (self.dim() == 0) return scope.finish(gather(self.reshape({1}), 0, index.reshape({1})).reshape({}));
  const Tensor idx = contiguous(index);
  Tensor out = empty(index.shape(), self.options());
  if (out.numel()) kernel::gather(out.device(), self, idx, out, d);
  if (autograd::any_requires_grad({&self}) && is_floating(self.dtype())) {
    autograd::record(kGather, out, {self, Tensor()}, {idx}, [d, shape = self.shape()](const Tensor& g, const Saved& s) {
      Tensor gx = zeros(shape, g.options());
      if (g.numel()) kernel::scatter_add(gx.device(), gx, s[0], g, d);
      return Grads{gx, Tensor()};
    });
  }
  return scope.finish(out);
}

Tensor scatter_add(const Tensor& self0, int64_t dim, const Tensor& index0, const Tensor& src0) {
  Tensor self = self0, index = index0, src = src0;
  OpScope scope(kScatterAdd, self, index, src);
  check_defined(kScatterAdd, self, "input");
  check_defined(kScatterAdd, index, "index");
  check_defined(kScatterAdd, src, "src");
  check_same_device(kScatterAdd, self, src);
  AG_CHECK(index.dim() == self.dim() && src.dim() == self.dim(),
           "scatter_add: input {}, index {} and src {} must have one rank", self.desc(), index.desc(), src.desc());
  AG_CHECK(src.dtype() == self.dtype(), "scatter_add: input {} and src {} must have the same dtype", self.desc(),
           src.desc());
  const int64_t d = self.dim() == 0 ? 0 : wrap_dim(kScatterAdd.name, dim, self.dim());
  for (int64_t i = 0; i < self.dim(); ++i)
    AG_CHECK(index.size(i) <= src.size(i) && (i == d || index.size(i) <= self.size(i)),
             "scatter_add: index {} must be no larger than src {} in every dim, and than input {} but in dim {}",
             index.desc(), src.desc(), self.desc(), d);
  check_index(kScatterAdd, index, self.dim() == 0 ? 1 : self.size(d), d, self);
  if (self.dim() == 0)
    return scope.finish(scatter_add(self.reshape({1}), 0, index.reshape({1}), src.reshape({1})).reshape({}));
  const Tensor idx = contiguous(index);
  Tensor out = contiguous(self).clone();
  if (idx.numel()) {
    NoGradGuard no_grad;
    kernel::scatter_add(out.device(), out, idx, src, d);
  }
  if (autograd::any_requires_grad({&self, &src}) && is_floating(out.dtype())) {
    autograd::record(kScatterAdd, out, {self, Tensor(), src}, {idx},
                     [d, src_shape = src.shape()](const Tensor& g, const Saved& s) {
                       // src's positions outside index's shape reach nothing: gradient 0.
                       Tensor picked = gather(g, d, s[0]);
                       if (picked.shape() == src_shape) return Grads{g, Tensor(), picked};
                       Tensor gs = zeros(src_shape, g.options());
                       Tensor part = gs;
                       for (int64_t i = 0; i < gs.dim(); ++i) part = narrow(part, i, 0, picked.size(i));
                       part.copy_(picked);
                       return Grads{g, Tensor(), gs};
                     });
  }
  return scope.finish(out);
}

Tensor index_put(const Tensor& self0, const std::vector<Tensor>& indices0, const Tensor& values0, bool accumulate) {
  std::vector<Tensor> all{self0, values0};
  for (const Tensor& t : indices0) all.push_back(t);
  OpScope scope(kIndexPut, all);
  const Tensor& self = all[0];
  const Tensor& values = all[1];
  const std::vector<Tensor> indices(all.begin() + 2, all.end());
  check_defined(kIndexPut, self, "input");
  check_defined(kIndexPut, values, "values");
  check_same_device(kIndexPut, self, values);
  const int64_t k = static_cast<int64_t>(indices.size());
  AG_CHECK(k >= 1 && k <= self.dim(), "index_put: {} index tensors for input {}", k, self.desc());
  // The index tensors broadcast together; each picks positions of one leading dim, and
  // together they pick rows of self viewed as [prod of the first k dims, rest...].
  Shape ishape;
  for (const Tensor& t : indices) {
    check_defined(kIndexPut, t, "index");
    AG_CHECK(t.dtype() == kInt64, "index_put: indices must be int64 (a bool mask: use where), got {}", t.desc());
    check_same_device(kIndexPut, self, t);
    ishape = broadcast_shapes(kIndexPut.name, ishape, t.shape());
  }
  Tensor flat = zeros(ishape, TensorOptions(kInt64).device(self.device()));
  int64_t rows_n = 1;
  for (int64_t i = 0; i < k; ++i) {
    const int64_t size = self.size(i);
    Tensor idx = indices[i];
    if (idx.is_cpu()) {
      for (int64_t v : contiguous(idx).to_vector<int64_t>())
        AG_CHECK(v >= -size && v < size, "index_put: index {} is out of range for dimension {} of size {} ({})", v, i,
                 size, self.desc());
    } else {
      // On the device: one out of range would pick another valid row of the flattened rows
      // (Note [Device-side errors] in cuda/device_error.h).
      kernel::check_index(idx.device(), contiguous(idx), -size, size, "index_put", "index");
    }
    idx = where(lt(idx, 0), idx + size, idx);  // negative indices count from the end, as PyTorch's
    flat = flat * size + idx;
    rows_n *= size;
  }
  Shape rest(self.shape().begin() + k, self.shape().end());
  Shape vshape = ishape;
  vshape.insert(vshape.end(), rest.begin(), rest.end());
  Shape src_rows{shape_numel(ishape)};
  src_rows.insert(src_rows.end(), rest.begin(), rest.end());
  Shape self_rows{rows_n};
  self_rows.insert(self_rows.end(), rest.begin(), rest.end());
  // One dtype, as PyTorch's (autocast, promote, unifies them first).
  AG_CHECK(values.dtype() == self.dtype(), "index_put: input {} and values {} must have the same dtype", self.desc(),
           values.desc());
  const Tensor& s = self;
  const Tensor v = expand(values, vshape).reshape(src_rows);
  const Tensor as_rows = s.reshape(self_rows), index = flat.reshape({-1});
  Tensor out = accumulate ? index_add(as_rows, 0, index, v) : index_copy(as_rows, 0, index, v);
  return scope.finish(out.reshape(self.shape()));
}

}  // namespace ampgrad
