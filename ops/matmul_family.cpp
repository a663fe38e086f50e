// The rest of the float16 list's matrix products: mv, addmv, addr, baddbmm, addbmm,
// multi_dot and chain_matmul. Each is a record of category lower (tensor cores, float32
// accumulation, as mm) over the GEMM ops: addmv, addr and addbmm are an addmm of reshaped
// operands, baddbmm one batched GEMM with beta, multi_dot a chain of mm in the cheapest order.
#include <limits>

#include <ampgrad/autograd/node.h>
#include <ampgrad/ops/gemm.h>
#include <ampgrad/ops/internal.h>
#include <ampgrad/ops/op_scope.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad {

using amp::Category;
using autograd::Grads;
using Saved = std::vector<Tensor>;

namespace {

const OpInfo kMv{"mv", Category::lower, true, "tensor cores: float16/bfloat16 inputs with float32 accumulation"};
const OpInfo kAddmv{"addmv", Category::lower, true, "tensor cores: float16/bfloat16 inputs with float32 accumulation"};
const OpInfo kAddr{"addr", Category::lower, true, "tensor cores: float16/bfloat16 inputs with float32 accumulation"};
const OpInfo kBaddbmm{"baddbmm", Category::lower, true, "tensor cores: float16/bfloat16 inputs with float32 accumulation"};
const OpInfo kAddbmm{"addbmm", Category::lower, true, "tensor cores: float16/bfloat16 inputs with float32 accumulation"};
const OpInfo kMultiDot{"multi_dot", Category::lower, true, "tensor cores: float16/bfloat16 inputs with float32 accumulation"};
const OpInfo kChainMatmul{"chain_matmul", Category::lower, true,
                          "tensor cores: float16/bfloat16 inputs with float32 accumulation"};

void check_rank(const OpInfo& op, const Tensor& t, int64_t rank, const char* what) {
  check_defined(op, t, what);
  AG_CHECK(t.dim() == rank, "{}: expected a {}-D {}, got {}", op.name, rank, what, t.desc());
}

// The product of matrices ms[i..j] in the order `split` says (split[i][j]: the k that splits
// i..j into i..k and k+1..j).
Tensor chain(const std::vector<Tensor>& ms, const std::vector<std::vector<size_t>>& split, size_t i, size_t j) {
  if (i == j) return ms[i];
  const size_t k = split[i][j];
  return mm(chain(ms, split, i, k), chain(ms, split, k + 1, j));
}

// The matrix-chain order of least multiply-adds (the classic O(n^3) dynamic program), as
// torch.linalg.multi_dot; then the mm's in that order.
Tensor multi_dot_impl(const OpInfo& op, std::vector<Tensor> ts) {
  OpScope scope(op, ts);
  AG_CHECK(ts.size() >= 2, "{}: expected at least 2 tensors, got {}", op.name, ts.size());
  const size_t n = ts.size();
  for (size_t i = 0; i < n; ++i) {
    check_defined(op, ts[i], "tensor");
    const bool end = i == 0 || i + 1 == n;
    AG_CHECK(ts[i].dim() == 2 || (end && ts[i].dim() == 1 && &op == &kMultiDot),
             "{}: tensor {} must be 2-D{}, got {}", op.name, i, &op == &kMultiDot ? " (the first and last may be 1-D)" : "",
             ts[i].desc());
    if (i) check_matmul_dtypes(op, ts[0], ts[i]);
  }
  // A 1-D first tensor is a row, a 1-D last one a column; their dims are dropped at the end.
  const bool row = ts[0].dim() == 1, col = ts[n - 1].dim() == 1;
  std::vector<Tensor> ms = ts;
  if (row) ms[0] = ms[0].unsqueeze(0);
  if (col) ms[n - 1] = ms[n - 1].unsqueeze(1);
  std::vector<int64_t> dims{ms[0].size(0)};
  for (size_t i = 0; i < n; ++i) {
    AG_CHECK(ms[i].size(0) == dims.back(), "{}: tensors {} ({}) and {} ({}) cannot be multiplied", op.name, i - 1,
             ts[i - 1].desc(), i, ts[i].desc());
    dims.push_back(ms[i].size(1));
  }
  std::vector<std::vector<double>> cost(n, std::vector<double>(n, 0));
  std::vector<std::vector<size_t>> split(n, std::vector<size_t>(n, 0));
  for (size_t len = 1; len < n; ++len)
    for (size_t i = 0; i + len < n; ++i) {
      const size_t j = i + len;
      cost[i][j] = std::numeric_limits<double>::infinity();
      for (size_t k = i; k < j; ++k) {
        const double c = cost[i][k] + cost[k + 1][j] +
                         static_cast<double>(dims[i]) * static_cast<double>(dims[k + 1]) * static_cast<double>(dims[j + 1]);
        if (c < cost[i][j]) {
          cost[i][j] = c;
          split[i][j] = k;
        }
      }
    }
  Tensor out = chain(ms, split, 0, n - 1);
  if (row) out = out.squeeze(0);
  if (col) out = out.squeeze(-1);
  return scope.finish(out);
}

}  // namespace

Tensor mv(const Tensor& a0, const Tensor& x0) {
  Tensor a = a0, x = x0;
  OpScope scope(kMv, a, x);
  check_rank(kMv, a, 2, "matrix");
  check_rank(kMv, x, 1, "vector");
  check_matmul_dtypes(kMv, a, x);
  AG_CHECK(a.size(1) == x.size(0), "mv: shapes {} and {} cannot be multiplied ({} != {})", shape_str(a.shape()),
           shape_str(x.shape()), a.size(1), x.size(0));
  return scope.finish(mm(a, x.unsqueeze(1)).squeeze(1));
}

Tensor addmv(const Tensor& y0, const Tensor& a0, const Tensor& x0, const Scalar& beta, const Scalar& alpha) {
  Tensor y = y0, a = a0, x = x0;
  OpScope scope(kAddmv, y, a, x);
  check_defined(kAddmv, y, "input");
  check_rank(kAddmv, a, 2, "mat");
  check_rank(kAddmv, x, 1, "vec");
  check_matmul_dtypes(kAddmv, a, x);
  check_matmul_dtypes(kAddmv, y, a);
  AG_CHECK(a.size(1) == x.size(0), "addmv: shapes {} and {} cannot be multiplied ({} != {})", shape_str(a.shape()),
           shape_str(x.shape()), a.size(1), x.size(0));
  AG_CHECK(y.dim() <= 1 && (y.dim() == 0 || y.size(0) == a.size(0) || y.size(0) == 1),
           "addmv: input {} cannot be broadcast to the product's shape [{}]", y.desc(), a.size(0));
  // beta * y + alpha * A x as addmm of [n, 1] columns (y broadcast first; beta 0 ignores it).
  const Tensor yc = expand(y, {a.size(0)}).unsqueeze(1);
  return scope.finish(addmm(yc, a, x.unsqueeze(1), beta, alpha).squeeze(1));
}

Tensor addr(const Tensor& m0, const Tensor& v10, const Tensor& v20, const Scalar& beta, const Scalar& alpha) {
  Tensor m = m0, v1 = v10, v2 = v20;
  OpScope scope(kAddr, m, v1, v2);
  check_defined(kAddr, m, "input");
  check_rank(kAddr, v1, 1, "vec1");
  check_rank(kAddr, v2, 1, "vec2");
  check_matmul_dtypes(kAddr, v1, v2);
  check_matmul_dtypes(kAddr, m, v1);
  // beta * M + alpha * outer(v1, v2): a GEMM with an inner size of 1.
  return scope.finish(addmm(m, v1.unsqueeze(1), v2.unsqueeze(0), beta, alpha));
}

Tensor baddbmm(const Tensor& m0, const Tensor& a0, const Tensor& b0, const Scalar& beta, const Scalar& alpha) {
  Tensor m = m0, a = a0, b = b0;
  OpScope scope(kBaddbmm, m, a, b);
  check_defined(kBaddbmm, m, "input");
  check_rank(kBaddbmm, a, 3, "batch1");
  check_rank(kBaddbmm, b, 3, "batch2");
  check_matmul_dtypes(kBaddbmm, a, b);
  check_matmul_dtypes(kBaddbmm, m, a);
  AG_CHECK(a.size(0) == b.size(0) && a.size(2) == b.size(1),
           "baddbmm: batches {} and {} cannot be multiplied (batch sizes and inner sizes must match)", a.desc(), b.desc());
  const Shape os{a.size(0), a.size(1), b.size(2)};
  AG_CHECK(shape_numel(broadcast_shapes(kBaddbmm.name, m.shape(), os)) == shape_numel(os),
           "baddbmm: input {} cannot be broadcast to the product's shape {}", m.desc(), shape_str(os));
  const double be = beta.to_double(), al = alpha.to_double();
  Tensor out;
  {
    NoGradGuard no_grad;  // one batched GEMM: out = alpha * A B + beta * M (M ignored when beta is 0)
    out = batched_gemm(a, b, broadcast_to(m, os), al, be);
  }
  if (autograd::any_requires_grad({&m, &a, &b})) {
    autograd::record(kBaddbmm, out, {m, a, b}, {a, b},
                     [be, al, need_a = a.requires_grad(), need_b = b.requires_grad()](const Tensor& g, const Saved& s) {
                       Tensor ga = need_a ? bmm(g, s[1].transpose(1, 2)) : Tensor();
                       Tensor gb = need_b ? bmm(s[0].transpose(1, 2), g) : Tensor();
                       auto scaled = [al](const Tensor& t) { return al == 1 || !t.defined() ? t : t * al; };
                       return Grads{be == 1 ? g : g * be, scaled(ga), scaled(gb)};
                     });
  }
  return scope.finish(out);
}

Tensor addbmm(const Tensor& m0, const Tensor& a0, const Tensor& b0, const Scalar& beta, const Scalar& alpha) {
  Tensor m = m0, a = a0, b = b0;
  OpScope scope(kAddbmm, m, a, b);
  check_defined(kAddbmm, m, "input");
  check_rank(kAddbmm, a, 3, "batch1");
  check_rank(kAddbmm, b, 3, "batch2");
  check_matmul_dtypes(kAddbmm, a, b);
  AG_CHECK(a.size(0) == b.size(0) && a.size(2) == b.size(1),
           "addbmm: batches {} and {} cannot be multiplied (batch sizes and inner sizes must match)", a.desc(), b.desc());
  // beta * M + alpha * sum over the batch of A_i B_i: one GEMM over [n, batch * m] @ [batch * m, p].
  const int64_t nb = a.size(0), n = a.size(1), k = a.size(2), p = b.size(2);
  const Tensor wide = permute(a, {1, 0, 2}).reshape({n, nb * k});
  return scope.finish(addmm(m, wide, b.reshape({nb * k, p}), beta, alpha));
}

Tensor multi_dot(const std::vector<Tensor>& tensors) { return multi_dot_impl(kMultiDot, tensors); }
Tensor chain_matmul(const std::vector<Tensor>& matrices) {
  if (matrices.size() == 1) {  // as PyTorch's: the one matrix, copied
    Tensor m = matrices[0];
    OpScope scope(kChainMatmul, m);
    check_defined(kChainMatmul, m, "tensor");
    AG_CHECK(m.dim() == 2, "chain_matmul: tensor 0 must be 2-D, got {}", m.desc());
    return scope.finish(m.clone());
  }
  return multi_dot_impl(kChainMatmul, matrices);
}

}  // namespace ampgrad
