// FP8 autocast's GEMMs, forward and backward (Note [FP8 autocast] in amp/autocast.h, Note
// [FP8 GEMMs' layouts] below).
#include <ampgrad/ops/fp8_gemm.h>

#include <fmt/format.h>

#include <ampgrad/amp/fp8.h>
#include <ampgrad/autograd/node.h>
#include <ampgrad/core/float8_kernels.h>
#include <ampgrad/core/kernels.h>
#include <ampgrad/ops/float8_ops.h>
#include <ampgrad/ops/gemm.h>
#include <ampgrad/ops/internal.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad {

using amp::Fp8Role;

// Note [FP8 GEMMs' layouts]
// Hopper's FP8 GEMMs take one layout (cuBLASLt's "TN"): in ampgrad's terms scaled_mm's a
// [M, K] row-major and b [K, N] column-major, i.e. both operands with K innermost. For
// y = x @ w^T (x [M, K], w [N, K]) the forward needs x and w row-major; the input gradient
// dx = dy @ w needs dy row-major and w^T row-major; the weight gradient dw = dy^T @ x needs
// dy^T and x^T row-major. So each quantization writes its tensor and, when a backward GEMM
// will need it, its transpose, in the same pass (the transposes are what backward saves:
// x^T and w^T, one byte a value instead of the two of a bfloat16 input). For mm(a, b) with b
// [K, N], w = b^T: its gradient is computed as db = x^T @ dy, [K, N] and contiguous,
// from the same quantized tensors. Every GEMM's K and N must be multiples of 16: in_features
// and out_features, and the rows (M) when the weight gradient is wanted. The forward
// accumulates with cuBLASLt's fast FP8 accumulation, the backward's GEMMs without it
// (Transformer Engine's split accumulator): gradients sum over many more terms.
namespace {

struct Quantized {
  Tensor q, q_t, scale_inv;
};

bool is_parameter(const Tensor& t) { return t.defined() && t.is_leaf() && t.requires_grad(); }

// t (2-D, float32/16-bit, any strides) quantized with its scale from the recipe: the state of
// (key, role) when a parameter keys it, else current scaling with buffers of its own.
// With a mask, t where mask > 0 (relu's backward); col_sums (float32 [C]) receives the
// column sums of (masked) t (the bias gradient).
Quantized quantize(amp::Fp8Recipe& recipe, const Tensor& t, const Tensor& key, Fp8Role role, bool with_t,
                   const Tensor& mask = Tensor(), const Tensor& col_sums = Tensor()) {
  const Device dev = t.device();
  const TensorOptions f32 = TensorOptions(kFloat32).device(dev);
  kernel::Fp8Quantize q;
  q.mask = mask;
  q.col_sums = col_sums;
  if (key.defined()) {
    amp::detail::Fp8Meta& m = recipe.meta(key, role);
    q.amax = m.amax;
    q.scale = m.scale;
    if (recipe.collecting_stats()) {
      q.counts = m.counts;
      m.quantized += t.numel();
    }
  } else {
    q.amax = empty({1}, f32);
    q.scale = ones({1}, f32);
  }
  q.current = !recipe.delayed() || !key.defined();
  q.fp8_max = recipe.fp8_max(role);
  q.margin = recipe.config().margin;
  Quantized out;
  out.scale_inv = empty({1}, f32);
  q.scale_inv = out.scale_inv;
  const TensorOptions f8 = TensorOptions(recipe.dtype(role)).device(dev);
  out.q = empty({t.size(0), t.size(1)}, f8);
  if (with_t) out.q_t = empty({t.size(1), t.size(0)}, f8);
  kernel::fp8_quantize(dev, t, q, out.q, out.q_t);
  return out;
}

// The trace's path of an FP8 GEMM: its operands' formats, its scaling, its gradients' format.
void note_fp8_path(OpScope& scope, const char* kind, const amp::Fp8Recipe& recipe, const Quantized& a,
                   const Quantized& b, const Tensor& key, bool grad, bool relu = false) {
  scope.note_path([&] {
    return fmt::format("{}: {} x {} -> bfloat16{}, {} scaling{}", kind, dtype_name(a.q.dtype()), dtype_name(b.q.dtype()),
                       relu ? " with the relu epilogue" : "",
                       key.defined() && recipe.delayed() ? "delayed" : "current",
                       grad ? fmt::format("; backward {} gradients", dtype_name(recipe.dtype(Fp8Role::grad_output)))
                            : std::string());
  });
}

bool fp8_able(const Tensor& t) {
  return !t.defined() || t.dtype() == kFloat32 || t.dtype() == kFloat16 || t.dtype() == kBFloat16;
}

// Why no FP8 GEMM takes x [M, K] @ w^T (w [N, K]); empty when one does.
std::string refusal(const Tensor& x, const Tensor& w_src, const Tensor& b, int64_t m, int64_t k, int64_t n,
                    bool need_w) {
  if (!fp8_able(x) || !fp8_able(w_src) || !fp8_able(b))
    return fmt::format("inputs {} and {}: FP8 quantizes float32, float16 and bfloat16 only", x.desc(),
                       w_src.desc());
  if (m == 0 || k == 0 || n == 0) return "an empty product";
  if (k % 16 || n % 16)
    return fmt::format("K = {} and N = {} must be multiples of 16 for FP8 GEMMs", k, n);
  if (need_w && m % 16)
    return fmt::format("the weight gradient's GEMM sums over the {} rows, which must be a multiple of 16", m);
  return {};
}

// Note [FP8 linear_relu]
// linear_relu under FP8 autocast is one node, as in 16 bits (Note [Linear + ReLU] in
// ops/linear.cpp): forward, the relu in the FP8 GEMM's epilogue (EPILOGUE_RELU_BIAS); backward,
// the gradient's quantization reads the saved output as relu's mask and zeroes the gradient
// where it is <= 0, and writes the bias gradient (the masked gradient's column sums,
// float32, from the unquantized values) in the same pass. So relu's forward and backward
// kernels and the bias gradient's reduction are gone: each a pass over an [M, N] tensor (on
// the H200, 4 x Linear(4096) at batch 4096 spent 17, 24 and 31 us per layer on them).
// The bias gradient of a plain linear comes from the same pass, unmasked. As in 16 bits, the
// epilogue's relu may turn a NaN into 0 where relu keeps it (cuBLASLt documents max(x, 0));
// the mask passes the gradient where the output is NaN, as relu's backward (PyTorch's
// threshold_backward).

// The GEMMs of y = x2 @ w^T + bias [then relu], x2 [M, K] and w [N, K] (w_src itself, or for
// mm_form w_src = b [K, N] and w = b^T), forward and backward.
Tensor fp8_gemm(OpScope& scope, const OpInfo& op, Tensor& x, Tensor& w_src, Tensor& b, bool mm_form, bool relu) {
  amp::Fp8Recipe* recipe = amp::get_autocast_fp8_recipe(x.device().type);
  AG_CHECK(recipe != nullptr, "{}: FP8 autocast is not enabled for {}", op.name, x.device().str());
  check_same_device(op, x, w_src);
  if (b.defined()) check_same_device(op, x, b);
  const int64_t k = x.size(-1), n = mm_form ? w_src.size(1) : w_src.size(0);
  const int64_t m = k == 0 ? 0 : x.numel() / k;
  const bool grad = autograd::any_requires_grad({&x, &w_src, &b});
  const bool need_x = grad && x.requires_grad(), need_w = grad && w_src.requires_grad();
  const bool need_b = grad && b.defined() && b.requires_grad();
  if (std::string why = refusal(x, w_src, b, m, k, n, need_w); !why.empty()) {
    scope.cast_inputs(kBFloat16, x, w_src, b);
    scope.note_path([&] { return "bfloat16, not FP8: " + why; });
    return Tensor();
  }
  // The parameter operand keys the scales (Note [FP8 scaling]); none: current scaling.
  const Tensor key = is_parameter(w_src) ? w_src : (is_parameter(x) ? x : Tensor());
  const Shape x_shape = x.shape();
  const DType x_dtype = x.dtype(), w_dtype = w_src.dtype();
  Quantized xq, wq;
  Tensor out;
  {
    NoGradGuard no_grad;
    const Tensor x2 = x.dim() == 2 ? x : x.reshape({m, k});
    const Tensor w = mm_form ? transposed(w_src) : w_src;
    xq = quantize(*recipe, x2, key, Fp8Role::input, need_w);
    wq = quantize(*recipe, w, key, Fp8Role::weight, need_x);
    // Contiguous: the relu path below hands it to the kernel directly (a strided bfloat16 view
    // would pass to(kBFloat16) unchanged).
    const Tensor bias = b.defined() ? b.to(kBFloat16).contiguous() : Tensor();
    if (relu && x.is_cuda()) {
      out = empty({m, n}, TensorOptions(kBFloat16).device(x.device()));
      kernel::scaled_gemm(out.device(), xq.q, transposed(wq.q), xq.scale_inv, wq.scale_inv, bias, Tensor(), Tensor(),
                          /*fast_accum=*/true, /*relu=*/true, out);
    } else {
      out = scaled_mm(xq.q, transposed(wq.q), xq.scale_inv, wq.scale_inv, bias, kBFloat16, /*use_fast_accum=*/true);
      if (relu) kernel::unary(out.device(), UnaryKind::Relu, out, out, 0, 0);
    }
  }
  // [M, N], relu's backward reads it; detached: no cycle through out's node
  const Tensor mask = relu && grad ? out.detach() : Tensor();
  if (x.dim() != 2) {
    Shape os = x_shape;
    os.back() = n;
    out = out.view(os);
  }
  note_fp8_path(scope, "FP8 GEMM", *recipe, xq, wq, key, grad, relu);
  if (grad) {
    std::vector<Tensor> saved{xq.q_t, wq.q_t, xq.scale_inv, wq.scale_inv, mask};
    const DType b_dtype = b.defined() ? b.dtype() : kFloat32;
    autograd::record(op, out, {x, w_src, b}, std::move(saved),
                     [recipe, key, need_x, need_w, need_b, mm_form, x_shape, x_dtype, w_dtype, b_dtype](
                         const Tensor& g, const std::vector<Tensor>& s) {
                       const Tensor g2 = g.dim() == 2 ? g : g.reshape({-1, g.size(-1)});
                       Tensor gb = need_b ? empty({g2.size(1)}, TensorOptions(kFloat32).device(g2.device())) : Tensor();
                       const Quantized gq = quantize(*recipe, g2, key, Fp8Role::grad_output, need_w, s[4], gb);
                       if (gb.defined() && b_dtype != kFloat32) gb = gb.to(b_dtype);
                       Tensor gx, gw;
                       if (need_x)  // dx = dy @ w: w^T row-major is b's column-major [N, K]
                         gx = scaled_mm(gq.q, transposed(s[1]), gq.scale_inv, s[3], Tensor(), x_dtype).view(x_shape);
                       if (need_w)
                         gw = mm_form ? scaled_mm(s[0], transposed(gq.q_t), s[2], gq.scale_inv, Tensor(), w_dtype)
                                      : scaled_mm(gq.q_t, transposed(s[0]), gq.scale_inv, s[2], Tensor(), w_dtype);
                       return autograd::Grads{gx, gw, gb};
                     });
  }
  return out;
}

// Why no FP8 GEMM takes the batch a [B, M, K] @ b [B, K, N]; empty when one does.
std::string batched_refusal(const Tensor& a, const Tensor& b, bool need_b) {
  if (!fp8_able(a) || !fp8_able(b))
    return fmt::format("inputs {} and {}: FP8 quantizes float32, float16 and bfloat16 only", a.desc(), b.desc());
  const int64_t m = a.size(1), k = a.size(2), n = b.size(2);
  if (a.size(0) == 0 || m == 0 || k == 0 || n == 0) return "an empty product";
  if (k % 16 || n % 16) return fmt::format("K = {} and N = {} must be multiples of 16 for FP8 GEMMs", k, n);
  if (need_b && m % 16)
    return fmt::format("the second input's gradient sums over the {} rows, which must be a multiple of 16", m);
  return {};
}

// Note [Batched FP8 GEMMs]
// bmm(a, b), a [B, M, K] and b [B, K, N], quantizes each operand as one matrix, a as
// [B*M, K] and b as [B*K, N] (one scale for the whole batch), with their transposes, and
// runs batched strided FP8 GEMMs on views of them, every matrix with K innermost as Hopper
// wants (Note [FP8 GEMMs' layouts]): forward a[i] (rows of aq, batch stride M*K) times b[i]
// column-major (columns of bq^T [N, B*K]: leading dimension B*K, batch stride K); the input
// gradient da[i] = g[i] b[i]^T from gq and bq's rows; the second input's gradient
// db[i] = a[i]^T g[i] from aq^T [K, B*M] and gq^T [N, B*M] (batch stride M). So K and N must
// be multiples of 16, and M too when b's gradient is wanted.
Tensor fp8_batched(OpScope& scope, const OpInfo& op, Tensor& a, Tensor& b) {
  amp::Fp8Recipe* recipe = amp::get_autocast_fp8_recipe(a.device().type);
  AG_CHECK(recipe != nullptr, "{}: FP8 autocast is not enabled for {}", op.name, a.device().str());
  check_same_device(op, a, b);
  const bool grad = autograd::any_requires_grad({&a, &b});
  const bool need_a = grad && a.requires_grad(), need_b = grad && b.requires_grad();
  if (std::string why = batched_refusal(a, b, need_b); !why.empty()) {
    scope.cast_inputs(kBFloat16, a, b);
    scope.note_path([&] { return "bfloat16, not FP8: " + why; });
    return Tensor();
  }
  const int64_t nb = a.size(0), m = a.size(1), k = a.size(2), n = b.size(2);
  // A parameter operand keys the scales (b as the "weight"); none (attention's products): current scaling.
  const Tensor key = is_parameter(b) ? b : (is_parameter(a) ? a : Tensor());
  const DType a_dtype = a.dtype(), b_dtype = b.dtype();
  Quantized aq, bq;
  Tensor out;
  {
    NoGradGuard no_grad;
    aq = quantize(*recipe, a.reshape({nb * m, k}), key, Fp8Role::input, need_b);
    bq = quantize(*recipe, b.reshape({nb * k, n}), key, Fp8Role::weight, true);
    const Tensor a3 = alias_with(aq.q, {nb, m, k}, {m * k, k, 1}, aq.q.storage_offset());
    const Tensor b3 = alias_with(bq.q_t, {nb, k, n}, {k, 1, nb * k}, bq.q_t.storage_offset());
    out = scaled_mm(a3, b3, aq.scale_inv, bq.scale_inv, Tensor(), kBFloat16, /*use_fast_accum=*/true);
  }
  note_fp8_path(scope, "batched FP8 GEMM", *recipe, aq, bq, key, grad);
  if (grad) {
    std::vector<Tensor> saved{need_b ? aq.q_t : Tensor(), need_a ? bq.q : Tensor(), aq.scale_inv, bq.scale_inv};
    autograd::record(op, out, {a, b}, std::move(saved),
                     [recipe, key, need_a, need_b, nb, m, k, n, a_dtype, b_dtype](const Tensor& g,
                                                                                   const std::vector<Tensor>& s) {
                       const Quantized gq =
                           quantize(*recipe, g.reshape({nb * m, n}), key, Fp8Role::grad_output, need_b);
                       Tensor ga, gb;
                       if (need_a)  // ga[i] = g[i] @ b[i]^T: b[i]^T column-major is b[i]'s rows
                         ga = scaled_mm(alias_with(gq.q, {nb, m, n}, {m * n, n, 1}, gq.q.storage_offset()),
                                        alias_with(s[1], {nb, n, k}, {k * n, 1, n}, s[1].storage_offset()), gq.scale_inv, s[3], Tensor(),
                                        a_dtype);
                       if (need_b)  // gb[i] = a[i]^T @ g[i], from the transposes [K, B*M] and [N, B*M]
                         gb = scaled_mm(alias_with(s[0], {nb, k, m}, {m, nb * m, 1}, s[0].storage_offset()),
                                        alias_with(gq.q_t, {nb, m, n}, {m, 1, nb * m}, gq.q_t.storage_offset()), s[2], gq.scale_inv, Tensor(),
                                        b_dtype);
                       return autograd::Grads{ga, gb};
                     });
  }
  return out;
}

}  // namespace

Tensor fp8_bmm(OpScope& scope, const OpInfo& op, Tensor& a, Tensor& b) { return fp8_batched(scope, op, a, b); }

Tensor fp8_linear(OpScope& scope, const OpInfo& op, Tensor& x, Tensor& w, Tensor& b, bool relu) {
  return fp8_gemm(scope, op, x, w, b, false, relu);
}

Tensor fp8_mm(OpScope& scope, const OpInfo& op, Tensor& a, Tensor& b) {
  Tensor none;
  return fp8_gemm(scope, op, a, b, none, true, false);
}

}  // namespace ampgrad
