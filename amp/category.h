// The autocast categories every op declares (the low, policy part of amp/).
#pragma once

#include <cstdint>
#include <string_view>

namespace ampgrad::amp {

// As PyTorch's CUDA autocast lists (docs/amp.md, "1. The cast decision").
enum class Category : uint8_t {
  lower,        // run in the autocast dtype (fp16/bf16): tensor-core ops
  fp32,         // inputs cast to float32: range- or accumulation-sensitive ops
  promote,      // floating inputs cast to the widest among them
  passthrough,  // no autocast action; ordinary type promotion
  banned,       // refused under fp16 autocast; the error names the safe alternative
};

constexpr std::string_view category_name(Category c) {
  switch (c) {
    case Category::lower: return "lower";
    case Category::fp32: return "fp32";
    case Category::promote: return "promote";
    case Category::passthrough: return "passthrough";
    case Category::banned: return "banned";
  }
  return "?";
}

}  // namespace ampgrad::amp
