// examples/spatial_align.cpp: gradients through grid_sample. A blob image is aligned to a
// shifted copy of itself by learning the shift of the sampling grid, as a spatial transformer
// learns its transform: out = grid_sample(image, base_grid + shift), loss = mse_loss(out,
// target), and Adam moves the shift. The loss reaches the grid through grid_sample's bilinear
// weights. Under autocast grid_sample runs in the wider of its inputs' dtypes (its category
// is promote, as in PyTorch).
//
//   ./spatial_align [cpu|cuda]     exits 1 unless the learned shift is the true one
#include <ampgrad/ampgrad.h>

#include <cmath>
#include <cstdio>
#include <cstring>

namespace ag = ampgrad;

namespace {

constexpr int64_t kSize = 24;

// A Gaussian blob centred at pixel (cx, cy), [1, 1, kSize, kSize].
ag::Tensor blob(double cx, double cy, ag::Device dev) {
  std::vector<float> v(kSize * kSize);
  for (int64_t i = 0; i < kSize; ++i)
    for (int64_t j = 0; j < kSize; ++j)
      v[i * kSize + j] = static_cast<float>(std::exp(-((j - cx) * (j - cx) + (i - cy) * (i - cy)) / (2 * 3.0 * 3.0)));
  return ag::tensor(v, {1, 1, kSize, kSize}).to(dev);
}

// The identity grid of align_corners = false: pixel centres at (2k + 1) / size - 1.
ag::Tensor base_grid(ag::Device dev) {
  std::vector<float> g;
  for (int64_t i = 0; i < kSize; ++i)
    for (int64_t j = 0; j < kSize; ++j) {
      g.push_back(static_cast<float>((2.0 * j + 1) / kSize - 1));
      g.push_back(static_cast<float>((2.0 * i + 1) / kSize - 1));
    }
  return ag::tensor(g, {1, kSize, kSize, 2}).to(dev);
}

}  // namespace

int main(int argc, char** argv) {
  const bool cuda = argc > 1 && std::strcmp(argv[1], "cuda") == 0;
  if (cuda && !ag::cuda::is_available()) {
    std::printf("spatial_align: no CUDA device here\n");
    return 0;
  }
  const ag::Device dev = cuda ? ag::Device(ag::kCUDA) : ag::Device(ag::kCPU);
  // The target is the image moved by (+2.5, -1.5) pixels: sampling the image at p - (2.5, -1.5)
  // gives it, a shift of (-2.5, +1.5) * 2 / size in grid units.
  const ag::Tensor image = blob(11, 12, dev), target = blob(13.5, 10.5, dev), grid = base_grid(dev);
  const double want_x = -2.5 * 2 / kSize, want_y = 1.5 * 2 / kSize;
  ag::Tensor shift = ag::zeros({2}, ag::TensorOptions().device(dev)).requires_grad_(true);
  ag::optim::Adam opt({shift}, ag::optim::AdamOptions(0.01));
  double loss = 0;
  for (int step = 0; step < 300; ++step) {
    opt.zero_grad();
    ag::Tensor out;
    {
      ag::amp::AutocastGuard autocast(dev.type, cuda ? ag::kFloat16 : ag::kBFloat16);
      out = ag::grid_sample(image, grid + shift.view({1, 1, 1, 2}));
    }
    ag::Tensor l = ag::mse_loss(out, target);
    l.backward();
    opt.step();
    loss = l.item<double>();
    if (step % 100 == 0) std::printf("step %3d  loss %.6f\n", step, loss);
  }
  const std::vector<float> s = shift.to(ag::kCPU).to_vector<float>();
  std::printf("learned shift (%.4f, %.4f), true (%.4f, %.4f), loss %.2e\n", s[0], s[1], want_x, want_y, loss);
  const bool ok = std::abs(s[0] - want_x) < 0.01 && std::abs(s[1] - want_y) < 0.01;
  std::printf("%s\n", ok ? "aligned" : "NOT aligned");
  return ok ? 0 : 1;
}
