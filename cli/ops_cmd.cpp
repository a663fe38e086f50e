// `ampgrad ops`: the op-category table, every registered op with its autocast category.
#include <cstdio>

#include <nlohmann/json.hpp>

#include <ampgrad/amp/op_table.h>
#include "cli/commands.h"
#include <ampgrad/ops/op.h>

namespace ampgrad::cli {

void add_ops(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  auto libraries = std::make_shared<std::vector<std::string>>();
  CLI::App* cmd = app.add_subcommand("ops", "List every op with its autocast category and the reason for it");
  cmd->add_flag("--json", *json, "print JSON instead of a table");
  cmd->add_option("--load", *libraries, "shared libraries of ops to load first (a program's own ops: see examples/)");
  cmd->callback([json, libraries] {
    for (const std::string& lib : *libraries) load_op_library(lib);
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
    std::fputs(amp::format_op_table(table).c_str(), stdout);
  });
}

}  // namespace ampgrad::cli
