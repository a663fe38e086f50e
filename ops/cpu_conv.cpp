// CPU reference kernels for convolution geometry (im2col, col2im) and dropout masks.
#include <type_traits>

#include <ampgrad/core/kernels.h>
#include <ampgrad/ops/cpu_loop.h>
#include <ampgrad/ops/cpu_values.h>

namespace ampgrad::cpu {

void im2col(const Tensor& x, const Tensor& cols, const Window2d& w, double pad_value) {
  visit_floating(x, "im2col", [&](auto tag) {
    using T = decltype(tag);
    const int64_t n_ = x.size(0), c_ = x.size(1), h = x.size(2), wd = x.size(3);
    const int64_t oh = w.out_h(h), ow = w.out_w(wd), L = oh * ow;
    const int64_t sn = x.stride(0), sc = x.stride(1), sy = x.stride(2), sx = x.stride(3);
    const T* px = static_cast<const T*>(x.data_ptr());
    T* pc = static_cast<T*>(cols.data_ptr());
    const T pad = static_cast<T>(static_cast<float>(pad_value));
    for (int64_t n = 0; n < n_; ++n)
      for (int64_t c = 0; c < c_; ++c)
        for (int64_t i = 0; i < w.kh; ++i)
          for (int64_t j = 0; j < w.kw; ++j) {
            T* row = pc + ((n * c_ + c) * w.kh * w.kw + i * w.kw + j) * L;
            for (int64_t oy = 0; oy < oh; ++oy) {
              const int64_t y = oy * w.sh - w.ph + i * w.dh;
              for (int64_t ox = 0; ox < ow; ++ox) {
                const int64_t xx = ox * w.sw - w.pw + j * w.dw;
                row[oy * ow + ox] =
                    (y >= 0 && y < h && xx >= 0 && xx < wd) ? px[n * sn + c * sc + y * sy + xx * sx] : pad;
              }
            }
          }
  });
}

void col2im(const Tensor& cols, const Tensor& out, const Window2d& w) {
  visit_floating(out, "col2im", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const int64_t n_ = out.size(0), c_ = out.size(1), h = out.size(2), wd = out.size(3);
    const int64_t oh = w.out_h(h), ow = w.out_w(wd), L = oh * ow;
    const T* pc = static_cast<const T*>(cols.data_ptr());
    T* po = static_cast<T*>(out.data_ptr());
    // Each pixel gathers the window positions that read it, in a fixed order.
    for (int64_t n = 0; n < n_; ++n)
      for (int64_t c = 0; c < c_; ++c)
        for (int64_t y = 0; y < h; ++y)
          for (int64_t xx = 0; xx < wd; ++xx) {
            A acc = 0;
            for_each_window_reading(w, y, xx, oh, ow, [&](int64_t i, int64_t j, int64_t oy, int64_t ox) {
              acc += static_cast<A>(pc[((n * c_ + c) * w.kh * w.kw + i * w.kw + j) * L + oy * ow + ox]);
            });
            po[((n * c_ + c) * h + y) * wd + xx] = static_cast<T>(acc);
          }
  });
}

void dropout_mask(const Tensor& out, double p_keep, double scale, uint64_t seed, uint64_t offset) {
  visit_floating(out, "dropout_mask", [&](auto tag) {
    using T = decltype(tag);
    T* po = static_cast<T*>(out.data_ptr());
    const float keep = static_cast<float>(p_keep);
    T on;
    if constexpr (std::is_same_v<T, double>) on = scale;
    else on = static_cast<T>(static_cast<float>(scale));
    const T off = static_cast<T>(0.0f);
    for (int64_t i = 0; i < out.numel(); ++i)
      po[i] = hash_uniform(seed, offset + static_cast<uint64_t>(i)) < keep ? on : off;
  });
}

AG_REGISTER_KERNEL(kernel::im2col, kCPU, im2col);
AG_REGISTER_KERNEL(kernel::col2im, kCPU, col2im);
AG_REGISTER_KERNEL(kernel::dropout_mask, kCPU, dropout_mask);

}  // namespace ampgrad::cpu
