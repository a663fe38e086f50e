// `ampgrad bench attention`: scaled_dot_product_attention forward + backward, float16 and
// bfloat16, causal and not, against the float64 math path's accuracy.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include <ampgrad/ampgrad.h>
#include "cli/bench.h"
#include "cli/bench_timer.h"

namespace ampgrad::cli {

// Each case: T tokens per sequence, head dim E, 16384 / T sequences (a batch of 16K tokens)
// of 1024 / E heads (a width of 1024), q, k, v [B, T, H, E] viewed as [B, H, T, E] (as
// MultiheadAttention hands them over), all three requiring grad. Timed: the forward and the
// backward from a fixed gradient. FLOPs as FlashAttention's benchmarks count them: 4 B H T^2 E
// forward and 2.5 times that backward, halved when causal. The path is what the trace says
// ran (Note [Attention paths] in ops/attention.cpp). The padding rows add a key-padding mask
// ([B, 1, 1, T] bool, each sequence's last quarter masked; Note [Masks on the fused path]), float16,
// E 64, not causal; their FLOPs are counted as the unmasked case's. benchmarks/compare_torch.py
// times the same cases with PyTorch's flash backend (its default choice for the padding rows:
// flash takes no mask).
// On CUDA, the short rows are the GPTs' own attention (bench step's gpt and gpt_tiny: B 32, H 8,
// T 128, E 32 and B 8, H 4, T 32, E 16, causal), each with the one-tile kernel and with cuDNN's
// (enable_tile_sdp(false); Note [Attention in one tile]). Their kernels take microseconds, less
// than the host takes to queue them, so forward + backward is captured as a CUDA graph and
// the replays are timed (compare_torch.py captures PyTorch's the same way).
nlohmann::json bench_attention(const BenchOptions& o) {
  nlohmann::json rows = nlohmann::json::array();
  const bool cpu = o.device.is_cpu();
  const std::vector<int64_t> lengths = o.quick || cpu ? std::vector<int64_t>{128, 256}
                                                      : std::vector<int64_t>{512, 1024, 2048, 4096};
  const int64_t tokens = o.quick || cpu ? 512 : 16384, width = o.quick || cpu ? 128 : 1024;
  std::printf("\n## attention: scaled_dot_product_attention forward + backward, %lld tokens, width %lld (median of %d runs)\n\n",
              static_cast<long long>(tokens), static_cast<long long>(width), o.reps);
  std::printf("| dtype | T | E | causal | mask | B x H | ms | TFLOP/s | out rel. error vs float64 | path |\n"
              "|---|---|---|---|---|---|---|---|---|---|\n");
  const TensorOptions f32 = TensorOptions(kFloat32).device(o.device);
  auto run_case = [&](DType dtype, int64_t e, bool causal, int64_t t, bool padded) {
          const int64_t b = tokens / t, h = width / e;
          Tensor mask;
          if (padded) {
            const Tensor col = arange(t, TensorOptions(kInt64).device(o.device)).reshape({1, 1, 1, t});
            mask = lt(col, (3 * t) / 4).expand({b, 1, 1, t}).contiguous();
          }
          auto make = [&] { return randn({b, t, h, e}, f32).to(dtype).transpose(1, 2).detach().requires_grad_(true); };
          Tensor q = make(), k = make(), v = make();
          const Tensor g = randn({b, h, t, e}, f32).to(dtype);
          std::string path;
          Tensor out;
          {
            amp::Trace trace;
            amp::AutocastGuard autocast(o.device.type, dtype);
            out = scaled_dot_product_attention(q, k, v, mask, 0.0, causal);
            for (const amp::OpRecord& r : trace.records())
              if (r.op == "scaled_dot_product_attention") path = r.path;
          }
          double err = 0;
          {
            NoGradGuard no_grad;
            // The float64 reference on a slice of the batch (the math path's T x T scores).
            auto part = [&](const Tensor& x) { return x.narrow(0, 0, 1).narrow(1, 0, std::min<int64_t>(h, 2)).to(kFloat64); };
            const Tensor ref = scaled_dot_product_attention(part(q), part(k), part(v),
                                                            padded ? mask.narrow(0, 0, 1) : Tensor(), 0.0, causal);
            const Tensor d = part(out) - ref;
            err = std::sqrt(sum(d * d).item<double>() / sum(ref * ref).item<double>());
          }
          const double ms = median_ms(o.device, [&] {
            Tensor y = scaled_dot_product_attention(q, k, v, mask, 0.0, causal);
            y.backward(g);
          }, 3, o.reps);
          const double flops = 4.0 * 3.5 * static_cast<double>(b * h) * static_cast<double>(t * t) *
                               static_cast<double>(e) / (causal ? 2.0 : 1.0);
          const double tflops = flops / (ms * 1e-3) / 1e12;
          if (path.empty()) path = "math path";
          std::printf("| %s | %lld | %lld | %s | %s | %lld x %lld | %.3f | %.1f | %.2e | %s |\n",
                      std::string(dtype_name(dtype)).c_str(), static_cast<long long>(t), static_cast<long long>(e),
                      causal ? "yes" : "no", padded ? "padding" : "none", static_cast<long long>(b),
                      static_cast<long long>(h), ms, tflops, err, path.c_str());
          rows.push_back({{"suite", "attention"}, {"dtype", std::string(dtype_name(dtype))}, {"t", t}, {"e", e}, {"causal", causal},
                          {"mask", padded ? "padding" : "none"}, {"b", b}, {"h", h}, {"ms", ms}, {"tflops", tflops},
                          {"rel_error", err}, {"path", path}, {"device", o.device.str()}});
  };
#if AMPGRAD_WITH_CUDA
  auto run_short = [&](DType dtype, int64_t b, int64_t h, int64_t t, int64_t e, bool tile) {
    const bool was = tile_sdp_enabled();
    enable_tile_sdp(tile);
    auto make = [&] { return randn({b, t, h, e}, f32).to(dtype).transpose(1, 2).detach().requires_grad_(true); };
    Tensor q = make(), k = make(), v = make();
    const Tensor g = randn({b, h, t, e}, f32).to(dtype);
    std::string path;
    double err = 0;
    {
      amp::Trace trace;
      amp::AutocastGuard autocast(o.device.type, dtype);
      const Tensor out = scaled_dot_product_attention(q, k, v, {}, 0.0, true);
      for (const amp::OpRecord& r : trace.records())
        if (r.op == "scaled_dot_product_attention") path = r.path;
      NoGradGuard no_grad;
      auto part = [&](const Tensor& x) { return x.narrow(0, 0, 1).to(kFloat64); };
      const Tensor ref = scaled_dot_product_attention(part(q), part(k), part(v), Tensor(), 0.0, true);
      const Tensor d = part(out) - ref;
      err = std::sqrt(sum(d * d).item<double>() / sum(ref * ref).item<double>());
    }
    auto both = [&] { scaled_dot_product_attention(q, k, v, {}, 0.0, true).backward(g); };
    for (int i = 0; i < 3; ++i) both();  // the grads exist before the capture adds into them
    cuda::CudaGraph graph;
    graph.capture(both);
    const double ms = median_ms(o.device, [&] { graph.replay(); }, 3, o.reps, 20);  // 20 replays a sample
    enable_tile_sdp(was);
    const double flops = 4.0 * 3.5 * static_cast<double>(b * h) * static_cast<double>(t * t) * static_cast<double>(e) / 2.0;
    const double tflops = flops / (ms * 1e-3) / 1e12;
    std::printf("| %s | %lld | %lld | yes | none | %lld x %lld | %.4f (graph) | %.1f | %.2e | %s |\n",
                std::string(dtype_name(dtype)).c_str(), static_cast<long long>(t), static_cast<long long>(e),
                static_cast<long long>(b), static_cast<long long>(h), ms, tflops, err, path.c_str());
    rows.push_back({{"suite", "attention"}, {"dtype", std::string(dtype_name(dtype))}, {"t", t}, {"e", e}, {"causal", true},
                    {"mask", "none"}, {"b", b}, {"h", h}, {"ms", ms}, {"tflops", tflops}, {"rel_error", err},
                    {"path", path}, {"graph", true}, {"device", o.device.str()}});
  };
  if (o.device.is_cuda())
    for (DType dtype : {kFloat16, kBFloat16})
      for (bool tile : {true, false}) {
        run_short(dtype, 32, 8, 128, 32, tile);
        run_short(dtype, 8, 4, 32, 16, tile);
      }
#endif
  for (DType dtype : {kFloat16, kBFloat16})
    for (int64_t e : {int64_t{64}, int64_t{128}})
      for (bool causal : {false, true})
        for (int64_t t : lengths) run_case(dtype, e, causal, t, false);
  for (int64_t t : lengths) run_case(kFloat16, 64, false, t, true);
  return rows;
}

}  // namespace ampgrad::cli
