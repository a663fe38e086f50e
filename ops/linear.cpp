// linear, and linear_relu: the same layer with its relu in the GEMM's epilogue (nn::Sequential
// runs each Linear followed by a ReLU as one, Note [Linear + ReLU], or by a tanh GELU, Note [Linear + GELU]).
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
const OpInfo kLinear{"linear", Category::lower, true, "tensor cores: float16/bfloat16 inputs with float32 accumulation"};
const OpInfo kLinearRelu{"linear_relu", Category::lower, true,
                         "tensor cores, as PyTorch's linear; the relu rides in the GEMM's epilogue"};
const OpInfo kLinearGelu{"linear_gelu", Category::lower, true,
                         "tensor cores, as PyTorch's linear; the tanh gelu rides in the GEMM's epilogue"};

// same_dtype: false under FP8 autocast, whose GEMMs take float32 and 16-bit inputs mixed.
void check_linear(const OpInfo& op, const Tensor& x, const Tensor& w, const Tensor& b, bool same_dtype = true) {
  check_defined(op, x, "input");
  check_defined(op, w, "weight");
  AG_CHECK(w.dim() == 2, "{}: weight must be 2-D [out_features, in_features], got {}", op.name, w.desc());
  AG_CHECK(x.dim() >= 1 && x.size(-1) == w.size(1),
           "{}: input {} has {} features but weight {} expects {} (in_features)", op.name, x.desc(),
           x.dim() ? x.size(-1) : 0, shape_str(w.shape()), w.size(1));
  if (same_dtype) check_matmul_dtypes(op, x, w);
  if (b.defined()) {
    if (same_dtype) check_matmul_dtypes(op, w, b);
    AG_CHECK(b.dim() == 1 && b.size(0) == w.size(0), "{}: bias {} must be [{}] (out_features)", op.name, b.desc(),
             w.size(0));
  }
}

// The gradients of x @ w^T + b for the incoming gradient g2 ([rows, out_features]).
Grads linear_grads(const Tensor& g2, const Tensor& x, const Tensor& w, bool has_bias, bool need_x, bool need_w,
                   bool wide) {
  Tensor x2 = x.dim() == 2 ? x : x.reshape({-1, x.size(-1)});
  Tensor gx = need_x ? mm(g2, w).view(x.shape()) : Tensor();
  Tensor gw, gb;
  if (need_w) {
    const Tensor g2t = transposed(g2);
    // Devices with GEMM epilogues (CUDA's cuBLASLt) also take 16-bit A and B with a float32 D.
    if (kernel::gemm_bias_grad.has(g2.device()) && g2.dtype() == x2.dtype() && g2.size(0) > 0) {
      const TensorOptions wo = TensorOptions(wide ? kFloat32 : g2.dtype()).device(g2.device());
      gw = empty({g2t.size(0), x2.size(1)}, wo);
      // The bias gradient from the weight gradient's GEMM epilogue (Note [cuBLASLt GEMM]).
      if (has_bias) gb = empty({g2t.size(0)}, wo);
      if (!kernel::gemm_bias_grad(gw.device(), batch1(g2t), batch1(x2), batch1(gw), gb)) {
        if (has_bias || !wide) gw = gb = Tensor();
        else kernel::gemm(gw.device(), batch1(g2t), batch1(x2), batch1(gw), 1, 0);
      }
    }
    if (!gw.defined()) gw = mm(g2t, x2);
  }
  if (has_bias && !gb.defined()) gb = sum(g2, {0});
  return Grads{gx, gw, gb};
}

// Note [Linear + ReLU]
// A small network's step is bound by host time, a launch each: a Linear followed by a ReLU
// costs two launches forward. cuBLASLt applies the relu in the GEMM's epilogue
// (EPILOGUE_RELU_BIAS), so linear_relu is one launch, and one autograd node instead of two.
// The output is identical (relu commutes with rounding), NaN aside: relu keeps a NaN, as
// PyTorch's does, and cuBLASLt's epilogue is documented as max(x, 0), which may not (not
// checked on the H200). Backward, the output saved for it
// serves as the relu's mask (y > 0 exactly where x @ w^T + b > 0): relu's one backward kernel,
// then linear's gradients. nn::Sequential runs each Linear directly followed by a ReLU this
// way; the trace (`ampgrad explain`) shows it as linear_relu. Elsewhere (the CPU, float64, a
// GEMM cuBLASLt declines) the relu runs in place on linear's output.
//
// Note [Linear + GELU]
// A transformer's MLP is Linear, GELU, Linear. With gelu(approximate="tanh") (GPT-2's) the
// first two are linear_gelu: cuBLASLt's GELU epilogue is that tanh form (EPILOGUE_GELU_AUX_BIAS),
// and it also writes what gelu was applied to, x @ w^T + b, as its aux matrix, which gelu's
// backward reads. One launch forward instead of two; backward as before, gelu's backward
// kernel then linear's gradients. The epilogue rounds once (gelu of the float32 accumulator),
// the unfused pair twice (the GEMM's output, then gelu's): they differ by an ulp of the
// 16-bit output. nn::Sequential runs a Linear directly followed by GELU("tanh") this way;
// elsewhere (the CPU, float32 and float64, a GEMM cuBLASLt declines: out_features not a
// multiple of 8, say) gelu runs as its own kernel on linear's output. (In float32 the epilogue's
// gelu differs from the formula by up to 5e-5 relative, a fast tanh's error: too much there.)
Tensor linear_impl(const OpInfo& op, const Tensor& x, const Tensor& w, const Tensor& b, kernel::GemmActivation act) {
  check_linear(op, x, w, b);
  const bool relu = act == kernel::GemmActivation::relu, gelu = act == kernel::GemmActivation::gelu_tanh;
  const bool grad = autograd::any_requires_grad({&x, &w, &b});
  Tensor out, pre;  // pre: gelu's input, saved for its backward
  {
    NoGradGuard no_grad;
    const Tensor x2 = x.dim() == 2 ? x : x.reshape({-1, x.size(-1)});
    const int64_t rows = x2.size(0), n = w.size(0);
    const Tensor wt = transposed(w);
    bool fused = false;
    // The gelu epilogue for 16-bit outputs only: cuBLASLt's tanh form is within 5e-5 of the
    // formula (measured on the H200), far below a 16-bit rounding but not a float32 one.
    const bool epilogue = relu || (gelu && is_reduced_float(x2.dtype()));
    if (epilogue && kernel::gemm_bias.has(x2.device()) && rows > 0 && x2.size(1) > 0) {
      out = empty({rows, n}, x2.options());
      if (gelu && grad) pre = empty({rows, n}, x2.options());
      fused = kernel::gemm_bias(out.device(), batch1(x2), batch1(wt), b.defined() ? b.contiguous() : Tensor(),
                                batch1(out), 1, act, pre.defined() ? batch1(pre) : Tensor());
    }
    if (!fused) {
      // The bias as a [1, rows, n] broadcast row (Note [GEMM views]).
      const Tensor bias =
          b.defined() ? alias_with(b, {1, rows, n}, {0, 0, b.stride(0)}, b.storage_offset()) : Tensor();
      out = gemm2d(x2, wt, bias);
      if (relu && out.numel()) kernel::unary(out.device(), UnaryKind::Relu, out, out, 0, 0);
      if (gelu) {
        pre = out;
        out = empty(pre.shape(), pre.options());
        if (out.numel()) kernel::unary(out.device(), UnaryKind::GeluTanh, pre, out, 0, 0);
      }
    }
    if (x.dim() != 2) {
      Shape os = x.shape();
      os.back() = n;
      out = out.view(os);
    }
  }
  if (grad) {
    const bool has_bias = b.defined() && b.requires_grad(), need_w = w.requires_grad();
    // Note [Wide weight gradients]
    // Under autocast a float32 parameter reaches linear as its float16 copy (a cast), and its
    // gradient ends in the parameter's float32 .grad. The weight-gradient GEMM accumulates in
    // float32 anyway, so it writes float32 directly (cuBLASLt takes 16-bit A and B with a
    // float32 D), and the bias gradient from its epilogue is float32 too. The node marks those
    // inputs wide_grad, so the engine does not round them to the copy's float16 (it rounds
    // every other op's gradient of a float16 tensor, as PyTorch does); the copy passes them on
    // as they are (Node::takes_grad_dtype, Note [Leaf casts]), and the
    // parameter's accumulator takes it over when .grad is empty (zero_grad() sets it to none)
    // or adds it in: no widening kernel per parameter, and no float16 rounding of the gradient
    // on its way (a float16 weight gradient can also no longer overflow where the float32 one
    // would not; activation gradients stay float16 and their overflows still reach the
    // scaler). Megatron-LM's gradient-accumulation fusion does the same for its main_grad.
    // Only the CUDA GEMM writes the wide gradient: on the CPU (and where cuBLASLt declines) the
    // weight gradient is computed in the copy's dtype and widened exactly by the accumulator,
    // i.e. rounded once through float16, as PyTorch's is everywhere.
    const bool wide = is_reduced_float(w.dtype()) && need_w && autograd::takes_grad_dtype(w, kFloat32) &&
                      (!has_bias || autograd::takes_grad_dtype(b, kFloat32));
    Saved saved{x, w};
    if (relu) saved.push_back(out.detach());  // the relu's mask; detached: no cycle through out's node
    if (gelu) saved.push_back(pre.view(out.shape()));
    autograd::record(op, out, {x, w, b}, std::move(saved),
                     [has_bias, need_x = x.requires_grad(), need_w, wide, act](const Tensor& g, const Saved& s) {
                       Tensor gz = g;
                       if (act != kernel::GemmActivation::none) {
                         gz = empty(g.shape(), g.options());
                         const UnaryKind kind = act == kernel::GemmActivation::relu ? UnaryKind::Relu : UnaryKind::GeluTanh;
                         if (gz.numel()) kernel::unary_backward(gz.device(), kind, g, s[2], gz, 0, 0);
                       }
                       const Tensor g2 = gz.dim() == 2 ? gz : gz.reshape({-1, gz.size(-1)});
                       return linear_grads(g2, s[0], s[1], has_bias, need_x, need_w, wide);
                     });
    if (wide) {  // the weight and bias gradients leave float32 on purpose
      auto& node = static_cast<autograd::FunctionNode&>(*out.grad_fn());
      node.inputs[1].wide_grad = true;
      node.inputs[2].wide_grad = true;
    }
  }
  return out;
}

// Under FP8 autocast (Note [FP8 autocast] in amp/autocast.h) the GEMM runs in FP8, with the
// relu fused into it (Note [FP8 linear_relu] in ops/fp8_gemm.cpp) and gelu as its own op on
// the bfloat16 output; a shape FP8 cannot take runs in bfloat16.
Tensor linear_entry(const OpInfo& op, Tensor& x, Tensor& w, Tensor& b, OpScope& scope, kernel::GemmActivation act) {
  if (scope.autocast_dtype() && is_float8(*scope.autocast_dtype())) {
    check_linear(op, x, w, b, /*same_dtype=*/false);
    Tensor y = fp8_linear(scope, op, x, w, b, act == kernel::GemmActivation::relu);
    if (y.defined()) {
      if (act == kernel::GemmActivation::gelu_tanh) return gelu(y, "tanh");
      return y;
    }
  }
  return linear_impl(op, x, w, b, act);
}
}  // namespace

Tensor linear(const Tensor& x0, const Tensor& w0, const Tensor& b0) {
  Tensor x = x0, w = w0, b = b0;
  OpScope scope(kLinear, x, w, b);
  return scope.finish(linear_entry(kLinear, x, w, b, scope, kernel::GemmActivation::none));
}

Tensor linear_relu(const Tensor& x0, const Tensor& w0, const Tensor& b0) {
  Tensor x = x0, w = w0, b = b0;
  OpScope scope(kLinearRelu, x, w, b);
  return scope.finish(linear_entry(kLinearRelu, x, w, b, scope, kernel::GemmActivation::relu));
}

Tensor linear_gelu(const Tensor& x0, const Tensor& w0, const Tensor& b0) {
  Tensor x = x0, w = w0, b = b0;
  OpScope scope(kLinearGelu, x, w, b);
  return scope.finish(linear_entry(kLinearGelu, x, w, b, scope, kernel::GemmActivation::gelu_tanh));
}

}  // namespace ampgrad
