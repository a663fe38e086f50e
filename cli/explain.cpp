// `ampgrad explain`: one mixed-precision training step of a small MLP, shown as tables:
// the ops and their casts, the scaler's decision, each gradient's health in fp16, and with --anomaly
// the op whose gradient overflowed first. --amp fp8 is cli/explain_fp8.cpp.
#include <cmath>
#include <cstdio>
#include <optional>
#include <filesystem>

#include <nlohmann/json.hpp>

#include <ampgrad/ampgrad.h>
#include "cli/commands.h"
#include "cli/explain.h"
#include "cli/models.h"

namespace ampgrad::cli {

namespace {

// --anomaly: which op's gradient overflowed first, and whose gradients it reached.
struct Overflow {
  // Parameters whose gradient holds inf or NaN: when there are any, the step ran again under
  // DetectAnomalyGuard, and `found` is what it raised.
  std::vector<std::string> reached;
  std::optional<autograd::Anomaly> found;
};

struct NamedHealth {
  std::string name;
  std::string dtype;
  amp::GradHealth h;
};

void print_overflow(const Overflow& o, double scale) {
  std::printf("\n4. Which op overflowed (--anomaly)\n\n");
  if (o.reached.empty()) {
    std::printf("   No gradient held inf or NaN: the scaler took the step and there is no overflow to trace.\n"
                "   (A larger --init-scale, such as 1e7, makes one.)\n");
    return;
  }
  std::string reached;
  for (const std::string& n : o.reached) reached += (reached.empty() ? "" : ", ") + n;
  if (!o.found) {
    std::printf("   The step ran again under autograd::DetectAnomalyGuard, and no op's output or gradient held inf\n"
                "   or NaN this time (the gradients of %s did in the step shown).\n",
                reached.c_str());
    return;
  }
  const autograd::Anomaly& f = *o.found;
  std::printf("   The step ran again under autograd::DetectAnomalyGuard, which checks every op's output and every\n"
              "   gradient a backward node returns for inf and NaN:\n\n");
  if (f.backward && f.input >= 0) {
    std::printf("   first: %s's backward (node %lld of the backward; %s is op %lld of the forward, row %lld above)\n"
                "   returned %lld inf and %lld NaN values in its gradient for input %lld (%s).\n",
                f.op.c_str(), static_cast<long long>(f.node), f.op.c_str(), static_cast<long long>(f.position),
                static_cast<long long>(f.position), static_cast<long long>(f.inf), static_cast<long long>(f.nan),
                static_cast<long long>(f.input), f.tensor.c_str());
  } else {
    std::printf("   first: %s\n", f.message().c_str());
  }
  const double top = f.dtype_max();
  if (f.recomputed && std::isfinite(f.wide_max_abs) && f.wide_max_abs > top) {
    const double ratio = f.wide_max_abs / top;
    const int halvings = static_cast<int>(std::ceil(std::log2(ratio)));
    std::printf("   Run again in %s, that gradient's largest magnitude is %.3g: %.3gx %s's largest finite\n"
                "   value %g. The scale %g was too large by that much; the scaler halves it at each skipped\n"
                "   step, so %d skipped step%s bring%s it under (scale %g).\n",
                std::string(dtype_name(f.wide_dtype)).c_str(), f.wide_max_abs, ratio,
                std::string(dtype_name(f.dtype)).c_str(), top, scale, halvings, halvings == 1 ? "" : "s",
                halvings == 1 ? "s" : "", scale / std::pow(2.0, halvings));
  }
  std::printf("   The overflow reached the gradients of %s; the scaler skipped the step for every parameter.\n",
              reached.c_str());
}

void run_explain(const ExplainArgs& a) {
  if (a.amp == "fp8") return run_explain_fp8(a);
  const Device dev = resolve_device(a.device);
  const DType amp_dtype = a.amp == "bf16" ? kBFloat16 : kFloat16;
  manual_seed(0);
  auto [x, y, source] = explain_batch(dev, a.data, a.batch);
  std::shared_ptr<nn::Sequential> net = explain_mlp(dev);
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.01).momentum(0.9));
  amp::GradScaler scaler(amp::GradScalerOptions().init_scale(a.init_scale));
  auto named = net->named_parameters();
  if (!a.inject_inf.empty()) {
    bool found = false;
    for (auto& [n, p] : named)
      if (n == a.inject_inf) {
        scaler.inject_fault(p, 0);
        found = true;
      }
    std::string names;
    for (auto& [n, p] : named) names += (names.empty() ? "" : ", ") + n;
    AG_CHECK(found, "--inject-inf: no parameter named '{}' (parameters: {})", a.inject_inf, names);
  }

  // 1. Forward under autocast, traced.
  Tensor loss;
  std::vector<amp::OpRecord> records;
  amp::CastCacheStats cache;
  {
    amp::Trace trace;
    amp::AutocastGuard autocast(dev.type, amp_dtype);
    loss = cross_entropy((*net)(x), y);
    records = trace.records();
    cache = amp::cast_cache_stats();
  }
  // 2. Scaled backward, then the health of each gradient before the step.
  const double scale = scaler.get_scale();
  scaler.scale(loss).backward();
  std::vector<NamedHealth> healths;
  for (auto& [n, p] : named) {
    Tensor g = p.grad();
    if (!a.inject_inf.empty() && n == a.inject_inf) {  // show the injected value as the scaler will see it
      NoGradGuard ng;
      g = g.clone();
      g.view({-1}).narrow(0, 0, 1).fill_(INFINITY);
    }
    healths.push_back({n, std::string(dtype_name(g.dtype())), amp::grad_health(g, scale)});
  }
  // 3. With --anomaly, a step whose gradients overflowed runs its forward and backward again
  // under anomaly detection (same parameters, same scale), which names the first op whose
  // gradient held inf or NaN (Note [Anomaly detection] in autograd/anomaly.h).
  Overflow overflow;
  if (a.anomaly) {
    for (const auto& [name, dtype, h] : healths)
      if (h.nonfinite) overflow.reached.push_back(name);
  }
  if (!overflow.reached.empty()) {
    std::vector<Tensor> grads;
    for (auto& [n, p] : named) {
      grads.push_back(p.grad());
      p.set_grad(Tensor());
    }
    try {
      autograd::DetectAnomalyGuard guard;
      Tensor again;
      {
        amp::AutocastGuard autocast(dev.type, amp_dtype);
        again = cross_entropy((*net)(x), y);
      }
      scaler.scale(again).backward();
    } catch (const autograd::AnomalyError& e) {
      overflow.found = e.anomaly();
    }
    for (size_t i = 0; i < named.size(); ++i) named[i].second.set_grad(grads[i]);
  }
  scaler.step(opt);
  scaler.update();
  // Kept by the speed-ups and written by the step (Note [Cast speed-ups] in speedups/casts.cpp).
  const int64_t kept_after_step = speedups::working_copy_count();
  amp::ScalerDecision d = scaler.last_decision();
  const double next_scale = scaler.get_scale();

  if (a.json) {
    nlohmann::json out;
    out["device"] = dev.str();
    out["amp_dtype"] = dtype_name(amp_dtype);
    out["input"] = source;
    for (const auto& r : records) {
      nlohmann::json in = nlohmann::json::array();
      for (DType t : r.input_dtypes) in.push_back(dtype_name(t));
      out["ops"].push_back({{"op", r.op}, {"category", amp::category_name(r.category)}, {"input_dtypes", in},
                            {"chosen_dtype", r.chosen_dtype ? std::string(dtype_name(*r.chosen_dtype)) : ""},
                            {"output_dtype", dtype_name(r.output_dtype)}, {"casts", r.casts},
                            {"read_16bit", r.read_16bit}, {"cache_hits", r.cache_hits}, {"bytes_converted", r.bytes_converted}});
    }
    out["scaler"] = {{"loss", loss.item<double>()}, {"scale", d.scale}, {"found_inf", d.found_inf},
                     {"step_taken", d.step_taken}, {"next_scale", next_scale}};
    out["working_copies_kept"] = kept_after_step;
    for (const auto& [name, dtype, h] : healths)
      out["gradients"].push_back({{"parameter", name}, {"dtype", dtype}, {"numel", h.numel}, {"zero", h.zero},
                                  {"underflow_without_scaling", h.underflow_unscaled},
                                  {"underflow_with_scaling", h.underflow_scaled}, {"max_abs_scaled", h.max_scaled},
                                  {"nonfinite", h.nonfinite}});
    if (!a.inject_inf.empty()) out["injected_inf"] = a.inject_inf;
    if (a.anomaly) {
      nlohmann::json an = {{"overflowed", !overflow.reached.empty()}, {"reached", overflow.reached}};
      if (const auto& f = overflow.found) {
        an["op"] = f->op;
        an["backward"] = f->backward;
        an["position"] = f->position;
        an["node"] = f->node;
        an["input"] = f->input;
        an["tensor"] = f->tensor;
        an["nan"] = f->nan;
        an["inf"] = f->inf;
        if (f->recomputed) {
          an["wide_dtype"] = dtype_name(f->wide_dtype);
          an["wide_max_abs"] = f->wide_max_abs;
        }
        an["message"] = f->message();
      }
      out["anomaly"] = an;
    }
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }

  std::printf("ampgrad explain: MLP 784-256-10 on %s, %s autocast on %s, GradScaler(init_scale %g)\n\n",
              source.c_str(), std::string(dtype_name(amp_dtype)).c_str(), dev.str().c_str(), a.init_scale);
  std::printf("1. Forward pass: each op as autocast saw it\n\n%s\n", amp::format_trace(records).c_str());
  int64_t casts = 0, bytes = 0, read16 = 0;
  for (const auto& r : records) {
    casts += r.casts;
    read16 += r.read_16bit;
    bytes += r.bytes_converted;
  }
  std::printf("   lower ops ran in %s on the cast inputs; fp32 ops computed in float32, reading 16-bit inputs as\n"
              "   they are (\"read 16b\", %lld here: no cast kernel, and their backward writes the 16-bit gradient\n"
              "   directly). %lld casts wrote %lld bytes;\n"
              "   %lld of them are parameter copies (the step's %s working weights): reused for the rest of the\n"
              "   region, then kept, and refreshed by the optimizer step in its own pass, so the next step casts\n"
              "   only its input (%lld working copies are kept after this step).\n\n",
              std::string(dtype_name(amp_dtype)).c_str(), static_cast<long long>(read16), static_cast<long long>(casts),
              static_cast<long long>(bytes), static_cast<long long>(cache.entries), std::string(dtype_name(amp_dtype)).c_str(),
              static_cast<long long>(kept_after_step));
  std::printf("2. The scaler's decision\n\n");
  std::printf("   loss %.4f (float32), multiplied by the scale %g before backward\n", loss.item<double>(), d.scale);
  std::printf("   inf/NaN in any gradient: %s -> optimizer step %s\n", d.found_inf ? "yes" : "no",
              d.step_taken ? "taken (gradients divided by the scale on the fly)" : "SKIPPED (no parameter changed)");
  std::printf("   next scale: %g (%s)\n\n", next_scale,
              d.found_inf ? "backed off by 0.5" : "unchanged; it doubles after 2000 clean steps in a row");
  std::printf("3. Gradient health in float16 (smallest normal 6.1e-05, largest finite 65504)\n\n");
  std::printf("| parameter | dtype | elements | zero | underflow without scaling | underflow with scaling | max |grad| x scale |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const auto& [name, dtype, h] : healths) {
    std::string mx =
        h.nonfinite ? "inf/NaN" : fmt::format("{:.3g}{}", h.max_scaled, h.max_scaled > amp::kFp16Max ? " > 65504!" : "");
    std::printf("| %s | %s | %lld | %.1f%% | %.2f%% | %.2f%% | %s |\n", name.c_str(), dtype.c_str(),
                static_cast<long long>(h.numel), 100 * h.zero, 100 * h.underflow_unscaled, 100 * h.underflow_scaled,
                mx.c_str());
  }
  std::printf("\n   'underflow' counts non-zero gradient values whose magnitude falls below fp16's smallest normal:\n"
              "   without the scaler they would flush towards zero in a float16 backward pass.\n");
  if (!a.inject_inf.empty()) {
    std::printf("\n4. Injected overflow\n\n   An inf was written into %s's gradient before the check. The scaler found it,\n"
                "   skipped the step for every parameter, and cut the scale from %g to %g. Training resumes next step.\n",
                a.inject_inf.c_str(), d.scale, next_scale);
  }
  if (a.anomaly) print_overflow(overflow, d.scale);
}

}  // namespace

ExplainBatch explain_batch(const Device& dev, const std::string& dir, int64_t batch) {
  // A real Fashion-MNIST batch when the files are there, else random images (said in `source`).
  ExplainBatch b;
  if (std::filesystem::exists(dir)) {
    data::Dataset ds = data::load_fashion_mnist(dir, true, batch);
    b.x = ds.images.to(dev);
    b.y = ds.labels.to(dev);
    b.source = fmt::format("a batch of {} Fashion-MNIST images", batch);
  } else {
    b.x = randn({batch, 1, 28, 28}, TensorOptions().device(dev));
    Tensor y = arange(0, batch, 1, TensorOptions(kInt64).device(dev)).view({batch}) * 7;
    b.y = sub(y, mul(div(y, 10).to(kInt64), 10));
    b.source = fmt::format("{} random images (no dataset at {})", batch, dir);
  }
  return b;
}

std::shared_ptr<nn::Sequential> explain_mlp(const Device& dev) {
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Flatten>());
  net->push_back(std::make_shared<nn::Linear>(784, 256));
  net->push_back(std::make_shared<nn::ReLU>());
  net->push_back(std::make_shared<nn::Linear>(256, 10));
  net->to(dev);
  return net;
}

void add_explain(CLI::App& app) {
  auto a = std::make_shared<ExplainArgs>();
  CLI::App* cmd = app.add_subcommand("explain", "Show one AMP training step: casts, the scaler's decision, gradient health");
  cmd->add_option("--device", a->device, "auto, cpu or cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}))->capture_default_str();
  cmd->add_option("--amp", a->amp, "autocast dtype: fp16, bf16, or fp8 (FP8 GEMMs with delayed scaling: two steps, each tensor's "
                 "amax, scale, and values saturated or flushed)")
      ->check(CLI::IsMember({"fp16", "bf16", "fp8"}))->capture_default_str();
  cmd->add_option("--inject-inf", a->inject_inf, "put an inf into this parameter's gradient (e.g. 1.weight)");
  cmd->add_option("--batch-size", a->batch, "images in the batch")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--init-scale", a->init_scale, "the scaler's initial scale")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--data", a->data, "Fashion-MNIST folder (random images when missing)")->capture_default_str();
  auto* inject = cmd->get_option("--inject-inf");
  cmd->add_flag("--anomaly", a->anomaly,
                "when the step overflows, run it again under anomaly detection and name the op whose gradient "
                "overflowed first")
      ->excludes(inject);
  cmd->add_flag("--json", a->json, "print JSON for tools");
  cmd->callback([a] { run_explain(*a); });
}

}  // namespace ampgrad::cli
