// In-place ops on tensors autograd tracks (Note [In-place autograd] in ops/tensor_methods.cpp):
// recorded as PyTorch records them, and the writes it refuses.
#include <vector>

#include "common.h"

// Note [In-place autograd] in ops/tensor_methods.cpp.
TEST_CASE("autograd: in-place ops on tensors autograd tracks are recorded, as PyTorch records them",
          "[autograd][engine][inplace]") {
  ag::manual_seed(fresh_seed());
  auto vals = [](const ag::Tensor& t) { return t.to_vector<double>(); };
  SECTION("a saved tensor changed in place: backward says so (PyTorch's version counter)") {
    ag::Tensor p = ag::randn({3}, ag::TensorOptions(ag::kFloat64)).requires_grad_();
    ag::Tensor y = p.exp();
    y.mul_(2.0);  // exp saved its output, y
    REQUIRE_THROWS_WITH(y.sum().backward(), Catch::StartsWith("exp: a tensor saved for backward (float64 [3] on cpu) "
                                                              "was modified by an in-place operation"));
  }
  SECTION("arithmetic in place on a non-leaf: the gradients of the out-of-place chain") {
    const ag::TensorOptions f64(ag::kFloat64);
    ag::Tensor p = ag::randn({2, 3}, f64).requires_grad_(), q = ag::randn({2, 3}, f64).requires_grad_();
    ag::Tensor r = ag::randn({3}, f64).requires_grad_(), w = ag::randn({2, 3}, f64).requires_grad_();
    const std::vector<double> pv = vals(p), qv = vals(q), wv = vals(w);
    ag::Tensor y = p + 1.0;  // mul_ by w reads y as it was: p + 1
    y.mul_(w);
    y.add_(q, 0.5);
    y.sub_(r);  // broadcast over rows
    y.mul_(3.0);
    y.div_(4.0);
    y.add_(1.0);
    CHECK_FALSE(y.is_leaf());
    for (size_t i = 0; i < 6; ++i)
      CHECK(y.to_vector<double>()[i] == Approx((((pv[i] + 1) * wv[i] + 0.5 * qv[i] - vals(r)[i % 3]) * 3 / 4) + 1));
    y.sum().backward();
    std::vector<double> gp(6), gw(6);
    for (size_t i = 0; i < 6; ++i) {
      gp[i] = wv[i] * 0.75;
      gw[i] = (pv[i] + 1) * 0.75;
    }
    check_close(p.grad(), gp, 1e-12, 1e-12);
    check_close(w.grad(), gw, 1e-12, 1e-12);
    check_close(q.grad(), std::vector<double>(6, 0.375), 1e-12, 1e-12);
    check_close(r.grad(), std::vector<double>(3, -1.5), 1e-12, 1e-12);  // summed over 2 rows
  }
  SECTION("a plain tensor times one that requires grad becomes tracked") {
    ag::Tensor a = ag::randn({4}), w = ag::randn({4}).requires_grad_();
    const std::vector<double> av = vals(a);
    a.mul_(w);
    REQUIRE(a.requires_grad());
    REQUIRE(a.grad_fn() != nullptr);
    a.sum().backward();
    check_close(w.grad(), av, 0, 0);
  }
  SECTION("copy_ and fill_: the old values get a zero gradient, the source its gradient") {
    ag::Tensor p = ag::randn({2, 3}).requires_grad_(), q = ag::randn({3}).requires_grad_();
    ag::Tensor y = p * 2.0;
    y.copy_(q);  // broadcast over rows
    (y * 3.0).sum().backward();
    check_close(q.grad(), std::vector<double>(3, 6.0), 0, 0);
    check_close(p.grad(), std::vector<double>(6, 0.0), 0, 0);  // as PyTorch: zeros, not none
    ag::Tensor z = p * 2.0;
    z.fill_(1.5);
    CHECK(z.requires_grad());
    p.set_grad(ag::Tensor());
    (z * p).sum().backward();
    check_close(p.grad(), std::vector<double>(6, 1.5), 0, 0);  // z's own history gives 0
    ag::Tensor plain = ag::zeros({3});
    plain.copy_(q * 2.0);
    REQUIRE(plain.requires_grad());
    ag::Tensor ints = ag::zeros({3}, ag::TensorOptions(ag::kInt64));
    ints.copy_(q * 2.0);  // an integer tensor takes no gradient: a plain copy, as PyTorch's
    CHECK_FALSE(ints.requires_grad());
  }
  SECTION("refused: a leaf that requires grad, and writes another tensor's history would miss") {
    ag::Tensor p = ag::randn({2, 3}).requires_grad_();
    CHECK_THROWS_WITH(p.mul_(2.0), Catch::StartsWith("mul_: in-place operation on a leaf that requires grad"));
    ag::Tensor y = p * 2.0;
    ag::Tensor row = y.select(0, 1);  // a tracked view of y
    CHECK_THROWS_WITH(row.mul_(2.0), Catch::Contains("it is a view"));
    CHECK_THROWS_WITH(y.mul_(2.0), Catch::Contains("it has views that autograd tracks"));
    ag::Tensor pieces_of = p * 3.0;
    const std::vector<ag::Tensor> pieces = ag::unbind(pieces_of, 0);  // views, one node for all
    CHECK_THROWS_WITH(pieces_of.mul_(2.0), Catch::Contains("it has views that autograd tracks"));
    ag::Tensor buf = ag::zeros({2, 3}), w = ag::randn({3}).requires_grad_();
    ag::Tensor part = buf.select(0, 0);  // an untracked view: buf would not learn of w
    CHECK_THROWS_WITH(part.add_(w), Catch::Contains("it is a view"));
    {
      ag::NoGradGuard no_grad;  // untracked: as before, one kernel
      row.mul_(2.0);
      part.add_(w);
    }
  }
  SECTION("a view whose base is gone is a tensor like any other") {
    ag::Tensor p = ag::randn({2, 3}).requires_grad_();
    ag::Tensor v = (p * 2.0).view({6});
    v.mul_(3.0);
    v.sum().backward();
    check_close(p.grad(), std::vector<double>(6, 6.0), 0, 0);
  }
}
