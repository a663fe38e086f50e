// The op-category table, read off the op registry.
#include "amp/op_table.h"

#include <algorithm>

#include "ops/op.h"

namespace ampgrad::amp {

std::vector<OpTableEntry> op_table() {
  std::vector<OpTableEntry> table;
  for (const OpInfo* op : op_registry()) table.push_back({op->name, op->category, op->reason, op->alternative});
  std::sort(table.begin(), table.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return table;
}

}  // namespace ampgrad::amp
