// Tensor construction and metadata; computing methods are in ops/tensor_methods.cpp.
#include <ampgrad/core/tensor.h>

#include <ampgrad/core/device_hooks.h>
#include <ampgrad/core/dispatch.h>

#include <algorithm>
#include <vector>

namespace ampgrad {

int64_t Tensor::size(int64_t d) const { return shape()[wrap_dim("size", d, dim())]; }
int64_t Tensor::stride(int64_t d) const { return strides()[wrap_dim("stride", d, dim())]; }

bool Tensor::is_contiguous() const {
  if (numel() == 0) return true;  // as PyTorch: no element is out of place
  int64_t expected = 1;
  const auto& sz = shape();
  const auto& st = strides();
  for (size_t i = sz.size(); i-- > 0;) {
    if (sz[i] == 1) continue;
    if (st[i] != expected) return false;
    expected *= sz[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  const Device d = device();  // checks that the tensor is defined
  if (d.is_cuda()) before_raw_access(d);  // Note [Raw access]
  return detail::address(*this);
}

std::string Tensor::desc() const {
  if (!defined()) return "undefined tensor";
  return fmt::format("{} {} on {}", dtype_name(dtype()), shape_str(shape()), device().str());
}

Tensor make_tensor(std::shared_ptr<Storage> storage, Shape sizes, Shape strides, int64_t offset, DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->sizes = std::move(sizes);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor empty(const Shape& shape, TensorOptions options) {
  for (int64_t d : shape) AG_CHECK(d >= 0, "empty: negative dimension in shape {}", shape_str(shape));
  int64_t nbytes = 0;
  if (__builtin_mul_overflow(shape_numel(shape), static_cast<int64_t>(itemsize(options.dtype())), &nbytes))
    [[unlikely]] {
    const std::string op = CurrentOp::label();
    detail::throw_error(fmt::format("{}: shape {} of {} takes more bytes than an int64 can count (storage size "
                                    "calculation overflowed)",
                                    op.empty() ? "empty" : op, shape_str(shape), dtype_name(options.dtype())));
  }
  auto storage = std::make_shared<Storage>(static_cast<size_t>(nbytes), options.device());
  Tensor t = make_tensor(std::move(storage), shape, contiguous_strides(shape), 0, options.dtype());
  if (options.requires_grad()) t.requires_grad_(true);
  return t;
}

Tensor empty_like(const Tensor& t) { return empty(t.shape(), t.options()); }

void Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const {
  AG_CHECK(defined() && requires_grad() && is_leaf(),
           "register_post_accumulate_grad_hook: expected a leaf that requires grad, got {}", desc());
  impl_->post_accumulate_grad_hooks.push_back(std::move(hook));
}

bool is_non_overlapping_and_dense(const Tensor& t) {
  if (t.is_contiguous()) return true;
  const Shape& sz = t.shape();
  const Shape& st = t.strides();
  std::vector<size_t> order(sz.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return st[a] < st[b]; });
  int64_t expected = 1;
  for (size_t d : order) {
    if (sz[d] == 1) continue;
    if (st[d] != expected) return false;
    expected *= sz[d];
  }
  return true;
}

Tensor empty_preserving_layout(const Tensor& t) {
  if (t.is_contiguous() || !is_non_overlapping_and_dense(t)) return empty(t.shape(), t.options());
  Tensor block = empty({t.numel()}, t.options());
  return make_tensor(block.storage(), t.shape(), t.strides(), 0, t.dtype());  // fresh memory: not a view
}

void count_tracked_view(const Tensor& view, const Tensor& base) {
  TensorImpl* impl = view.unsafe_impl();
  if (impl->storage == base.storage() && !impl->tracked_view) {
    impl->tracked_view = true;
    impl->storage->count_tracked_view(1);
  }
}

Tensor alias_with(const Tensor& t, Shape sizes, Shape strides, int64_t offset) {
  Tensor out = make_tensor(t.storage(), std::move(sizes), std::move(strides), offset, t.dtype());
  out.unsafe_impl()->is_view = true;
  return out;
}

}  // namespace ampgrad
