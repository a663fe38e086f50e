// The fast CPU kernels (cpu/, Note [Fast CPU kernels] in core/dispatch.h) against the
// reference loops they stand in for: the same inputs through the same ops, forward and
// backward, once with each, in float32, bfloat16 and float16 (float64 where it matters), odd
// sizes, non-contiguous views and the layouts the fast path hands back to the reference.
#include "common.h"

#include <functional>
#include <thread>

#include <ampgrad/core/kernels.h>
#include <ampgrad/cpu/onednn.h>
#include <ampgrad/cpu/parallel.h>
#include <ampgrad/optim/adam.h>
#include <ampgrad/optim/sgd.h>

namespace {

using Outputs = std::vector<ag::Tensor>;

// Restores the fast kernels however a case ends.
struct FastOn {
  ~FastOn() { ag::set_fast_cpu_kernels(true); }
};

// fn(), once with the fast kernels and once with the reference loops.
std::pair<Outputs, Outputs> fast_and_reference(const std::function<Outputs()>& fn) {
  FastOn restore;
  ag::set_fast_cpu_kernels(true);
  Outputs fast = fn();
  ag::set_fast_cpu_kernels(false);
  Outputs ref = fn();
  return {fast, ref};
}

// Relative error of the worst element against the largest reference value: the fast path
// sums in another order (and oneDNN in blocks), so agreement is to rounding, not bits.
double tolerance(ag::DType d) {
  switch (d) {
    case ag::kFloat32: return 2e-5;
    case ag::kFloat64: return 1e-12;
    case ag::kFloat16: return 4e-3;
    default: return 2.5e-2;  // bfloat16: a couple of its ulps
  }
}

void check_agree(const Outputs& fast, const Outputs& ref, double tol, const std::string& what) {
  REQUIRE(fast.size() == ref.size());
  for (size_t i = 0; i < fast.size(); ++i) {
    INFO(what << ", output " << i);
    REQUIRE(fast[i].defined() == ref[i].defined());
    if (!fast[i].defined()) continue;
    REQUIRE(fast[i].shape() == ref[i].shape());
    REQUIRE(fast[i].dtype() == ref[i].dtype());
    const std::vector<double> f = fast[i].to_vector<double>(), r = ref[i].to_vector<double>();
    double scale = 0, worst = 0;
    size_t at = 0;
    for (double v : r) scale = std::max(scale, std::abs(v));
    REQUIRE(scale > 0);  // never compare zeros
    for (size_t j = 0; j < f.size(); ++j) {
      const double e = std::isnan(r[j]) ? (std::isnan(f[j]) ? 0.0 : INFINITY) : std::abs(f[j] - r[j]);
      if (e > worst) {
        worst = e;
        at = j;
      }
    }
    INFO("worst element " << at << ": fast " << f[at] << ", reference " << r[at] << ", scale " << scale);
    CHECK(worst <= tol * scale);
  }
}

// A leaf of `shape` from a fixed seed, so both runs see the same values.
ag::Tensor input(const ag::Shape& shape, ag::DType d, uint64_t seed, bool grad = true) {
  ag::Generator gen(seed);
  ag::Tensor t = ag::randn(shape, gen).to(d);
  if (grad) t.requires_grad_(true);
  return t;
}

// Runs out = f(leaves...) and out.backward(g) for a fixed random g; returns out and the grads.
Outputs forward_backward(const std::vector<ag::Tensor>& leaves, const std::function<ag::Tensor()>& f, uint64_t seed) {
  ag::Tensor out = f();
  ag::Generator gen(seed);
  out.backward(ag::randn(out.shape(), gen).to(out.dtype()));
  Outputs o = {out.detach()};
  for (const ag::Tensor& l : leaves) o.push_back(l.grad());
  return o;
}

const ag::DType kDtypes[] = {ag::kFloat32, ag::kBFloat16, ag::kFloat16};

}  // namespace

TEST_CASE("fast CPU kernels are registered and the switch reaches them", "[cpu_fast]") {
  CHECK(ag::fast_cpu_kernels());
  for (const char* name : {"conv_forward", "gemm", "batch_norm_stats", "max_pool2d_forward", "unary", "reduce"}) {
    INFO(name);
    bool has = false;
    if (std::string(name) == "conv_forward") has = ag::kernel::conv_forward.has_fast_cpu();
    if (std::string(name) == "gemm") has = ag::kernel::gemm.has_fast_cpu();
    if (std::string(name) == "batch_norm_stats") has = ag::kernel::batch_norm_stats.has_fast_cpu();
    if (std::string(name) == "max_pool2d_forward") has = ag::kernel::max_pool2d_forward.has_fast_cpu();
    if (std::string(name) == "unary") has = ag::kernel::unary.has_fast_cpu();
    if (std::string(name) == "reduce") has = ag::kernel::reduce.has_fast_cpu();
    CHECK(has);
  }
  CHECK(ag::kernel_registration_clashes().empty());
  CHECK(ag::get_num_threads() >= 1);
  CHECK_THROWS_WITH_SUBSTR(ag::set_num_threads(0), "set_num_threads");
}

TEST_CASE("oneDNN convolutions match the reference", "[cpu_fast]") {
  if (!ag::cpu::onednn::available())
    WARN("oneDNN (libdnnl.so.2) is not installed here: the convolutions compare the reference with itself");
  struct Case {
    const char* name;
    ag::Shape x, w;
    std::array<int64_t, 2> stride, padding, dilation;
    int64_t groups;
    bool bias;
  };
  const Case cases[] = {{"3x3 same, bias", {3, 5, 11, 9}, {7, 5, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true},
                        {"stride 2, dilation 2", {2, 4, 13, 10}, {6, 4, 3, 2}, {2, 2}, {0, 1}, {2, 2}, 1, false},
                        {"groups 2", {2, 6, 9, 9}, {4, 3, 3, 3}, {1, 2}, {1, 0}, {1, 1}, 2, true},
                        {"one channel (the CNN's first layer)", {4, 1, 12, 12}, {8, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true},
                        {"1x1 stride 2 of an even size (last row unread)", {2, 5, 8, 10}, {6, 5, 1, 1}, {2, 2}, {0, 0}, {1, 1}, 1, true},
                        {"2x2 stride 2 of an odd size", {2, 4, 9, 7}, {3, 4, 2, 2}, {2, 2}, {0, 0}, {1, 1}, 1, false},
                        {"depthwise", {2, 6, 9, 8}, {6, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 6, true}};
  for (ag::DType d : kDtypes)
    for (const Case& c : cases)
      for (int layout = 0; layout < 3; ++layout) {  // contiguous, channels-last, a transposed view
        const std::string what = fmt::format("{} {} layout {}", c.name, ag::dtype_name(d), layout);
        const size_t built = ag::cpu::onednn::primitives_built();
        auto [fast, ref] = fast_and_reference([&] {
          ag::Tensor x = input(c.x, d, 1), w = input(c.w, d, 2), b = c.bias ? input({c.w[0]}, d, 3) : ag::Tensor();
          ag::Tensor xin = x;
          if (layout == 1) xin = x.to_channels_last();
          if (layout == 2) xin = x.transpose(2, 3).contiguous().transpose(2, 3);
          std::vector<ag::Tensor> leaves = {x, w};
          if (b.defined()) leaves.push_back(b);
          return forward_backward(leaves, [&] { return ag::conv2d(xin, w, b, c.stride, c.padding, c.dilation, c.groups); }, 4);
        });
        check_agree(fast, ref, tolerance(d) * 2, what);
        // oneDNN's bfloat16 convolutions need AVX-512 (avx512_core); on an AVX2-only CPU it has
        // none, and the reference kernels run (an AMD EPYC with AVX2 seen).
        const bool has_primitive = d == ag::kFloat32 || (d == ag::kBFloat16 && __builtin_cpu_supports("avx512f"));
        if (ag::cpu::onednn::available() && has_primitive && layout == 0) {
          INFO(what << ": built no oneDNN primitive");
          CHECK(ag::cpu::onednn::primitives_built() > built);
        }
      }
}

TEST_CASE("fast convolutions: 3-D, transposed (the reference's cases) and float64", "[cpu_fast]") {
  for (ag::DType d : {ag::kFloat32, ag::kBFloat16}) {
    auto [fast, ref] = fast_and_reference([&] {
      ag::Tensor x = input({2, 3, 5, 6, 7}, d, 11), w = input({4, 3, 3, 3, 2}, d, 12), b = input({4}, d, 13);
      return forward_backward({x, w, b}, [&] { return ag::conv3d(x, w, b, {1, 2, 1}, {1, 0, 1}); }, 14);
    });
    check_agree(fast, ref, tolerance(d) * 2, "conv3d");
    for (int64_t pad : {0, 1})
      for (int64_t out_pad : {0, 1}) {  // output_padding > padding: a last row no weight reaches
        auto [f2, r2] = fast_and_reference([&] {
          ag::Tensor x = input({2, 4, 7, 6}, d, 21), w = input({4, 3, 3, 3}, d, 22), b = input({3}, d, 23);
          return forward_backward(
              {x, w, b}, [&] { return ag::conv_transpose2d(x, w, b, {2, 2}, {pad, pad}, {out_pad, out_pad}); }, 24);
        });
        check_agree(f2, r2, tolerance(d) * 2, fmt::format("conv_transpose2d padding {} output_padding {}", pad, out_pad));
      }
  }
  auto [fast, ref] = fast_and_reference([&] {
    ag::Tensor x = input({2, 3, 8, 8}, ag::kFloat64, 31), w = input({5, 3, 3, 3}, ag::kFloat64, 32);
    return forward_backward({x, w}, [&] { return ag::conv2d(x, w, ag::Tensor(), {1, 1}, {1, 1}); }, 33);
  });
  check_agree(fast, ref, tolerance(ag::kFloat64), "conv2d float64");
}

TEST_CASE("oneDNN GEMMs match the reference", "[cpu_fast]") {
  for (ag::DType d : kDtypes) {
    const std::string dn(ag::dtype_name(d));
    auto [f1, r1] = fast_and_reference([&] {
      ag::Tensor x = input({7, 13}, d, 41), w = input({5, 13}, d, 42), b = input({5}, d, 43);
      return forward_backward({x, w, b}, [&] { return ag::linear(x, w, b); }, 44);
    });
    check_agree(f1, r1, tolerance(d) * 2, "linear " + dn);
    auto [f2, r2] = fast_and_reference([&] {
      ag::Tensor a = input({3, 9, 7}, d, 51), b = input({3, 11, 9}, d, 52);
      // b transposed: a strided operand
      return forward_backward({a, b}, [&] { return ag::bmm(a.transpose(1, 2), b.transpose(1, 2)); }, 53);
    });
    check_agree(f2, r2, tolerance(d) * 2, "bmm of transposed views " + dn);
    auto [f3, r3] = fast_and_reference([&] {
      ag::Tensor a = input({4, 6, 10}, d, 61), b = input({10, 3}, d, 62);
      return forward_backward({a, b}, [&] { return ag::matmul(a, b); }, 63);  // b broadcast over the batch
    });
    check_agree(f3, r3, tolerance(d) * 2, "broadcast matmul " + dn);
  }
}

TEST_CASE("fast GEMMs: alpha and beta, expanded operands", "[cpu_fast]") {
  for (ag::DType d : kDtypes) {
    const std::string dn(ag::dtype_name(d));
    auto [f1, r1] = fast_and_reference([&] {
      ag::Tensor c = input({9, 6}, d, 161), a = input({9, 5}, d, 162), b = input({5, 6}, d, 163);
      return forward_backward({c, a, b}, [&] { return ag::addmm(c, a, b, 0.25, 0.5); }, 164);
    });
    check_agree(f1, r1, tolerance(d) * 2, "addmm beta 0.25 alpha 0.5 " + dn);
    // A mean over the batch: the linear's output gradient is expanded (stride 0), and so are
    // the GEMM operands of its backward.
    auto [f2, r2] = fast_and_reference([&] {
      ag::Tensor x = input({12, 20}, d, 171), w = input({7, 20}, d, 172), b = input({7}, d, 173);
      return forward_backward({x, w, b}, [&] { return ag::mean(ag::linear(x, w, b), {0}); }, 174);
    });
    check_agree(f2, r2, tolerance(d) * 2, "linear under a mean " + dn);
  }
}

TEST_CASE("fast CPU kernels: empty convolutions and sums keep the reference's zeros", "[cpu_fast]") {
  for (ag::DType d : {ag::kFloat32, ag::kBFloat16}) {
    ag::Tensor x = ag::zeros({0, 3, 8, 8}).to(d).requires_grad_(true), w = input({4, 3, 3, 3}, d, 181);
    ag::Tensor out = ag::conv2d(x, w, ag::Tensor(), {1, 1}, {1, 1});
    CHECK(out.shape() == ag::Shape{0, 4, 8, 8});
    out.backward(ag::zeros({0, 4, 8, 8}).to(d));
    REQUIRE(w.grad().defined());
    for (double v : w.grad().to_vector<double>()) CHECK(v == 0.0);
    ag::Tensor s = ag::sum(ag::zeros({0, 5, 3, 2}).to(d), {0, 2, 3});
    CHECK(s.shape() == ag::Shape{5});
    for (double v : s.to_vector<double>()) CHECK(v == 0.0);
    for (double v : ag::mean(ag::zeros({0, 5, 3, 2}).to(d), {0, 2, 3}).to_vector<double>()) CHECK(std::isnan(v));
  }
}

TEST_CASE("two-pass sums around a kept block: keepdim, integers, 16-bit", "[cpu_fast]") {
  for (ag::DType d : kDtypes) {
    auto [f, r] = fast_and_reference([&] {
      ag::Tensor x = input({4, 3, 5, 6}, d, 191, false);
      return Outputs{ag::sum(x, {0, 2, 3}, true), ag::mean(x, {0, 3}, true), ag::sum(x, {0, 1, 3})};
    });
    check_agree(f, r, tolerance(d), std::string("around sums ") + std::string(ag::dtype_name(d)));
  }
  ag::Tensor xi = (input({4, 3, 5}, ag::kFloat32, 192, false) * 10.0).to(ag::kInt64);
  const ag::Tensor si = ag::sum(xi, {0, 2});
  CHECK(si.dtype() == ag::kInt64);
  const std::vector<int64_t> v = xi.to_vector<int64_t>(), got = si.to_vector<int64_t>();
  for (int64_t c = 0; c < 3; ++c) {
    int64_t want = 0;
    for (int64_t a = 0; a < 4; ++a)
      for (int64_t b = 0; b < 5; ++b) want += v[(a * 3 + c) * 5 + b];
    CHECK(got[c] == want);
  }
}

TEST_CASE("fast batch norm matches the reference, training and eval", "[cpu_fast]") {
  for (ag::DType d : kDtypes)
    for (bool training : {true, false}) {
      Outputs stats_fast, stats_ref;
      auto run = [&](Outputs& stats) {
        ag::Tensor x = input({3, 5, 7, 6}, d, 71), w = input({5}, ag::kFloat32, 72), b = input({5}, ag::kFloat32, 73);
        ag::Tensor rm = input({5}, ag::kFloat32, 74, false), rv = ag::exp(input({5}, ag::kFloat32, 75, false));
        Outputs o = forward_backward({x, w, b}, [&] { return ag::batch_norm(x, rm, rv, w, b, training, 0.1, 1e-5); }, 76);
        stats = {rm, rv};
        return o;
      };
      FastOn restore;
      ag::set_fast_cpu_kernels(true);
      Outputs fast = run(stats_fast);
      ag::set_fast_cpu_kernels(false);
      Outputs ref = run(stats_ref);
      const std::string what = fmt::format("batch_norm {} training {}", ag::dtype_name(d), training);
      check_agree(fast, ref, tolerance(d) * 2, what);
      check_agree(stats_fast, stats_ref, tolerance(ag::kFloat32), what + " running stats");
    }
}

TEST_CASE("fast max pooling matches the reference, NaN and overlapping windows included", "[cpu_fast]") {
  struct Case {
    const char* name;
    std::array<int64_t, 2> k, s, p, dil;
  };
  const Case cases[] = {{"2x2", {2, 2}, {2, 2}, {0, 0}, {1, 1}},
                        {"3x3 stride 2 pad 1 (overlap)", {3, 3}, {2, 2}, {1, 1}, {1, 1}},
                        {"3x2 stride 1 dilation 2", {3, 2}, {1, 1}, {0, 1}, {2, 1}},
                        {"3x3 stride 2, no padding (overlap)", {3, 3}, {2, 2}, {0, 0}, {1, 1}}};
  for (ag::DType d : kDtypes)
    for (const Case& c : cases)
      for (bool with_nan : {false, true}) {
        auto [fast, ref] = fast_and_reference([&] {
          ag::Tensor x = input({3, 4, 11, 10}, d, 81, false);
          if (with_nan) {
            x = x.clone();
            ag::Tensor xf = x.to(ag::kFloat32);
            static_cast<float*>(xf.data_ptr())[5] = NAN;
            static_cast<float*>(xf.data_ptr())[123] = NAN;
            x = xf.to(d);
          }
          x.requires_grad_(true);
          return forward_backward({x}, [&] { return ag::max_pool2d(x, c.k, c.s, c.p, c.dil); }, 82);
        });
        check_agree(fast, ref, tolerance(d), fmt::format("max_pool2d {} {} nan {}", c.name, ag::dtype_name(d), with_nan));
      }
}

TEST_CASE("fast elementwise kernels, copies and sums match the reference", "[cpu_fast]") {
  for (ag::DType d : {ag::kFloat32, ag::kBFloat16, ag::kFloat16, ag::kFloat64}) {
    const std::string dn(ag::dtype_name(d));
    for (bool strided : {false, true}) {
      auto [fast, ref] = fast_and_reference([&] {
        ag::Tensor x = input({37, 29}, d, 91), y = input({37, 29}, d, 92);
        ag::Tensor xv = strided ? x.transpose(0, 1) : x, yv = strided ? y.transpose(0, 1) : y;
        return forward_backward({x, y}, [&] {
          return ag::tanh(xv) * ag::sigmoid(yv) + ag::relu(xv) / (ag::exp(yv) + 1.0) - ag::gelu(xv) * 2.0;
        }, 93);
      });
      check_agree(fast, ref, tolerance(d) * 4, fmt::format("pointwise {} strided {}", dn, strided));
    }
    auto [fs, rs] = fast_and_reference([&] {
      ag::Tensor x = input({6, 5, 9, 7}, d, 101);
      Outputs o = forward_backward({x}, [&] { return ag::sum(x, {0, 2, 3}); }, 102);  // a bias gradient's sum
      o.push_back(ag::mean(x.detach(), {0, 2, 3}));
      o.push_back(ag::sum(x.detach(), {1}));
      o.push_back(ag::mean(x.detach(), {3}, true));
      o.push_back(ag::sum(x.detach()));
      return o;
    });
    check_agree(fs, rs, tolerance(d), "sums " + dn);
    for (ag::DType to : {ag::kFloat32, ag::kBFloat16, ag::kFloat16, ag::kFloat64}) {
      auto [fc, rc] = fast_and_reference([&] {
        const ag::Tensor rows = input({5, 1, 7}, d, 112, false), cols = input({4, 6}, d, 113, false);
        return Outputs{input({1001}, d, 111, false).to(to), ag::expand(rows, {5, 3, 7}).contiguous().to(to),
                       cols.transpose(0, 1).contiguous().to(to)};  // broadcast rows, a transposed copy
      });
      check_agree(fc, rc, 0.0, fmt::format("copy {} -> {}", dn, ag::dtype_name(to)));  // one rounding: exact
    }
  }
  // Dropout's mask comes from a counter-based hash: the same bits on both paths.
  auto [fd, rd] = fast_and_reference([&] {
    ag::manual_seed(5);
    return Outputs{ag::dropout(ag::ones({4, 1000}), 0.3, true)};
  });
  check_agree(fd, rd, 0.0, "dropout");
}

TEST_CASE("fast softmax, log_softmax and cross-entropy match the reference", "[cpu_fast]") {
  for (ag::DType d : kDtypes) {
    const std::string dn(ag::dtype_name(d));
    auto [fast, ref] = fast_and_reference([&] {
      ag::Tensor x = input({13, 37}, d, 141), y = input({5, 7, 6}, d, 142);
      Outputs o = forward_backward({x}, [&] { return ag::softmax(x, 1) * 3.0 + ag::log_softmax(x, -1); }, 143);
      Outputs m = forward_backward({y}, [&] { return ag::softmax(y, 1); }, 144);  // a middle dim: the reference
      o.insert(o.end(), m.begin(), m.end());
      return o;
    });
    check_agree(fast, ref, tolerance(d) * 2, "softmax " + dn);
    auto [fc, rc] = fast_and_reference([&] {
      ag::Tensor x = input({17, 11}, d, 151);
      ag::Tensor t = ag::tensor(std::vector<int64_t>{0, 3, 10, -100, 2, 5, 5, 1, 9, 0, 4, 6, 7, 8, -100, 2, 3});
      return forward_backward({x}, [&] { return ag::cross_entropy(x, t); }, 152);  // ignore_index -100
    });
    check_agree(fc, rc, tolerance(d) * 2, "cross_entropy " + dn);
  }
}

TEST_CASE("fast batch norm keeps its precision on a large plane of large values", "[cpu_fast]") {
  auto [fast, ref] = fast_and_reference([&] {
    ag::Tensor x = (input({2, 3, 96, 96}, ag::kFloat32, 201, false) + 1000.0).requires_grad_(true);
    ag::Tensor rm = ag::zeros({3}), rv = ag::ones({3});
    return forward_backward({x}, [&] { return ag::batch_norm(x, rm, rv, ag::Tensor(), ag::Tensor(), true); }, 202);
  });
  check_agree(fast, ref, 1e-4, "batch_norm around 1000");
}

TEST_CASE("oneDNN primitives: two threads at once, and a changed thread count", "[cpu_fast]") {
  auto conv = [](int seed) {
    ag::Tensor x = input({4, 8, 12, 12}, ag::kBFloat16, 211, false), w = input({16, 8, 3, 3}, ag::kBFloat16, 212);
    ag::Tensor y = ag::linear(input({6, 30}, ag::kFloat32, 213 + seed, false), input({5, 30}, ag::kFloat32, 214, false));
    return Outputs{ag::conv2d(x, w.detach(), ag::Tensor(), {1, 1}, {1, 1}), y};
  };
  const Outputs alone = conv(0);
  Outputs a, b;
  std::thread t1([&] { a = conv(0); }), t2([&] { b = conv(0); });
  t1.join();
  t2.join();
  check_agree(a, alone, 0.0, "thread 1 against alone");
  check_agree(b, alone, 0.0, "thread 2 against alone");
  const int threads = ag::get_num_threads();
  ag::set_num_threads(1);
  const Outputs one = conv(0);
  ag::set_num_threads(threads);
  check_agree(one, alone, tolerance(ag::kBFloat16), "1 thread against the team");
}

TEST_CASE("fast CPU kernels do not depend on the thread count where they sum themselves", "[cpu_fast]") {
  const int threads = ag::get_num_threads();
  auto run = [&](int n) {
    ag::set_num_threads(n);
    ag::Tensor x = input({8, 16, 14, 14}, ag::kFloat32, 121), w = input({16}, ag::kFloat32, 122),
               b = input({16}, ag::kFloat32, 123);
    ag::Tensor rm = ag::zeros({16}), rv = ag::ones({16});
    Outputs o = forward_backward({x, w, b}, [&] {
      return ag::max_pool2d(ag::relu(ag::batch_norm(x, rm, rv, w, b, true)), {2, 2}) * 1.5;
    }, 124);
    o.push_back(ag::sum(x.detach(), {0, 2, 3}));
    return o;
  };
  const Outputs one = run(1), many = run(std::max(2, threads));
  ag::set_num_threads(threads);
  check_agree(one, many, 0.0, "1 thread against several");
}

TEST_CASE("fast optimizer steps match the reference", "[cpu_fast]") {
  // Each run: three steps on the same fixed gradients; float32 parameters, and bfloat16 ones
  // with float32 master weights (the step writes the 16-bit copies too).
  auto run = [](const std::string& which, ag::DType d) {
    std::vector<ag::Tensor> ps = {input({33, 17}, d, 131), input({17}, d, 132)};
    const std::vector<ag::Tensor> gs = {input({33, 17}, d, 133, false), input({17}, d, 134, false)};
    std::unique_ptr<ag::optim::Optimizer> opt;
    if (which == "sgd")
      opt = std::make_unique<ag::optim::SGD>(ps, ag::optim::SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(0.01));
    else if (which == "sgd plain")  // the fast path's float-math loop
      opt = std::make_unique<ag::optim::SGD>(ps, ag::optim::SGDOptions(0.1).momentum(0.9));
    else if (which == "adam")  // amsgrad: the general loop
      opt = std::make_unique<ag::optim::Adam>(ps, ag::optim::AdamOptions(0.01).amsgrad(true).weight_decay(0.01));
    else if (which == "adam plain")  // the common loop, L2 weight decay (AdamW: the decoupled one)
      opt = std::make_unique<ag::optim::Adam>(ps, ag::optim::AdamOptions(0.01).weight_decay(0.01));
    else
      opt = std::make_unique<ag::optim::AdamW>(ps, ag::optim::AdamWOptions(0.01));
    if (d != ag::kFloat32) opt->use_master_weights();
    for (int step = 0; step < 3; ++step) {
      opt->zero_grad();
      (ag::sum(ps[0] * gs[0]) + ag::sum(ps[1] * gs[1] * (step + 1.0))).backward();
      opt->step();
    }
    return Outputs{ps[0].detach(), ps[1].detach()};
  };
  // Equal bits, except plain SGD momentum in float math (one float rounding per operation
  // against the reference's double; a 16-bit copy may then round the other way).
  for (const char* which : {"sgd", "sgd plain", "adam", "adam plain", "adamw"})
    for (ag::DType d : {ag::kFloat32, ag::kBFloat16, ag::kFloat16}) {
      auto [fast, ref] = fast_and_reference([&] { return run(which, d); });
      const bool plain = std::string(which) == "sgd plain";
      check_agree(fast, ref, plain ? (d == ag::kFloat32 ? 1e-6 : eps_of(d)) : 0.0,
                  fmt::format("{} {}", which, ag::dtype_name(d)));
    }
}
