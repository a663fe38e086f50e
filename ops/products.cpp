// Products composed of matrix products and elementwise ops: dot, vdot, tensordot, bilinear,
// cross and linalg::vecdot. Each is one record (dot to cross: category promote, as PyTorch's
// autocast lists: the inputs are cast to the widest dtype, never lowered; vecdot: on no list);
// autograd differentiates the ops inside.
#include <numeric>

#include <ampgrad/ops/internal.h>
#include <ampgrad/ops/nn_ops.h>
#include <ampgrad/ops/op_scope.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad {

using amp::Category;

namespace {

const OpInfo kDot{"dot", Category::promote, true, "mixes two inputs: both are cast to the wider dtype"};
const OpInfo kVdot{"vdot", Category::promote, true, "mixes two inputs: both are cast to the wider dtype"};
const OpInfo kTensordot{"tensordot", Category::promote, true, "mixes two inputs: both are cast to the wider dtype"};
const OpInfo kBilinear{"bilinear", Category::promote, true, "mixes three inputs: all are cast to the widest dtype"};
const OpInfo kCross{"cross", Category::promote, true, "mixes two inputs: both are cast to the wider dtype"};
const OpInfo kVecdot{"linalg_vecdot", Category::passthrough, true,
                     "on no autocast list (PyTorch's is a product and a sum): both inputs must share a dtype"};

Tensor dot_impl(const OpInfo& op, Tensor a, Tensor b) {
  OpScope scope(op, a, b);
  check_defined(op, a, "input");
  check_defined(op, b, "other");
  check_same_device(op, a, b);
  AG_CHECK(a.dim() == 1 && b.dim() == 1 && a.size(0) == b.size(0),
           "{}: expected two 1-D tensors of one size, got {} and {}", op.name, a.desc(), b.desc());
  AG_CHECK(a.dtype() == b.dtype(), "{}: expected both vectors to have the same dtype, got {} and {}", op.name,
           a.desc(), b.desc());
  const int64_t n = a.size(0);
  // Floating: one GEMM [1, n] @ [n, 1], products exact and summed in float32 (float64); integers: mul and sum.
  if (is_floating(a.dtype())) return scope.finish(mm(a.reshape({1, n}), b.reshape({n, 1})).reshape({}));
  return scope.finish(sum(a * b));
}

}  // namespace

Tensor dot(const Tensor& a, const Tensor& b) { return dot_impl(kDot, a, b); }
Tensor vdot(const Tensor& a, const Tensor& b) { return dot_impl(kVdot, a, b); }  // real tensors: dot

Tensor tensordot(const Tensor& a0, const Tensor& b0, const Shape& dims_a, const Shape& dims_b) {
  Tensor a = a0, b = b0;
  OpScope scope(kTensordot, a, b);
  check_defined(kTensordot, a, "a");
  check_defined(kTensordot, b, "b");
  check_same_device(kTensordot, a, b);
  AG_CHECK(dims_a.size() == dims_b.size(), "tensordot: {} dims of a against {} of b", dims_a.size(), dims_b.size());
  std::vector<bool> summed_a(a.dim(), false), summed_b(b.dim(), false);
  Shape pa, pb, free_shape;
  int64_t k = 1;
  for (size_t i = 0; i < dims_a.size(); ++i) {
    const int64_t da = wrap_dim(kTensordot.name, dims_a[i], a.dim()), db = wrap_dim(kTensordot.name, dims_b[i], b.dim());
    AG_CHECK(!summed_a[da] && !summed_b[db], "tensordot: a dim is contracted twice ({} and {})", shape_str(dims_a),
             shape_str(dims_b));
    AG_CHECK(a.size(da) == b.size(db), "tensordot: dim {} of a {} and dim {} of b {} differ in size", da, a.desc(), db,
             b.desc());
    summed_a[da] = summed_b[db] = true;
    k *= a.size(da);
  }
  // a as [free_a, contracted] and b as [contracted, free_b], in the order the dims were given.
  int64_t fa = 1, fb = 1;
  for (int64_t d = 0; d < a.dim(); ++d)
    if (!summed_a[d]) pa.push_back(d), free_shape.push_back(a.size(d)), fa *= a.size(d);
  for (int64_t da : dims_a) pa.push_back(wrap_dim(kTensordot.name, da, a.dim()));
  for (int64_t db : dims_b) pb.push_back(wrap_dim(kTensordot.name, db, b.dim()));
  for (int64_t d = 0; d < b.dim(); ++d)
    if (!summed_b[d]) pb.push_back(d), free_shape.push_back(b.size(d)), fb *= b.size(d);
  const DType dt = promote_types(a.dtype(), b.dtype());
  const Tensor am = permute(a.dtype() == dt ? a : a.to(dt), pa).reshape({fa, k});
  const Tensor bm = permute(b.dtype() == dt ? b : b.to(dt), pb).reshape({k, fb});
  return scope.finish(mm(am, bm).reshape(free_shape));
}

Tensor tensordot(const Tensor& a, const Tensor& b, int64_t dims) {
  AG_CHECK(dims >= 0 && dims <= a.dim() && dims <= b.dim(), "tensordot: cannot contract {} dims of {} and {}", dims,
           a.desc(), b.desc());
  Shape da, db;
  for (int64_t i = 0; i < dims; ++i) {
    da.push_back(a.dim() - dims + i);
    db.push_back(i);
  }
  return tensordot(a, b, da, db);
}

Tensor bilinear(const Tensor& x10, const Tensor& x20, const Tensor& weight0, const Tensor& bias0) {
  Tensor x1 = x10, x2 = x20, weight = weight0, bias = bias0;
  OpScope scope(kBilinear, x1, x2, weight, bias);
  check_defined(kBilinear, x1, "input1");
  check_defined(kBilinear, x2, "input2");
  check_defined(kBilinear, weight, "weight");
  AG_CHECK(weight.dim() == 3, "bilinear: expected weight [out, in1, in2], got {}", weight.desc());
  const int64_t o = weight.size(0), i1 = weight.size(1), i2 = weight.size(2);
  AG_CHECK(x1.dim() >= 1 && x1.size(-1) == i1 && x2.dim() >= 1 && x2.size(-1) == i2 &&
               Shape(x1.shape().begin(), x1.shape().end() - 1) == Shape(x2.shape().begin(), x2.shape().end() - 1),
           "bilinear: inputs {} and {} do not match weight {} ([*, in1], [*, in2], [out, in1, in2])", x1.desc(),
           x2.desc(), weight.desc());
  AG_CHECK(!bias.defined() || bias.shape() == Shape{o}, "bilinear: bias must be [{}], got {}", o, bias.desc());
  // y[n, o] = sum over i, j of x1[n, i] W[o, i, j] x2[n, j]: x1 @ W as [in1, out * in2], then a
  // sum over in2 against x2.
  Shape lead(x1.shape().begin(), x1.shape().end() - 1);
  const int64_t n = shape_numel(lead);
  const DType dt = promote_types(promote_types(x1.dtype(), x2.dtype()), weight.dtype());
  auto as = [dt](const Tensor& t) { return t.dtype() == dt ? t : t.to(dt); };
  const Tensor w = permute(as(weight), {1, 0, 2}).reshape({i1, o * i2});
  const Tensor t = mm(as(x1).reshape({n, i1}), w).view({n, o, i2});
  Tensor y = sum(t * unsqueeze(as(x2).reshape({n, i2}), 1), {2});
  if (bias.defined()) y = y + as(bias);
  lead.push_back(o);
  return scope.finish(y.reshape(lead));
}

Tensor cross(const Tensor& a0, const Tensor& b0, std::optional<int64_t> dim) {
  Tensor a = a0, b = b0;
  OpScope scope(kCross, a, b);
  check_defined(kCross, a, "input");
  check_defined(kCross, b, "other");
  check_same_device(kCross, a, b);
  const Shape shape = broadcast_shapes(kCross.name, a.shape(), b.shape());
  int64_t d = -1;
  if (dim) {
    d = wrap_dim(kCross.name, *dim, static_cast<int64_t>(shape.size()));
  } else {  // as torch.cross without dim: the first dim of size 3
    for (size_t i = 0; i < shape.size() && d < 0; ++i)
      if (shape[i] == 3) d = static_cast<int64_t>(i);
  }
  AG_CHECK(d >= 0 && shape[d] == 3, "cross: expected a dim of size 3{}, got {} and {}",
           dim ? fmt::format(" at dim {}", *dim) : std::string(), a.desc(), b.desc());
  const Tensor x = expand(a, shape), y = expand(b, shape);
  auto c = [&](const Tensor& t, int64_t i) { return select(t, d, i); };
  return scope.finish(stack({c(x, 1) * c(y, 2) - c(x, 2) * c(y, 1), c(x, 2) * c(y, 0) - c(x, 0) * c(y, 2),
                             c(x, 0) * c(y, 1) - c(x, 1) * c(y, 0)},
                            d));
}

Tensor linalg::vecdot(const Tensor& x0, const Tensor& y0, int64_t dim) {
  Tensor x = x0, y = y0;
  OpScope scope(kVecdot, x, y);
  check_defined(kVecdot, x, "x");
  check_defined(kVecdot, y, "y");
  check_same_device(kVecdot, x, y);
  AG_CHECK(x.dtype() == y.dtype(), "linalg_vecdot: expected x and y to have the same dtype, got {} and {}", x.desc(),
           y.desc());
  AG_CHECK(is_floating(x.dtype()), "linalg_vecdot: expected floating tensors, got {} and {}", x.desc(), y.desc());
  const Shape shape = broadcast_shapes(kVecdot.name, x.shape(), y.shape());
  AG_CHECK(!shape.empty(), "linalg_vecdot: expected tensors of at least one dim, got {} and {}", x.desc(), y.desc());
  const int64_t d = wrap_dim(kVecdot.name, dim, static_cast<int64_t>(shape.size()));
  return scope.finish(sum(x * y, {d}));
}

}  // namespace ampgrad
