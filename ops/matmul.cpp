// The matmul family: mm, bmm, matmul (batch dims broadcast), addmm, and the GEMM helpers that
// linear (ops/linear.cpp) shares (ops/gemm.h).
#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include <ampgrad/autograd/node.h>
#include <ampgrad/core/kernels.h>
#include <ampgrad/ops/fp8_gemm.h>
#include <ampgrad/ops/gemm.h>
#include <ampgrad/ops/internal.h>
#include <ampgrad/ops/op_scope.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad {

using autograd::Grads;
using Saved = std::vector<Tensor>;
using amp::Category;

namespace {
const OpInfo kMm{"mm", Category::lower, true, "tensor cores: float16/bfloat16 inputs with float32 accumulation"};
const OpInfo kBmm{"bmm", Category::lower, true, "tensor cores: float16/bfloat16 inputs with float32 accumulation"};
const OpInfo kMatmul{"matmul", Category::lower, true, "tensor cores: float16/bfloat16 inputs with float32 accumulation"};
const OpInfo kAddmm{"addmm", Category::lower, true, "tensor cores: float16/bfloat16 inputs with float32 accumulation"};
}  // namespace

void check_matmul_dtypes(const OpInfo& op, const Tensor& a, const Tensor& b) {
  check_same_device(op, a, b);
  AG_CHECK(a.dtype() == b.dtype(), "{}: expected both inputs to have the same dtype, got {} and {}", op.name,
           a.desc(), b.desc());
  AG_CHECK(is_floating(a.dtype()), "{}: expected floating inputs, got {} and {}", op.name, a.desc(), b.desc());
}

Tensor batched_gemm(const Tensor& a3, const Tensor& b3, const Tensor& c3, double alpha, double beta, Tensor out) {
  const int64_t batch = a3.size(0), m = a3.size(1), n = b3.size(2);
  if (!out.defined()) out = empty({batch, m, n}, a3.options());
  if (out.numel() == 0) return out;
  // c3 a bias row broadcast over the batch's rows (linear, addmm with a vector): cuBLASLt
  // adds it in the GEMM's epilogue instead of a copy into out and a beta = 1 GEMM.
  if (kernel::gemm_bias.has(out.device()) && c3.defined() && beta == 1 && batch == 1 && a3.size(2) > 0 && c3.size(1) == m &&
      c3.size(2) == n && (m == 1 || c3.stride(1) == 0) && (n == 1 || c3.stride(2) == 1) && c3.dtype() == out.dtype()) {
    const Tensor bias = alias_with(c3, {n}, {1}, c3.storage_offset());
    if (kernel::gemm_bias(out.device(), a3, b3, bias, out, alpha, kernel::GemmActivation::none, Tensor())) return out;
  }
  if (a3.size(2) == 0 || (c3.defined() && beta != 0)) {
    NoGradGuard no_grad;
    if (c3.defined() && beta != 0) {
      Tensor o = out;
      copy_into(o, c3);
    } else {
      fill_into(out, 0);
    }
    if (a3.size(2) == 0) {
      if (beta != 1 && c3.defined()) kernel::unary(out.device(), UnaryKind::MulScalar, out, out, beta, 0);
      return out;
    }
  }
  kernel::gemm(out.device(), a3, b3, out, alpha, c3.defined() ? beta : 0);
  return out;
}

Tensor batch1(const Tensor& t) {
  return alias_with(t, {1, t.size(0), t.size(1)}, {t.size(0) * t.size(1), t.stride(0), t.stride(1)},
                    t.storage_offset());
}

Tensor transposed(const Tensor& t) {
  return alias_with(t, {t.size(1), t.size(0)}, {t.stride(1), t.stride(0)}, t.storage_offset());
}

// Note [GEMM views]
// A small network's matrix products are bound by host time: cuBLASLt's call alone costs
// several microseconds, and each view made with the public ops (unsqueeze, t, reshape, view)
// adds its own dispatch and, when an input requires grad, an autograd node that is thrown
// away. mm and linear therefore build the [1, M, K] operands the GEMM kernel takes as plain
// aliases, and allocate their output in its final shape with a [1, M, N] alias for the
// kernel. On CUDA, mm skips even those: the CUDA GEMM (cuda/matmul.cpp) takes 2-D operands
// as a batch of one, and three alias tensors were a measurable part of a 1024-size float16
// mm's host time against raw cublasGemmEx.
Tensor gemm2d(const Tensor& a, const Tensor& b, const Tensor& bias_row) {
  const int64_t m = a.size(0), n = b.size(1);
  Tensor out = empty({m, n}, a.options());
  // The CUDA GEMM takes 2-D operands as they are: no alias at all on mm's host path.
  if (out.is_cuda() && !bias_row.defined()) {
    kernel::gemm(out.device(), a, b, out, 1, 0);  // empty outputs and empty sums included
    return out;
  }
  batched_gemm(batch1(a), batch1(b), bias_row, 1, bias_row.defined() ? 1 : 0, batch1(out));
  return out;
}

namespace {
// Only the gradients an input asked for at record time are computed (PyTorch's
// needs_input_grad): a first layer's input seldom requires grad, and its GEMM is the largest.
Grads mm_backward(const Tensor& g, const Tensor& a, const Tensor& b, bool need_a = true, bool need_b = true) {
  return {need_a ? mm(g, b.t()) : Tensor(), need_b ? mm(a.t(), g) : Tensor()};
}
}  // namespace

static bool fp8_autocast(const OpScope& scope) { return scope.autocast_dtype() && is_float8(*scope.autocast_dtype()); }

Tensor mm(const Tensor& a0, const Tensor& b0) {
  Tensor a = a0, b = b0;
  OpScope scope(kMm, a, b);
  check_defined(kMm, a, "first input");
  check_defined(kMm, b, "second input");
  AG_CHECK(a.dim() == 2 && b.dim() == 2, "mm: expected 2-D tensors, got {} and {}", a.desc(), b.desc());
  AG_CHECK(a.size(1) == b.size(0), "mm: shapes {} and {} cannot be multiplied ({} != {})", shape_str(a.shape()),
           shape_str(b.shape()), a.size(1), b.size(0));
  if (fp8_autocast(scope))
    if (Tensor y = fp8_mm(scope, kMm, a, b); y.defined()) return scope.finish(y);
  check_matmul_dtypes(kMm, a, b);
  Tensor out = gemm2d(a, b);
  if (autograd::any_requires_grad({&a, &b}))
    autograd::record(kMm, out, {a, b}, {a, b},
                     [need_a = a.requires_grad(), need_b = b.requires_grad()](const Tensor& g, const Saved& s) {
                       return mm_backward(g, s[0], s[1], need_a, need_b);
                     });
  return scope.finish(out);
}

Tensor bmm(const Tensor& a0, const Tensor& b0) {
  Tensor a = a0, b = b0;
  OpScope scope(kBmm, a, b);
  check_defined(kBmm, a, "first input");
  check_defined(kBmm, b, "second input");
  AG_CHECK(a.dim() == 3 && b.dim() == 3, "bmm: expected 3-D tensors, got {} and {}", a.desc(), b.desc());
  AG_CHECK(a.size(0) == b.size(0), "bmm: batch sizes differ: {} and {}", shape_str(a.shape()), shape_str(b.shape()));
  AG_CHECK(a.size(2) == b.size(1), "bmm: shapes {} and {} cannot be multiplied ({} != {})", shape_str(a.shape()),
           shape_str(b.shape()), a.size(2), b.size(1));
  if (fp8_autocast(scope))
    if (Tensor y = fp8_bmm(scope, kBmm, a, b); y.defined()) return scope.finish(y);
  check_matmul_dtypes(kBmm, a, b);
  Tensor out = batched_gemm(a, b);
  if (autograd::any_requires_grad({&a, &b}))
    autograd::record(kBmm, out, {a, b}, {a, b}, [](const Tensor& g, const Saved& s) {
      return Grads{bmm(g, s[1].transpose(1, 2)), bmm(s[0].transpose(1, 2), g)};
    });
  return scope.finish(out);
}

Tensor matmul(const Tensor& a0, const Tensor& b0) {
  Tensor a = a0, b = b0;
  OpScope scope(kMatmul, a, b);
  check_defined(kMatmul, a, "first input");
  check_defined(kMatmul, b, "second input");
  AG_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both inputs need at least 1 dimension, got {} and {}", a.desc(),
           b.desc());
  if (fp8_autocast(scope)) {
    // a [..., K] @ b [K, N] as one GEMM; [..., M, K] @ [..., K, N] with the same batch dims as
    // batched FP8 GEMMs (Note [Batched FP8 GEMMs]); broadcast batches and vectors in bfloat16.
    const bool same_batch = a.dim() >= 3 && a.dim() == b.dim() && a.size(-1) == b.size(-2) &&
                            std::equal(a.shape().begin(), a.shape().end() - 2, b.shape().begin());
    if (a.dim() >= 2 && b.dim() == 2 && a.size(-1) == b.size(0)) {
      if (Tensor y = fp8_mm(scope, kMatmul, a, b); y.defined()) return scope.finish(y);
    } else if (same_batch) {
      Tensor a3 = a.dim() == 3 ? a : a.reshape({-1, a.size(-2), a.size(-1)});
      Tensor b3 = b.dim() == 3 ? b : b.reshape({-1, b.size(-2), b.size(-1)});
      if (Tensor y = fp8_bmm(scope, kMatmul, a3, b3); y.defined()) {
        Shape os = a.shape();
        os.back() = b.size(-1);
        return scope.finish(a.dim() == 3 ? y : y.view(os));
      }
      a = a3.dim() == a.dim() ? a3 : a3.view(a.shape());
      b = b3.dim() == b.dim() ? b3 : b3.view(b.shape());
    } else {
      scope.cast_inputs(kBFloat16, a, b);
      scope.note_path([&] {
        return fmt::format("bfloat16, not FP8: {} @ {} broadcasts (FP8 takes [..., K] @ [K, N] and equal batches)",
                           a.desc(), b.desc());
      });
    }
  }
  check_matmul_dtypes(kMatmul, a, b);
  // 1-D operands become matrices, as in NumPy, and their added dim is dropped at the end.
  Tensor x = a.dim() == 1 ? a.unsqueeze(0) : a;
  Tensor y = b.dim() == 1 ? b.unsqueeze(1) : b;
  const int64_t m = x.size(-2), k = x.size(-1), k2 = y.size(-2), n = y.size(-1);
  AG_CHECK(k == k2, "matmul: shapes {} and {} cannot be multiplied ({} != {})", shape_str(a.shape()),
           shape_str(b.shape()), k, k2);
  Shape xb(x.shape().begin(), x.shape().end() - 2), yb(y.shape().begin(), y.shape().end() - 2);
  Shape batch = broadcast_shapes(kMatmul.name, xb, yb);
  const int64_t nb = shape_numel(batch);
  Shape xs = batch, ys = batch;
  xs.insert(xs.end(), {m, k});
  ys.insert(ys.end(), {k, n});
  Tensor out;
  {
    NoGradGuard no_grad;  // the graph records matmul itself, not its reshapes
    Tensor x3 = broadcast_to(x, xs), y3 = broadcast_to(y, ys);
    // Collapse batch dims into one when they are laid out as one (always true after broadcast of a 3-D input).
    auto as3 = [nb](const Tensor& t) {
      if (t.dim() == 3) return t;
      if (t.dim() == 2) return t.unsqueeze(0);
      // The batch dims of more than one element (a dim of size 1 is never stepped along, and its
      // stride may be anything: [B, T, 1, E] transposed to [B, 1, T, E] has T * E... E, E).
      auto batch_stride = [](const Tensor& u) -> std::optional<int64_t> {
        std::optional<int64_t> inner;
        int64_t span = 0;
        for (int64_t i = u.dim() - 3; i >= 0; --i) {
          if (u.size(i) == 1) continue;
          if (!inner) inner = u.stride(i);
          else if (u.stride(i) != span) return std::nullopt;
          span = u.stride(i) * u.size(i);
        }
        return inner.value_or(u.size(-2) * u.size(-1));
      };
      Tensor c = t;
      std::optional<int64_t> bs = batch_stride(c);
      if (!bs) {
        c = t.contiguous();
        bs = batch_stride(c);
      }
      // (An empty tensor counts as contiguous and may keep odd strides: any batch stride does.)
      return alias_with(c, {nb, c.size(-2), c.size(-1)}, {bs.value_or(c.size(-2) * c.size(-1)), c.stride(-2), c.stride(-1)},
                        c.storage_offset());
    };
    Shape os = batch;
    os.insert(os.end(), {m, n});
    out = batched_gemm(as3(x3), as3(y3)).view(os);
    if (a.dim() == 1) out = out.squeeze(-2);
    if (b.dim() == 1) out = out.squeeze(-1);
  }
  if (autograd::any_requires_grad({&a, &b})) {
    autograd::record(kMatmul, out, {a, b}, {a, b}, [](const Tensor& g, const Saved& s) {
      const Tensor& a = s[0];
      const Tensor& b = s[1];
      // Restore the dropped 1-D dims on g, then use the matrix rule; the engine sums the
      // broadcast batch dims back (Note [Grad shape and dtype]).
      Tensor gg = g;
      if (a.dim() == 1) gg = gg.unsqueeze(b.dim() == 1 ? 0 : -2);
      if (b.dim() == 1) gg = gg.unsqueeze(-1);
      Tensor x = a.dim() == 1 ? a.unsqueeze(0) : a;
      Tensor y = b.dim() == 1 ? b.unsqueeze(1) : b;
      Tensor ga = matmul(gg, y.transpose(-1, -2));
      Tensor gb = matmul(x.transpose(-1, -2), gg);
      if (a.dim() == 1) ga = sum_to(ga, {1, a.size(0)}).view(a.shape());
      if (b.dim() == 1) gb = sum_to(gb, {b.size(0), 1}).view(b.shape());
      return Grads{ga, gb};
    });
  }
  return scope.finish(out);
}

Tensor addmm(const Tensor& c0, const Tensor& a0, const Tensor& b0, const Scalar& beta, const Scalar& alpha) {
  Tensor c = c0, a = a0, b = b0;
  OpScope scope(kAddmm, c, a, b);
  check_defined(kAddmm, c, "input");
  check_defined(kAddmm, a, "mat1");
  check_defined(kAddmm, b, "mat2");
  AG_CHECK(a.dim() == 2 && b.dim() == 2, "addmm: expected 2-D mat1 and mat2, got {} and {}", a.desc(), b.desc());
  AG_CHECK(a.size(1) == b.size(0), "addmm: shapes {} and {} cannot be multiplied ({} != {})", shape_str(a.shape()),
           shape_str(b.shape()), a.size(1), b.size(0));
  Shape os{a.size(0), b.size(1)};
  AG_CHECK(shape_numel(broadcast_shapes(kAddmm.name, c.shape(), os)) == shape_numel(os),
           "addmm: input {} cannot be broadcast to the product's shape {}", c.desc(), shape_str(os));
  const double be = beta.to_double(), al = alpha.to_double();
  if (fp8_autocast(scope)) {
    check_same_device(kAddmm, c, a);
    Tensor r = fp8_mm(scope, kAddmm, a, b);
    if (r.defined()) {
      if (al != 1) r = mul(r, alpha);
      if (be == 0) return scope.finish(r);
      const Tensor cc = c.dtype() == kBFloat16 || c.dtype() == kFloat64 ? c : c.to(kBFloat16);
      return scope.finish(add(r, be == 1 ? cc : mul(cc, beta)));
    }
    scope.cast_inputs(kBFloat16, c);
  }
  check_matmul_dtypes(kAddmm, a, b);
  check_matmul_dtypes(kAddmm, c, a);
  Tensor out;
  {
    NoGradGuard no_grad;
    out = batched_gemm(a.unsqueeze(0), b.unsqueeze(0), broadcast_to(c, os).unsqueeze(0), al, be).view(os);
  }
  if (autograd::any_requires_grad({&c, &a, &b}))
    autograd::record(kAddmm, out, {c, a, b}, {a, b},
                     [be, al, need_a = a.requires_grad(), need_b = b.requires_grad()](const Tensor& g, const Saved& s) {
      Grads ab = mm_backward(g, s[0], s[1], need_a, need_b);
      auto scaled = [al](const Tensor& t) { return al == 1 || !t.defined() ? t : t * al; };
      return Grads{be == 1 ? g : g * be, scaled(ab[0]), scaled(ab[1])};
    });
  return scope.finish(out);
}

}  // namespace ampgrad
