// The subcommands of the `ampgrad` command line.
#pragma once

#include <CLI/CLI.hpp>

namespace ampgrad::cli {

// `ampgrad demo`: trains a small MLP on synthetic data (the main job until `train` lands).
void add_demo(CLI::App& app);

}  // namespace ampgrad::cli
