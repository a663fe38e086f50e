// Fast CPU GEMM (Note [CPU BLAS], Note [oneDNN]): float32 through OpenBLAS on the operands as
// they lie (one with no unit stride copied dense first); float16 widened to float32 (Note
// [Float16 on the CPU]); bfloat16, and float32 without OpenBLAS, through oneDNN's matmul
// primitive: float32 accumulation, rounded on store, operands with a unit stride in one of
// their dims, a batch stride of 0 broadcast, alpha as an output scale and beta as a sum
// post-op. Other dtypes and problems oneDNN refuses run the reference (ops/cpu_matmul.cpp).
#include <bit>
#include <limits>
#include <vector>

#include <ampgrad/core/dispatch.h>
#include <ampgrad/core/kernels.h>
#include <ampgrad/cpu/blas.h>
#include <ampgrad/cpu/onednn.h>
#include <ampgrad/cpu/parallel.h>
#include <ampgrad/cpu/widen.h>

namespace ampgrad::cpu {

namespace {

#if AMPGRAD_WITH_ONEDNN
// A [B, rows, cols] operand as oneDNN takes it: a batch of 1 when its batch stride is 0.
dnnl_memory_desc_t operand(const Tensor& t, int64_t batch) {
  const bool broadcast = batch > 1 && t.stride(0) == 0;
  return onednn::plain_md({broadcast ? 1 : batch, t.size(1), t.size(2)},
                          {broadcast ? t.size(1) * t.size(2) : t.stride(0), t.stride(1), t.stride(2)}, t.dtype());
}
#endif

// A [rows, cols] matrix as BLAS takes it: (transposed, leading dimension), or false when
// neither of its dims has unit stride.
bool blas_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs, bool& trans, int64_t& ld) {
  if (cs == 1 && (rows == 1 || rs >= std::max<int64_t>(cols, 1))) {
    trans = false;
    ld = rows == 1 ? std::max<int64_t>(cols, 1) : rs;
    return true;
  }
  if (rs == 1 && (cols == 1 || cs >= std::max<int64_t>(rows, 1))) {
    trans = true;
    ld = cols == 1 ? std::max<int64_t>(rows, 1) : cs;
    return true;
  }
  return false;
}

// Float32 through OpenBLAS (Note [CPU BLAS] in cpu/blas.h) on the operands as they lie; false
// when a size or leading dimension exceeds CBLAS's int.
// A float32 [B, rows, cols] operand as BLAS takes it; one with no unit stride (an expanded
// one: a mean's gradient) copied dense first, which costs rows * cols, not the product's time.
struct BlasOperand {
  const float* p;
  int64_t batch_stride, ld;
  bool trans;
  Tensor dense;  // the copy, when one was made
};
BlasOperand blas_operand(const Tensor& t) {
  BlasOperand o{static_cast<const float*>(t.data_ptr()), t.stride(0), 0, false, Tensor()};
  if (blas_layout(t.size(1), t.size(2), t.stride(1), t.stride(2), o.trans, o.ld)) return o;
  o.dense = float32_like(t);
  kernel::copy(Device(kCPU), o.dense, t);
  o.p = static_cast<const float*>(o.dense.data_ptr());
  o.batch_stride = t.size(1) * t.size(2);
  o.trans = false;
  o.ld = std::max<int64_t>(t.size(2), 1);
  return o;
}

bool gemm_openblas(const Tensor& a, const Tensor& b, const Tensor& out, double alpha, double beta) {
  const int64_t batch = out.size(0), m = out.size(1), n = out.size(2), k = a.size(2);
  constexpr int64_t kMax = std::numeric_limits<int>::max();  // CBLAS takes int
  if (m > kMax || n > kMax || k > kMax) return false;
  const BlasOperand oa = blas_operand(a), ob = blas_operand(b);
  if (oa.ld > kMax || ob.ld > kMax) return false;
  const bool ta = oa.trans, tb = ob.trans;
  const int64_t lda = oa.ld, ldb = ob.ld;
  const float* pa = oa.p;
  const float* pb = ob.p;
  float* po = static_cast<float*>(out.data_ptr());
  // OpenBLAS runs on one thread (its own pool would fight the OpenMP team for the cores):
  // the team splits each product into blocks of out's rows or columns, whichever is longer,
  // one sgemm each. Every output element is one dot product whatever the split.
  const bool by_rows = m >= n;
  const int64_t len = by_rows ? m : n;
  const int64_t grain = std::max<int64_t>(32, (1 << 18) / std::max<int64_t>(1, (by_rows ? n : m) * k));
  for (int64_t i = 0; i < batch; ++i) {
    const float* ai = pa + i * oa.batch_stride;
    const float* bi = pb + i * ob.batch_stride;
    float* oi = po + i * out.stride(0);
    parallel_for(len, grain, [&](int64_t s, int64_t e) {
      if (by_rows)  // rows s..e of a and out
        blas_sgemm(ta, tb, e - s, n, k, static_cast<float>(alpha), ai + s * (ta ? 1 : lda), lda, bi, ldb,
                   static_cast<float>(beta), oi + s * n, n);
      else  // columns s..e of b and out
        blas_sgemm(ta, tb, m, e - s, k, static_cast<float>(alpha), ai, lda, bi + s * (tb ? ldb : 1), ldb,
                   static_cast<float>(beta), oi + s, n);
    });
  }
  return true;
}

void gemm(const Tensor& a, const Tensor& b, const Tensor& out, double alpha, double beta) {
  const DType d = out.dtype();
  // Float16 (Note [Float16 on the CPU] in cpu/widen.h): the float32 product of widened copies
  // (out too when beta reads it), rounded into out once.
  if (d == kFloat16 && a.dtype() == d && b.dtype() == d && a.dim() == 3 && b.dim() == 3 && out.numel() > 0 &&
      (blas_available() || onednn::available())) {
    Tensor wide = beta != 0 ? widened(out) : float32_like(out);
    gemm(widened(a), widened(b), wide, alpha, beta);
    kernel::copy(Device(kCPU), out, wide);
    return;
  }
  if (d == kFloat32 && a.dtype() == d && b.dtype() == d && a.dim() == 3 && b.dim() == 3 && out.numel() > 0 &&
      a.size(2) > 0 && blas_available() && gemm_openblas(a, b, out, alpha, beta))
    return;
#if !AMPGRAD_WITH_ONEDNN
  return kernel::gemm.reference(a, b, out, alpha, beta);
#else
  if (!onednn::available() || (d != kFloat32 && d != kBFloat16) || a.dtype() != d || b.dtype() != d ||
      a.dim() != 3 || b.dim() != 3 || a.numel() == 0 || b.numel() == 0)
    return kernel::gemm.reference(a, b, out, alpha, beta);
  const float fa = static_cast<float>(alpha), fb = static_cast<float>(beta);
  std::string key = "gemm";
  onednn::key_add(key, a);
  onednn::key_add(key, b);
  onednn::key_add(key, out);
  onednn::key_add(key, {std::bit_cast<int32_t>(fa), std::bit_cast<int32_t>(fb)});
  bool found = false;
  const onednn::Primitive* prim = onednn::find(key, &found);
  if (!found) {
    const int64_t batch = out.size(0);
    bool t_unused = false;
    int64_t ld_unused = 0;
    // oneDNN's matmul takes no operand without a unit stride (an expanded one) but "ref":
    // the reference then (as the key says, every call of this problem).
    if (!blas_layout(a.size(1), a.size(2), a.stride(1), a.stride(2), t_unused, ld_unused) ||
        !blas_layout(b.size(1), b.size(2), b.stride(1), b.stride(2), t_unused, ld_unused)) {
      onednn::refuse(key);
      return kernel::gemm.reference(a, b, out, alpha, beta);
    }
    const dnnl_memory_desc_t ma = operand(a, batch), mb = operand(b, batch);
    const dnnl_memory_desc_t mo =
        onednn::plain_md({batch, out.size(1), out.size(2)}, {out.stride(0), out.stride(1), out.stride(2)}, d);
    dnnl_matmul_desc_t md;
    onednn::Attr attr(fa, fb);
    prim = onednn::api().dnnl_matmul_desc_init(&md, &ma, &mb, nullptr, &mo) == dnnl_success
               ? onednn::build(key, &md, nullptr, attr.attr,
                               {{DNNL_ARG_SRC, ma, false, dnnl_query_src_md},
                                {DNNL_ARG_WEIGHTS, mb, false, dnnl_query_weights_md},
                                {DNNL_ARG_DST, mo, true, dnnl_query_dst_md}})
               : onednn::refuse(key);
  }
  if (!prim) return kernel::gemm.reference(a, b, out, alpha, beta);
  prim->run({a.data_ptr(), b.data_ptr(), out.data_ptr()}, "gemm");
#endif
}

}  // namespace

AG_REGISTER_FAST_KERNEL(kernel::gemm, gemm);

}  // namespace ampgrad::cpu
