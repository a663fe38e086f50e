// examples/mlp.cpp: the first network. A multilayer perceptron classifies Fashion-MNIST's
// 28x28 clothing images into 10 classes: tensors, a module tree, autograd, an optimizer, and
// on CUDA float16 autocast with a GradScaler (the Linear layers' GEMMs run in float16,
// cross_entropy in float32, the weights stay float32).
//
//   ./mlp [cpu|cuda] [steps] [fashion-mnist dir]
//   exits 1 unless the test accuracy after training beats 70%
#include <ampgrad/ampgrad.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace ag = ampgrad;
namespace nn = ampgrad::nn;

int main(int argc, char** argv) {
  const bool cuda = argc > 1 && std::strcmp(argv[1], "cuda") == 0;
  if (cuda && !ag::cuda::is_available()) {
    std::printf("mlp: no CUDA device here\n");
    return 0;
  }
  const int steps = argc > 2 ? std::atoi(argv[2]) : 300;
  const std::string dir = argc > 3 ? argv[3] : ag::data::kFashionMnistDebianDir;
  const ag::Device dev = cuda ? ag::Device(ag::kCUDA) : ag::Device(ag::kCPU);

  // Images [n, 1, 28, 28] normalized with the training set's mean and std; labels int64 [n].
  ag::data::Dataset train, test;
  try {
    train = ag::data::load_fashion_mnist(dir, /*train=*/true, 16384);
    test = ag::data::load_fashion_mnist(dir, /*train=*/false, 2000);
  } catch (const ag::Error& e) {
    std::fprintf(stderr, "mlp: %s\n(Debian's dataset-fashion-mnist package installs the files)\n", e.what());
    return 2;
  }

  // Parameters are named by their place in the tree: "1.weight", "3.bias", ... (as PyTorch).
  ag::manual_seed(0);
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Flatten>());  // [n, 784]
  net->push_back(std::make_shared<nn::Linear>(784, 256));
  net->push_back(std::make_shared<nn::ReLU>());
  net->push_back(std::make_shared<nn::Linear>(256, 10));  // logits
  net->to(dev);
  for (const auto& [name, p] : net->named_parameters())
    std::printf("%-9s %s\n", name.c_str(), ag::shape_str(p.sizes()).c_str());

  ag::optim::SGD opt(net->parameters(), ag::optim::SGDOptions(0.05).momentum(0.9));
  // The scaler multiplies the loss before backward so that small float16 gradients do not
  // flush to zero, unscales them before the step, and skips a step whose gradients overflowed.
  // Disabled (a pass-through) on the CPU, where this example trains in float32.
  ag::amp::GradScaler scaler(ag::amp::GradScalerOptions().enabled(cuda));

  auto accuracy = [&] {
    ag::NoGradGuard no_grad;  // no graph is recorded for evaluation
    ag::amp::AutocastGuard autocast(dev.type, ag::kFloat16, cuda);
    const ag::Tensor logits = (*net)(test.images.to(dev));
    const ag::Tensor right = ag::eq(ag::argmax(logits, 1), test.labels.to(dev));
    return right.to(ag::kFloat32).mean().item<double>();
  };

  const ag::data::DataLoader loader(train, ag::data::DataLoaderOptions(128).shuffle(true).seed(1).drop_last(true).device(dev));
  std::printf("test accuracy before training %.3f\n", accuracy());
  int step = 0;
  for (int64_t epoch = 0; step < steps; ++epoch)
    for (const ag::data::Batch& batch : loader.epoch(epoch)) {  // a new order each epoch
      if (step == steps) break;
      opt.zero_grad();
      ag::Tensor loss;
      {
        ag::amp::AutocastGuard autocast(dev.type, ag::kFloat16, cuda);  // the forward pass only
        loss = ag::nn::functional::cross_entropy((*net)(batch.images), batch.labels);
      }
      scaler.scale(loss).backward();  // gradients into each parameter's .grad()
      scaler.step(opt);               // unscale, check for inf/NaN, step (or skip)
      scaler.update();                // grow or shrink the scale
      if (step % std::max(1, steps / 5) == 0)
        std::printf("step %4d  loss %.4f  scale %g\n", step, loss.item<double>(), scaler.get_scale());
      ++step;
    }
  const double acc = accuracy();
  const bool ok = acc > 0.70;
  std::printf("test accuracy after %d steps %.3f: %s\n", steps, acc, ok ? "learned" : "did NOT learn");
  return ok ? 0 : 1;
}
