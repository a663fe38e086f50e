// The subcommands of the `ampgrad` command line.
#pragma once

#include <CLI/CLI.hpp>

namespace ampgrad::cli {

// `ampgrad demo`: trains a small MLP on synthetic data (the main job until `train` lands).
void add_demo(CLI::App& app);
// `ampgrad train`: Fashion-MNIST with the MLP or the CNN, AMP on or off (the main job).
void add_train(CLI::App& app);
// `ampgrad sample`: text from a GPT checkpoint of `ampgrad train --model gpt --save F`.
void add_sample(CLI::App& app);
// `ampgrad ops`: every op, its autocast category and why.
void add_ops(CLI::App& app);
// `ampgrad explain`: one AMP training step of a small network, as readable tables.
void add_explain(CLI::App& app);
// `ampgrad bench matmul|conv|step|optim`: speed and accuracy per precision.
void add_bench(CLI::App& app);

}  // namespace ampgrad::cli
