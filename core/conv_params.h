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
// Output sizes along one spatial dim, as PyTorch's convolutions: a convolution of an input of
// size `in` with a kernel of size k, and the transposed convolution that inverts it.
inline int64_t conv_out_size(int64_t in, int64_t k, int64_t stride, int64_t padding, int64_t dilation) {
  return (in + 2 * padding - dilation * (k - 1) - 1) / stride + 1;
}
inline int64_t conv_transpose_out_size(int64_t in, int64_t k, int64_t stride, int64_t padding, int64_t dilation,
                                       int64_t output_padding) {
  return (in - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1;
}

struct ConvParams {
  int64_t spatial = 2;
  std::array<int64_t, 3> stride{1, 1, 1}, padding{0, 0, 0}, dilation{1, 1, 1};
  int64_t groups = 1;
  // The output size along spatial dim d of an input of size `in` and a kernel of size `k`.
  int64_t out_size(size_t d, int64_t in, int64_t k) const {
    return conv_out_size(in, k, stride[d], padding[d], dilation[d]);
  }
};

}  // namespace ampgrad
