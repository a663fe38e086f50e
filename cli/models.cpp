// Model builders for train, bench and explain.
#include "cli/models.h"

#include <ampgrad/cuda/runtime.h>
#include <ampgrad/ops/ops.h>

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

CharLstm::CharLstm(int64_t vocab, int64_t embed, int64_t hidden, bool cells, Device device)
    : Module(cells ? "CharLstmCells" : "CharLstm"), embed_(embed), hidden_(hidden), cells_(cells) {
  table_ = register_parameter("embedding", randn({vocab, embed}) * 0.1);
  if (cells) {
    cell0_ = register_module("cell0", std::make_shared<nn::LSTMCell>(embed, hidden));
    cell1_ = register_module("cell1", std::make_shared<nn::LSTMCell>(hidden, hidden));
  } else {
    nn::RNNOptions o;
    o.num_layers = 2;
    lstm_ = register_module("lstm", std::make_shared<nn::LSTM>(embed, hidden, o));
  }
  head_ = register_module("head", std::make_shared<nn::Linear>(hidden, vocab));
  to(device);
}

Tensor CharLstm::forward(const Tensor& idx) {
  const int64_t steps = idx.size(0), batch = idx.size(1);
  const Tensor x = index_select(table_, 0, idx.reshape({-1})).reshape({steps, batch, embed_});
  Tensor out;
  if (!cells_) {
    out = (*lstm_)(x).output;
  } else {
    Tensor h0, c0, h1, c1;
    std::vector<Tensor> ys;
    for (const Tensor& xt : unbind(x, 0)) {
      std::tie(h0, c0) = (*cell0_)(xt, h0, c0);
      std::tie(h1, c1) = (*cell1_)(h0, h1, c1);
      ys.push_back(h1);
    }
    out = stack(ys, 0);
  }
  return (*head_)(out.reshape({steps * batch, hidden_}));
}

Device resolve_device(const std::string& spec) {
  if (spec == "auto") return cuda::is_available() ? Device(kCUDA) : Device(kCPU);
  Device d(spec);
  AG_CHECK(!d.is_cuda() || cuda::is_available(),
           "--device {}: no CUDA device is available here (use --device cpu or auto)", spec);
  return d;
}

}  // namespace ampgrad::cli
