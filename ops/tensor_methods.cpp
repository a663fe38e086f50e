// Tensor's computing methods and operators, each a thin call into an op.
#include <ampgrad/autograd/node.h>
#include <ampgrad/ops/internal.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad {

Tensor Tensor::to(DType d) const { return ampgrad::to(*this, device(), d); }
Tensor Tensor::to(Device dev) const { return ampgrad::to(*this, dev, dtype()); }
Tensor Tensor::to(Device dev, DType d) const { return ampgrad::to(*this, dev, d); }
Tensor Tensor::contiguous() const { return ampgrad::contiguous(*this); }
Tensor Tensor::clone() const { return clone_op(*this); }

double Tensor::item_double() const {
  AG_CHECK(numel() == 1, "item: only a tensor with one element can be converted to a number, got {}", desc());
  return to_vector<double>()[0];
}
int64_t Tensor::item_int64() const {
  AG_CHECK(numel() == 1, "item: only a tensor with one element can be converted to a number, got {}", desc());
  return to_vector<int64_t>()[0];
}

Tensor& Tensor::requires_grad_(bool on) {
  std::as_const(*this).requires_grad_(on);
  return *this;
}
const Tensor& Tensor::requires_grad_(bool on) const {
  AG_CHECK(!on || is_floating(dtype()), "requires_grad_: only floating tensors can require grad, got {}",
           desc());
  AG_CHECK(is_leaf() || on,
           "requires_grad_: cannot turn off requires_grad of a non-leaf tensor ({}); use detach()", desc());
  unsafe_impl()->requires_grad = on;
  return *this;
}

Tensor Tensor::grad() const {
  const auto& g = unsafe_impl()->grad;
  return g ? Tensor(g) : Tensor();
}
void Tensor::set_grad(const Tensor& g) const {
  if (g.defined())
    AG_CHECK(g.shape() == shape() && g.device() == device(), "set_grad: gradient {} does not match tensor {}",
             g.desc(), desc());
  unsafe_impl()->grad = g.defined() ? g.impl_ptr() : nullptr;
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  autograd::run_backward(*this, gradient, retain_graph);
}

Tensor Tensor::detach() const { return alias_with(*this, shape(), strides(), storage_offset()); }

void Tensor::set_data(const Tensor& other) const {
  AG_CHECK(other.defined(), "set_data: the new data is an undefined tensor");
  AG_CHECK(is_leaf(), "set_data: only leaf tensors can take new data, got {}", desc());
  TensorImpl* self = unsafe_impl();
  const TensorImpl* src = other.unsafe_impl();
  if (self->dtype != src->dtype || self->storage->device() != src->storage->device()) self->grad = nullptr;
  self->storage = src->storage;
  self->sizes = src->sizes;
  self->strides = src->strides;
  self->offset = src->offset;
  self->dtype = src->dtype;
}

Tensor Tensor::view(const Shape& s) const { return ampgrad::view(*this, s); }
Tensor Tensor::reshape(const Shape& s) const { return ampgrad::reshape(*this, s); }
Tensor Tensor::flatten(int64_t s, int64_t e) const { return ampgrad::flatten(*this, s, e); }
Tensor Tensor::transpose(int64_t d0, int64_t d1) const { return ampgrad::transpose(*this, d0, d1); }
Tensor Tensor::permute(const Shape& dims) const { return ampgrad::permute(*this, dims); }
Tensor Tensor::t() const { return ampgrad::t(*this); }
Tensor Tensor::narrow(int64_t d, int64_t s, int64_t n) const { return ampgrad::narrow(*this, d, s, n); }
Tensor Tensor::slice(int64_t d, int64_t s, int64_t e, int64_t st) const { return ampgrad::slice(*this, d, s, e, st); }
Tensor Tensor::select(int64_t d, int64_t i) const { return ampgrad::select(*this, d, i); }
Tensor Tensor::expand(const Shape& s) const { return ampgrad::expand(*this, s); }
Tensor Tensor::squeeze(int64_t d) const { return ampgrad::squeeze(*this, d); }
Tensor Tensor::squeeze() const { return ampgrad::squeeze(*this); }
Tensor Tensor::unsqueeze(int64_t d) const { return ampgrad::unsqueeze(*this, d); }
Tensor Tensor::index_select(int64_t d, const Tensor& i) const { return ampgrad::index_select(*this, d, i); }

Tensor Tensor::pow(const Scalar& e) const { return ampgrad::pow(*this, e); }
Tensor Tensor::pow(const Tensor& e) const { return ampgrad::pow(*this, e); }
Tensor Tensor::exp() const { return ampgrad::exp(*this); }
Tensor Tensor::log() const { return ampgrad::log(*this); }
Tensor Tensor::sqrt() const { return ampgrad::sqrt(*this); }
Tensor Tensor::abs() const { return ampgrad::abs(*this); }
Tensor Tensor::neg() const { return ampgrad::neg(*this); }
Tensor Tensor::relu() const { return ampgrad::relu(*this); }
Tensor Tensor::tanh() const { return ampgrad::tanh(*this); }
Tensor Tensor::sigmoid() const { return ampgrad::sigmoid(*this); }
Tensor Tensor::sum() const { return ampgrad::sum(*this); }
Tensor Tensor::sum(const Shape& d, bool k) const { return ampgrad::sum(*this, d, k); }
Tensor Tensor::mean() const { return ampgrad::mean(*this); }
Tensor Tensor::mean(const Shape& d, bool k) const { return ampgrad::mean(*this, d, k); }
Tensor Tensor::matmul(const Tensor& o) const { return ampgrad::matmul(*this, o); }
Tensor Tensor::mm(const Tensor& o) const { return ampgrad::mm(*this, o); }

namespace {
// In-place arithmetic: compute out of place, then write back into this tensor's storage.
Tensor& assign_result(Tensor& self, const char* op, const Tensor& result) {
  check_inplace(op, self);
  AG_CHECK(result.shape() == self.shape(), "{}: result {} cannot be written into {} in place", op, result.desc(),
           self.desc());
  NoGradGuard no_grad;
  return copy_into(self, result);
}

// Note [In-place autograd]
// In grad mode, an in-place op on a tensor autograd tracks (a non-leaf that requires grad), or
// with a source it tracks (plain.mul_(w)), is recorded as PyTorch records it: the tensor's
// history moves onto the op's node. The op runs out of place on the tensor as it is (on a
// copy with its history, where the op's backward reads it: mul_), its values are written into
// the tensor, and the tensor takes the result's node (rebase). Its version goes up, so a node
// that saved the tensor before (exp saves its output) raises at backward that a saved tensor
// was modified, as PyTorch's version counter does. A leaf that requires grad is refused
// (check_inplace), as in PyTorch. So is a tracked in-place write to a view whose base or
// sibling is alive (TensorImpl::is_view), and to a tensor with live views that autograd tracks
// (Storage::tracked_views(), counted by the view ops): the other's history would not see the
// write (PyTorch rebases views onto their base; ampgrad does not). A node's saved copy of its
// output (exp's) is an untracked alias and does not count: the version check catches that one.
// copy_ and fill_ record a node of their own (copy_tracked, fill_tracked in ops/copy.cpp). Untracked
// in-place ops (no grad mode, nothing requires grad) run as one kernel (Note [In-place
// arithmetic] in ops/binary.cpp).
bool tracked_inplace(const char* op, const Tensor& self, const Tensor* other = nullptr) {
  if (!autograd::grad_mode_enabled()) return false;
  if (!self.requires_grad() && !(other != nullptr && other->defined() && other->requires_grad())) return false;
  check_inplace(op, self);
  const TensorImpl& impl = *self.unsafe_impl();
  const bool view_of_live = impl.is_view && self.storage().use_count() > 1;
  const int other_views = self.storage()->tracked_views() - (impl.tracked_view ? 1 : 0);
  AG_CHECK(!view_of_live && other_views == 0,
           "{}: in-place operation that autograd records on {}, which shares its memory with another tensor "
           "({}): that tensor's history would not see the write; use the out-of-place form",
           op, self.desc(), view_of_live ? "it is a view" : "it has views that autograd tracks");
  return true;
}

// The values of `result` into self, and its node as self's history (Note [In-place autograd]).
Tensor& rebase(Tensor& self, const char* op, Tensor result) {
  AG_CHECK(result.shape() == self.shape(), "{}: result {} cannot be written into {} in place", op, result.desc(),
           self.desc());
  AG_CHECK(is_floating(self.dtype()), "{}: result type {} cannot be written into {}, which cannot take a gradient",
           op, dtype_name(result.dtype()), self.desc());
  if (result.dtype() != self.dtype()) result = result.to(self.dtype());
  AG_INTERNAL_ASSERT(result.grad_fn() != nullptr, "{}: a tracked in-place result without a node", op);
  {
    NoGradGuard no_grad;
    copy_into(self, result);
  }
  TensorImpl* impl = self.unsafe_impl();
  impl->grad_fn = result.grad_fn();
  impl->requires_grad = true;
  return self;
}

}  // namespace

// One kernel into this tensor where it can (Note [In-place arithmetic] in ops/binary.cpp).
Tensor& Tensor::add_(const Tensor& o, const Scalar& alpha) {
  if (tracked_inplace("add_", *this, &o)) return rebase(*this, "add_", ampgrad::add(*this, o, alpha));
  check_inplace("add_", *this);
  if (alpha.to_double() == 1 && binary_inplace(BinaryKind::Add, *this, o)) return *this;
  return assign_result(*this, "add_", ampgrad::add(*this, o, alpha));
}
Tensor& Tensor::add_(const Scalar& o) {
  if (tracked_inplace("add_", *this)) return rebase(*this, "add_", ampgrad::add(*this, o));
  check_inplace("add_", *this);
  if (scalar_inplace(UnaryKind::AddScalar, *this, o.to_double()))
    return *this;
  return assign_result(*this, "add_", ampgrad::add(*this, o));
}
Tensor& Tensor::sub_(const Tensor& o) {
  if (tracked_inplace("sub_", *this, &o)) return rebase(*this, "sub_", ampgrad::sub(*this, o));
  check_inplace("sub_", *this);
  if (binary_inplace(BinaryKind::Sub, *this, o)) return *this;
  return assign_result(*this, "sub_", ampgrad::sub(*this, o));
}
Tensor& Tensor::mul_(const Tensor& o) {
  // mul's backward reads both factors: it gets a copy of this tensor's values as they are.
  if (tracked_inplace("mul_", *this, &o)) return rebase(*this, "mul_", ampgrad::mul(clone_op(*this), o));
  check_inplace("mul_", *this);
  if (binary_inplace(BinaryKind::Mul, *this, o)) return *this;
  return assign_result(*this, "mul_", ampgrad::mul(*this, o));
}
Tensor& Tensor::mul_(const Scalar& o) {
  if (tracked_inplace("mul_", *this)) return rebase(*this, "mul_", ampgrad::mul(*this, o));
  check_inplace("mul_", *this);
  if (scalar_inplace(UnaryKind::MulScalar, *this, o.to_double()))
    return *this;
  return assign_result(*this, "mul_", ampgrad::mul(*this, o));
}
Tensor& Tensor::div_(const Scalar& o) {
  if (tracked_inplace("div_", *this)) return rebase(*this, "div_", ampgrad::div(*this, o));
  check_inplace("div_", *this);
  return assign_result(*this, "div_", ampgrad::div(*this, o));
}
Tensor& Tensor::zero_() { return fill_(0); }
Tensor& Tensor::fill_(const Scalar& v) {
  if (tracked_inplace("fill_", *this)) return fill_tracked(*this, v.to_double());
  check_inplace("fill_", *this);
  fill_into(*this, v.to_double());
  bump_version();
  return *this;
}
Tensor& Tensor::copy_(const Tensor& src) {
  // A non-floating destination cannot take a gradient: a plain copy, as PyTorch's.
  if (is_floating(dtype()) && tracked_inplace("copy_", *this, &src)) return copy_tracked(*this, src);
  return copy_into(*this, src);
}

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, const Scalar& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Scalar& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Scalar& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Scalar& b) { return div(a, b); }
Tensor operator+(const Scalar& a, const Tensor& b) { return add(b, a); }
Tensor operator-(const Scalar& a, const Tensor& b) { return rsub(b, a); }
Tensor operator*(const Scalar& a, const Tensor& b) { return mul(b, a); }
Tensor operator/(const Scalar& a, const Tensor& b) { return rdiv(b, a); }
Tensor operator-(const Tensor& a) { return neg(a); }

}  // namespace ampgrad
