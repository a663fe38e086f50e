// CPU reference kernels of max pooling (core/kernels.h; Note [Max pooling] in ops/pool.cpp).
#include <cmath>

#include <ampgrad/core/kernels.h>
#include <ampgrad/ops/cpu_loop.h>
#include <ampgrad/ops/cpu_values.h>

namespace ampgrad::cpu {

namespace {
int64_t offset4(const Tensor& t, int64_t n, int64_t c, int64_t y, int64_t x) {
  return n * t.stride(0) + c * t.stride(1) + y * t.stride(2) + x * t.stride(3);
}
}  // namespace

void max_pool2d_forward(const Tensor& x, const Window2d& w, const Tensor& out, const Tensor& indices) {
  const int64_t nb = x.size(0), ch = x.size(1), h = x.size(2), wd = x.size(3), oh = out.size(2), ow = out.size(3);
  int32_t* pi = static_cast<int32_t*>(indices.data_ptr());
  visit_floating(x, "max_pool2d", [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x.data_ptr());
    T* po = static_cast<T*>(out.data_ptr());
    for (int64_t n = 0; n < nb; ++n)
      for (int64_t c = 0; c < ch; ++c)
        for (int64_t oy = 0; oy < oh; ++oy)
          for (int64_t ox = 0; ox < ow; ++ox) {
            double best = -INFINITY;
            int64_t arg = -1;
            for (int64_t i = 0; i < w.kh; ++i)
              for (int64_t j = 0; j < w.kw; ++j) {
                const int64_t iy = oy * w.sh - w.ph + i * w.dh, ix = ox * w.sw - w.pw + j * w.dw;
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                const double v = to_double(px[offset4(x, n, c, iy, ix)]);
                if (arg < 0 || v > best || (std::isnan(v) && !std::isnan(best))) {
                  best = v;
                  arg = iy * wd + ix;
                }
              }
            po[offset4(out, n, c, oy, ox)] = from_double<T>(best);
            pi[offset4(indices, n, c, oy, ox)] = static_cast<int32_t>(arg);
          }
  });
}

void max_pool2d_backward(const Tensor& g, const Tensor& indices, const Window2d& w, const Tensor& grad_x) {
  const int64_t nb = grad_x.size(0), ch = grad_x.size(1), h = grad_x.size(2), wd = grad_x.size(3);
  const int64_t oh = g.size(2), ow = g.size(3);
  const int32_t* pi = static_cast<const int32_t*>(indices.data_ptr());
  visit_floating(g, "max_pool2d backward", [&](auto tag) {
    using T = decltype(tag);
    const T* pg = static_cast<const T*>(g.data_ptr());
    T* px = static_cast<T*>(grad_x.data_ptr());
    for (int64_t n = 0; n < nb; ++n)
      for (int64_t c = 0; c < ch; ++c)
        for (int64_t iy = 0; iy < h; ++iy)
          for (int64_t ix = 0; ix < wd; ++ix) {
            double sum = 0;  // the gradients of the windows whose maximum (iy, ix) was
            for_each_window_reading(w, iy, ix, oh, ow, [&](int64_t, int64_t, int64_t oy, int64_t ox) {
              if (pi[offset4(indices, n, c, oy, ox)] == iy * wd + ix) sum += to_double(pg[offset4(g, n, c, oy, ox)]);
            });
            px[offset4(grad_x, n, c, iy, ix)] = from_double<T>(sum);
          }
  });
}

AG_REGISTER_KERNEL(kernel::max_pool2d_forward, kCPU, max_pool2d_forward);
AG_REGISTER_KERNEL(kernel::max_pool2d_backward, kCPU, max_pool2d_backward);

}  // namespace ampgrad::cpu
