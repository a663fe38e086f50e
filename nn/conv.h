// The convolution layers, as torch.nn's: Conv1d, Conv2d, Conv3d, ConvTranspose1d,
// ConvTranspose2d, ConvTranspose3d. Parameters `weight` and `bias` with PyTorch's shapes
// and names (a PyTorch state_dict loads), initialized as PyTorch's reset_parameters.
#pragma once

#include <array>

#include <ampgrad/core/tensor.h>
#include <ampgrad/nn/module.h>

namespace ampgrad::nn {

struct Conv1dOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;
  bool bias = true;
  TensorOptions options;
};

// weight [out, in/groups, k], input [N, in, L] (or unbatched [in, L]).
class Conv1d : public Module {
 public:
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv1dOptions o = {});
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;
  Conv1dOptions opts;
};

struct Conv2dOptions {
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
  int64_t groups = 1;
  bool bias = true;
  TensorOptions options;
};

// weight [out, in/groups, kh, kw], input [N, in, H, W] (or unbatched).
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, std::array<int64_t, 2> kernel_size, Conv2dOptions o = {});
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv2dOptions o = {})
      : Conv2d(in_channels, out_channels, {kernel_size, kernel_size}, o) {}
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;
  Conv2dOptions opts;
};

struct Conv3dOptions {
  std::array<int64_t, 3> stride{1, 1, 1};
  std::array<int64_t, 3> padding{0, 0, 0};
  std::array<int64_t, 3> dilation{1, 1, 1};
  int64_t groups = 1;
  bool bias = true;
  TensorOptions options;
};

// weight [out, in/groups, kd, kh, kw], input [N, in, D, H, W] (or unbatched).
class Conv3d : public Module {
 public:
  Conv3d(int64_t in_channels, int64_t out_channels, std::array<int64_t, 3> kernel_size, Conv3dOptions o = {});
  Conv3d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv3dOptions o = {})
      : Conv3d(in_channels, out_channels, {kernel_size, kernel_size, kernel_size}, o) {}
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;
  Conv3dOptions opts;
};

// The transposed layers take PyTorch's argument order (output_padding before groups,
// dilation last); weight [in, out/groups, k...].
struct ConvTranspose1dOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t output_padding = 0;
  int64_t groups = 1;
  bool bias = true;
  int64_t dilation = 1;
  TensorOptions options;
};

class ConvTranspose1d : public Module {
 public:
  ConvTranspose1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, ConvTranspose1dOptions o = {});
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;
  ConvTranspose1dOptions opts;
};

struct ConvTranspose2dOptions {
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> output_padding{0, 0};
  int64_t groups = 1;
  bool bias = true;
  std::array<int64_t, 2> dilation{1, 1};
  TensorOptions options;
};

class ConvTranspose2d : public Module {
 public:
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, std::array<int64_t, 2> kernel_size,
                  ConvTranspose2dOptions o = {});
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, ConvTranspose2dOptions o = {})
      : ConvTranspose2d(in_channels, out_channels, {kernel_size, kernel_size}, o) {}
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;
  ConvTranspose2dOptions opts;
};

struct ConvTranspose3dOptions {
  std::array<int64_t, 3> stride{1, 1, 1};
  std::array<int64_t, 3> padding{0, 0, 0};
  std::array<int64_t, 3> output_padding{0, 0, 0};
  int64_t groups = 1;
  bool bias = true;
  std::array<int64_t, 3> dilation{1, 1, 1};
  TensorOptions options;
};

class ConvTranspose3d : public Module {
 public:
  ConvTranspose3d(int64_t in_channels, int64_t out_channels, std::array<int64_t, 3> kernel_size,
                  ConvTranspose3dOptions o = {});
  ConvTranspose3d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, ConvTranspose3dOptions o = {})
      : ConvTranspose3d(in_channels, out_channels, {kernel_size, kernel_size, kernel_size}, o) {}
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;
  ConvTranspose3dOptions opts;
};

}  // namespace ampgrad::nn
