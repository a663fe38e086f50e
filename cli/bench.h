// `ampgrad bench`: the benchmark suites, each returning rows for a table and for --json.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <ampgrad/core/device.h>

namespace ampgrad::cli {

struct BenchOptions {
  Device device;
  bool quick = false;  // a tiny sweep (CPU runs, tests)
  int reps = 30;
  // step: the AMP rows run GradScaler::step_and_update; also time the eager AMP step with
  // step() and update() apart, in turns with the others (--fold-ab).
  bool fold_ab = false;
  // step: also time eager fp32 and AMP steps with ampgrad's kernels launched directly rather
  // than as graphs (Note [Kernel graphs] in cuda/launch.cuh), in turns (--kernel-graphs-ab).
  bool kernel_graphs_ab = false;
  // step: also time eager fp32 and AMP steps with every graph launched at once rather than held
  // back and submitted in batches (Note [Launch batches] in cuda/call_graph.h), in turns
  // (--launch-batches-ab).
  bool launch_batches_ab = false;
  // step: also time AMP with FP8 GEMMs (delayed scaling, HYBRID; Note [FP8 autocast] in
  // amp/autocast.h), in turns with the others (--fp8).
  bool fp8 = false;
  // step: only these models (mlp, cnn, wide, lstm, lstm_cells); empty: all of them (--models).
  std::vector<std::string> models;
  // step: every model at this batch instead of its own (--batch); 0: their own.
  int64_t batch = 0;
};

// Each suite prints its table and returns its rows as JSON objects.
nlohmann::json bench_matmul(const BenchOptions& o);
nlohmann::json bench_conv(const BenchOptions& o);
nlohmann::json bench_step(const BenchOptions& o);
nlohmann::json bench_optim(const BenchOptions& o);
nlohmann::json bench_attention(const BenchOptions& o);  // cli/bench_attention.cpp

}  // namespace ampgrad::cli
