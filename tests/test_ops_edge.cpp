// Op edge cases: NaN propagation, empty, size-1 and 0-dim tensors, bool and int32 operands.
#include <functional>
#include <limits>

#include "common.h"
#include "ops_reference.h"

using namespace ops_reference;  // Vec, Shape, the references, input makers and tolerances

TEST_CASE("ops: NaN propagates through elementwise ops and reductions", "[ops][nan]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (ag::DType d : kFloatTypes) {
    INFO(ag::dtype_name(d));
    ag::Tensor x = ag::tensor(std::vector<double>{-1.5, nan, 2.5}, {3}, ag::kFloat64).to(d);
    ag::Tensor y = ag::tensor(std::vector<double>{nan, 0.5, 1.0}, {3}, ag::kFloat64).to(d);
    check_close(ag::relu(x), {0, nan, 2.5}, 0, 0);
    check_close(ag::clamp(x, -1.0, 1.0), {-1, nan, 1}, 0, 0);
    check_close(ag::maximum(x, y), {nan, nan, 2.5}, 0, 0);
    check_close(ag::minimum(x, y), {nan, nan, 1}, 0, 0);
    check_close(ag::exp(x), {std::exp(-1.5), nan, std::exp(2.5)}, 0, tol(d).rtol);
    check_close(ag::max(x), {nan}, 0, 0);
    check_close(ag::min(x), {nan}, 0, 0);
    check_close(ag::sum(x), {nan}, 0, 0);
    check_close(ag::argmax(x), {1}, 0, 0);  // NaN counts as the largest value
    check_close(ag::max(x, 0).second, {1}, 0, 0);
    check_close(ag::softmax(x, 0), {nan, nan, nan}, 0, 0);
    check_close(ag::lt(x, 0.0), {1, 0, 0}, 0, 0);  // comparisons with NaN are false
    check_close(ag::ne(x, x), {0, 1, 0}, 0, 0);
  }
}

TEST_CASE("ops: relu's gradient passes where its input is NaN, as PyTorch's threshold_backward", "[ops][nan]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<ag::Device> devices{ag::kCPU};
  if (cuda_available()) devices.push_back(ag::kCUDA);
  for (ag::Device dev : devices) {
    for (ag::DType d : kFloatTypes) {
      INFO(dev.str() << " " << ag::dtype_name(d));
      // relu(x) for x = -1.5, NaN, 0, 2.5: zero where x <= 0, g elsewhere, NaN included.
      ag::Tensor x = ag::tensor(std::vector<double>{-1.5, nan, 0.0, 2.5}, {4}, ag::kFloat64).to(d).to(dev);
      x.requires_grad_();
      const ag::Tensor g = ag::tensor(std::vector<double>{3.0, 5.0, 7.0, 11.0}, {4}, ag::kFloat64).to(d).to(dev);
      ag::relu(x).backward(g);
      check_close(x.grad(), {0, 5, 0, 11}, 0, 0);
    }
    // The recurrent cell's relu is the same relu: a NaN stays, and its gradient passes (the
    // pre-activation is the bias alone, so the NaN reaches no other unit).
    const auto o64 = ag::TensorOptions(ag::kFloat64).device(dev);
    ag::Tensor b_ih = ag::tensor(std::vector<double>{-1.5, nan, 2.5}, {3}, ag::kFloat64).to(dev);
    b_ih.requires_grad_();
    const ag::Tensor h = ag::rnn_relu_cell(ag::zeros({1, 2}, o64), ag::zeros({1, 3}, o64), ag::zeros({3, 2}, o64),
                                           ag::zeros({3, 3}, o64), b_ih);
    check_close(h, {0, nan, 2.5}, 0, 0);
    h.backward(ag::ones({1, 3}, o64));
    check_close(b_ih.grad(), {0, 1, 1}, 0, 0);
  }
}

TEST_CASE("ops: empty tensors, size-1 dims and 0-dim tensors", "[ops][edge]") {
  ag::Tensor e = ag::zeros({2, 0});
  CHECK(e.numel() == 0);
  CHECK(e.is_contiguous());
  CHECK(e.view({0, 2}).shape() == Shape{0, 2});
  check_close(ag::sum(e, {1}), {0, 0}, 0, 0);
  check_close(ag::prod(e, 1), {1, 1}, 0, 0);
  check_close(ag::mean(e, {1}), {std::nan(""), std::nan("")}, 0, 0);
  CHECK(ag::sum(e, {0}).shape() == Shape{0});
  CHECK_THROWS_AS(ag::max(e, 1), ag::Error);
  ag::Tensor ones23 = ag::ones({2, 3});
  check_close(ag::cat({e, ones23}, 1), Vec(6, 1.0), 0, 0);
  check_close(ag::mm(ag::ones({2, 0}), ag::ones({0, 3})), Vec(6, 0.0), 0, 0);
  check_close(ag::addmm(ones23, ag::ones({2, 0}), ag::ones({0, 3}), 2.0, 1.0), Vec(6, 2.0), 0, 0);
  CHECK((e + 1).shape() == Shape{2, 0});
  CHECK(ag::randn({5, 3}).slice(0, 4, 2).shape() == Shape{0, 3});

  // Size-1 dims.
  ag::Tensor col = normal({3, 1});
  const Vec vc = vals(col);
  check_close(ag::softmax(col, 1), {1, 1, 1}, 0, 0);
  check_close(ag::log_softmax(col, 1), {0, 0, 0}, 0, 0);
  check_close(ag::max(col, 1).first, vc, 0, 0);
  check_close(ag::max(col, 1).second, {0, 0, 0}, 0, 0);
  check_close(ag::sum(col, {1}), vc, 0, 0);
  check_close(ag::var(col, {1}, 0), {0, 0, 0}, 0, 0);

  // 0-dim tensors.
  ag::Tensor s = ag::tensor(2.5f);
  CHECK(s.dim() == 0);
  check_close(ag::sum(s), {2.5}, 0, 0);
  CHECK(ag::sum(s).dim() == 0);
  CHECK(ag::unsqueeze(s, 0).shape() == Shape{1});
  CHECK(ag::flatten(s).shape() == Shape{1});
  CHECK(ag::squeeze(s).dim() == 0);
  ag::Tensor st = ag::stack({s, s * 2}, 0);
  CHECK(st.shape() == Shape{2});
  check_close(st, {2.5, 5}, 0, 0);
  check_close(s * ag::ones({2}), {2.5, 2.5}, 0, 0);
}

TEST_CASE("ops: bool and int32 tensors in arithmetic and reductions", "[ops][int]") {
  ag::Tensor mask = ag::gt(ag::tensor({0.5f, -1.f, 2.f, 3.f}), 0.0);
  ag::Tensor count = ag::sum(mask);
  CHECK(count.dtype() == ag::kInt64);  // as PyTorch: a sum of bools counts them
  CHECK(count.item<int64_t>() == 3);
  ag::Tensor i32 = ag::tensor(std::vector<int64_t>{3, -4, 5}).to(ag::kInt32);
  ag::Tensor i64 = ag::tensor(std::vector<int64_t>{10, 20, 30});
  ag::Tensor sum_mixed = i32 + i64;
  CHECK(sum_mixed.dtype() == ag::kInt64);
  CHECK(sum_mixed.to_vector<int64_t>() == std::vector<int64_t>{13, 16, 35});
  ag::Tensor doubled = i32 * 2;
  CHECK(doubled.dtype() == ag::kInt32);
  CHECK(doubled.to_vector<int64_t>() == std::vector<int64_t>{6, -8, 10});
  ag::Tensor total = ag::sum(i32);
  CHECK(total.dtype() == ag::kInt64);
  CHECK(total.item<int64_t>() == 4);
  ag::Tensor same = ag::eq(i32, i64 - 7);
  CHECK(same.dtype() == ag::kBool);
  check_close(same, {1, 0, 0}, 0, 0);
}

// Note [In-place arithmetic]: one kernel into self where it can, the out-of-place result
// copied back where it cannot; both must give exactly what the out-of-place op gives.
namespace {
void check_inplace_forms(ag::Device dev) {
  ag::manual_seed(fresh_seed());
  const auto opt = ag::TensorOptions(ag::kFloat32).device(dev);
  auto same = [](const ag::Tensor& got, const ag::Tensor& want) {
    REQUIRE(got.shape() == want.shape());
    CHECK(got.cpu().to_vector<double>() == want.cpu().to_vector<double>());
  };
  ag::Tensor a = ag::randn({5, 7}, opt), b = ag::randn({5, 7}, opt), row = ag::randn({7}, opt);
  {
    ag::Tensor x = a.clone();
    const uint32_t v = x.version();
    x.add_(b);
    same(x, ag::add(a, b));
    CHECK(x.version() > v);
    x = a.clone();
    x.mul_(row);  // other broadcast to self
    same(x, ag::mul(a, row));
    x = a.clone();
    x.sub_(x);  // other is self: the same view
    same(x, ag::zeros({5, 7}, opt));
    x = a.clone();
    x.add_(2.5);
    same(x, ag::add(a, 2.5));
    x = a.clone();
    x.mul_(-3);
    same(x, ag::mul(a, -3));
  }
  {
    // Overlapping views of one storage: the two-kernel path, as if out of place.
    ag::Tensor x = a.clone();
    ag::Tensor want = ag::add(x.narrow(1, 1, 6), x.narrow(1, 0, 6));
    ag::Tensor view = x.narrow(1, 1, 6);
    view.add_(x.narrow(1, 0, 6));
    same(x.narrow(1, 1, 6), want);
  }
  {
    // Promotion (int self, float other) is refused as in PyTorch or goes through the fallback;
    // a float16 self with a float32 other stays float16.
    ag::Tensor h = a.to(ag::kFloat16);
    ag::Tensor hx = h.clone();
    hx.add_(b);
    CHECK(hx.dtype() == ag::kFloat16);
    same(hx, ag::add(h, b).to(ag::kFloat16));
    ag::Tensor i = ag::full({4}, 3, ag::TensorOptions(ag::kInt64).device(dev));
    i.add_(2);
    same(i, ag::full({4}, 5, ag::TensorOptions(ag::kInt64).device(dev)));
  }
  // A narrower floating other (Note [Mixed-dtype accumulation]): one kernel reads it in its
  // own dtype; the sums equal casting it first, bit for bit, on dense, transposed, broadcast
  // and strided operands and on sizes with a vector tail.
  const std::pair<ag::DType, ag::DType> pairs[] = {{ag::kFloat32, ag::kFloat16},
                                                   {ag::kFloat32, ag::kBFloat16},
                                                   {ag::kFloat64, ag::kFloat32},
                                                   {ag::kFloat64, ag::kFloat16}};
  for (const auto& [wide, narrow] : pairs) {
    INFO(ag::dtype_name(wide) << " += " << ag::dtype_name(narrow));
    for (int64_t n : {1, 7, 1023}) {
      ag::Tensor x0 = ag::randn({3, n}, ag::TensorOptions(wide).device(dev)) * 100.0;
      ag::Tensor d = ag::randn({3, n}, ag::TensorOptions(narrow).device(dev));
      ag::Tensor x = x0.clone();
      x.add_(d);
      same(x, ag::add(x0, d.to(wide)));
      ag::Tensor dt = ag::randn({n, 3}, ag::TensorOptions(narrow).device(dev)).t();  // transposed
      x = x0.clone();
      x.add_(dt);
      same(x, ag::add(x0, dt.to(wide)));
      ag::Tensor r = ag::randn({n}, ag::TensorOptions(narrow).device(dev));  // broadcast row
      x = x0.clone();
      x.add_(r);
      same(x, ag::add(x0, r.to(wide)));
      ag::Tensor xs = ag::randn({3, 2 * n}, ag::TensorOptions(wide).device(dev));  // strided self
      ag::Tensor want = ag::add(xs.slice(1, 0, 2 * n, 2), d.to(wide));
      ag::Tensor view = xs.slice(1, 0, 2 * n, 2);
      view.add_(d);
      same(view, want);
    }
  }
}
}  // namespace

TEST_CASE("ops: in-place add_, sub_, mul_ equal their out-of-place forms", "[ops][inplace]") {
  check_inplace_forms(ag::Device(ag::kCPU));
}

TEST_CASE("ops: in-place arithmetic on cuda equals its out-of-place forms", "[cuda]") {
  if (skip_without_cuda()) return;
  check_inplace_forms(ag::Device(ag::kCUDA));
}

TEST_CASE("non-overlapping-and-dense layouts and empty_preserving_layout", "[ops][layout]") {
  ag::Tensor c = ag::zeros({2, 3, 4, 5});
  CHECK(ag::is_non_overlapping_and_dense(c));
  CHECK(ag::is_non_overlapping_and_dense(c.to_channels_last()));
  CHECK(ag::is_non_overlapping_and_dense(c.transpose(0, 3)));
  CHECK_FALSE(ag::is_non_overlapping_and_dense(c.narrow(3, 0, 4)));          // gaps
  CHECK_FALSE(ag::is_non_overlapping_and_dense(ag::zeros({3, 1}).expand({3, 4})));  // overlap
  const ag::Tensor cl = c.to_channels_last();
  const ag::Tensor e = ag::empty_preserving_layout(cl);
  CHECK(e.strides() == cl.strides());
  CHECK(e.shape() == cl.shape());
  CHECK(ag::empty_preserving_layout(c.narrow(3, 0, 4)).is_contiguous());
}
