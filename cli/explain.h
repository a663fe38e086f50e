// `ampgrad explain`'s pieces shared by its fp16/bf16 step (cli/explain.cpp) and its FP8 steps
// (cli/explain_fp8.cpp).
#pragma once

#include <memory>
#include <string>

#include <ampgrad/ampgrad.h>

namespace ampgrad::cli {

struct ExplainArgs {
  std::string device = "auto";
  std::string amp = "fp16";
  std::string inject_inf;
  int64_t batch = 64;
  double init_scale = 65536;
  std::string data = data::kFashionMnistDebianDir;
  bool json = false;
  bool anomaly = false;
};

struct ExplainBatch {
  Tensor x, y;
  std::string source;  // what the batch is, for the heading
};

// A batch of Fashion-MNIST from `dir`, or random images when it is missing.
ExplainBatch explain_batch(const Device& dev, const std::string& dir, int64_t batch);
// The MLP explain trains: Flatten, Linear(784, 256), ReLU, Linear(256, 10), on `dev`.
std::shared_ptr<nn::Sequential> explain_mlp(const Device& dev);
// `ampgrad explain --amp fp8`.
void run_explain_fp8(const ExplainArgs& a);

}  // namespace ampgrad::cli
