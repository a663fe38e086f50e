// Casts, device moves, clone and copy_: the ops that move data between dtypes and devices.
#include <ampgrad/autograd/node.h>
#include <ampgrad/core/kernels.h>
#include <ampgrad/ops/internal.h>
#include <ampgrad/ops/op_scope.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad {

namespace {
const OpInfo kTo{"to", amp::Category::passthrough, true, "a cast: autocast inserts these, it never changes them", {}, false, kMovesFloat8};
const OpInfo kClone{"clone", amp::Category::passthrough, true, "a copy keeps its dtype", {}, false, kMovesFloat8};
const OpInfo kCopy{"copy_", amp::Category::passthrough, true, "writes into an existing tensor of its own dtype", {}, false, kMovesFloat8};

// Copies between devices through a contiguous staging tensor in dst's dtype on src's side
// (the cast runs where the data is) and, when dst is not contiguous, one on dst's side.
void copy_across_devices(const Tensor& dst, const Tensor& src) {
  Tensor staged = empty(dst.shape(), TensorOptions(dst.dtype()).device(src.device()));
  kernel::copy(src.device(), staged, broadcast_to(src, dst.shape()));
  Tensor target = dst.is_contiguous() ? dst : empty(dst.shape(), dst.options());
  const Device accelerator = dst.is_cpu() ? src.device() : dst.device();
  kernel::copy_across_devices(accelerator, target, staged);
  if (!target.is_same(dst)) kernel::copy(dst.device(), dst, target);
}

void copy_impl(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  if (dst.device() == src.device()) {
    kernel::copy(dst.device(), dst, broadcast_to(src, dst.shape()));
  } else {
    copy_across_devices(dst, src);
  }
}
}  // namespace

void check_inplace(std::string_view op, const Tensor& t) {
  AG_CHECK(!(autograd::grad_mode_enabled() && t.requires_grad() && t.is_leaf()),
           "{}: in-place operation on a leaf that requires grad ({}); use the out-of-place form, or wrap the "
           "update in NoGradGuard (as optimizers do)",
           op, t.desc());
}

namespace {
// Gives the cast `out` of `a` its autograd edge (when `a` requires grad).
void record_cast(const Tensor& a, const Tensor& out) {
  if (!autograd::any_requires_grad({&a})) return;
  const Device src_device = a.device();
  // Note [Leaf casts]
  // A cast's backward on one device passes the gradient on as it is (the dtype is the
  // receiver's business: Node::takes_grad_dtype), so a cast of a leaf (autocast's copy of a
  // parameter, each step) needs no node of its own: the copy's gradient edge is the leaf's
  // accumulator, which widens or narrows what arrives. One node and one engine step fewer per
  // parameter per step, which a small network's step feels.
  if (a.is_leaf() && out.device() == src_device) {
    autograd::share_gradient_edge(out, a);
    return;
  }
  // Moves the gradient back to the source device only: the engine restores the dtype, or
  // the source's accumulator widens it while adding (Note [Gradient accumulation]).
  autograd::record(kTo, out, {a}, {}, [src_device](const Tensor& g, const std::vector<Tensor>&) {
    return autograd::Grads{g.device() == src_device ? g : to(g, src_device, g.dtype())};
  });
  static_cast<autograd::FunctionNode&>(*out.grad_fn()).cast = true;
}
}  // namespace

Tensor to(const Tensor& a0, Device device, DType dtype) {
  Tensor a = a0;
  OpScope scope(kTo, a);
  check_defined(kTo, a, "input");
  if (a.device() == device && a.dtype() == dtype) return scope.finish(a);
  Tensor out = empty(a.shape(), TensorOptions(dtype).device(device));
  copy_impl(out, a);
  if (is_floating(dtype) && is_floating(a.dtype())) record_cast(a, out);
  return scope.finish(out);
}

Tensor to_reusing(const Tensor& a0, const Tensor& copy) {
  Tensor a = a0;
  OpScope scope(kTo, a);
  AG_INTERNAL_ASSERT(a.shape() == copy.shape() && a.device() == copy.device() && is_floating(a.dtype()) &&
                         is_floating(copy.dtype()),
                     "to_reusing: {} is not a cast of {}", copy.desc(), a.desc());
  Tensor out = alias_with(copy, copy.shape(), copy.strides(), copy.storage_offset());
  record_cast(a, out);
  return scope.finish(out);
}

Tensor clone_op(const Tensor& a0) {
  Tensor a = a0;
  OpScope scope(kClone, a);
  Tensor out = empty(a.shape(), a.options());
  copy_impl(out, a);
  if (autograd::any_requires_grad({&a}))
    autograd::record(kClone, out, {a}, {}, [](const Tensor& g, const std::vector<Tensor>&) {
      return autograd::Grads{g};
    });
  return scope.finish(out);
}

Tensor contiguous(const Tensor& a) { return a.is_contiguous() ? a : clone_op(a); }

Tensor& copy_into(Tensor& dst, const Tensor& src) {
  Tensor s = src;
  OpScope scope(kCopy, s);
  check_inplace(kCopy.name, dst);
  AG_CHECK(shape_numel(broadcast_shapes(kCopy.name, s.shape(), dst.shape())) == dst.numel(),
           "copy_: source {} cannot be broadcast to destination {}", s.desc(), dst.desc());
  copy_impl(dst, s);
  dst.bump_version();
  return dst;
}

// Note [In-place autograd] in ops/tensor_methods.cpp: the old values reach nothing (a zero
// gradient into dst's history, as PyTorch's CopyBackwards and FillBackward give), src the
// gradient (summed over its broadcast and cast by the engine, moved here).
Tensor& copy_tracked(Tensor& dst, const Tensor& src) {
  const std::vector<Tensor> inputs{dst, src};  // dst's edge: its history before the write
  {
    NoGradGuard no_grad;
    copy_into(dst, src);
  }
  autograd::record(kCopy, dst, inputs, {}, [src_device = src.device()](const Tensor& g, const std::vector<Tensor>&) {
    return autograd::Grads{zeros_like(g), g.device() == src_device ? g : g.to(src_device)};
  });
  return dst;
}

Tensor& fill_tracked(Tensor& dst, double value) {
  const std::vector<Tensor> inputs{dst};
  fill_into(dst, value);
  dst.bump_version();
  autograd::record(kCopy, dst, inputs, {}, [](const Tensor& g, const std::vector<Tensor>&) {
    return autograd::Grads{zeros_like(g)};
  });
  return dst;
}

void fill_into(const Tensor& dst, double value) {
  if (dst.numel()) kernel::fill(dst.device(), dst, value);
}

}  // namespace ampgrad
