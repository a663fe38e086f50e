// One conv2d 3x3 forward + backward (cuDNN benchmark mode) between cudaProfilerStart and
// cudaProfilerStop, after warm-ups, for per-kernel profiles:
//   ncu --profile-from-start off --metrics gpu__time_duration.sum --csv profile_conv f16 nhwc 64 64 56 64
// With a last argument conv_transpose2d: the transposed convolution of `ampgrad bench conv`
// instead (x [N, C, H, H], weight [C, K, 4, 4], stride 2, padding 1), e.g.
//   profile_conv f32 nchw 64 128 28 64 conv_transpose2d
#include <cuda_profiler_api.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <ampgrad/ampgrad.h>

#include <ampgrad/cuda/check.h>
#include <ampgrad/cuda/runtime.h>

namespace ag = ampgrad;

int main(int argc, char** argv) {
  if (argc != 7 && !(argc == 8 && std::string(argv[7]) == "conv_transpose2d")) {
    std::fprintf(stderr, "usage: profile_conv f32|tf32|f16|bf16 nchw|nhwc N C H K [conv_transpose2d]\n");
    return 2;
  }
  if (!ag::cuda::is_available()) {
    std::printf("profile_conv: no CUDA device\n");
    return 0;
  }
  const std::string prec = argv[1], layout = argv[2];
  const int64_t n = std::atoll(argv[3]), c = std::atoll(argv[4]), h = std::atoll(argv[5]), k = std::atoll(argv[6]);
  const ag::DType dt = prec == "f16" ? ag::kFloat16 : (prec == "bf16" ? ag::kBFloat16 : ag::kFloat32);
  ag::set_allow_tf32(prec == "tf32");
  ag::cuda::set_cudnn_benchmark(true);
  const bool transposed = argc == 8;
  const int64_t r = transposed ? 4 : 3, ho = transposed ? 2 * h : h;  // (h - 1) * 2 - 2 + 4
  const auto opt = ag::TensorOptions().device(ag::kCUDA);
  ag::Tensor x = ag::randn({n, c, h, h}, opt).to(dt);
  ag::Tensor w = (transposed ? ag::randn({c, k, r, r}, opt) * (1.0 / std::sqrt(16.0 * k))
                             : ag::randn({k, c, r, r}, opt) * (1.0 / std::sqrt(9.0 * c))).to(dt);
  ag::Tensor g = ag::ones({n, k, ho, ho}, ag::TensorOptions(dt).device(ag::kCUDA));
  if (layout == "nhwc") {
    x = x.to_channels_last();
    w = w.to_channels_last();
    g = g.to_channels_last();
  }
  x = x.detach().requires_grad_();
  w = w.detach().requires_grad_();
  auto step = [&] {
    if (transposed)
      ag::conv_transpose2d(x, w, ag::Tensor(), {2, 2}, {1, 1}).backward(g);
    else
      ag::conv2d(x, w, ag::Tensor(), {1, 1}, {1, 1}).backward(g);
  };
  for (int i = 0; i < 5; ++i) step();
  ag::cuda::synchronize();
  AG_CUDA_CHECK(cudaProfilerStart());
  step();
  ag::cuda::synchronize();
  AG_CUDA_CHECK(cudaProfilerStop());
  return 0;
}
