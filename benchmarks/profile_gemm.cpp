// Every algorithm cuBLASLt's heuristic proposes for one GEMM geometry, each timed three ways:
// host microseconds per cublasLtMatmul call (the eager cost of a small GEMM), host
// microseconds per cudaGraphLaunch of a graph holding that one GEMM ("graph1_us"), and device
// microseconds per GEMM (CUDA-graph replays, CUDA events, median of 7), with the algorithm's
// configuration (tile, stages, split-K, cluster shape). "alloc_us" is the device time per GEMM
// when each GEMM's output is allocated and freed inside the graph (cudaMallocAsync and
// cudaFreeAsync captured as memory nodes, as ampgrad's allocator does during a capture).
// For choosing the algorithm policy of cuda/blas_lt.cpp (Note [cuBLASLt GEMM]):
//   profile_gemm f16|bf16|f32 M N K [nn|tn|nt] [same|f32] [none|bgradb|bgrada|bgrada_row]
// (column-major, cuBLAS's M N K; f32: a float32 C and D for 16-bit A and B, as linear's wide
// weight gradients; bgradb: the bias gradient, B's sums over K, in the epilogue, as linear's
// weight-gradient GEMM: m the input features, n the output features, k the rows, "nt"; bgrada:
// A's sums over K, the same GEMM transposed (m the output features, n the input features);
// bgrada_row: that with D row-major, which is the weight gradient as linear stores it).
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#define CK(x)                                                                            \
  do {                                                                                   \
    auto s_ = (x);                                                                       \
    if (static_cast<int>(s_) != 0) {                                                     \
      std::fprintf(stderr, "%s failed (%d) at line %d\n", #x, static_cast<int>(s_), __LINE__); \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: profile_gemm f16|bf16|f32 M N K [nn|tn|nt]\n");
    return 2;
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("profile_gemm: no CUDA device\n");
    return 0;
  }
  const std::string dt = argv[1];
  const int64_t m = std::atoll(argv[2]), n = std::atoll(argv[3]), k = std::atoll(argv[4]);
  const std::string ops = argc > 5 ? argv[5] : "nn";
  const std::string out_kind = argc > 6 ? argv[6] : "same", epi = argc > 7 ? argv[7] : "none";
  if (ops.size() != 2 || (ops != "nn" && ops != "tn" && ops != "nt")) {
    std::fprintf(stderr, "profile_gemm: transposes must be nn, tn or nt, got %s\n", ops.c_str());
    return 2;
  }
  if ((out_kind != "same" && out_kind != "f32") ||
      (epi != "none" && epi != "bgradb" && epi != "bgrada" && epi != "bgrada_row")) {
    std::fprintf(stderr,
                 "profile_gemm: the output is same or f32 and the epilogue none, bgradb, bgrada or bgrada_row, got %s %s\n",
                 out_kind.c_str(), epi.c_str());
    return 2;
  }
  const cudaDataType_t type = dt == "f16" ? CUDA_R_16F : dt == "bf16" ? CUDA_R_16BF : CUDA_R_32F;
  const size_t elt = type == CUDA_R_32F ? 4 : 2;
  const cudaDataType_t out_type = out_kind == "f32" ? CUDA_R_32F : type;
  const size_t out_elt = out_type == CUDA_R_32F ? 4 : 2;
  const cublasOperation_t op_a = ops[0] == 't' ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = ops[1] == 't' ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int64_t a_rows = op_a == CUBLAS_OP_N ? m : k, a_cols = op_a == CUBLAS_OP_N ? k : m;
  const int64_t b_rows = op_b == CUBLAS_OP_N ? k : n, b_cols = op_b == CUBLAS_OP_N ? n : k;

  cublasLtHandle_t h;
  CK(cublasLtCreate(&h));
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  void *a, *b, *c, *ws;
  const size_t ws_bytes = 32u << 20;
  CK(cudaMalloc(&a, a_rows * a_cols * elt));
  CK(cudaMalloc(&b, b_rows * b_cols * elt));
  CK(cudaMalloc(&c, m * n * out_elt));
  void* bias_grad = nullptr;
  CK(cudaMalloc(&bias_grad, std::max(m, n) * out_elt));
  CK(cudaMalloc(&ws, ws_bytes));
  // Non-zero inputs (every byte 0x1c: small finite values in each dtype); their values do not
  // matter for timing.
  CK(cudaMemset(a, 0x1c, a_rows * a_cols * elt));
  CK(cudaMemset(b, 0x1c, b_rows * b_cols * elt));

  cublasLtMatmulDesc_t desc;
  CK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  if (epi != "none") {
    const cublasLtEpilogue_t e = epi == "bgradb" ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_BGRADA;
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof(e)));
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_grad, sizeof(bias_grad)));
  }
  cublasLtMatrixLayout_t la, lb, lc;
  CK(cublasLtMatrixLayoutCreate(&la, type, a_rows, a_cols, a_rows));
  CK(cublasLtMatrixLayoutCreate(&lb, type, b_rows, b_cols, b_rows));
  if (epi == "bgrada_row") {  // D row-major: linear's weight gradient [out, in] as D^T of the bgradb form
    CK(cublasLtMatrixLayoutCreate(&lc, out_type, m, n, n));
    const int32_t order = CUBLASLT_ORDER_ROW;
    CK(cublasLtMatrixLayoutSetAttribute(lc, CUBLASLT_MATRIX_LAYOUT_ORDER, &order, sizeof(order)));
  } else {
    CK(cublasLtMatrixLayoutCreate(&lc, out_type, m, n, m));
  }
  cublasLtMatmulPreference_t pref;
  CK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t wsb = ws_bytes;
  CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof(wsb)));
  const uint32_t schemes = out_type == CUDA_R_32F ? static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_MASK)
                                              : static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE);
  CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof(schemes)));
  std::vector<cublasLtMatmulHeuristicResult_t> res(32);
  int found = 0;
  CK(cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, lc, lc, pref, static_cast<int>(res.size()), res.data(), &found));
  const float alpha = 1, beta = 0;
  std::printf("profile_gemm %s m %lld n %lld k %lld %s out %s epilogue %s: %d algorithms\n", dt.c_str(),
              (long long)m, (long long)n, (long long)k, ops.c_str(), out_kind.c_str(), epi.c_str(), found);
  std::printf("%3s %6s %5s %6s %6s %7s %7s %9s %9s %9s %8s %9s\n", "#", "id", "tile", "stages", "splitK", "cluster",
              "ws_KiB", "host_us", "graph1_us", "device_us", "TFLOP/s", "alloc_us");
  for (int i = 0; i < found; ++i) {
    if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
    const cublasLtMatmulAlgo_t* algo = &res[i].algo;
    int id = 0, tile = 0, stages = 0, splitk = 0, cluster = 0;
    size_t w = 0;
    cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &w);
    cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile), &w);
    cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof(stages), &w);
    cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof(splitk), &w);
    cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof(cluster), &w);
    auto call = [&] {
      return cublasLtMatmul(h, desc, &alpha, a, la, b, lb, &beta, c, lc, c, lc, algo, ws, res[i].workspaceSize, stream);
    };
    if (call() != CUBLAS_STATUS_SUCCESS) continue;
    CK(cudaStreamSynchronize(stream));
    // Host microseconds per call of `enqueue` (which returns a status), 100 calls per sample
    // (the queue never fills), median of 9.
    auto host_us = [&](auto&& enqueue) {
      std::vector<double> t;
      for (int r = 0; r < 9; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        for (int j = 0; j < 100; ++j) CK(enqueue());
        auto t1 = std::chrono::steady_clock::now();
        t.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / 100);
        CK(cudaStreamSynchronize(stream));
      }
      return median(t);
    };
    const double host = host_us(call);  // the API call alone
    // Device: 20 GEMMs in one graph, replays timed with events, median of 7; with_alloc: each
    // GEMM writes a buffer allocated and freed inside the graph.
    auto graph_us = [&](bool with_alloc) {
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      for (int j = 0; j < 20; ++j) {
        if (!with_alloc) {
          CK(call());
          continue;
        }
        void* out = nullptr;
        CK(cudaMallocAsync(&out, m * n * out_elt, stream));
        CK(cublasLtMatmul(h, desc, &alpha, a, la, b, lb, &beta, out, lc, out, lc, algo, ws, res[i].workspaceSize,
                          stream));
        CK(cudaFreeAsync(out, stream));
      }
      CK(cudaStreamEndCapture(stream, &graph));
      CK(cudaGraphInstantiate(&exec, graph, 0));
      cudaEvent_t e0, e1;
      CK(cudaEventCreate(&e0));
      CK(cudaEventCreate(&e1));
      CK(cudaGraphLaunch(exec, stream));
      std::vector<double> t;
      for (int r = 0; r < 7; ++r) {
        CK(cudaEventRecord(e0, stream));
        CK(cudaGraphLaunch(exec, stream));
        CK(cudaEventRecord(e1, stream));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        t.push_back(ms * 1000.0 / 20);
      }
      CK(cudaGraphExecDestroy(exec));
      CK(cudaGraphDestroy(graph));
      CK(cudaEventDestroy(e0));
      CK(cudaEventDestroy(e1));
      return median(t);
    };
    // Host: cudaGraphLaunch of a graph that holds this one GEMM.
    double graph_host = 0;
    {
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      CK(call());
      CK(cudaStreamEndCapture(stream, &graph));
      CK(cudaGraphInstantiate(&exec, graph, 0));
      CK(cudaGraphLaunch(exec, stream));
      CK(cudaStreamSynchronize(stream));
      graph_host = host_us([&] { return cudaGraphLaunch(exec, stream); });
      CK(cudaGraphExecDestroy(exec));
      CK(cudaGraphDestroy(graph));
    }
    const double d = graph_us(false);
    const double with_alloc = graph_us(true);
    std::printf("%3d %6d %5d %6d %6d %7d %7zu %9.2f %9.2f %9.2f %8.1f %9.2f\n", i, id, tile, stages, splitk, cluster,
                res[i].workspaceSize / 1024, host, graph_host, d, 2.0 * m * n * k / (d * 1e-6) / 1e12, with_alloc);
  }
  return 0;
}
