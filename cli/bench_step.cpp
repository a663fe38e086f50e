// `ampgrad bench step` (whole training steps, fp32 vs AMP, eager vs CUDA graph) and
// `ampgrad bench optim` (one scaled Adam step over 64 tensors, in GB/s).
#include <algorithm>
#include <array>
#include <cstdio>
#include <optional>

#include <ampgrad/ampgrad.h>
#include "cli/bench.h"
#include "cli/bench_timer.h"
#include "cli/gpt.h"
#include "cli/models.h"
#if AMPGRAD_WITH_CUDA
#include <ampgrad/cuda/call_graph.h>
#endif

namespace ampgrad::cli {

namespace {

std::shared_ptr<nn::Sequential> wide_mlp(Device dev) {
  auto net = std::make_shared<nn::Sequential>();
  for (int i = 0; i < 4; ++i) {
    net->push_back(std::make_shared<nn::Linear>(4096, 4096));
    if (i < 3) net->push_back(std::make_shared<nn::ReLU>());
  }
  net->to(dev);
  return net;
}

// Steps per timing sample: a training loop does not synchronize between steps (nor does the
// scaler), so a step's cost is its share of a run of steps; the single-step latency is also
// reported (cli/bench_timer.h).
constexpr int kStepCalls = 10;

struct StepCase {
  std::string name;
  std::string model;  // mlp, cnn, wide, lstm, lstm_cells, gpt, gpt_tiny
  int64_t batch;
  bool recurrent() const { return model == "lstm" || model == "lstm_cells"; }
  bool gpt() const { return model == "gpt" || model == "gpt_tiny"; }
};

// The character GPTs (cli/gpt.h): "small" vocab 256, context 128, width 256, 4 layers, 8
// heads; "tiny" vocab 64, context 32, width 64, 2 layers, 4 heads. AdamW as the GPT job.
GptConfig gpt_config(const std::string& model) {
  return model == "gpt" ? GptConfig{256, 128, 256, 4, 8} : GptConfig{64, 32, 64, 2, 4};
}

const StepCase kGptTiny{"GPT tiny (ctx 32, w 64, 2L, 4H)", "gpt_tiny", 8};

// The character models (cli/models.h): vocab 96, embedding 64, 2 LSTM layers of 256, seq 64.
constexpr int64_t kCharVocab = 96, kCharSeq = 64;

}  // namespace

nlohmann::json bench_step(const BenchOptions& o) {
  std::vector<StepCase> cases = o.quick ? std::vector<StepCase>{{"MLP 784-512-512-10", "mlp", 16}}
                                        : std::vector<StepCase>{{"MLP 784-512-512-10", "mlp", 64},
                                                                {"MLP 784-512-512-10", "mlp", 1024},
                                                                {"Fashion-MNIST CNN", "cnn", 128},
                                                                {"4x Linear(4096)", "wide", 4096},
                                                                {"char LSTM 2x256, seq 64", "lstm", 32},
                                                                {"char LSTMCell loop 2x256, seq 64", "lstm_cells", 32},
                                                                {"GPT small (ctx 128, w 256, 4L, 8H)", "gpt", 32},
                                                                kGptTiny};
  if (o.device.is_cpu() && !o.quick)
    cases = {{"MLP 784-512-512-10", "mlp", 64}, {"Fashion-MNIST CNN", "cnn", 128}, kGptTiny};
  if (o.batch > 0)
    for (StepCase& c : cases) c.batch = o.batch;
  if (!o.models.empty())
    std::erase_if(cases, [&](const StepCase& c) { return std::ranges::find(o.models, c.model) == o.models.end(); });
  nlohmann::json rows = nlohmann::json::array();
  // AMP as each device's autocast does it: float16 with a GradScaler on CUDA, bfloat16 (no
  // scaler: its range is float32's) on the CPU, as PyTorch's CPU autocast.
  const bool cpu = o.device.is_cpu();
  const DType amp_dtype = cpu ? kBFloat16 : kFloat16;
  std::printf("\n## Training step: forward, backward, SGD(momentum 0.9) step (Adam for the LSTM models, AdamW for the GPTs); AMP = %s\n\n"
              "ms/step: the mean of %d back-to-back steps, as a training loop runs them (median of the samples);\n"
              "host ms/step: the host's time to queue a step (at ms/step: host-bound, the device waits);\n"
              "one step: a single step between two synchronizations (its latency, host time included);\n"
              "fp32 and AMP samples are taken in turns (Note [Interleaved samples] in cli/bench_timer.h).\n\n",
              cpu ? "bf16 autocast" : "fp16 autocast + GradScaler", kStepCalls);
  std::printf("| model | batch | precision | mode | ms/step | host ms/step | images/s | ms, one step |\n"
              "|---|---|---|---|---|---|---|---|\n");
  // One setup per precision; fp32 and AMP are timed in turns (Note [Interleaved samples] in
  // cli/bench_timer.h), eager first, then graphed.
  struct Setup {
    // Each setup's tensors come from a memory pool of its own (Note [Memory pools] in
    // cuda/runtime.h), so the variants timed in turns do not move each other's addresses and
    // each replays its calls as graphs as a training loop alone would. Declared first: the
    // pool outlives the setup's tensors.
    std::unique_ptr<cuda::MemPool> pool;
    std::shared_ptr<nn::Module> net;
    Tensor x, y, loss;
    std::unique_ptr<optim::Optimizer> opt;
    std::unique_ptr<amp::GradScaler> scaler;
    std::unique_ptr<amp::Fp8Recipe> fp8;  // FP8 autocast's scales (--fp8)
    std::function<void()> step;
#if AMPGRAD_WITH_CUDA
    std::unique_ptr<cuda::CudaGraph> graph;
#endif
  };
  auto make_setup = [&](const StepCase& c, bool amp_on, bool graphed, bool fold = true, bool fp8 = false) {
    auto st = std::make_unique<Setup>();
    Setup& s = *st;
    std::optional<cuda::MemPoolGuard> in_pool;
    if (o.device.is_cuda()) {
      s.pool = std::make_unique<cuda::MemPool>(o.device.index);
      in_pool.emplace(*s.pool);
    }
    manual_seed(0);
    const TensorOptions on = TensorOptions().device(o.device);
    if (c.gpt()) {
      const GptConfig g = gpt_config(c.model);
      s.net = std::make_shared<Gpt>(g);
      s.net->to(o.device);
      s.x = (rand({c.batch, g.context}, on) * static_cast<double>(g.vocab)).to(kInt64);
      s.y = (rand({c.batch * g.context}, on) * static_cast<double>(g.vocab)).to(kInt64);
      s.opt = std::make_unique<optim::AdamW>(s.net->parameters(), gpt_adamw(1e-3));
    } else if (c.recurrent()) {
      // Characters [seq, batch] and the next ones [seq * batch], drawn uniformly.
      s.net = std::make_shared<CharLstm>(kCharVocab, 64, 256, c.model == "lstm_cells", o.device);
      s.x = (rand({kCharSeq, c.batch}, on) * static_cast<double>(kCharVocab)).to(kInt64);
      s.y = (rand({kCharSeq * c.batch}, on) * static_cast<double>(kCharVocab)).to(kInt64);
      s.opt = std::make_unique<optim::Adam>(s.net->parameters(), optim::AdamOptions(1e-3));
    } else {
      if (c.model == "wide") s.net = wide_mlp(o.device);
      else s.net = make_model(c.model, o.device);
      const int64_t classes = c.model == "wide" ? 4096 : 10;
      s.x = c.model == "wide" ? randn({c.batch, 4096}, on) : randn({c.batch, 1, 28, 28}, on);
      s.y = (rand({c.batch}, on) * static_cast<double>(classes)).to(kInt64);
      s.opt = std::make_unique<optim::SGD>(s.net->parameters(), optim::SGDOptions(0.01).momentum(0.9));
    }
    s.scaler = std::make_unique<amp::GradScaler>(amp::GradScalerOptions().enabled(amp_on && amp_dtype == kFloat16 && !fp8));
    if (fp8) s.fp8 = std::make_unique<amp::Fp8Recipe>();
    const DeviceType type = o.device.type;
    s.step = [&s, type, amp_on, amp_dtype, fold] {
      std::optional<cuda::MemPoolGuard> in_pool;
      if (s.pool) in_pool.emplace(*s.pool);
      // The default, set_to_none (as PyTorch 2), eager and graphed: each gradient comes out of
      // its GEMM as the parameter's .grad, in graph memory when graphed (Note [CUDA graphs]).
      // benchmarks/compare_torch.py does the same on PyTorch's side.
      s.opt->zero_grad();
      {
        std::optional<amp::AutocastGuard> autocast;
        if (s.fp8) autocast.emplace(type, kFloat8_e4m3fn, *s.fp8);
        else autocast.emplace(type, amp_dtype, amp_on);
        Tensor out = (*s.net)(s.x);
        if (out.dim() == 3) out = out.reshape({-1, out.size(-1)});  // the GPT's [B, T, vocab]
        s.loss = cross_entropy(out, s.y);
      }
      s.scaler->scale(s.loss).backward();
      // One launch for the check, the step and the scale update where it can (Note [One-launch
      // scaled step]); --fold-ab times step() and update() apart as well.
      if (fold) {
        s.scaler->step_and_update(*s.opt);
      } else {
        s.scaler->step(*s.opt);
        s.scaler->update();
      }
    };
#if AMPGRAD_WITH_CUDA
    if (graphed) {
      for (int i = 0; i < 3; ++i) s.step();
      s.graph = std::make_unique<cuda::CudaGraph>();
      s.graph->capture(s.step);
    }
#endif
    return st;
  };
  // The variants timed in turns: fp32 and AMP, eager and graphed; the A/B setups, eager only:
  // AMP with the scaler's launches apart (--fold-ab), fp32 and AMP with kernels launched
  // directly (--kernel-graphs-ab, Note [Kernel graphs] in cuda/launch.cuh), and fp32 and AMP
  // with graphs launched at once, not in batches (--launch-batches-ab, Note [Launch batches]
  // in cuda/call_graph.h). The latter two run the very setups (model, tensors, memory) of the
  // fp32 and AMP rows, so that only the launches differ.
  struct Variant {
    const char* precision;
    bool amp, fold = true, kernel_graphs = true, ab = false;
    int shares = -1;  // the variant whose setup this one steps, or -1 for its own
    bool batches = true;
    bool fp8 = false;
  };
  std::vector<Variant> variants = {{"fp32", false}, {cpu ? "AMP bf16" : "AMP fp16", true}};
  if (o.fp8) variants.push_back({"AMP fp8", true, true, true, false, -1, true, true});
  if (o.fold_ab) variants.push_back({"AMP fp16, scaler apart", true, false, true, true});
  if (o.kernel_graphs_ab && o.device.is_cuda()) {
    variants.push_back({"fp32, kernels launched directly", false, true, false, true, 0});
    variants.push_back({"AMP fp16, kernels launched directly", true, true, false, true, 1});
  }
  if (o.launch_batches_ab && o.device.is_cuda()) {
    variants.push_back({"fp32, graphs not batched", false, true, true, true, 0, false});
    variants.push_back({"AMP fp16, graphs not batched", true, true, true, true, 1, false});
  }
  const size_t nv = variants.size();
  for (const StepCase& c : cases) {
    // [variant][graphed]
    std::vector<std::array<double, 2>> ms(nv), host_ms(nv), ms_single(nv);
    double misses = -1;  // call-graph misses per eager step, every variant's together (CUDA)
    double evicted = 0;  // and keys pushed out of the table per eager step
    for (bool graphed : {false, true}) {
      // The recurrent models time eagerly only (their per-step host cost is what they measure).
      if (graphed && (!o.device.is_cuda() || c.recurrent())) continue;
      std::vector<std::unique_ptr<Setup>> setups;  // one per variant timed
      std::vector<std::function<void()>> fns;
      for (const Variant& v : variants) {
        if (graphed && v.ab) continue;
        setups.push_back(v.shares >= 0 ? nullptr : make_setup(c, v.amp, graphed, v.fold, v.fp8));
        Setup* s = v.shares >= 0 ? setups[static_cast<size_t>(v.shares)].get() : setups.back().get();
#if AMPGRAD_WITH_CUDA
        if (graphed) {
          fns.push_back([s] { s->graph->replay(); });
          continue;
        }
        if (!v.kernel_graphs || !v.batches) {
          fns.push_back([s, v] {
            const cuda::KernelGraphs mode = cuda::kernel_graphs();
            const bool batches = cuda::launch_batches();
            if (!v.kernel_graphs) cuda::set_kernel_graphs(cuda::KernelGraphs::off);
            if (!v.batches) cuda::set_launch_batches(false);
            s->step();
            cuda::set_kernel_graphs(mode);
            cuda::set_launch_batches(batches);
          });
          continue;
        }
#endif
        fns.push_back(s->step);
      }
      // Warm-ups apart from the timing, so that the call-graph counters below see timed steps
      // only: a fresh setup's first steps capture every call (a key runs directly twice, then
      // is captured), the rest should replay.
      for (const auto& fn : fns)
        for (int i = 0; i < 5; ++i) fn();
#if AMPGRAD_WITH_CUDA
      const cuda::CallGraphStats s0 = cuda::call_graph_stats();
#endif
      const Timings many = time_interleaved(o.device, fns, 0, o.reps, kStepCalls);
#if AMPGRAD_WITH_CUDA
      // Calls whose key was new or not yet captured, per timed step, every variant's together:
      // in a steady loop every call repeats, and this is near 0 (Note [Call graphs]).
      if (!graphed && o.device.is_cuda()) {
        const cuda::CallGraphStats s1 = cuda::call_graph_stats();
        const double steps = static_cast<double>(fns.size() * static_cast<size_t>(o.reps * kStepCalls));
        misses = static_cast<double>(s1.direct - s0.direct + s1.captured - s0.captured) / steps;
        evicted = static_cast<double>(s1.evicted - s0.evicted) / steps;
      }
#endif
      const std::vector<double> one = median_ms_interleaved(o.device, fns, 5, o.reps, 1);
      for (size_t a = 0; a < fns.size(); ++a) {
        ms[a][graphed] = many.ms[a];
        host_ms[a][graphed] = many.host_ms[a];
        ms_single[a][graphed] = one[a];
      }
    }
    // Peak memory of one eager step (CUDA): each variant's setup alone, after warm-ups, from a
    // reset peak to the step's end; everything allocated counts (parameters, gradients,
    // optimizer state, working copies), as torch.cuda.max_memory_allocated does.
    std::vector<double> peak_mb(nv, -1);
#if AMPGRAD_WITH_CUDA
    if (o.device.is_cuda()) {
      for (size_t p = 0; p < nv; ++p) {
        if (variants[p].ab) continue;
        cuda::synchronize();
        std::unique_ptr<Setup> s = make_setup(c, variants[p].amp, false, variants[p].fold, variants[p].fp8);
        for (int i = 0; i < 3; ++i) s->step();
        cuda::synchronize();
        cuda::reset_peak_memory_stats(o.device.index);
        s->step();
        cuda::synchronize();
        peak_mb[p] = static_cast<double>(cuda::memory_stats(o.device.index).peak_allocated) / (1 << 20);
      }
    }
#endif
    for (size_t p = 0; p < nv; ++p) {
      for (bool graphed : {false, true}) {
        if ((graphed && (!o.device.is_cuda() || c.recurrent())) || (graphed && variants[p].ab)) continue;
        const double t = ms[p][graphed], th = host_ms[p][graphed], t1 = ms_single[p][graphed];
        const char* prec = variants[p].precision;
        const char* mode = graphed ? "CUDA graph" : "eager";
        std::printf("| %s | %lld | %s | %s | %.3f | %.3f | %.0f | %.3f |\n", c.name.c_str(),
                    static_cast<long long>(c.batch), prec, mode, t, th, c.batch / (t * 1e-3), t1);
        std::fflush(stdout);
        rows.push_back({{"suite", "step"}, {"model", c.name}, {"batch", c.batch}, {"precision", prec}, {"mode", mode},
                        {"ms", t}, {"host_ms", th}, {"ms_single", t1}, {"images_per_s", c.batch / (t * 1e-3)},
                        {"ab", variants[p].ab}, {"device", o.device.str()}});
        if (!graphed && peak_mb[p] >= 0) rows.back()["peak_mb"] = peak_mb[p];
        if (!graphed && misses >= 0) {
          rows.back()["graph_misses_per_step"] = misses;
          rows.back()["graph_evictions_per_step"] = evicted;
        }
      }
    }
    if (misses > 0.5)
      std::fprintf(stderr, "bench step: %s, eager: %.1f calls a step ran outside call graphs (keys that did not "
                   "repeat, Note [Call graphs] in cuda/call_graph.h), %.1f keys a step pushed out of the table "
                   "(Note [Call-graph table size] in cuda/call_graph.cpp)\n", c.name.c_str(), misses, evicted);
  }
  return rows;
}

nlohmann::json bench_optim(const BenchOptions& o) {
  const int64_t tensors = o.quick ? 4 : 64, numel = o.quick ? 4096 : (o.device.is_cuda() ? 1 << 20 : 1 << 16);
  nlohmann::json rows = nlohmann::json::array();
  // The copy bandwidth of this device, measured now: a float32 copy of all parameters.
  Tensor src = randn({tensors * numel}, TensorOptions().device(o.device)), dst = empty_like(src);
  const double copy_ms = median_ms(o.device, [&] { dst.copy_(src); }, 3, o.reps);
  const double copy_gbs = 2.0 * src.nbytes() / (copy_ms * 1e-3) / 1e9;
  std::printf("\n## Optimizer step: unscale + inf/NaN check + Adam, %lld tensors of %lld elements\n\n",
              static_cast<long long>(tensors), static_cast<long long>(numel));
  std::printf("| parameters | ms | bytes moved | GB/s | vs copy (%.0f GB/s) |\n|---|---|---|---|---|\n", copy_gbs);
  for (bool master : {false, true}) {
    manual_seed(1);
    const DType pd = master ? kFloat16 : kFloat32;
    std::vector<Tensor> params;
    for (int64_t i = 0; i < tensors; ++i) {
      Tensor p = randn({numel}, TensorOptions(pd).device(o.device)).requires_grad_();
      p.set_grad(randn({numel}, TensorOptions(pd).device(o.device)) * 1024.0);
      params.push_back(p);
    }
    optim::Adam opt(params, optim::AdamOptions(1e-4));
    if (master) opt.use_master_weights();
    amp::GradScaler scaler(amp::GradScalerOptions().init_scale(1024));
    scaler.scale(zeros({}, TensorOptions().device(o.device)));
    auto step = [&] {
      scaler.step(opt);
      scaler.update();
    };
    const double ms = median_ms(o.device, step, 3, o.reps);
    // Per element: the check reads g; Adam reads p, g, m, v and writes p, m, v (and the
    // 16-bit working copy under master weights).
    const double g = static_cast<double>(itemsize(pd)), per = master ? (g + 4 + g + 4 + 4 + 4 + 4 + 4 + g) : 8 * 4.0;
    const double bytes = per * static_cast<double>(tensors * numel);
    const double gbs = bytes / (ms * 1e-3) / 1e9;
    const char* name = master ? "float16 + float32 masters" : "float32";
    std::printf("| %s | %.3f | %.0f MB | %.0f | %.0f%% |\n", name, ms, bytes / 1e6, gbs, 100 * gbs / copy_gbs);
    rows.push_back({{"suite", "optim"}, {"parameters", name}, {"tensors", tensors}, {"numel", numel}, {"ms", ms},
                    {"gb_per_s", gbs}, {"copy_gb_per_s", copy_gbs}, {"device", o.device.str()}});
  }
  return rows;
}

}  // namespace ampgrad::cli
