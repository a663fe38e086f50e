// Convolution and window geometry shared by conv2d, the pooling ops and their kernels.
#pragma once

#include <cstdint>

namespace ampgrad {

struct Window2d {
  int64_t kh = 1, kw = 1;  // kernel
  int64_t sh = 1, sw = 1;  // stride
  int64_t ph = 0, pw = 0;  // zero padding on each side
  int64_t dh = 1, dw = 1;  // dilation
  int64_t out_h(int64_t h) const { return (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1; }
  int64_t out_w(int64_t w) const { return (w + 2 * pw - dw * (kw - 1) - 1) / sw + 1; }
};

struct Conv2dParams {
  Window2d window;   // kh, kw come from the weight
  int64_t groups = 1;
};

}  // namespace ampgrad
