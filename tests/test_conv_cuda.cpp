// conv2d on CUDA (cuDNN) against a float64 CPU reference, forward and gradients, in
// f32/f16/bf16/f64, NCHW, channels-last and non-packed layouts, with stride, padding,
// dilation, groups and bias; benchmark mode and TF32; empty shapes; im2col/col2im (unfold and
// its gradient) and dropout masks bit-identical to the CPU reference kernels.
#include <array>
#include <cmath>
#include <random>

#include "common.h"
#include <ampgrad/core/kernels.h>

namespace {

const ag::Device kGpu(ag::kCUDA);
const ag::Device kCpu(ag::kCPU);
constexpr double kEps32 = 1.1920928955078125e-07;
const ag::DType kFloatTypes[] = {ag::kFloat32, ag::kFloat16, ag::kBFloat16};


ag::Tensor sym(const ag::Shape& s) { return ag::rand(s) * 2.0 - 1.0; }

// A NaN-filled block handed back to the memory pool: outputs (and workspaces) that cuDNN or
// a kernel forgets to write are then NaN, not a plausible leftover.
void poison_cuda_cache() {
  ag::NoGradGuard no_grad;
  (void)ag::full({int64_t{16} << 20}, NAN, ag::TensorOptions(ag::kFloat32).device(kGpu));
}

// Restores a process-wide switch when a test leaves, also on failure.
struct BenchmarkMode {
  explicit BenchmarkMode(bool on) : prev(ag::cuda::cudnn_benchmark()) { ag::cuda::set_cudnn_benchmark(on); }
  ~BenchmarkMode() { ag::cuda::set_cudnn_benchmark(prev); }
  bool prev;
};
struct Tf32Mode {
  explicit Tf32Mode(bool on) : prev(ag::allow_tf32()) { ag::set_allow_tf32(on); }
  ~Tf32Mode() { ag::set_allow_tf32(prev); }
  bool prev;
};

enum class Layout { nchw, channels_last, strided };

const char* layout_name(Layout l) {
  return l == Layout::nchw ? "nchw" : (l == Layout::channels_last ? "channels_last" : "strided");
}

// The same values in another memory layout; `strided` is every other element of a wider W
// (packed in neither format, so cuDNN gets a copy).
ag::Tensor in_layout(const ag::Tensor& t, Layout l) {
  ag::NoGradGuard no_grad;
  if (l == Layout::channels_last) return t.to_channels_last();
  if (l == Layout::strided) {
    ag::Shape wide = t.shape();
    wide.back() *= 2;
    ag::Tensor v = ag::empty(wide, t.options()).slice(-1, 0, wide.back(), 2);
    v.copy_(t);
    return v;
  }
  return t.contiguous();
}

struct ConvCase {
  int64_t n, c, h, w, k, kh, kw;
  std::array<int64_t, 2> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
  bool bias = true;

  int64_t oh() const { return (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) / stride[0] + 1; }
  int64_t ow() const { return (w + 2 * padding[1] - dilation[1] * (kw - 1) - 1) / stride[1] + 1; }
  std::string str() const {
    return fmt::format("x [{}, {}, {}, {}], weight [{}, {}, {}, {}], stride {}, padding {}, dilation {}, groups {}, "
                       "bias {}",
                       n, c, h, w, k, c / groups, kh, kw, fmt::join(stride, "x"), fmt::join(padding, "x"),
                       fmt::join(dilation, "x"), groups, bias);
  }
};

const std::vector<ConvCase>& conv_cases() {
  static const std::vector<ConvCase> cases = {
      {2, 3, 9, 9, 4, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, true},
      {3, 8, 11, 7, 6, 3, 2, {2, 1}, {1, 0}, {1, 1}, 2, true},
      {2, 6, 12, 10, 9, 3, 3, {1, 1}, {2, 2}, {2, 2}, 3, false},
      {2, 4, 5, 5, 8, 1, 1, {1, 1}, {0, 0}, {1, 1}, 1, true},
      {2, 8, 10, 10, 8, 3, 3, {2, 2}, {1, 1}, {1, 1}, 8, true},     // depthwise
      {4, 64, 12, 12, 32, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, true},  // tensor-core sized; 576-term sums
      {2, 3, 6, 8, 5, 5, 5, {1, 2}, {2, 2}, {1, 1}, 1, true},
      {1, 1, 7, 7, 1, 3, 3, {1, 1}, {0, 0}, {1, 1}, 1, true},      // one channel: NCHW and NHWC coincide
      {3, 4, 1, 1, 6, 1, 1, {1, 1}, {0, 0}, {1, 1}, 2, true},      // 1x1 images
  };
  return cases;
}

struct Tol {
  double atol, rtol;
};

// A sum of `terms` products of values in [-1, 1]. float32: FMA accumulation, possibly
// reassociated (Winograd, FFT, split reductions), far below TF32's error, so a TF32 slip in
// the 576-term case fails. 16-bit: the output's rounding, and intermediates cuDNN may keep in
// 16 bits. float64: accumulation only.
Tol conv_tol(ag::DType d, int64_t terms) {
  const double t = static_cast<double>(terms);
  if (d == ag::kFloat64) return {1e-13 * t, 1e-13};
  if (d == ag::kFloat32) return {4 * kEps32 * t, 8 * kEps32};
  return {2 * eps_of(d) * std::sqrt(t), 2 * eps_of(d)};
}

// Inputs rounded to the dtype under test, on the CPU; the reference reads the same values.
struct ConvInputs {
  ag::Tensor x, w, b, g;
};

ConvInputs make_inputs(const ConvCase& cc, ag::DType d) {
  return {sym({cc.n, cc.c, cc.h, cc.w}).to(d), sym({cc.k, cc.c / cc.groups, cc.kh, cc.kw}).to(d), sym({cc.k}).to(d),
          sym({cc.n, cc.k, cc.oh(), cc.ow()}).to(d)};
}

struct ConvResult {
  ag::Tensor out, gx, gw, gb;
};

ConvResult run_conv(const ConvInputs& in, const ConvCase& cc, ag::Device dev, ag::DType d, Layout xl, Layout wl) {
  ag::Tensor x = in_layout(in.x.to(dev, d), xl).detach().requires_grad_();
  ag::Tensor w = in_layout(in.w.to(dev, d), wl).detach().requires_grad_();
  ag::Tensor b = cc.bias ? in.b.to(dev, d).detach().requires_grad_() : ag::Tensor();
  if (dev.is_cuda()) poison_cuda_cache();
  ag::Tensor out = ag::conv2d(x, w, b, cc.stride, cc.padding, cc.dilation, cc.groups);
  REQUIRE(out.device() == dev);
  REQUIRE(out.dtype() == d);
  REQUIRE(out.shape() == ag::Shape{cc.n, cc.k, cc.oh(), cc.ow()});
  // The output keeps a channels-last input's format.
  if (xl == Layout::channels_last && !x.is_contiguous()) CHECK(ag::is_channels_last(out));
  out.backward(in.g.to(dev, d));
  return {out.detach(), x.grad(), w.grad(), cc.bias ? b.grad() : ag::Tensor()};
}

ConvResult reference(const ConvInputs& in, const ConvCase& cc) {
  return run_conv(in, cc, kCpu, ag::kFloat64, Layout::nchw, Layout::nchw);
}

void check_with(const ag::Tensor& got, const ag::Tensor& ref, Tol t, const char* what) {
  INFO(what << ": " << got.desc() << " strides " << ag::shape_str(got.strides()));
  REQUIRE(got.defined());
  REQUIRE(got.shape() == ref.shape());
  check_close(got, ref.to_vector<double>(), t.atol, t.rtol);
}

void check_result(const ConvResult& got, const ConvResult& ref, const ConvCase& cc, ag::DType d) {
  const int64_t per_out = cc.c / cc.groups * cc.kh * cc.kw;
  const int64_t per_in = cc.k / cc.groups * cc.kh * cc.kw;
  const int64_t per_weight = cc.n * cc.oh() * cc.ow();
  check_with(got.out, ref.out, conv_tol(d, per_out + 1), "output");
  check_with(got.gx, ref.gx, conv_tol(d, per_in), "grad of x");
  check_with(got.gw, ref.gw, conv_tol(d, per_weight), "grad of weight");
  if (cc.bias) check_with(got.gb, ref.gb, conv_tol(d, per_weight), "grad of bias");
}

void check_case(const ConvCase& cc, ag::DType d, Layout xl, Layout wl) {
  INFO(cc.str() << " in " << ag::dtype_name(d) << ", x " << layout_name(xl) << ", weight " << layout_name(wl));
  const ConvInputs in = make_inputs(cc, d);
  check_result(run_conv(in, cc, kGpu, d, xl, wl), reference(in, cc), cc, d);
}

}  // namespace

TEST_CASE("conv_cuda: conv2d forward and gradients match a float64 CPU reference", "[cuda]") {
  if (skip_without_cuda()) return;
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  ag::manual_seed(seed);
  REQUIRE_FALSE(ag::allow_tf32());
  for (const ConvCase& cc : conv_cases())
    for (ag::DType d : kFloatTypes)
      for (Layout l : {Layout::nchw, Layout::channels_last}) check_case(cc, d, l, l);
}

TEST_CASE("conv_cuda: float64 convolutions (cuDNN runs them in NCHW)", "[cuda]") {
  if (skip_without_cuda()) return;
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  ag::manual_seed(seed);
  for (size_t i : {0, 1, 2, 4})
    for (Layout l : {Layout::nchw, Layout::channels_last}) check_case(conv_cases()[i], ag::kFloat64, l, l);
}

TEST_CASE("conv_cuda: mixed and non-packed layouts of input and weight", "[cuda]") {
  if (skip_without_cuda()) return;
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  ag::manual_seed(seed);
  const std::array<std::pair<Layout, Layout>, 5> combos = {{{Layout::channels_last, Layout::nchw},
                                                            {Layout::nchw, Layout::channels_last},
                                                            {Layout::strided, Layout::nchw},
                                                            {Layout::channels_last, Layout::strided},
                                                            {Layout::strided, Layout::strided}}};
  for (size_t i : {0, 1, 4, 5})
    for (ag::DType d : {ag::kFloat32, ag::kFloat16})
      for (auto [xl, wl] : combos) check_case(conv_cases()[i], d, xl, wl);
}

TEST_CASE("conv_cuda: benchmark mode gives the heuristics' results", "[cuda]") {
  if (skip_without_cuda()) return;
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  ag::manual_seed(seed);
  CHECK_FALSE(ag::cuda::cudnn_benchmark());  // off by default, as in PyTorch
  for (size_t i : {0, 1, 2, 4, 5}) {
    const ConvCase& cc = conv_cases()[i];
    for (ag::DType d : kFloatTypes) {
      for (Layout l : {Layout::nchw, Layout::channels_last}) {
        INFO(cc.str() << " in " << ag::dtype_name(d) << ", " << layout_name(l));
        const ConvInputs in = make_inputs(cc, d);
        const ConvResult ref = reference(in, cc);
        ConvResult heuristic, first, cached;
        {
          BenchmarkMode off(false);
          heuristic = run_conv(in, cc, kGpu, d, l, l);
        }
        {
          BenchmarkMode on(true);
          REQUIRE(ag::cuda::cudnn_benchmark());
          first = run_conv(in, cc, kGpu, d, l, l);   // times the algorithms
          cached = run_conv(in, cc, kGpu, d, l, l);  // reuses the cached choice
        }
        check_result(heuristic, ref, cc, d);
        check_result(first, ref, cc, d);
        check_result(cached, ref, cc, d);
        // Both runs in benchmark mode take the same algorithm: the same bits, unless it
        // reduces with atomics (some backward-filter algorithms do).
        check_with(cached.out, first.out, {0, 0}, "benchmarked output, run twice");
      }
    }
  }
}

TEST_CASE("conv_cuda: float32 rounds through TF32 only when allowed", "[cuda]") {
  if (skip_without_cuda()) return;
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  ag::manual_seed(seed);
  const ConvCase& cc = conv_cases()[5];  // 576-term sums
  const ConvInputs in = make_inputs(cc, ag::kFloat32);
  const ConvResult ref = reference(in, cc);
  {
    Tf32Mode tf32(true);
    const ConvResult got = run_conv(in, cc, kGpu, ag::kFloat32, Layout::channels_last, Layout::channels_last);
    const double e = 9.765625e-04;  // TF32 keeps 10 mantissa bits
    const double r = std::sqrt(576.0);
    check_with(got.out, ref.out, {4 * e * r, 4 * e}, "output with TF32");
  }
  // Off again: full float32 (the tight tolerance of check_result would catch TF32).
  check_result(run_conv(in, cc, kGpu, ag::kFloat32, Layout::channels_last, Layout::channels_last), ref, cc,
               ag::kFloat32);
}

TEST_CASE("conv_cuda: empty batches and inputs without channels", "[cuda]") {
  if (skip_without_cuda()) return;
  ag::manual_seed(fresh_seed());
  const auto opts = ag::TensorOptions(ag::kFloat32).device(kGpu);
  SECTION("N = 0: empty output and input gradient, zero weight gradient") {
    ag::Tensor x = ag::empty({0, 3, 8, 8}, opts).requires_grad_();
    ag::Tensor w = sym({4, 3, 3, 3}).to(kGpu).requires_grad_();
    ag::Tensor b = sym({4}).to(kGpu).requires_grad_();
    ag::Tensor out = ag::conv2d(x, w, b, {1, 1}, {1, 1});
    REQUIRE(out.shape() == ag::Shape{0, 4, 8, 8});
    poison_cuda_cache();
    out.backward(ag::empty({0, 4, 8, 8}, opts));
    REQUIRE(x.grad().shape() == ag::Shape{0, 3, 8, 8});
    check_close(w.grad(), std::vector<double>(4 * 3 * 3 * 3, 0.0), 0, 0);
    check_close(b.grad(), std::vector<double>(4, 0.0), 0, 0);
  }
  SECTION("C = 0: the output is the bias") {
    ag::Tensor x = ag::empty({2, 0, 5, 5}, opts);
    ag::Tensor w = ag::empty({3, 0, 3, 3}, opts);
    ag::Tensor b = sym({3}).to(kGpu);
    poison_cuda_cache();
    ag::Tensor out = ag::conv2d(x, w, b);
    REQUIRE(out.shape() == ag::Shape{2, 3, 3, 3});
    const std::vector<double> bv = b.to_vector<double>();
    std::vector<double> want;
    for (int n = 0; n < 2; ++n)
      for (int k = 0; k < 3; ++k)
        for (int i = 0; i < 9; ++i) want.push_back(bv[static_cast<size_t>(k)]);
    check_close(out, want, 0, 0);
  }
}

namespace {

struct UnfoldCase {
  ag::Window2d w;
  double pad;
};

}  // namespace

TEST_CASE("conv_cuda: unfold (im2col) and its gradient (col2im) are bit-identical to the CPU", "[cuda]") {
  if (skip_without_cuda()) return;
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  ag::manual_seed(seed);
  // Window2d: kh, kw, sh, sw, ph, pw, dh, dw.
  const std::vector<UnfoldCase> cases = {
      {{3, 3, 1, 1, 1, 1, 1, 1}, 0.0},  {{2, 3, 2, 1, 0, 1, 1, 2}, 0.5},  {{3, 2, 2, 3, 2, 1, 2, 1}, -INFINITY},
      {{1, 1, 1, 1, 0, 0, 1, 1}, 0.0},  {{5, 5, 3, 3, 2, 2, 1, 1}, -1.25}, {{2, 2, 2, 2, 0, 0, 1, 1}, 0.0},
      {{4, 3, 1, 2, 3, 0, 1, 3}, 0.1},  // overlapping windows, padding wider than the kernel reach
  };
  for (const UnfoldCase& uc : cases) {
    for (ag::DType d : {ag::kFloat32, ag::kFloat16, ag::kBFloat16, ag::kFloat64}) {
      for (Layout l : {Layout::nchw, Layout::channels_last, Layout::strided}) {
        const ag::Window2d& w = uc.w;
        INFO("window " << w.kh << "x" << w.kw << " stride " << w.sh << "x" << w.sw << " padding " << w.ph << "x" << w.pw
                       << " dilation " << w.dh << "x" << w.dw << ", pad value " << uc.pad << ", "
                       << ag::dtype_name(d) << ", " << layout_name(l));
        const ag::Tensor x0 = sym({2, 3, 9, 8}).to(d);
        ag::Tensor xc = in_layout(x0, l).detach().requires_grad_();
        ag::Tensor xg = in_layout(x0.to(kGpu), l).detach().requires_grad_();
        const ag::Tensor ref = ag::unfold(xc, w, uc.pad);
        poison_cuda_cache();
        const ag::Tensor got = ag::unfold(xg, w, uc.pad);
        check_with(got, ref.detach(), {0, 0}, "im2col");
        const ag::Tensor g = sym(ref.shape()).to(d);
        ref.backward(g);
        poison_cuda_cache();
        got.backward(g.to(kGpu));
        check_with(xg.grad(), xc.grad(), {0, 0}, "col2im");  // same additions in the same order
      }
    }
  }
}

TEST_CASE("conv_cuda: im2col and col2im over more positions than one grid covers", "[cuda]") {
  if (skip_without_cuda()) return;
  ag::manual_seed(fresh_seed());
  const ag::Window2d w{3, 3, 1, 1, 1, 1, 1, 1};
  const ag::Tensor x0 = sym({16, 64, 48, 48}).to(ag::kFloat16);  // 2.4M positions, 21M columns
  ag::Tensor xc = x0.detach().requires_grad_();
  ag::Tensor xg = x0.to_channels_last().to(kGpu).detach().requires_grad_();
  const ag::Tensor ref = ag::unfold(xc, w, 0.0);
  poison_cuda_cache();
  const ag::Tensor got = ag::unfold(xg, w, 0.0);
  ag::NoGradGuard no_grad;
  CHECK(ag::sum(ag::abs(got.cpu().to(ag::kFloat32) - ref.to(ag::kFloat32))).item<double>() == 0.0);
  const ag::Tensor g = sym(ref.shape()).to(ag::kFloat16);  // col2im called directly: any cols
  ag::Tensor gx_c = ag::empty(x0.shape(), x0.options());
  ag::Tensor gx_g = ag::empty(x0.shape(), ag::TensorOptions(ag::kFloat16).device(kGpu));
  ag::kernel::col2im(ag::kCPU, g, gx_c, w);
  ag::kernel::col2im(kGpu, g.to(kGpu), gx_g, w);
  CHECK(ag::sum(ag::abs(gx_g.cpu().to(ag::kFloat32) - gx_c.to(ag::kFloat32))).item<double>() == 0.0);
}

TEST_CASE("conv_cuda: dropout masks are bit-identical to the CPU", "[cuda]") {
  if (skip_without_cuda()) return;
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  struct MaskCase {
    double p_keep, scale;
    uint64_t offset;
  };
  const MaskCase masks[] = {{0.7, 1 / 0.7, 0}, {0.1, 10.0, 12345}, {0.5, 2.0, uint64_t{1} << 40}, {1.0, 1.0, 7}};
  for (ag::DType d : {ag::kFloat32, ag::kFloat16, ag::kBFloat16, ag::kFloat64}) {
    for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{3000017}}) {
      for (const MaskCase& m : masks) {
        INFO(ag::dtype_name(d) << ", n " << n << ", p_keep " << m.p_keep << ", offset " << m.offset);
        ag::Tensor cpu = ag::empty({n}, ag::TensorOptions(d));
        ag::Tensor gpu = ag::full({n}, NAN, ag::TensorOptions(d).device(kGpu));  // poisoned
        ag::kernel::dropout_mask(ag::kCPU, cpu, m.p_keep, m.scale, seed, m.offset);
        ag::kernel::dropout_mask(kGpu, gpu, m.p_keep, m.scale, seed, m.offset);
        const std::vector<double> a = cpu.to_vector<double>(), b = gpu.to_vector<double>();
        size_t differ = 0, kept = 0;
        for (size_t i = 0; i < a.size(); ++i) {
          differ += !(a[i] == b[i]);  // NaN (an unwritten element) differs too
          kept += b[i] != 0;
        }
        CHECK(differ == 0);
        if (n > 100000) {  // the keep rate, within 6 standard deviations
          const double rate = static_cast<double>(kept) / static_cast<double>(n);
          const double sd = std::sqrt(m.p_keep * (1 - m.p_keep) / static_cast<double>(n));
          CHECK(std::abs(rate - m.p_keep) <= 6 * sd + 1e-12);
        }
      }
    }
  }
}

TEST_CASE("conv_cuda: ag::dropout draws the same mask on both devices for one seed", "[cuda]") {
  if (skip_without_cuda()) return;
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  ag::manual_seed(seed);
  for (ag::DType d : kFloatTypes) {
    INFO(ag::dtype_name(d));
    const ag::Tensor x = sym({64, 1000}).to(d);
    ag::manual_seed(seed);
    const ag::Tensor on_cpu = ag::dropout(x, 0.3, true);
    ag::manual_seed(seed);
    const ag::Tensor on_gpu = ag::dropout(x.to(kGpu), 0.3, true);
    check_with(on_gpu, on_cpu, {0, 0}, "dropout");
  }
}

TEST_CASE("conv_cuda: batches past cuDNN's 32-bit indexing are split", "[cuda][.][large]") {
  // Hidden (run with "[large]"): about 20 GiB of device memory.
  if (skip_without_cuda()) return;
  if (ag::cuda::device_properties(0).total_memory < (size_t{40} << 30)) {
    WARN("skipped: needs 40 GiB of device memory");
    return;
  }
  ag::manual_seed(fresh_seed());
  const auto opts = ag::TensorOptions(ag::kFloat16).device(kGpu);
  // 33 samples of 2^26 elements: over 2^31 in all, so chunks of 16, 16 and 1 samples.
  const int64_t n = 33, c = 8, h = 2048, wd = 4096;
  ag::Tensor x = (ag::rand({n, c, h, wd}, opts) * 2.0 - 1.0).detach().requires_grad_();
  ag::Tensor w = (ag::rand({8, c, 3, 3}, opts) * 2.0 - 1.0).detach().requires_grad_();
  ag::Tensor out = ag::conv2d(x, w, ag::Tensor(), {1, 1}, {1, 1});
  const ag::Tensor g = (ag::rand(out.shape(), opts) * 2.0 - 1.0).detach();
  out.backward(g);
  auto max_abs_diff = [](const ag::Tensor& a, const ag::Tensor& b) {
    ag::NoGradGuard no_grad;
    return ag::max(ag::abs(a.to(ag::kFloat32) - b.to(ag::kFloat32))).item<double>();
  };
  const Tol t = conv_tol(ag::kFloat16, c * 9);
  for (int64_t s : {int64_t{0}, int64_t{15}, int64_t{16}, int64_t{32}}) {  // both sides of chunk borders
    INFO("sample " << s);
    ag::NoGradGuard no_grad;
    const ag::Tensor one = ag::conv2d(x.narrow(0, s, 1), w, ag::Tensor(), {1, 1}, {1, 1});
    CHECK(max_abs_diff(out.narrow(0, s, 1), one) <= t.atol + t.rtol * 9 * c);
  }
  // The weight gradient sums over all chunks: compare with the sum of per-chunk gradients.
  ag::Tensor parts = ag::zeros(w.shape(), ag::TensorOptions(ag::kFloat32).device(kGpu));
  for (auto [start, len] : {std::pair<int64_t, int64_t>{0, 16}, {16, 16}, {32, 1}}) {
    ag::Tensor xs = x.narrow(0, start, len).detach();
    ag::Tensor ws = w.detach().requires_grad_();
    ag::conv2d(xs, ws, ag::Tensor(), {1, 1}, {1, 1}).backward(g.narrow(0, start, len).contiguous());
    parts = (parts + ws.grad().to(ag::kFloat32)).detach();
  }
  ag::NoGradGuard no_grad;
  const double scale = ag::max(ag::abs(parts)).item<double>();
  CHECK(max_abs_diff(w.grad(), parts) <= 8 * eps_of(ag::kFloat16) * scale);
}

#if AMPGRAD_WITH_CUDA
TEST_CASE("conv_cuda: repeated convolutions run as graphs of their cuDNN calls, with the same results", "[cuda]") {
  if (skip_without_cuda()) return;
  // An empty table (turning it off empties it), kernels launched directly so that only the
  // cuDNN calls count (Note [Kernel graphs]); restores the switches, also on failure.
  struct On {
    bool prev = ag::cuda::call_graphs_enabled();
    ag::cuda::KernelGraphs prev_kernels = ag::cuda::kernel_graphs();
    On() {
      ag::cuda::set_call_graphs_enabled(false);
      ag::cuda::set_call_graphs_enabled(true);
      ag::cuda::set_kernel_graphs(ag::cuda::KernelGraphs::off);
    }
    ~On() {
      ag::cuda::set_call_graphs_enabled(prev);
      ag::cuda::set_kernel_graphs(prev_kernels);
    }
  } on;
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  ag::manual_seed(seed);
  const ag::TensorOptions f16 = ag::TensorOptions(ag::kFloat16).device(kGpu);
  const ag::Tensor x = sym({4, 8, 12, 12}).to(kGpu).to(ag::kFloat16), w = (sym({16, 8, 3, 3}) * 0.2).to(kGpu).to(ag::kFloat16);
  const ag::Tensor gy = sym({4, 16, 12, 12}).to(kGpu).to(ag::kFloat16);
  const ag::Tensor y = ag::empty({4, 16, 12, 12}, f16), gx = ag::empty({4, 8, 12, 12}, f16), gw = ag::empty({16, 8, 3, 3}, f16);
  ag::ConvParams p;
  p.padding = {1, 1, 0};
  std::vector<std::vector<double>> ys, gxs, gws;
  const ag::cuda::CallGraphStats s0 = ag::cuda::call_graph_stats();
  for (int i = 0; i < 5; ++i) {
    ag::kernel::conv_forward(kGpu, x, w, ag::Tensor(), y, p);
    ag::kernel::conv_backward_data(kGpu, gy, w, gx, p);
    ag::kernel::conv_backward_weight(kGpu, x, gy, gw, p);
    ys.push_back(y.to_vector<double>());
    gxs.push_back(gx.to_vector<double>());
    gws.push_back(gw.to_vector<double>());
  }
  // Each of the three calls is captured at its third run, and its graph launched from then on,
  // when its pointers (the workspace's included) repeat, as they do in this loop.
  const ag::cuda::CallGraphStats s1 = ag::cuda::call_graph_stats();
  CHECK(s1.captured - s0.captured == 3);
  CHECK(s1.launched - s0.launched >= 3);
  CHECK(s1.failed == s0.failed);
  // cuDNN's engines may sum in a nondeterministic order (Note [cuDNN plans]): every run of
  // each call, direct or launched, agrees with the first within rounding.
  auto near = [](const std::vector<double>& a, const std::vector<double>& b, double atol, double rtol) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (!(std::abs(a[i] - b[i]) <= atol + rtol * std::abs(b[i]))) return false;
    return true;
  };
  for (size_t i = 1; i < 5; ++i) {
    CHECK(near(ys[i], ys[0], 1e-2, 1e-2));
    CHECK(near(gxs[i], gxs[0], 1e-2, 1e-2));
    CHECK(near(gws[i], gws[0], 2e-2, 1e-2));
  }
  // Against the float64 CPU reference of the same (float16-rounded) inputs.
  const ag::Tensor x64 = x.cpu().to(ag::kFloat64), w64 = w.cpu().to(ag::kFloat64);
  const ag::Tensor ref = ag::conv2d(x64, w64, ag::Tensor(), {1, 1}, {1, 1});
  check_close(y, ref.to_vector<double>(), 1e-2, 4e-3);
}
#endif
