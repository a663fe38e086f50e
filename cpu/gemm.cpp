// Fast CPU GEMM: oneDNN's matmul primitive (Note [oneDNN]) for float32 and bfloat16 (float32
// accumulation, rounded on store), any strides, a batch stride of 0 broadcast, alpha as an
// output scale and beta as a sum post-op. Other dtypes and problems oneDNN refuses run the
// reference (ops/cpu_matmul.cpp: OpenBLAS or loops).
#include <bit>
#include <vector>

#include <ampgrad/core/dispatch.h>
#include <ampgrad/core/kernels.h>
#include <ampgrad/cpu/onednn.h>

namespace ampgrad::cpu {

#if AMPGRAD_WITH_ONEDNN
namespace {

// A [B, rows, cols] operand as oneDNN takes it: a batch of 1 when its batch stride is 0.
dnnl_memory_desc_t operand(const Tensor& t, int64_t batch) {
  const bool broadcast = batch > 1 && t.stride(0) == 0;
  return onednn::plain_md({broadcast ? 1 : batch, t.size(1), t.size(2)},
                          {broadcast ? t.size(1) * t.size(2) : t.stride(0), t.stride(1), t.stride(2)}, t.dtype());
}

void gemm(const Tensor& a, const Tensor& b, const Tensor& out, double alpha, double beta) {
  const DType d = out.dtype();
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
}

}  // namespace

AG_REGISTER_FAST_KERNEL(kernel::gemm, gemm);
#endif

}  // namespace ampgrad::cpu
