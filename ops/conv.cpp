// The convolutions (conv1d, conv2d, conv3d) and transposed convolutions (conv_transpose1d,
// 2d, 3d): one implementation over the three kernels of core/kernels.h (Note [Convolution
// ops]); and unfold, the window op that pooling builds on.
#include <algorithm>
#include <limits>

#include <ampgrad/autograd/node.h>
#include <ampgrad/core/kernels.h>
#include <ampgrad/ops/internal.h>
#include <ampgrad/ops/nn_ops.h>
#include <ampgrad/ops/op_scope.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad {

using autograd::Grads;
using Saved = std::vector<Tensor>;
using amp::Category;

// Note [Convolution ops]
// Six records, one implementation. The kernels take 4-D or 5-D tensors (ConvParams in
// core/conv_params.h): conv1d runs as a 2-D convolution of height 1 on views of its tensors
// (as PyTorch's cuDNN path), so cuDNN's plans, benchmark mode and call graphs serve it as
// they serve conv2d. A transposed convolution is the adjoint of the convolution that maps its
// output back to its input: its forward is that convolution's backward-data pass, its input
// gradient that convolution's forward, its weight gradient the backward-filter pass with the
// roles of input and output swapped; the weight [C_in, C_out/groups, k...] is that
// convolution's weight as it stands. output_padding makes the output larger by less than the
// stride (the sizes a stride's floor division gives the same input size for); the extra rows
// get what the weights reach there. An unbatched input (one dim fewer) is a batch of one.
// Outputs keep a 4-D input's memory format (NCHW or channels-last), as cuDNN and PyTorch do.

namespace {
constexpr const char* kReason = "tensor cores: float16/bfloat16 inputs with float32 accumulation";
const OpInfo kConv1d{"conv1d", Category::lower, true, kReason};
const OpInfo kConv2d{"conv2d", Category::lower, true, kReason};
const OpInfo kConv3d{"conv3d", Category::lower, true, kReason};
const OpInfo kConvT1d{"conv_transpose1d", Category::lower, true, kReason};
const OpInfo kConvT2d{"conv_transpose2d", Category::lower, true, kReason};
const OpInfo kConvT3d{"conv_transpose3d", Category::lower, true, kReason};
const OpInfo kUnfold{"unfold", Category::passthrough, true, "gathers values unchanged"};

using Arr3 = std::array<int64_t, 3>;

// What one call asked for, spatial dims as the user sees them (1, 2 or 3).
struct ConvCall {
  const OpInfo* info;
  int64_t spatial;
  bool transposed;
  Arr3 stride, padding, dilation, output_padding;
  int64_t groups;
};

const char* layout_name(int64_t spatial) {
  return spatial == 1 ? "[N, C, L]" : (spatial == 2 ? "[N, C, H, W]" : "[N, C, D, H, W]");
}

std::string arr_str(const Arr3& a, int64_t n) {
  return shape_str(Shape(a.begin(), a.begin() + n));
}

void check_call(const ConvCall& c, const Tensor& x, const Tensor& w, const Tensor& b) {
  const std::string_view op = c.info->name;
  const int64_t sp = c.spatial;
  check_defined(*c.info, x, "input");
  check_defined(*c.info, w, "weight");
  AG_CHECK(x.dim() == sp + 2 || x.dim() == sp + 1, "{}: expected a {}-D input {} (or {}-D unbatched), got {}", op,
           sp + 2, layout_name(sp), sp + 1, x.desc());
  const int64_t cd = x.dim() - sp - 1;  // the channel dim: 1, or 0 unbatched
  AG_CHECK(w.dim() == sp + 2, "{}: weight must be {}-D [{}, k...], got {}", op, sp + 2,
           c.transposed ? "in_channels, out_channels/groups" : "out_channels, in_channels/groups", w.desc());
  check_same_device(*c.info, x, w);
  AG_CHECK(x.dtype() == w.dtype() && is_floating(x.dtype()),
           "{}: input and weight must share a floating dtype, got {} and {}", op, x.desc(), w.desc());
  const int64_t g = c.groups;
  AG_CHECK(g > 0, "{}: groups must be positive, got {}", op, g);
  if (c.transposed) {
    AG_CHECK(w.size(0) == x.size(cd),
             "{}: input {} has {} channels but weight {} expects {} (weight is [in_channels, out_channels/groups, "
             "k...])",
             op, x.desc(), x.size(cd), shape_str(w.shape()), w.size(0));
    AG_CHECK(x.size(cd) % g == 0, "{}: groups {} must divide the input channels {}", op, g, x.size(cd));
  } else {
    AG_CHECK(w.size(0) % g == 0, "{}: groups {} must divide the output channels {} of weight {}", op, g, w.size(0),
             shape_str(w.shape()));
    AG_CHECK(w.size(1) * g == x.size(cd),
             "{}: input {} has {} channels but weight {} expects {} (in_channels/groups {} x groups {})", op,
             x.desc(), x.size(cd), shape_str(w.shape()), w.size(1) * g, w.size(1), g);
  }
  const int64_t out_channels = c.transposed ? w.size(1) * g : w.size(0);
  if (b.defined()) {
    check_same_device(*c.info, x, b);
    AG_CHECK(b.dim() == 1 && b.size(0) == out_channels && b.dtype() == x.dtype(), "{}: bias must be [{}] of {}, got {}",
             op, out_channels, dtype_name(x.dtype()), b.desc());
  }
  for (size_t i = 0; i < static_cast<size_t>(sp); ++i) {
    // One check per argument, each naming it, with PyTorch's words.
    AG_CHECK(c.stride[i] > 0, "{}: stride {}: non-positive stride is not supported", op, arr_str(c.stride, sp));
    AG_CHECK(c.padding[i] >= 0, "{}: padding {}: negative padding is not supported", op, arr_str(c.padding, sp));
    AG_CHECK(c.dilation[i] > 0, "{}: dilation {}: dilation should be greater than zero", op, arr_str(c.dilation, sp));
    if (c.transposed) {
      // PyTorch also takes stride <= output_padding < dilation; ampgrad does not (the output
      // rows past the stride's reach would need a padded pass).
      AG_CHECK(c.output_padding[i] >= 0 && c.output_padding[i] < c.stride[i],
               "{}: output_padding {} must be non-negative and smaller than the stride {}", op,
               arr_str(c.output_padding, sp), arr_str(c.stride, sp));
    } else {
      // In 128 bits: arguments past int64's reach are compared, not wrapped.
      const __int128 reach = static_cast<__int128>(c.dilation[i]) * (w.size(2 + static_cast<int64_t>(i)) - 1) + 1;
      AG_CHECK(x.size(cd + 1 + static_cast<int64_t>(i)) + 2 * static_cast<__int128>(c.padding[i]) >= reach,
               "{}: input {} (padded by {}) is smaller than the kernel {} (dilation {}) along spatial dim {}", op,
               shape_str(x.shape()), arr_str(c.padding, sp), shape_str(Shape(w.shape().begin() + 2, w.shape().end())),
               arr_str(c.dilation, sp), i);
    }
  }
}

Shape out_shape(const ConvCall& c, const Tensor& x, const Tensor& w) {
  Shape s{x.size(0), c.transposed ? w.size(1) * c.groups : w.size(0)};
  for (size_t i = 0; i < static_cast<size_t>(c.spatial); ++i) {
    const int64_t in = x.size(2 + static_cast<int64_t>(i)), k = w.size(2 + static_cast<int64_t>(i));
    // conv_out_size and conv_transpose_out_size in 128 bits: an output size past int64 is an
    // error here, not a wrapped size.
    using I = __int128;
    const I size = c.transposed ? (I(in) - 1) * c.stride[i] - 2 * I(c.padding[i]) + I(c.dilation[i]) * (k - 1) +
                                      c.output_padding[i] + 1
                                : (I(in) + 2 * I(c.padding[i]) - I(c.dilation[i]) * (k - 1) - 1) / c.stride[i] + 1;
    AG_CHECK(size <= std::numeric_limits<int64_t>::max(),
             "{}: the output size along spatial dim {} overflows int64 (input {}, stride {}, padding {}, dilation {})",
             c.info->name, i, shape_str(x.shape()), arr_str(c.stride, c.spatial), arr_str(c.padding, c.spatial),
             arr_str(c.dilation, c.spatial));
    s.push_back(static_cast<int64_t>(size));
  }
  AG_CHECK(std::all_of(s.begin() + 2, s.end(), [](int64_t v) { return v > 0; }),
           "{}: input {} gives an empty output {} (stride {}, padding {}, dilation {})", c.info->name,
           shape_str(x.shape()), shape_str(s), arr_str(c.stride, c.spatial), arr_str(c.padding, c.spatial),
           arr_str(c.dilation, c.spatial));
  return s;
}

// The kernels' parameters: a 1-D call runs as 2-D with a height of 1.
ConvParams kernel_params(const ConvCall& c) {
  ConvParams p;
  p.groups = c.groups;
  if (c.spatial == 1) {
    p.spatial = 2;
    p.stride = {1, c.stride[0], 1};
    p.padding = {0, c.padding[0], 0};
    p.dilation = {1, c.dilation[0], 1};
  } else {
    p.spatial = c.spatial;
    p.stride = c.stride;
    p.padding = c.padding;
    p.dilation = c.dilation;
  }
  return p;
}

// A 3-D tensor as the 4-D view of height 1 the kernels take; others as they are. A view
// outside autograd: writes through it land in t.
Tensor kernel_view(const Tensor& t) {
  if (t.dim() != 3) return t;
  NoGradGuard no_grad;
  return t.unsqueeze(2);
}

// A new tensor of `shape` in `like`'s memory format (channels-last stays channels-last).
Tensor empty_like_format(const Tensor& like, const Shape& shape) {
  if (like.dim() == 4 && is_channels_last(like) && !like.is_contiguous()) return empty_channels_last(shape, like.options());
  return empty(shape, like.options());
}

// g in the layout the kernels like best for x's format.
Tensor grad_layout(const Tensor& g, const Tensor& x) {
  // A contiguous x of one channel (or 1x1 planes) has NHWC strides too: it stays NCHW.
  return g.dim() == 4 && is_channels_last(x) && !x.is_contiguous() ? g.to_channels_last() : g.contiguous();
}

// out += bias over the channel dim.
Tensor add_bias(const Tensor& out, const Tensor& b) {
  Shape st(static_cast<size_t>(out.dim()), 0);
  st[1] = b.stride(0);
  kernel::binary(out.device(), BinaryKind::Add, out, alias_with(b, out.shape(), st, b.storage_offset()), out);
  return out;
}

Tensor convolution(const ConvCall& c, const Tensor& x0, const Tensor& w0, const Tensor& b0) {
  Tensor x = x0, w = w0, b = b0;
  OpScope scope(*c.info, x, w, b);
  check_call(c, x, w, b);
  if (x.dim() == c.spatial + 1)  // unbatched: a batch of one (the inner call is not the outermost)
    return scope.finish(convolution(c, x.unsqueeze(0), w, b).squeeze(0));
  const ConvParams p = kernel_params(c);
  Tensor out = empty_like_format(x, out_shape(c, x, w));
  if (out.numel()) {
    NoGradGuard no_grad;
    const Tensor xk = kernel_view(x), wk = kernel_view(w), ok = kernel_view(out);
    if (!c.transposed) {
      kernel::conv_forward(out.device(), xk, wk, b, ok, p);
    } else {
      kernel::conv_backward_data(out.device(), xk, wk, ok, p);
      if (b.defined()) add_bias(out, b);
    }
  }
  if (autograd::any_requires_grad({&x, &w, &b})) {
    // Only the gradients an input asked for at record time (a first layer's image needs none).
    const bool has_bias = b.defined() && b.requires_grad(), need_x = x.requires_grad(), need_w = w.requires_grad();
    const bool transposed = c.transposed;
    autograd::record(*c.info, out, {x, w, b}, {x, w},
                     [p, has_bias, need_x, need_w, transposed](const Tensor& g, const Saved& s) {
      const Tensor& x = s[0];
      const Tensor& w = s[1];
      std::vector<int64_t> not_channels{0};
      for (int64_t d = 2; d < g.dim(); ++d) not_channels.push_back(d);
      Tensor gb = has_bias ? sum(g, not_channels) : Tensor();
      const Tensor gk = kernel_view(grad_layout(g, x)), xk = kernel_view(x), wk = kernel_view(w);
      Tensor gx, gw;
      if (need_x) {
        gx = empty_like_format(x, x.shape());
        if (transposed) kernel::conv_forward(gx.device(), gk, wk, Tensor(), kernel_view(gx), p);
        else kernel::conv_backward_data(gx.device(), gk, wk, kernel_view(gx), p);
      }
      if (need_w) {
        gw = empty_like_format(w, w.shape());
        if (transposed) kernel::conv_backward_weight(gw.device(), gk, xk, kernel_view(gw), p);
        else kernel::conv_backward_weight(gw.device(), xk, gk, kernel_view(gw), p);
      }
      return Grads{gx, gw, gb};
    });
  }
  return scope.finish(out);
}

Arr3 arr(int64_t v) { return {v, 0, 0}; }
template <size_t N> Arr3 arr(const std::array<int64_t, N>& a) {
  Arr3 r{0, 0, 0};
  std::copy(a.begin(), a.end(), r.begin());
  return r;
}
}  // namespace

Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride, int64_t padding,
              int64_t dilation, int64_t groups) {
  return convolution({&kConv1d, 1, false, arr(stride), arr(padding), arr(dilation), arr(0), groups}, x, weight, bias);
}
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, std::array<int64_t, 2> stride,
              std::array<int64_t, 2> padding, std::array<int64_t, 2> dilation, int64_t groups) {
  return convolution({&kConv2d, 2, false, arr(stride), arr(padding), arr(dilation), arr(0), groups}, x, weight, bias);
}
Tensor conv3d(const Tensor& x, const Tensor& weight, const Tensor& bias, std::array<int64_t, 3> stride,
              std::array<int64_t, 3> padding, std::array<int64_t, 3> dilation, int64_t groups) {
  return convolution({&kConv3d, 3, false, arr(stride), arr(padding), arr(dilation), arr(0), groups}, x, weight, bias);
}
Tensor conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride, int64_t padding,
                        int64_t output_padding, int64_t groups, int64_t dilation) {
  return convolution({&kConvT1d, 1, true, arr(stride), arr(padding), arr(dilation), arr(output_padding), groups}, x,
                     weight, bias);
}
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias, std::array<int64_t, 2> stride,
                        std::array<int64_t, 2> padding, std::array<int64_t, 2> output_padding, int64_t groups,
                        std::array<int64_t, 2> dilation) {
  return convolution({&kConvT2d, 2, true, arr(stride), arr(padding), arr(dilation), arr(output_padding), groups}, x,
                     weight, bias);
}
Tensor conv_transpose3d(const Tensor& x, const Tensor& weight, const Tensor& bias, std::array<int64_t, 3> stride,
                        std::array<int64_t, 3> padding, std::array<int64_t, 3> output_padding, int64_t groups,
                        std::array<int64_t, 3> dilation) {
  return convolution({&kConvT3d, 3, true, arr(stride), arr(padding), arr(dilation), arr(output_padding), groups}, x,
                     weight, bias);
}

// ---- unfold -----------------------------------------------------------------------------

namespace {
void check_window(std::string_view op, const Tensor& x, const Window2d& w) {
  AG_CHECK(x.dim() == 4, "{}: expected a 4-D input [N, C, H, W], got {}", op, x.desc());
  AG_CHECK(w.kh > 0 && w.kw > 0 && w.sh > 0 && w.sw > 0 && w.dh > 0 && w.dw > 0 && w.ph >= 0 && w.pw >= 0,
           "{}: kernel, stride and dilation must be positive and padding non-negative", op);
  AG_CHECK(x.size(2) + 2 * w.ph >= w.dh * (w.kh - 1) + 1 && x.size(3) + 2 * w.pw >= w.dw * (w.kw - 1) + 1 &&
               w.out_h(x.size(2)) > 0 && w.out_w(x.size(3)) > 0,
           "{}: input {} is too small for kernel {}x{} (dilation {}x{}, padding {}x{})", op, shape_str(x.shape()),
           w.kh, w.kw, w.dh, w.dw, w.ph, w.pw);
}
}  // namespace

Tensor unfold(const Tensor& x0, const Window2d& w, double pad_value) {
  Tensor x = x0;
  OpScope scope(kUnfold, x);
  check_defined(kUnfold, x, "input");
  check_window("unfold", x, w);
  AG_CHECK(is_floating(x.dtype()), "unfold: expected a floating input, got {}", x.desc());
  Tensor cols = empty({x.size(0), x.size(1) * w.kh * w.kw, w.out_h(x.size(2)) * w.out_w(x.size(3))}, x.options());
  if (cols.numel()) {
    NoGradGuard no_grad;
    kernel::im2col(cols.device(), x, cols, w, pad_value);
  }
  if (autograd::any_requires_grad({&x})) {
    Shape shape = x.shape();
    autograd::record(kUnfold, cols, {x}, {}, [shape, w](const Tensor& g, const Saved&) {
      Tensor out = empty(shape, g.options());
      if (out.numel()) kernel::col2im(out.device(), g.contiguous(), out, w);
      return Grads{out};
    });
  }
  return scope.finish(cols);
}

}  // namespace ampgrad
