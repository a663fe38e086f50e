// Tensor: shared storage + sizes + strides + offset (in elements) + dtype, and its autograd
// fields. Methods that compute are defined with the ops in ops/tensor_methods.cpp.
#pragma once

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ampgrad/core/dtype.h>
#include <ampgrad/core/error.h>
#include <ampgrad/core/scalar.h>
#include <ampgrad/core/shape.h>
#include <ampgrad/core/storage.h>
#include <ampgrad/core/tensor_options.h>

namespace ampgrad {

namespace autograd {
class Node;
}

class Tensor;

// The state behind a Tensor handle. Several handles (and views) may share one storage.
struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape sizes;
  Shape strides;
  int64_t offset = 0;  // in elements
  DType dtype = DType::Float32;

  // Autograd (Note [Autograd graph] in autograd/node.h).
  bool requires_grad = false;
  std::shared_ptr<autograd::Node> grad_fn;       // null for leaves
  std::shared_ptr<TensorImpl> grad;              // accumulated gradient of a leaf
  std::weak_ptr<autograd::Node> grad_accumulator;
  // Run after each accumulation into `grad` (leaves only; DistributedDataParallel's buckets).
  std::vector<std::function<void(const Tensor&)>> post_accumulate_grad_hooks;
  // Made by alias_with (a view, a detach): its storage came from another tensor. tracked_view:
  // a view autograd records, counted in storage->tracked_views() while it lives (Note
  // [In-place autograd] in ops/tensor_methods.cpp).
  bool is_view = false;
  bool tracked_view = false;

  TensorImpl() = default;
  TensorImpl(const TensorImpl&) = delete;
  TensorImpl& operator=(const TensorImpl&) = delete;
  ~TensorImpl() {
    if (tracked_view && storage) storage->count_tracked_view(-1);
  }
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Metadata.
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().sizes; }
  const Shape& sizes() const { return impl().sizes; }
  const Shape& strides() const { return impl().strides; }
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;
  int64_t dim() const { return static_cast<int64_t>(impl().sizes.size()); }
  int64_t numel() const { return shape_numel(impl().sizes); }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  bool is_cuda() const { return device().is_cuda(); }
  bool is_cpu() const { return device().is_cpu(); }
  bool is_floating_point() const { return is_floating(dtype()); }
  TensorOptions options() const { return TensorOptions().dtype(dtype()).device(device()); }
  int64_t storage_offset() const { return impl().offset; }
  bool is_contiguous() const;
  size_t element_size() const { return itemsize(dtype()); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  // The address of the first element (storage + offset), for code that reads or writes the
  // memory past ampgrad. On a CUDA tensor, first submits the work ampgrad holds back and waits
  // for it when there was any (Note [Raw access]).
  void* data_ptr() const;
  template <class T> T* data_ptr() const;
  uint32_t version() const { return impl().storage->version(); }
  void bump_version() const { impl().storage->bump_version(); }
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  TensorImpl* unsafe_impl() const { return impl_.get(); }
  // A reference that does not keep this tensor alive (caches keyed by a tensor's identity).
  std::weak_ptr<TensorImpl> weak_impl() const { return impl_; }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }
  // One-line description for error messages: "float32 [2, 3] on cpu".
  std::string desc() const;

  // Conversions.
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;
  Tensor to(DeviceType type) const { return to(Device(type)); }
  Tensor to(Device device, DType dtype) const;
  Tensor cpu() const { return to(Device(kCPU)); }
  Tensor cuda() const { return to(Device(kCUDA)); }
  Tensor contiguous() const;
  // The same values in channels-last (NHWC) memory, still indexed [N, C, H, W].
  Tensor to_channels_last() const;
  Tensor clone() const;
  template <class T> T item() const;
  template <class T> std::vector<T> to_vector() const;
  double item_double() const;
  int64_t item_int64() const;

  // Autograd.
  bool requires_grad() const { return impl().requires_grad; }
  Tensor& requires_grad_(bool on = true);
  const Tensor& requires_grad_(bool on = true) const;
  bool is_leaf() const { return impl().grad_fn == nullptr; }
  Tensor grad() const;
  void set_grad(const Tensor& g) const;
  // hook(this leaf) runs each time backward has accumulated into this leaf's grad.
  void register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const;
  const std::shared_ptr<autograd::Node>& grad_fn() const { return impl().grad_fn; }
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  Tensor detach() const;
  // Makes this tensor hold other's data (storage, geometry, dtype) while staying the same
  // object, so handles held elsewhere (an optimizer's) follow; as libtorch's set_data.
  void set_data(const Tensor& other) const;

  // Views and shapes.
  Tensor view(const Shape& shape) const;
  Tensor reshape(const Shape& shape) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor permute(const Shape& dims) const;
  Tensor t() const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor expand(const Shape& shape) const;
  Tensor squeeze(int64_t dim) const;
  Tensor squeeze() const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor index_select(int64_t dim, const Tensor& index) const;

  // Math.
  Tensor pow(const Scalar& exponent) const;
  Tensor pow(const Tensor& exponent) const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor abs() const;
  Tensor neg() const;
  Tensor relu() const;
  Tensor tanh() const;
  Tensor sigmoid() const;
  Tensor sum() const;
  Tensor sum(const Shape& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const Shape& dims, bool keepdim = false) const;
  Tensor matmul(const Tensor& other) const;
  Tensor mm(const Tensor& other) const;

  // In place; each bumps the version counter.
  Tensor& add_(const Tensor& other, const Scalar& alpha = 1);
  Tensor& add_(const Scalar& other);
  Tensor& sub_(const Tensor& other);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(const Scalar& other);
  Tensor& div_(const Scalar& other);
  Tensor& zero_();
  Tensor& fill_(const Scalar& value);
  Tensor& copy_(const Tensor& src);

  std::string str() const;  // printed like PyTorch

 private:
  const TensorImpl& impl() const {
    AG_CHECK(impl_ != nullptr, "tensor: this tensor is undefined (default-constructed or moved from)");
    return *impl_;
  }
  TensorImpl& impl() {
    AG_CHECK(impl_ != nullptr, "tensor: this tensor is undefined (default-constructed or moved from)");
    return *impl_;
  }
  std::shared_ptr<TensorImpl> impl_;
};

// Makes a tensor viewing `storage` with the given geometry.
Tensor make_tensor(std::shared_ptr<Storage> storage, Shape sizes, Shape strides, int64_t offset, DType dtype);
// Allocates an uninitialized contiguous tensor.
Tensor empty(const Shape& shape, TensorOptions options = {});
Tensor empty_like(const Tensor& t);
// True when t's elements fill a block of memory exactly once in some order of its dims
// (contiguous, channels-last, any transpose of those): PyTorch's non-overlapping-and-dense.
bool is_non_overlapping_and_dense(const Tensor& t);
// An uninitialized tensor laid out as t when t is non-overlapping and dense (PyTorch's
// preserve_format), contiguous otherwise.
Tensor empty_preserving_layout(const Tensor& t);
// A view of `t` sharing its storage (no autograd history).
Tensor alias_with(const Tensor& t, Shape sizes, Shape strides, int64_t offset);
// Marks `view`, which autograd records as a view of `base`, as counted in their storage's
// tracked_views() while it lives (Note [In-place autograd] in ops/tensor_methods.cpp); once.
void count_tracked_view(const Tensor& view, const Tensor& base);

// Note [Raw access]
// data_ptr() hands a tensor's address to code that reads or writes its memory past ampgrad: a
// kernel of one's own, cudaMemcpy, NCCL or cuDNN called directly. ampgrad holds some of its
// CUDA work back and submits it in batches (Note [Launch batches] in cuda/call_graph.h), so on a
// CUDA tensor data_ptr() first submits what its device holds and, if it held anything, waits for
// the device to finish. Every route then sees the work asked for before the call, as if each op
// had launched at once: a copy or kernel on any stream after cudaDeviceSynchronize(), and code
// that overwrites the memory after ampgrad's last read of it. Work already submitted is ordered
// as CUDA orders streams: behind it on ampgrad's stream (current_stream()), or after
// synchronize() (Note [CUDA stream] in cuda/runtime.h), as PyTorch's work is for code on another
// stream. The wait is one stream synchronization, only when calls were held; an op's own CUDA
// kernel takes current_stream() first (it submits) and then the pointers, and never waits
// (examples/custom_op.cpp). A pointer kept from before does not see what was held since: take
// it again, as the stream. ampgrad's own kernels queue on its stream behind anything held and
// take the address with detail::address(), which submits nothing.
namespace detail {
inline void* address(const Tensor& t) {
  const TensorImpl& impl = *t.unsafe_impl();
  auto* base = static_cast<char*>(impl.storage->data());
  return base ? base + impl.offset * static_cast<int64_t>(itemsize(impl.dtype)) : nullptr;
}
template <class T> T* address(const Tensor& t) { return static_cast<T*>(address(t)); }
}  // namespace detail

template <class T> T* Tensor::data_ptr() const {
  AG_CHECK(dtype_of<std::remove_cv_t<T>>() == dtype(), "data_ptr: tensor is {}, asked for {}", dtype_name(dtype()),
           dtype_name(dtype_of<std::remove_cv_t<T>>()));
  return static_cast<T*>(data_ptr());
}

template <class T> T Tensor::item() const {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    return static_cast<T>(item_int64());
  } else {
    return static_cast<T>(item_double());
  }
}

template <class T> std::vector<T> Tensor::to_vector() const {
  Tensor c = to(Device(kCPU), dtype_of<T>()).contiguous();
  std::vector<T> out(static_cast<size_t>(c.numel()));
  if (!out.empty()) std::memcpy(out.data(), c.data_ptr(), out.size() * sizeof(T));
  return out;
}

}  // namespace ampgrad

#include <iosfwd>
namespace ampgrad {
std::ostream& operator<<(std::ostream& os, const Tensor& t);
}  // namespace ampgrad

// fmt::print("{}", t) prints like PyTorch's print(t).
template <> struct fmt::formatter<ampgrad::Tensor> : fmt::formatter<std::string> {
  template <class Ctx> auto format(const ampgrad::Tensor& t, Ctx& ctx) const {
    return fmt::formatter<std::string>::format(t.str(), ctx);
  }
};
