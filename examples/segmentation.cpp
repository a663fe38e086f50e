// examples/segmentation.cpp: a loss per pixel. A small fully convolutional network labels
// every pixel of Fashion-MNIST's images: background, or the class of the garment it belongs
// to (11 classes). It downsamples with strided convolutions to 7x7, upsamples back with
// nn::Upsample (bilinear), and trains on cross_entropy over [N, 11, 28, 28] logits against
// [N, 28, 28] targets (PyTorch's spatial form), with class weights that count the rare
// garment pixels more than the plentiful background, and ignore_index on the faint pixels at
// the garments' edges, whose label is unclear. Per-class intersection and union for the IoU
// come from einsum. On CUDA the forward runs under bfloat16 autocast: the convolutions in
// 16 bits, interpolate and cross_entropy in float32 (both on PyTorch's fp32 list).
//
//   ./segmentation [cpu|cuda] [steps] [fashion-mnist dir]
//   exits 1 unless the garment pixels' accuracy after training beats 50%
#include <ampgrad/ampgrad.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace ag = ampgrad;
namespace nn = ampgrad::nn;

namespace {

constexpr int64_t kClasses = 11;  // 0: background, 1 + k: garment class k
constexpr int64_t kIgnore = -100;

// Per-pixel targets [n, 28, 28] from images [n, 1, 28, 28] and labels [n]: a pixel brighter
// than 0.3 is the garment's, darker than 0.05 background, anything between ignored.
ag::Tensor pixel_targets(const ag::Tensor& images, const ag::Tensor& labels) {
  const ag::Tensor raw = ag::squeeze(images, 1) * ag::data::kFashionMnistStd + ag::data::kFashionMnistMean;
  const ag::Tensor garment = ag::expand(labels.reshape({-1, 1, 1}) + 1, raw.shape());
  const ag::Tensor dark = ag::where(ag::lt(raw, 0.05), ag::zeros_like(garment), ag::full_like(garment, kIgnore));
  return ag::where(ag::gt(raw, 0.3), garment, dark);
}

}  // namespace

int main(int argc, char** argv) {
  const bool cuda = argc > 1 && std::strcmp(argv[1], "cuda") == 0;
  if (cuda && !ag::cuda::is_available()) {
    std::printf("segmentation: no CUDA device here\n");
    return 0;
  }
  const int steps = argc > 2 ? std::atoi(argv[2]) : 300;
  const std::string dir = argc > 3 ? argv[3] : ag::data::kFashionMnistDebianDir;
  const ag::Device dev = cuda ? ag::Device(ag::kCUDA) : ag::Device(ag::kCPU);
  ag::data::Dataset train, test;
  try {
    train = ag::data::load_fashion_mnist(dir, /*train=*/true, 8192);
    test = ag::data::load_fashion_mnist(dir, /*train=*/false, 500);
  } catch (const ag::Error& e) {
    std::fprintf(stderr, "segmentation: %s\n(Debian's dataset-fashion-mnist package installs the files)\n", e.what());
    return 2;
  }

  ag::manual_seed(0);
  auto net = std::make_shared<nn::Sequential>();
  auto conv = [&](int64_t in, int64_t out, int64_t stride) {
    net->push_back(std::make_shared<nn::Conv2d>(in, out, 3, nn::Conv2dOptions{.stride = {stride, stride}, .padding = {1, 1}}));
    net->push_back(std::make_shared<nn::ReLU>());
  };
  conv(1, 16, 1);
  conv(16, 32, 2);  // [n, 32, 14, 14]
  conv(32, 64, 2);  // [n, 64, 7, 7]: each position sees most of the garment
  conv(64, 64, 1);
  net->push_back(std::make_shared<nn::Upsample>(
      ag::InterpolateOptions().scale_factor({4.0}).mode(ag::InterpolateMode::bilinear)));  // [n, 64, 28, 28]
  net->push_back(std::make_shared<nn::Conv2d>(64, kClasses, 3, nn::Conv2dOptions{.padding = {1, 1}}));  // logits
  net->to(dev);

  // Background is most of every image: its pixels count a fifth of a garment pixel.
  std::vector<float> w(kClasses, 1.0f);
  w[0] = 0.2f;
  nn::CrossEntropyLoss criterion(ag::tensor(w).to(dev));
  ag::optim::Adam opt(net->parameters(), ag::optim::AdamOptions(3e-3));

  const ag::Tensor test_images = test.images.to(dev), test_targets = pixel_targets(test.images, test.labels).to(dev);
  auto evaluate = [&] {
    ag::NoGradGuard no_grad;
    ag::amp::AutocastGuard autocast(dev.type, ag::kBFloat16, cuda);
    const ag::Tensor pred = ag::argmax((*net)(test_images), 1);  // [n, 28, 28]
    const ag::Tensor garment = ag::gt(test_targets, 0).to(ag::kFloat32);
    const double right = ag::sum(ag::eq(pred, test_targets).to(ag::kFloat32) * garment).item<double>();
    // IoU per class from one-hot maps [n, C, 28, 28]: einsum sums over images and pixels.
    const ag::Tensor counted = ag::unsqueeze(ag::ne(test_targets, kIgnore), 1).to(ag::kFloat32);
    const ag::Tensor classes = ag::arange(kClasses, ag::TensorOptions(ag::kInt64).device(dev)).reshape({1, kClasses, 1, 1});
    auto one_hot = [&](const ag::Tensor& labels) {
      return ag::eq(ag::unsqueeze(labels, 1), classes).to(ag::kFloat32) * counted;
    };
    const ag::Tensor p = one_hot(pred), t = one_hot(test_targets);
    const ag::Tensor inter = ag::einsum("nchw,nchw->c", {p, t});
    const ag::Tensor uni = ag::einsum("nchw->c", {p}) + ag::einsum("nchw->c", {t}) - inter;
    const double miou = ag::mean(inter / ag::clamp(uni, 1.0, std::nullopt)).item<double>();
    return std::pair{right / ag::sum(garment).item<double>(), miou};
  };

  const ag::data::DataLoader loader(train, ag::data::DataLoaderOptions(64).shuffle(true).seed(1).drop_last(true).device(dev));
  auto [acc0, miou0] = evaluate();
  std::printf("before training: garment pixels right %.3f, mean IoU %.3f\n", acc0, miou0);
  int step = 0;
  for (int64_t epoch = 0; step < steps; ++epoch)
    for (const ag::data::Batch& batch : loader.epoch(epoch)) {
      if (step == steps) break;
      opt.zero_grad();
      const ag::Tensor target = pixel_targets(batch.images, batch.labels);
      ag::Tensor loss;
      {
        ag::amp::AutocastGuard autocast(dev.type, ag::kBFloat16, cuda);
        loss = criterion((*net)(batch.images), target);  // [n, 11, 28, 28] against [n, 28, 28]
      }
      loss.backward();
      opt.step();
      if (step % std::max(1, steps / 5) == 0) std::printf("step %4d  loss %.4f\n", step, loss.item<double>());
      ++step;
    }
  auto [acc, miou] = evaluate();
  std::printf("after %d steps: garment pixels right %.3f, mean IoU %.3f\n", steps, acc, miou);
  return acc > 0.5 ? 0 : 1;
}
