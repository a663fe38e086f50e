// add_layer_norm (Note [Add and layer norm] in ops/norm.cpp): the residual add and the layer
// norm after it as one op, against the pair of ops it stands for: values, gradients and dtypes
// on the CPU (where it is that pair), and the fused CUDA kernel's bits against the pair's.
#include <optional>
#include <tuple>

#include "common.h"

namespace {

const ag::Device kGpu(ag::kCUDA);

std::vector<double> values(const ag::Tensor& t) { return t.to(ag::kCPU).to_vector<double>(); }

}  // namespace

TEST_CASE("add_layer_norm is the residual add and layer_norm: values, gradients, dtypes", "[nn]") {
  ag::manual_seed(fresh_seed());
  const ag::Tensor x0 = ag::randn({4, 5, 8}) * 2.0 + 0.5, r0 = ag::randn({4, 5, 8}), w0 = ag::randn({8}),
                   b0 = ag::randn({8}), g1 = ag::randn({4, 5, 8}), g2 = ag::randn({4, 5, 8});
  for (const ag::DType rt : {ag::kFloat32, ag::kBFloat16}) {
    CAPTURE(ag::dtype_name(rt));
    auto leaves = [&] {
      auto leaf = [](const ag::Tensor& t) { return t.clone().detach().requires_grad_(true); };
      return std::vector<ag::Tensor>{leaf(x0), leaf(r0.to(rt)), leaf(w0), leaf(b0)};
    };
    const std::vector<ag::Tensor> a = leaves(), p = leaves();
    const auto [y, s] = ag::add_layer_norm(a[0], a[1], {8}, a[2], a[3]);
    CHECK(y.dtype() == ag::kFloat32);
    CHECK(s.dtype() == ag::kFloat32);  // add's promotion
    ((y * g1).sum() + (s * g2).sum()).backward();
    const ag::Tensor ps = p[0] + p[1];
    const ag::Tensor py = ag::layer_norm(ps, {8}, p[2], p[3]);
    ((py * g1).sum() + (ps * g2).sum()).backward();
    CHECK(values(y) == values(py));
    CHECK(values(s) == values(ps));
    for (size_t i = 0; i < a.size(); ++i) {
      CAPTURE(i);
      REQUIRE(a[i].grad().defined());
      CHECK(a[i].grad().dtype() == a[i].dtype());
      CHECK(values(a[i].grad()) == values(p[i].grad()));
    }
    double norm = 0;
    for (double v : values(a[1].grad())) norm += std::abs(v);
    CHECK(norm > 0);
  }
  // Under autocast (bfloat16 on the CPU) the add promotes and the norm computes in float32,
  // as the pair does: two bfloat16 tensors give a bfloat16 sum and a float32 output.
  {
    ag::amp::AutocastGuard ac(ag::kCPU, ag::kBFloat16);
    const auto [y, s] = ag::add_layer_norm(x0.to(ag::kBFloat16), r0.to(ag::kBFloat16), {8}, w0, b0);
    CHECK(s.dtype() == ag::kBFloat16);
    CHECK(y.dtype() == ag::kFloat32);
    const ag::Tensor ps = x0.to(ag::kBFloat16) + r0.to(ag::kBFloat16);
    CHECK(values(s) == values(ps));
    CHECK(values(y) == values(ag::layer_norm(ps, {8}, w0, b0)));
    const auto [y2, s2] = ag::add_layer_norm(x0, r0.to(ag::kBFloat16), {8}, w0, b0);
    CHECK(s2.dtype() == ag::kFloat32);
    CHECK(y2.dtype() == ag::kFloat32);
  }
}

TEST_CASE("add_layer_norm names what is wrong with its inputs", "[nn]") {
  const ag::Tensor x = ag::randn({2, 3, 4});
  auto message = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const ag::Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  const std::string shapes = message([&] { (void)ag::add_layer_norm(x, ag::randn({2, 1, 4}), {4}); });
  CHECK_THAT(shapes, Catch::Contains("add_layer_norm") && Catch::Contains("[2, 3, 4]") && Catch::Contains("[2, 1, 4]"));
  const std::string norm = message([&] { (void)ag::add_layer_norm(x, x, {3}); });
  CHECK_THAT(norm, Catch::Contains("add_layer_norm: normalized_shape [3]"));
  const std::string weight = message([&] { (void)ag::add_layer_norm(x, x, {4}, ag::randn({3})); });
  CHECK_THAT(weight, Catch::Contains("add_layer_norm: weight and bias must be [4]"));
  const std::string ints = message([&] { (void)ag::add_layer_norm(x, ag::zeros({2, 3, 4}, ag::TensorOptions(ag::kInt64)), {4}); });
  CHECK_THAT(ints, Catch::Contains("add_layer_norm: expected floating input and residual"));
  const std::string none = message([&] { (void)ag::add_layer_norm(x, ag::Tensor(), {4}); });
  CHECK_THAT(none, Catch::Contains("add_layer_norm") && Catch::Contains("residual"));
}

TEST_CASE("add_layer_norm's one CUDA kernel gives the pair's values and gradients bit for bit", "[nn][cuda]") {
  if (skip_without_cuda()) return;
  // Rows of 96 take the register kernels, 1500 the loop kernels (Note [Layer norm kernels] in
  // cuda/layer_norm.cu). The stream x is float32 and the branch b float16, bfloat16 (autocast) or
  // float32; `swap` passes them the other way round. `use`: 0 both outputs, 1 only the norm,
  // 2 only the sum.
  for (int64_t e : {int64_t{96}, int64_t{1500}}) {
    for (std::optional<ag::DType> low : {std::optional<ag::DType>(ag::kFloat16),
                                         std::optional<ag::DType>(ag::kBFloat16), std::optional<ag::DType>()}) {
      for (int use = 0; use < 3; ++use) {
        for (bool swap : {false, true}) {
          CAPTURE(e, low ? ag::dtype_name(*low) : "fp32", use, swap);
          ag::manual_seed(12 + use);
          ag::nn::LayerNorm ln({e});
          ag::nn::Linear lin(e, e);
          ag::nn::init::normal_(ln.weight, 1.0, 0.3);
          ag::nn::init::normal_(ln.bias, 0.0, 0.3);
          ln.to(kGpu);
          lin.to(kGpu);
          const ag::DType bt = low ? *low : ag::kFloat32;
          const ag::Tensor x0 = (ag::randn({3, 7, e}) * 2.0 + 0.5).to(kGpu);
          const ag::Tensor b0 = ag::randn({3, 7, e}).to(kGpu).to(bt);
          const ag::Tensor g = ag::randn({3, 7, e}).to(kGpu);
          auto guard = [&] { return ag::amp::AutocastGuard(ag::kCUDA, low.value_or(ag::kFloat16), low.has_value()); };
          auto tail = [&](const ag::Tensor& y, const ag::Tensor& s) {
            const ag::Tensor o = use == 0 ? s + lin(y) : (use == 1 ? lin(y) : s * 1.5);
            return (o * g).sum();
          };
          struct Result {
            std::vector<double> loss, gx, gb, gw, gbias, glin;
          };
          auto run = [&](bool fused) {
            ln.zero_grad();
            lin.zero_grad();
            ag::Tensor x = x0.clone().requires_grad_(), b = b0.clone().requires_grad_();
            ag::Tensor loss;
            {
              auto ac = guard();
              ag::amp::Trace trace;
              if (fused) {
                const auto [y, s] = swap ? ag::add_layer_norm(b, x, {e}, ln.weight, ln.bias)
                                         : ag::add_layer_norm(x, b, {e}, ln.weight, ln.bias);
                if (low) {
                  bool seen = false;
                  for (const auto& r : trace.records())
                    if (r.op == "add_layer_norm") {
                      seen = true;
                      CHECK(r.path == "fused (the add in the layer norm's kernel)");
                    }
                  CHECK(seen);
                }
                loss = tail(y, s);
              } else {
                const ag::Tensor s = swap ? b + x : x + b;
                loss = tail(ln(s), s);
              }
            }
            loss.backward();
            CHECK(b.grad().dtype() == bt);
            return Result{values(loss), values(x.grad()), values(b.grad()), use == 2 ? std::vector<double>{} : values(ln.weight.grad()),
                          use == 2 ? std::vector<double>{} : values(ln.bias.grad()),
                          use == 2 ? std::vector<double>{} : values(lin.weight.grad())};
          };
          const Result f = run(true), p = run(false);
          CHECK(f.loss == p.loss);
          CHECK(f.gx == p.gx);
          CHECK(f.gb == p.gb);
          CHECK(f.gw == p.gw);
          CHECK(f.gbias == p.gbias);
          CHECK(f.glin == p.glin);
          double norm = 0;
          for (double v : f.gb) norm += std::abs(v);
          CHECK(norm > 0);
        }
      }
    }
  }
}

TEST_CASE("add_layer_norm on CUDA with only the norm's weight and bias requiring grad", "[nn][cuda]") {
  if (skip_without_cuda()) return;
  // The sum's gradient arrives but no input gradient is wanted: the kernel gets none of it.
  ag::manual_seed(3);
  const ag::Tensor x = (ag::randn({40, 64}) * 2.0).to(kGpu), r = ag::randn({40, 64}).to(kGpu).to(ag::kFloat16),
                   g = ag::randn({40, 64}).to(kGpu);
  auto run = [&](bool fused) {
    const ag::Tensor w = ag::randn({64}).to(kGpu).requires_grad_(true), b = ag::zeros({64}).to(kGpu).requires_grad_(true);
    ag::Tensor y, s;
    if (fused) {
      std::tie(y, s) = ag::add_layer_norm(x, r, {64}, w, b);
    } else {
      s = x + r;
      y = ag::layer_norm(s, {64}, w, b);
    }
    ((y * g).sum() + (s * g).sum()).backward();
    return std::vector<std::vector<double>>{values(w.grad()), values(b.grad())};
  };
  ag::manual_seed(4);
  const auto f = run(true);
  ag::manual_seed(4);
  const auto p = run(false);
  CHECK(f == p);
}

TEST_CASE("add_layer_norm on CUDA where x has other uses, and as add_layer_norm(x, x)", "[nn][cuda]") {
  if (skip_without_cuda()) return;
  // x's other uses run their backward first, so the engine holds a sum for x when the node
  // runs: it is x's gradient, not the residual's (the kernel's one gx is both inputs'). The
  // pair of ops is the reference; the adds may come in another order, so within 1e-6
  // (the float16 residual's gradient: 1e-3).
  for (std::optional<ag::DType> low : {std::optional<ag::DType>(ag::kFloat16), std::optional<ag::DType>()}) {
    for (bool same : {false, true}) {
      CAPTURE(low ? ag::dtype_name(*low) : "fp32", same);
      ag::manual_seed(21);
      const ag::DType bt = low ? *low : ag::kFloat32;
      const ag::Tensor x0 = (ag::randn({6, 96}) * 2.0 + 0.5).to(kGpu), r0 = ag::randn({6, 96}).to(kGpu).to(bt);
      const ag::Tensor w = (ag::randn({96}) * 0.3 + 1.0).to(kGpu), b = (ag::randn({96}) * 0.3).to(kGpu);
      const ag::Tensor g1 = ag::randn({6, 96}).to(kGpu), g2 = ag::randn({6, 96}).to(kGpu),
                       g3 = ag::randn({6, 96}).to(kGpu);
      auto run = [&](bool fused) {
        ag::Tensor xl = x0.clone().requires_grad_(), rl = r0.clone().requires_grad_();
        const ag::Tensor x = xl * 1.5;  // not a leaf: its node gets the sums
        const ag::Tensor r = same ? x : rl;
        ag::Tensor y, s;
        if (fused) {
          std::tie(y, s) = ag::add_layer_norm(x, r, {96}, w, b);
        } else {
          s = x + r;
          y = ag::layer_norm(s, {96}, w, b);
        }
        const ag::Tensor z = x * 3.0;  // recorded after, so its backward runs first
        ((y * g1).sum() + (s * g2).sum() + (z * g3).sum()).backward();
        return std::pair{xl.grad(), same ? ag::Tensor() : rl.grad()};
      };
      const auto f = run(true), p = run(false);
      check_close(f.first, values(p.first), 1e-6, 1e-6);
      if (!same) check_close(f.second, values(p.second), low ? 1e-3 : 1e-6, low ? 1e-3 : 1e-6);
    }
  }
}
