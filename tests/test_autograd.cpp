// Autograd: a float64 central-difference gradcheck of every row of the op table, in four
// layouts (the registry walk fails on any differentiable op without a row), and the engine's
// behaviour (accumulation, retained and freed graphs, grad mode, detach, version counters,
// explicit gradients, gradient dtypes).
#include <memory>

#include "common.h"
#include "op_table.h"

namespace {

using op_table::Fn;
using op_table::Row;
using op_table::V;

ag::autograd::GradcheckOptions gradcheck_options() {
  ag::autograd::GradcheckOptions o;
  o.eps = 1e-6;
  o.atol = 1e-5;
  o.rtol = 1e-3;
  return o;
}

std::vector<double> values(const ag::Tensor& t) { return t.to_vector<double>(); }

// A float64 leaf drawn by `d`, in a layout of op_table::relayout.
ag::Tensor leaf(const ag::Shape& s, const op_table::Draw& d, int layout = 0) {
  return op_table::relayout(d(s, 0, {}), layout).detach().requires_grad_();
}

// A row's inputs at its size as gradcheck takes them: its floating, non-constant inputs as
// float64 leaves in `layout` (0 as drawn, 1 strided, 2 stored transposed, 3 the two by turns),
// and the row's function of those leaves with the other inputs held fixed.
struct GradcheckInputs {
  V leaves;
  Fn fn;
};
GradcheckInputs gradcheck_inputs(const Row& r, int layout) {
  V all = r.draw(r.n);
  std::vector<size_t> at;
  for (size_t i = 0; i < all.size(); ++i) {
    if (!all[i].is_floating_point() || r.in[i].constant) continue;
    const int l = layout == 3 ? 1 + static_cast<int>(at.size() % 2) : layout;
    all[i] = op_table::relayout(all[i], l).detach().requires_grad_();
    at.push_back(i);
  }
  GradcheckInputs g;
  for (size_t i : at) g.leaves.push_back(all[i]);
  g.fn = [all, at, run = r.run](const V& leaves) {
    V full = all;
    for (size_t k = 0; k < at.size(); ++k) full[at[k]] = leaves[k];
    return run(full);
  };
  return g;
}

bool gradchecked(const Row& r) {
  const ag::OpInfo* op = ag::find_op(r.op);
  return r.gradcheck && op != nullptr && op->differentiable;
}

ag::autograd::GradcheckResult checked(const Fn& fn, const V& leaves) {
  try {
    return ag::autograd::gradcheck(fn, leaves, gradcheck_options());
  } catch (const std::exception& e) {
    ag::autograd::GradcheckResult r;
    r.ok = false;
    r.message = std::string("threw: ") + e.what();
    return r;
  }
}

}  // namespace

TEST_CASE("autograd: the seed example, p.pow(2) + 3", "[autograd]") {
  ag::Tensor p = ag::tensor(2.f).requires_grad_();
  ag::Tensor r = p.pow(2) + 3;
  r.backward();
  CHECK(r.item<float>() == 7.f);
  REQUIRE(p.grad().defined());
  CHECK(p.grad().item<float>() == 4.f);
  CHECK(p.grad().dtype() == ag::kFloat32);
}

TEST_CASE("autograd: gradients arriving along several edges are summed, in place only where nothing else holds them",
          "[autograd]") {
  // Note [Summing incoming gradients]: h gets three gradients. The first, 2 * ones from
  // (h * 2).sum(), is a tensor of its own and takes the others in place; a gradient that is
  // also an input of another node (mul's backward hands the same incoming gradient on) or a
  // broadcast view must not be written to.
  ag::manual_seed(fresh_seed());
  const ag::Tensor x0 = ag::randn({5, 7});
  ag::Tensor x = x0.clone().requires_grad_();
  ag::Tensor w = ag::randn({7}).requires_grad_();
  ag::Tensor h = x * 1.5;
  ag::Tensor out = (h * 2).sum() + (h * w).sum() + (h * h).sum() + h.sum();
  out.backward();
  const std::vector<double> xv = x0.to_vector<double>(), wv = w.detach().to_vector<double>();
  std::vector<double> expect(xv.size()), expect_w(7, 0.0);
  for (size_t i = 0; i < xv.size(); ++i) {
    const double hv = xv[i] * 1.5;
    expect[i] = 1.5 * (2 + wv[i % 7] + 2 * hv + 1);
    expect_w[i % 7] += hv;
  }
  check_close(x.grad(), expect, 1e-5, 1e-5);
  check_close(w.grad(), expect_w, 1e-5, 1e-5);
  // Twice through a shared gradient: x feeds two identical products.
  ag::Tensor y = x0.clone().requires_grad_();
  ag::Tensor g = ag::full({5, 7}, 0.25);
  (y * 3 + y * 3).backward(g);
  check_close(y.grad(), std::vector<double>(35, 1.5), 0, 0);
  check_close(g, std::vector<double>(35, 0.25), 0, 0);  // the caller's gradient is left alone
}

TEST_CASE("autograd: every differentiable op in the registry has a gradcheck row", "[autograd][gradcheck]") {
  const std::vector<std::string> missing = op_table::ops_without(op_table::Check::gradcheck);
  INFO("differentiable ops without a gradcheck row in tests/op_rows.cpp: " << fmt::format("{}", fmt::join(missing, ", ")));
  CHECK(missing.empty());
  // This binary defines no ops of its own: the walk saw every registered op.
  CHECK(op_table::library_ops().size() == ag::op_registry().size());
  CHECK(op_table::library_ops().size() > 70);
  // The table names only real ops (a renamed op would leave a stale row).
  const std::vector<std::string> stale = op_table::stale_rows();
  INFO("rows of unregistered ops: " << fmt::format("{}", fmt::join(stale, "; ")));
  CHECK(stale.empty());
}

TEST_CASE("autograd: gradcheck in float64, central differences, every row in four layouts", "[autograd][gradcheck]") {
  ag::manual_seed(1234);
  int n_cases = 0;
  for (const Row& r : op_table::rows()) {
    if (!gradchecked(r)) continue;
    for (int layout = 0; layout < (r.contiguous_only ? 1 : 4); ++layout) {
      ++n_cases;
      const GradcheckInputs g = gradcheck_inputs(r, layout);
      const ag::autograd::GradcheckResult res = checked(g.fn, g.leaves);
      INFO(r.name() << ", layout " << layout << ": " << res.message << " (max abs error " << res.max_abs_error << ")");
      CHECK(res.ok);
    }
  }
  CHECK(n_cases > 500);
}

// gradcheck feeds each formula a fresh contiguous one-hot gradient. Inside a graph, gradients
// also arrive as views: the backward of a full sum expands a 0-dim gradient into a tensor
// whose strides are all 0, and a transpose's backward passes a transposed gradient on.
// Every row again, behind a sum and behind a transpose.
TEST_CASE("autograd: gradcheck of every row with a non-contiguous incoming gradient", "[autograd][gradcheck]") {
  ag::manual_seed(4321);
  const std::vector<std::pair<std::string, std::function<ag::Tensor(const ag::Tensor&)>>> behind = {
      {"sum", [](const ag::Tensor& y) { return ag::sum(y); }},
      {"transpose", [](const ag::Tensor& y) { return y.dim() >= 2 ? y.transpose(0, -1) : y.unsqueeze(0).t(); }},
  };
  for (const auto& [after, post] : behind) {
    for (const Row& r : op_table::rows()) {
      if (!gradchecked(r)) continue;
      const GradcheckInputs g = gradcheck_inputs(r, 0);
      const Fn fn = [&g, &post = post](const V& v) { return post(g.fn(v)); };
      const ag::autograd::GradcheckResult res = checked(fn, g.leaves);
      INFO(after << "(" << r.name() << "): " << res.message);
      CHECK(res.ok);
    }
  }
}

TEST_CASE("gradcheck: composite graphs", "[autograd][gradcheck]") {
  ag::manual_seed(99);
  const ag::Tensor labels = ag::tensor(std::vector<int64_t>{1, 0, 1, 1});
  struct Case {
    std::string form;
    std::function<V()> inputs;
    Fn fn;
  };
  using op_table::normal;
  const std::vector<Case> cases = {
      {"two-layer MLP, log_softmax, pick the labels",
       [] {
         return V{leaf({4, 3}, normal()), leaf({5, 3}, normal()), leaf({5}, normal()), leaf({2, 5}, normal(), 2)};
       },
       [labels](const V& v) {
         ag::Tensor h = ag::gelu(ag::linear(v[0], v[1], v[2]));
         ag::Tensor lp = ag::log_softmax(ag::linear(h, v[3]), 1);
         return -ag::index_select(lp.flatten(), 0, labels + ag::arange(0, 8, 2, ag::kInt64)).mean();
       }},
      {"x @ x^T + x: one leaf reaches the node through two paths, one a view",
       [] {
         return V{leaf({3, 3}, normal())};
       },
       [](const V& v) { return ag::mm(v[0], v[0].t()) + v[0]; }},
      {"softmax(x) * exp(x) / (x*x + 1)",
       [] {
         return V{leaf({3, 4}, normal())};
       },
       [](const V& v) { return ag::softmax(v[0], 1) * v[0].exp() / (v[0] * v[0] + 1); }},
      {"var and mean of cat([x, 2x]) over columns",
       [] {
         return V{leaf({2, 3}, normal(), 1)};
       },
       [](const V& v) {
         ag::Tensor c = ag::cat({v[0], v[0] * 2}, 0);
         return ag::var(c, {0}) + ag::mean(c, {0}) * ag::sum(v[0]);
       }},
      {"where(x > 0, sqrt(|x|), tanh(x)) through transposes and a broadcast",
       [] {
         return V{leaf({3, 4}, op_table::away({0})), leaf({4}, op_table::positive())};
       },
       [](const V& v) {
         ag::Tensor x = v[0].t().contiguous().t() * v[1];  // positive factor: x stays away from 0
         return ag::where(ag::gt(x, 0.0), ag::sqrt(ag::abs(x) + 0.1), ag::tanh(x)).sum({0});
       }},
  };
  for (const Case& c : cases) {
    ag::autograd::GradcheckResult r = ag::autograd::gradcheck(c.fn, c.inputs(), gradcheck_options());
    INFO(c.form << ": " << r.message);
    CHECK(r.ok);
  }
}

TEST_CASE("gradcheck: reports a wrong gradient", "[autograd][gradcheck]") {
  // x * detach(x) has backward x but derivative 2x: gradcheck must notice.
  ag::Tensor x = ag::tensor(std::vector<double>{0.5, -1.5, 2.0}, {3}).requires_grad_();
  ag::autograd::GradcheckResult r =
      ag::autograd::gradcheck([](const V& v) { return v[0] * v[0].detach(); }, {x}, gradcheck_options());
  CHECK_FALSE(r.ok);
  CHECK_THAT(r.message, Catch::Contains("analytic") && Catch::Contains("numerical"));
  CHECK(r.max_abs_error > 0.4);
  // ...and accepts the right one.
  CHECK(ag::autograd::gradcheck([](const V& v) { return v[0] * v[0]; }, {x}, gradcheck_options()).ok);
}

TEST_CASE("to: gradients flow back in the source dtype", "[autograd][to]") {
  ag::manual_seed(7);
  SECTION("float64 leaf through a float32 computation") {
    ag::Tensor x = ag::randn({3, 4}, ag::kFloat64).requires_grad_();
    ag::Tensor w = ag::randn({3, 4});  // float32
    ag::Tensor y = x.to(ag::kFloat32);
    REQUIRE(y.dtype() == ag::kFloat32);
    REQUIRE(y.requires_grad());
    (y * w).sum().backward();
    REQUIRE(x.grad().defined());
    CHECK(x.grad().dtype() == ag::kFloat64);
    CHECK(x.grad().shape() == x.shape());
    check_close(x.grad(), values(w), 0, 0);  // d/dx sum(float(x) * w) = w, exactly representable
  }
  SECTION("float32 leaf through a float64 computation") {
    ag::Tensor x = ag::randn({5}).requires_grad_();
    ag::Tensor w = ag::randn({5}, ag::kFloat64);
    (x.to(ag::kFloat64) * w).sum().backward();
    CHECK(x.grad().dtype() == ag::kFloat32);
    check_close(x.grad(), values(w.to(ag::kFloat32)), 0, 0);
  }
  SECTION("float16 leaf cast up, squared") {
    ag::Tensor x = ag::randn({6}, ag::kFloat16).requires_grad_();
    ag::Tensor y = x.to(ag::kFloat32);
    (y * y).sum().backward();
    CHECK(x.grad().dtype() == ag::kFloat16);
    // 2x computed in float32 then rounded to float16: exact (doubling is exact).
    std::vector<double> ref = values(x);
    for (double& v : ref) v *= 2;
    check_close(x.grad(), ref, 0, 0);
  }
  SECTION("a leaf's cast links straight to the leaf's accumulator (Note [Leaf casts])") {
    ag::Tensor x = ag::randn({4}).requires_grad_();
    ag::Tensor h = x.to(ag::kFloat16), d = x.to(ag::kFloat64);
    CHECK_FALSE(h.is_leaf());
    CHECK(h.grad_fn() == d.grad_fn());  // both: x's accumulator
    CHECK(h.str().find("grad_fn=<ToCopyBackward0>") != std::string::npos);
    // Gradients of both copies and of x itself meet in x's float32 .grad.
    (ag::sum(h.to(ag::kFloat32) * 2.0) + ag::sum(d * 3.0) + ag::sum(x)).backward();
    REQUIRE(x.grad().dtype() == ag::kFloat32);
    check_close(x.grad(), {6, 6, 6, 6}, 0, 0);
    // A cast of a non-leaf keeps its node.
    ag::Tensor y = (x * 2.0).to(ag::kFloat16);
    CHECK(y.grad_fn()->name() == "to");
    // The gradient of a float16 copy is float16, as in PyTorch, even when a mixed op computes it
    // in float32: rounded (1/3 -> 0.33325), and 1e5 overflows to inf where the scaler sees it.
    ag::Tensor z = ag::tensor(std::vector<double>{1, 2}, {2}, ag::kFloat32).requires_grad_();
    ag::Tensor c = ag::tensor(std::vector<double>{1.0 / 3, 1e5}, {2}, ag::kFloat32);
    ag::sum(z.to(ag::kFloat16) * c).backward();
    const std::vector<double> gz = z.grad().to_vector<double>();
    CHECK(gz[0] == 0.333251953125);
    CHECK(std::isinf(gz[1]));
    ag::Tensor u = ag::tensor(std::vector<double>{1, 2}, {2}, ag::kFloat32).requires_grad_();
    ag::sum((u * 1.0).to(ag::kFloat16) * c).backward();
    CHECK(u.grad().to_vector<double>()[0] == 0.333251953125);
  }
  SECTION("a cast to the same dtype is the identity and keeps the graph") {
    ag::Tensor x = ag::randn({3}, ag::kFloat64).requires_grad_();
    ag::Tensor y = x.to(ag::kFloat64);
    CHECK(y.is_same(x));
  }
  SECTION("a cast to an integer dtype cuts the graph") {
    ag::Tensor x = ag::randn({3}).requires_grad_();
    CHECK_FALSE(x.to(ag::kInt64).requires_grad());
  }
}

TEST_CASE("engine: gradients accumulate into leaves across backward calls", "[autograd][engine]") {
  ag::manual_seed(11);
  ag::Tensor x = ag::randn({4}, ag::kFloat64).requires_grad_();
  (x * 3).sum().backward();
  check_close(x.grad(), std::vector<double>(4, 3.0), 1e-12, 0);
  (x * x).sum().backward();
  std::vector<double> ref = values(x);
  for (double& v : ref) v = 3 + 2 * v;
  check_close(x.grad(), ref, 1e-12, 1e-12);
  // The leaf's grad is its own tensor, not an alias of a tensor of the graph.
  ag::Tensor g = x.grad();
  (x * 1).sum().backward();
  CHECK(g.to_vector<double>() == ref);
}

TEST_CASE("engine: retain_graph allows a second backward, without it the second throws", "[autograd][engine]") {
  ag::manual_seed(12);
  ag::Tensor x = ag::randn({3}, ag::kFloat64).requires_grad_();
  std::vector<double> twice_x = values(x);
  for (double& v : twice_x) v *= 2;
  SECTION("retained") {
    ag::Tensor y = (x * x).sum();
    y.backward({}, /*retain_graph=*/true);
    check_close(x.grad(), twice_x, 1e-12, 1e-12);
    y.backward();
    std::vector<double> four_x = twice_x;
    for (double& v : four_x) v *= 2;
    check_close(x.grad(), four_x, 1e-12, 1e-12);
  }
  SECTION("not retained") {
    ag::Tensor y = (x.exp() * x).sum();
    y.backward();
    REQUIRE_THROWS_AS(y.backward(), ag::Error);
    std::string msg = error_message([&] { y.backward(); });
    CHECK_THAT(msg, Catch::Contains("retain_graph") && Catch::Contains("second time"));
  }
}

TEST_CASE("engine: a diamond graph sums the gradients of both paths", "[autograd][engine]") {
  ag::manual_seed(13);
  ag::Tensor x = ag::randn({5}, ag::kFloat64).requires_grad_();
  SECTION("x used twice by one op") {
    (x * x + x.exp()).sum().backward();
    std::vector<double> xv = values(x), ref(5);
    for (size_t i = 0; i < 5; ++i) ref[i] = 2 * xv[i] + std::exp(xv[i]);
    check_close(x.grad(), ref, 1e-12, 1e-12);
  }
  SECTION("one gradient tensor on two edges into the same node") {
    // add's backward hands its incoming gradient to both inputs, clone's and add-scalar's
    // pass theirs on: the engine gets the pending sum's own tensor back and must still add it.
    const std::vector<double> xv = values(x);
    (x + x).sum().backward();
    check_close(x.grad(), std::vector<double>(5, 2.0), 0, 0);
    x.set_grad(ag::Tensor());
    (x + x.clone()).sum().backward();
    check_close(x.grad(), std::vector<double>(5, 2.0), 0, 0);
    x.set_grad(ag::Tensor());
    ag::Tensor h = x * 1.0;  // a node (not a leaf) reached twice
    ((h + (h + 1.0)) * 3.0).sum().backward();
    check_close(x.grad(), std::vector<double>(5, 6.0), 0, 0);
    CHECK(values(x) == xv);
  }
  SECTION("an intermediate feeding two branches that join again") {
    ag::Tensor a = x * 2;          // a = 2x
    ag::Tensor b = a * a;          // branch 1: a^2
    ag::Tensor c = a.tanh();       // branch 2: tanh(a)
    ag::Tensor d = (b + c).sum();  // join
    d.backward();
    std::vector<double> xv = values(x), ref(5);
    for (size_t i = 0; i < 5; ++i) {
      const double av = 2 * xv[i], t = std::tanh(av);
      ref[i] = 2 * (2 * av + (1 - t * t));
    }
    check_close(x.grad(), ref, 1e-12, 1e-12);
  }
}

TEST_CASE("engine: NoGradGuard stops recording and restores the mode", "[autograd][engine]") {
  ag::Tensor x = ag::randn({3}).requires_grad_();
  REQUIRE(ag::autograd::grad_mode_enabled());
  {
    ag::NoGradGuard guard;
    CHECK_FALSE(ag::autograd::grad_mode_enabled());
    ag::Tensor y = x * 2 + x.exp();
    CHECK_FALSE(y.requires_grad());
    CHECK(y.grad_fn() == nullptr);
    CHECK_FALSE(ag::matmul(x, x).requires_grad());
    {
      ag::NoGradGuard nested;
      CHECK_FALSE(ag::autograd::grad_mode_enabled());
    }
    CHECK_FALSE(ag::autograd::grad_mode_enabled());  // the nested guard restores "off"
  }
  CHECK(ag::autograd::grad_mode_enabled());
  ag::Tensor z = x * 2;
  CHECK(z.requires_grad());
  CHECK(z.grad_fn() != nullptr);
  // Restored also when the scope is left by an exception.
  try {
    ag::NoGradGuard guard;
    throw std::runtime_error("leave the scope");
  } catch (const std::runtime_error&) {
  }
  CHECK(ag::autograd::grad_mode_enabled());
}

TEST_CASE("engine: detach() cuts the graph and shares storage", "[autograd][engine]") {
  ag::manual_seed(14);
  ag::Tensor x = ag::randn({4}, ag::kFloat64).requires_grad_();
  ag::Tensor d = x.detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.is_leaf());
  CHECK(d.storage() == x.storage());
  CHECK_FALSE((d * 2).requires_grad());
  // d/dx sum(x * stop_gradient(x)) = x, not 2x.
  (x * x.detach()).sum().backward();
  check_close(x.grad(), values(x), 1e-12, 1e-12);
  // A detached non-leaf: nothing flows through it.
  ag::Tensor y = (x * 3).detach();
  CHECK(y.grad_fn() == nullptr);
}

TEST_CASE("engine: an in-place edit of a saved tensor fails at backward, naming the op", "[autograd][engine]") {
  ag::manual_seed(15);
  ag::Tensor x = ag::randn({3}, ag::kFloat64).requires_grad_();
  SECTION("a saved input that does not require grad") {
    ag::Tensor w = ag::randn({3}, ag::kFloat64);
    ag::Tensor y = (x * w).sum();  // mul saves w for d/dx
    w.mul_(2);
    std::string msg = error_message([&] { y.backward(); });
    CHECK_THAT(msg, Catch::Contains("mul") && Catch::Contains("modified by an in-place operation"));
  }
  SECTION("a saved output, edited under NoGradGuard") {
    ag::Tensor y = x.exp();  // exp saves its output
    ag::Tensor loss = y.sum();
    {
      ag::NoGradGuard guard;
      y.add_(1.0);
    }
    std::string msg = error_message([&] { loss.backward(); });
    CHECK_THAT(msg, Catch::StartsWith("exp:") && Catch::Contains("in-place"));
  }
  SECTION("an edit of a tensor that was not saved is fine") {
    ag::Tensor w = ag::randn({3}, ag::kFloat64);
    ag::Tensor y = (x + w).sum();  // add saves nothing it needs
    w.mul_(2);
    CHECK_NOTHROW(y.backward());
    check_close(x.grad(), {1, 1, 1}, 0, 0);
  }
  SECTION("an edit of an input that the formula does not read is fine (exp reads its output)") {
    ag::Tensor a = x * 1.0;
    ag::Tensor loss = a.exp().sum();
    {
      ag::NoGradGuard guard;
      a.mul_(2.0);
    }
    CHECK_NOTHROW(loss.backward());
    std::vector<double> ref = values(x);
    for (double& v : ref) v = std::exp(v);
    check_close(x.grad(), ref, 1e-12, 1e-12);
  }
  SECTION("in place on a leaf that requires grad is refused; on a non-leaf it is recorded") {
    ag::Tensor y = x * 2;
    CHECK_NOTHROW(y.mul_(2));  // Note [In-place autograd]: tests/test_inplace.cpp
    CHECK_THROWS_AS(x.add_(1.0), ag::Error);
  }
}

TEST_CASE("engine: the graph is freed after backward", "[autograd][engine]") {
  ag::manual_seed(16);
  ag::Tensor x = ag::randn({3, 3}, ag::kFloat64).requires_grad_();
  ag::Tensor w = ag::randn({3, 3}, ag::kFloat64).requires_grad_();
  std::weak_ptr<ag::autograd::Node> root, inner;
  {
    ag::Tensor h = ag::matmul(x, w).exp();
    inner = h.grad_fn();
    ag::Tensor out = ag::where(ag::gt(h, 1.0), h, h * h).sum();
    root = out.grad_fn();
    REQUIRE_FALSE(root.expired());
    out.backward();
  }
  CHECK(root.expired());
  CHECK(inner.expired());
  CHECK(x.unsafe_impl()->grad_accumulator.expired());
  CHECK(x.grad().defined());
  CHECK(w.grad().defined());

  SECTION("also when the output is dropped without backward") {
    std::weak_ptr<ag::autograd::Node> node;
    {
      ag::Tensor out = (x * w).sum();
      node = out.grad_fn();
    }
    CHECK(node.expired());
  }
  SECTION("also with retain_graph, once the output is gone") {
    std::weak_ptr<ag::autograd::Node> node;
    {
      ag::Tensor out = (x.sigmoid() * w).sum();
      node = out.grad_fn();
      out.backward({}, true);
      CHECK_FALSE(node.expired());
    }
    CHECK(node.expired());
  }
}

TEST_CASE("engine: backward of a non-scalar output takes an explicit gradient", "[autograd][engine]") {
  ag::manual_seed(17);
  ag::Tensor x = ag::randn({2, 3}, ag::kFloat64).requires_grad_();
  ag::Tensor y = x * 3;
  ag::Tensor g = ag::randn({2, 3}, ag::kFloat64);
  SECTION("a gradient of the output's shape") {
    y.backward(g);
    std::vector<double> ref = values(g);
    for (double& v : ref) v *= 3;
    check_close(x.grad(), ref, 1e-12, 1e-12);
  }
  SECTION("no gradient for a non-scalar output is an error") {
    CHECK_THAT(error_message([&] { y.backward(); }), Catch::Contains("scalar outputs"));
  }
  SECTION("a gradient of the wrong shape is an error") {
    CHECK_THAT(error_message([&] { y.backward(ag::randn({3, 2}, ag::kFloat64)); }), Catch::Contains("does not match"));
  }
  SECTION("backward of a tensor that does not require grad is an error") {
    CHECK_THAT(error_message([&] { ag::randn({2}).sum().backward(); }), Catch::Contains("does not require grad"));
  }
}

TEST_CASE("engine: each leaf receives its gradient in its own dtype", "[autograd][engine]") {
  ag::manual_seed(18);
  ag::Tensor h = ag::rand({4}, ag::kFloat16).requires_grad_();
  ag::Tensor w = ag::rand({4}) + 0.5;  // float32
  SECTION("type promotion f16 * f32 -> f32") {
    ag::Tensor y = (h * w).sum();
    REQUIRE(y.dtype() == ag::kFloat32);
    y.backward();
    REQUIRE(h.grad().defined());
    CHECK(h.grad().dtype() == ag::kFloat16);
    check_close(h.grad(), values(w.to(ag::kFloat16)), 0, 0);
  }
  SECTION("an explicit cast inside the computation") {
    ag::Tensor y = ag::matmul(h.to(ag::kFloat32).unsqueeze(0), w.unsqueeze(1)).sum();
    y.backward();
    CHECK(h.grad().dtype() == ag::kFloat16);
    check_close(h.grad(), values(w.to(ag::kFloat16)), 0, 0);
  }
  SECTION("mixed leaves: f32, f64 and bf16 in one graph") {
    ag::Tensor a = ag::rand({3}).requires_grad_();
    ag::Tensor b = ag::rand({3}, ag::kFloat64).requires_grad_();
    ag::Tensor c = ag::rand({3}, ag::kBFloat16).requires_grad_();
    ag::Tensor y = (a * b + c).sum();
    REQUIRE(y.dtype() == ag::kFloat64);
    y.backward();
    CHECK(a.grad().dtype() == ag::kFloat32);
    CHECK(b.grad().dtype() == ag::kFloat64);
    CHECK(c.grad().dtype() == ag::kBFloat16);
    check_close(a.grad(), values(b.to(ag::kFloat32)), 0, 0);
    check_close(b.grad(), values(a), 0, 0);
    check_close(c.grad(), {1, 1, 1}, 0, 0);
  }
}

TEST_CASE("engine: chained reductions pass expanded gradients along", "[autograd][engine]") {
  ag::manual_seed(19);
  ag::Tensor x = ag::randn({3, 4}, ag::kFloat64).requires_grad_();
  SECTION("sum over a dim, then over all") {
    ag::sum(x, {1}).sum().backward();
    check_close(x.grad(), std::vector<double>(12, 1.0), 0, 0);
  }
  SECTION("logsumexp over a dim, then sum") {
    ag::logsumexp(x, {0}).sum().backward();
    const std::vector<double> xv = values(x);
    std::vector<double> ref(12);
    for (int64_t j = 0; j < 4; ++j) {
      double s = 0;
      for (int64_t i = 0; i < 3; ++i) s += std::exp(xv[i * 4 + j]);
      for (int64_t i = 0; i < 3; ++i) ref[i * 4 + j] = std::exp(xv[i * 4 + j]) / s;
    }
    check_close(x.grad(), ref, 1e-12, 1e-12);
  }
  SECTION("a gradient that arrives transposed") {
    ag::Tensor y = ag::sum(x, {1});                                   // [3]
    ag::Tensor g = ag::randn({3, 2}, ag::kFloat64).t().select(0, 1);  // [3], stride 2
    REQUIRE_FALSE(g.is_contiguous());
    y.backward(g);
    const std::vector<double> gv = values(g);
    std::vector<double> ref(12);
    for (int64_t i = 0; i < 12; ++i) ref[i] = gv[i / 4];
    check_close(x.grad(), ref, 0, 0);
  }
}

TEST_CASE("autograd: gradients at kinks follow PyTorch's conventions", "[autograd]") {
  auto grad_of = [](const std::function<ag::Tensor(const ag::Tensor&)>& f, std::vector<double> v) {
    ag::Tensor x = ag::tensor(v, {static_cast<int64_t>(v.size())}).requires_grad_();
    f(x).sum().backward();
    return x.grad().to_vector<double>();
  };
  using T = const ag::Tensor&;
  CHECK(grad_of([](T x) { return ag::relu(x); }, {0, 1, -1}) == std::vector<double>{0, 1, 0});
  CHECK(grad_of([](T x) { return ag::abs(x); }, {0, 2, -2}) == std::vector<double>{0, 1, -1});
  // clamp passes the gradient on its bounds.
  CHECK(grad_of([](T x) { return ag::clamp(x, -1.0, 1.0); }, {-1, 1, 2, -2, 0.5}) ==
        std::vector<double>{1, 1, 0, 0, 1});
  // max/min over everything split the gradient among ties; over a dim it goes to one index.
  CHECK(grad_of([](T x) { return ag::max(x); }, {1, 3, 3}) == std::vector<double>{0, 0.5, 0.5});
  CHECK(grad_of([](T x) { return ag::min(x); }, {2, 2, 3, 2}) == std::vector<double>{1 / 3., 1 / 3., 0, 1 / 3.});
  const std::vector<double> gd = grad_of([](T x) { return ag::max(x, 0).first; }, {1, 3, 3});
  CHECK(gd[0] == 0);
  CHECK(gd[1] + gd[2] == 1);
  // maximum/minimum split ties in half.
  ag::Tensor one = ag::tensor(std::vector<double>{1, 1}, {2});
  CHECK(grad_of([&](T x) { return ag::maximum(x, one); }, {1, 2}) == std::vector<double>{0.5, 1});
  CHECK(grad_of([&](T x) { return ag::minimum(x, one); }, {1, 2}) == std::vector<double>{0.5, 0});
  // pow: 0^0 has zero derivative in the exponent, x^0 zero in the base.
  CHECK(grad_of([](T x) { return x.pow(0); }, {0, 2}) == std::vector<double>{0, 0});
  ag::Tensor base = ag::tensor(std::vector<double>{0, 2}, {2});
  const std::vector<double> ge = grad_of([&](T e) { return ag::pow(base, e); }, {2, 3});
  CHECK(ge[0] == 0);
  CHECK(ge[1] == Approx(8 * std::log(2.0)));
}

TEST_CASE("engine: non-differentiable ops give outputs that do not require grad", "[autograd][engine]") {
  ag::Tensor x = ag::randn({3, 4}).requires_grad_();
  CHECK_FALSE(ag::argmax(x, 1).requires_grad());
  CHECK_FALSE(ag::argmin(x, 0).requires_grad());
  CHECK_FALSE(ag::gt(x, 0.0).requires_grad());
  CHECK_FALSE(ag::eq(x, x).requires_grad());
  CHECK_FALSE(ag::sign(x).requires_grad());
  auto [values_, indices] = ag::max(x, 1);
  CHECK(values_.requires_grad());
  CHECK_FALSE(indices.requires_grad());
}

TEST_CASE("engine: a dense leaf's gradient takes the leaf's layout, as in PyTorch", "[autograd][engine]") {
  ag::manual_seed(7);
  ag::Tensor x = ag::randn({2, 3, 4, 5}).to_channels_last().requires_grad_();
  REQUIRE_FALSE(x.is_contiguous());
  (x * 3).sum().backward();
  CHECK(x.grad().strides() == x.strides());
  for (double v : x.grad().to_vector<double>()) CHECK(v == 3.0);
  (x * 2).sum().backward();  // accumulates in place, in that layout
  CHECK(x.grad().strides() == x.strides());
  for (double v : x.grad().to_vector<double>()) CHECK(v == 5.0);
  // A contiguous leaf (every parameter) keeps a contiguous gradient whatever layout the
  // incoming gradient has.
  ag::Tensor w = ag::randn({2, 3, 4, 5}).requires_grad_();
  ag::Tensor g = ag::randn({2, 3, 4, 5}).to_channels_last();
  w.backward(g);
  CHECK(w.grad().is_contiguous());
  CHECK(w.grad().to_vector<double>() == g.to_vector<double>());
}

TEST_CASE("engine: matmul-family and conv backward skip the gradients no input asked for", "[autograd][engine]") {
  ag::manual_seed(11);
  ag::Tensor x = ag::randn({5, 4}), w = ag::randn({3, 4}).requires_grad_(), b = ag::randn({3});
  ag::linear(x, w, b).sum().backward();  // x and b do not require grad
  CHECK_FALSE(x.grad().defined());
  CHECK_FALSE(b.grad().defined());
  // d/dw sum(x w^T) = column sums of x, for every row of w.
  const std::vector<double> xs = x.sum({0}).to_vector<double>(), gw = w.grad().to_vector<double>();
  for (size_t r = 0; r < 3; ++r)
    for (size_t c = 0; c < 4; ++c) CHECK(gw[r * 4 + c] == Approx(xs[c]).epsilon(1e-6));
  ag::Tensor a = ag::randn({5, 4}).requires_grad_(), m = ag::randn({4, 2});
  ag::mm(a, m).sum().backward();
  CHECK_FALSE(m.grad().defined());
  CHECK(a.grad().shape() == ag::Shape{5, 4});
  ag::Tensor img = ag::randn({2, 1, 6, 6}), k = ag::randn({3, 1, 3, 3}).requires_grad_();
  ag::conv2d(img, k, ag::Tensor(), {1, 1}, {1, 1}).sum().backward();
  CHECK_FALSE(img.grad().defined());
  CHECK(k.grad().shape() == ag::Shape{3, 1, 3, 3});
}

TEST_CASE("engine: narrower gradients widen into a leaf's dtype exactly, as a cast would", "[autograd][engine]") {
  // Two float16 paths into one float32 leaf. 1024 + 0.25 is 1024.25 in float32 and 1024 in
  // float16: the two are summed in the leaf's dtype (Note [Gradient accumulation]).
  ag::Tensor x = ag::full({3}, 1.5).requires_grad_();
  const ag::Tensor c1 = ag::full({3}, 1024.0, ag::kFloat16), c2 = ag::full({3}, 0.25, ag::kFloat16);
  ((x.to(ag::kFloat16) * c1).sum() + (x.to(ag::kFloat16) * c2).sum()).backward();
  REQUIRE(x.grad().dtype() == ag::kFloat32);
  check_close(x.grad(), {1024.25, 1024.25, 1024.25}, 0, 0);
  // The next float16 gradient adds into the same float32 memory.
  const void* memory = x.grad().data_ptr();
  (x.to(ag::kFloat16) * c2).sum().backward();
  CHECK(x.grad().data_ptr() == memory);
  check_close(x.grad(), {1024.5, 1024.5, 1024.5}, 0, 0);
  // A float16 leaf given a float32 gradient still rounds it once, before accumulating.
  ag::Tensor h = ag::full({2}, 1.0, ag::kFloat16).requires_grad_();
  (h.to(ag::kFloat32) * ag::full({2}, 1.0 + 1.0 / 4096)).sum().backward();  // 1 + 2^-12 rounds to 1
  REQUIRE(h.grad().dtype() == ag::kFloat16);
  check_close(h.grad(), {1, 1}, 0, 0);
}

TEST_CASE("engine: a leaf's first gradient is taken over only when nothing else holds it", "[autograd][engine]") {
  ag::Tensor x = ag::randn({4}).requires_grad_();
  ag::Tensor g = ag::full({4}, 2.0);
  (x + 0.0).backward(g);  // the backward of x + 0 passes g itself on; g stays the caller's
  g.fill_(7.0);
  check_close(x.grad(), {2, 2, 2, 2}, 0, 0);
  ag::Tensor y = ag::randn({4}).requires_grad_();
  y.backward(g);  // a leaf as the root: its gradient is a copy, not the caller's tensor
  g.fill_(9.0);
  check_close(y.grad(), {7, 7, 7, 7}, 0, 0);
}

TEST_CASE("engine: mul and div save only what the needed gradients read", "[autograd][engine]") {
  ag::manual_seed(21);
  ag::Tensor a = ag::randn({4}, ag::kFloat64).requires_grad_();
  const ag::Tensor b = ag::rand({4}, ag::kFloat64) + 0.5;  // needs no gradient
  ag::Tensor h = a + 0.0;                                    // a non-leaf that needs one
  ag::Tensor y = (h * b).sum() + (h / b).sum();
  {
    ag::NoGradGuard no_grad;
    h.mul_(2.0);  // neither product saved h: b's gradient, which would read it, is not needed
  }
  y.backward();
  std::vector<double> want = b.to_vector<double>();
  for (double& v : want) v = v + 1.0 / v;
  check_close(a.grad(), want, 1e-12, 1e-12);
}

// The kept seed of ones (Note [Backward speed-ups] in speedups/backward.cpp) is never taken
// over by a leaf root nor reused once written, so writing into a .grad cannot change a later
// backward's start.
TEST_CASE("engine: the implicit seed of backward is reused safely", "[autograd][engine]") {
  ag::Tensor x = ag::tensor(std::vector<double>{3.0}, {}, ag::kFloat32).requires_grad_();
  x.backward();  // a leaf root: its .grad must be its own tensor, not the seed
  REQUIRE(x.grad().item<double>() == 1.0);
  {
    ag::NoGradGuard ng;
    x.grad().add_(ag::tensor(std::vector<double>{5.0}, {}, ag::kFloat32));
  }
  (x * 2.0).backward();
  CHECK(x.grad().item<double>() == 8.0);
  (x * 1.0).backward();
  CHECK(x.grad().item<double>() == 9.0);
  // mul hands the seed's consumer the other factor itself (1 * c is c): a factor the caller
  // holds is never taken over as a .grad, so writing into the .grad leaves it alone.
  ag::Tensor c = ag::tensor(std::vector<double>{3.0}, {}, ag::kFloat32);
  ag::Tensor z = ag::tensor(std::vector<double>{2.0}, {}, ag::kFloat32).requires_grad_();
  (z * c).backward();
  REQUIRE(z.grad().item<double>() == 3.0);
  {
    ag::NoGradGuard ng;
    z.grad().add_(c);
  }
  CHECK(c.item<double>() == 3.0);
  CHECK(z.grad().item<double>() == 6.0);
  ag::Tensor w = ag::tensor(std::vector<double>{1.5, -2.0}, {2}, ag::kFloat32).requires_grad_();
  (ag::sum(w * w) * c).backward();
  check_close(w.grad(), {9.0, -12.0}, 0, 0);
  CHECK(c.item<double>() == 3.0);
}

TEST_CASE("engine: a backward seed of another dtype is cast to the output's", "[autograd][engine]") {
  // relu's fused backward reads its gradient in the output's dtype: a float32 seed for a
  // float16 output is cast first (as PyTorch does), not read as float16 bytes.
  ag::Tensor x = ag::tensor(std::vector<double>{1.5, -2.0, 0.25, 3.0}, {4}, ag::kFloat16).requires_grad_();
  ag::Tensor y = ag::relu(x);
  y.backward(ag::tensor(std::vector<double>{0.5, 7.0, -1.25, 2.0}, {4}, ag::kFloat32));
  REQUIRE(x.grad().dtype() == ag::kFloat16);
  check_close(x.grad(), {0.5, 0.0, -1.25, 2.0}, 0, 0);
}
