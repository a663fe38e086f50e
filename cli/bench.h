// `ampgrad bench`: the benchmark suites, each returning rows for a table and for --json.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/device.h"

namespace ampgrad::cli {

struct BenchOptions {
  Device device;
  bool quick = false;  // a tiny sweep (CPU runs, tests)
  int reps = 30;
  // GradScalerOptions::fold_into_step: false runs the scaler's inf check and update as
  // launches of their own (--no-fold), to see what folding them into the step saves.
  bool fold_scaler = true;
};

// Each suite prints its table and returns its rows as JSON objects.
nlohmann::json bench_matmul(const BenchOptions& o);
nlohmann::json bench_conv(const BenchOptions& o);
nlohmann::json bench_step(const BenchOptions& o);
nlohmann::json bench_optim(const BenchOptions& o);

}  // namespace ampgrad::cli
