// Reading and writing the safetensors format (https://github.com/huggingface/safetensors).
#pragma once

#include <map>
#include <string>

#include <ampgrad/core/tensor.h>

namespace ampgrad::nn {

// Note [safetensors layout]
// 8 bytes: N, the header length, unsigned little-endian. N bytes: a JSON object
//   {"__metadata__": {"k": "v"}, "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [b, e]}, ...}
// padded with spaces so that the data starts at a multiple of 8. Then the data: each tensor's
// bytes, contiguous and little-endian, at [b, e) counted from the start of the data. The
// tensors tile the data exactly (no gaps, no overlaps). We write them by decreasing item
// size, then by name, as the reference implementation does, so every tensor is aligned.
// dtypes: F32 F16 BF16 F64 I64 I32 BOOL U8 F8_E4M3 F8_E5M2.

struct SafetensorsFile {
  std::map<std::string, Tensor> tensors;  // contiguous CPU tensors
  std::map<std::string, std::string> metadata;
};

// Copies each tensor to the CPU, contiguous, and writes `path` atomically: `path.tmp` is
// written and fsynced, then renamed over `path`.
void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads a safetensors file into CPU tensors. A truncated or malformed file throws ag::Error
// naming the file (and the tensor, where one is at fault).
SafetensorsFile load_safetensors(const std::string& path);

}  // namespace ampgrad::nn
