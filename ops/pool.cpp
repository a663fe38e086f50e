// Pooling: max (kernels of its own), average over windows (built on unfold), and adaptive
// average pooling.
#include <cmath>
#include <limits>

#include <ampgrad/autograd/node.h>
#include <ampgrad/core/kernels.h>
#include <ampgrad/ops/internal.h>
#include <ampgrad/ops/nn_ops.h>
#include <ampgrad/ops/op_scope.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad {

using amp::Category;

namespace {
const OpInfo kMaxPool2d{"max_pool2d", Category::passthrough, true, "exact in any dtype"};
const OpInfo kAvgPool2d{"avg_pool2d", Category::passthrough, true, "a short sum, accumulated in float32"};
const OpInfo kAdaptiveAvgPool2d{"adaptive_avg_pool2d", Category::passthrough, true,
                                "a short sum, accumulated in float32"};

Window2d pool_window(std::array<int64_t, 2> k, std::array<int64_t, 2> s, std::array<int64_t, 2> p,
                     std::array<int64_t, 2> d) {
  // stride 0 means "the kernel size", PyTorch's default.
  return {k[0], k[1], s[0] ? s[0] : k[0], s[1] ? s[1] : k[1], p[0], p[1], d[0], d[1]};
}

// PyTorch's checks of a pooling window, and its output size in 128 bits (an input or a window
// past int64's reach is an error, not a wrapped size).
void check_pool_padding(std::string_view op, const Window2d& w) {
  AG_CHECK(w.kh > 0 && w.kw > 0, "{}: kernel size {}x{} must be greater than zero", op, w.kh, w.kw);
  AG_CHECK(w.sh > 0 && w.sw > 0, "{}: stride {}x{} should be greater than zero", op, w.sh, w.sw);
  AG_CHECK(w.dh > 0 && w.dw > 0, "{}: dilation {}x{} should be greater than zero", op, w.dh, w.dw);
  AG_CHECK(w.ph >= 0 && w.pw >= 0 && w.ph * 2 <= w.kh && w.pw * 2 <= w.kw,
           "{}: padding {}x{} must be non-negative and at most half the kernel {}x{}", op, w.ph, w.pw, w.kh, w.kw);
  using I = __int128;
  AG_CHECK(I(w.dh) * (w.kh - 1) < std::numeric_limits<int64_t>::max() / 2 &&
               I(w.dw) * (w.kw - 1) < std::numeric_limits<int64_t>::max() / 2,
           "{}: the window {}x{} with dilation {}x{} is past int64's reach", op, w.kh, w.kw, w.dh, w.dw);
}

// [N, C, H, W] -> windows [N, C, kh*kw, oh*ow].
Tensor windows(const Tensor& x, const Window2d& w, double pad_value) {
  return unfold(x, w, pad_value).view({x.size(0), x.size(1), w.kh * w.kw, -1});
}
}  // namespace

Tensor max_pool2d(const Tensor& x0, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride,
                  std::array<int64_t, 2> padding, std::array<int64_t, 2> dilation) {
  Tensor x = x0;
  OpScope scope(kMaxPool2d, x);
  check_defined(kMaxPool2d, x, "input");
  Window2d w = pool_window(kernel, stride, padding, dilation);
  check_pool_padding("max_pool2d", w);
  AG_CHECK(x.dim() == 4, "max_pool2d: expected a 4-D input [N, C, H, W], got {}", x.desc());
  const Shape os{x.size(0), x.size(1), w.out_h(x.size(2)), w.out_w(x.size(3))};
  AG_CHECK(os[2] > 0 && os[3] > 0, "max_pool2d: input {} is smaller than the window {}x{}", x.desc(), w.kh, w.kw);
  if (!is_floating(x.dtype()) || x.size(2) * x.size(3) > INT32_MAX) {
    Tensor out = max(windows(x, w, -INFINITY), 2).first;
    return scope.finish(out.view(os));
  }
  // Note [Max pooling]
  // max_pool2d was unfold (a copy of every window) and a max reduction with indices; its
  // backward, the max's scatter and unfold's adjoint: about 40 % of the CNN's step on the
  // H200. It is one kernel each way now: each output finds its window's maximum (NaN wins,
  // then the first of equal values, as the reduction did) and keeps its position in the
  // plane (int32); backward, each input adds the gradients of the windows whose maximum it
  // was (a gather: deterministic, no atomics). A channels-last input gives a channels-last
  // output, as in PyTorch.
  const bool cl = !x.is_contiguous() && is_channels_last(x);  // ambiguous strides (1x1 maps) are NCHW
  Tensor out = cl ? empty_channels_last(os, x.options()) : empty(os, x.options());
  Tensor idx = cl ? empty_channels_last(os, x.options().dtype(kInt32)) : empty(os, x.options().dtype(kInt32));
  kernel::max_pool2d_forward(out.device(), x, w, out, idx);
  if (autograd::any_requires_grad({&x})) {
    autograd::record(kMaxPool2d, out, {x}, {idx}, [w, shape = x.shape(), cl](const Tensor& g, const std::vector<Tensor>& s) {
      Tensor gx = cl ? empty_channels_last(shape, g.options()) : empty(shape, g.options());
      kernel::max_pool2d_backward(gx.device(), g, s[0], w, gx);
      return autograd::Grads{gx};
    });
  }
  return scope.finish(out);
}

Tensor avg_pool2d(const Tensor& x0, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride,
                  std::array<int64_t, 2> padding) {
  Tensor x = x0;
  OpScope scope(kAvgPool2d, x);
  check_defined(kAvgPool2d, x, "input");
  Window2d w = pool_window(kernel, stride, padding, {1, 1});
  check_pool_padding("avg_pool2d", w);
  AG_CHECK(x.dim() == 4, "avg_pool2d: expected a 4-D input [N, C, H, W], got {}", x.desc());
  Tensor out = mean(windows(x, w, 0.0), {2});
  return scope.finish(out.view({x.size(0), x.size(1), w.out_h(x.size(2)), w.out_w(x.size(3))}));
}

Tensor adaptive_avg_pool2d(const Tensor& x0, std::array<int64_t, 2> output_size) {
  Tensor x = x0;
  OpScope scope(kAdaptiveAvgPool2d, x);
  check_defined(kAdaptiveAvgPool2d, x, "input");
  AG_CHECK(x.dim() == 4, "adaptive_avg_pool2d: expected a 4-D input [N, C, H, W], got {}", x.desc());
  const int64_t h = x.size(2), wd = x.size(3), oh = output_size[0], ow = output_size[1];
  AG_CHECK(oh > 0 && ow > 0, "adaptive_avg_pool2d: output size must be positive, got {}x{}", oh, ow);
  if (h % oh == 0 && wd % ow == 0) {  // even bins: one pooling window
    Window2d w{h / oh, wd / ow, h / oh, wd / ow, 0, 0, 1, 1};
    return scope.finish(mean(windows(x, w, 0.0), {2}).view({x.size(0), x.size(1), oh, ow}));
  }
  // Uneven bins, as PyTorch: rows [floor(i*h/oh), ceil((i+1)*h/oh)).
  std::vector<Tensor> rows;
  for (int64_t i = 0; i < oh; ++i) {
    const int64_t y0 = i * h / oh, y1 = ((i + 1) * h + oh - 1) / oh;
    std::vector<Tensor> cols;
    for (int64_t j = 0; j < ow; ++j) {
      const int64_t x0_ = j * wd / ow, x1 = ((j + 1) * wd + ow - 1) / ow;
      cols.push_back(mean(x.narrow(2, y0, y1 - y0).narrow(3, x0_, x1 - x0_), {2, 3}));
    }
    rows.push_back(stack(cols, 2));
  }
  return scope.finish(stack(rows, 2));
}

}  // namespace ampgrad
