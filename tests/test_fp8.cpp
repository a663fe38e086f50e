// FP8 autocast (Note [FP8 autocast] in amp/autocast.h, Note [FP8 scaling] in amp/fp8.h): the
// delayed-scaling update branch by branch, the quantization kernels (CPU against a host
// reference, CUDA bit for bit against the CPU), linear and mm forward and backward against a
// float64 product of the quantized operands, the bfloat16 fallback and its trace, a captured
// FP8 step against the eager one, bad input.
#include <cmath>
#include <cstring>
#include <vector>

#include <ampgrad/core/float8_kernels.h>

#include "common.h"

namespace {

using ag::amp::Fp8Role;

std::vector<ag::Device> test_devices() {
  std::vector<ag::Device> d{ag::Device(ag::kCPU)};
  if (cuda_available()) d.push_back(ag::Device(ag::kCUDA));
  return d;
}

ag::Tensor param(const ag::Shape& s, ag::Device dev, double scale = 1.0) {
  return (ag::randn(s) * scale).to(dev).detach().requires_grad_();
}

// The host's quantization: saturated(x * scale) decoded and divided back, in float64.
template <class F8> std::vector<double> dequantized(const std::vector<double>& x, float scale) {
  std::vector<double> r;
  for (double v : x) r.push_back(static_cast<double>(static_cast<float>(F8::saturated(static_cast<float>(v) * scale))) / scale);
  return r;
}

float amax_of(const std::vector<double>& x) {
  double m = 0;
  for (double v : x) m = std::max(m, std::fabs(v));
  return static_cast<float>(m);
}

// c[m, n] = sum_k a[m, k] * b[n, k] (b given as [N, K] rows), float64.
std::vector<double> abt(const std::vector<double>& a, const std::vector<double>& b, int64_t m, int64_t k, int64_t n) {
  std::vector<double> c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t t = 0; t < k; ++t) s += a[i * k + t] * b[j * k + t];
      c[i * n + j] = s;
    }
  return c;
}
std::vector<double> transpose(const std::vector<double>& a, int64_t r, int64_t c) {
  std::vector<double> t(a.size());
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) t[j * r + i] = a[i * c + j];
  return t;
}

std::vector<uint8_t> bytes_of(const ag::Tensor& t) {
  ag::Tensor c = t.to(ag::Device(ag::kCPU)).contiguous();
  std::vector<uint8_t> out(static_cast<size_t>(c.numel()));
  std::memcpy(out.data(), c.data_ptr(), out.size());
  return out;
}

float stat_scale(const ag::amp::Fp8Recipe& r, Fp8Role role) {
  for (const auto& s : r.stats())
    if (s.role == role) return s.scale;
  FAIL("no state for that role");
  return 0;
}

}  // namespace

TEST_CASE("fp8 recipe: the delayed-scaling update, branch by branch", "[fp8][cuda]") {
  for (ag::Device dev : test_devices()) {
    INFO(dev.str());
    ag::amp::DelayedScaling cfg;
    cfg.amax_history_len = 3;
    cfg.margin = 1;
    ag::amp::Fp8Recipe rec(cfg);
    ag::Tensor w = param({16, 16}, dev);
    ag::amp::detail::Fp8Meta& in = rec.meta(w, Fp8Role::input);
    ag::amp::detail::Fp8Meta& gr = rec.meta(w, Fp8Role::grad_output);
    CHECK(&rec.meta(w, Fp8Role::input) == &in);  // found again, not made twice
    CHECK(rec.num_tensors() == 2);
    CHECK(gr.fp8_max == 57344.0f);  // HYBRID: e5m2 gradients
    CHECK(in.fp8_max == 448.0f);
    CHECK(stat_scale(rec, Fp8Role::input) == 1.0f);  // scales start at 1
    // Zero amax: the scale stays.
    rec.update();
    CHECK(stat_scale(rec, Fp8Role::input) == 1.0f);
    // A recorded amax: scale = fp8_max / amax / 2^margin.
    in.amax.fill_(7.0);
    gr.amax.fill_(0.5);
    rec.update();
    CHECK(stat_scale(rec, Fp8Role::input) == 448.0f / 7.0f / 2.0f);
    CHECK(stat_scale(rec, Fp8Role::grad_output) == 57344.0f / 0.5f / 2.0f);
    CHECK(in.amax.item<double>() == 0.0);  // the update zeroes the amax it took
    // max over the history: a smaller amax keeps the larger one's scale while it is remembered.
    in.amax.fill_(2.0);
    rec.update();
    CHECK(stat_scale(rec, Fp8Role::input) == 448.0f / 7.0f / 2.0f);
    // A non-finite amax keeps the scale and is remembered as 0.
    in.amax.fill_(INFINITY);
    rec.update();
    CHECK(stat_scale(rec, Fp8Role::input) == 448.0f / 7.0f / 2.0f);
    in.amax.fill_(NAN);
    rec.update();
    // The history (3 slots) holds the last three updates: {2, 0 (inf), 0 (nan)}, the 7 gone;
    // the next finite amax, 1, pushes the 2 out too.
    in.amax.fill_(1.0);
    rec.update();
    CHECK(stat_scale(rec, Fp8Role::input) == 448.0f / 1.0f / 2.0f);
    // most_recent: the latest amax alone.
    ag::amp::DelayedScaling mr;
    mr.amax_compute_algo = ag::amp::AmaxComputeAlgo::most_recent;
    mr.fp8_format = ag::amp::Fp8Format::E4M3;
    ag::amp::Fp8Recipe rec2(mr);
    ag::amp::detail::Fp8Meta& g2 = rec2.meta(w, Fp8Role::grad_output);
    CHECK(g2.dtype == ag::kFloat8_e4m3fn);  // E4M3: gradients too
    g2.amax.fill_(8.0);
    rec2.update();
    g2.amax.fill_(2.0);
    rec2.update();
    CHECK(stat_scale(rec2, Fp8Role::grad_output) == 448.0f / 2.0f);
  }
}

TEST_CASE("fp8 quantization: scaled, saturated, transposed, with amax and counts", "[fp8][cuda]") {
  ag::manual_seed(fresh_seed());
  const int64_t rows = 70, cols = 45;  // not multiples of the 64-wide tiles
  ag::Tensor base = ag::randn({cols, rows}) * 30.0;
  base.select(0, 3).select(0, 5).fill_(1e-6);  // flushed at scale 2
  base.select(0, 7).select(0, 9).fill_(-1e5);  // saturated at scale 2
  std::vector<std::vector<uint8_t>> per_device;
  for (ag::Device dev : test_devices()) {
    for (ag::DType dt : {ag::kFloat32, ag::kBFloat16}) {
      for (ag::DType f8 : {ag::kFloat8_e4m3fn, ag::kFloat8_e5m2}) {
        INFO(dev.str() << " " << ag::dtype_name(dt) << " -> " << ag::dtype_name(f8));
        const ag::Tensor x = base.to(dev, dt).transpose(0, 1);  // [rows, cols], strided
        const auto o32 = ag::TensorOptions(ag::kFloat32).device(dev);
        ag::kernel::Fp8Quantize q;
        q.scale = ag::full({1}, 2.0, o32);
        q.amax = ag::full({1}, 3.0, o32);
        q.scale_inv = ag::zeros({1}, o32);
        q.counts = ag::zeros({2}, ag::TensorOptions(ag::kInt64).device(dev));
        ag::Tensor out = ag::empty({rows, cols}, ag::TensorOptions(f8).device(dev));
        ag::Tensor out_t = ag::empty({cols, rows}, ag::TensorOptions(f8).device(dev));
        ag::kernel::fp8_quantize(dev, x, q, out, out_t);
        const std::vector<double> xv = x.contiguous().to(ag::kFloat32).to_vector<double>();
        const std::vector<uint8_t> bits = bytes_of(out);
        const std::vector<uint8_t> bits_t = bytes_of(out_t);
        int64_t sat = 0, flushed = 0;
        const double fmax = f8 == ag::kFloat8_e4m3fn ? 448 : 57344;
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c) {
            const float y = static_cast<float>(xv[r * cols + c]) * 2.0f;
            const uint8_t want = f8 == ag::kFloat8_e4m3fn ? ag::Float8_e4m3fn::saturated(y).bits
                                                          : ag::Float8_e5m2::saturated(y).bits;
            INFO(r << ", " << c << ": " << y);
            REQUIRE(bits[r * cols + c] == want);
            REQUIRE(bits_t[c * rows + r] == want);
            sat += std::fabs(y) > fmax;
            flushed += y != 0 && (want & 0x7F) == 0;
          }
        CHECK(q.amax.item<double>() == std::max<double>(3.0, amax_of(xv)));
        CHECK(q.scale_inv.item<double>() == 0.5);
        const std::vector<int64_t> counts = q.counts.cpu().to_vector<int64_t>();
        CHECK(counts[0] == sat);
        CHECK(counts[1] == flushed);
        CHECK(sat > 0);
        CHECK(flushed > 0);
        // Current scaling: the amax of x itself, scale = fp8_max / amax / 2^margin.
        q.current = true;
        q.fp8_max = static_cast<float>(fmax);
        q.margin = 1;
        q.amax.fill_(1e9);  // reduced afresh
        ag::kernel::fp8_quantize(dev, x, q, out, ag::Tensor());
        const float am = amax_of(xv);
        CHECK(q.amax.item<double>() == am);
        CHECK(q.scale.item<double>() == static_cast<float>(fmax) / am / 2.0f);
        per_device.push_back(bytes_of(out));
      }
    }
  }
  if (per_device.size() == 8)
    for (size_t i = 0; i < 4; ++i) CHECK(per_device[i] == per_device[i + 4]);  // CUDA bit for bit as the CPU
}

TEST_CASE("fp8 quantization: a relu mask and the column sums in the same pass", "[fp8][cuda]") {
  ag::manual_seed(fresh_seed());
  // Three row tiles, the last partial; and whole 64 x 64 tiles (CUDA's aligned kernel).
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{150, 80}, {128, 192}}) {
    INFO(rows << " x " << cols);
    const ag::Tensor g = ag::randn({rows, cols}) * 5.0;
    ag::Tensor mask = ag::randn({rows, cols});
    mask.select(0, 2).select(0, 3).fill_(NAN);  // NaN is not <= 0: passed, as relu's backward
    mask.select(0, 4).fill_(0.0);                 // 0 is masked
    const ag::Tensor mb = mask.to(ag::kBFloat16);
    const std::vector<double> gv = g.to_vector<double>(), mv = mb.to_vector<double>();
    std::vector<double> masked(gv.size());
    for (size_t i = 0; i < gv.size(); ++i) masked[i] = mv[i] <= 0 ? 0.0 : gv[i];
    std::vector<double> sums(cols, 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) sums[c] += masked[r * cols + c];
    std::vector<std::vector<uint8_t>> bits;
    std::vector<std::vector<double>> col_sums;
    for (ag::Device dev : test_devices()) {
      INFO(dev.str());
      const auto o32 = ag::TensorOptions(ag::kFloat32).device(dev);
      ag::kernel::Fp8Quantize q;
      q.scale = ag::ones({1}, o32);
      q.amax = ag::zeros({1}, o32);
      q.scale_inv = ag::zeros({1}, o32);
      q.current = true;
      q.fp8_max = 57344;
      q.mask = mb.to(dev);
      q.col_sums = ag::full({cols}, 7.0, o32);  // written, not added to
      ag::Tensor out = ag::empty({rows, cols}, ag::TensorOptions(ag::kFloat8_e5m2).device(dev));
      ag::Tensor out_t = ag::empty({cols, rows}, ag::TensorOptions(ag::kFloat8_e5m2).device(dev));
      ag::kernel::fp8_quantize(dev, g.to(dev), q, out, out_t);
      const float am = amax_of(masked);
      CHECK(q.amax.item<double>() == am);  // the masked values' amax
      const float s = 57344.0f / am;
      const std::vector<uint8_t> b = bytes_of(out), bt = bytes_of(out_t);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          const uint8_t want = ag::Float8_e5m2::saturated(static_cast<float>(masked[r * cols + c]) * s).bits;
          INFO(r << ", " << c);
          REQUIRE(b[r * cols + c] == want);
          REQUIRE(bt[c * rows + r] == want);
        }
      check_close(q.col_sums, sums, 1e-4, 1e-5);  // float32 sums of the rows
      bits.push_back(b);
      col_sums.push_back(q.col_sums.to_vector<double>());
      // The same pass again: the same sums, bit for bit (a fixed order, no atomics).
      ag::kernel::fp8_quantize(dev, g.to(dev), q, out, ag::Tensor());
      CHECK(q.col_sums.to_vector<double>() == col_sums.back());
      ag::kernel::Fp8Quantize bad = q;
      bad.col_sums = ag::zeros({cols + 1}, o32);
      CHECK_THROWS_WITH(ag::kernel::fp8_quantize(dev, g.to(dev), bad, out, ag::Tensor()),
                        Catch::Contains("col_sums must be contiguous float32"));
      bad = q;
      bad.mask = mb.to(dev).to(ag::kFloat32);
      CHECK_THROWS_WITH(ag::kernel::fp8_quantize(dev, g.to(dev), bad, out, ag::Tensor()),
                        Catch::Contains("the mask must be bfloat16"));
    }
    if (bits.size() == 2) CHECK(bits[0] == bits[1]);
  }
}

TEST_CASE("fp8 autocast: linear and mm against float64 of the quantized operands, forward and backward",
          "[fp8][cuda]") {
  ag::manual_seed(fresh_seed());
  const int64_t m = 32, k = 48, n = 64;
  for (ag::Device dev : test_devices()) {
    for (int form : {0, 1, 2}) {
      const bool mm_form = form == 1, relu = form == 2;  // linear, mm, linear_relu
      INFO(dev.str() << (mm_form ? " mm" : relu ? " linear_relu" : " linear"));
      ag::amp::Fp8Recipe rec(ag::amp::CurrentScaling{});
      ag::Tensor x = param({m, k}, dev, 3.0);
      ag::Tensor w = param({n, k}, dev, 0.2);
      ag::Tensor bt = mm_form ? param({k, n}, dev, 0.2) : ag::Tensor();
      ag::Tensor b = mm_form ? ag::Tensor() : param({n}, dev);
      ag::Tensor r = ag::randn({m, n}).to(dev);
      ag::Tensor y;
      {
        ag::amp::Trace trace;
        ag::amp::AutocastGuard ac(dev.type, ag::kFloat8_e4m3fn, rec);
        y = mm_form ? ag::mm(x, bt) : relu ? ag::linear_relu(x, w, b) : ag::linear(x, w, b);
        REQUIRE(trace.records().size() == 1);  // linear_relu too: one op, the relu in the epilogue
        CHECK(trace.records()[0].path.find("FP8 GEMM: float8_e4m3fn x float8_e4m3fn -> bfloat16") != std::string::npos);
        CHECK((trace.records()[0].path.find("with the relu epilogue") != std::string::npos) == relu);
        CHECK(trace.records()[0].chosen_dtype == ag::kFloat8_e4m3fn);
      }
      CHECK(y.dtype() == ag::kBFloat16);
      (y.to(ag::kFloat32) * r).sum().backward();
      // The reference: each operand quantized with its own amax (current scaling).
      const std::vector<double> xv = x.to_vector<double>();
      const std::vector<double> wv = mm_form ? transpose(bt.to_vector<double>(), k, n) : w.to_vector<double>();
      const auto xq = dequantized<ag::Float8_e4m3fn>(xv, 448.0f / amax_of(xv));
      const auto wq = dequantized<ag::Float8_e4m3fn>(wv, 448.0f / amax_of(wv));
      std::vector<double> yref = abt(xq, wq, m, k, n);
      if (!mm_form) {
        const std::vector<double> bv = b.to(ag::kBFloat16).to_vector<double>();
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) yref[i * n + j] += bv[j];
      }
      if (relu)
        for (double& v : yref) v = std::max(v, 0.0);
      check_close(y, yref, 1e-2, 2 * eps_of(ag::kBFloat16));
      // The output's gradient r, rounded to y's bfloat16 (for linear_relu zero where y is not
      // > 0: relu's backward, fused into its quantization), quantized to e5m2.
      std::vector<double> gv = r.to(ag::kBFloat16).to_vector<double>();
      if (relu) {
        const std::vector<double> yv = y.to_vector<double>();
        int64_t zeros = 0;
        for (size_t i = 0; i < gv.size(); ++i) {
          if (!(yv[i] > 0)) gv[i] = 0, ++zeros;
        }
        CHECK(zeros > m * n / 4);  // the mask masks
        CHECK(zeros < 3 * m * n / 4);
      }
      const auto gq = dequantized<ag::Float8_e5m2>(gv, 57344.0f / amax_of(gv));
      const std::vector<double> gx = abt(gq, transpose(wq, n, k), m, n, k);   // dy @ w
      const std::vector<double> gw = abt(transpose(gq, m, n), transpose(xq, m, k), n, m, k);  // dy^T @ x
      // The CPU sums in float32; Hopper's FP8 tensor cores keep about 14 mantissa bits per
      // partial sum (Note [FP8 GEMM] in cuda/blas_lt.cpp): a bound relative to the largest value.
      auto bound = [&](const std::vector<double>& ref) {
        return dev.is_cpu() ? 1e-4 : 2e-3 * static_cast<double>(amax_of(ref));
      };
      const double rtol = dev.is_cpu() ? 1e-4 : 2e-3;
      check_close(x.grad(), gx, bound(gx), rtol);
      if (mm_form) check_close(bt.grad(), transpose(gw, n, k), bound(gw), rtol);
      else check_close(w.grad(), gw, bound(gw), rtol);
      if (!mm_form) {
        std::vector<double> gb(n, 0.0);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) gb[j] += gv[i * n + j];
        check_close(b.grad(), gb, 1e-2, 4 * eps_of(ag::kBFloat16));
      }
      CHECK(x.grad().dtype() == ag::kFloat32);
      CHECK((mm_form ? bt : w).grad().dtype() == ag::kFloat32);
    }
  }
}

TEST_CASE("fp8 autocast: linear_relu takes a strided bfloat16 bias", "[fp8][cuda]") {
  ag::manual_seed(fresh_seed());
  for (ag::Device dev : test_devices()) {
    INFO(dev.str());
    const ag::Tensor x = ag::randn({32, 48}).to(dev), w = (ag::randn({64, 48}) * 0.2).to(dev);
    const ag::Tensor pair = ag::randn({64, 2}).to(dev, ag::kBFloat16);
    const ag::Tensor b = pair.select(1, 0);  // every other element
    REQUIRE(!b.is_contiguous());
    ag::amp::Fp8Recipe r1(ag::amp::CurrentScaling{}), r2(ag::amp::CurrentScaling{});
    ag::Tensor y1, y2;
    {
      ag::amp::AutocastGuard ac(dev.type, ag::kFloat8_e4m3fn, r1);
      y1 = ag::linear_relu(x, w, b);
    }
    {
      ag::amp::AutocastGuard ac(dev.type, ag::kFloat8_e4m3fn, r2);
      y2 = ag::linear_relu(x, w, b.contiguous());
    }
    CHECK(y1.to_vector<double>() == y2.to_vector<double>());
  }
}

TEST_CASE("fp8 autocast: bmm and batched matmul as batched FP8 GEMMs against float64, forward and backward",
          "[fp8][cuda]") {
  ag::manual_seed(fresh_seed());
  const int64_t nb = 3, m = 32, k = 48, n = 64;
  for (ag::Device dev : test_devices()) {
    for (bool transposed_b : {false, true}) {  // b as k.transpose(1, 2), as in attention's q @ k^T
      INFO(dev.str() << (transposed_b ? " b transposed" : ""));
      ag::amp::Fp8Recipe rec(ag::amp::CurrentScaling{});
      ag::Tensor a = param({nb, m, k}, dev, 3.0);
      ag::Tensor bl = transposed_b ? param({nb, n, k}, dev, 0.2) : param({nb, k, n}, dev, 0.2);
      ag::Tensor r = ag::randn({nb, m, n}).to(dev);
      ag::Tensor y, y4;
      {
        ag::amp::Trace trace;
        ag::amp::AutocastGuard ac(dev.type, ag::kFloat8_e4m3fn, rec);
        ag::Tensor b = transposed_b ? bl.transpose(1, 2) : bl;
        y = ag::bmm(a, b);
        const auto& rec0 = trace.records();
        REQUIRE(!rec0.empty());
        CHECK(rec0.back().op == "bmm");
        CHECK(rec0.back().path.find("batched FP8 GEMM: float8_e4m3fn x float8_e4m3fn -> bfloat16") !=
              std::string::npos);
        // matmul of equal batches, 4-D: the same quantized product
        ag::NoGradGuard ng;
        y4 = ag::matmul(a.detach().view({1, nb, m, k}), b.detach().reshape({1, nb, k, n}));
        CHECK(trace.records().back().op == "matmul");
        CHECK(trace.records().back().path.find("batched FP8 GEMM") != std::string::npos);
      }
      REQUIRE(y.dtype() == ag::kBFloat16);
      REQUIRE(y4.shape() == ag::Shape{1, nb, m, n});
      CHECK(y4.view({nb, m, n}).to_vector<double>() == y.to_vector<double>());
      (y.to(ag::kFloat32) * r).sum().backward();
      // The reference: each operand quantized as a whole with its own amax (current scaling).
      const std::vector<double> av = a.to_vector<double>();
      std::vector<double> bv = bl.to_vector<double>();  // [nb, k, n] or [nb, n, k]
      const auto aq = dequantized<ag::Float8_e4m3fn>(av, 448.0f / amax_of(av));
      const auto bq = dequantized<ag::Float8_e4m3fn>(bv, 448.0f / amax_of(bv));
      const std::vector<double> gv = r.to(ag::kBFloat16).to_vector<double>();
      const auto gq = dequantized<ag::Float8_e5m2>(gv, 57344.0f / amax_of(gv));
      std::vector<double> yref, ga, gb;
      auto part = [](const std::vector<double>& v, int64_t i, int64_t len) {
        return std::vector<double>(v.begin() + i * len, v.begin() + (i + 1) * len);
      };
      for (int64_t i = 0; i < nb; ++i) {
        const std::vector<double> ai = part(aq, i, m * k), gi = part(gq, i, m * n);
        const std::vector<double> bi_nk = transposed_b ? part(bq, i, n * k) : transpose(part(bq, i, k * n), k, n);
        for (double v : abt(ai, bi_nk, m, k, n)) yref.push_back(v);
        for (double v : abt(gi, transpose(bi_nk, n, k), m, n, k)) ga.push_back(v);  // g @ b^T
        const std::vector<double> gbi = abt(transpose(gi, m, n), transpose(ai, m, k), n, m, k);  // [n, k]
        for (double v : transposed_b ? gbi : transpose(gbi, n, k)) gb.push_back(v);
      }
      check_close(y, yref, 1e-2, 2 * eps_of(ag::kBFloat16));
      auto bound = [&](const std::vector<double>& ref) {
        return dev.is_cpu() ? 1e-4 : 2e-3 * static_cast<double>(amax_of(ref));
      };
      const double rtol = dev.is_cpu() ? 1e-4 : 2e-3;
      check_close(a.grad(), ga, bound(ga), rtol);
      check_close(bl.grad(), gb, bound(gb), rtol);
      CHECK(a.grad().dtype() == ag::kFloat32);
      CHECK(bl.grad().dtype() == ag::kFloat32);
    }
  }
}

TEST_CASE("fp8 autocast: delayed scaling uses the scale of the steps before", "[fp8][cuda]") {
  for (ag::Device dev : test_devices()) {
    INFO(dev.str());
    ag::amp::Fp8Recipe rec;  // DelayedScaling{}: HYBRID, history 1024, max
    ag::Tensor w = param({32, 32}, dev, 0.5), x = param({16, 32}, dev, 4.0);
    for (int step = 0; step < 3; ++step) {
      ag::Tensor y;
      {
        ag::amp::AutocastGuard ac(dev.type, ag::kFloat8_e4m3fn, rec);
        y = ag::linear(x, w);
      }
      y.to(ag::kFloat32).sum().backward();
      if (step == 0) CHECK(stat_scale(rec, Fp8Role::input) == 1.0f);  // not updated until the next region
    }
    const float ax = amax_of(x.to_vector<double>()), aw = amax_of(w.to_vector<double>());
    CHECK(stat_scale(rec, Fp8Role::input) == 448.0f / ax);
    CHECK(stat_scale(rec, Fp8Role::weight) == 448.0f / aw);
    CHECK(stat_scale(rec, Fp8Role::grad_output) == 57344.0f / 1.0f);  // dy = 1, rounded to bfloat16
    CHECK(rec.num_tensors() == 3);
  }
}

TEST_CASE("fp8 autocast: shapes FP8 cannot take run in bfloat16, and the trace says why", "[fp8]") {
  ag::amp::Fp8Recipe rec;
  ag::Tensor w = param({24, 40}, ag::Device(ag::kCPU));  // 40 and 24: not multiples of 16
  ag::Tensor x = ag::randn({8, 40}), p = ag::randn({2, 8, 16}), q = ag::randn({2, 16, 16});
  ag::amp::Trace trace;
  ag::Tensor y, z, s;
  {
    ag::amp::AutocastGuard ac(ag::kCPU, ag::kFloat8_e4m3fn, rec);
    y = ag::linear(x, w);
    z = ag::bmm(p, q.requires_grad_());  // q's gradient sums over 8 rows: bfloat16
    s = ag::softmax(y, -1);                                      // fp32 as always
  }
  CHECK(y.dtype() == ag::kBFloat16);
  CHECK(z.dtype() == ag::kBFloat16);
  CHECK(s.dtype() == ag::kFloat32);
  REQUIRE(trace.records().size() == 3);
  CHECK(trace.records()[0].path.find("bfloat16, not FP8: K = 40 and N = 24 must be multiples of 16") !=
        std::string::npos);
  CHECK(trace.records()[1].path.find("bfloat16, not FP8: the second input's gradient sums over the 8 rows") !=
        std::string::npos);
  check_close(y, (x.to(ag::kBFloat16).to(ag::kFloat32).matmul(w.to(ag::kBFloat16).to(ag::kFloat32).t())).to_vector<double>(),
              1e-2, 2 * eps_of(ag::kBFloat16));
  CHECK(rec.num_tensors() == 0);
  CHECK(ag::amp::get_autocast_fp8_recipe(ag::kCPU) == nullptr);
}

TEST_CASE("fp8 autocast: bad input", "[fp8]") {
  ag::amp::Fp8Recipe rec;
  CHECK_THROWS_WITH_SUBSTR(ag::amp::AutocastGuard(ag::kCPU, ag::kFloat8_e4m3fn), "needs a scaling recipe");
  CHECK_THROWS_WITH_SUBSTR(ag::amp::AutocastGuard(ag::kCPU, ag::kFloat8_e5m2, rec),
                           "FP8 autocast's dtype is the forward's format, float8_e4m3fn");
  ag::amp::DelayedScaling bad;
  bad.amax_history_len = 0;
  CHECK_THROWS_WITH_SUBSTR(ag::amp::Fp8Recipe{bad}, "amax_history_len must be in [1, 2^20], got 0");
  // Ops still check their inputs first.
  const ag::Tensor a = ag::randn({4, 32}), b = ag::randn({16, 48});
  ag::amp::AutocastGuard ac(ag::kCPU, ag::kFloat8_e4m3fn, rec);
  CHECK_THROWS_WITH_SUBSTR(ag::linear(a, b), "linear: input");
}

#if AMPGRAD_WITH_CUDA
TEST_CASE("fp8 autocast: CUDA equals the CPU emulation, and a captured FP8 step equals the eager step bitwise",
          "[fp8][cuda]") {
  if (skip_without_cuda()) return;
  ag::manual_seed(fresh_seed());
  struct Net {
    std::vector<ag::Tensor> params;
    ag::Tensor x, r;
    mutable ag::Tensor h, y;  // the last loss()'s hidden activations and outputs
    ag::Tensor loss() const {
      h = ag::linear_relu(x, params[0], params[1]);  // the fused relu, forward and backward
      y = ag::linear(h, params[2]).to(ag::kFloat32);
      return (y * r).sum();
    }
  };
  const ag::Tensor w1 = ag::randn({64, 32}) * 0.2, b1 = ag::randn({64}), w2 = ag::randn({32, 64}) * 0.2;
  const ag::Tensor x = ag::randn({48, 32}), r = ag::randn({48, 32});
  auto make = [&](ag::Device d) {
    Net n;
    for (const ag::Tensor& t : {w1, b1, w2}) n.params.push_back(t.to(d).detach().requires_grad_());
    n.x = x.to(d);
    n.r = r.to(d);
    return n;
  };
  // One step's output and gradients, CPU and CUDA.
  {
    Net cpu = make(ag::Device(ag::kCPU)), gpu = make(ag::Device(ag::kCUDA));
    ag::amp::Fp8Recipe rc(ag::amp::CurrentScaling{}), rg(ag::amp::CurrentScaling{});
    ag::Tensor lc, lg;
    {
      ag::amp::AutocastGuard a(ag::kCPU, ag::kFloat8_e4m3fn, rc);
      lc = cpu.loss();
    }
    {
      ag::amp::AutocastGuard a(ag::kCUDA, ag::kFloat8_e4m3fn, rg);
      lg = gpu.loss();
    }
    lc.backward();
    lg.backward();
    // Same quantized operands (bit for bit, tested above); the sums differ in order and in the
    // FP8 tensor cores' accumulator (about 14 mantissa bits on Hopper). A 16-bit result one ulp
    // apart can then quantize to neighbouring FP8 values in the next GEMM (e5m2's steps are a
    // quarter of a value), and a pre-activation near 0 can take relu's mask the other way: an
    // element here and there differs by a whole step, so the chain is compared as a whole,
    // by relative norms (a lost mask or bias gradient would be off by far more than 2 %).
    auto rel = [](const ag::Tensor& got, const ag::Tensor& want) {
      const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
      double d2 = 0, w2 = 0;
      for (size_t e = 0; e < w.size(); ++e) d2 += (g[e] - w[e]) * (g[e] - w[e]), w2 += w[e] * w[e];
      return std::sqrt(d2 / w2);
    };
    double terms = 0;  // sum |y * r|
    {
      const std::vector<double> yv = cpu.y.to_vector<double>(), rv = cpu.r.to_vector<double>();
      for (size_t e = 0; e < yv.size(); ++e) terms += std::fabs(yv[e] * rv[e]);
    }
    CHECK(std::fabs(lg.item<double>() - lc.item<double>()) <= 2e-3 * terms);  // a sum that cancels
    CHECK(rel(gpu.h, cpu.h) < 1e-2);
    for (size_t i = 0; i < 3; ++i) {
      INFO("parameter " << i);
      CHECK(rel(gpu.params[i].grad(), cpu.params[i].grad()) < 2e-2);
    }
  }
  // Training: eager against captured, delayed scaling updating on the device.
  Net eager = make(ag::Device(ag::kCUDA)), graphed = make(ag::Device(ag::kCUDA));
  ag::optim::Adam oe(eager.params, ag::optim::AdamOptions(1e-2)), og(graphed.params, ag::optim::AdamOptions(1e-2));
  ag::amp::Fp8Recipe re, rg;
  auto step = [](Net& n, ag::optim::Optimizer& o, ag::amp::Fp8Recipe& rec) {
    o.zero_grad(/*set_to_none=*/false);
    ag::Tensor loss;
    {
      ag::amp::AutocastGuard a(ag::kCUDA, ag::kFloat8_e4m3fn, rec);
      loss = n.loss();
    }
    loss.backward();
    o.step();
  };
  step(eager, oe, re);
  step(graphed, og, rg);
  ag::cuda::CudaGraph graph;
  graph.capture([&] { step(graphed, og, rg); });
  for (int i = 0; i < 4; ++i) {
    graph.replay();
    step(eager, oe, re);
  }
  ag::cuda::synchronize();
  for (size_t i = 0; i < 3; ++i) CHECK(graphed.params[i].to_vector<double>() == eager.params[i].to_vector<double>());
  const auto se = re.stats(), sg = rg.stats();
  REQUIRE(se.size() == sg.size());
  for (size_t i = 0; i < se.size(); ++i) {
    CHECK(se[i].scale == sg[i].scale);
    CHECK(se[i].scale != 1.0f);  // the scales moved, on the device, in the graph too
  }
}
#endif

TEST_CASE("fp8 autocast: layers chain, bfloat16 activations into float32 weights, and a network trains", "[fp8]") {
  ag::manual_seed(5);
  const ag::Device cpu(ag::kCPU);
  ag::Tensor w1 = param({64, 32}, cpu, 0.2), b1 = param({64}, cpu), w2 = param({16, 64}, cpu, 0.2);
  const ag::Tensor x = ag::randn({64, 32}), target = ag::randn({64, 16});
  ag::optim::Adam opt({w1, b1, w2}, ag::optim::AdamOptions(1e-2));
  ag::amp::Fp8Recipe rec;
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    opt.zero_grad();
    ag::Tensor loss;
    {
      ag::amp::AutocastGuard ac(ag::kCPU, ag::kFloat8_e4m3fn, rec);
      ag::Tensor h = ag::linear_relu(x, w1, b1);
      CHECK(h.dtype() == ag::kBFloat16);
      ag::Tensor y = ag::matmul(h, w2.t());  // matmul of [64, 64] and a transposed parameter
      loss = ag::mse_loss(y, target);
    }
    loss.backward();
    CHECK(w2.grad().dtype() == ag::kFloat32);
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  CHECK(last < 0.5 * first);
  // linear's three tensors; w2.t() is a view, not a parameter, so the matmul scales currently.
  CHECK(rec.num_tensors() == 3);
}
