// conv2d (CPU: im2col + gemm; CUDA: cuDNN) and unfold, the window op that pooling builds on.
#include "autograd/node.h"
#include "core/kernels.h"
#include "ops/internal.h"
#include "ops/nn_ops.h"
#include "ops/op_scope.h"
#include "ops/ops.h"

namespace ampgrad {

using autograd::Grads;
using Saved = std::vector<Tensor>;
using amp::Category;

namespace {
const OpInfo kConv2d{"conv2d", Category::lower, true, "tensor cores: float16/bfloat16 inputs with float32 accumulation"};
const OpInfo kUnfold{"unfold", Category::passthrough, true, "gathers values unchanged"};

void check_window(std::string_view op, const Tensor& x, const Window2d& w) {
  AG_CHECK(x.dim() == 4, "{}: expected a 4-D input [N, C, H, W], got {}", op, x.desc());
  AG_CHECK(w.kh > 0 && w.kw > 0 && w.sh > 0 && w.sw > 0 && w.dh > 0 && w.dw > 0 && w.ph >= 0 && w.pw >= 0,
           "{}: kernel, stride and dilation must be positive and padding non-negative", op);
  AG_CHECK(x.size(2) + 2 * w.ph >= w.dh * (w.kh - 1) + 1 && x.size(3) + 2 * w.pw >= w.dw * (w.kw - 1) + 1 &&
               w.out_h(x.size(2)) > 0 && w.out_w(x.size(3)) > 0,
           "{}: input {} is too small for kernel {}x{} (dilation {}x{}, padding {}x{})", op, shape_str(x.shape()),
           w.kh, w.kw, w.dh, w.dw, w.ph, w.pw);
}

// cols [N, C*kh*kw, L] of x, with pad_value outside the image.
Tensor im2col_raw(const Tensor& x, const Window2d& w, double pad_value) {
  const int64_t L = w.out_h(x.size(2)) * w.out_w(x.size(3));
  Tensor cols = empty({x.size(0), x.size(1) * w.kh * w.kw, L}, x.options());
  if (cols.numel()) kernel::im2col(cols.device(), x, cols, w, pad_value);
  return cols;
}

// The adjoint of im2col: cols [N, C*kh*kw, L] -> [N, C, H, W].
Tensor col2im_raw(const Tensor& cols, const Shape& x_shape, const Window2d& w) {
  Tensor out = empty(x_shape, cols.options());
  if (out.numel()) kernel::col2im(out.device(), cols.contiguous(), out, w);
  return out;
}

// The CPU implementation of conv2d's kernels (core/kernels.h): im2col and one GEMM per group,
// written with ops; outputs are copied into the tensors the op allocated.
// out[n] = weight_g @ cols[n] per group. weight [K, C/g, kh, kw].
void conv2d_forward_cpu(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
                        const Conv2dParams& p) {
  NoGradGuard no_grad;
  const int64_t n = x.size(0), k = weight.size(0), g = p.groups;
  Tensor cols = im2col_raw(x, p.window, 0.0);  // [N, C*kh*kw, L]
  const int64_t ckk = cols.size(1) / g;
  Tensor w2 = weight.reshape({g, k / g, ckk});
  std::vector<Tensor> outs;
  for (int64_t gi = 0; gi < g; ++gi) {
    Tensor cg = g == 1 ? cols : cols.narrow(1, gi * ckk, ckk);
    outs.push_back(matmul(w2.select(0, gi), cg));  // [N, K/g, L]
  }
  Tensor r = (g == 1 ? outs[0] : cat(outs, 1)).reshape({n, k, out.size(2), out.size(3)});
  if (bias.defined()) r = r + bias.reshape({1, -1, 1, 1});
  kernel::copy(out.device(), out, r);
}

void conv2d_backward_data_cpu(const Tensor& grad, const Tensor& weight, const Tensor& grad_in, const Conv2dParams& p) {
  if (grad_in.numel() == 0) return;
  NoGradGuard no_grad;
  const int64_t n = grad.size(0), k = weight.size(0), g = p.groups;
  Tensor gr = grad.reshape({n, k, grad.size(2) * grad.size(3)});  // [N, K, L]
  const int64_t ckk = weight.numel() / k;
  Tensor w2 = weight.reshape({g, k / g, ckk});
  std::vector<Tensor> gcols;
  for (int64_t gi = 0; gi < g; ++gi) {
    Tensor gg = g == 1 ? gr : gr.narrow(1, gi * (k / g), k / g);  // [N, K/g, L]
    gcols.push_back(matmul(w2.select(0, gi).t(), gg));            // [N, ckk, L]
  }
  kernel::copy(grad_in.device(), grad_in, col2im_raw(g == 1 ? gcols[0] : cat(gcols, 1), grad_in.shape(), p.window));
}

void conv2d_backward_weight_cpu(const Tensor& x, const Tensor& grad, const Tensor& grad_weight, const Conv2dParams& p) {
  if (grad_weight.numel() == 0) return;
  NoGradGuard no_grad;
  const int64_t n = x.size(0), k = grad_weight.size(0), g = p.groups;
  Tensor gr = grad.reshape({n, k, grad.size(2) * grad.size(3)});  // [N, K, L]
  Tensor cols = im2col_raw(x, p.window, 0.0);
  const int64_t ckk = grad_weight.numel() / k;
  std::vector<Tensor> gws;
  for (int64_t gi = 0; gi < g; ++gi) {
    Tensor gg = g == 1 ? gr : gr.narrow(1, gi * (k / g), k / g);
    Tensor cg = g == 1 ? cols : cols.narrow(1, gi * ckk, ckk);
    gws.push_back(sum(matmul(gg, cg.transpose(1, 2)), {0}));  // [K/g, ckk]
  }
  kernel::copy(grad_weight.device(), grad_weight, (g == 1 ? gws[0] : cat(gws, 0)).reshape(grad_weight.shape()));
}

AG_REGISTER_KERNEL(kernel::conv2d_forward, kCPU, conv2d_forward_cpu);
AG_REGISTER_KERNEL(kernel::conv2d_backward_data, kCPU, conv2d_backward_data_cpu);
AG_REGISTER_KERNEL(kernel::conv2d_backward_weight, kCPU, conv2d_backward_weight_cpu);

// Outputs are allocated in x's memory format, as cuDNN and PyTorch do.
Tensor empty_conv_out(const Tensor& x, const Shape& shape) {
  if (is_channels_last(x) && !x.is_contiguous()) return empty_channels_last(shape, x.options());
  return empty(shape, x.options());
}

}  // namespace

Tensor conv2d(const Tensor& x0, const Tensor& w0, const Tensor& b0, std::array<int64_t, 2> stride,
              std::array<int64_t, 2> padding, std::array<int64_t, 2> dilation, int64_t groups) {
  Tensor x = x0, w = w0, b = b0;
  OpScope scope(kConv2d, x, w, b);
  check_defined(kConv2d, x, "input");
  check_defined(kConv2d, w, "weight");
  AG_CHECK(w.dim() == 4, "conv2d: weight must be 4-D [out_channels, in_channels/groups, kh, kw], got {}", w.desc());
  AG_CHECK(x.dim() == 4, "conv2d: expected a 4-D input [N, C, H, W], got {}", x.desc());
  AG_CHECK(groups > 0 && x.size(1) % groups == 0 && w.size(0) % groups == 0,
           "conv2d: groups {} must divide the input channels {} and the output channels {}", groups, x.size(1),
           w.size(0));
  AG_CHECK(w.size(1) * groups == x.size(1),
           "conv2d: input {} has {} channels but weight {} expects {} (in_channels/groups {} x groups {})", x.desc(),
           x.size(1), shape_str(w.shape()), w.size(1) * groups, w.size(1), groups);
  check_same_device(kConv2d, x, w);
  AG_CHECK(x.dtype() == w.dtype() && is_floating(x.dtype()),
           "conv2d: input and weight must share a floating dtype, got {} and {}", x.desc(), w.desc());
  if (b.defined()) {
    check_same_device(kConv2d, x, b);
    AG_CHECK(b.dim() == 1 && b.size(0) == w.size(0) && b.dtype() == x.dtype(),
             "conv2d: bias must be [{}] of {}, got {}", w.size(0), dtype_name(x.dtype()), b.desc());
  }
  Conv2dParams p;
  p.window = {w.size(2), w.size(3), stride[0], stride[1], padding[0], padding[1], dilation[0], dilation[1]};
  p.groups = groups;
  check_window("conv2d", x, p.window);
  Shape out_shape{x.size(0), w.size(0), p.window.out_h(x.size(2)), p.window.out_w(x.size(3))};
  Tensor out = empty_conv_out(x, out_shape);
  if (out.numel()) {
    NoGradGuard no_grad;
    kernel::conv2d_forward(out.device(), x, w, b, out, p);
  }
  if (autograd::any_requires_grad({&x, &w, &b})) {
    // Only the gradients an input asked for at record time (a first layer's image needs none).
    const bool has_bias = b.defined() && b.requires_grad(), need_x = x.requires_grad(), need_w = w.requires_grad();
    autograd::record(kConv2d, out, {x, w, b}, {x, w}, [p, has_bias, need_x, need_w](const Tensor& g, const Saved& s) {
      const Tensor& x = s[0];
      const Tensor& w = s[1];
      Tensor gb = has_bias ? sum(g, {0, 2, 3}) : Tensor();
      const Tensor gc = is_channels_last(x) ? g.to_channels_last() : g.contiguous();
      Tensor gx, gw;
      if (need_x) {
        gx = empty_conv_out(x, x.shape());
        kernel::conv2d_backward_data(gx.device(), gc, w, gx, p);
      }
      if (need_w) {
        gw = is_channels_last(w) && !w.is_contiguous() ? empty_channels_last(w.shape(), w.options())
                                                        : empty(w.shape(), w.options());
        kernel::conv2d_backward_weight(gw.device(), x, gc, gw, p);
      }
      return Grads{gx, gw, gb};
    });
  }
  return scope.finish(out);
}

Tensor unfold(const Tensor& x0, const Window2d& w, double pad_value) {
  Tensor x = x0;
  OpScope scope(kUnfold, x);
  check_defined(kUnfold, x, "input");
  check_window("unfold", x, w);
  AG_CHECK(is_floating(x.dtype()), "unfold: expected a floating input, got {}", x.desc());
  Tensor cols;
  {
    NoGradGuard no_grad;
    cols = im2col_raw(x, w, pad_value);
  }
  if (autograd::any_requires_grad({&x})) {
    Shape shape = x.shape();
    autograd::record(kUnfold, cols, {x}, {}, [shape, w](const Tensor& g, const Saved&) {
      return Grads{col2im_raw(g, shape, w)};
    });
  }
  return scope.finish(cols);
}

}  // namespace ampgrad
