// einsum against a float64 reference that sums every assignment of its subscripts; its
// gradients by gradcheck; its dtypes under autocast (16 bits exactly where a contraction ran,
// Note [einsum] in ops/einsum.cpp); its errors. linalg::vecdot beside it.
#include <map>

#include "common.h"

namespace {

struct Operand {
  std::vector<double> v;
  ag::Shape shape;
};

// The reference: an equation with an explicit output and no ellipsis, summed over every
// assignment of its subscripts, term by term in float64.
std::vector<double> reference(const std::string& eq, const std::vector<Operand>& ops) {
  const size_t arrow = eq.find("->");
  REQUIRE(arrow != std::string::npos);
  std::vector<std::string> terms(1);
  for (char c : eq.substr(0, arrow)) {
    if (c == ',') terms.emplace_back();
    else terms.back().push_back(c);
  }
  const std::string out = eq.substr(arrow + 2);
  std::map<char, int64_t> size;
  for (size_t i = 0; i < ops.size(); ++i)
    for (size_t d = 0; d < terms[i].size(); ++d) size[terms[i][d]] = std::max(size[terms[i][d]], ops[i].shape[d]);
  std::vector<char> letters;
  for (const auto& [c, s] : size) letters.push_back(c);
  int64_t out_n = 1;
  for (char c : out) out_n *= size[c];
  std::vector<double> result(static_cast<size_t>(out_n), 0.0);
  std::map<char, int64_t> at;
  for (char c : letters) at[c] = 0;
  while (true) {
    double p = 1;
    for (size_t i = 0; i < ops.size(); ++i) {
      int64_t flat = 0;
      for (size_t d = 0; d < terms[i].size(); ++d)
        flat = flat * ops[i].shape[d] + (ops[i].shape[d] == 1 ? 0 : at[terms[i][d]]);  // size 1 broadcasts
      p *= ops[i].v[static_cast<size_t>(flat)];
    }
    int64_t o = 0;
    for (char c : out) o = o * size[c] + at[c];
    result[static_cast<size_t>(o)] += p;
    size_t k = 0;
    for (; k < letters.size(); ++k) {
      if (++at[letters[k]] < size[letters[k]]) break;
      at[letters[k]] = 0;
    }
    if (k == letters.size()) break;
  }
  return result;
}

struct Case {
  std::string eq;          // as einsum takes it
  std::vector<ag::Shape> shapes;
  std::string explicit_eq;  // the same sum for the reference: explicit output, no ellipsis
  ag::Shape out_shape;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {"ij,jk->ik", {{3, 4}, {4, 5}}, "ij,jk->ik", {3, 5}},
      {"ij,jk", {{3, 4}, {4, 5}}, "ij,jk->ik", {3, 5}},  // implicit output
      {"bij,bjk->bik", {{2, 3, 4}, {2, 4, 5}}, "bij,bjk->bik", {2, 3, 5}},
      {"bhqd,bhkd->bhqk", {{2, 2, 3, 4}, {2, 2, 5, 4}}, "bhqd,bhkd->bhqk", {2, 2, 3, 5}},
      {"i,i->", {{7}, {7}}, "i,i->", {}},
      {"i,j->ij", {{3}, {4}}, "i,j->ij", {3, 4}},
      {"ij->ji", {{3, 4}}, "ij->ji", {4, 3}},
      {"ij->", {{3, 4}}, "ij->", {}},
      {"ii", {{4, 4}}, "ii->", {}},  // the trace
      {"ii->i", {{4, 4}}, "ii->i", {4}},
      {"iji->j", {{3, 2, 3}}, "iji->j", {2}},
      {"...ij,...jk", {{2, 3, 4}, {4, 5}}, "zij,jk->zik", {2, 3, 5}},
      {"...ij,...jk->...ik", {{2, 1, 3, 4}, {3, 4, 2}}, "yzij,zjk->yzik", {2, 3, 3, 2}},
      {"i...->i", {{2, 3, 4}}, "iyz->i", {2}},  // an ellipsis left out of the output is summed
      {"ij,jk,kl->il", {{2, 3}, {3, 4}, {4, 5}}, "ij,jk,kl->il", {2, 5}},
      {"ij,ij->ij", {{3, 4}, {1, 4}}, "ij,ij->ij", {3, 4}},  // size 1 broadcasts
      {"bA,Ab->", {{2, 3}, {3, 2}}, "bA,Ab->", {}},          // capital subscripts
      {"ab,cd->dcba", {{2, 3}, {4, 2}}, "ab,cd->dcba", {2, 4, 3, 2}},
      {"ij,j->i", {{3, 4}, {4}}, "ij,j->i", {3}},
      {"ijk,ik->j", {{2, 3, 4}, {2, 4}}, "ijk,ik->j", {3}},
      {" i j , j k -> i k ", {{3, 4}, {4, 5}}, "ij,jk->ik", {3, 5}},  // spaces are ignored
  };
  return c;
}

}  // namespace

TEST_CASE("einsum matches a float64 sum over every assignment of its subscripts", "[ops][einsum]") {
  ag::manual_seed(fresh_seed());
  for (const Case& c : cases()) {
    for (ag::DType dt : {ag::kFloat64, ag::kFloat32}) {
      INFO(c.eq << " in " << ag::dtype_name(dt));
      std::vector<ag::Tensor> ops;
      std::vector<Operand> ref_ops;
      for (const ag::Shape& s : c.shapes) {
        ag::Tensor t = ag::randn(s, ag::kFloat64) + 0.5;  // no zeros: every term counts
        ref_ops.push_back({t.to_vector<double>(), s});
        ops.push_back(t.to(dt));
      }
      const ag::Tensor got = ag::einsum(c.eq, ops);
      CHECK(got.shape() == c.out_shape);
      CHECK(got.dtype() == dt);
      check_close(got, reference(c.explicit_eq, ref_ops), dt == ag::kFloat64 ? 1e-12 : 1e-5,
                  dt == ag::kFloat64 ? 1e-12 : 1e-5);
    }
  }
}

TEST_CASE("einsum's gradients match central differences", "[ops][einsum][autograd]") {
  ag::manual_seed(fresh_seed());
  for (const Case& c : cases()) {
    INFO(c.eq);
    std::vector<ag::Tensor> ops;
    for (const ag::Shape& s : c.shapes) ops.push_back((ag::randn(s, ag::kFloat64) + 0.5).requires_grad_());
    const auto r = ag::autograd::gradcheck([&](const std::vector<ag::Tensor>& v) { return ag::einsum(c.eq, v); }, ops);
    INFO(r.message);
    CHECK(r.ok);
  }
}

TEST_CASE("einsum under autocast runs its contractions in 16 bits, as PyTorch's", "[ops][einsum][amp]") {
  ag::Tensor a = ag::randn({3, 4}), b = ag::randn({4, 5}), v = ag::randn({3}), sq = ag::randn({4, 4});
  ag::amp::AutocastGuard guard(ag::kCPU, ag::kBFloat16);
  CHECK(ag::einsum("ij,jk->ik", {a, b}).dtype() == ag::kBFloat16);  // a bmm
  CHECK(ag::einsum("i,i->", {v, v}).dtype() == ag::kBFloat16);      // a bmm
  CHECK(ag::einsum("i,j->ij", {v, v}).dtype() == ag::kFloat32);     // a product
  CHECK(ag::einsum("ij->ji", {a}).dtype() == ag::kFloat32);         // a permute
  CHECK(ag::einsum("ii->i", {sq}).dtype() == ag::kFloat32);         // a diagonal
  CHECK(ag::einsum("ij->j", {a}).dtype() == ag::kFloat32);          // a sum
  // Mixed inputs: the bmm casts both.
  CHECK(ag::einsum("ij,jk->ik", {a, b.to(ag::kFloat16)}).dtype() == ag::kBFloat16);
  // The contraction is a matmul of the bfloat16 operands.
  check_close(ag::einsum("ij,jk->ik", {a, b}), ag::matmul(a, b).to_vector<double>(), 0, 2 * eps_of(ag::kBFloat16));
}

TEST_CASE("einsum's bad inputs name the equation and the operand", "[ops][einsum][errors]") {
  const ag::Tensor m = ag::randn({2, 3}), v = ag::randn({3});
  CHECK_THAT(error_message([&] { ag::einsum("i-j", {v}); }),
             Catch::Contains("einsum: invalid character '-' at index 1"));
  CHECK_THAT(error_message([&] { ag::einsum("i$", {v}); }), Catch::Contains("invalid character '$'"));
  CHECK_THAT(error_message([&] { ag::einsum("i.j", {m}); }), Catch::Contains("is not part of an ellipsis"));
  CHECK_THAT(error_message([&] { ag::einsum("...i...", {m}); }), Catch::Contains("more than one ellipsis"));
  CHECK_THAT(error_message([&] { ag::einsum("i", {m}); }),
             Catch::Contains("operand 0") && Catch::Contains("has 2 dim(s)") && Catch::Contains("1 subscript(s)"));
  CHECK_THAT(error_message([&] { ag::einsum("i,j", {v}); }), Catch::Contains("names 2 operand(s), 1 were given"));
  CHECK_THAT(error_message([&] { ag::einsum("i", {v, v}); }), Catch::Contains("names 1 operand(s), 2 were given"));
  CHECK_THAT(error_message([&] { ag::einsum("i->ii", {v}); }), Catch::Contains("'i'") && Catch::Contains("more than once"));
  CHECK_THAT(error_message([&] { ag::einsum("i->j", {v}); }), Catch::Contains("'j'") && Catch::Contains("not a subscript of any operand"));
  CHECK_THAT(error_message([&] { ag::einsum("ii->i", {m}); }),
             Catch::Contains("subscript 'i' repeats in operand 0") && Catch::Contains("sizes 2 and 3"));
  CHECK_THAT(error_message([&] { ag::einsum("i,i", {v, ag::randn({2})}); }),
             Catch::Contains("subscript 'i' has size 2 in operand 1") && Catch::Contains("size 3 in operand 0"));
  CHECK_THAT(error_message([&] { ag::einsum("", {}); }), Catch::Contains("needs at least one operand"));
  CHECK_THAT(error_message([&] { ag::einsum("i,i", {v, v.to(ag::kFloat64)}); }),
             Catch::Contains("einsum: contracting operands of dtypes float32 and float64"));
  // Without a contraction PyTorch's einsum multiplies, promoting the dtypes.
  CHECK(ag::einsum("i,j->ij", {v, v.to(ag::kFloat64)}).dtype() == ag::kFloat64);
  CHECK_THAT(error_message([&] { ag::einsum("i,i", {v, ag::Tensor()}); }), Catch::Contains("operand 1 is an undefined tensor"));
}

TEST_CASE("einsum on CUDA matches the CPU", "[ops][einsum][cuda]") {
  if (skip_without_cuda()) return;
  ag::manual_seed(fresh_seed());
  const ag::Device cuda(ag::kCUDA, 0);
  for (const Case& c : cases()) {
    INFO(c.eq);
    std::vector<ag::Tensor> cpu, dev;
    for (const ag::Shape& s : c.shapes) {
      cpu.push_back(ag::randn(s, ag::kFloat64).requires_grad_());
      dev.push_back(cpu.back().detach().to(cuda).requires_grad_());
    }
    const ag::Tensor want = ag::einsum(c.eq, cpu), got = ag::einsum(c.eq, dev);
    check_close(got, want.to_vector<double>(), 1e-12, 1e-12);
    ag::sum(want * want).backward();
    ag::sum(got * got).backward();
    for (size_t i = 0; i < cpu.size(); ++i) check_close(dev[i].grad(), cpu[i].grad().to_vector<double>(), 1e-12, 1e-12);
  }
}

TEST_CASE("linalg::vecdot sums products along a dim, broadcasting, as torch.linalg.vecdot", "[ops][einsum]") {
  const ag::Tensor x = ag::randn({2, 3}, ag::kFloat64) + 0.5, y = ag::randn({3}, ag::kFloat64) + 0.5;
  const std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>();
  std::vector<double> want(2, 0.0);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) want[i] += xv[i * 3 + j] * yv[j];
  const ag::Tensor got = ag::linalg::vecdot(x, y);
  CHECK(got.shape() == ag::Shape{2});
  check_close(got, want, 1e-14, 1e-14);
  // dim 0 of [2, 3] against [2, 1]
  const ag::Tensor z = ag::randn({2, 1}, ag::kFloat64);
  const std::vector<double> zv = z.to_vector<double>();
  std::vector<double> want0(3, 0.0);
  for (int j = 0; j < 3; ++j) want0[j] = xv[j] * zv[0] + xv[3 + j] * zv[1];
  check_close(ag::linalg::vecdot(x, z, 0), want0, 1e-14, 1e-14);
  CHECK_THAT(error_message([&] { ag::linalg::vecdot(x.to(ag::kFloat32), y); }),
             Catch::Contains("linalg_vecdot: expected x and y to have the same dtype"));
  CHECK_THAT(error_message([&] { ag::linalg::vecdot(ag::ones({3}, ag::kInt64), ag::ones({3}, ag::kInt64)); }),
             Catch::Contains("expected floating tensors"));
  CHECK_THAT(error_message([&] { ag::linalg::vecdot(x, ag::randn({4, 3}, ag::kFloat64)); }),
             Catch::Contains("linalg_vecdot"));
  // On no autocast list, as PyTorch's: float32 stays float32, and mixed dtypes stay an error.
  ag::amp::AutocastGuard guard(ag::kCPU, ag::kBFloat16);
  CHECK(ag::linalg::vecdot(x.to(ag::kFloat32), y.to(ag::kFloat32)).dtype() == ag::kFloat32);
  CHECK_THROWS(ag::linalg::vecdot(x.to(ag::kFloat32), y.to(ag::kBFloat16)));
}
