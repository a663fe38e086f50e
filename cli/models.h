// The networks the command line trains, benchmarks and explains.
#pragma once

#include <memory>
#include <string>

#include <ampgrad/nn/layers.h>
#include <ampgrad/nn/rnn.h>

namespace ampgrad::cli {

// "mlp": 784-512-512-10 with ReLU. "cnn": two conv-BN-ReLU-pool blocks (32 and 64 channels),
// then 3136-128-10 with dropout; ~92% on Fashion-MNIST in 5 epochs.
std::shared_ptr<nn::Sequential> make_model(const std::string& name, Device device);
// The character model of `ampgrad bench step`: an embedding table [vocab, embed] (rows picked
// by index_select), two LSTM layers of `hidden` units and a linear head. cells = false runs
// nn::LSTM (Note [Sequence modules] in nn/rnn.h); true, two nn::LSTMCell in a loop over the
// steps, as a program that writes its own time loop does. forward(idx [seq, batch] int64)
// gives the logits [seq * batch, vocab]. benchmarks/compare_torch.py builds the same in PyTorch.
class CharLstm : public nn::Module {
 public:
  CharLstm(int64_t vocab, int64_t embed, int64_t hidden, bool cells, Device device);
  Tensor forward(const Tensor& idx) override;

 private:
  int64_t embed_, hidden_;
  bool cells_;
  Tensor table_;
  std::shared_ptr<nn::LSTM> lstm_;
  std::shared_ptr<nn::LSTMCell> cell0_, cell1_;
  std::shared_ptr<nn::Linear> head_;
};

// Device from "auto" (CUDA when present), "cpu" or "cuda".
Device resolve_device(const std::string& spec);

}  // namespace ampgrad::cli
