// `ampgrad explain --amp fp8`: two training steps of explain's MLP under FP8 autocast with
// delayed scaling (Note [FP8 scaling] in amp/fp8.h), shown as tables: the ops and which GEMMs
// ran in FP8, and for every quantized tensor the scale it was quantized with, its amax, where
// amax x scale landed against the format's largest value, and the share of values that
// saturated or flushed to zero. The first step quantizes with the initial scale 1 (no history
// yet); the second with the scales the first step's amaxes gave.
#include <cstdio>
#include <map>
#include <tuple>

#include <nlohmann/json.hpp>

#include <ampgrad/ampgrad.h>
#include "cli/explain.h"
#include "cli/models.h"

namespace ampgrad::cli {

namespace {

struct TensorRow {
  std::string parameter;
  amp::Fp8Role role;
  DType dtype;
  float scale = 1;  // the scale this step quantized with
  float amax = 0;   // recorded by this step's quantizations
  int64_t quantized = 0, saturated = 0, flushed = 0;
};

struct StepReport {
  double loss = 0;
  std::vector<amp::OpRecord> records;
  std::vector<TensorRow> rows;
};

using Key = std::tuple<const TensorImpl*, amp::Fp8Role>;

std::map<Key, amp::Fp8TensorStats> by_key(const std::vector<amp::Fp8TensorStats>& v) {
  std::map<Key, amp::Fp8TensorStats> m;
  for (const auto& s : v) m[{s.parameter, s.role}] = s;
  return m;
}

double share(int64_t part, int64_t whole) { return whole > 0 ? 100.0 * static_cast<double>(part) / whole : 0.0; }

void print_step(int k, const StepReport& r, const amp::Fp8Recipe& recipe) {
  std::printf("| parameter | GEMM tensor | dtype | scale used | amax | amax x scale | of max | values | saturated | "
              "flushed |\n|---|---|---|---|---|---|---|---|---|---|\n");
  for (const TensorRow& t : r.rows) {
    const double landed = static_cast<double>(t.amax) * t.scale;
    std::printf("| %s | %s | %s | %.4g | %.4g | %.4g | %.0f | %lld | %.3f%% | %.3f%% |\n", t.parameter.c_str(),
                std::string(amp::fp8_role_name(t.role)).c_str(), std::string(dtype_name(t.dtype)).c_str(), t.scale,
                t.amax, landed, recipe.fp8_max(t.role), static_cast<long long>(t.quantized),
                share(t.saturated, t.quantized), share(t.flushed, t.quantized));
  }
  std::printf("\n   step %d's loss: %.4f\n\n", k, r.loss);
}

}  // namespace

void run_explain_fp8(const ExplainArgs& a) {
  AG_CHECK(a.inject_inf.empty() && !a.anomaly,
           "explain --amp fp8: --inject-inf and --anomaly show the loss scaler's work, and FP8 autocast runs without "
           "one; use them with --amp fp16 or bf16");
  const Device dev = resolve_device(a.device);
  manual_seed(0);
  auto [x, y, source] = explain_batch(dev, a.data, a.batch);
  std::shared_ptr<nn::Sequential> net = explain_mlp(dev);
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.01).momentum(0.9));
  amp::Fp8Recipe recipe;  // DelayedScaling's defaults: HYBRID, margin 0, history 1024, max
  recipe.collect_stats(true);
  std::map<const TensorImpl*, std::string> names;
  for (auto& [n, p] : net->named_parameters()) names[p.unsafe_impl()] = n;

  std::vector<StepReport> steps(2);
  for (StepReport& r : steps) {
    opt.zero_grad();
    std::map<Key, amp::Fp8TensorStats> before;
    Tensor loss;
    {
      amp::Trace trace;
      amp::AutocastGuard autocast(dev.type, kFloat8_e4m3fn, recipe);  // entering it ran the recipe's update
      before = by_key(recipe.stats());  // so these are the scales this step quantizes with
      loss = cross_entropy((*net)(x), y);
      r.records = trace.records();
    }
    loss.backward();  // quantizes the output gradients (e5m2)
    for (const amp::Fp8TensorStats& s : recipe.stats()) {
      TensorRow t{names[s.parameter], s.role, s.dtype};
      t.amax = s.amax;
      t.quantized = s.quantized;
      t.saturated = s.saturated;
      t.flushed = s.flushed;
      if (auto it = before.find({s.parameter, s.role}); it != before.end()) {
        t.scale = it->second.scale;
        t.quantized -= it->second.quantized;
        t.saturated -= it->second.saturated;
        t.flushed -= it->second.flushed;
      }
      r.rows.push_back(t);
    }
    r.loss = loss.item<double>();
    opt.step();
  }

  if (a.json) {
    nlohmann::json out;
    out["device"] = dev.str();
    out["amp_dtype"] = dtype_name(kFloat8_e4m3fn);
    out["recipe"] = {{"kind", "delayed"}, {"format", "HYBRID"}, {"margin", recipe.config().margin},
                     {"amax_history_len", recipe.config().amax_history_len}};
    out["input"] = source;
    for (const StepReport& r : steps) {
      nlohmann::json st = {{"loss", r.loss}};
      for (const auto& o : r.records)
        st["ops"].push_back({{"op", o.op}, {"category", amp::category_name(o.category)},
                             {"output_dtype", dtype_name(o.output_dtype)}, {"path", o.path}});
      for (const TensorRow& t : r.rows)
        st["tensors"].push_back({{"parameter", t.parameter}, {"role", amp::fp8_role_name(t.role)},
                                 {"dtype", dtype_name(t.dtype)}, {"scale", t.scale}, {"amax", t.amax},
                                 {"fp8_max", recipe.fp8_max(t.role)}, {"quantized", t.quantized},
                                 {"saturated", t.saturated}, {"flushed", t.flushed}});
      out["steps"].push_back(st);
    }
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }

  std::printf("ampgrad explain: MLP 784-256-10 on %s, FP8 autocast (DelayedScaling: HYBRID, margin %d, amax "
              "history %lld) on %s\n\n",
              source.c_str(), recipe.config().margin, static_cast<long long>(recipe.config().amax_history_len),
              dev.str().c_str());
  std::printf("1. Forward pass: each op as autocast saw it (step 1)\n\n%s\n", amp::format_trace(steps[0].records).c_str());
  std::printf("   linear, linear_relu, mm, matmul and addmm run as FP8 GEMMs where their shapes allow (K and N\n"
              "   multiples of 16, and the rows too when the weight's gradient is wanted), else in bfloat16, as the\n"
              "   path column says; the other lower ops run in bfloat16. Each FP8 GEMM quantizes its input and its\n"
              "   weight to float8_e4m3fn, and in backward the gradient of its output to float8_e5m2 (HYBRID).\n"
              "   No loss scaler: e5m2 keeps float16's exponent range, and each tensor has its own scale.\n\n");
  std::printf("2. Step 1: every tensor quantized with the initial scale 1 (no amax history yet)\n\n");
  print_step(1, steps[0], recipe);
  std::printf("3. Step 2: the scales from step 1's amaxes, fp8_max / amax / 2^margin (the update ran as the\n"
              "   step's autocast was entered, on the device)\n\n");
  print_step(2, steps[1], recipe);
  std::printf("   'amax x scale' is where the tensor's largest magnitude landed, against the format's largest finite\n"
              "   value ('of max'): far below it, small values lose precision or flush to zero (the quantization\n"
              "   rounds them below the smallest subnormal, 2^-9 in e4m3fn and 2^-16 in e5m2); above it, values\n"
              "   saturate to the largest finite value. Delayed scaling uses the history's amax, so a tensor whose\n"
              "   amax grows since the last step can saturate a little.\n");
}

}  // namespace ampgrad::cli
