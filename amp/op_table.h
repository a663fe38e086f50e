// amp::op_table(): every registered op with its autocast category and the reason for it.
#pragma once

#include <string_view>
#include <vector>

#include "amp/category.h"

namespace ampgrad::amp {

struct OpTableEntry {
  std::string_view name;
  Category category;
  std::string_view reason;
  std::string_view alternative;  // banned ops: what to use instead
};

// Built from the op records (Note [Op registry]), sorted by name.
std::vector<OpTableEntry> op_table();

}  // namespace ampgrad::amp
