// examples/cnn.cpp: a convolutional network on Fashion-MNIST with the pieces of a real
// training run: Conv2d + BatchNorm2d + ReLU + MaxPool2d blocks, AdamW with a linear warm-up and
// a cosine decay of the learning rate, mixed precision (float16 autocast with a GradScaler on
// CUDA, bfloat16 autocast on the CPU, which needs no scaler), evaluation in eval() mode, and a
// checkpoint: model, optimizer and scaler saved to one safetensors file and loaded into a fresh
// model that then gives the same test accuracy.
//
//   ./cnn [cpu|cuda] [steps] [checkpoint path] [fashion-mnist dir]
//   exits 1 unless the test accuracy beats 70% and the reloaded model agrees exactly
#include <ampgrad/ampgrad.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numbers>
#include <string>

namespace ag = ampgrad;
namespace nn = ampgrad::nn;

namespace {

std::shared_ptr<nn::Sequential> make_cnn() {
  const nn::Conv2dOptions same{.padding = {1, 1}};
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Conv2d>(1, 16, 3, same));
  net->push_back(std::make_shared<nn::BatchNorm2d>(16));
  net->push_back(std::make_shared<nn::ReLU>());
  net->push_back(std::make_shared<nn::MaxPool2d>(2));  // [16, 14, 14]
  net->push_back(std::make_shared<nn::Conv2d>(16, 32, 3, same));
  net->push_back(std::make_shared<nn::BatchNorm2d>(32));
  net->push_back(std::make_shared<nn::ReLU>());
  net->push_back(std::make_shared<nn::MaxPool2d>(2));  // [32, 7, 7]
  net->push_back(std::make_shared<nn::Flatten>());
  net->push_back(std::make_shared<nn::Linear>(32 * 7 * 7, 10));
  return net;
}

// Linear warm-up over the first `warmup` steps, then cosine decay to zero at `total`.
double lr_at(int step, int warmup, int total, double peak) {
  if (step < warmup) return peak * (step + 1) / warmup;
  const double t = static_cast<double>(step - warmup) / std::max(1, total - warmup);
  return 0.5 * peak * (1 + std::cos(std::numbers::pi * t));
}

}  // namespace

int main(int argc, char** argv) {
  const bool cuda = argc > 1 && std::strcmp(argv[1], "cuda") == 0;
  if (cuda && !ag::cuda::is_available()) {
    std::printf("cnn: no CUDA device here\n");
    return 0;
  }
  const int steps = argc > 2 ? std::atoi(argv[2]) : 400;
  const std::string ckpt = argc > 3 ? argv[3] : "cnn.safetensors";
  const std::string dir = argc > 4 ? argv[4] : ag::data::kFashionMnistDebianDir;
  const ag::Device dev = cuda ? ag::Device(ag::kCUDA) : ag::Device(ag::kCPU);
  const ag::DType amp_dtype = cuda ? ag::kFloat16 : ag::kBFloat16;

  ag::data::Dataset train, test;
  try {
    train = ag::data::load_fashion_mnist(dir, /*train=*/true, 16384);
    test = ag::data::load_fashion_mnist(dir, /*train=*/false, 1000);
  } catch (const ag::Error& e) {
    std::fprintf(stderr, "cnn: %s\n(Debian's dataset-fashion-mnist package installs the files)\n", e.what());
    return 2;
  }
  const ag::Tensor test_x = test.images.to(dev), test_y = test.labels.to(dev);

  ag::manual_seed(0);
  auto net = make_cnn();
  net->to(dev);
  ag::optim::AdamW opt(net->parameters(), ag::optim::AdamWOptions(2e-3).weight_decay(0.01));
  ag::amp::GradScaler scaler(ag::amp::GradScalerOptions().enabled(amp_dtype == ag::kFloat16));

  // eval(): BatchNorm normalizes with its running statistics instead of the batch's.
  auto accuracy = [&](nn::Module& model) {
    ag::NoGradGuard no_grad;
    const bool was_training = model.is_training();
    model.eval();
    ag::amp::AutocastGuard autocast(dev.type, amp_dtype);
    const ag::Tensor right = ag::eq(ag::argmax(model(test_x), 1), test_y);
    model.train(was_training);
    return right.to(ag::kFloat32).mean().item<double>();
  };

  const ag::data::DataLoader loader(train, ag::data::DataLoaderOptions(128).shuffle(true).seed(1).drop_last(true).device(dev));
  const int warmup = std::max(1, steps / 10);
  int step = 0;
  for (int64_t epoch = 0; step < steps; ++epoch)
    for (const ag::data::Batch& batch : loader.epoch(epoch)) {
      if (step == steps) break;
      opt.set_lr(lr_at(step, warmup, steps, 2e-3));
      opt.zero_grad();
      ag::Tensor loss;
      {
        ag::amp::AutocastGuard autocast(dev.type, amp_dtype);
        loss = ag::nn::functional::cross_entropy((*net)(batch.images), batch.labels);
      }
      scaler.scale(loss).backward();
      scaler.step(opt);
      scaler.update();
      if (step % std::max(1, steps / 5) == 0)
        std::printf("step %4d  lr %.2e  loss %.4f\n", step, opt.lr(), loss.item<double>());
      ++step;
    }
  const double acc = accuracy(*net);
  std::printf("test accuracy %.3f after %d steps (%s autocast)\n", acc, steps, ag::dtype_name(amp_dtype).data());

  // One file, three sections; a fresh model, optimizer and scaler take their state back.
  nn::save_checkpoint(ckpt, {{"model", net->state_dict()}, {"optimizer", opt.state_dict()}, {"scaler", scaler.state_dict()}},
                      {{"steps", std::to_string(steps)}});
  const auto loaded = nn::load_checkpoint(ckpt);
  auto again = make_cnn();
  again->to(dev);
  again->load_state_dict(loaded.at("model"));
  ag::optim::AdamW opt_again(again->parameters(), ag::optim::AdamWOptions());
  opt_again.load_state_dict(loaded.at("optimizer"));  // moments, step counts and the options
  ag::amp::GradScaler scaler_again(ag::amp::GradScalerOptions().enabled(amp_dtype == ag::kFloat16));
  scaler_again.load_state_dict(loaded.at("scaler"));
  const double acc_again = accuracy(*again);
  std::printf("reloaded from %s: test accuracy %.3f, learning rate %.2e\n", ckpt.c_str(), acc_again, opt_again.lr());

  const bool ok = acc > 0.70 && acc_again == acc;
  std::printf("%s\n", ok ? "trained, and the checkpoint restores it" : "FAILED");
  return ok ? 0 : 1;
}
