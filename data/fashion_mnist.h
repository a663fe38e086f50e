// Fashion-MNIST (and MNIST, whose files have the same names and format) as normalized tensors.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <ampgrad/core/tensor.h>

namespace ampgrad::data {

// Where the Debian package dataset-fashion-mnist installs the four .gz files.
inline constexpr const char* kFashionMnistDebianDir = "/usr/share/datasets/fashion-mnist";

// Note [Fashion-MNIST normalization]
// Pixels are scaled to [0, 1] and standardized: x = (p/255 - mean) / std, with the mean and
// standard deviation of all pixels of the 60000 training images (0.2860 and 0.3530, the
// values torchvision users quote for Fashion-MNIST). The training set then has mean ~0 and
// std ~1 (tests/test_data.cpp checks it on the real files). MNIST files get the same
// constants, not MNIST's own (0.1307, 0.3081); a network trains on either.
inline constexpr float kFashionMnistMean = 0.2860f;
inline constexpr float kFashionMnistStd = 0.3530f;

struct Dataset {
  Tensor images;  // float32 [N, 1, 28, 28] on the CPU, normalized (Note [Fashion-MNIST normalization])
  Tensor labels;  // int64 [N] on the CPU, in 0..9
  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
};

// Loads the training set (train-images-idx3-ubyte, train-labels-idx1-ubyte) or the test set
// (t10k-...) from `dir`, each file plain or with a .gz suffix. `limit` keeps the first
// `limit` examples (all of them when the set is smaller). Throws ag::Error when a file is
// missing or malformed, when the images are not 28x28, when the two files disagree on the
// number of examples, or when a label is outside 0..9.
Dataset load_fashion_mnist(const std::string& dir, bool train, std::optional<int64_t> limit = {});

}  // namespace ampgrad::data
