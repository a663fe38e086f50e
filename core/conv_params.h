// Convolution and window geometry shared by the convolutions, the pooling ops and their kernels.
#pragma once

#include <array>
#include <cstddef>
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

// A convolution over 2 or 3 spatial dims (conv1d runs as a 2-D one of height 1, as PyTorch's
// cuDNN path does): x [N, C, (D,) H, W], weight [K, C/groups, (kd,) kh, kw], y [N, K, ...].
// The kernel sizes come from the weight; the arrays hold the spatial dims in order, the first
// `spatial` entries used. A transposed convolution runs as this convolution's backward data
// pass, the one that maps its output to its input (Note [Convolution ops] in ops/conv.cpp).
struct ConvParams {
  int64_t spatial = 2;
  std::array<int64_t, 3> stride{1, 1, 1}, padding{0, 0, 0}, dilation{1, 1, 1};
  int64_t groups = 1;
  // The output size along spatial dim d of an input of size `in` and a kernel of size `k`.
  int64_t out_size(size_t d, int64_t in, int64_t k) const {
    return (in + 2 * padding[d] - dilation[d] * (k - 1) - 1) / stride[d] + 1;
  }
};

}  // namespace ampgrad
