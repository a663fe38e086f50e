// Tests of core/: dtype traits and promotion, the default dtype, tensor geometry and views,
// version counters, factories, random draws and printing (fp16/bf16 conversion: test_half.cpp).
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>


#include "common.h"

namespace {
std::vector<double> as_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }
}  // namespace

// ---- dtypes ----------------------------------------------------------------------------
TEST_CASE("dtype traits: item sizes and names", "[core][dtype]") {
  using ag::DType;
  struct Row {
    DType t;
    size_t size;
    const char* name;
    bool floating;
  };
  for (const Row& r : {Row{DType::Float32, 4, "float32", true}, Row{DType::Float16, 2, "float16", true},
                       Row{DType::BFloat16, 2, "bfloat16", true}, Row{DType::Float64, 8, "float64", true},
                       Row{DType::Int64, 8, "int64", false}, Row{DType::Int32, 4, "int32", false},
                       Row{DType::Bool, 1, "bool", false}, Row{DType::UInt8, 1, "uint8", false}}) {
    INFO(r.name);
    CHECK(ag::itemsize(r.t) == r.size);
    CHECK(ag::dtype_name(r.t) == r.name);
    CHECK(ag::is_floating(r.t) == r.floating);
    CHECK(ag::visit_dtype(r.t, [](auto tag) { return sizeof(tag); }) == r.size);
    CHECK(ag::visit_dtype(r.t, [](auto tag) { return ag::dtype_of<decltype(tag)>(); }) == r.t);
    CHECK(ag::zeros({3}, r.t).nbytes() == 3 * r.size);
  }
  CHECK(ag::is_reduced_float(ag::kFloat16));
  CHECK(ag::is_reduced_float(ag::kBFloat16));
  CHECK_FALSE(ag::is_reduced_float(ag::kFloat32));
}

TEST_CASE("promote_types matches torch.promote_types", "[core][dtype]") {
  using ag::DType;
  const DType f32 = DType::Float32, f16 = DType::Float16, bf16 = DType::BFloat16, f64 = DType::Float64,
              i64 = DType::Int64, i32 = DType::Int32, b = DType::Bool, u8 = DType::UInt8;
  const DType order[8] = {f32, f16, bf16, f64, i64, i32, b, u8};
  // torch.promote_types(order[i], order[j]), written out by hand.
  const DType table[8][8] = {
      /* f32  */ {f32, f32, f32, f64, f32, f32, f32, f32},
      /* f16  */ {f32, f16, f32, f64, f16, f16, f16, f16},
      /* bf16 */ {f32, f32, bf16, f64, bf16, bf16, bf16, bf16},
      /* f64  */ {f64, f64, f64, f64, f64, f64, f64, f64},
      /* i64  */ {f32, f16, bf16, f64, i64, i64, i64, i64},
      /* i32  */ {f32, f16, bf16, f64, i64, i32, i32, i32},
      /* bool */ {f32, f16, bf16, f64, i64, i32, b, u8},
      /* u8   */ {f32, f16, bf16, f64, i64, i32, u8, u8},
  };
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) {
      INFO(ag::dtype_name(order[i]) << " + " << ag::dtype_name(order[j]));
      CHECK(ag::promote_types(order[i], order[j]) == table[i][j]);
    }
  // The ones the brief names, spelled out.
  CHECK(ag::promote_types(f16, f32) == f32);
  CHECK(ag::promote_types(f16, bf16) == f32);
  CHECK(ag::promote_types(bf16, f64) == f64);
  CHECK(ag::promote_types(i64, f16) == f16);
  CHECK(ag::promote_types(b, i32) == i32);
  CHECK(ag::promote_types(u8, i32) == i32);
}

TEST_CASE("binary ops promote like PyTorch, with Python scalars and 0-dim tensors", "[core][dtype]") {
  ag::manual_seed(3);
  const ag::Tensor h = ag::rand({4}).to(ag::kFloat16);
  const ag::Tensor bf = ag::rand({4}).to(ag::kBFloat16);
  const ag::Tensor f = ag::rand({4});
  const ag::Tensor i = ag::tensor(std::vector<int64_t>{3, -1, 7, 2});
  const ag::Tensor i32 = i.to(ag::kInt32);

  SECTION("tensor with a Python scalar") {
    const ag::Tensor a = ag::add(h, 2.5);
    CHECK(a.dtype() == ag::kFloat16);
    std::vector<double> want;
    for (float v : h.to_vector<float>()) want.push_back(static_cast<float>(ag::Half(v + 2.5f)));
    check_close(a, want, 0, 0);

    const ag::Tensor b = ag::add(i, 2.5);
    CHECK(b.dtype() == ag::kFloat32);
    check_close(b, {5.5, 1.5, 9.5, 4.5}, 0, 0);

    const ag::Tensor c = ag::add(i, 2);
    CHECK(c.dtype() == ag::kInt64);
    CHECK(c.to_vector<int64_t>() == std::vector<int64_t>{5, 1, 9, 4});

    CHECK(ag::add(i32, 2).dtype() == ag::kInt32);
    CHECK(ag::mul(bf, 3.0).dtype() == ag::kBFloat16);
    CHECK((h * 0.5).dtype() == ag::kFloat16);
    CHECK((2 - i).dtype() == ag::kInt64);
    CHECK((i * 0.5).dtype() == ag::kFloat32);
    CHECK((i / 2).dtype() == ag::kFloat32);  // true division
    check_close(i / 2, {1.5, -0.5, 3.5, 1.0}, 0, 0);
  }
  SECTION("0-dim tensors do not upcast dimensioned ones of the same category") {
    const ag::Tensor z32 = ag::tensor(1.75f);
    REQUIRE(z32.dim() == 0);
    const ag::Tensor s = ag::add(z32, h);
    CHECK(s.dtype() == ag::kFloat16);
    CHECK(ag::add(h, z32).dtype() == ag::kFloat16);
    CHECK(ag::add(ag::scalar_tensor(2.0, ag::kFloat64), bf).dtype() == ag::kBFloat16);
    // a higher category wins even from a 0-dim tensor
    CHECK(ag::add(i, z32).dtype() == ag::kFloat32);
    // two 0-dim tensors promote normally
    CHECK(ag::add(z32, ag::scalar_tensor(1, ag::kFloat64)).dtype() == ag::kFloat64);
  }
  SECTION("tensor with tensor") {
    CHECK(ag::add(h, f).dtype() == ag::kFloat32);
    CHECK(ag::add(h, bf).dtype() == ag::kFloat32);
    CHECK(ag::add(bf, f.to(ag::kFloat64)).dtype() == ag::kFloat64);
    CHECK(ag::add(i, h).dtype() == ag::kFloat16);
    CHECK(ag::add(i, i32).dtype() == ag::kInt64);
    const ag::Tensor sum = ag::add(h, f);
    std::vector<double> want;
    const auto hv = h.to_vector<float>(), fv = f.to_vector<float>();
    for (size_t k = 0; k < hv.size(); ++k) want.push_back(static_cast<double>(hv[k] + fv[k]));
    check_close(sum, want, 0, 0);
  }
}

// ---- tensors, views, versions ----------------------------------------------------------
TEST_CASE("tensor geometry: sizes, strides, offset", "[core][tensor]") {
  const ag::Tensor a = ag::arange(24, ag::kFloat32).view({2, 3, 4});
  CHECK(a.sizes() == ag::Shape{2, 3, 4});
  CHECK(a.strides() == ag::Shape{12, 4, 1});
  CHECK(a.storage_offset() == 0);
  CHECK(a.dim() == 3);
  CHECK(a.numel() == 24);
  CHECK(a.size(-1) == 4);
  CHECK(a.stride(0) == 12);
  CHECK(a.is_contiguous());
  CHECK(a.desc() == "float32 [2, 3, 4] on cpu");

  const ag::Tensor s = a.select(0, 1);  // [3, 4] at offset 12
  CHECK(s.sizes() == ag::Shape{3, 4});
  CHECK(s.strides() == ag::Shape{4, 1});
  CHECK(s.storage_offset() == 12);

  const ag::Tensor n = a.narrow(2, 1, 2);  // [2, 3, 2] at offset 1
  CHECK(n.sizes() == ag::Shape{2, 3, 2});
  CHECK(n.strides() == ag::Shape{12, 4, 1});
  CHECK(n.storage_offset() == 1);
  CHECK_FALSE(n.is_contiguous());
  check_close(n.select(0, 1).select(0, 2), {21, 22}, 0, 0);

  const ag::Tensor st = a.slice(1, 0, 3, 2);  // rows 0 and 2
  CHECK(st.sizes() == ag::Shape{2, 2, 4});
  CHECK(st.strides() == ag::Shape{12, 8, 1});
  check_close(st.select(0, 0), {0, 1, 2, 3, 8, 9, 10, 11}, 0, 0);

  const ag::Tensor p = a.permute({2, 0, 1});
  CHECK(p.sizes() == ag::Shape{4, 2, 3});
  CHECK(p.strides() == ag::Shape{1, 12, 4});

  const ag::Tensor e = ag::tensor({1.f, 2.f, 3.f}).unsqueeze(0).expand({4, 3});
  CHECK(e.strides() == ag::Shape{0, 1});
  check_close(e, {1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3}, 0, 0);

  const ag::Tensor zero_d = ag::tensor(3.5f);
  CHECK(zero_d.dim() == 0);
  CHECK(zero_d.numel() == 1);
  CHECK(zero_d.strides().empty());
}

TEST_CASE("views share storage with their base", "[core][tensor]") {
  ag::manual_seed(5);
  ag::Tensor base = ag::rand({4, 5});
  const std::vector<float> before = base.to_vector<float>();

  SECTION("fill_ through a slice") {
    ag::Tensor col = base.slice(1, 1, 3);  // columns 1, 2
    CHECK(col.storage() == base.storage());
    col.fill_(-7.25);
    const std::vector<float> after = base.to_vector<float>();
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 5; ++c) {
        const float want = (c == 1 || c == 2) ? -7.25f : before[r * 5 + c];
        CHECK(after[r * 5 + c] == want);
      }
  }
  SECTION("copy_ into a transposed select") {
    ag::Tensor src = ag::rand({4});
    ag::Tensor colv = base.t().select(0, 3);  // column 3, stride 5
    CHECK(colv.strides() == ag::Shape{5});
    colv.copy_(src);
    const std::vector<float> after = base.to_vector<float>();
    const std::vector<float> s = src.to_vector<float>();
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 5; ++c) CHECK(after[r * 5 + c] == (c == 3 ? s[r] : before[r * 5 + c]));
  }
  SECTION("copy_ converts dtype and broadcasts") {
    ag::Tensor row = base.select(0, 2);
    row.copy_(ag::tensor(std::vector<double>{0.1}, {1}));
    const std::vector<float> after = base.to_vector<float>();
    for (int c = 0; c < 5; ++c) CHECK(after[2 * 5 + c] == 0.1f);
    CHECK(after[0] == before[0]);
  }
  SECTION("in-place arithmetic on a view") {
    ag::Tensor v = base.view({20}).narrow(0, 5, 5);  // row 1
    v.mul_(2.0);
    const std::vector<float> after = base.to_vector<float>();
    for (int c = 0; c < 5; ++c) CHECK(after[5 + c] == 2 * before[5 + c]);
    CHECK(after[4] == before[4]);
    CHECK(after[10] == before[10]);
  }
  SECTION("detach shares storage") {
    ag::Tensor d = base.detach();
    d.add_(1.0);
    CHECK(base.to_vector<float>()[0] == before[0] + 1.0f);
  }
}

TEST_CASE("is_contiguous and contiguous()", "[core][tensor]") {
  ag::manual_seed(6);
  const ag::Tensor a = ag::rand({3, 4});
  CHECK(a.is_contiguous());
  const ag::Tensor t = a.transpose(0, 1);
  CHECK_FALSE(t.is_contiguous());
  CHECK(t.strides() == ag::Shape{1, 4});
  const ag::Tensor c = t.contiguous();
  CHECK(c.is_contiguous());
  CHECK(c.strides() == ag::Shape{3, 1});
  CHECK(c.storage() != a.storage());  // a copy
  const auto av = a.to_vector<float>(), cv = c.to_vector<float>();
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) CHECK(cv[j * 3 + i] == av[i * 4 + j]);
  // contiguous() of a contiguous tensor is the tensor itself
  CHECK(a.contiguous().storage() == a.storage());
  // size-1 dims do not break contiguity; a transpose of two size-1 dims stays contiguous
  CHECK(ag::rand({1, 3}).transpose(0, 1).is_contiguous());
  CHECK(t.transpose(0, 1).is_contiguous());
  // a narrowed row range is contiguous, a column range is not
  CHECK(a.narrow(0, 1, 2).is_contiguous());
  CHECK_FALSE(a.narrow(1, 1, 2).is_contiguous());
  // reshape of a non-contiguous tensor copies, of a contiguous one views
  CHECK(t.reshape({12}).storage() != a.storage());
  CHECK(a.reshape({12}).storage() == a.storage());
  check_close(t.reshape({12}), as_double(t.contiguous().to_vector<float>()), 0, 0);
}

TEST_CASE("version counter: bumped by in-place ops, shared by views", "[core][tensor][version]") {
  ag::manual_seed(7);
  ag::Tensor a = ag::rand({2, 3});
  ag::Tensor v = a.select(0, 1);
  ag::Tensor w = a.t();
  const uint32_t v0 = a.version();
  CHECK(v.version() == v0);

  v.add_(1.0);
  CHECK(a.version() == v0 + 1);
  CHECK(w.version() == v0 + 1);
  a.fill_(2.0);
  CHECK(v.version() == v0 + 2);
  a.mul_(ag::rand({2, 3}));
  a.sub_(ag::rand({3}));
  a.div_(4.0);
  a.zero_();
  a.copy_(ag::rand({2, 3}));
  a.add_(ag::rand({2, 3}), 0.5);
  CHECK(w.version() == v0 + 8);
  // out-of-place ops leave it alone
  const ag::Tensor b = a * 2 + a.exp();
  (void)b;
  CHECK(a.version() == v0 + 8);
  // a copy has its own counter
  ag::Tensor c = a.clone();
  const uint32_t c0 = c.version();
  c.add_(1.0);
  CHECK(c.version() == c0 + 1);
  CHECK(a.version() == v0 + 8);
}

// ---- factories -------------------------------------------------------------------------
TEST_CASE("factories: tensor, zeros, ones, full, arange", "[core][factory]") {
  SECTION("tensor(values, shape)") {
    const ag::Tensor t = ag::tensor({1.5f, -2.f, 3.25f, 4.f, 5.f, 6.5f}, {2, 3});
    CHECK(t.dtype() == ag::kFloat32);
    CHECK(t.sizes() == ag::Shape{2, 3});
    check_close(t, {1.5, -2, 3.25, 4, 5, 6.5}, 0, 0);
    CHECK(t.select(0, 1).select(0, 2).item<float>() == 6.5f);
    const ag::Tensor d = ag::tensor(std::vector<double>{0.1, 0.2}, {2});
    CHECK(d.dtype() == ag::kFloat64);
    CHECK(d.to_vector<double>() == std::vector<double>{0.1, 0.2});
    const ag::Tensor i = ag::tensor(std::vector<int64_t>{0, 3, 1});
    CHECK(i.dtype() == ag::kInt64);
    CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{0, 3, 1});
    const ag::Tensor b = ag::tensor(std::vector<bool>{true, false, true}, {3});
    CHECK(b.dtype() == ag::kBool);
    CHECK(b.to_vector<int64_t>() == std::vector<int64_t>{1, 0, 1});
    const ag::Tensor h = ag::tensor({0.1f, 65504.f, 1e5f}, ag::kFloat16);
    CHECK(h.dtype() == ag::kFloat16);
    check_close(h, {0.0999755859375, 65504, INFINITY}, 0, 0);  // 0.1 rounded to float16 (0x2e66)
    // a braced list is 1-D like torch.tensor([2.5]); a bare float is 0-dim like torch.tensor(2.5)
    CHECK(ag::tensor({2.5f}).sizes() == ag::Shape{1});
    CHECK(ag::tensor({1.f, 2.f, 3.f, 4.f}, {2, 2}).sizes() == ag::Shape{2, 2});
    const ag::Tensor s = ag::tensor(2.5f);
    CHECK(s.dim() == 0);
    CHECK(s.item<float>() == 2.5f);
  }
  SECTION("zeros, ones, full in each dtype") {
    for (ag::DType dt : {ag::kFloat32, ag::kFloat16, ag::kBFloat16, ag::kFloat64, ag::kInt64, ag::kInt32,
                         ag::kUInt8}) {
      INFO(ag::dtype_name(dt));
      const ag::Tensor z = ag::zeros({2, 3}, dt);
      const ag::Tensor o = ag::ones({2, 3}, dt);
      const ag::Tensor f = ag::full({3, 2}, 7, dt);
      CHECK(z.dtype() == dt);
      CHECK(o.dtype() == dt);
      CHECK(f.dtype() == dt);
      CHECK(f.sizes() == ag::Shape{3, 2});
      check_close(z, std::vector<double>(6, 0.0), 0, 0);
      check_close(o, std::vector<double>(6, 1.0), 0, 0);
      check_close(f, std::vector<double>(6, 7.0), 0, 0);
    }
    check_close(ag::full({2}, -1.5, ag::kFloat16), {-1.5, -1.5}, 0, 0);
    check_close(ag::full({2}, 0.1, ag::kFloat64), {0.1, 0.1}, 0, 0);
    const ag::Tensor fb = ag::full({2}, true, ag::kBool);
    CHECK(fb.to_vector<int64_t>() == std::vector<int64_t>{1, 1});
    const ag::Tensor fl = ag::full_like(ag::rand({2, 2}, ag::kFloat16), 3);
    CHECK(fl.dtype() == ag::kFloat16);
    check_close(fl, {3, 3, 3, 3}, 0, 0);
  }
  SECTION("arange") {
    const ag::Tensor a = ag::arange(5);
    CHECK(a.dtype() == ag::kInt64);
    CHECK(a.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4});
    const ag::Tensor b = ag::arange(2, 11, 3);
    CHECK(b.to_vector<int64_t>() == std::vector<int64_t>{2, 5, 8});
    const ag::Tensor c = ag::arange(1.0, 0.0, -0.25, ag::kFloat32);
    CHECK(c.dtype() == ag::kFloat32);
    check_close(c, {1.0, 0.75, 0.5, 0.25}, 0, 0);
    const ag::Tensor d = ag::arange(0, 1, 0.1, ag::kFloat64);
    REQUIRE(d.numel() == 10);
    check_close(d, {0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9}, 1e-15, 0);
    CHECK(ag::arange(0, ag::kFloat32).numel() == 0);
  }
}

// The seed's test01: print(torch.get_default_dtype()); print(torch.tensor(3.14).dtype);
// torch.set_default_dtype(torch.float16); print(torch.tensor(3.14).dtype).
TEST_CASE("default dtype: the seed's test01, and every factory follows it", "[core][dtype]") {
  REQUIRE(ag::get_default_dtype() == ag::kFloat32);
  std::string printed;
  {
    printed += fmt::format("{}\n", ag::dtype_name(ag::get_default_dtype()));
    printed += fmt::format("{}\n", ag::dtype_name(ag::tensor(3.14f).dtype()));
    ag::DefaultDTypeGuard fp16(ag::kFloat16);
    printed += fmt::format("{}\n", ag::dtype_name(ag::tensor(3.14f).dtype()));
    CHECK(ag::tensor(3.14f).item<float>() == Approx(3.140625));  // 3.14 rounded to float16
  }
  CHECK(printed == "float32\nfloat32\nfloat16\n");
  CHECK(ag::get_default_dtype() == ag::kFloat32);  // the guard restored it

  SECTION("floating dtypes only") {
    CHECK_THROWS_WITH(ag::set_default_dtype(ag::kInt64), Catch::Contains("set_default_dtype") && Catch::Contains("int64"));
    CHECK(ag::get_default_dtype() == ag::kFloat32);
  }
  SECTION("factories, promotions and layers under float64") {
    ag::DefaultDTypeGuard f64(ag::kFloat64);
    CHECK(ag::zeros({2}).dtype() == ag::kFloat64);
    CHECK(ag::ones({2}).dtype() == ag::kFloat64);
    CHECK(ag::full({2}, 1.5).dtype() == ag::kFloat64);
    CHECK(ag::randn({2}).dtype() == ag::kFloat64);
    CHECK(ag::rand({2}).dtype() == ag::kFloat64);
    CHECK(ag::tensor({1.f, 2.f}).dtype() == ag::kFloat64);
    CHECK(ag::arange(0.0, 1.0, 0.5).dtype() == ag::kFloat64);
    CHECK(ag::arange(3).dtype() == ag::kInt64);  // integer bounds stay int64
    CHECK(ag::tensor(std::vector<int64_t>{1, 2}).dtype() == ag::kInt64);
    CHECK(ag::zeros({2}, ag::kFloat32).dtype() == ag::kFloat32);  // an explicit dtype wins
    const ag::Tensor i = ag::tensor(std::vector<int64_t>{1, 4});
    CHECK(ag::sqrt(i).dtype() == ag::kFloat64);  // as torch.sqrt(int tensor)
    CHECK((i * 2.5).dtype() == ag::kFloat64);
    CHECK((i / i).dtype() == ag::kFloat64);
    CHECK(ag::sqrt(i).to_vector<double>()[1] == 2.0);
    ag::nn::Linear lin(3, 2);
    CHECK(lin.weight.dtype() == ag::kFloat64);
    CHECK(lin.bias.dtype() == ag::kFloat64);
    // Internal buffers keep their own dtypes: a loss and its backward run as before.
    ag::Tensor x = ag::randn({4, 3}).requires_grad_(true);
    ag::Tensor loss = ag::cross_entropy(lin.forward(x), ag::tensor(std::vector<int64_t>{0, 1, 1, 0}));
    CHECK(loss.dtype() == ag::kFloat64);
    loss.backward();
    CHECK(x.grad().dtype() == ag::kFloat64);
  }
}

TEST_CASE("rand and randn: ranges, moments, seeding", "[core][random]") {
  const int64_t n = 100000;
  SECTION("rand is uniform in [0, 1)") {
    for (ag::DType dt : {ag::kFloat32, ag::kFloat64, ag::kFloat16, ag::kBFloat16}) {
      INFO(ag::dtype_name(dt));
      ag::manual_seed(42);
      const ag::Tensor u = ag::rand({n}, dt);
      CHECK(u.dtype() == dt);
      const std::vector<double> v = u.to_vector<double>();
      double sum = 0, sq = 0, lo = 1, hi = 0;
      int64_t below_tenth = 0;
      for (double x : v) {
        sum += x;
        sq += x * x;
        lo = std::min(lo, x);
        hi = std::max(hi, x);
        below_tenth += x < 0.1;
      }
      const double mean = sum / n, var = sq / n - mean * mean;
      CHECK(lo >= 0.0);
      CHECK(hi < 1.0);
      // 5 standard errors: sd(mean) = sqrt(1/12/n) = 9.1e-4
      CHECK(std::abs(mean - 0.5) < 5e-3);
      CHECK(std::abs(var - 1.0 / 12) < 3e-3);
      CHECK(std::abs(static_cast<double>(below_tenth) / n - 0.1) < 0.01);
    }
  }
  SECTION("randn is standard normal") {
    for (ag::DType dt : {ag::kFloat32, ag::kFloat64}) {
      INFO(ag::dtype_name(dt));
      ag::manual_seed(43);
      const std::vector<double> v = ag::randn({n}, dt).to_vector<double>();
      double sum = 0, sq = 0;
      int64_t within1 = 0;
      for (double x : v) {
        sum += x;
        sq += x * x;
        within1 += std::abs(x) < 1;
      }
      const double mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
      CHECK(std::abs(mean) < 0.02);       // sd(mean) = 3.2e-3
      CHECK(std::abs(sd - 1.0) < 0.015);  // sd(sd) = 2.2e-3
      CHECK(std::abs(static_cast<double>(within1) / n - 0.6827) < 0.01);
    }
  }
  SECTION("manual_seed makes draws reproducible") {
    ag::manual_seed(1234);
    const auto a1 = ag::rand({1000}).to_vector<float>();
    const auto b1 = ag::randn({3, 7}).to_vector<float>();
    ag::manual_seed(1234);
    const auto a2 = ag::rand({1000}).to_vector<float>();
    const auto b2 = ag::randn({3, 7}).to_vector<float>();
    CHECK(a1 == a2);
    CHECK(b1 == b2);
    ag::manual_seed(1235);
    const auto a3 = ag::rand({1000}).to_vector<float>();
    CHECK(a1 != a3);
    int same = 0;
    for (size_t i = 0; i < a1.size(); ++i) same += a1[i] == a3[i];
    CHECK(same < 10);
    // consecutive draws differ
    ag::manual_seed(1234);
    const auto c1 = ag::rand({1000}).to_vector<float>();
    const auto c2 = ag::rand({1000}).to_vector<float>();
    CHECK(c1 != c2);
    // an explicit generator is independent of the default one
    ag::Generator g1(99), g2(99);
    CHECK(ag::randn({50}, g1).to_vector<float>() == ag::randn({50}, g2).to_vector<float>());
  }
  SECTION("rand of an integer dtype is refused") {
    REQUIRE_THROWS_WITH_SUBSTR(ag::rand({2}, ag::kInt64), "rand: expected a floating dtype, got int64");
  }
}

TEST_CASE("to(dtype), item and to_vector", "[core][factory]") {
  ag::manual_seed(8);
  const ag::Tensor x = ag::randn({5, 3});
  const std::vector<float> xv = x.to_vector<float>();

  SECTION("float32 -> float64 -> float32 is exact") {
    const ag::Tensor d = x.to(ag::kFloat64);
    CHECK(d.dtype() == ag::kFloat64);
    CHECK(d.to(ag::kFloat32).to_vector<float>() == xv);
    CHECK(x.to(ag::kFloat32).storage() == x.storage());  // no-op cast returns the tensor
  }
  SECTION("16-bit round trips are idempotent and within half an ulp") {
    for (ag::DType dt : {ag::kFloat16, ag::kBFloat16}) {
      INFO(ag::dtype_name(dt));
      const ag::Tensor once = x.to(dt).to(ag::kFloat32);
      const ag::Tensor twice = once.to(dt).to(ag::kFloat32);
      CHECK(once.to_vector<float>() == twice.to_vector<float>());
      check_close(once, as_double(xv), 0, eps_of(dt) / 2);
    }
  }
  SECTION("float -> int truncates toward zero, int -> float is exact") {
    const ag::Tensor f = ag::tensor({2.75f, -2.75f, 0.5f, -0.5f, 100.f});
    CHECK(f.to(ag::kInt64).to_vector<int64_t>() == std::vector<int64_t>{2, -2, 0, 0, 100});
    CHECK(f.to(ag::kInt32).to_vector<int32_t>() == std::vector<int32_t>{2, -2, 0, 0, 100});
    const ag::Tensor i = ag::tensor(std::vector<int64_t>{-3, 0, 1 << 20});
    check_close(i.to(ag::kFloat32), {-3, 0, 1 << 20}, 0, 0);
    CHECK(ag::tensor({0.f, 0.5f, -2.f}).to(ag::kBool).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 1});
  }
  SECTION("item<T>") {
    const ag::Tensor s = x.select(0, 2).select(0, 1);
    CHECK(s.item<float>() == xv[7]);
    CHECK(s.item<double>() == static_cast<double>(xv[7]));
    CHECK(ag::tensor(std::vector<int64_t>{-42}).item<int64_t>() == -42);
    CHECK(ag::tensor(std::vector<int64_t>{-42}).item<int>() == -42);
    CHECK(ag::tensor({3.75f}).item<int64_t>() == 3);
    const ag::Tensor h = ag::tensor(0.1f, ag::kFloat16);
    CHECK(h.item<float>() == static_cast<float>(ag::Half(0.1f)));
  }
  SECTION("to_vector<T> of a non-contiguous view converts and gathers") {
    const ag::Tensor t = x.t();
    const std::vector<double> tv = t.to_vector<double>();
    REQUIRE(tv.size() == 15);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 5; ++j) CHECK(tv[i * 5 + j] == static_cast<double>(xv[j * 3 + i]));
  }
}

// ---- printing --------------------------------------------------------------------------
TEST_CASE("printing follows PyTorch", "[core][print]") {
  SECTION("integral floats") {
    const ag::Tensor t = ag::tensor({1.f, 2.f, 3.f, 4.f}, {2, 2});
    CHECK(fmt::format("{}", t) == "tensor([[1., 2.],\n        [3., 4.]])");
    CHECK(t.str() == fmt::format("{}", t));
    std::ostringstream os;
    os << t;
    CHECK(os.str() == t.str());
    CHECK(ag::tensor({-1.f, 10.f, 0.f}).str() == "tensor([-1., 10.,  0.])");
  }
  SECTION("non-integral floats use 4 decimals, padded to one width") {
    CHECK(ag::tensor({1.5f, -2.25f, 10.125f}).str() == "tensor([ 1.5000, -2.2500, 10.1250])");
    CHECK(ag::tensor({0.1f, 0.2f}, {2, 1}).str() == "tensor([[0.1000],\n        [0.2000]])");
    CHECK(ag::tensor(2.5f).str() == "tensor(2.5000)");
    CHECK(ag::tensor(3.f).str() == "tensor(3.)");
  }
  SECTION("scientific notation for wide or tiny ranges") {
    CHECK(ag::tensor({1e-5f, 1.f}).str() == "tensor([1.0000e-05, 1.0000e+00])");
    CHECK(ag::tensor({1.f, 2e8f}).str() == "tensor([1.0000e+00, 2.0000e+08])");
    CHECK(ag::tensor({1.f, 2000.f}).str() == "tensor([1.0000e+00, 2.0000e+03])");  // max/min > 1000
    CHECK(ag::tensor({1.f, 1000.f}).str() == "tensor([   1., 1000.])");
  }
  SECTION("non-finite values") {
    CHECK(ag::tensor({1.5f, NAN, INFINITY}).str() == "tensor([1.5000,    nan,    inf])");
    // widths come from the finite values only
    CHECK(ag::tensor({1.f, -INFINITY}).str() == "tensor([1., -inf])");
  }
  SECTION("dtypes") {
    CHECK(ag::tensor({1.5f, 2.f}, ag::kFloat16).str() == "tensor([1.5000, 2.0000], dtype=torch.float16)");
    CHECK(ag::tensor({1.f, 2.f}, ag::kBFloat16).str() == "tensor([1., 2.], dtype=torch.bfloat16)");
    CHECK(ag::tensor(std::vector<double>{0.5}, {1}).str() == "tensor([0.5000], dtype=torch.float64)");
    CHECK(ag::tensor(std::vector<int64_t>{1, -20, 3}).str() == "tensor([  1, -20,   3])");
    CHECK(ag::tensor(std::vector<int64_t>{1, 2}).to(ag::kInt32).str() == "tensor([1, 2], dtype=torch.int32)");
    CHECK(ag::tensor(std::vector<bool>{true, false}, {2}).str() == "tensor([ True, False])");
    CHECK(ag::tensor(std::vector<int64_t>{7}).to(ag::kUInt8).str() == "tensor([7], dtype=torch.uint8)");
  }
  SECTION("autograd suffixes") {
    ag::Tensor p = ag::tensor({1.f, 2.f}).requires_grad_();
    CHECK(p.str() == "tensor([1., 2.], requires_grad=True)");
    const ag::Tensor q = p * 2;
    CHECK(q.str() == "tensor([2., 4.], grad_fn=<MulBackward0>)");
    CHECK(ag::tensor({1.f, 2.f}, ag::kFloat16).requires_grad_().str() ==
          "tensor([1., 2.], dtype=torch.float16, requires_grad=True)");
    CHECK(p.sum().str() == "tensor(3., grad_fn=<SumBackward0>)");
  }
  SECTION("3-D and empty tensors") {
    CHECK(ag::arange(8, ag::kFloat32).view({2, 2, 2}).str() ==
          "tensor([[[0., 1.],\n         [2., 3.]],\n\n        [[4., 5.],\n         [6., 7.]]])");
    CHECK(ag::zeros({0}).str() == "tensor([])");
    CHECK(ag::zeros({0, 3}).str() == "tensor([], size=(0, 3))");
    CHECK(ag::zeros({0}, ag::kFloat16).str() == "tensor([], dtype=torch.float16)");
    CHECK(ag::zeros({0}, ag::kInt64).str() == "tensor([], dtype=torch.int64)");
    CHECK(ag::zeros({2, 0}, ag::kBool).str() == "tensor([], size=(2, 0), dtype=torch.bool)");
  }
  SECTION("non-contiguous views print their logical order") {
    CHECK(ag::tensor({1.f, 2.f, 3.f, 4.f}, {2, 2}).t().str() == "tensor([[1., 3.],\n        [2., 4.]])");
  }
  SECTION("long vectors wrap at 80 columns") {
    CHECK(ag::arange(30, ag::kFloat32).str() ==
          "tensor([ 0.,  1.,  2.,  3.,  4.,  5.,  6.,  7.,  8.,  9., 10., 11., 12., 13.,\n"
          "        14., 15., 16., 17., 18., 19., 20., 21., 22., 23., 24., 25., 26., 27.,\n"
          "        28., 29.])");
  }
  SECTION("a suffix that would pass 80 columns goes on its own line") {
    CHECK(ag::arange(14, ag::kFloat16).str() ==
          "tensor([ 0.,  1.,  2.,  3.,  4.,  5.,  6.,  7.,  8.,  9., 10., 11., 12., 13.],\n"
          "       dtype=torch.float16)");
  }
  SECTION("more than 1000 elements are summarized") {
    CHECK(ag::arange(2000).str() == "tensor([   0,    1,    2,  ..., 1997, 1998, 1999])");
    CHECK(ag::arange(2000).view({40, 50}).str() ==
          "tensor([[   0,    1,    2,  ...,   47,   48,   49],\n"
          "        [  50,   51,   52,  ...,   97,   98,   99],\n"
          "        [ 100,  101,  102,  ...,  147,  148,  149],\n"
          "        ...,\n"
          "        [1850, 1851, 1852,  ..., 1897, 1898, 1899],\n"
          "        [1900, 1901, 1902,  ..., 1947, 1948, 1949],\n"
          "        [1950, 1951, 1952,  ..., 1997, 1998, 1999]])");
    // the formatter sees only the printed values: 1 .. 1999 spans more than 1000x
    CHECK(ag::arange(1, 2001, 1, ag::kFloat32).str() ==
          "tensor([1.0000e+00, 2.0000e+00, 3.0000e+00,  ..., 1.9980e+03, 1.9990e+03,\n"
          "        2.0000e+03])");
  }
}

TEST_CASE("the CPU allocator hands a freed large block to the next request of its size", "[core]") {
  // Note [CPU block cache] in core/storage.cpp: a training step's buffers come back without
  // fresh pages; small blocks go to malloc.
  void* first = nullptr;
  {
    ag::Tensor a = ag::empty({3, 1 << 18});  // 3 MB
    first = a.data_ptr();
  }
  ag::Tensor b = ag::empty({3, 1 << 18});
  CHECK(b.data_ptr() == first);
  ag::Tensor c = ag::empty({3, 1 << 18});  // b holds the kept block: a new one
  CHECK(c.data_ptr() != first);
  b = ag::Tensor();
  c = ag::Tensor();
  ag::cpu_empty_cache();  // both blocks back to the system; allocation still works
  ag::Tensor d = ag::ones({3, 1 << 18});
  CHECK(ag::sum(d).item<double>() == 3.0 * (1 << 18));
}

