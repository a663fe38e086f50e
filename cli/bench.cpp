// `ampgrad bench matmul|conv|step|optim|attention`: speed and accuracy of each precision, side by side.
#include "cli/bench.h"

#include <cmath>
#include <cstdio>

#include <ampgrad/ampgrad.h>
#include <ampgrad/cpu/peak.h>
#include "cli/bench_timer.h"
#include "cli/commands.h"
#include "cli/models.h"

namespace ampgrad::cli {

namespace {

struct Precision {
  const char* name;
  DType dtype;
  bool tf32;
};
const Precision kPrecisions[] = {{"f32", kFloat32, false}, {"tf32", kFloat32, true}, {"f16", kFloat16, false},
                                 {"bf16", kBFloat16, false}};

// ||got - ref|| / ||ref|| in float64 (Frobenius norms).
double rel_error(const Tensor& got, const Tensor& ref64) {
  NoGradGuard no_grad;
  Tensor d = got.to(kFloat64) - ref64;
  return std::sqrt(sum(d * d).item<double>() / sum(ref64 * ref64).item<double>());
}

struct TfGuard {
  explicit TfGuard(bool on) { set_allow_tf32(on); }
  ~TfGuard() { set_allow_tf32(false); }
};

void bench_conv_family(const BenchOptions& o, nlohmann::json& rows);  // below bench_conv

}  // namespace

nlohmann::json bench_matmul(const BenchOptions& o) {
  NoGradGuard no_grad;
  std::vector<int64_t> sizes = o.quick ? std::vector<int64_t>{32, 64}
                               : o.device.is_cuda() ? std::vector<int64_t>{256, 512, 1024, 2048, 4096, 8192}
                                                    : std::vector<int64_t>{128, 256, 512, 1024};
  nlohmann::json rows = nlohmann::json::array();
  // The peak per precision: on CUDA the best rate of this sweep (the card's measured peak); on
  // the CPU its measured FMA peak (Note [CPU peak] in cpu/peak.h).
  const bool cpu = o.device.is_cpu();
  const char* unit = cpu ? "GFLOP/s" : "TFLOP/s";
  const double per_unit = cpu ? 1e9 : 1e12;
  std::printf("\n## matmul: C = A @ B, square n x n, A and B ~ N(0, 1) drawn in float32 (median of %d runs)\n\n", o.reps);
  std::printf("| precision | n | ms | %s | %% of peak | rel. error vs float64 |\n|---|---|---|---|---|---|\n", unit);
  for (const Precision& p : kPrecisions) {
    if (p.tf32 && o.device.is_cpu()) continue;  // TF32 is a tensor-core format
    std::vector<nlohmann::json> prow;
    double peak = 0;
    for (int64_t n : sizes) {
      TensorOptions f32 = TensorOptions(kFloat32).device(o.device);
      Tensor a32 = randn({n, n}, f32), b32 = randn({n, n}, f32);
      Tensor ref = mm(a32.to(kFloat64), b32.to(kFloat64));
      Tensor a = a32.to(p.dtype), b = b32.to(p.dtype);
      TfGuard tf(p.tf32);
      Tensor c = mm(a, b);
      const double err = rel_error(c, ref);
      const double ms = median_ms(o.device, [&] { Tensor r = mm(a, b); }, 3, o.reps, kOpCalls);
      const double tflops = 2.0 * n * n * n / (ms * 1e-3) / 1e12;
      peak = std::max(peak, tflops);
      prow.push_back({{"suite", "matmul"}, {"precision", p.name}, {"n", n}, {"ms", ms}, {"tflops", tflops},
                      {"rel_error", err}, {"device", o.device.str()}});
    }
    if (cpu) peak = cpu::measured_peak_gflops(p.dtype) * 1e9 / 1e12;
    for (auto& r : prow) {
      r["pct_of_peak"] = 100.0 * r["tflops"].get<double>() / peak;
      if (cpu) r["peak_gflops"] = peak * 1e3;
      std::printf("| %s | %lld | %.4f | %.1f | %.0f%% | %.2e |\n", p.name, static_cast<long long>(r["n"].get<int64_t>()),
                  r["ms"].get<double>(), r["tflops"].get<double>() * 1e12 / per_unit, r["pct_of_peak"].get<double>(),
                  r["rel_error"].get<double>());
      rows.push_back(r);
    }
  }
#if AMPGRAD_WITH_CUDA
  // FP8 (ops/float8_ops.h): e4m3 operands quantized with per-tensor scales (amax / 448), one
  // bfloat16 output; the error against float64 includes the quantization's, as a user sees it.
  const cuda::DeviceProperties* props = o.device.is_cuda() ? &cuda::device_properties(o.device.index) : nullptr;
  if (props && (props->major > 8 || (props->major == 8 && props->minor >= 9))) {
    std::vector<nlohmann::json> prow;
    double peak = 0;
    for (int64_t n : sizes) {
      TensorOptions f32 = TensorOptions(kFloat32).device(o.device);
      Tensor a32 = randn({n, n}, f32), b32 = randn({n, n}, f32);
      Tensor ref = mm(a32.to(kFloat64), b32.to(kFloat64));
      Tensor sa = (max(a32.abs()) / 448.0).reshape({1}), sb = (max(b32.abs()) / 448.0).reshape({1});
      Tensor a = (a32 / sa).to(kFloat8_e4m3fn);
      Tensor b = (b32.t().contiguous() / sb).to(kFloat8_e4m3fn).t();
      const double err = rel_error(scaled_mm(a, b, sa, sb, Tensor(), kBFloat16), ref);
      const double ms = median_ms(o.device, [&] { Tensor r = scaled_mm(a, b, sa, sb, Tensor(), kBFloat16); }, 3,
                                  o.reps, kOpCalls);
      const double tflops = 2.0 * n * n * n / (ms * 1e-3) / 1e12;
      peak = std::max(peak, tflops);
      prow.push_back({{"suite", "matmul"}, {"precision", "fp8"}, {"n", n}, {"ms", ms}, {"tflops", tflops},
                      {"rel_error", err}, {"device", o.device.str()}});
    }
    for (auto& r : prow) {
      r["pct_of_peak"] = 100.0 * r["tflops"].get<double>() / peak;
      std::printf("| fp8 (e4m3, bf16 out) | %lld | %.4f | %.1f | %.0f%% | %.2e |\n",
                  static_cast<long long>(r["n"].get<int64_t>()), r["ms"].get<double>(), r["tflops"].get<double>(),
                  r["pct_of_peak"].get<double>(), r["rel_error"].get<double>());
      rows.push_back(r);
    }
  }
#endif
  if (cpu) {
    std::printf("\n%% of peak: against this CPU's measured peak with %d threads (Note [CPU peak] in cpu/peak.h):", get_num_threads());
    for (const Precision& p : kPrecisions)
      if (!p.tf32)
        std::printf(" %s %.0f GFLOP/s (%s);", p.name, cpu::measured_peak_gflops(p.dtype), cpu::peak_method(p.dtype).c_str());
    std::printf("\n");
  } else {
    std::printf("\n%% of peak: against the best rate this precision reached in the sweep (the card's measured peak).\n");
  }
  return rows;
}

nlohmann::json bench_conv(const BenchOptions& o) {
#if AMPGRAD_WITH_CUDA
  // Time cuDNN's candidates once per shape, as PyTorch's cudnn.benchmark = True does.
  cuda::set_cudnn_benchmark(true);
  struct Off {
    ~Off() { cuda::set_cudnn_benchmark(false); }
  } off;
#endif
  struct Shape4 {
    int64_t n, c, h, k;
  };
  std::vector<Shape4> shapes = o.quick ? std::vector<Shape4>{{2, 4, 8, 4}}
                               : o.device.is_cuda() ? std::vector<Shape4>{{64, 64, 56, 64}, {64, 128, 28, 128}, {64, 256, 14, 256}}
                                                    : std::vector<Shape4>{{8, 16, 28, 16}, {128, 32, 14, 64}};
  nlohmann::json rows = nlohmann::json::array();
  std::printf("\n## conv2d 3x3, stride 1, padding 1: forward and forward+backward, %s (median of %d runs)\n\n",
              o.device.is_cpu() ? "oneDNN (float16 widened to float32)" : "cuDNN benchmark mode", o.reps);
  const bool cpu = o.device.is_cpu();
  const double per_unit = cpu ? 1e9 : 1e12;
  const char* unit = cpu ? "GFLOP/s" : "TFLOP/s";
  std::printf("| precision | layout | N C H K | fwd ms | fwd %s | fwd+bwd ms | fwd+bwd %s | %s | rel. error vs float64 |\n",
              unit, unit, cpu ? "fwd+bwd % of peak" : "-");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const Shape4& s : shapes) {
    TensorOptions f32 = TensorOptions(kFloat32).device(o.device);
    Tensor x32 = randn({s.n, s.c, s.h, s.h}, f32), w32 = randn({s.k, s.c, 3, 3}, f32) * (1.0 / std::sqrt(9.0 * s.c));
    Tensor ref;
    {
      NoGradGuard ng;
      ref = conv2d(x32.to(kFloat64), w32.to(kFloat64), Tensor(), {1, 1}, {1, 1});
    }
    const double flop = 2.0 * s.n * s.k * s.h * s.h * s.c * 9;
    for (const Precision& p : kPrecisions) {
      if (p.tf32 && o.device.is_cpu()) continue;
      for (bool nhwc : {false, true}) {
        TfGuard tf(p.tf32);
        Tensor x = x32.to(p.dtype), w = w32.to(p.dtype);
        if (nhwc) {
          x = x.to_channels_last();
          w = w.to_channels_last();
        }
        x = x.detach().requires_grad_();
        w = w.detach().requires_grad_();
        Tensor out;
        {
          NoGradGuard ng;
          out = conv2d(x, w, Tensor(), {1, 1}, {1, 1});
        }
        const double err = rel_error(out, ref);
        const double fwd = median_ms(o.device, [&] { NoGradGuard ng; Tensor r = conv2d(x, w, Tensor(), {1, 1}, {1, 1}); }, 3, o.reps, kOpCalls);
        // The incoming gradient in the output's layout, as a network's next layer (and the
        // PyTorch side, benchmarks/compare_torch.py) would hand it over.
        Tensor g = nhwc ? ones_like(out).to_channels_last() : ones_like(out);
        const double both = median_ms(o.device, [&] {
          Tensor r = conv2d(x, w, Tensor(), {1, 1}, {1, 1});
          r.backward(g);
        }, 3, o.reps, kOpCalls);
        nlohmann::json r{{"suite", "conv"}, {"precision", p.name}, {"layout", nhwc ? "NHWC" : "NCHW"},
                         {"n", s.n}, {"c", s.c}, {"h", s.h}, {"k", s.k}, {"fwd_ms", fwd},
                         {"fwd_tflops", flop / (fwd * 1e-3) / 1e12}, {"fwd_bwd_ms", both},
                         {"fwd_bwd_tflops", 3 * flop / (both * 1e-3) / 1e12}, {"rel_error", err},
                         {"device", o.device.str()}};
        const std::string pct =
            cpu ? fmt::format("{:.0f}%", 100.0 * r["fwd_bwd_tflops"].get<double>() * 1e3 / cpu::measured_peak_gflops(p.dtype))
                : "-";
        std::printf("| %s | %s | %lld %lld %lld %lld | %.3f | %.1f | %.3f | %.1f | %s | %.2e |\n", p.name,
                    nhwc ? "NHWC" : "NCHW", static_cast<long long>(s.n), static_cast<long long>(s.c),
                    static_cast<long long>(s.h), static_cast<long long>(s.k), fwd,
                    r["fwd_tflops"].get<double>() * 1e12 / per_unit, both,
                    r["fwd_bwd_tflops"].get<double>() * 1e12 / per_unit, pct.c_str(), err);
        rows.push_back(r);
      }
    }
  }
  bench_conv_family(o, rows);
  return rows;
}

namespace {

// One convolution of the family rows: the op, its shapes and its stride/padding (the same
// along every spatial dim). compare_torch.py rebuilds PyTorch's twin from the JSON row.
struct ConvFamilyShape {
  const char* op;
  Shape x, w;
  int64_t stride, padding, output_padding;
};

Tensor run_family(const ConvFamilyShape& s, const Tensor& x, const Tensor& w) {
  const int64_t st = s.stride, pd = s.padding, op = s.output_padding;
  const std::string name = s.op;
  if (name == "conv1d") return conv1d(x, w, Tensor(), st, pd);
  if (name == "conv3d") return conv3d(x, w, Tensor(), {st, st, st}, {pd, pd, pd});
  return conv_transpose2d(x, w, Tensor(), {st, st}, {pd, pd}, {op, op});
}

// Multiply-adds of one call, times 2: every (input element, weight element) pair of a
// transposed convolution, every (output element, weight element of its group) of the others.
double family_flop(const ConvFamilyShape& s, const Tensor& out) {
  const bool transposed = std::string(s.op) == "conv_transpose2d";
  int64_t kvol = 1;
  for (size_t d = 2; d < s.w.size(); ++d) kvol *= s.w[d];
  if (transposed) {
    int64_t xn = 1;
    for (int64_t v : s.x) xn *= v;
    return 2.0 * static_cast<double>(xn) * static_cast<double>(s.w[1] * kvol);
  }
  return 2.0 * static_cast<double>(out.numel()) * static_cast<double>(s.w[1] * kvol);
}

// conv1d, conv3d and conv_transpose2d: forward and forward+backward per precision.
void bench_conv_family(const BenchOptions& o, nlohmann::json& rows) {
  const std::vector<ConvFamilyShape> shapes =
      o.quick ? std::vector<ConvFamilyShape>{{"conv1d", {2, 4, 16}, {4, 4, 3}, 1, 1, 0},
                                             {"conv3d", {1, 2, 4, 6, 6}, {2, 2, 3, 3, 3}, 1, 1, 0},
                                             {"conv_transpose2d", {1, 4, 5, 5}, {4, 2, 4, 4}, 2, 1, 0}}
      : o.device.is_cuda()
          ? std::vector<ConvFamilyShape>{{"conv1d", {64, 256, 1024}, {256, 256, 3}, 1, 1, 0},
                                         {"conv3d", {8, 64, 16, 32, 32}, {64, 64, 3, 3, 3}, 1, 1, 0},
                                         {"conv_transpose2d", {64, 128, 28, 28}, {128, 64, 4, 4}, 2, 1, 0}}
          : std::vector<ConvFamilyShape>{{"conv1d", {8, 32, 256}, {32, 32, 3}, 1, 1, 0},
                                         {"conv3d", {2, 8, 8, 16, 16}, {8, 8, 3, 3, 3}, 1, 1, 0},
                                         {"conv_transpose2d", {8, 32, 14, 14}, {32, 16, 4, 4}, 2, 1, 0}};
  const bool cpu = o.device.is_cpu();
  const char* unit = cpu ? "GFLOP/s" : "TFLOP/s";
  const double per_unit = cpu ? 1e9 : 1e12;
  std::printf("\n## conv1d, conv3d, conv_transpose2d: forward and forward+backward, NCHW, %s (median of %d runs)\n\n",
              cpu ? "oneDNN (float16 widened to float32)" : "cuDNN benchmark mode", o.reps);
  std::printf("| op | precision | x | weight | stride, padding | fwd ms | fwd %s | fwd+bwd ms | fwd+bwd %s | "
              "rel. error vs float64 |\n|---|---|---|---|---|---|---|---|---|---|\n", unit, unit);
  for (const ConvFamilyShape& s : shapes) {
    const TensorOptions f32 = TensorOptions(kFloat32).device(o.device);
    int64_t fan_in = 1;
    for (size_t d = 1; d < s.w.size(); ++d) fan_in *= s.w[d];
    Tensor x32 = randn(s.x, f32), w32 = randn(s.w, f32) * (1.0 / std::sqrt(static_cast<double>(fan_in)));
    Tensor ref;
    {
      NoGradGuard ng;
      ref = run_family(s, x32.to(kFloat64), w32.to(kFloat64));
    }
    const double flop = family_flop(s, ref);
    for (const Precision& p : kPrecisions) {
      if (p.tf32 && o.device.is_cpu()) continue;
      TfGuard tf(p.tf32);
      Tensor x = x32.to(p.dtype).detach().requires_grad_(), w = w32.to(p.dtype).detach().requires_grad_();
      Tensor out;
      {
        NoGradGuard ng;
        out = run_family(s, x, w);
      }
      const double err = rel_error(out, ref);
      const double fwd = median_ms(o.device, [&] { NoGradGuard ng; Tensor r = run_family(s, x, w); }, 3, o.reps, kOpCalls);
      const Tensor g = ones_like(out);
      const double both = median_ms(o.device, [&] { run_family(s, x, w).backward(g); }, 3, o.reps, kOpCalls);
      nlohmann::json r{{"suite", "conv"}, {"op", s.op}, {"precision", p.name}, {"layout", "NCHW"}, {"x", s.x},
                       {"w", s.w}, {"stride", s.stride}, {"padding", s.padding}, {"output_padding", s.output_padding},
                       {"fwd_ms", fwd}, {"fwd_tflops", flop / (fwd * 1e-3) / 1e12}, {"fwd_bwd_ms", both},
                       {"fwd_bwd_tflops", 3 * flop / (both * 1e-3) / 1e12}, {"rel_error", err},
                       {"device", o.device.str()}};
      std::printf("| %s | %s | %s | %s | %lld, %lld | %.3f | %.1f | %.3f | %.1f | %.2e |\n", s.op, p.name,
                  shape_str(s.x).c_str(), shape_str(s.w).c_str(), static_cast<long long>(s.stride),
                  static_cast<long long>(s.padding), fwd, r["fwd_tflops"].get<double>() * 1e12 / per_unit, both,
                  r["fwd_bwd_tflops"].get<double>() * 1e12 / per_unit, err);
      rows.push_back(r);
    }
  }
}

}  // namespace

void add_bench(CLI::App& app) {
  auto suite = std::make_shared<std::string>("matmul");
  auto device = std::make_shared<std::string>("auto");
  auto json = std::make_shared<std::string>();
  auto quick = std::make_shared<bool>(false);
  auto reps = std::make_shared<int>(30);
  auto fold_ab = std::make_shared<bool>(false);
  auto kernel_graphs_ab = std::make_shared<bool>(false);
  auto launch_batches_ab = std::make_shared<bool>(false);
  auto fp8 = std::make_shared<bool>(false);
  auto models = std::make_shared<std::vector<std::string>>();
  auto batch = std::make_shared<int64_t>(0);
  auto threads = std::make_shared<int>(0);
  CLI::App* cmd = app.add_subcommand("bench", "Measure each precision's speed and accuracy (matmul, conv, step, optim, attention)");
  cmd->add_option("suite", *suite, "matmul, conv, step, optim, attention or all")
      ->check(CLI::IsMember({"matmul", "conv", "step", "optim", "attention", "all"}))->capture_default_str();
  cmd->add_option("--device", *device, "auto, cpu or cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}))->capture_default_str();
  cmd->add_option("--json", *json, "also write the rows as JSON to this file ('-' for stdout)");
  cmd->add_flag("--quick", *quick, "a tiny sweep (seconds, for a smoke test)");
  cmd->add_option("--reps", *reps, "timed runs per case (the median is reported)")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_flag("--fold-ab", *fold_ab,
                "step: also time the eager AMP step with scaler.step() and update() apart, not "
                "step_and_update(), in turns with the others (what the one-launch step saves)");
  cmd->add_flag("--kernel-graphs-ab", *kernel_graphs_ab,
                "step: also time the eager fp32 and AMP steps with ampgrad's kernels launched directly, not as "
                "one-kernel CUDA graphs, in turns with the others (what kernel graphs save; CUDA only)");
  cmd->add_flag("--launch-batches-ab", *launch_batches_ab,
                "step: also time the eager fp32 and AMP steps with each graph launched at once, not held back "
                "and submitted as one graph per phase of the step, in turns with the others (what batches "
                "save; CUDA only)");
  cmd->add_flag("--fp8", *fp8,
                "step: also time AMP with FP8 GEMMs (FP8 autocast, delayed scaling, e4m3 forward and e5m2 "
                "gradients; the other ops in bf16, no loss scaler), in turns with the others");
  cmd->add_option("--models", *models, "step: only these models (mlp, cnn, wide, lstm, lstm_cells, gpt, gpt_tiny; default all)")
      ->delimiter(',')
      ->check(CLI::IsMember({"mlp", "cnn", "wide", "lstm", "lstm_cells", "gpt", "gpt_tiny"}));
  cmd->add_option("--batch", *batch, "step: every model at this batch size (default: each model's own)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--threads", *threads,
                  "CPU threads of the fast CPU kernels (default: OMP_NUM_THREADS, else every logical CPU)")
      ->check(CLI::PositiveNumber);
  cmd->callback([=] {
    BenchOptions o;
    o.models = *models;
    o.batch = *batch;
    if (*threads > 0) set_num_threads(*threads);
    o.fold_ab = *fold_ab;
    o.kernel_graphs_ab = *kernel_graphs_ab;
    o.launch_batches_ab = *launch_batches_ab;
    o.fp8 = *fp8;
    o.device = resolve_device(*device);
    o.quick = *quick;
    o.reps = *reps;
    manual_seed(0);
    if (o.device.is_cpu())
      std::printf("bench: running on the CPU (no CUDA device%s): %d threads, small sizes, wall-clock timing\n",
                  cuda::is_available() ? " chosen" : " found", get_num_threads());
    else
      std::printf("bench: %s (%d SMs), CUDA-event timing\n", cuda::device_properties(o.device.index).name.c_str(),
                  cuda::device_properties(o.device.index).sm_count);
    nlohmann::json all = nlohmann::json::array();
    auto run = [&](const std::string& name, nlohmann::json (*fn)(const BenchOptions&)) {
      if (*suite != name && *suite != "all") return;
      for (auto& r : fn(o)) all.push_back(r);
    };
    run("matmul", bench_matmul);
    run("conv", bench_conv);
    run("step", bench_step);
    run("optim", bench_optim);
    run("attention", bench_attention);
    if (*json == "-") {
      std::printf("%s\n", all.dump(2).c_str());
    } else if (!json->empty()) {
      std::FILE* f = std::fopen(json->c_str(), "w");
      AG_CHECK(f != nullptr, "bench: cannot write {}", *json);
      std::fputs(all.dump(2).c_str(), f);
      std::fclose(f);
      std::printf("\nbench: wrote %zu rows to %s\n", all.size(), json->c_str());
    }
  });
}

}  // namespace ampgrad::cli
