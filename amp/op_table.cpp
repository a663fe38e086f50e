// The op-category table, read off the op registry.
#include <ampgrad/amp/op_table.h>

#include <algorithm>

#include <fmt/format.h>

#include <ampgrad/ops/op.h>

namespace ampgrad::amp {

std::vector<OpTableEntry> op_table() {
  std::vector<OpTableEntry> table;
  for (const OpInfo* op : op_registry()) table.push_back({op->name, op->category, op->reason, op->alternative});
  std::sort(table.begin(), table.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return table;
}

std::string format_op_table(const std::vector<OpTableEntry>& table) {
  std::string out = fmt::format("{:<34} {:<12} {}\n", "op", "category", "why");
  for (Category c : {Category::lower, Category::fp32, Category::promote, Category::banned, Category::passthrough}) {
    for (const auto& e : table) {
      if (e.category != c) continue;
      std::string why(e.reason);
      if (!e.alternative.empty()) why += fmt::format(" (use {})", e.alternative);
      out += fmt::format("{:<34} {:<12} {}\n", e.name, category_name(c), why);
    }
  }
  out += fmt::format(
      "\n{} ops. lower: run in the autocast dtype; fp32: inputs cast to float32; promote: to the widest input; "
      "passthrough: no cast; banned: refused under float16 autocast.\n",
      table.size());
  return out;
}

}  // namespace ampgrad::amp
