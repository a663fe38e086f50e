// nn: modules, layers and losses against float64 references, gradchecks of the new ops,
// autocast dtypes per layer, CPU vs CUDA training, checkpoint resume.
#include <cstdio>
#include <filesystem>

#include "common.h"

namespace nn = ag::nn;
namespace F = ag::nn::functional;

namespace {

std::vector<ag::Device> devices() {
  std::vector<ag::Device> d{ag::Device(ag::kCPU)};
  if (ag::cuda::is_available()) d.emplace_back(ag::kCUDA);
  return d;
}

ag::Tensor leaf64(const ag::Shape& s, double lo = -1, double hi = 1) {
  return (ag::rand(s, ag::kFloat64) * (hi - lo) + lo).detach().requires_grad_();
}

void gradcheck_ok(const std::function<ag::Tensor(const std::vector<ag::Tensor>&)>& fn, std::vector<ag::Tensor> in) {
  auto r = ag::autograd::gradcheck(fn, in);
  INFO(r.message);
  CHECK(r.ok);
}

// Direct convolution in double: out[n, k, y, x] = sum_c,i,j w[k, c, i, j] * in[n, g*C/g + c, ...].
std::vector<double> conv_reference(const ag::Tensor& x, const ag::Tensor& w, const ag::Tensor& b,
                                   std::array<int64_t, 2> s, std::array<int64_t, 2> p, std::array<int64_t, 2> d,
                                   int64_t groups) {
  auto xv = x.to_vector<double>(), wv = w.to_vector<double>();
  std::vector<double> bv = b.defined() ? b.to_vector<double>() : std::vector<double>();
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), K = w.size(0), kh = w.size(2),
                kw = w.size(3), cg = C / groups, kg = K / groups;
  const int64_t oh = (H + 2 * p[0] - d[0] * (kh - 1) - 1) / s[0] + 1, ow = (W + 2 * p[1] - d[1] * (kw - 1) - 1) / s[1] + 1;
  std::vector<double> out(static_cast<size_t>(N * K * oh * ow));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox) {
          double acc = bv.empty() ? 0 : bv[k];
          const int64_t g = k / kg;
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                int64_t y = oy * s[0] - p[0] + i * d[0], xx = ox * s[1] - p[1] + j * d[1];
                if (y < 0 || y >= H || xx < 0 || xx >= W) continue;
                acc += wv[((k * cg + c) * kh + i) * kw + j] * xv[((n * C + g * cg + c) * H + y) * W + xx];
              }
          out[((n * K + k) * oh + oy) * ow + ox] = acc;
        }
  return out;
}

}  // namespace

TEST_CASE("conv2d matches a direct float64 convolution", "[nn][cuda]") {
  struct Case {
    ag::Shape x, w;
    std::array<int64_t, 2> s, p, d;
    int64_t groups;
    bool bias;
  };
  const Case cases[] = {{{2, 3, 7, 6}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true},
                        {{1, 4, 9, 8}, {6, 2, 3, 2}, {2, 1}, {1, 0}, {1, 2}, 2, false},
                        {{2, 6, 5, 5}, {6, 1, 3, 3}, {1, 2}, {2, 1}, {2, 1}, 6, true}};
  for (ag::Device dev : devices())
    for (ag::DType dt : {ag::kFloat32, ag::kFloat16, ag::kBFloat16})
      for (bool channels_last : {false, true})
        for (const Case& c : cases) {
          INFO(dev.str() << " " << ag::dtype_name(dt) << (channels_last ? " NHWC" : " NCHW") << " groups " << c.groups);
          auto opt = ag::TensorOptions(dt).device(dev);
          ag::Tensor x = ag::randn(c.x, opt), w = ag::randn(c.w, opt) * 0.3;
          ag::Tensor b = c.bias ? ag::randn({c.w[0]}, opt) : ag::Tensor();
          if (channels_last) x = x.to_channels_last();
          ag::Tensor out = ag::conv2d(x, w, b, c.s, c.p, c.d, c.groups);
          CHECK(out.dtype() == dt);
          const double fan = static_cast<double>(c.w[1] * c.w[2] * c.w[3]);
          check_close(out, conv_reference(x, w, b, c.s, c.p, c.d, c.groups), 8 * std::sqrt(fan) * eps_of(dt) + 1e-5,
                      4 * eps_of(dt));
        }
}

TEST_CASE("gradcheck of the nn ops in float64", "[nn]") {
  ag::manual_seed(11);
  SECTION("conv2d, with groups, stride, padding, dilation and bias") {
    gradcheck_ok([](const auto& v) { return ag::conv2d(v[0], v[1], v[2], {2, 1}, {1, 0}, {1, 2}, 2); },
                 {leaf64({1, 4, 5, 6}), leaf64({2, 2, 2, 2}), leaf64({2})});
    gradcheck_ok([](const auto& v) { return ag::conv2d(v[0].to_channels_last(), v[1]); },
                 {leaf64({2, 2, 4, 4}), leaf64({3, 2, 3, 3})});
  }
  SECTION("unfold") {
    gradcheck_ok([](const auto& v) { return ag::unfold(v[0], ag::Window2d{2, 3, 1, 2, 1, 1, 1, 1}); }, {leaf64({1, 2, 4, 5})});
  }
  SECTION("pools") {
    // Distinct values so that max has no ties.
    ag::Tensor x = (ag::arange(0, 2 * 3 * 6 * 6, 1, ag::kFloat64).view({2, 3, 6, 6}) * 0.01 +
                    ag::rand({2, 3, 6, 6}, ag::kFloat64) * 0.001)
                       .detach()
                       .requires_grad_();
    gradcheck_ok([](const auto& v) { return ag::max_pool2d(v[0], {3, 3}, {2, 2}, {1, 1}); }, {x});
    gradcheck_ok([](const auto& v) { return ag::avg_pool2d(v[0], {2, 3}, {2, 1}, {1, 1}); }, {leaf64({1, 2, 5, 6})});
    gradcheck_ok([](const auto& v) { return ag::adaptive_avg_pool2d(v[0], {2, 3}); }, {leaf64({1, 2, 4, 6})});
    gradcheck_ok([](const auto& v) { return ag::adaptive_avg_pool2d(v[0], {3, 2}); }, {leaf64({1, 1, 5, 5})});
  }
  SECTION("norms") {
    ag::Tensor rm = ag::zeros({3}, ag::kFloat64), rv = ag::ones({3}, ag::kFloat64);
    gradcheck_ok([&](const auto& v) { return ag::batch_norm(v[0], rm, rv, v[1], v[2], true); },
                 {leaf64({4, 3, 2, 2}), leaf64({3}), leaf64({3})});
    gradcheck_ok([&](const auto& v) { return ag::batch_norm(v[0], rm, rv, v[1], v[2], false); },
                 {leaf64({2, 3, 2, 2}), leaf64({3}), leaf64({3})});
    gradcheck_ok([](const auto& v) { return ag::layer_norm(v[0], {3, 4}, v[1], v[2]); },
                 {leaf64({2, 3, 4}), leaf64({3, 4}), leaf64({3, 4})});
  }
  SECTION("dropout: a fixed mask per seed") {
    gradcheck_ok(
        [](const auto& v) {
          ag::manual_seed(5);
          return ag::dropout(v[0], 0.3, true);
        },
        {leaf64({4, 5})});
  }
  SECTION("losses") {
    ag::Tensor t = ag::tensor(std::vector<int64_t>{2, 0, -100, 1});
    gradcheck_ok([&](const auto& v) { return ag::cross_entropy(v[0], t, 0.1); }, {leaf64({4, 3})});
    gradcheck_ok([&](const auto& v) { return ag::nll_loss(ag::log_softmax(v[0], 1), t); }, {leaf64({4, 3})});
    gradcheck_ok([](const auto& v) { return ag::mse_loss(v[0], v[1]); }, {leaf64({3, 2}), leaf64({3, 2})});
    gradcheck_ok([](const auto& v) { return ag::binary_cross_entropy_with_logits(v[0], v[1]); },
                 {leaf64({5}, -3, 3), leaf64({5}, 0, 1)});
    gradcheck_ok([](const auto& v) { return ag::binary_cross_entropy(v[0], v[1]); },
                 {leaf64({5}, 0.1, 0.9), leaf64({5}, 0, 1)});
  }
}

// nll_loss and cross_entropy in every form against loops in float64: logits [N, C, D] (D = 1
// stands for the [N, C] form), class weights, ignore_index, the three reductions, smoothing.
TEST_CASE("nll_loss and cross_entropy with class weights, reductions and spatial inputs match float64", "[nn]") {
  ag::manual_seed(fresh_seed());
  const int64_t n = 3, c = 4, d = 5;
  const ag::Tensor x = ag::randn({n, c, d}, ag::kFloat64) * 2;
  std::vector<int64_t> tv(static_cast<size_t>(n * d));
  for (size_t i = 0; i < tv.size(); ++i) tv[i] = static_cast<int64_t>((i * 7 + 3) % c);
  tv[4] = -1;  // one ignored position
  const ag::Tensor target = ag::tensor(tv, {n, d}), weight = ag::rand({c}, ag::kFloat64) + 0.5;
  const std::vector<double> xv = x.to_vector<double>(), wv = weight.to_vector<double>();
  auto lp = [&](int64_t i, int64_t k, int64_t j) {
    double m = -INFINITY, s = 0;
    for (int64_t q = 0; q < c; ++q) m = std::max(m, xv[(i * c + q) * d + j]);
    for (int64_t q = 0; q < c; ++q) s += std::exp(xv[(i * c + q) * d + j] - m);
    return xv[(i * c + k) * d + j] - m - std::log(s);
  };
  using R = ag::Reduction;
  for (bool weighted : {false, true}) {
    for (R red : {R::None, R::Sum, R::Mean}) {
      for (double e : {0.0, 0.3}) {
        INFO("weighted " << weighted << ", reduction " << static_cast<int>(red) << ", smoothing " << e);
        std::vector<double> nll(tv.size(), 0.0), smooth(tv.size(), 0.0);
        double total = 0;
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < d; ++j) {
            const int64_t t = tv[static_cast<size_t>(i * d + j)];
            if (t == -1) continue;
            const double wt = weighted ? wv[static_cast<size_t>(t)] : 1.0;
            nll[static_cast<size_t>(i * d + j)] = -wt * lp(i, t, j);
            for (int64_t k = 0; k < c; ++k)
              smooth[static_cast<size_t>(i * d + j)] -= (weighted ? wv[static_cast<size_t>(k)] : 1.0) * lp(i, k, j);
            total += wt;
          }
        std::vector<double> want(tv.size());
        for (size_t q = 0; q < tv.size(); ++q) want[q] = (1 - e) * nll[q] + e / c * smooth[q];
        if (red != R::None) {
          double s = 0;
          for (double v : want) s += v;
          want = {red == R::Mean ? s / total : s};
        }
        const ag::Tensor w = weighted ? weight : ag::Tensor();
        const ag::Tensor got = ag::cross_entropy(x, target, w, -1, red, e);
        CHECK(got.shape() == (red == R::None ? ag::Shape{n, d} : ag::Shape{}));
        check_close(got, want, 1e-12, 1e-12);
        if (e == 0) check_close(ag::nll_loss(ag::log_softmax(x, 1), target, w, -1, red), want, 1e-12, 1e-12);
        // The [N, C] form: the positions as rows.
        const ag::Tensor rows = ag::permute(x, {0, 2, 1}).reshape({n * d, c});
        check_close(ag::cross_entropy(rows, target.reshape({n * d}), w, -1, red, e), want, 1e-12, 1e-12);
      }
    }
  }
  // One sample: [C] with a 0-dim target.
  const ag::Tensor one = ag::select(ag::select(x, 2, 0), 0, 0);
  const ag::Tensor t0 = ag::tensor(std::vector<int64_t>{2}).reshape({});
  CHECK(ag::cross_entropy(one, t0).item<double>() == Approx(-lp(0, 2, 0)).epsilon(1e-12));
  CHECK(ag::cross_entropy(one, t0, ag::Tensor(), -100, ag::Reduction::None).dim() == 0);
  // Gradients of the new forms.
  auto leaf = ag::randn({2, 3, 4}, ag::kFloat64).requires_grad_();
  const ag::Tensor t3 = ag::tensor(std::vector<int64_t>{0, 2, -100, 1, 1, 0, 2, 2}, {2, 4});
  const ag::Tensor w3 = ag::rand({3}, ag::kFloat64) + 0.5;
  for (R red : {R::None, R::Sum, R::Mean}) {
    const auto r = ag::autograd::gradcheck(
        [&](const std::vector<ag::Tensor>& v) { return ag::cross_entropy(v[0], t3, w3, -100, red, 0.1); }, {leaf});
    INFO(r.message);
    CHECK(r.ok);
  }
  // Errors: the target's shape, the weight's shape and dtype, a reduction the loss has not.
  CHECK_THAT(error_message([&] { ag::cross_entropy(x, target.reshape({n * d})); }),
             Catch::Contains("cross_entropy: expected an int64 target [3, 5]") && Catch::Contains("got int64 [15]"));
  CHECK_THAT(error_message([&] { ag::nll_loss(x, target, ag::ones({3}, ag::kFloat64)); }),
             Catch::Contains("nll_loss: expected a floating weight [4] (one per class)"));
  CHECK_THAT(error_message([&] { ag::nll_loss(x, target, ag::ones({4})); }),
             Catch::Contains("nll_loss: expected weight") && Catch::Contains("in the input's dtype float64"));
  CHECK_THAT(error_message([&] { ag::nll_loss(x, target, ag::Tensor(), -1, ag::Reduction::BatchMean); }),
             Catch::Contains("nll_loss: reduction BatchMean is kl_div's"));
  CHECK_THAT(error_message([&] { ag::cross_entropy(x, ag::full({n, d}, 4, ag::kInt64)); }),
             Catch::Contains("target 4 is out of range for 4 classes"));
}

TEST_CASE("losses and norms match float64 references", "[nn]") {
  ag::Tensor logits = ag::tensor({1.f, 2.f, 0.5f, -1.f, 0.f, 3.f}, {2, 3});
  ag::Tensor target = ag::tensor(std::vector<int64_t>{1, 2});
  auto lse = [](double a, double b, double c) { return std::log(std::exp(a) + std::exp(b) + std::exp(c)); };
  const double l0 = lse(1, 2, 0.5), l1 = lse(-1, 0, 3);
  const double nll = ((l0 - 2) + (l1 - 3)) / 2;
  CHECK(ag::cross_entropy(logits, target).item<double>() == Approx(nll).epsilon(1e-6));
  // Label smoothing 0.2: 0.8 * nll + 0.2 * mean_c(-log p_c).
  const double smooth = ((3 * l0 - 3.5) + (3 * l1 - 2)) / (2 * 3);
  CHECK(ag::cross_entropy(logits, target, 0.2).item<double>() == Approx(0.8 * nll + 0.2 * smooth).epsilon(1e-6));
  // ignore_index drops a row from the mean.
  ag::Tensor t2 = ag::tensor(std::vector<int64_t>{1, -100});
  CHECK(ag::cross_entropy(logits, t2).item<double>() == Approx(l0 - 2).epsilon(1e-6));
  CHECK(ag::mse_loss(ag::tensor({1.f, 2.f}), ag::tensor({2.f, 4.f})).item<double>() == Approx(2.5));
  const double x = 0.7, y = 0.3;
  CHECK(ag::binary_cross_entropy_with_logits(ag::tensor({0.7f}), ag::tensor({0.3f})).item<double>() ==
        Approx(-(y * std::log(1 / (1 + std::exp(-x))) + (1 - y) * std::log(1 - 1 / (1 + std::exp(-x))))).epsilon(1e-5));
  // Running statistics: momentum 0.1, unbiased variance.
  ag::Tensor bx = ag::tensor({1.f, 2.f, 3.f, 6.f}, {4, 1, 1, 1});
  ag::Tensor rm = ag::zeros({1}), rv = ag::ones({1});
  ag::Tensor out = ag::batch_norm(bx, rm, rv, ag::Tensor(), ag::Tensor(), true);
  CHECK(rm.item<double>() == Approx(0.1 * 3.0));
  CHECK(rv.item<double>() == Approx(0.9 + 0.1 * (14.0 / 3.0)));
  check_close(out, {-2 / std::sqrt(3.5 + 1e-5), -1 / std::sqrt(3.5 + 1e-5), 0, 3 / std::sqrt(3.5 + 1e-5)}, 1e-6, 1e-5);
}

// Note [Fused batch norm]: the fused kernels on every layout they take (NCHW, channels-last,
// 2-D), float16 inputs with float32 parameters (autocast's case) and float32, forward, running
// statistics, evaluation and backward, against float64 references; C = 37 is not a multiple of
// the column kernel's 32 channels, and 2-D with 1500 rows spreads each channel over many blocks.
TEST_CASE("batch_norm's fused kernels match float64 references on every layout", "[nn][cuda]") {
  struct Shape4 {
    std::string name;
    ag::Shape shape;
    bool channels_last;
  };
  const std::vector<Shape4> shapes{{"NCHW", {33, 37, 5, 6}, false}, {"NHWC", {33, 37, 5, 6}, true},
                                   {"2-D", {1500, 37}, false}, {"NCL", {9, 5, 70}, false}};
  for (ag::Device dev : devices()) {
    for (const Shape4& sh : shapes) {
      for (ag::DType dt : {ag::kFloat32, ag::kFloat16}) {
        INFO(dev.str() << " " << sh.name << " " << ag::dtype_name(dt));
        ag::manual_seed(21);
        const int64_t c = sh.shape[1];
        ag::Tensor x0 = (ag::randn(sh.shape) * 3.0 + 5.0).to(dt).to(dev);
        if (sh.channels_last) x0 = x0.to_channels_last();  // on the device: to(device) packs
        ag::Tensor x = x0.detach().requires_grad_();
        if (sh.channels_last) REQUIRE(ag::is_channels_last(x));
        ag::Tensor w = (ag::rand({c}) + 0.5).to(dev).requires_grad_(), b = ag::randn({c}).to(dev).requires_grad_();
        ag::Tensor rm = ag::zeros({c}).to(dev), rv = ag::ones({c}).to(dev);
        ag::Tensor y = ag::batch_norm(x, rm, rv, w, b, true, 0.1, 1e-5);
        REQUIRE(y.dtype() == dt);
        CHECK(y.strides() == x.strides());
        ag::Tensor g = ag::randn(sh.shape).to(dt).to(dev);  // contiguous even for a channels-last x
        ag::sum(y * g).backward();
        // float64 references, from the values as stored; index (o, k, i) over [outer, C, inner].
        const std::vector<double> xv = x.contiguous().to_vector<double>(), gv = g.contiguous().to_vector<double>();
        const std::vector<double> wv = w.to_vector<double>(), bv = b.to_vector<double>();
        const int64_t n = sh.shape[0], inner = static_cast<int64_t>(xv.size()) / (n * c);
        const double m = static_cast<double>(n * inner);
        std::vector<double> mu(c, 0), var(c, 0), sg(c, 0), sgx(c, 0);
        auto at = [&](int64_t o, int64_t k, int64_t i) { return static_cast<size_t>((o * c + k) * inner + i); };
        for (int64_t o = 0; o < n; ++o)
          for (int64_t k = 0; k < c; ++k)
            for (int64_t i = 0; i < inner; ++i) mu[k] += xv[at(o, k, i)] / m;
        for (int64_t o = 0; o < n; ++o)
          for (int64_t k = 0; k < c; ++k)
            for (int64_t i = 0; i < inner; ++i) var[k] += (xv[at(o, k, i)] - mu[k]) * (xv[at(o, k, i)] - mu[k]) / m;
        std::vector<double> yref(xv.size()), gxref(xv.size()), rmref(c), rvref(c);
        for (int64_t o = 0; o < n; ++o)
          for (int64_t k = 0; k < c; ++k)
            for (int64_t i = 0; i < inner; ++i) {
              const double xhat = (xv[at(o, k, i)] - mu[k]) / std::sqrt(var[k] + 1e-5);
              yref[at(o, k, i)] = xhat * wv[k] + bv[k];
              sg[k] += gv[at(o, k, i)];
              sgx[k] += gv[at(o, k, i)] * xhat;
            }
        for (int64_t o = 0; o < n; ++o)
          for (int64_t k = 0; k < c; ++k)
            for (int64_t i = 0; i < inner; ++i) {
              const double xhat = (xv[at(o, k, i)] - mu[k]) / std::sqrt(var[k] + 1e-5);
              gxref[at(o, k, i)] =
                  (gv[at(o, k, i)] - sg[k] / m - xhat * sgx[k] / m) * wv[k] / std::sqrt(var[k] + 1e-5);
            }
        for (int64_t k = 0; k < c; ++k) {
          rmref[k] = 0.1 * mu[k];
          rvref[k] = 0.9 + 0.1 * var[k] * m / (m - 1);
        }
        const double e = std::max(eps_of(dt), 5e-6);  // float32: sums of ~1000 terms in float32
        check_close(y.contiguous(), yref, 4 * e, 4 * e);
        check_close(rm, rmref, 1e-5, 1e-5);
        check_close(rv, rvref, 1e-5, 1e-5);
        REQUIRE(x.grad().dtype() == dt);
        CHECK(x.grad().strides() == x.strides());
        check_close(x.grad().contiguous(), gxref, 8 * e, 8 * e);
        // Sums of up to 1500 terms of either sign, in float32.
        double big_w = 0, big_b = 0;
        for (int64_t k = 0; k < c; ++k) {
          big_w = std::max(big_w, std::fabs(sgx[k]));
          big_b = std::max(big_b, std::fabs(sg[k]));
        }
        check_close(w.grad(), sgx, 1e-4 * big_w, 1e-4);
        check_close(b.grad(), sg, 1e-4 * big_b, 1e-4);
        // Evaluation: the running statistics normalize.
        ag::Tensor ye = ag::batch_norm(x.detach(), rm, rv, w.detach(), b.detach(), false, 0.1, 1e-5);
        const std::vector<double> rmv = rm.to_vector<double>(), rvv = rv.to_vector<double>();
        std::vector<double> yeref(xv.size());
        for (int64_t o = 0; o < n; ++o)
          for (int64_t k = 0; k < c; ++k)
            for (int64_t i = 0; i < inner; ++i)
              yeref[at(o, k, i)] = (xv[at(o, k, i)] - rmv[k]) / std::sqrt(rvv[k] + 1e-5) * wv[k] + bv[k];
        check_close(ye.contiguous(), yeref, 4 * e, 4 * e);
        // Evaluation's input gradient alone, with no parameter gradient to sum for:
        // g * weight / sqrt(running_var + eps).
        ag::Tensor xe = x.detach().requires_grad_();
        ag::sum(ag::batch_norm(xe, rm, rv, w.detach(), b.detach(), false, 0.1, 1e-5) * g).backward();
        std::vector<double> gxeref(xv.size());
        for (int64_t o = 0; o < n; ++o)
          for (int64_t k = 0; k < c; ++k)
            for (int64_t i = 0; i < inner; ++i)
              gxeref[at(o, k, i)] = gv[at(o, k, i)] * wv[k] / std::sqrt(rvv[k] + 1e-5);
        check_close(xe.grad().contiguous(), gxeref, 4 * e, 4 * e);
      }
    }
  }
}

// Note [Max pooling]: the direct kernels against a float64 reference, channels-last in and
// out, ties to the first maximum, NaN propagated, and the gradient gathered to the maxima.
TEST_CASE("max_pool2d's kernels: values, layouts, ties, NaN and gradients", "[nn][cuda]") {
  for (ag::Device dev : devices()) {
    for (bool cl : {false, true}) {
      INFO(dev.str() << (cl ? " channels-last" : " NCHW"));
      ag::manual_seed(4);
      // Values on a coarse grid, so windows hold ties.
      ag::Tensor x = (ag::randn({2, 3, 7, 9}) * 2.0).to(ag::kInt64).to(ag::kFloat32).to(dev);
      if (cl) x = x.to_channels_last();
      x = x.detach().requires_grad_();
      ag::Tensor y = ag::max_pool2d(x, {3, 3}, {2, 2}, {1, 1});
      CHECK(y.shape() == ag::Shape{2, 3, 4, 5});
      CHECK(ag::is_channels_last(y) == cl);
      const std::vector<double> xv = x.contiguous().to_vector<double>();
      std::vector<double> ref(2 * 3 * 4 * 5), gref(xv.size(), 0.0);
      ag::Tensor g = ag::randn({2, 3, 4, 5}).to(dev);
      const std::vector<double> gv = g.to_vector<double>();
      for (int64_t p = 0; p < 6; ++p)
        for (int64_t oy = 0; oy < 4; ++oy)
          for (int64_t ox = 0; ox < 5; ++ox) {
            double best = -INFINITY;
            int64_t arg = -1;
            for (int64_t i = 0; i < 3; ++i)
              for (int64_t j = 0; j < 3; ++j) {
                const int64_t iy = oy * 2 - 1 + i, ix = ox * 2 - 1 + j;
                if (iy < 0 || iy >= 7 || ix < 0 || ix >= 9) continue;
                const double v = xv[static_cast<size_t>(p * 63 + iy * 9 + ix)];
                if (arg < 0 || v > best) {
                  best = v;
                  arg = p * 63 + iy * 9 + ix;
                }
              }
            const size_t o = static_cast<size_t>(p * 20 + oy * 5 + ox);
            ref[o] = best;
            gref[static_cast<size_t>(arg)] += gv[o];
          }
      check_close(y.contiguous(), ref, 0, 0);
      ag::sum(y * g).backward();
      CHECK(ag::is_channels_last(x.grad()) == cl);
      check_close(x.grad().contiguous(), gref, 1e-6, 1e-6);
    }
    // A 1x1 map (ambiguous strides) pooled with padding stays NCHW-contiguous, as in PyTorch.
    ag::Tensor one = ag::randn({2, 3, 1, 1}).to(dev);
    ag::Tensor p1 = ag::max_pool2d(one, {2, 2}, {1, 1}, {1, 1});
    CHECK(p1.is_contiguous());
    CHECK(p1.view({2, -1}).shape() == ag::Shape{2, 12});
    // A NaN in a window is its maximum.
    ag::Tensor n = ag::tensor(std::vector<double>{1, NAN, 3, 2}, {1, 1, 2, 2}, ag::kFloat32).to(dev);
    CHECK(std::isnan(ag::max_pool2d(n, {2, 2}).item<double>()));
  }
}

TEST_CASE("dropout: rate, scale, training switch, same mask on CPU and CUDA", "[nn][cuda]") {
  ag::Tensor x = ag::ones({100000});
  ag::manual_seed(3);
  ag::Tensor y = ag::dropout(x, 0.25, true);
  auto v = y.to_vector<float>();
  int64_t zeros = 0;
  for (float e : v) {
    if (e == 0) ++zeros;
    else CHECK(e == Approx(1 / 0.75));
  }
  CHECK(std::abs(zeros / 100000.0 - 0.25) < 0.01);
  CHECK(ag::dropout(x, 0.25, false).is_same(x));
  if (ag::cuda::is_available()) {
    ag::manual_seed(3);
    ag::Tensor yc = ag::dropout(x.cuda(), 0.25, true);
    CHECK(yc.to_vector<float>() == v);
  }
}

TEST_CASE("modules: parameters, buffers, train/eval, to(), state_dict", "[nn]") {
  ag::manual_seed(0);
  auto net = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(1, 4, 3), std::make_shared<nn::BatchNorm2d>(4), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::AdaptiveAvgPool2d>(std::array<int64_t, 2>{1, 1}), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(4, 2)});
  std::vector<std::string> names;
  for (auto& [n, t] : net->named_parameters()) names.push_back(n);
  CHECK(names == std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias", "5.weight", "5.bias"});
  auto sd = net->state_dict();
  CHECK(sd.count("1.running_mean") == 1);
  CHECK(sd.count("1.num_batches_tracked") == 1);
  // PyTorch's default init: |w| <= 1/sqrt(fan_in).
  for (double w : sd.at("5.weight").to_vector<double>()) CHECK(std::abs(w) <= 0.5 + 1e-7);
  ag::Tensor x = ag::randn({3, 1, 6, 6});
  net->train();
  ag::Tensor train_out = (*net)(x);
  net->eval();
  CHECK_FALSE((*net)[1]->is_training());
  ag::Tensor eval_out = (*net)(x);
  CHECK(train_out.to_vector<float>() != eval_out.to_vector<float>());
  // load_state_dict: a wrong shape changes nothing.
  auto bad = sd;
  bad["5.weight"] = ag::zeros({3, 4});
  const auto before = net->state_dict().at("0.weight").to_vector<float>();
  CHECK_THROWS_WITH(net->load_state_dict(bad), Catch::Contains("'5.weight' is [3, 4] in the state dict but [2, 4] here"));
  CHECK(net->state_dict().at("0.weight").to_vector<float>() == before);
  // to(dtype) keeps parameter objects (an optimizer holding them follows).
  ag::Tensor w = net->parameters()[0];
  net->to(ag::kFloat64);
  CHECK(w.dtype() == ag::kFloat64);
  CHECK(net->named_buffers()[2].second.dtype() == ag::kInt64);  // num_batches_tracked stays an integer
}

// A weight registered in two modules (a language model's tied embedding and head) is one
// parameter, under its first name, as PyTorch's named_parameters: an optimizer takes it once and
// steps it once; state_dict holds it under both names.
TEST_CASE("modules: a tied weight is one parameter", "[nn]") {
  struct Head : nn::Module {
    explicit Head(const ag::Tensor& w) : nn::Module("Head") { weight = register_parameter("weight", w); }
    ag::Tensor weight;
  };
  struct Tied : nn::Module {
    Tied() : nn::Module("Tied") {
      emb = register_module("emb", std::make_shared<nn::Embedding>(5, 3));
      head = register_module("head", std::make_shared<Head>(emb->weight));
    }
    std::shared_ptr<nn::Embedding> emb;
    std::shared_ptr<Head> head;
  };
  Tied m;
  const auto named = m.named_parameters();
  REQUIRE(named.size() == 1);
  CHECK(named[0].first == "emb.weight");
  CHECK(m.parameters().size() == 1);
  const auto sd = m.state_dict();
  CHECK(sd.count("emb.weight") == 1);
  CHECK(sd.count("head.weight") == 1);
  ag::optim::SGD opt(m.parameters(), ag::optim::SGDOptions(0.5));  // refused if it held the weight twice
  ag::Tensor w = named[0].second;
  w.set_grad(ag::ones_like(w));
  const std::vector<double> before = w.to_vector<double>();
  opt.step();
  const std::vector<double> after = w.to_vector<double>();
  for (size_t i = 0; i < after.size(); ++i) CHECK(after[i] == Approx(before[i] - 0.5).epsilon(1e-6));  // once
}

TEST_CASE("each layer's output dtype under autocast", "[nn]") {
  ag::manual_seed(1);
  ag::amp::AutocastGuard ac(ag::kCPU, ag::kFloat16);
  ag::Tensor img = ag::randn({2, 3, 8, 8});
  CHECK(nn::Conv2d(3, 4, 3)(img).dtype() == ag::kFloat16);
  CHECK(nn::Linear(8, 2)(img).dtype() == ag::kFloat16);
  ag::Tensor h = img.to(ag::kFloat16);
  CHECK(nn::MaxPool2d(2)(h).dtype() == ag::kFloat16);
  CHECK(nn::AvgPool2d(2)(h).dtype() == ag::kFloat16);
  CHECK(nn::ReLU()(h).dtype() == ag::kFloat16);
  CHECK(nn::GELU()(h).dtype() == ag::kFloat16);
  nn::BatchNorm2d bn(3);
  CHECK(bn(h).dtype() == ag::kFloat16);
  CHECK(bn.running_mean.dtype() == ag::kFloat32);  // statistics stay float32
  CHECK(bn.weight.dtype() == ag::kFloat32);
  CHECK(nn::LayerNorm({8})(h).dtype() == ag::kFloat32);  // layer_norm is an fp32 op
  ag::Tensor t = ag::tensor(std::vector<int64_t>{0, 1});
  CHECK(F::cross_entropy(ag::randn({2, 3}).to(ag::kFloat16), t).dtype() == ag::kFloat32);
  CHECK_THROWS_WITH(F::binary_cross_entropy(ag::rand({3}), ag::rand({3})),
                    Catch::Contains("binary_cross_entropy: unsafe to autocast to float16") &&
                        Catch::Contains("binary_cross_entropy_with_logits"));
  ag::amp::AutocastGuard bf(ag::kCPU, ag::kBFloat16);
  CHECK(F::binary_cross_entropy(ag::rand({3}) * 0.5 + 0.25, ag::rand({3})).dtype() == ag::kFloat32);
}

namespace {
std::shared_ptr<nn::Sequential> tiny_cnn(ag::Device dev) {
  ag::manual_seed(42);
  auto net = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(1, 4, 3, nn::Conv2dOptions{.padding = {1, 1}}), std::make_shared<nn::BatchNorm2d>(4),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Dropout>(0.2), std::make_shared<nn::Linear>(4 * 4 * 4, 3)});
  net->to(dev);
  return net;
}
}  // namespace

TEST_CASE("a tiny CNN trains the same from one seed on the CPU and on CUDA", "[nn][cuda]") {
  if (skip_without_cuda()) return;
  ag::manual_seed(7);
  ag::Tensor x = ag::randn({8, 1, 8, 8});
  ag::Tensor y = ag::tensor(std::vector<int64_t>{0, 1, 2, 0, 1, 2, 0, 1});
  std::vector<std::vector<double>> losses(2);
  std::vector<std::vector<double>> finals;
  int k = 0;
  for (ag::Device dev : {ag::Device(ag::kCPU), ag::Device(ag::kCUDA)}) {
    auto net = tiny_cnn(dev);
    ag::optim::SGD opt(net->parameters(), ag::optim::SGDOptions(0.1).momentum(0.9));
    ag::manual_seed(9);  // the same dropout masks on both devices
    for (int i = 0; i < 5; ++i) {
      opt.zero_grad();
      ag::Tensor loss = ag::cross_entropy((*net)(x.to(dev)), y.to(dev));
      loss.backward();
      opt.step();
      losses[k].push_back(loss.item<double>());
    }
    std::vector<double> all;
    for (auto& p : net->parameters()) {
      auto v = p.to_vector<double>();
      all.insert(all.end(), v.begin(), v.end());
    }
    finals.push_back(all);
    ++k;
  }
  for (size_t i = 0; i < losses[0].size(); ++i) CHECK(losses[1][i] == Approx(losses[0][i]).epsilon(1e-4));
  for (size_t i = 0; i < finals[0].size(); ++i) CHECK(finals[1][i] == Approx(finals[0][i]).margin(1e-4));
}

TEST_CASE("checkpoint round trip is bit-exact and training resumes identically", "[nn][cuda]") {
  for (ag::Device dev : devices()) {
    INFO(dev.str());
    const std::string path = (std::filesystem::temp_directory_path() / "ampgrad_test_resume.safetensors").string();
    ag::manual_seed(1);
    ag::Tensor x = ag::randn({6, 1, 8, 8}).to(dev);
    ag::Tensor y = ag::tensor(std::vector<int64_t>{0, 1, 2, 2, 1, 0}).to(dev);
    auto run = [&](nn::Module& net, ag::optim::Optimizer& opt, ag::amp::GradScaler& scaler, int steps) {
      for (int i = 0; i < steps; ++i) {
        opt.zero_grad();
        scaler.scale(ag::cross_entropy(net(x), y)).backward();
        scaler.step(opt);
        scaler.update();
      }
    };
    auto a = tiny_cnn(dev);
    ag::optim::Adam oa(a->parameters(), ag::optim::AdamOptions(1e-2));
    ag::amp::GradScaler sa(ag::amp::GradScalerOptions().init_scale(256).growth_interval(2));
    ag::manual_seed(100);
    run(*a, oa, sa, 3);
    nn::save_checkpoint(path, {{"model", a->state_dict()}, {"optimizer", oa.state_dict()}, {"scaler", sa.state_dict()}});
    // A fresh model restored from the file.
    auto b = tiny_cnn(dev);
    ag::optim::Adam ob(b->parameters(), ag::optim::AdamOptions(1e-2));
    ag::amp::GradScaler sb;
    auto ckpt = nn::load_checkpoint(path);
    b->load_state_dict(ckpt.at("model"));
    ob.load_state_dict(ckpt.at("optimizer"));
    sb.scale(ag::zeros({}, ag::TensorOptions().device(dev)));
    sb.load_state_dict(ckpt.at("scaler"));
    for (auto& [n, t] : a->state_dict()) CHECK(t.to_vector<double>() == b->state_dict().at(n).to_vector<double>());
    ag::manual_seed(200);
    run(*a, oa, sa, 3);
    ag::manual_seed(200);
    run(*b, ob, sb, 3);
    for (auto& [n, t] : a->state_dict()) {
      INFO(n);
      CHECK(t.to_vector<double>() == b->state_dict().at(n).to_vector<double>());
    }
    CHECK(sa.get_scale() == sb.get_scale());
    std::filesystem::remove(path);
  }
}

TEST_CASE("nn: loss modules call their ops with their options", "[nn][loss]") {
  ag::manual_seed(11);
  const ag::Tensor x = ag::randn({4, 5}), y = ag::randn({4, 5}), lab = ag::sign(ag::randn({4, 5}));
  const ag::Tensor cls = ag::tensor(std::vector<int64_t>{0, 3, 4, 1});
  auto same = [](const ag::Tensor& a, const ag::Tensor& b) {
    REQUIRE(a.shape() == b.shape());
    CHECK(a.to_vector<float>() == b.to_vector<float>());
  };
  using R = ag::Reduction;
  same(ag::nn::L1Loss()(x, y), ag::l1_loss(x, y));
  same(ag::nn::L1Loss(R::None)(x, y), ag::l1_loss(x, y, R::None));
  same(ag::nn::MSELoss(R::Sum)(x, y), ag::mse_loss(x, y, R::Sum));
  same(ag::nn::SmoothL1Loss(R::Mean, 0.5)(x, y), ag::smooth_l1_loss(x, y, R::Mean, 0.5));
  same(ag::nn::HuberLoss(R::Sum, 0.7)(x, y), ag::huber_loss(x, y, R::Sum, 0.7));
  same(ag::nn::SoftMarginLoss()(x, lab), ag::soft_margin_loss(x, lab));
  same(ag::nn::KLDivLoss(R::BatchMean, true)(x, y), ag::kl_div(x, y, R::BatchMean, true));
  same(ag::nn::PoissonNLLLoss(true, true)(x, ag::abs(y)), ag::poisson_nll_loss(x, ag::abs(y), true, true));
  same(ag::nn::HingeEmbeddingLoss(0.5)(x, lab), ag::hinge_embedding_loss(x, lab, 0.5));
  same(ag::nn::BCEWithLogitsLoss(R::None)(x, ag::sigmoid(y)), ag::binary_cross_entropy_with_logits(x, ag::sigmoid(y), R::None));
  same(ag::nn::BCELoss()(ag::sigmoid(x), ag::sigmoid(y)), ag::binary_cross_entropy(ag::sigmoid(x), ag::sigmoid(y)));
  same(ag::nn::CrossEntropyLoss(-100, 0.1)(x, cls), ag::cross_entropy(x, cls, 0.1));
  same(ag::nn::NLLLoss()(ag::log_softmax(x, 1), cls), ag::nll_loss(ag::log_softmax(x, 1), cls));
  const ag::Tensor cw = ag::rand({5}) + 0.5;
  same(ag::nn::CrossEntropyLoss(cw, 1, R::Sum, 0.1)(x, cls), ag::cross_entropy(x, cls, cw, 1, R::Sum, 0.1));
  same(ag::nn::NLLLoss(cw, -100, R::None)(x, cls), ag::nll_loss(x, cls, cw, -100, R::None));
  CHECK(ag::nn::CrossEntropyLoss(cw).named_buffers().size() == 1);
  same(ag::nn::MultiLabelMarginLoss()(x, ag::full({4, 5}, -1, ag::kInt64)),
       ag::multilabel_margin_loss(x, ag::full({4, 5}, -1, ag::kInt64)));
  const ag::Tensor a = ag::randn({4}), b = ag::randn({4}), l4 = ag::sign(ag::randn({4}));
  same(ag::nn::MarginRankingLoss(0.3)(a, b, l4), ag::margin_ranking_loss(a, b, l4, 0.3));
  same(ag::nn::CosineEmbeddingLoss(0.1, R::None)(x, y, l4), ag::cosine_embedding_loss(x, y, l4, 0.1, R::None));
  same(ag::nn::TripletMarginLoss(1.0, 1, 1e-6, true)(x, y, -x), ag::triplet_margin_loss(x, y, -x, 1.0, 1, 1e-6, true));
  ag::nn::MultiMarginLoss mm(2, 0.5, ag::rand({5}));
  same(mm(x, cls), ag::multi_margin_loss(x, cls, 2, 0.5, mm.weight));
  CHECK(mm.state_dict().count("weight") == 1);  // a buffer, saved with the module
  CHECK(ag::nn::MultiMarginLoss().state_dict().empty());
}

TEST_CASE("nn: GroupNorm initializes and loads as PyTorch's", "[nn][norm]") {
  ag::nn::GroupNorm gn(2, 6);
  REQUIRE(gn.weight.shape() == ag::Shape{6});
  CHECK(gn.weight.to_vector<float>() == std::vector<float>(6, 1.f));
  CHECK(gn.bias.to_vector<float>() == std::vector<float>(6, 0.f));
  const auto sd = gn.state_dict();
  CHECK(sd.count("weight") == 1);
  CHECK(sd.count("bias") == 1);
  ag::manual_seed(2);
  const ag::Tensor x = ag::randn({3, 6, 2, 2});
  ag::Tensor y = gn(x);
  // Each (sample, group) of 3 channels x 4 positions has mean 0 and variance 1.
  std::vector<float> v = y.to_vector<float>();
  for (int n = 0; n < 3; ++n)
    for (int g = 0; g < 2; ++g) {
      double s = 0, ss = 0;
      for (int k = 0; k < 12; ++k) {
        const double e = v[n * 24 + g * 12 + k];
        s += e;
        ss += e * e;
      }
      CHECK(s / 12 == Approx(0).margin(1e-6));
      CHECK(ss / 12 == Approx(1).epsilon(1e-4));
    }
  ag::nn::GroupNorm plain(3, 6, 1e-5, false);
  CHECK(plain.parameters().empty());
  CHECK(plain(x).shape() == x.shape());
  CHECK_THROWS_WITH(ag::nn::GroupNorm(4, 6), Catch::Contains("GroupNorm: 6 channels do not split into 4 groups"));
}

TEST_CASE("nn: edge cases of the new ops, as PyTorch's", "[nn][loss][edge]") {
  // Hinge losses pass the gradient at the hinge (clamp_min's), so equal scores separate.
  ag::Tensor a = ag::zeros({3}).requires_grad_(true), b = ag::zeros({3}).requires_grad_(true);
  ag::margin_ranking_loss(a, b, ag::ones({3})).backward();
  CHECK(a.grad().to_vector<float>() == std::vector<float>(3, -1.f / 3));
  CHECK(b.grad().to_vector<float>() == std::vector<float>(3, 1.f / 3));
  ag::Tensor x1 = ag::tensor({1.f, 0.f}, {1, 2}).requires_grad_(true);
  ag::cosine_embedding_loss(x1, ag::tensor({0.f, 1.f}, {1, 2}), ag::tensor({-1.f}, {1})).backward();
  check_close(x1.grad(), {0, 1}, 1e-6, 1e-6);
  // triplet_margin_loss takes any margin, as PyTorch's.
  CHECK(ag::triplet_margin_loss(ag::ones({2, 3}), ag::ones({2, 3}), ag::zeros({2, 3}), 0.0).item<float>() == 0.f);
  // 0-dim gather and scatter_add.
  CHECK(ag::gather(ag::tensor(5.f), 0, ag::tensor(std::vector<int64_t>{0}, ag::Shape{})).item<float>() == 5.f);
  CHECK(ag::scatter_add(ag::tensor(5.f), 0, ag::tensor(std::vector<int64_t>{0}, ag::Shape{}), ag::tensor(2.f)).item<float>() == 7.f);
  // A Scalar lerp weight is not rounded to a 16-bit input's dtype (PyTorch: 0.8984375).
  const ag::Tensor l = ag::lerp(ag::zeros({1}, ag::kBFloat16), ag::full({1}, 3, ag::kBFloat16), 0.3);
  CHECK(l.dtype() == ag::kBFloat16);
  CHECK(l.to_vector<float>()[0] == 0.8984375f);
  // group_norm of empty inputs is empty.
  CHECK(ag::group_norm(ag::zeros({0, 4, 3}), 2).shape() == ag::Shape{0, 4, 3});
  CHECK(ag::group_norm(ag::zeros({2, 4, 0}), 2).shape() == ag::Shape{2, 4, 0});
  // index_put wants one dtype.
  CHECK_THROWS_WITH(ag::index_put(ag::zeros({3}), {ag::tensor(std::vector<int64_t>{0})}, ag::ones({1}, ag::kFloat64)),
                    Catch::Contains("index_put") && Catch::Contains("same dtype"));
  // chain_matmul of one matrix is a copy of it.
  CHECK(ag::chain_matmul({ag::ones({2, 3})}).shape() == ag::Shape{2, 3});
  // grid_sample, border padding: no grid gradient at or beyond the clipped edges (PyTorch's
  // clip_coordinates_set_grad). Image row 0 1 2 3, x = -1 (the left edge), 1 (the right), 0.2.
  ag::Tensor grid = ag::tensor({-1.f, 0.f, 1.f, 0.f, 0.2f, 0.f}, {1, 1, 3, 2}).requires_grad_(true);
  const ag::Tensor image = ag::tensor({0.f, 1.f, 2.f, 3.f, 0.f, 1.f, 2.f, 3.f}, {1, 1, 2, 4});
  ag::sum(ag::grid_sample(image, grid, ag::GridMode::bilinear, ag::GridPadding::border, true)).backward();
  check_close(grid.grad(), {0, 0, 0, 0, 1.5, 0}, 1e-6, 1e-6);
  // A NaN grid position samples nothing (no index is made of it): the output is NaN, on every device alike.
  const ag::Tensor nan_grid = ag::tensor({NAN, 0.f}, {1, 1, 1, 2});
  CHECK(std::isnan(ag::grid_sample(image, nan_grid).item<float>()));
}

TEST_CASE("nn: Embedding looks rows up as PyTorch's, with padding_idx, scale_grad_by_freq and from_pretrained",
          "[nn][embedding]") {
  ag::manual_seed(fresh_seed());
  // Initialized from N(0, 1), the padding row (negative: from the end) zeroed.
  ag::nn::EmbeddingOptions pad;
  pad.padding_idx = -2;
  ag::nn::Embedding big(500, 16, pad);
  const std::vector<double> w = big.weight.to_vector<double>();
  double mean = 0, sq = 0;
  for (double v : w) mean += v / static_cast<double>(w.size());
  for (double v : w) sq += (v - mean) * (v - mean) / static_cast<double>(w.size());
  CHECK(std::abs(mean) < 0.05);
  CHECK(std::abs(std::sqrt(sq) - 1) < 0.05);
  for (int c = 0; c < 16; ++c) CHECK(w[498 * 16 + c] == 0);
  CHECK(big.weight.requires_grad());
  CHECK(big.state_dict().count("weight") == 1);

  // Rows picked by a 2-D input; the gradient sums repeats, skips the padding row, and with
  // scale_grad_by_freq divides each row by its count.
  const ag::Tensor table = ag::tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f, 7.f, 8.f}, {4, 2});
  const ag::Tensor idx = ag::tensor(std::vector<int64_t>{3, 1, 3, 0, 3, 1}, {2, 3});
  for (bool scale : {false, true}) {
    INFO("scale_grad_by_freq " << scale);
    ag::nn::EmbeddingOptions o;
    o.padding_idx = 0;
    o.scale_grad_by_freq = scale;
    auto e = ag::nn::Embedding::from_pretrained(table, /*freeze=*/false, o);
    CHECK(e->weight.requires_grad());
    const ag::Tensor y = (*e)(idx);
    CHECK(y.shape() == ag::Shape{2, 3, 2});
    check_close(y, {7, 8, 3, 4, 7, 8, 1, 2, 7, 8, 3, 4}, 0, 0);  // the padding row's values are used as they are
    const ag::Tensor g = ag::tensor({1.f, 10.f, 2.f, 20.f, 3.f, 30.f, 4.f, 40.f, 5.f, 50.f, 6.f, 60.f}, {2, 3, 2});
    y.backward(g);
    // Row 3 at positions 0, 2, 4; row 1 at 1 and 5; row 0 (padding) at 3.
    if (!scale) check_close(e->weight.grad(), {0, 0, 8, 80, 0, 0, 9, 90}, 0, 0);
    else check_close(e->weight.grad(), {0, 0, 4, 40, 0, 0, 3, 30}, 1e-7, 1e-7);
  }
  // from_pretrained freezes by default, keeps the values and their dtype.
  auto frozen = ag::nn::Embedding::from_pretrained(table.to(ag::kFloat64));
  CHECK_FALSE(frozen->weight.requires_grad());
  CHECK(frozen->weight.dtype() == ag::kFloat64);
  check_close(frozen->weight, {1, 2, 3, 4, 5, 6, 7, 8}, 0, 0);
  CHECK_FALSE((*frozen)(idx).requires_grad());

  // Bad input names the op and what is wrong.
  CHECK_THROWS_WITH(ag::embedding(ag::tensor(std::vector<int64_t>{0, 4}), table),
                    Catch::Contains("embedding: index 4 is out of range [0, 4)") && Catch::Contains("position 1"));
  CHECK_THROWS_WITH(ag::embedding(ag::tensor({0.f, 1.f}), table),
                    Catch::StartsWith("embedding: input (the indices) must be int64 or int32, got float32 [2]"));
  CHECK_THROWS_WITH(ag::embedding(idx, ag::ones({4})), Catch::StartsWith("embedding: weight must be 2-D"));
  CHECK_THROWS_WITH(ag::embedding(idx, table, 4), Catch::StartsWith("embedding: padding_idx 4 must be within [-4, 4)"));
  ag::nn::EmbeddingOptions bad_pad;
  bad_pad.padding_idx = 10;
  CHECK_THROWS_WITH(ag::nn::Embedding(4, 2, bad_pad), Catch::Contains("padding_idx 10"));
  // int32 indices work as int64 ones.
  check_close(ag::embedding(ag::tensor(std::vector<int64_t>{2, 0}).to(ag::kInt32), table), {5, 6, 1, 2}, 0, 0);
}

TEST_CASE("cuda: embedding's backward is deterministic and sums as the CPU does", "[cuda][embedding]") {
  if (skip_without_cuda()) return;
  ag::manual_seed(fresh_seed());
  // A language model's batch: a few rows picked thousands of times (where atomic adds would land
  // in a different order on every run). Note [Embedding backward by scan] in cuda/embedding.cu:
  // the first four cases scan the index (64 columns: 2 warps, 8 passes of 1024 positions; 300
  // columns: two column tiles, the second partial, one pass of 4096 partly used; 5 columns:
  // one warp, 9 passes of 512; 256 columns: 8 warps, 3 passes of 4096, the last partial), the
  // last sorts. float64 sums in double on both devices.
  struct Case {
    int64_t num, dim;
    ag::Shape index;
    double picks;  // indices drawn from [0, picks)
  };
  const Case cases[] = {{50, 64, {64, 128}, 6}, {300, 300, {16, 40}, 300}, {7, 5, {3, 1500}, 7},
                        {40, 256, {10000}, 40}, {5000, 48, {64, 64}, 5000}};
  for (const Case& k : cases) {
    const ag::Tensor idx = (ag::rand(k.index) * k.picks).to(ag::kInt64);
    for (ag::DType dt : {ag::kFloat32, ag::kFloat16, ag::kBFloat16, ag::kFloat64}) {
      INFO(ag::dtype_name(dt) << " table [" << k.num << ", " << k.dim << "] index " << ag::shape_str(k.index));
      ag::Shape gs = k.index;
      gs.push_back(k.dim);
      const ag::Tensor table = ag::randn({k.num, k.dim}).to(dt), g = ag::randn(gs).to(dt);
      auto grad_on = [&](ag::Device d, bool scale) {
        const ag::Tensor w = table.to(d).detach().requires_grad_(true);  // a fresh leaf (to(kCPU) is table itself)
        ag::embedding(idx.to(d), w, 3, scale).backward(g.to(d));
        return w.grad().to(ag::kFloat64).to_vector<double>();
      };
      for (bool scale : {false, true}) {
        const std::vector<double> a = grad_on(ag::Device(ag::kCUDA), scale), b = grad_on(ag::Device(ag::kCUDA), scale),
                                  cpu = grad_on(ag::kCPU, scale);
        CHECK(a == b);  // bitwise, run to run
        CHECK(a == cpu);  // the same sums in the same order, rounded once
        double norm = 0;
        for (double x : a) norm += std::abs(x);
        CHECK(norm > 0);  // not all zero (row 3, padding_idx, is)
      }
    }
  }
}

TEST_CASE("nn: PReLU initializes as PyTorch's and learns its slope", "[nn][prelu]") {
  ag::nn::PReLU one, per_channel(3, 0.1);
  CHECK(one.weight.to_vector<float>() == std::vector<float>{0.25f});
  CHECK(per_channel.weight.to_vector<float>() == std::vector<float>(3, 0.1f));
  CHECK(per_channel.state_dict().count("weight") == 1);
  const ag::Tensor x = ag::tensor({-2.f, 1.f, -4.f, 3.f, -1.f, 2.f}, {1, 3, 2});
  check_close(per_channel(x), {-0.2, 1, -0.4, 3, -0.1, 2}, 1e-7, 1e-7);
  ag::sum(per_channel(x)).backward();
  check_close(per_channel.weight.grad(), {-2, -4, -1}, 0, 0);  // the negative inputs, per channel
  CHECK_THROWS_WITH(ag::prelu(x, ag::ones({2})), Catch::Contains("prelu") && Catch::Contains("1 or 3"));
}

TEST_CASE("layer_norm's fused CUDA kernels match the float64 composite, forward and backward", "[nn][cuda]") {
  if (skip_without_cuda()) return;
  // Note [Fused layer norm] in ops/norm.cpp: float32 and float64 on CUDA, against the CPU's
  // composite in float64. Note [Layer norm kernels] in cuda/layer_norm.cu: rows of 7 to 1000 take
  // the register kernels (1, 2, 4, 8, 16 and 32 elements a lane; float64 up to 512), 1500 the
  // loop kernels; 4100 rows make each warp of the register backward take several rows and the
  // loop backward several 256-row chunks and a partial one. x_grad false: the weight's
  // gradients alone.
  ag::manual_seed(31);
  struct Case {
    ag::Shape x, norm;
    bool weight, bias;
    bool x_grad = true;
  };
  const Case cases[] = {{{3, 5, 96}, {96}, true, true},
                        {{4, 7, 3, 40}, {3, 40}, true, false},
                        {{4100, 33}, {33}, false, true},
                        {{2, 2050, 256}, {256}, true, true},
                        {{9, 7}, {7}, true, true},
                        {{17, 512}, {512}, true, true},
                        {{300, 1000}, {1000}, true, true},
                        {{70, 1500}, {1500}, true, true},
                        {{600, 256}, {256}, true, true, false}};
  const ag::Device cuda(ag::kCUDA);
  for (ag::DType dt : {ag::kFloat32, ag::kFloat64}) {
    for (const Case& c : cases) {
      CAPTURE(ag::dtype_name(dt), ag::shape_str(c.x));
      const ag::Tensor x64 = ag::randn(c.x, ag::TensorOptions(ag::kFloat64)) * 3.0 + 1.5;
      const ag::Tensor w64 = c.weight ? ag::randn(c.norm, ag::TensorOptions(ag::kFloat64)) : ag::Tensor();
      const ag::Tensor b64 = c.bias ? ag::randn(c.norm, ag::TensorOptions(ag::kFloat64)) : ag::Tensor();
      const ag::Tensor g64 = ag::randn(c.x, ag::TensorOptions(ag::kFloat64));
      auto leaf = [&](const ag::Tensor& t, ag::Device d, ag::DType type) {
        return t.defined() ? t.to(d).to(type).detach().requires_grad_(true) : ag::Tensor();
      };
      ag::Tensor xr = leaf(x64, ag::kCPU, ag::kFloat64), wr = leaf(w64, ag::kCPU, ag::kFloat64),
                 br = leaf(b64, ag::kCPU, ag::kFloat64);
      ag::Tensor ref = ag::layer_norm(xr, c.norm, wr, br, 1e-5);
      ref.backward(g64);
      ag::Tensor xc = leaf(x64, cuda, dt), wc = leaf(w64, cuda, dt), bc = leaf(b64, cuda, dt);
      if (!c.x_grad) xc = x64.to(cuda).to(dt);
      ag::Tensor out = ag::layer_norm(xc, c.norm, wc, bc, 1e-5);
      CHECK(out.dtype() == dt);
      out.backward(g64.to(cuda).to(dt));
      const double tol = dt == ag::kFloat32 ? 2e-5 : 1e-12;
      check_close(out.to(ag::kCPU), ref.to_vector<double>(), tol, tol);
      if (!c.x_grad) {
        CHECK_FALSE(xc.grad().defined());
        check_close(wc.grad().to(ag::kCPU), wr.grad().to_vector<double>(), tol * 10, tol * 10);
        check_close(bc.grad().to(ag::kCPU), br.grad().to_vector<double>(), tol * 10, tol * 10);
        continue;
      }
      check_close(xc.grad().to(ag::kCPU), xr.grad().to_vector<double>(), tol, tol);
      if (c.weight) check_close(wc.grad().to(ag::kCPU), wr.grad().to_vector<double>(), tol * 10, tol * 10);
      if (c.bias) check_close(bc.grad().to(ag::kCPU), br.grad().to_vector<double>(), tol * 10, tol * 10);
      // Deterministic: the same bits again.
      ag::Tensor xc2 = leaf(x64, cuda, dt), wc2 = leaf(w64, cuda, dt), bc2 = leaf(b64, cuda, dt);
      ag::layer_norm(xc2, c.norm, wc2, bc2, 1e-5).backward(g64.to(cuda).to(dt));
      if (c.weight) CHECK(wc2.grad().to(ag::kCPU).to_vector<double>() == wc.grad().to(ag::kCPU).to_vector<double>());
      CHECK(xc2.grad().to(ag::kCPU).to_vector<double>() == xc.grad().to(ag::kCPU).to_vector<double>());
    }
  }
}
