// CUDA batched gemm: cuBLASLt for float16/bfloat16/float32 (Note [cuBLASLt GEMM]), cuBLAS
// for float64 and anything cuBLASLt declines; operand layouts as strides (no transposing
// copies), compute types for fp16/bf16/fp32(TF32)/fp64.
#include <array>
#include <mutex>

#include <ampgrad/core/config.h>
#include <ampgrad/cuda/blas_lt.h>
#include <ampgrad/cuda/call_graph.h>
#include <ampgrad/cuda/check.h>
#include <ampgrad/core/float8_kernels.h>
#include <ampgrad/core/kernels.h>
#include <ampgrad/cuda/runtime.h>

namespace ampgrad::cuda {

namespace {

constexpr int kMaxDevices = 64;

struct BlasState {
  std::once_flag once;
  cublasHandle_t handle = nullptr;
  void* workspace = nullptr;  // shared by cuBLAS and cuBLASLt: both run on the library stream
};

// One handle per device, created on first use and never destroyed (it must outlive tensors
// freed at exit). It runs on the library stream (Note [CUDA stream]) with its own workspace,
// set after the stream because cublasSetStream resets the workspace. Like the stream, it is
// shared by all host threads: ampgrad does not issue device work from several threads at once.
BlasState& blas_state(int device) {
  static auto* states = new std::array<BlasState, kMaxDevices>();
  AG_CHECK(device >= 0 && device < kMaxDevices, "cuda: device index {} out of range", device);
  BlasState& st = (*states)[static_cast<size_t>(device)];
  std::call_once(st.once, [&] {
    DeviceGuard guard(device);
    cublasHandle_t h = nullptr;
    AG_CUBLAS_CHECK(cublasCreate(&h));
    void* workspace = nullptr;
    AG_CUBLAS_CHECK(cublasSetStream(h, current_stream(device)));
    AG_CUDA_CHECK(cudaMalloc(&workspace, kLtWorkspaceBytes));
    AG_CUBLAS_CHECK(cublasSetWorkspace(h, workspace, kLtWorkspaceBytes));
    st.workspace = workspace;
    // float16/bfloat16 products accumulate in float32 all the way: no split-K
    // partial sums rounded to the 16-bit output type, which cuBLAS allows by default.
    AG_CUBLAS_CHECK(cublasSetMathMode(h, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH |
                                                                   CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    st.handle = h;
  });
  return st;
}

// A row-major [rows, cols] matrix with strides (rs, cs) seen as cuBLAS's column-major
// operand of shape cols x rows (row-major C = A B is column-major C^T = B^T A^T):
// unit column stride reads as "N" with ld = rs, unit row stride as "T" with ld = cs. A
// size-1 dim's stride is irrelevant; any other layout (both strides > 1, or 0) needs a copy.
struct BlasOperand {
  cublasOperation_t op = CUBLAS_OP_N;
  int64_t ld = 1;
  bool ok = false;
};

BlasOperand as_blas_operand(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  if ((cs == 1 || cols == 1) && (rows == 1 || rs >= std::max<int64_t>(1, cols)))
    return {CUBLAS_OP_N, rows == 1 ? std::max<int64_t>(1, cols) : rs, true};
  if ((rs == 1 || rows == 1) && (cols == 1 || cs >= std::max<int64_t>(1, rows)))
    return {CUBLAS_OP_T, cols == 1 ? std::max<int64_t>(1, rows) : cs, true};
  return {};
}

cudaDataType_t blas_type(DType t) {
  switch (t) {
    case DType::Float32: return CUDA_R_32F;
    case DType::Float16: return CUDA_R_16F;
    case DType::BFloat16: return CUDA_R_16BF;
    case DType::Float64: return CUDA_R_64F;
    default: break;
  }
  AG_CHECK(false, "matmul on cuda: dtype {} is not supported (cuBLAS takes float16, bfloat16, float32, float64)",
           dtype_name(t));
  return CUDA_R_32F;  // unreachable: AG_CHECK threw
}

Tensor contiguous_copy(const Tensor& t) {
  Tensor c = empty(t.shape(), t.options());
  kernel::copy(c.device(), c, t);
  return c;
}

}  // namespace

namespace {

// A [batch, rows, cols] operand's sizes and strides; a 2-D one is a batch of 1 (mm passes its
// matrices as they are: no alias tensors on its host path, Note [GEMM views]).
struct Operand3 {
  int64_t batch, rows, cols, sb, sr, sc;
};
Operand3 operand3(const Tensor& t) {
  if (t.dim() == 3) return {t.size(0), t.size(1), t.size(2), t.stride(0), t.stride(1), t.stride(2)};
  return {1, t.size(0), t.size(1), 0, t.stride(0), t.stride(1)};
}

// out = alpha * a @ bm + beta * out, or (bias defined, beta 0) alpha * a @ bm + bias[col];
// false only for a bias call cuBLASLt declines (nothing ran). Operands are [B, M, K], [B, K, N]
// and [B, M, N], or all 2-D.
bool run_gemm(const Tensor& a, const Tensor& bm, const Tensor& out, double alpha, double beta, const Tensor& bias,
              const Tensor& bias_grad = Tensor(), kernel::GemmActivation act = kernel::GemmActivation::none,
              const Tensor& pre_act = Tensor()) {
  const bool relu = act == kernel::GemmActivation::relu, gelu = act == kernel::GemmActivation::gelu_tanh;
  const Operand3 vo = operand3(out);
  const int64_t batch = vo.batch, m = vo.rows, n = vo.cols, k = operand3(a).cols;
  if (out.numel() == 0) return true;
  // A float32 output of 16-bit inputs is the one mixed case (Note [Wide weight gradients]).
  const bool wide = out.dtype() == DType::Float32 && is_reduced_float(a.dtype());
  AG_CHECK(a.dtype() == bm.dtype() && (a.dtype() == out.dtype() || wide),
           "matmul on cuda: dtypes {}, {} and {} differ", dtype_name(a.dtype()), dtype_name(bm.dtype()),
           dtype_name(out.dtype()));
  if (k == 0) {  // an empty sum: out = beta * out
    if (bias.defined() || bias_grad.defined() || relu || gelu) return false;
    if (beta == 0) kernel::fill(out.device(), out, 0);
    else if (beta != 1) kernel::unary(out.device(), UnaryKind::MulScalar, out, out, beta, 0);
    return true;
  }
  const int device = out.device().index;
  DeviceGuard guard(device);
  BlasState& blas = blas_state(device);

  Tensor ta = a, tb = bm;
  Operand3 va = operand3(a), vb = operand3(bm);
  BlasOperand oa = as_blas_operand(m, k, va.sr, va.sc);
  if (!oa.ok) {
    ta = contiguous_copy(a);
    va = operand3(ta);
    oa = as_blas_operand(m, k, va.sr, va.sc);
  }
  BlasOperand ob = as_blas_operand(k, n, vb.sr, vb.sc);
  if (!ob.ok) {
    tb = contiguous_copy(bm);
    vb = operand3(tb);
    ob = as_blas_operand(k, n, vb.sr, vb.sc);
  }
  AG_INTERNAL_ASSERT(oa.ok && ob.ok, "gemm: a contiguous operand has no cuBLAS layout");

  const cudaDataType_t type = blas_type(a.dtype()), out_type = blas_type(out.dtype());
  // Scalars are in the compute type: double for fp64, float otherwise (fp16/bf16 accumulate
  // in float on tensor cores; fp32 stays fp32 unless TF32 is allowed).
  const bool f64 = out.dtype() == DType::Float64;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  if (f64) compute = CUBLAS_COMPUTE_64F;
  else if (a.dtype() == DType::Float32 && allow_tf32()) compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  const float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
  if (!f64) {
    LtGemm g;
    g.device = device;
    g.dtype = a.dtype();
    g.out_dtype = out.dtype();
    g.tf32 = compute == CUBLAS_COMPUTE_32F_FAST_TF32;
    g.op_a = ob.op;
    g.op_b = oa.op;
    g.m = n;
    g.n = m;
    g.k = k;
    g.a = ampgrad::detail::address(tb);
    g.lda = ob.ld;
    g.stride_a = vb.sb;
    g.b = ampgrad::detail::address(ta);
    g.ldb = oa.ld;
    g.stride_b = va.sb;
    g.c = ampgrad::detail::address(out);
    g.ldc = n;
    g.stride_c = m * n;
    g.batch = batch;
    g.alpha = alpha_f;
    g.beta = beta_f;
    if (bias.defined()) g.bias = ampgrad::detail::address(bias);
    if (bias_grad.defined()) g.bias_grad = ampgrad::detail::address(bias_grad);
    g.relu = relu;
    g.gelu = gelu;
    if (pre_act.defined()) g.aux = ampgrad::detail::address(pre_act);
    if (lt_gemm(g, blas.workspace, kLtWorkspaceBytes)) return true;
  }
  if (bias.defined() || bias_grad.defined() || relu || gelu) return false;
  const void* alpha_p = f64 ? static_cast<const void*>(&alpha) : static_cast<const void*>(&alpha_f);
  const void* beta_p = f64 ? static_cast<const void*>(&beta) : static_cast<const void*>(&beta_f);

  submit_launches(device);  // the calls held back come first (Note [Launch batches])
  AG_CUBLAS_CHECK(cublasGemmStridedBatchedEx_64(
      blas.handle, ob.op, oa.op, n, m, k, alpha_p, ampgrad::detail::address(tb), type, ob.ld, vb.sb,
      ampgrad::detail::address(ta), type, oa.ld, va.sb, beta_p, ampgrad::detail::address(out), out_type, n, m * n,
      batch, compute, CUBLAS_GEMM_DEFAULT));
  return true;
}

}  // namespace

void gemm(const Tensor& a, const Tensor& bm, const Tensor& out, double alpha, double beta) {
  run_gemm(a, bm, out, alpha, beta, Tensor());
}

bool gemm_bias(const Tensor& a, const Tensor& bm, const Tensor& bias, const Tensor& out, double alpha,
               kernel::GemmActivation act, const Tensor& pre_act) {
  if (out.size(0) != 1 || out.dtype() == DType::Float64 || out.dtype() != a.dtype() ||
      (!bias.defined() && act == kernel::GemmActivation::none))
    return false;
  if (bias.defined() && (bias.dtype() != out.dtype() || !bias.is_contiguous() ||
                         reinterpret_cast<uintptr_t>(ampgrad::detail::address(bias)) % 16 != 0))
    return false;
  if (pre_act.defined() && (act != kernel::GemmActivation::gelu_tanh || pre_act.dtype() != out.dtype() ||
                            pre_act.shape() != out.shape() || !pre_act.is_contiguous()))
    return false;
  return run_gemm(a, bm, out, alpha, 0, bias, Tensor(), act, pre_act);
}

bool gemm_bias_grad(const Tensor& a, const Tensor& bm, const Tensor& out, const Tensor& bias_grad) {
  if (out.size(0) != 1 || out.dtype() == DType::Float64) return false;
  if (bias_grad.defined() && (bias_grad.dtype() != out.dtype() || !bias_grad.is_contiguous() ||
                              bias_grad.numel() != out.size(1) ||
                              reinterpret_cast<uintptr_t>(ampgrad::detail::address(bias_grad)) % 16 != 0))
    return false;
  return run_gemm(a, bm, out, 1, 0, Tensor(), bias_grad, kernel::GemmActivation::none, Tensor());
}

// Note [FP8 GEMM] in cuda/blas_lt.cpp. Row-major out [M, N] is column-major out^T [N, M] =
// b^T a^T: cuBLASLt's A is b (column-major [K, N], transposed: "T"), its B is a (row-major
// [M, K] is column-major [K, M]: "N"), so its scales swap too.
bool scaled_gemm(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b, const Tensor& bias,
                 const Tensor& scale_result, const Tensor& amax, bool fast_accum, bool relu, const Tensor& out) {
  const int device = out.device().index;
  DeviceGuard guard(device);
  const DeviceProperties& props = device_properties(device);
  AG_CHECK(props.major > 8 || (props.major == 8 && props.minor >= 9),
           "scaled_mm: FP8 GEMMs need compute capability 8.9 or later (Ada, Hopper); cuda:{} ({}) is {}.{}", device,
           props.name, props.major, props.minor);
  // 3-D: a batch of products, strided (ops/scaled_mm.cpp checked the strides).
  const bool batched = a.dim() == 3;
  const int64_t d = batched ? 1 : 0;
  const int64_t m = a.size(d), k = a.size(d + 1), n = b.size(d + 1);
  if (out.numel() == 0) return false;
  BlasState& blas = blas_state(device);
  LtGemm g;
  if (batched) {
    g.batch = a.size(0);
    g.stride_a = b.stride(0);
    g.stride_b = a.stride(0);
    g.stride_c = m * n;
  }
  g.device = device;
  g.dtype = b.dtype();
  g.b_dtype = a.dtype();
  g.out_dtype = out.dtype();
  g.op_a = CUBLAS_OP_T;
  g.op_b = CUBLAS_OP_N;
  g.m = n;
  g.n = m;
  g.k = k;
  g.a = ampgrad::detail::address(b);
  g.lda = b.stride(d + 1);
  g.b = ampgrad::detail::address(a);
  g.ldb = a.stride(d);
  g.c = ampgrad::detail::address(out);
  g.ldc = n;
  g.a_scale = static_cast<const float*>(ampgrad::detail::address(scale_b));
  g.b_scale = static_cast<const float*>(ampgrad::detail::address(scale_a));
  if (scale_result.defined()) g.d_scale = static_cast<const float*>(ampgrad::detail::address(scale_result));
  if (amax.defined()) g.amax_d = static_cast<float*>(ampgrad::detail::address(amax));
  g.fast_accum = fast_accum;
  if (bias.defined()) g.bias = ampgrad::detail::address(bias);
  g.relu = relu;
  if (g.amax_d && lt_gemm(g, blas.workspace, kLtWorkspaceBytes)) return true;
  const bool amax_written = false;  // the epilogue declined AMAX_D (or none was asked for)
  g.amax_d = nullptr;
  if (relu && lt_gemm(g, blas.workspace, kLtWorkspaceBytes)) return amax_written;
  g.relu = false;  // an epilogue without the relu, then the relu as a kernel
  AG_CHECK(lt_gemm(g, blas.workspace, kLtWorkspaceBytes),
           "scaled_mm: cuBLASLt has no FP8 algorithm for {} {} @ {} {} -> {}{} on cuda:{}",
           dtype_name(a.dtype()), shape_str(a.shape()), dtype_name(b.dtype()), shape_str(b.shape()), dtype_name(out.dtype()),
           bias.defined() ? " with a bias" : "", device);
  if (relu) kernel::unary(out.device(), UnaryKind::Relu, out, out, 0, 0);
  return amax_written;
}

AG_REGISTER_KERNEL(kernel::gemm, kCUDA, gemm);
AG_REGISTER_KERNEL(kernel::scaled_gemm, kCUDA, scaled_gemm);
AG_REGISTER_KERNEL(kernel::gemm_bias, kCUDA, gemm_bias);
AG_REGISTER_KERNEL(kernel::gemm_bias_grad, kCUDA, gemm_bias_grad);

}  // namespace ampgrad::cuda
