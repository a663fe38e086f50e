// IDX files (the MNIST format): images and labels, plain or gzipped, checked as they are read.
#pragma once

#include <string>

#include <ampgrad/core/tensor.h>

namespace ampgrad::data {

// Reads an IDX images file (magic 0x00000803: unsigned bytes, 3 dims, big-endian) into a
// uint8 [N, rows, cols] CPU tensor. `path` may be plain or gzipped: zlib reads both.
// A missing, truncated or malformed file throws ag::Error naming the file and the fault.
Tensor read_idx_images(const std::string& path);

// Reads an IDX labels file (magic 0x00000801: unsigned bytes, 1 dim) into an int64 [N] CPU
// tensor, with the same checks.
Tensor read_idx_labels(const std::string& path);

}  // namespace ampgrad::data
