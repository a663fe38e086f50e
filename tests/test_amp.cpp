// Autocast: categories, the policy per op, the guard's nesting, the cast cache and the trace.
#include <catch2/catch.hpp>

#include <cstring>
#include <set>

#include <ampgrad/ops/define_op.h>

#include "common.h"
#include "data/torch_autocast_lists.h"
#include "op_table.h"

namespace ag = ampgrad;
using ag::amp::Category;

namespace {

std::vector<ag::Device> devices() {
  std::vector<ag::Device> d{ag::Device(ag::kCPU)};
  if (ag::cuda::is_available()) d.emplace_back(ag::kCUDA);
  return d;
}

// Bitwise comparison of two tensors' values (NaN-safe: compares the bytes).
bool bitwise_equal(const ag::Tensor& a, const ag::Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  ag::Tensor x = a.cpu().contiguous(), y = b.cpu().contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

// What the policy should do to each input, computed here from the category alone.
std::vector<ag::Tensor> cast_by_hand(Category c, ag::DType ac, const std::vector<ag::Tensor>& in) {
  std::optional<ag::DType> target;
  if (c == Category::lower) target = ac;
  if (c == Category::fp32) target = ag::kFloat32;
  if (c == Category::promote)
    for (const auto& t : in)
      if (t.is_floating_point()) target = target ? ag::promote_types(*target, t.dtype()) : t.dtype();
  std::vector<ag::Tensor> out;
  for (const auto& t : in)
    out.push_back(target && t.is_floating_point() && t.dtype() != ag::kFloat64 ? t.to(*target) : t);
  return out;
}

}  // namespace

TEST_CASE("every registered op has an autocast row", "[amp]") {
  const std::vector<std::string> missing = op_table::ops_without(op_table::Check::autocast);
  INFO("ops without an autocast row in tests/op_rows.cpp: " << fmt::format("{}", fmt::join(missing, ", ")));
  CHECK(missing.empty());
}

TEST_CASE("categories match PyTorch's CUDA autocast lists, held as data", "[amp]") {
  // Every op ampgrad and PyTorch's lists both have runs in PyTorch's category
  // (tests/data/torch_autocast_lists.h), or differs on purpose and its reason in `ampgrad ops`
  // says so by naming PyTorch.
  auto category_of = [](torch_autocast::Policy p) {
    switch (p) {
      case torch_autocast::Policy::lower_precision_fp: return Category::lower;
      case torch_autocast::Policy::promote: return Category::promote;
      case torch_autocast::Policy::banned: return Category::banned;
      default: return Category::fp32;  // fp32, fp32_set_opt_dtype, fp32_append_dtype
    }
  };
  // PyTorch's names for ops ampgrad names as its Python API does.
  const std::map<std::string_view, std::string_view> alias = {{"linalg_multi_dot", "multi_dot"},
                                                              {"linalg_vector_norm", "norm"},
                                                              {"grid_sampler", "grid_sample"}};
  int both = 0;
  std::set<std::string_view> listed;
  for (const torch_autocast::Entry& e : torch_autocast::kCudaLists) {
    const std::string_view name = alias.count(e.op) ? alias.at(e.op) : e.op;
    listed.insert(name);
    const ag::OpInfo* op = ag::find_op(name);
    if (!op) continue;
    ++both;
    INFO(name << ": ampgrad " << ag::amp::category_name(op->category) << " (" << op->reason << ")");
    if (op->category != category_of(e.policy)) CHECK(op->reason.find("PyTorch") != std::string_view::npos);
    else SUCCEED();
  }
  CHECK(both >= 45);
  // Ops in none of the lists run as they come in PyTorch (autocast does not touch them);
  // ampgrad's that do otherwise say why, naming PyTorch too.
  for (const ag::OpInfo* op : op_table::library_ops()) {
    if (listed.count(op->name) || op->category == Category::passthrough) continue;
    INFO(op->name << ": ampgrad " << ag::amp::category_name(op->category) << ", in none of PyTorch's lists (" << op->reason << ")");
    CHECK(op->reason.find("PyTorch") != std::string_view::npos);
  }
  // op_table() lists every op, with its category.
  auto table = ag::amp::op_table();
  CHECK(table.size() == ag::op_registry().size());
  for (const auto& e : table) CHECK(!e.reason.empty());
}

TEST_CASE("each row of the op table under autocast equals the op on hand-cast inputs, bitwise", "[amp][cuda]") {
  for (ag::Device dev : devices()) {
    for (ag::DType ac : {ag::kFloat16, ag::kBFloat16}) {
      for (const op_table::Row& r : op_table::rows()) {
        if (!r.autocast) continue;
        const ag::OpInfo* op = ag::find_op(r.op);
        REQUIRE(op != nullptr);
        INFO(r.name() << " on " << dev.str() << " under " << ag::dtype_name(ac) << " autocast");
        ag::manual_seed(7);
        // Floating inputs in float32 on the device; mixed precision: the second floating input
        // that is not a buffer (running statistics) arrives in 16 bits.
        std::vector<ag::Tensor> in = r.draw(r.n);
        int floating = 0;
        for (size_t i = 0; i < in.size(); ++i) {
          ag::Tensor& t = in[i];
          t = t.to(dev, t.is_floating_point() ? ag::kFloat32 : t.dtype());
          if (t.is_floating_point() && !r.in[i].constant && floating++ == 1) t = t.to(ac);
        }
        ag::Tensor got;
        if (op->category == Category::banned && ac == ag::kFloat16) {
          ag::amp::AutocastGuard guard(dev.type, ac);
          CHECK_THROWS_WITH(r.run(in), Catch::Contains("unsafe to autocast to float16") &&
                                           Catch::Contains(std::string(op->alternative)));
          continue;
        }
        {
          ag::amp::AutocastGuard guard(dev.type, ac);
          got = r.run(in);
        }
        ag::Tensor want = r.run(cast_by_hand(op->category, ac, in));
        CHECK(got.dtype() == want.dtype());
        CHECK(bitwise_equal(got, want));
        if (op->category == Category::lower) CHECK(got.dtype() == ac);
        // fp32 ops never return 16 bits (an explicit dtype=float64, as cumsum takes, still wins).
        if (op->category == Category::fp32)
          CHECK((got.dtype() == ag::kFloat32 || got.dtype() == ag::kFloat64 || !got.is_floating_point()));
      }
    }
  }
}

TEST_CASE("the seed cases: mm goes to 16 bits, add stays float32, where promotes", "[amp][cuda]") {
  for (ag::Device dev : devices()) {
    INFO(dev.str());
    auto opt = ag::TensorOptions().device(dev);
    ag::Tensor a = ag::rand({8, 8}, opt);
    ag::amp::AutocastGuard autocast(dev.type, ag::kFloat16);
    CHECK(ag::mm(a, a).dtype() == ag::kFloat16);
    CHECK(ag::add(a, a).dtype() == ag::kFloat32);
    ag::Tensor h = ag::rand({8, 8}, opt).to(ag::kFloat16);
    ag::Tensor f = ag::rand({8, 8}, opt);
    ag::Tensor w = ag::where(ag::gt(f, 0.5), h, f - 1.5);
    CHECK(w.dtype() == ag::kFloat32);
    // float64 and integers are never cast.
    ag::Tensor d = ag::rand({4, 4}, ag::TensorOptions(ag::kFloat64).device(dev));
    CHECK(ag::mm(d, d).dtype() == ag::kFloat64);
    ag::Tensor i = ag::arange(6, ag::TensorOptions(ag::kInt64).device(dev));
    CHECK(ag::sum(i).dtype() == ag::kInt64);
  }
}

TEST_CASE("the guard nests, disables, restores, and survives exceptions", "[amp]") {
  using ag::amp::is_autocast_enabled;
  using ag::amp::get_autocast_dtype;
  CHECK_FALSE(is_autocast_enabled(ag::kCPU));
  {
    ag::amp::AutocastGuard outer(ag::kCPU);  // default on the CPU: bfloat16
    CHECK(is_autocast_enabled(ag::kCPU));
    CHECK(get_autocast_dtype(ag::kCPU) == ag::kBFloat16);
    CHECK_FALSE(is_autocast_enabled(ag::kCUDA));
    {
      ag::amp::AutocastGuard inner(ag::kCPU, ag::kFloat16);
      CHECK(get_autocast_dtype(ag::kCPU) == ag::kFloat16);
      {
        ag::amp::AutocastGuard off(ag::kCPU, std::nullopt, false);
        CHECK_FALSE(is_autocast_enabled(ag::kCPU));
        ag::Tensor a = ag::rand({3, 3});
        CHECK(ag::mm(a, a).dtype() == ag::kFloat32);
      }
      CHECK(is_autocast_enabled(ag::kCPU));
      CHECK(get_autocast_dtype(ag::kCPU) == ag::kFloat16);
    }
    CHECK(get_autocast_dtype(ag::kCPU) == ag::kBFloat16);
    try {
      ag::amp::AutocastGuard inner(ag::kCPU, ag::kFloat16, false);
      throw ag::Error("leaving the region by an exception");
    } catch (const ag::Error&) {
    }
    CHECK(is_autocast_enabled(ag::kCPU));
    CHECK(get_autocast_dtype(ag::kCPU) == ag::kBFloat16);
  }
  CHECK_FALSE(is_autocast_enabled(ag::kCPU));
  CHECK_THROWS_WITH(ag::amp::AutocastGuard(ag::kCPU, ag::kFloat32),
                    Catch::Contains("autocast dtype must be float16 or bfloat16"));
  // An op that throws inside autocast leaves the policy working for the next op.
  {
    ag::amp::AutocastGuard g(ag::kCPU, ag::kFloat16);
    ag::Tensor a = ag::rand({2, 3});
    CHECK_THROWS_WITH(ag::mm(a, a), Catch::Contains("mm: shapes [2, 3] and [2, 3] cannot be multiplied"));
    CHECK(ag::mm(a, a.t()).dtype() == ag::kFloat16);
  }
}

TEST_CASE("the cast cache casts a parameter once per region and empties after", "[amp]") {
  ag::Tensor w = ag::rand({4, 4}).requires_grad_();
  ag::Tensor x = ag::rand({2, 4});
  {
    ag::amp::AutocastGuard g(ag::kCPU, ag::kFloat16);
    ag::Tensor y1 = ag::linear(x, w);
    auto s1 = ag::amp::cast_cache_stats();
    CHECK(s1.entries == 1);  // w cached; x is no leaf requiring grad, so it is cast anew
    CHECK(s1.hits == 0);
    ag::Tensor y2 = ag::linear(x, w);
    auto s2 = ag::amp::cast_cache_stats();
    CHECK(s2.hits == 1);
    CHECK(s2.entries == 1);
    CHECK(s2.bytes_converted == 16 * 2 + 2 * (8 * 2));  // w once, x twice, in float16
    {
      ag::amp::AutocastGuard nested(ag::kCPU, ag::kFloat16);
      ag::linear(x, w);
      CHECK(ag::amp::cast_cache_stats().hits == 2);  // nested regions share the outer cache
    }
    CHECK(ag::amp::cast_cache_stats().entries == 1);
  }
  CHECK(ag::amp::cast_cache_stats().entries == 0);
}

TEST_CASE("fp32 parameters get fp32 gradients that match an fp32 run", "[amp][cuda]") {
  for (ag::Device dev : devices()) {
    INFO(dev.str());
    ag::manual_seed(3);
    auto opt = ag::TensorOptions().device(dev);
    ag::Tensor w1 = (ag::rand({16, 8}, opt) - 0.5).detach().requires_grad_();
    ag::Tensor w2 = (ag::rand({4, 16}, opt) - 0.5).detach().requires_grad_();
    ag::Tensor x = ag::rand({32, 8}, opt);
    auto loss_fn = [&] { return ag::log_softmax(ag::linear(ag::relu(ag::linear(x, w1)), w2), 1).sum() * -0.01; };
    loss_fn().backward();
    std::vector<double> g1 = w1.grad().to_vector<double>(), g2 = w2.grad().to_vector<double>();
    w1.set_grad({});
    w2.set_grad({});
    {
      ag::amp::AutocastGuard g(dev.type, ag::kFloat16);
      ag::Tensor loss = loss_fn();
      CHECK(loss.dtype() == ag::kFloat32);  // sum is an fp32 op
      loss.backward();
    }
    REQUIRE(w1.grad().dtype() == ag::kFloat32);
    REQUIRE(w2.grad().dtype() == ag::kFloat32);
    auto check = [](const std::vector<double>& got, const std::vector<double>& want) {
      double worst = 0, scale = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        worst = std::max(worst, std::fabs(got[i] - want[i]));
        scale = std::max(scale, std::fabs(want[i]));
      }
      CHECK(worst <= 1e-2 * scale + 1e-4);  // fp16 inputs: ~1e-3 relative per product
      CHECK(scale > 0);
    };
    check(w1.grad().to_vector<double>(), g1);
    check(w2.grad().to_vector<double>(), g2);
  }
}

TEST_CASE("cross_entropy under autocast reads float16 logits without a cast", "[amp][cuda]") {
  for (ag::Device dev : devices()) {
    INFO(dev.str());
    ag::manual_seed(5);
    auto opt = ag::TensorOptions().device(dev);
    ag::Tensor logits = (ag::randn({16, 10}, opt) * 3).to(ag::kFloat16).detach().requires_grad_();
    ag::Tensor target = (ag::rand({16}, opt) * 10).to(ag::kInt64);
    ag::amp::Trace trace;
    ag::Tensor loss;
    {
      ag::amp::AutocastGuard g(dev.type, ag::kFloat16);
      loss = ag::cross_entropy(logits, target);
    }
    REQUIRE(trace.records().size() == 1);
    CHECK(trace.records()[0].casts == 0);
    CHECK(trace.records()[0].read_16bit == 1);
    CHECK(loss.dtype() == ag::kFloat32);
    loss.backward();
    REQUIRE(logits.grad().dtype() == ag::kFloat16);
    // The same computation with the cast written out: the same loss up to float32 rounding
    // (a row may be summed in another order), gradients within one float16 rounding.
    ag::Tensor l2 = logits.detach().requires_grad_();
    ag::Tensor ref = ag::cross_entropy(l2.to(ag::kFloat32), target);
    ref.backward();
    check_close(loss, {ref.item<double>()}, 0, 4 * eps_of(ag::kFloat32));
    check_close(logits.grad(), l2.grad().to_vector<double>(), 1e-7, eps_of(ag::kFloat16));
  }
}

// Note [Widening arithmetic] in ops/binary.cpp: float32 with float16 or bfloat16 in one
// kernel on CUDA, bit for bit the cast-then-float32 result, gradients in each input's dtype.
TEST_CASE("float32 plus a 16-bit tensor in one kernel: the cast's result, bit for bit", "[amp][cuda]") {
  if (skip_without_cuda()) return;
  const ag::Device cuda(ag::kCUDA);
  ag::manual_seed(9);
  for (ag::DType low : {ag::kFloat16, ag::kBFloat16}) {
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{4099}}) {
      CAPTURE(ag::dtype_name(low), n);
      const ag::Tensor a0 = ag::randn({n}).to(cuda), b0 = (ag::randn({n}) * 3.0).to(cuda).to(low);
      for (int which = 0; which < 3; ++which) {
        for (bool swap : {false, true}) {
          CAPTURE(which, swap);
          ag::Tensor a = a0.clone().requires_grad_(), b = b0.clone().requires_grad_();
          auto f = [&](const ag::Tensor& x, const ag::Tensor& y) {
            return which == 0 ? x + y : (which == 1 ? x - y : x * y);
          };
          ag::Tensor out = swap ? f(b, a) : f(a, b);
          REQUIRE(out.dtype() == ag::kFloat32);
          const ag::Tensor bw = b0.to(ag::kFloat32);
          const ag::Tensor ref = swap ? f(bw, a0) : f(a0, bw);
          CHECK(out.to_vector<double>() == ref.to_vector<double>());
          out.backward(ag::ones({n}, ag::TensorOptions().device(cuda)) * 0.75);
          REQUIRE(b.grad().dtype() == low);
          REQUIRE(a.grad().dtype() == ag::kFloat32);
          ag::Tensor ar = a0.clone().requires_grad_(), br = bw.clone().requires_grad_();
          (swap ? f(br, ar) : f(ar, br)).backward(ag::ones({n}, ag::TensorOptions().device(cuda)) * 0.75);
          CHECK(a.grad().to_vector<double>() == ar.grad().to_vector<double>());
          CHECK(b.grad().to_vector<double>() == br.grad().to(low).to_vector<double>());
        }
      }
    }
  }
}

// Note [Wide weight gradients]: the weight and bias gradients of an autocast linear over
// float32 parameters come out of the GEMM in float32, not rounded to float16 on the way.
TEST_CASE("autocast linear writes float32 weight gradients straight from the GEMM", "[amp][cuda]") {
  if (skip_without_cuda()) return;
  ag::manual_seed(fresh_seed());
  auto opt = ag::TensorOptions().device(ag::kCUDA);
  const int64_t rows = 64, in = 96, out = 48;
  ag::Tensor w = (ag::randn({out, in}, opt) * 0.1).detach().requires_grad_();
  ag::Tensor b = (ag::randn({out}, opt) * 0.1).detach().requires_grad_();
  ag::Tensor x = ag::randn({rows, in}, opt);
  ag::Tensor gy = ag::randn({rows, out}, opt);
  for (bool with_bias : {true, false}) {
    INFO("bias " << with_bias);
    w.set_grad({});
    b.set_grad({});
    {
      ag::amp::AutocastGuard g(ag::kCUDA, ag::kFloat16);
      ag::Tensor y = ag::linear(x, w, with_bias ? b : ag::Tensor());
      REQUIRE(y.dtype() == ag::kFloat16);
      (y * gy).sum().backward();  // y's gradient: gy rounded to float16
    }
    REQUIRE(w.grad().dtype() == ag::kFloat32);
    // float64 reference from the float16 operands the GEMM read.
    const std::vector<double> g16 = gy.to(ag::kFloat16).to_vector<double>(), x16 = x.to(ag::kFloat16).to_vector<double>();
    std::vector<double> ref_w(static_cast<size_t>(out * in), 0.0), ref_b(static_cast<size_t>(out), 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < out; ++o) {
        ref_b[o] += g16[r * out + o];
        for (int64_t i = 0; i < in; ++i) ref_w[o * in + i] += g16[r * out + o] * x16[r * in + i];
      }
    // float32 accumulation over 64 terms: ~1e-6 of the largest entry. A float16 result would be
    // off by up to 2^-12 (2.4e-4) of each entry, and fail.
    double big = 0;
    for (double v : ref_w) big = std::max(big, std::fabs(v));
    check_close(w.grad(), ref_w, 2e-5 * big, 0);
    if (with_bias) {
      REQUIRE(b.grad().dtype() == ag::kFloat32);
      double bb = 0;
      for (double v : ref_b) bb = std::max(bb, std::fabs(v));
      check_close(b.grad(), ref_b, 2e-5 * bb, 0);
    }
  }
}

TEST_CASE("the trace records ops, casts, cache hits and dtypes", "[amp]") {
  ag::Tensor w = ag::rand({4, 4}).requires_grad_();
  ag::Tensor x = ag::rand({2, 4});
  ag::amp::Trace trace;
  {
    ag::amp::AutocastGuard g(ag::kCPU, ag::kFloat16);
    ag::Tensor h = ag::linear(x, w);
    ag::Tensor y = ag::linear(h, w);
    ag::Tensor s = ag::softmax(y, 1);
    ag::Tensor z = ag::add(s, x.narrow(1, 0, 4));
  }
  const auto& r = trace.records();
  REQUIRE(r.size() == 5);  // linear, linear, softmax, narrow->slice, add; the casts inside are not listed
  CHECK(r[0].op == "linear");
  CHECK(r[0].category == Category::lower);
  CHECK(r[0].input_dtypes == std::vector<ag::DType>{ag::kFloat32, ag::kFloat32});
  CHECK(r[0].chosen_dtype == ag::kFloat16);
  CHECK(r[0].output_dtype == ag::kFloat16);
  CHECK(r[0].casts == 2);
  CHECK(r[0].cache_hits == 0);
  CHECK(r[0].bytes_converted == 2 * 4 * 2 + 4 * 4 * 2);
  CHECK(r[1].casts == 0);
  CHECK(r[1].cache_hits == 1);  // w again, from the cache
  CHECK(r[2].op == "softmax");
  CHECK(r[2].chosen_dtype == ag::kFloat32);
  CHECK(r[2].output_dtype == ag::kFloat32);
  CHECK(r[2].casts == 0);  // its float16 input is read as it is (Note [Reading 16-bit inputs])
  CHECK(r[2].read_16bit == 1);
  CHECK(r[3].op == "slice");
  CHECK(r[4].op == "add");
  CHECK_FALSE(r[4].chosen_dtype.has_value());
  CHECK(r[4].output_dtype == ag::kFloat32);
}

// Two rules as PyTorch 2.11's: index_copy is on no autocast list, so a float16 input and a
// float32 source are refused under autocast as outside it; lstm_cell casts a 16-bit cell state
// of the other 16-bit dtype (a float32 one stays float32, Note [Cell state precision]).
TEST_CASE("index_copy and lstm_cell under autocast, as PyTorch 2.11", "[amp]") {
  const ag::Tensor a16 = ag::randn({4, 3}).to(ag::kFloat16), b32 = ag::randn({2, 3});
  const ag::Tensor idx = ag::tensor(std::vector<int64_t>{0, 2});
  {
    ag::amp::AutocastGuard guard(ag::kCPU, ag::kBFloat16);
    CHECK_THROWS_WITH(ag::index_copy(a16, 0, idx, b32),
                      Catch::Contains("index_copy: input float16 [4, 3] on cpu and source float32 [2, 3] on cpu must "
                                      "have the same dtype"));
    CHECK(ag::index_copy(a16, 0, idx, b32.to(ag::kFloat16)).dtype() == ag::kFloat16);  // no cast either way
  }
  ag::manual_seed(3);
  const ag::Tensor x = ag::randn({2, 5}), hx = ag::randn({2, 4}), w_ih = ag::randn({16, 5}), w_hh = ag::randn({16, 4});
  const ag::Tensor cx16 = ag::randn({2, 4}).to(ag::kFloat16), cx32 = ag::randn({2, 4});
  ag::amp::AutocastGuard guard(ag::kCPU, ag::kBFloat16);
  const auto [hy, cy] = ag::lstm_cell(x, hx, cx16, w_ih, w_hh);
  CHECK(hy.dtype() == ag::kBFloat16);
  CHECK(cy.dtype() == ag::kBFloat16);
  // The same as with the state cast by hand.
  const auto [hy_ref, cy_ref] = ag::lstm_cell(x, hx, cx16.to(ag::kBFloat16), w_ih, w_hh);
  CHECK(hy.to_vector<double>() == hy_ref.to_vector<double>());
  CHECK(cy.to_vector<double>() == cy_ref.to_vector<double>());
  const auto [hy32, cy32] = ag::lstm_cell(x, hx, cx32, w_ih, w_hh);
  CHECK(hy32.dtype() == ag::kBFloat16);
  CHECK(cy32.dtype() == ag::kFloat32);  // the state keeps float32
}

// A program's own op, defined as ampgrad defines its own (Note [Defining an op] in
// ops/define_op.h): its record's category is all autocast needs.
namespace {
const ag::OpInfo kTestSquare{"test_square", Category::fp32, true, "a test op: squares overflow float16"};
ag::Tensor test_square(const ag::Tensor& x0) {
  ag::Tensor x = x0;
  ag::OpScope scope(kTestSquare, x);
  return scope.finish(x * x);
}
}  // namespace

TEST_CASE("a program's own op: autocast casts by its category, the trace and the op table show it", "[amp]") {
  const ag::Tensor h = ag::tensor({1.5f, -2.f, 300.f}).to(ag::kBFloat16).requires_grad_();
  ag::Tensor y;
  std::vector<ag::amp::OpRecord> records;
  {
    ag::amp::Trace trace;
    ag::amp::AutocastGuard guard(ag::kCPU, ag::kBFloat16);
    y = test_square(h);
    records = trace.records();
  }
  CHECK(y.dtype() == ag::kFloat32);  // computed in float32, as the category says
  check_close(y, {2.25, 4, 90000}, 0, 0);
  REQUIRE(records.size() == 1);  // the muls inside are not the caller's ops
  CHECK(records[0].op == "test_square");
  CHECK(records[0].category == Category::fp32);
  REQUIRE(records[0].chosen_dtype.has_value());
  CHECK(*records[0].chosen_dtype == ag::kFloat32);
  CHECK(records[0].casts == 1);
  y.sum().backward();  // the gradient comes back through the cast in the input's dtype
  CHECK(h.grad().dtype() == ag::kBFloat16);
  check_close(h.grad(), {3, -4, 600}, 0, 0);
  bool listed = false;
  for (const auto& e : ag::amp::op_table()) listed |= e.name == "test_square" && e.category == Category::fp32;
  CHECK(listed);
  CHECK_THAT(ag::amp::format_op_table(ag::amp::op_table()), Catch::Contains("test_square"));
}
