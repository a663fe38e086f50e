// Fused scaled-dot-product attention through cuDNN 9's graph API: the composite forward and
// backward graphs that cuDNN runs as one flash-attention kernel each (Note [Fused attention]).
#include <array>
#include <bit>
#include <cmath>
#include <compare>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <ampgrad/core/kernels.h>
#include <ampgrad/core/tensor.h>
#include <ampgrad/cuda/attention_layout.h>
#include <ampgrad/cuda/call_graph.h>
#include <ampgrad/cuda/graph.h>
#include <ampgrad/cuda/check.h>
#include <ampgrad/cuda/cudnn_plan.h>
#include <ampgrad/cuda/runtime.h>

namespace ampgrad::cuda::dnn {

// Note [Fused attention]
// softmax(q k^T * scale (+ causal mask)) v, with dropout on the weights, without the L x S
// scores in memory: cuDNN 9 recognizes a graph of matmul, pointwise and reduction operations
// as attention and runs it as one fused kernel (online softmax, the scores in registers). The
// graphs are those cudnn-frontend's CompositeSDPANode and CompositeSDPABackwardNode build,
// written here in the backend API (docs/research/cudnn_sdpa_graph.md, §3 and §4):
//   forward  S = (q @ k^T) * scale (+ bias, an attention mask as 0 and the lowest value, [b or 1,
//            h or 1, L, S]), masked (row >= col) when causal; M = max_j S, E = exp(S - M),
//            Z = sum_j E, stats = M + log Z (float [b, h, L, 1], saved for backward), P = E / Z,
//            with dropout P * bernoulli(1 - p) / (1 - p); o = P @ v;
//   backward D = sum_e do * o (per row), P = exp(S - stats) recomputed, dv = P^T @ do,
//            dP = do @ v^T, dS = P * (dP - D) * scale, dk = dS^T @ q, dq = dS @ k (through a
//            float accumulator).
// k^T and v^T are k and v's own descriptors with the last two dims and strides swapped, so
// q, k, v, o and do may have any strides with a last stride of 1 (multiples of 8 elements
// apart, 16-byte aligned): [b, L, h, E] tensors viewed as [b, h, L, E] need no copy. The
// dropout mask comes from cuDNN's generator, seeded by a device int64 tensor: backward
// regenerates it from the same seed. Before cuDNN 9.16 the backward is wrong for S not a
// multiple of 128 unless a padding mask is on; as cudnn-frontend does, the graph then carries
// one of full lengths (INT32 [b] tensors of L and S, bounding every GEMM too). A plan is built once per geometry (heuristics mode A,
// then the fallback list; the first configuration that finalizes) and cached; a geometry no
// engine takes is cached as such, and the op takes its math path (ops/attention.cpp).

namespace {

using Dims4 = std::array<int64_t, 4>;

// uids of the tensors in the variant pack; virtual tensors count up from kFirstVirtual.
enum Uid : int64_t {
  kQ = 1, kK, kV, kO, kStats, kSeed, kOffset, kDO, kDQ, kDK, kDV, kSoftmaxSum, kDQAccum, kBias,
  kScale = 20, kNegInf, kDropScale, kKeep, kOne,
  kSeqQ = 30, kSeqKV,
  kFirstVirtual = 100
};

cudnnDataType_t io_type(DType t) { return t == DType::BFloat16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF; }

Dims4 packed(const Dims4& d) { return {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1}; }

// Builds one operation graph: tensors, operations in topological order, and the descriptors
// they need, all kept alive in `parts`.
class GraphBuilder {
 public:
  explicit GraphBuilder(cudnnHandle_t h) : h_(h) {}

  DescPtr tensor(int64_t uid, cudnnDataType_t type, const Dims4& dims, const Dims4& strides, bool is_virtual,
                 bool by_value = false) {
    auto t = std::make_shared<Desc>(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t alignment = 16;
    t->set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    t->set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data());
    t->set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data());
    t->set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    t->set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    if (is_virtual) {
      const bool yes = true;
      t->set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &yes);
    }
    if (by_value) {
      const bool yes = true;
      t->set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes);
    }
    t->finalize();
    parts.push_back(t);
    return t;
  }
  DescPtr virt(cudnnDataType_t type, const Dims4& dims, const Dims4& strides) {
    return tensor(next_uid_++, type, dims, strides, true);
  }
  DescPtr virt(const Dims4& dims) { return virt(CUDNN_DATA_FLOAT, dims, packed(dims)); }
  // A float by-value scalar (a host pointer in the variant pack), [1, 1, 1, 1].
  DescPtr scalar(int64_t uid) { return tensor(uid, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true); }

  // y = mode(x[, b[, t]]) in `prec`; axis for GEN_INDEX.
  void pointwise(cudnnPointwiseMode_t mode, const DescPtr& x, const DescPtr& b, const DescPtr& t, const DescPtr& y,
                 cudnnDataType_t prec = CUDNN_DATA_FLOAT, int64_t axis = -1) {
    auto pw = std::make_shared<Desc>(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    pw->set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    pw->set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (axis >= 0) pw->set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    pw->finalize();
    auto op = std::make_shared<Desc>(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    op->set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, *pw);
    op->set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, *x);
    if (b) op->set(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b);
    if (t) op->set(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, *t);
    op->set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, *y);
    const float one = 1.0f;
    op->set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one);
    op->set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
    op->finalize();
    add(pw, op);
  }
  // A virtual float result of mode(x[, b]) with x's dims.
  DescPtr pw(cudnnPointwiseMode_t mode, const DescPtr& x, const DescPtr& b, const Dims4& dims) {
    DescPtr y = virt(dims);
    pointwise(mode, x, b, nullptr, y);
    return y;
  }
  // c = a @ b; the overrides (sequence-length tensors, or null) bound the GEMM's M, N and K.
  void matmul(const DescPtr& a, const DescPtr& b, const DescPtr& c, const DescPtr& m_override = nullptr,
              const DescPtr& n_override = nullptr, const DescPtr& k_override = nullptr) {
    auto mm = std::make_shared<Desc>(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    mm->set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    if (m_override || n_override || k_override) {
      const double zero = 0.0;
      mm->set(CUDNN_ATTR_MATMUL_PADDING_VALUE, CUDNN_TYPE_DOUBLE, 1, &zero);
    }
    mm->finalize();
    auto op = std::make_shared<Desc>(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    op->set(CUDNN_ATTR_OPERATION_MATMUL_ADESC, *a);
    op->set(CUDNN_ATTR_OPERATION_MATMUL_BDESC, *b);
    op->set(CUDNN_ATTR_OPERATION_MATMUL_CDESC, *c);
    if (m_override) op->set(CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, *m_override);
    if (n_override) op->set(CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, *n_override);
    if (k_override) op->set(CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, *k_override);
    op->set(CUDNN_ATTR_OPERATION_MATMUL_DESC, *mm);
    op->finalize();
    add(mm, op);
  }
  void reduce(cudnnReduceTensorOp_t how, const DescPtr& x, const DescPtr& y) {
    auto r = std::make_shared<Desc>(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    r->set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    r->set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &how);
    r->finalize();
    auto op = std::make_shared<Desc>(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    op->set(CUDNN_ATTR_OPERATION_REDUCTION_DESC, *r);
    op->set(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, *x);
    op->set(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, *y);
    op->finalize();
    add(r, op);
  }
  // The dropout mask, bernoulli(keep) of `dims`, from the device seed and offset tensors
  // (uids kSeed, kOffset): forward and backward draw the same one.
  DescPtr dropout_mask(const Dims4& dims, double keep) {
    DescPtr y = virt(dims);
    rng(tensor(kSeed, CUDNN_DATA_INT64, {1, 1, 1, 1}, {1, 1, 1, 1}, false),
        tensor(kOffset, CUDNN_DATA_INT64, {1, 1, 1, 1}, {1, 1, 1, 1}, false), y, keep);
    return y;
  }
  // y = bernoulli(keep) from the device seed and offset tensors.
  void rng(const DescPtr& seed, const DescPtr& offset, const DescPtr& y, double keep) {
    auto r = std::make_shared<Desc>(CUDNN_BACKEND_RNG_DESCRIPTOR);
    const cudnnRngDistribution_t dist = CUDNN_RNG_DISTRIBUTION_BERNOULLI;
    r->set(CUDNN_ATTR_RNG_DISTRIBUTION, CUDNN_TYPE_RNG_DISTRIBUTION, 1, &dist);
    r->set(CUDNN_ATTR_RNG_BERNOULLI_DIST_PROBABILITY, CUDNN_TYPE_DOUBLE, 1, &keep);
    r->finalize();
    auto op = std::make_shared<Desc>(CUDNN_BACKEND_OPERATION_RNG_DESCRIPTOR);
    op->set(CUDNN_ATTR_OPERATION_RNG_YDESC, *y);
    op->set(CUDNN_ATTR_OPERATION_RNG_DESC, *r);
    op->set(CUDNN_ATTR_OPERATION_RNG_SEED, *seed);
    op->set(CUDNN_ATTR_OPERATION_RNG_OFFSET_DESC, *offset);
    op->finalize();
    add(r, op);
  }
  void reshape(const DescPtr& x, const DescPtr& y) {
    auto op = std::make_shared<Desc>(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    op->set(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, *x);
    op->set(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, *y);
    op->finalize();
    add(nullptr, op);
  }
  // S masked to row >= col (the causal top-left triangle): -inf elsewhere.
  DescPtr causal(const DescPtr& s, const Dims4& dims, const DescPtr& neg_inf) {
    DescPtr row = virt(CUDNN_DATA_INT32, dims, packed(dims)), col = virt(CUDNN_DATA_INT32, dims, packed(dims));
    pointwise(CUDNN_POINTWISE_GEN_INDEX, s, nullptr, nullptr, row, CUDNN_DATA_INT32, 2);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, s, nullptr, nullptr, col, CUDNN_DATA_INT32, 3);
    DescPtr keep = virt(CUDNN_DATA_BOOLEAN, dims, packed(dims));
    pointwise(CUDNN_POINTWISE_CMP_GE, row, col, nullptr, keep, CUDNN_DATA_BOOLEAN);
    DescPtr out = virt(dims);
    pointwise(CUDNN_POINTWISE_BINARY_SELECT, s, neg_inf, keep, out);
    return out;
  }

  // S masked to row < seq_q and col < seq_kv (INT32 [b, 1, 1, 1] tensors): -inf elsewhere.
  DescPtr padding(const DescPtr& s, const Dims4& dims, const DescPtr& seq_q, const DescPtr& seq_kv,
                  const DescPtr& neg_inf) {
    DescPtr row = virt(CUDNN_DATA_INT32, dims, packed(dims)), col = virt(CUDNN_DATA_INT32, dims, packed(dims));
    pointwise(CUDNN_POINTWISE_GEN_INDEX, s, nullptr, nullptr, row, CUDNN_DATA_INT32, 2);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, s, nullptr, nullptr, col, CUDNN_DATA_INT32, 3);
    DescPtr in_rows = virt(CUDNN_DATA_BOOLEAN, dims, packed(dims)), in_cols = virt(CUDNN_DATA_BOOLEAN, dims, packed(dims));
    pointwise(CUDNN_POINTWISE_CMP_LT, row, seq_q, nullptr, in_rows, CUDNN_DATA_BOOLEAN);
    pointwise(CUDNN_POINTWISE_CMP_LT, col, seq_kv, nullptr, in_cols, CUDNN_DATA_BOOLEAN);
    DescPtr keep = virt(CUDNN_DATA_BOOLEAN, dims, packed(dims));
    pointwise(CUDNN_POINTWISE_LOGICAL_AND, in_rows, in_cols, nullptr, keep, CUDNN_DATA_BOOLEAN);
    DescPtr out = virt(dims);
    pointwise(CUDNN_POINTWISE_BINARY_SELECT, s, neg_inf, keep, out);
    return out;
  }

  // The operation graph of every operation added, in order.
  DescPtr finish() {
    auto graph = std::make_shared<Desc>(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    graph->set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(ops_.size()),
               ops_.data());
    graph->set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h_);
    graph->finalize();
    parts.push_back(graph);
    return graph;
  }

  std::vector<DescPtr> parts;

 private:
  void add(const DescPtr& d, const DescPtr& op) {
    if (d) parts.push_back(d);
    parts.push_back(op);
    ops_.push_back(op->get());
  }
  cudnnHandle_t h_;
  std::vector<cudnnBackendDescriptor_t> ops_;
  int64_t next_uid_ = kFirstVirtual;
};

// Everything a plan depends on: the pass, shapes, strides (of q, k, v, o, and for backward do,
// dq, dk, dv), dtype, mask and dropout.
struct SdpaGeometry {
  bool backward = false;
  int device = 0;
  DType dtype = DType::Float16;
  int64_t b = 0, h = 0, l = 0, s = 0, e = 0;
  std::array<Dims4, 8> strides{};  // q, k, v, o, do, dq, dk, dv
  bool causal = false, dropout = false;
  // An additive bias on the scaled scores: its dims ([b or 1, h or 1, L, S]) and strides.
  bool bias = false;
  Dims4 bias_dims{}, bias_strides{};
  // Backward with full-length sequence tensors as a padding mask: cudnn-frontend's workaround
  // for cuDNN older than 9.16 when S is not a multiple of 128 (research notes, 4.6).
  bool full_lengths = false;
  uint32_t scale_bits = 0, keep_bits = 0;  // the float scale and keep probability
  auto operator<=>(const SdpaGeometry&) const = default;
};

struct SdpaPlan {
  std::vector<DescPtr> parts;
  DescPtr plan;
  int64_t workspace = 0;
  // The by-value scalars: the variant pack holds their host addresses.
  // (16-byte aligned, as every tensor of the graph is declared).
  alignas(16) float scale = 1;
  // -inf from cuDNN 9.10 on; before, cudnn-frontend masks with the lowest float.
  alignas(16) float neg_inf = cudnnGetVersion() >= 91000 ? -std::numeric_limits<float>::infinity()
                                                         : std::numeric_limits<float>::lowest();
  alignas(16) float drop_scale = 1;
  alignas(16) float keep = 1;
  alignas(16) float one = 1;
};
using SdpaPlanPtr = std::shared_ptr<const SdpaPlan>;

Dims4 swap23(Dims4 d) {
  std::swap(d[2], d[3]);
  return d;
}

// The forward graph (Note [Fused attention]).
void forward_graph(GraphBuilder& g, const SdpaGeometry& geo) {
  const cudnnDataType_t io = io_type(geo.dtype);
  const Dims4 qd{geo.b, geo.h, geo.l, geo.e}, kd{geo.b, geo.h, geo.s, geo.e}, sd{geo.b, geo.h, geo.l, geo.s},
      rowd{geo.b, geo.h, geo.l, 1};
  const auto& st = geo.strides;
  DescPtr q = g.tensor(kQ, io, qd, st[0], false);
  DescPtr kt = g.tensor(kK, io, swap23(kd), swap23(st[1]), false);
  DescPtr v = g.tensor(kV, io, kd, st[2], false);
  DescPtr o = g.tensor(kO, io, qd, st[3], false);
  DescPtr stats = g.tensor(kStats, CUDNN_DATA_FLOAT, rowd, packed(rowd), false);
  DescPtr scale = g.scalar(kScale);
  DescPtr s0 = g.virt(sd);
  g.matmul(q, kt, s0);
  DescPtr s = g.pw(CUDNN_POINTWISE_MUL, s0, scale, sd);
  if (geo.bias) s = g.pw(CUDNN_POINTWISE_ADD, s, g.tensor(kBias, io, geo.bias_dims, geo.bias_strides, false), sd);
  if (geo.causal) s = g.causal(s, sd, g.scalar(kNegInf));
  DescPtr m = g.virt(rowd);
  g.reduce(CUDNN_REDUCE_TENSOR_MAX, s, m);
  DescPtr z = g.pw(CUDNN_POINTWISE_SUB, s, m, sd);
  DescPtr ex = g.pw(CUDNN_POINTWISE_EXP, z, nullptr, sd);
  DescPtr sum = g.virt(rowd);
  g.reduce(CUDNN_REDUCE_TENSOR_ADD, ex, sum);
  DescPtr log_sum = g.pw(CUDNN_POINTWISE_LOG, sum, nullptr, rowd);
  g.pointwise(CUDNN_POINTWISE_ADD, m, log_sum, nullptr, stats);
  // The weights fed to the second matmul are in the io dtype (a requirement of the backend).
  DescPtr p;
  if (geo.dropout) {
    DescPtr p0 = g.pw(CUDNN_POINTWISE_DIV, ex, sum, sd);
    DescPtr mask = g.dropout_mask(sd, std::bit_cast<float>(geo.keep_bits));
    DescPtr p1 = g.pw(CUDNN_POINTWISE_MUL, p0, mask, sd);
    p = g.virt(io, sd, packed(sd));
    g.pointwise(CUDNN_POINTWISE_MUL, p1, g.scalar(kDropScale), nullptr, p);
  } else {
    p = g.virt(io, sd, packed(sd));
    g.pointwise(CUDNN_POINTWISE_DIV, ex, sum, nullptr, p);
  }
  g.matmul(p, v, o);
}

// The backward graph (Note [Fused attention]).
void backward_graph(GraphBuilder& g, const SdpaGeometry& geo) {
  const cudnnDataType_t io = io_type(geo.dtype);
  const int64_t b = geo.b, h = geo.h, l = geo.l, s_ = geo.s, e = geo.e;
  const Dims4 qd{b, h, l, e}, kd{b, h, s_, e}, sd{b, h, l, s_}, rowd{b, h, l, 1}, td{b, h, s_, l};
  const auto& st = geo.strides;
  DescPtr q = g.tensor(kQ, io, qd, st[0], false);
  DescPtr kt = g.tensor(kK, io, swap23(kd), swap23(st[1]), false);
  DescPtr vt = g.tensor(kV, io, swap23(kd), swap23(st[2]), false);
  DescPtr o = g.tensor(kO, io, qd, st[3], false);
  DescPtr dout = g.tensor(kDO, io, qd, st[4], false);
  DescPtr dq = g.tensor(kDQ, io, qd, st[5], false);
  DescPtr dk = g.tensor(kDK, io, kd, st[6], false);
  DescPtr dv = g.tensor(kDV, io, kd, st[7], false);
  DescPtr stats = g.tensor(kStats, CUDNN_DATA_FLOAT, rowd, packed(rowd), false);
  DescPtr scale = g.scalar(kScale);
  // D = rowsum(do * o), times the keep probability with dropout (cudnn-frontend's strides for
  // the product, which is virtual).
  DescPtr prod = g.virt(CUDNN_DATA_FLOAT, qd, {h * l * e, l * e, h * e, 1});
  g.pointwise(CUDNN_POINTWISE_MUL, dout, o, nullptr, prod);
  DescPtr rows = g.virt(rowd);
  g.reduce(CUDNN_REDUCE_TENSOR_ADD, prod, rows);
  DescPtr softmax_sum = g.tensor(kSoftmaxSum, CUDNN_DATA_FLOAT, rowd, packed(rowd), false);
  g.pointwise(CUDNN_POINTWISE_MUL, rows, g.scalar(geo.dropout ? kKeep : kOne), nullptr, softmax_sum);
  DescPtr seq_q, seq_kv, neg_inf;
  if (geo.full_lengths) {
    seq_q = g.tensor(kSeqQ, CUDNN_DATA_INT32, {b, 1, 1, 1}, {1, 1, 1, 1}, false);
    seq_kv = g.tensor(kSeqKV, CUDNN_DATA_INT32, {b, 1, 1, 1}, {1, 1, 1, 1}, false);
  }
  if (geo.causal || geo.full_lengths) neg_inf = g.scalar(kNegInf);
  // P recomputed from the stats.
  DescPtr s0 = g.virt(sd);
  g.matmul(q, kt, s0, seq_q, seq_kv);
  DescPtr s1 = g.pw(CUDNN_POINTWISE_MUL, s0, scale, sd);
  if (geo.bias) s1 = g.pw(CUDNN_POINTWISE_ADD, s1, g.tensor(kBias, io, geo.bias_dims, geo.bias_strides, false), sd);
  DescPtr s2 = g.pw(CUDNN_POINTWISE_SUB, s1, stats, sd);
  if (geo.full_lengths) {
    s2 = g.padding(s2, sd, seq_q, seq_kv, neg_inf);
    // cudnn-frontend applies it twice for 9.0 <= cuDNN < 9.10 (a backend bug's workaround).
    if (cudnnGetVersion() < 91000) s2 = g.padding(s2, sd, seq_q, seq_kv, neg_inf);
  }
  if (geo.causal) s2 = g.causal(s2, sd, neg_inf);
  DescPtr p = g.pw(CUDNN_POINTWISE_EXP, s2, nullptr, sd);
  DescPtr mask, drop_scale, pd = p;
  if (geo.dropout) {
    mask = g.dropout_mask(sd, std::bit_cast<float>(geo.keep_bits));
    drop_scale = g.scalar(kDropScale);
    pd = g.pw(CUDNN_POINTWISE_MUL, g.pw(CUDNN_POINTWISE_MUL, p, mask, sd), drop_scale, sd);
  }
  // dv = P^T do.
  DescPtr pt = g.virt(io, td, {h * l * s_, l * s_, 1, s_});
  g.reshape(pd, pt);
  g.matmul(pt, dout, dv, seq_kv, nullptr, seq_q);
  // dS = P * (dP - D) * scale, dP = do v^T (through the mask with dropout).
  DescPtr dp = g.virt(sd);
  g.matmul(dout, vt, dp, seq_q, seq_kv);
  if (geo.dropout) dp = g.pw(CUDNN_POINTWISE_MUL, dp, mask, sd);
  DescPtr t = g.pw(CUDNN_POINTWISE_SUB, dp, softmax_sum, sd);
  DescPtr t2 = g.pw(CUDNN_POINTWISE_MUL, t, p, sd);
  if (geo.dropout) t2 = g.pw(CUDNN_POINTWISE_MUL, t2, drop_scale, sd);
  DescPtr ds = g.pw(CUDNN_POINTWISE_MUL, t2, scale, sd);
  // dk = dS^T q.
  DescPtr dst = g.virt(io, td, {h * l * s_, l * s_, 1, s_});
  g.reshape(ds, dst);
  g.matmul(dst, q, dk, seq_kv, nullptr, seq_q);
  // dq = dS k, accumulated in float.
  DescPtr k = g.virt(io, kd, st[1]);
  g.reshape(kt, k);
  DescPtr acc = g.tensor(kDQAccum, CUDNN_DATA_FLOAT, qd, packed(qd), false);
  g.matmul(ds, k, acc, seq_q, nullptr, seq_kv);
  g.pointwise(CUDNN_POINTWISE_IDENTITY, acc, nullptr, nullptr, dq);
}

// A plan for the geometry, or nullptr (and why) when no engine builds one.
SdpaPlanPtr build_plan(const SdpaGeometry& geo, std::string& why) {
  auto plan = std::make_shared<SdpaPlan>();
  plan->scale = std::bit_cast<float>(geo.scale_bits);
  plan->keep = std::bit_cast<float>(geo.keep_bits);
  plan->drop_scale = 1.0f / plan->keep;
  const cudnnHandle_t h = handle(geo.device);
  GraphBuilder g(h);
  DescPtr graph;
  try {
    if (geo.backward) backward_graph(g, geo);
    else forward_graph(g, geo);
    graph = g.finish();
  } catch (const Error& err) {
    why = fmt::format("cuDNN refused the {} attention graph: {}", geo.backward ? "backward" : "forward", err.what());
    return nullptr;
  }
  plan->parts = g.parts;
  int proposed = 0;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    for (DescPtr& cfg : engine_configs(*graph, mode)) {
      ++proposed;
      auto p = std::make_shared<Desc>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      p->set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
      p->set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, *cfg);
      if (cudnnBackendFinalize(p->get()) != CUDNN_STATUS_SUCCESS) continue;
      int64_t n = 0;
      AG_CUDNN_CHECK(cudnnBackendGetAttribute(p->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                              &n, &plan->workspace));
      plan->parts.push_back(cfg);
      plan->plan = p;
      return plan;
    }
  }
  char last[512] = {};
  cudnnGetLastErrorString(last, sizeof(last));
  last[sizeof(last) - 1] = '\0';
  why = proposed == 0 ? fmt::format("cuDNN {} proposes no engine for the {} attention graph{}{}", cudnnGetVersion(),
                                    geo.backward ? "backward" : "forward", last[0] ? ": " : "", last)
                      : fmt::format("none of the {} engines cuDNN {} proposes builds a plan for the {} attention graph",
                                    proposed, cudnnGetVersion(), geo.backward ? "backward" : "forward");
  return nullptr;
}

struct CachedPlan {
  SdpaPlanPtr plan;
  std::string why;
};

// A cached plan lives as long as the process (calls are keyed by its address, Note [Call graphs]).
const CachedPlan& plan_for(const SdpaGeometry& geo) {
  static auto* mu = new std::mutex();
  static auto* cache = new std::map<SdpaGeometry, CachedPlan>();
  std::lock_guard<std::mutex> lock(*mu);
  auto it = cache->find(geo);
  if (it != cache->end()) return it->second;
  CachedPlan c;
  c.plan = build_plan(geo, c.why);
  return cache->emplace(geo, std::move(c)).first->second;
}

Dims4 strides4(const Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2), t.stride(3)}; }

// Whether cuDNN can take t (as the graphs declare their tensors).
bool fits(const Tensor& t) { return sdpa_operand_fits(t); }

// cudnn-frontend works around a backward bug of cuDNN older than 9.16 with a padding mask of
// full lengths when S is not a multiple of 128 (docs/research/cudnn_sdpa_graph.md, 4.6).
bool needs_full_lengths(int64_t s) { return cudnnGetVersion() < 91600 && s % 128 != 0; }

// Those lengths, [b] int32 all `len`, made once per device, b and len and kept for the process
// (they never change): two fills fewer in every backward, in a CUDA graph too. Not kept when
// made while a graph captures: their fill would run only when it replays.
Tensor full_lengths(const Device& device, int64_t b, int64_t len) {
  static auto* mu = new std::mutex();
  static auto* cache = new std::map<std::array<int64_t, 3>, Tensor>();
  const std::array<int64_t, 3> key{device.index, b, len};
  {
    std::lock_guard<std::mutex> lock(*mu);
    auto it = cache->find(key);
    if (it != cache->end()) return it->second;
  }
  Tensor t = empty({b}, TensorOptions(kInt32).device(device));
  kernel::fill(device, t, static_cast<double>(len));
  if (!capturing(device.index)) {
    std::lock_guard<std::mutex> lock(*mu);
    cache->emplace(key, t);
  }
  return t;
}

SdpaGeometry geometry(bool backward, const Tensor& q, const Tensor& k, const Tensor& bias, double scale, bool causal,
                      double dropout_p) {
  SdpaGeometry g;
  if (bias.defined()) {
    g.bias = true;
    g.bias_dims = {bias.size(0), bias.size(1), bias.size(2), bias.size(3)};
    g.bias_strides = {bias.stride(0), bias.stride(1), bias.stride(2), bias.stride(3)};
  }
  g.backward = backward;
  g.device = q.device().index;
  g.dtype = q.dtype();
  g.b = q.size(0), g.h = q.size(1), g.l = q.size(2), g.s = k.size(2), g.e = q.size(3);
  g.causal = causal;
  g.dropout = dropout_p > 0;
  g.scale_bits = std::bit_cast<uint32_t>(static_cast<float>(scale));
  g.keep_bits = std::bit_cast<uint32_t>(static_cast<float>(1.0 - dropout_p));
  return g;
}

struct Binding {
  std::vector<int64_t> uids;
  std::vector<void*> ptrs;
  void add(int64_t uid, const void* p) {
    uids.push_back(uid);
    ptrs.push_back(const_cast<void*>(p));
  }
};

// Runs the plan with the bound tensors, its scalars and (with dropout) the seed and offset in
// rng; through run_call, as convolutions.
void run(const SdpaGeometry& geo, const SdpaPlan& plan, Binding& bind, const Tensor& rng, const Tensor& zero_first) {
  Tensor ws;
  if (plan.workspace > 0) ws = empty({plan.workspace}, TensorOptions(kUInt8).device(Device(kCUDA, geo.device)));
  void* wsp = plan.workspace > 0 ? ampgrad::detail::address(ws) : nullptr;
  bind.add(kScale, &plan.scale);
  if (geo.dropout) {
    bind.add(kSeed, ampgrad::detail::address(rng));
    bind.add(kOffset, static_cast<const int64_t*>(ampgrad::detail::address(rng)) + 2);
  }
  if (geo.causal || geo.full_lengths) bind.add(kNegInf, &plan.neg_inf);
  if (geo.dropout) {
    bind.add(kDropScale, &plan.drop_scale);
    if (geo.backward) bind.add(kKeep, &plan.keep);
  } else if (geo.backward) {
    bind.add(kOne, &plan.one);
  }
  const cudnnHandle_t h = handle(geo.device);
  cudaStream_t stream = launch_stream(geo.device);
  void* zero = zero_first.defined() ? ampgrad::detail::address(zero_first) : nullptr;
  const size_t zero_bytes = zero_first.defined() ? zero_first.nbytes() : 0;
  auto enqueue = [&] {
    if (zero) AG_CUDA_CHECK(cudaMemsetAsync(zero, 0, zero_bytes, stream));
    Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(bind.uids.size()),
             bind.uids.data());
    pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(bind.ptrs.size()),
             bind.ptrs.data());
    pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &wsp);
    pack.finalize();
    AG_CUDNN_CHECK(cudnnBackendExecute(h, plan.plan->get(), pack.get()));
  };
  CallKey call;
  call.add(uint64_t{7}).add(&plan).add(wsp).add(zero).add(static_cast<const void*>(stream));
  for (size_t i = 0; i < bind.uids.size(); ++i) call.add(static_cast<uint64_t>(bind.uids[i])).add(bind.ptrs[i]);
  run_call(geo.device, stream, call, enqueue);
}

// Whether bias suits the graph: q's dtype, [b or 1, h or 1, L, S], and as fits() asks.
bool bias_fits(const Tensor& bias, const Tensor& q, const Tensor& k) {
  return !bias.defined() ||
         (bias.dtype() == q.dtype() && fits(bias) && (bias.size(0) == 1 || bias.size(0) == q.size(0)) &&
          (bias.size(1) == 1 || bias.size(1) == q.size(1)) && bias.size(2) == q.size(2) && bias.size(3) == k.size(2));
}

bool sdpa_fused_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias, const Tensor& o,
                        const Tensor& stats, double scale, bool causal, double dropout_p,
                        const std::vector<int64_t>& backward_strides, const Tensor& rng, std::string& why) {
  DeviceGuard guard(q.device().index);  // plans, handles and streams are the tensors' device's
  if (!fits(q) || !fits(k) || !fits(v) || !fits(o)) {
    why = "query, key, value and output must be 4-D with a last stride of 1, the others multiples of 8, 16-byte aligned";
    return false;
  }
  if (!bias_fits(bias, q, k)) {
    why = "the mask's bias must be [B or 1, H or 1, L, S] in the query's dtype, its strides multiples of 8";
    return false;
  }
  SdpaGeometry geo = geometry(false, q, k, bias, scale, causal, dropout_p);
  geo.strides[0] = strides4(q), geo.strides[1] = strides4(k), geo.strides[2] = strides4(v),
  geo.strides[3] = strides4(o);
  const CachedPlan& c = plan_for(geo);
  if (!c.plan) {
    why = c.why;
    return false;
  }
  if (!backward_strides.empty()) {
    AG_INTERNAL_ASSERT(backward_strides.size() == 16, "sdpa_fused_forward: 16 backward strides, got {}",
                       backward_strides.size());
    SdpaGeometry back = geo;
    back.backward = true;
    back.full_lengths = needs_full_lengths(geo.s);
    for (size_t t = 0; t < 4; ++t)
      for (size_t d = 0; d < 4; ++d) back.strides[4 + t][d] = backward_strides[4 * t + d];
    const CachedPlan& cb = plan_for(back);
    if (!cb.plan) {
      why = cb.why;
      return false;
    }
  }
  Binding bind;
  bind.add(kQ, ampgrad::detail::address(q));
  bind.add(kK, ampgrad::detail::address(k));
  bind.add(kV, ampgrad::detail::address(v));
  bind.add(kO, ampgrad::detail::address(o));
  bind.add(kStats, ampgrad::detail::address(stats));
  if (geo.bias) bind.add(kBias, ampgrad::detail::address(bias));
  run(geo, *c.plan, bind, rng, Tensor());
  return true;
}

bool sdpa_fused_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias, const Tensor& o,
                         const Tensor& dout, const Tensor& stats, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                         double scale, bool causal, double dropout_p, const Tensor& rng, std::string& why) {
  DeviceGuard guard(q.device().index);
  if (!fits(q) || !fits(k) || !fits(v) || !fits(o) || !fits(dout) || !fits(dq) || !fits(dk) || !fits(dv) ||
      !bias_fits(bias, q, k)) {
    why = "every tensor must be 4-D with a last stride of 1, the others multiples of 8, 16-byte aligned";
    return false;
  }
  SdpaGeometry geo = geometry(true, q, k, bias, scale, causal, dropout_p);
  geo.full_lengths = needs_full_lengths(geo.s);
  const Tensor* ts[] = {&q, &k, &v, &o, &dout, &dq, &dk, &dv};
  for (size_t i = 0; i < 8; ++i) geo.strides[i] = strides4(*ts[i]);
  const CachedPlan& c = plan_for(geo);
  if (!c.plan) {
    why = c.why;
    return false;
  }
  const TensorOptions f32 = TensorOptions(kFloat32).device(q.device());
  const Tensor softmax_sum = empty({geo.b, geo.h, geo.l, 1}, f32), acc = empty({geo.b, geo.h, geo.l, geo.e}, f32);
  Binding bind;
  bind.add(kQ, ampgrad::detail::address(q));
  bind.add(kK, ampgrad::detail::address(k));
  bind.add(kV, ampgrad::detail::address(v));
  bind.add(kO, ampgrad::detail::address(o));
  bind.add(kDO, ampgrad::detail::address(dout));
  bind.add(kDQ, ampgrad::detail::address(dq));
  bind.add(kDK, ampgrad::detail::address(dk));
  bind.add(kDV, ampgrad::detail::address(dv));
  bind.add(kStats, ampgrad::detail::address(stats));
  bind.add(kSoftmaxSum, ampgrad::detail::address(softmax_sum));
  bind.add(kDQAccum, ampgrad::detail::address(acc));
  if (geo.bias) bind.add(kBias, ampgrad::detail::address(bias));
  Tensor seq_q, seq_kv;
  if (geo.full_lengths) {
    seq_q = full_lengths(q.device(), geo.b, geo.l);
    seq_kv = full_lengths(q.device(), geo.b, geo.s);
    bind.add(kSeqQ, ampgrad::detail::address(seq_q));
    bind.add(kSeqKV, ampgrad::detail::address(seq_kv));
  }
  run(geo, *c.plan, bind, rng, acc);
  return true;
}

}  // namespace

AG_REGISTER_KERNEL(kernel::sdpa_fused_forward, kCUDA, sdpa_fused_forward);
AG_REGISTER_KERNEL(kernel::sdpa_fused_backward, kCUDA, sdpa_fused_backward);

}  // namespace ampgrad::cuda::dnn
