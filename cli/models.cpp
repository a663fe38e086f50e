// Model builders for train, bench and explain.
#include "cli/models.h"

#include "cuda/runtime.h"

namespace ampgrad::cli {

std::shared_ptr<nn::Sequential> make_model(const std::string& name, Device device) {
  using namespace nn;
  auto net = std::make_shared<Sequential>();
  if (name == "mlp") {
    net->push_back(std::make_shared<Flatten>());
    net->push_back(std::make_shared<Linear>(784, 512));
    net->push_back(std::make_shared<ReLU>());
    net->push_back(std::make_shared<Linear>(512, 512));
    net->push_back(std::make_shared<ReLU>());
    net->push_back(std::make_shared<Linear>(512, 10));
  } else if (name == "cnn") {
    Conv2dOptions same;
    same.padding = {1, 1};
    net->push_back(std::make_shared<Conv2d>(1, 32, 3, same));
    net->push_back(std::make_shared<BatchNorm2d>(32));
    net->push_back(std::make_shared<ReLU>());
    net->push_back(std::make_shared<MaxPool2d>(2));
    net->push_back(std::make_shared<Conv2d>(32, 64, 3, same));
    net->push_back(std::make_shared<BatchNorm2d>(64));
    net->push_back(std::make_shared<ReLU>());
    net->push_back(std::make_shared<MaxPool2d>(2));
    net->push_back(std::make_shared<Flatten>());
    net->push_back(std::make_shared<Linear>(64 * 7 * 7, 128));
    net->push_back(std::make_shared<ReLU>());
    net->push_back(std::make_shared<Dropout>(0.25));
    net->push_back(std::make_shared<Linear>(128, 10));
  } else {
    AG_CHECK(false, "model: unknown model '{}' (expected mlp or cnn)", name);
  }
  net->to(device);
  return net;
}

Device resolve_device(const std::string& spec) {
  if (spec == "auto") return cuda::is_available() ? Device(kCUDA) : Device(kCPU);
  Device d(spec);
  AG_CHECK(!d.is_cuda() || cuda::is_available(),
           "--device {}: no CUDA device is available here (use --device cpu or auto)", spec);
  return d;
}

}  // namespace ampgrad::cli
