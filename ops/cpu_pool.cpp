// CPU reference kernels of max pooling (core/kernels.h; Note [Max pooling] in ops/pool.cpp).
#include <cmath>

#include <ampgrad/core/kernels.h>
#include <ampgrad/ops/cpu_loop.h>
#include <ampgrad/ops/cpu_values.h>

namespace ampgrad::cpu {

namespace {
// A 4-d tensor's strides, read once per kernel (Tensor::stride() per element was 7% of the CPU
// CNN step).
struct Strides4 {
  int64_t s0, s1, s2, s3;
  explicit Strides4(const Tensor& t) : s0(t.stride(0)), s1(t.stride(1)), s2(t.stride(2)), s3(t.stride(3)) {}
  int64_t operator()(int64_t n, int64_t c, int64_t y, int64_t x) const { return n * s0 + c * s1 + y * s2 + x * s3; }
};
}  // namespace

void max_pool2d_forward(const Tensor& x, const Window2d& w, const Tensor& out, const Tensor& indices) {
  const int64_t nb = x.size(0), ch = x.size(1), h = x.size(2), wd = x.size(3), oh = out.size(2), ow = out.size(3);
  int32_t* pi = static_cast<int32_t*>(indices.data_ptr());
  const Strides4 sx(x), so(out), si(indices);
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
                const double v = to_double(px[sx(n, c, iy, ix)]);
                if (arg < 0 || v > best || (std::isnan(v) && !std::isnan(best))) {
                  best = v;
                  arg = iy * wd + ix;
                }
              }
            po[so(n, c, oy, ox)] = from_double<T>(best);
            pi[si(n, c, oy, ox)] = static_cast<int32_t>(arg);
          }
  });
}

void max_pool2d_backward(const Tensor& g, const Tensor& indices, const Window2d& w, const Tensor& grad_x) {
  const int64_t nb = grad_x.size(0), ch = grad_x.size(1), h = grad_x.size(2), wd = grad_x.size(3);
  const int64_t oh = g.size(2), ow = g.size(3);
  const int32_t* pi = static_cast<const int32_t*>(indices.data_ptr());
  const Strides4 si(indices), sg(g), sx(grad_x);
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
              if (pi[si(n, c, oy, ox)] == iy * wd + ix) sum += to_double(pg[sg(n, c, oy, ox)]);
            });
            px[sx(n, c, iy, ix)] = from_double<T>(sum);
          }
  });
}

AG_REGISTER_KERNEL(kernel::max_pool2d_forward, kCPU, max_pool2d_forward);
AG_REGISTER_KERNEL(kernel::max_pool2d_backward, kCPU, max_pool2d_backward);

}  // namespace ampgrad::cpu
