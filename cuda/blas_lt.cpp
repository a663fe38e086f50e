// cuBLASLt GEMMs: descriptors and the heuristic's algorithm cached per geometry, split-K
// partial sums kept in float32.
#include <ampgrad/cuda/blas_lt.h>

#include <cublasLt.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <ampgrad/core/tensor.h>

#include <ampgrad/cuda/call_graph.h>
#include <ampgrad/cuda/check.h>
#include <ampgrad/cuda/graph.h>
#include <ampgrad/cuda/runtime.h>

namespace ampgrad::cuda {

// Note [cuBLASLt GEMM]
// cublasGemmEx with CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION keeps float16/bfloat16
// sums in float32 (as every 16-bit product here) but also rules out every split-K kernel, and at 1024-2048
// split-K is what fills 132 SMs: ag::mm ran at 0.71-0.76 of raw cuBLAS there. cuBLASLt
// separates the two: its preference CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK admits split-K
// whose partial sums live in a float32 workspace (REDUCTION_SCHEME_COMPUTE_TYPE) and refuses
// the schemes that add them up in the 16-bit output (INPLACE, OUTPUT_TYPE). float32 outputs
// admit every scheme (the output type is the compute type). A float32 output of 16-bit inputs
// (linear's weight gradient for a float32 parameter, Note [Wide weight gradients] in
// ops/matmul.cpp) is the same GEMM with a float32 C and D. The heuristic's first algorithm
// is cached per geometry (dtype, TF32, transposes, sizes, leading dims, batch strides, beta,
// bias epilogue, pointer alignment) with its descriptors, so a call costs a map lookup and
// cublasLtMatmul, or, once the call repeats with the same pointers, a graph launch (Note [Call
// graphs] in cuda/call_graph.h). linear's bias rides in the epilogue (EPILOGUE_BIAS) instead of being
// copied into the output for a beta = 1 GEMM, as PyTorch's addmm does, and a relu after it in
// the same epilogue (EPILOGUE_RELU_BIAS, linear_relu), or a gelu(approximate="tanh"), whose
// input the epilogue also writes for the backward (EPILOGUE_GELU_AUX_BIAS, linear_gelu:
// cuBLASLt's GELU is the tanh form, as PyTorch's _addmm_activation relies on); in backward, the bias
// gradient (the column sums of the incoming gradient) comes out of the weight-gradient GEMM's
// epilogue (EPILOGUE_BGRADB), which reads those columns anyway: one launch fewer per layer.
//
// Note [Matmul tuning]
// Off by default, like PyTorch's TunableOp (torch.cuda.tunable): set_matmul_tuning(true), or
// AMPGRAD_MATMUL_TUNING=1 at start, times the heuristic's candidates (up to kCandidates) once
// per geometry and keeps the fastest, as benchmark mode does for cuDNN (Note [cuDNN plans]):
// each runs once to warm up, then five times between CUDA events, into scratch outputs (D,
// the bias gradient, gelu's aux, amax: the caller's tensors are written once, by the chosen
// algorithm); the fastest median wins. Timing synchronizes the stream, so while it is
// captured into a CUDA graph a new geometry takes the heuristic's first algorithm and is timed
// at its first call outside a capture. Why: the heuristic's first choice is a model's guess;
// for the small GPT's weight gradients (K = 4096 rows, a 256-1024 square output, the bias
// gradient in the epilogue) it took a split-K sm_80 kernel plus a reduction launch, 14-21 us
// each on ncu where the data-gradient GEMMs of the same FLOPs took 6-10. Candidates differ in
// split-K and so in rounding: with tuning on, results repeat within a process but may differ
// in the last bits between processes (as cudnn.benchmark's). AMPGRAD_MATMUL_TUNING_LOG=1
// prints every candidate (algorithm id, tile, split-K, stages, workspace, median ms) to stderr.
//
// Note [FP8 GEMM]
// Hopper's FP8 tensor cores take A and B in float8_e4m3fn or float8_e5m2 (not both e5m2),
// "TN" only (column-major A transposed, B not: row-major a [M, K] times column-major b
// [K, N] seen from the row-major side, as torch._scaled_mm requires), leading dimensions of
// 16 bytes. Each operand carries a per-tensor scale, a float on the device that the kernel
// reads (no host synchronization, capturable): D = a_scale * b_scale * A B (+ bias), summed in
// float32, stored as bfloat16, float16, float32 or (times d_scale) float8; AMAX_D returns
// max |D| from the epilogue, so the scaling recipe gets the output's amax with no extra pass.
// The pointers are set per call like the bias; the plan is keyed by the operand dtypes and by
// which of them are present. FAST_ACCUM (use_fast_accum) lets the tensor cores keep partial
// sums in their own reduced precision between promotions, as torch._scaled_mm's flag does.

namespace {

constexpr int kMaxDevices = 64;
constexpr int kCandidates = 8;

std::atomic<int64_t> g_tuned{0}, g_timed{0}, g_changed{0};  // matmul_tuning_stats()

std::atomic<bool>& tuning_flag() {
  static std::atomic<bool> on{[] {
    const char* v = std::getenv("AMPGRAD_MATMUL_TUNING");
    return v != nullptr && *v != 0 && std::string(v) != "0";
  }()};
  return on;
}

struct LtState {
  std::once_flag once;
  cublasLtHandle_t handle = nullptr;
};

cublasLtHandle_t lt_handle(int device) {
  static auto* states = new std::array<LtState, kMaxDevices>();  // never destroyed, like the cuBLAS handles
  AG_CHECK(device >= 0 && device < kMaxDevices, "cuda: device index {} out of range", device);
  LtState& st = (*states)[static_cast<size_t>(device)];
  std::call_once(st.once, [&] {
    cublasLtHandle_t h = nullptr;
    AG_CUBLAS_CHECK(cublasLtCreate(&h));
    st.handle = h;
  });
  return st.handle;
}

int alignment(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  int a = 16;
  while (a > 1 && v % static_cast<uintptr_t>(a) != 0) a /= 2;
  return a;
}

struct Key {
  int device;
  DType dtype, out_dtype, b_dtype;
  bool tf32;
  int fp8;  // bits: 1 scales, 2 d_scale, 4 amax_d, 8 fast_accum
  int op_a, op_b;
  int64_t m, n, k, lda, ldb, ldc, stride_a, stride_b, stride_c, batch;
  bool beta_zero;
  int epilogue;  // an index of kEpilogues in make_plan
  int align_a, align_b, align_c;
  auto operator<=>(const Key&) const = default;
};

// Descriptors and the chosen algorithm of one geometry; ok false when cuBLASLt has none.
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
  bool ok = false;
  // The heuristic's candidates, best guess first (Note [Matmul tuning]).
  std::vector<cublasLtMatmulHeuristicResult_t> candidates;
  bool tuned = false;
  uint64_t generation = 0;  // bumped when tuning changes algo: call graphs recorded before are not reused
  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (a) (void)cublasLtMatrixLayoutDestroy(a);
    if (b) (void)cublasLtMatrixLayoutDestroy(b);
    if (c) (void)cublasLtMatrixLayoutDestroy(c);
    if (desc) (void)cublasLtMatmulDescDestroy(desc);
  }
};

cudaDataType_t lt_type(DType t) {
  switch (t) {
    case DType::Float32: return CUDA_R_32F;
    case DType::Float16: return CUDA_R_16F;
    case DType::BFloat16: return CUDA_R_16BF;
    case DType::Float8_e4m3fn: return CUDA_R_8F_E4M3;
    case DType::Float8_e5m2: return CUDA_R_8F_E5M2;
    default: break;
  }
  AG_INTERNAL_ASSERT(false, "lt_gemm: dtype {} is not a cuBLASLt dtype here", dtype_name(t));
  return CUDA_R_32F;
}

cublasLtMatrixLayout_t layout(cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                              int64_t stride) {
  cublasLtMatrixLayout_t l = nullptr;
  AG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, t, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld));
  if (batch > 1) {
    const auto count = static_cast<int32_t>(batch);
    AG_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    AG_CUBLAS_CHECK(
        cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
  return l;
}

// The FP8 scale and amax pointers of this call (Note [FP8 GEMM]).
void set_fp8_pointers(cublasLtMatmulDesc_t desc, const LtGemm& g) {
  auto set = [&](cublasLtMatmulDescAttributes_t attr, const void* p) {
    AG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &p, sizeof(p)));
  };
  set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, g.a_scale);
  set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, g.b_scale);
  if (g.d_scale) set(CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, g.d_scale);
  if (g.amax_d) set(CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, g.amax_d);
}

std::unique_ptr<Plan> make_plan(const LtGemm& g, const Key& key, cublasLtHandle_t h, size_t workspace_bytes) {
  auto p = std::make_unique<Plan>();
  const cudaDataType_t type = lt_type(g.dtype);
  const cublasComputeType_t compute = g.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  AG_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, compute, CUDA_R_32F));
  const int32_t op_a = g.op_a, op_b = g.op_b;
  AG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  AG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  if (key.fp8 & 8) {
    const int8_t fast = 1;
    AG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
  }
  if (key.epilogue != 0) {
    constexpr cublasLtEpilogue_t kEpilogues[] = {
        CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS,     CUBLASLT_EPILOGUE_BGRADB,
        CUBLASLT_EPILOGUE_RELU_BIAS, CUBLASLT_EPILOGUE_RELU,   CUBLASLT_EPILOGUE_GELU_BIAS,
        CUBLASLT_EPILOGUE_GELU,    CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_GELU_AUX};
    const cublasLtEpilogue_t epilogue = kEpilogues[key.epilogue];
    AG_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    // A bias (and aux) pointer for the heuristic to see; each call sets its own.
    if (const void* vec = g.bias ? g.bias : g.bias_grad)
      AG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vec, sizeof(vec)));
    if (g.aux) {
      const int64_t ld = g.ldc;
      AG_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g.aux, sizeof(g.aux)));
      AG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
    }
  }
  if (key.fp8 != 0) set_fp8_pointers(p->desc, g);
  // Stored shapes, before the transposes.
  const bool ta = g.op_a != CUBLAS_OP_N, tb = g.op_b != CUBLAS_OP_N;
  p->a = layout(type, ta ? g.k : g.m, ta ? g.m : g.k, g.lda, g.batch, g.stride_a);
  p->b = layout(key.fp8 != 0 ? lt_type(g.b_dtype) : type, tb ? g.n : g.k, tb ? g.k : g.n, g.ldb, g.batch, g.stride_b);
  p->c = layout(lt_type(g.out_dtype), g.m, g.n, g.ldc, g.batch, g.stride_c);

  cublasLtMatmulPreference_t pref = nullptr;
  AG_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>, decltype(&cublasLtMatmulPreferenceDestroy)>
      pref_owner(pref, cublasLtMatmulPreferenceDestroy);
  const uint64_t ws = workspace_bytes;
  AG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const uint32_t schemes = g.out_dtype == DType::Float32 ? static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_MASK)
                                                         : static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE);
  AG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
                                                       sizeof(schemes)));
  const uint32_t al_a = static_cast<uint32_t>(key.align_a), al_b = static_cast<uint32_t>(key.align_b),
                 al_c = static_cast<uint32_t>(key.align_c);
  AG_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a)));
  AG_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b)));
  AG_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof(al_c)));
  AG_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof(al_c)));

  std::array<cublasLtMatmulHeuristicResult_t, kCandidates> results{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(h, p->desc, p->a, p->b, p->c, p->c, pref, kCandidates, results.data(), &found);
  if (st == CUBLAS_STATUS_SUCCESS) {
    for (int i = 0; i < found; ++i)
      if (results[static_cast<size_t>(i)].state == CUBLAS_STATUS_SUCCESS)
        p->candidates.push_back(results[static_cast<size_t>(i)]);
    if (!p->candidates.empty()) {
      p->algo = p->candidates[0].algo;
      p->workspace = p->candidates[0].workspaceSize;
      p->ok = true;
    }
  } else if (st != CUBLAS_STATUS_NOT_SUPPORTED &&
             !(key.fp8 != 0 && st == CUBLAS_STATUS_INVALID_VALUE)) {  // an FP8 combination it does not take
    AG_CUBLAS_CHECK(st);
  }
  return p;
}

struct PlanCache {
  std::mutex mu;
  std::map<Key, std::unique_ptr<Plan>> plans;  // a plan never leaves once cached
};
PlanCache& plan_cache() {
  static auto* cache = new PlanCache();  // leaked, like the handles
  return *cache;
}

// One cublasLtMatmul of plan `p` with algorithm `algo`: the call's own vectors set on the
// shared descriptor first (ampgrad issues device work from one thread at a time, Note [CUDA
// stream]).
cublasStatus_t run_plan(cublasLtHandle_t h, const Plan& p, const cublasLtMatmulAlgo_t& algo, size_t ws_bytes,
                        const LtGemm& g, void* workspace, cudaStream_t stream) {
  const void* vec = g.bias ? g.bias : g.bias_grad;
  if (vec)
    AG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vec, sizeof(vec)));
  if (g.aux)
    AG_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g.aux, sizeof(g.aux)));
  if (is_float8(g.dtype)) set_fp8_pointers(p.desc, g);
  return cublasLtMatmul(h, p.desc, &g.alpha, g.a, p.a, g.b, p.b, &g.beta, g.c, p.c, g.c, p.c, &algo, workspace,
                        ws_bytes, stream);
}

// An algorithm's configuration for the tuning log.
std::string algo_str(const cublasLtMatmulAlgo_t& algo) {
  auto get = [&](cublasLtMatmulAlgoConfigAttributes_t attr) {
    int32_t v = -1;
    size_t written = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, sizeof(v), &written) != CUBLAS_STATUS_SUCCESS) v = -1;
    return v;
  };
  return fmt::format("algo {} tile {} split-K {} stages {}", get(CUBLASLT_ALGO_CONFIG_ID),
                     get(CUBLASLT_ALGO_CONFIG_TILE_ID), get(CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
                     get(CUBLASLT_ALGO_CONFIG_STAGES_ID));
}

// The median time of `runs` calls of candidate `c` after one to warm up; infinity where it fails.
float time_candidate(cublasLtHandle_t h, const Plan& p, const cublasLtMatmulHeuristicResult_t& c, const LtGemm& g,
                     void* workspace, cudaStream_t stream) {
  constexpr int kRuns = 5;
  std::array<cudaEvent_t, kRuns + 1> ev{};
  std::array<float, kRuns> ms{};
  bool ok = true;
  for (cudaEvent_t& e : ev) ok = ok && cudaEventCreate(&e) == cudaSuccess;
  ok = ok && run_plan(h, p, c.algo, c.workspaceSize, g, workspace, stream) == CUBLAS_STATUS_SUCCESS &&
       cudaEventRecord(ev[0], stream) == cudaSuccess;
  for (size_t i = 0; ok && i < kRuns; ++i)
    ok = run_plan(h, p, c.algo, c.workspaceSize, g, workspace, stream) == CUBLAS_STATUS_SUCCESS &&
         cudaEventRecord(ev[i + 1], stream) == cudaSuccess;
  ok = ok && cudaEventSynchronize(ev[kRuns]) == cudaSuccess;
  for (size_t i = 0; ok && i < kRuns; ++i) ok = cudaEventElapsedTime(&ms[i], ev[i], ev[i + 1]) == cudaSuccess;
  for (cudaEvent_t e : ev)
    if (e) (void)cudaEventDestroy(e);
  if (!ok) {
    AG_CUDA_CHECK(cudaStreamSynchronize(stream));  // a fault here is not the candidate's: raise it
    (void)cudaGetLastError();
    return std::numeric_limits<float>::infinity();
  }
  std::sort(ms.begin(), ms.end());
  return ms[kRuns / 2];
}

// Times plan p's candidates for call g into scratch outputs and keeps the fastest (Note
// [Matmul tuning]). The caller holds the plan cache's lock; nothing is being captured.
void tune(Plan& p, const LtGemm& g, cublasLtHandle_t h, void* workspace) {
  p.tuned = true;
  if (p.candidates.size() < 2) return;
  cudaStream_t stream = current_stream(g.device);  // the calls held back come first
  // Scratch: D (C == D), the bias gradient, gelu's aux and amax, each at a 256-byte offset.
  const int64_t item = static_cast<int64_t>(itemsize(g.out_dtype));
  const int64_t d_bytes = ((g.batch > 1 ? g.stride_c * (g.batch - 1) : 0) + g.ldc * g.n) * item;
  const int64_t vec_bytes = std::max(g.m, g.n) * item, aux_bytes = g.aux ? g.ldc * g.n * item : 0;
  auto round = [](int64_t b) { return (b + 255) / 256 * 256; };
  Tensor scratch;
  try {
    scratch = empty({round(d_bytes) + round(vec_bytes) + round(aux_bytes) + 256},
                    TensorOptions(kUInt8).device(Device(kCUDA, g.device)));
  } catch (const Error&) {
    return;  // no memory to time in: the heuristic's choice
  }
  auto* base = static_cast<unsigned char*>(ampgrad::detail::address(scratch));
  LtGemm t = g;
  t.c = base;
  if (t.bias_grad) t.bias_grad = base + round(d_bytes);
  if (t.aux) t.aux = base + round(d_bytes) + round(vec_bytes);
  if (t.amax_d) t.amax_d = reinterpret_cast<float*>(base + round(d_bytes) + round(vec_bytes) + round(aux_bytes));
  static const bool log = [] {
    const char* v = std::getenv("AMPGRAD_MATMUL_TUNING_LOG");
    return v != nullptr && *v != 0 && std::string(v) != "0";
  }();
  size_t best = 0;
  float best_ms = std::numeric_limits<float>::infinity();
  g_tuned.fetch_add(1, std::memory_order_relaxed);
  for (size_t i = 0; i < p.candidates.size(); ++i) {
    const float ms = time_candidate(h, p, p.candidates[i], t, workspace, stream);
    g_timed.fetch_add(1, std::memory_order_relaxed);
    if (log)
      std::fputs(fmt::format("matmul tuning: {} -> {} m {} n {} k {} batch {} op {}{} bias {} bias_grad {} act {}: "
                             "candidate {} ({}), workspace {} B, {:.4f} ms\n",
                             dtype_name(g.dtype), dtype_name(g.out_dtype), g.m, g.n, g.k, g.batch,
                             g.op_a == CUBLAS_OP_N ? 'N' : 'T', g.op_b == CUBLAS_OP_N ? 'N' : 'T', g.bias != nullptr,
                             g.bias_grad != nullptr, g.relu ? "relu" : (g.gelu ? "gelu" : "none"), i,
                             algo_str(p.candidates[i].algo), p.candidates[i].workspaceSize, ms)
                     .c_str(),
                 stderr);
    if (ms < best_ms) best_ms = ms, best = i;
  }
  if (log) std::fputs(fmt::format("matmul tuning: chose candidate {}\n", best).c_str(), stderr);
  if (best != 0) {
    g_changed.fetch_add(1, std::memory_order_relaxed);
    p.algo = p.candidates[best].algo;
    p.workspace = p.candidates[best].workspaceSize;
    ++p.generation;
  }
}

}  // namespace

bool lt_gemm(const LtGemm& g, void* workspace, size_t workspace_bytes) {
  const bool act = g.relu || g.gelu;
  // The aux matrix (gelu's input) needs 16-byte alignment and a leading dimension of 8s.
  if (g.batch > INT32_MAX || ((g.bias || g.bias_grad || act) && (g.batch != 1 || g.beta != 0)) ||
      (g.bias && g.bias_grad) || (act && g.bias_grad) || (g.relu && g.gelu) || (g.aux && !g.gelu) ||
      (g.aux && (alignment(g.aux) < 16 || g.ldc % 8 != 0)))
    return false;
  const int epilogue = g.relu ? (g.bias ? 3 : 4)
                       : g.gelu ? (g.aux ? (g.bias ? 7 : 8) : (g.bias ? 5 : 6))
                                : (g.bias ? 1 : (g.bias_grad ? 2 : 0));
  const bool fp8 = is_float8(g.dtype);
  if (fp8 != (g.a_scale != nullptr) || fp8 != (g.b_scale != nullptr)) return false;
  const int fp8_bits = fp8 ? 1 | (g.d_scale ? 2 : 0) | (g.amax_d ? 4 : 0) | (g.fast_accum ? 8 : 0) : 0;
  const Key key{g.device, g.dtype, g.out_dtype, fp8 ? g.b_dtype : g.dtype, g.tf32, fp8_bits, static_cast<int>(g.op_a), static_cast<int>(g.op_b), g.m, g.n, g.k,
                g.lda, g.ldb, g.ldc, g.batch > 1 ? g.stride_a : 0, g.batch > 1 ? g.stride_b : 0,
                g.batch > 1 ? g.stride_c : 0, g.batch, g.beta == 0, epilogue, alignment(g.a),
                alignment(g.b), alignment(g.c)};
  const cublasLtHandle_t h = lt_handle(g.device);
  // The last geometry this thread ran, checked first: a loop of one GEMM skips the lock and
  // the map (plans are never freed, so the pointer stays valid).
  thread_local Key last_key{};
  thread_local Plan* last_plan = nullptr;
  Plan* plan = nullptr;
  if (last_plan && key == last_key) {
    plan = last_plan;
  } else {
    PlanCache& cache = plan_cache();
    std::lock_guard<std::mutex> lock(cache.mu);
    auto it = cache.plans.find(key);
    if (it == cache.plans.end()) it = cache.plans.emplace(key, make_plan(g, key, h, workspace_bytes)).first;
    plan = it->second.get();
    last_key = key;
    last_plan = plan;
  }
  if (!plan->ok) return false;
  if (!plan->tuned && matmul_tuning() && !capturing(g.device)) {
    std::lock_guard<std::mutex> lock(plan_cache().mu);
    if (!plan->tuned) tune(*plan, g, h, workspace);
  }
  const void* vec = g.bias ? g.bias : g.bias_grad;
  cudaStream_t stream = launch_stream(g.device);
  // Everything the call below depends on besides the plan's fixed descriptors (Note [Call graphs]).
  CallKey call;
  call.add(uint64_t{1})  // cuBLASLt
      .add(plan)
      .add(plan->generation)
      .add(g.a)
      .add(g.b)
      .add(g.c)
      .add(vec)
      .add(g.aux)
      .add(workspace)
      .add(g.a_scale)
      .add(g.b_scale)
      .add(g.d_scale)
      .add(static_cast<const void*>(g.amax_d))
      .add_bits(g.alpha)
      .add_bits(g.beta)
      .add(stream);
  run_call(g.device, stream, call,
           [&] { AG_CUBLAS_CHECK(run_plan(h, *plan, plan->algo, plan->workspace, g, workspace, stream)); });
  return true;
}

void set_matmul_tuning(bool on) { tuning_flag().store(on, std::memory_order_relaxed); }
bool matmul_tuning() { return tuning_flag().load(std::memory_order_relaxed); }
MatmulTuningStats matmul_tuning_stats() {
  return {g_tuned.load(std::memory_order_relaxed), g_timed.load(std::memory_order_relaxed),
          g_changed.load(std::memory_order_relaxed)};
}

}  // namespace ampgrad::cuda
