// `ampgrad ops`: the op-category table, every registered op with its autocast category.
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "amp/op_table.h"
#include "cli/commands.h"

namespace ampgrad::cli {

void add_ops(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("ops", "List every op with its autocast category and the reason for it");
  cmd->add_flag("--json", *json, "print JSON instead of a table");
  cmd->callback([json] {
    auto table = amp::op_table();
    if (*json) {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& e : table) {
        nlohmann::json row{{"op", e.name}, {"category", amp::category_name(e.category)}, {"reason", e.reason}};
        if (!e.alternative.empty()) row["alternative"] = e.alternative;
        out.push_back(row);
      }
      std::printf("%s\n", out.dump(2).c_str());
      return;
    }
    std::printf("%-34s %-12s %s\n", "op", "category", "why");
    for (amp::Category c : {amp::Category::lower, amp::Category::fp32, amp::Category::promote, amp::Category::banned,
                            amp::Category::passthrough}) {
      for (const auto& e : table) {
        if (e.category != c) continue;
        std::string why(e.reason);
        if (!e.alternative.empty()) why += fmt::format(" (use {})", e.alternative);
        std::printf("%-34s %-12s %s\n", std::string(e.name).c_str(), std::string(amp::category_name(c)).c_str(),
                    why.c_str());
      }
    }
    std::printf("\n%zu ops. lower: run in the autocast dtype; fp32: inputs cast to float32; promote: to the widest "
                "input; passthrough: no cast; banned: refused under float16 autocast.\n",
                table.size());
  });
}

}  // namespace ampgrad::cli
