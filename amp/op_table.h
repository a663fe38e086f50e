// amp::op_table(): every registered op with its autocast category and the reason for it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <ampgrad/amp/category.h>

namespace ampgrad::amp {

struct OpTableEntry {
  std::string_view name;
  Category category;
  std::string_view reason;
  std::string_view alternative;  // banned ops: what to use instead
};

// Built from the op records (Note [Op registry]), sorted by name: the library's ops and those
// of the program and the libraries it loaded (load_op_library in ops/op.h).
std::vector<OpTableEntry> op_table();
// The table `ampgrad ops` prints: one line per op, grouped by category, with the reason.
std::string format_op_table(const std::vector<OpTableEntry>& table);

}  // namespace ampgrad::amp
