// The subcommands of the `ampgrad` command line.
#pragma once

#include <CLI/CLI.hpp>

namespace ampgrad::cli {

// `ampgrad demo`: trains a small MLP on synthetic data (the main job until `train` lands).
void add_demo(CLI::App& app);
// `ampgrad train`: Fashion-MNIST with the MLP or the CNN, AMP on or off (the main job).
void add_train(CLI::App& app);

}  // namespace ampgrad::cli
