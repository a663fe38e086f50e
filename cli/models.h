// The networks the command line trains, benchmarks and explains.
#pragma once

#include <memory>
#include <string>

#include "nn/layers.h"

namespace ampgrad::cli {

// "mlp": 784-512-512-10 with ReLU. "cnn": two conv-BN-ReLU-pool blocks (32 and 64 channels),
// then 3136-128-10 with dropout; ~92% on Fashion-MNIST in 5 epochs.
std::shared_ptr<nn::Sequential> make_model(const std::string& name, Device device);
// Device from "auto" (CUDA when present), "cpu" or "cuda".
Device resolve_device(const std::string& spec);

}  // namespace ampgrad::cli
