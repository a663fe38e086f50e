// Every kernel of the op families, declared once (Note [Kernel dispatch] in core/dispatch.h):
// the CPU reference kernels in ops/cpu_*.cpp and the CUDA kernels in cuda/ register their
// implementations of these. Ops check their inputs, allocate outputs and pick the device;
// kernels only compute. Shapes reaching a kernel are already validated and broadcast.
#pragma once

#include <array>
#include <string>
#include <vector>

#include <ampgrad/core/conv_params.h>
#include <ampgrad/core/dispatch.h>
#include <ampgrad/core/kernel_kinds.h>
#include <ampgrad/core/tensor.h>

namespace ampgrad::kernel {

// ---- Elementwise (core/elementwise_kinds.def) ----------------------------------------------

// out = f(x). x has out's shape, any strides, the same dtype; out is contiguous (or x itself).
AG_DECLARE_KERNEL(unary, void(UnaryKind k, const Tensor& x, const Tensor& out, double a, double b));
// grad_x = f'(g, s), the kind's backward formula: s is the forward's input x or output y (the
// one the kind reads), g and s of grad_x's shape (any strides, broadcast dims stride 0) and
// dtype; grad_x contiguous; a, b the forward's scalars.
AG_DECLARE_KERNEL(unary_backward,
                  void(UnaryKind k, const Tensor& g, const Tensor& s, const Tensor& grad_x, double a, double b));
// out = f(x, y). x, y share a dtype and out's shape (broadcast dims have stride 0); out is
// contiguous, of x's dtype, or Bool for comparisons.
AG_DECLARE_KERNEL(binary, void(BinaryKind k, const Tensor& x, const Tensor& y, const Tensor& out));
// grad_x = f'_x(g, x, y) and grad_y = f'_y(g, x, y), the kind's backward formulas, in one
// pass: g, x, y of the broadcast shape (any strides) and one dtype; grad_x, grad_y contiguous
// of that shape (either may be undefined: not computed).
AG_DECLARE_KERNEL(binary_backward, void(BinaryKind k, const Tensor& g, const Tensor& x, const Tensor& y,
                                        const Tensor& grad_x, const Tensor& grad_y));
// out = f(x, y, z) of the ternary kind k (addcmul, addcdiv, lerp): x, y, z of out's shape (any
// strides, broadcast dims stride 0) and dtype; out contiguous; a the op's scalar.
AG_DECLARE_KERNEL(ternary, void(TernaryKind k, const Tensor& x, const Tensor& y, const Tensor& z, const Tensor& out,
                                double a));
// The kind's three gradients in one pass: g, x, y, z of the broadcast shape (any strides) and
// one dtype; grads[i] contiguous of that shape, or undefined (not computed).
AG_DECLARE_KERNEL(ternary_backward, void(TernaryKind k, const Tensor& g, const Tensor& x, const Tensor& y,
                                         const Tensor& z, const std::array<Tensor, 3>& grads, double a));
// out = cond ? x : y, all of out's shape; x, y of out's dtype; cond Bool.
AG_DECLARE_KERNEL(where, void(const Tensor& cond, const Tensor& x, const Tensor& y, const Tensor& out));

// ---- Copies ---------------------------------------------------------------------------------

// dst = src converted to dst's dtype; same shape, any strides on both, same device.
AG_DECLARE_KERNEL(copy, void(const Tensor& dst, const Tensor& src));
// dst = src between the host and a device: both contiguous, of one shape and dtype, one of
// them on the CPU; dispatched on the other's device.
AG_DECLARE_KERNEL(copy_across_devices, void(const Tensor& dst, const Tensor& src));
AG_DECLARE_KERNEL(fill, void(const Tensor& dst, double value));
// dst (contiguous 1-D) [i] = start + step * i, computed in double and converted as a cast does
// (CUDA only: arange fills CUDA tensors on the device, so that a CUDA graph can capture it; ops
// check has(device) first).
AG_DECLARE_KERNEL(arange, void(const Tensor& dst, double start, double step));
// dst += src: floating dtypes that may differ, src of dst's shape (any strides, broadcast dims
// stride 0). Each sum is formed in float (double when either is Float64) and rounded to dst's
// dtype once, so a float16 gradient adds into a float32 one without a cast kernel or a
// temporary (Note [Mixed-dtype accumulation] in ops/binary.cpp).
AG_DECLARE_KERNEL(accumulate, void(const Tensor& dst, const Tensor& src));
// out = f(x, y) for Add, Sub and Mul, where one of x and y is Float32 and the other Float16 or
// BFloat16, read in its own dtype and widened in registers; x, y and out contiguous of one
// shape, out Float32 (Note [Widening arithmetic] in ops/binary.cpp; CUDA only: ops check
// has(device) first).
AG_DECLARE_KERNEL(binary_widening, void(BinaryKind k, const Tensor& x, const Tensor& y, const Tensor& out));

// ---- Reductions and softmax -----------------------------------------------------------------

// x contiguous [outer, r, inner] -> out contiguous [outer, inner] (x's dtype; Int64 for
// Argmax/Argmin). `indices` (Int64 [outer, inner]) is filled for Max/Min when defined.
// `param` is the correction of Var, p of Norm.
AG_DECLARE_KERNEL(reduce,
                  void(ReduceKind k, const Tensor& x, const Tensor& out, const Tensor& indices, double param));
// out = the running sums of x along r (reverse: from r's end), x and out contiguous [outer, r,
// inner] of one dtype; each sum kept in the accumulation type (float for 16-bit x, int64 for
// integers) and rounded as it is stored.
AG_DECLARE_KERNEL(cumsum, void(const Tensor& x, const Tensor& out, bool reverse));
// out = the running products of x along r, as cumsum (floating dtypes and int64).
AG_DECLARE_KERNEL(cumprod, void(const Tensor& x, const Tensor& out));
// grad_x of cumprod along r, right at zeros (Note [cumprod's gradient] in ops/reduce.cpp): x,
// out (the forward's), g and grad_x contiguous [outer, r, inner] of one floating dtype.
AG_DECLARE_KERNEL(cumprod_backward, void(const Tensor& x, const Tensor& out, const Tensor& g, const Tensor& grad_x));
// x contiguous [outer, r, inner]; out the same shape, of x's dtype or float32 (a 16-bit x read
// as is: log_softmax(x, dim, kFloat32)); softmax (or log_softmax) over r.
AG_DECLARE_KERNEL(softmax, void(const Tensor& x, const Tensor& out, bool log));
// The backward over r of softmax (log: log_softmax): g and y (the forward's output) contiguous
// [outer, r, inner] of one dtype; grad_x the same shape, of y's dtype or the 16-bit dtype the
// forward read. log: grad_x = g - exp(y) * sum_r g; softmax: grad_x = y * (g - sum_r g * y).
AG_DECLARE_KERNEL(softmax_backward, void(const Tensor& g, const Tensor& y, const Tensor& grad_x, bool log));

// Anomaly detection (Note [Anomaly detection] in autograd/anomaly.h). `flags` is an int64 [3]
// tensor on t's device: {check, NaN count, inf count}, check 0 while nothing was found. When
// flags[0] is 0 or `check` and t (floating, non-overlapping and dense) holds a NaN or an inf,
// flags[0] = check and flags[1], flags[2] count t's NaN and inf elements; else nothing changes.
AG_DECLARE_KERNEL(anomaly_check, void(const Tensor& t, const Tensor& flags, int64_t check));

// Exponent histograms (Note [Exponent histograms] in core/exponent_bins.h): adds the count of
// t's values (floating, non-overlapping and dense) in each bin to `counts`, a contiguous int64
// [exponent_bins::kBins] tensor on t's device.
AG_DECLARE_KERNEL(exponent_histogram, void(const Tensor& t, const Tensor& counts));

// ---- Matrix products ------------------------------------------------------------------------

// out[b] = alpha * a[b] @ bm[b] + beta * out[b]; a [B, M, K], bm [B, K, N] of out's dtype,
// any strides (a batch stride may be 0); out contiguous [B, M, N]. beta == 0 ignores out.
// The CUDA kernel also takes 2-D operands (a batch of one, ops/matmul.cpp's gemm2d) and 16-bit
// a and bm with a float32 out (Note [Wide weight gradients] in ops/linear.cpp).
AG_DECLARE_KERNEL(gemm, void(const Tensor& a, const Tensor& bm, const Tensor& out, double alpha, double beta));
// GEMM epilogues (CUDA only: ops check has(device) first). gemm_bias: out[0] = act(alpha *
// a[0] @ bm[0] + bias) (bias [N] added to every row; with an activation it may be undefined);
// with gelu_tanh, pre_act (out's shape and dtype, contiguous, or undefined) receives what the
// activation was applied to, for its backward. gemm_bias_grad: out[0] = a[0] @ bm[0] and, when
// bias_grad is defined, bias_grad[i] = sum over k of a[0][i, k] in one call. Both return false
// when they cannot (float64, batch > 1, unaligned operands, no such epilogue): nothing ran, use
// gemm.
enum class GemmActivation : uint8_t { none, relu, gelu_tanh };
AG_DECLARE_KERNEL(gemm_bias, bool(const Tensor& a, const Tensor& bm, const Tensor& bias, const Tensor& out, double alpha,
                                  GemmActivation act, const Tensor& pre_act));
AG_DECLARE_KERNEL(gemm_bias_grad, bool(const Tensor& a, const Tensor& bm, const Tensor& out, const Tensor& bias_grad));

// ---- Attention ---------------------------------------------------------------------------

// Fused attention (CUDA only, cuDNN's flash attention, Note [Fused attention] in
// cuda/attention.cpp; ops check has(device) first). q [B, H, L, E], k and v [B, H, S, E], o
// [B, H, L, E], all float16 or all bfloat16, any strides with a last stride of 1: o =
// softmax(q k^T * scale, masked to j <= i when causal) v, its weights dropped with probability
// dropout_p (> 0: rng is a contiguous int64 [4] tensor, the seed at [0] and the offset at [2]);
// stats (float32 contiguous [B, H, L, 1]) gets each row's logsumexp of the scaled scores, for
// the backward. With backward_strides (the strides of do, dq, dk and dv, 16 values) it first
// makes sure that the backward can run too, for tensors with those strides. The backward takes
// the forward's inputs, o, stats and rng, and do (o's shape), and writes dq, dk, dv (q, k, v's
// shapes). Both return false, with `why`, when cuDNN takes no such case (the strides, the
// shape, an engine missing): nothing ran.
// bias (undefined, or q's dtype, 4-D [B or 1, H or 1, L, S], last stride 1) is added to the
// scaled scores before the softmax: an attention mask as 0 and -inf.
AG_DECLARE_KERNEL(sdpa_fused_forward, bool(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                                           const Tensor& o, const Tensor& stats, double scale, bool causal,
                                           double dropout_p, const std::vector<int64_t>& backward_strides,
                                           const Tensor& rng, std::string& why));
AG_DECLARE_KERNEL(sdpa_fused_backward,
                  bool(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias, const Tensor& o,
                       const Tensor& dout, const Tensor& stats, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                       double scale, bool causal, double dropout_p, const Tensor& rng, std::string& why));

// Attention in one tile (Note [Attention in one tile] in cuda/attention_tile.cu): as
// sdpa_fused_forward and _backward without bias or dropout, for float16 and bfloat16, E 16,
// 32 or 64 and L and S in [1, 128], every tensor 4-D with a last stride of 1 and the others
// multiples of 8, 16-byte aligned. stats is the same logsumexp. Both return false, with
// `why`, for anything else: nothing ran.
AG_DECLARE_KERNEL(sdpa_tile_forward, bool(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                                          const Tensor& stats, double scale, bool causal, std::string& why));
AG_DECLARE_KERNEL(sdpa_tile_backward,
                  bool(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o, const Tensor& dout,
                       const Tensor& stats, const Tensor& dq, const Tensor& dk, const Tensor& dv, double scale,
                       bool causal, std::string& why));

// ---- Indexing and losses --------------------------------------------------------------------

// Every value of index (Int64, contiguous) in [low, high), else an ag::Error naming `op` (a
// literal): on the CPU at once; on CUDA recorded by the device and raised at the next host
// synchronization (Note [Device-side errors] in cuda/device_error.h).
AG_DECLARE_KERNEL(check_index, void(const Tensor& index, int64_t low, int64_t high, const char* op, const char* what));
// x contiguous [outer, d, inner], index Int64 contiguous [n] -> out contiguous [outer, n, inner].
AG_DECLARE_KERNEL(index_select, void(const Tensor& x, const Tensor& index, const Tensor& out));
// embedding's adjoint (its forward is index_select's gather), deterministic (Note [Embedding backward] in ops/embedding.cpp): out contiguous
// [num, dim], zeros, gets in row r the sum over positions j with index[j] == r, in the order of
// j, of grad's row j (contiguous [n, dim]), divided by their count when scale_grad_by_freq;
// the row padding_idx (when >= 0) and out-of-range indices are left alone.
AG_DECLARE_KERNEL(embedding_backward, void(const Tensor& grad, const Tensor& index, int64_t padding_idx,
                                           bool scale_grad_by_freq, const Tensor& out));
// out contiguous [outer, d, inner] += src contiguous [outer, n, inner] scattered by index [n].
AG_DECLARE_KERNEL(index_add, void(const Tensor& out, const Tensor& index, const Tensor& src));
// out contiguous [outer, d, inner]: the rows index[j] (Int64 [n]) along d set to src
// contiguous [outer, n, inner]; with repeated indices one of the rows wins (unspecified on CUDA).
AG_DECLARE_KERNEL(index_copy, void(const Tensor& out, const Tensor& index, const Tensor& src));
// gather along dim: out (contiguous, index's shape) at position p = x at p with coordinate
// dim replaced by index[p]; index contiguous Int64 of x's rank; x any strides.
AG_DECLARE_KERNEL(gather, void(const Tensor& x, const Tensor& index, const Tensor& out, int64_t dim));
// Its adjoint: out (any strides) at p with coordinate dim replaced by index[p] += src[p], for
// p over index's shape (src any strides, at least index's size in every dim). Atomic on CUDA:
// repeated targets add in an unspecified order, as PyTorch's scatter_add.
AG_DECLARE_KERNEL(scatter_add, void(const Tensor& out, const Tensor& index, const Tensor& src, int64_t dim));
// Mean negative log-likelihood of lp contiguous floating [N, C] at target Int64 [N], rows
// whose target is ignore_index skipped: loss (0-dim, lp's dtype) = -sum lp[i, t_i] / count,
// count (0-dim Float32) the rows counted (a counted target outside [0, C) adds 0).
AG_DECLARE_KERNEL(nll_loss_forward, void(const Tensor& lp, const Tensor& target, int64_t ignore_index,
                                         const Tensor& loss, const Tensor& count));
// grad_lp contiguous [N, C] = -grad / count at (i, t_i) of counted rows, 0 elsewhere; grad
// 0-dim of grad_lp's dtype, count as nll_loss_forward wrote it. Neither is read on the host.
AG_DECLARE_KERNEL(nll_loss_backward, void(const Tensor& grad, const Tensor& target, const Tensor& count,
                                          int64_t ignore_index, const Tensor& grad_lp));
// Mean cross-entropy of logits x contiguous floating [N, C] at target Int64 [N], in one pass:
// lse (contiguous [N], Float32, or Float64 for Float64 logits) = each row's logsumexp; loss
// (0-dim, x's dtype or Float32 for 16-bit x read as is) = sum over counted rows of
// lse - x[i, t_i] / count; count as nll_loss_forward. Rows whose target is ignore_index are
// skipped; a counted target outside [0, C) adds 0.
AG_DECLARE_KERNEL(cross_entropy_forward, void(const Tensor& x, const Tensor& target, int64_t ignore_index,
                                              const Tensor& lse, const Tensor& loss, const Tensor& count));
// grad_x (contiguous [N, C], x's dtype) = grad / count * (exp(x - lse) - onehot(t)) on counted
// rows with targets in range, 0 elsewhere; grad 0-dim of the loss's dtype.
AG_DECLARE_KERNEL(cross_entropy_backward, void(const Tensor& grad, const Tensor& x, const Tensor& target,
                                               const Tensor& lse, const Tensor& count, int64_t ignore_index,
                                               const Tensor& grad_x));

// Pointwise losses (core/loss_kinds.def): x and y contiguous of one shape and floating dtype,
// a and b the loss's scalars. pointwise_loss: out (contiguous, x's shape and dtype) = the loss
// of each element. pointwise_loss_sum: out (0-dim, x's dtype) = scale * the sum of the losses,
// summed in float (double for float64) in an order fixed by the shape, the device and its
// size, in one pass. pointwise_loss_backward: grad_x and grad_y (contiguous, x's shape, either
// undefined: not computed) = scale * the kind's gradients, g either of x's shape (contiguous)
// or 0-dim (the gradient of a reduced loss, the same for every element).
AG_DECLARE_KERNEL(pointwise_loss,
                  void(LossKind k, const Tensor& x, const Tensor& y, const Tensor& out, double a, double b));
AG_DECLARE_KERNEL(pointwise_loss_sum, void(LossKind k, const Tensor& x, const Tensor& y, const Tensor& out, double a,
                                           double b, double scale));
AG_DECLARE_KERNEL(pointwise_loss_backward, void(LossKind k, const Tensor& g, const Tensor& x, const Tensor& y,
                                                const Tensor& grad_x, const Tensor& grad_y, double a, double b,
                                                double scale));

// ---- Normalization --------------------------------------------------------------------------

// Batch norm over x viewed as [outer, C, inner] (contiguous NCHW: outer N, inner H*W;
// channels-last or 2-D: outer N*H*W, inner 1); per-channel tensors are contiguous [C] in the
// accumulation dtype (Float32, Float64 for Float64 x). stats: mean and invstd = 1/sqrt(var +
// eps) of each channel (biased var); running_mean/var, when defined, move by momentum towards
// mean and the unbiased var. apply: y (x's dtype and layout) = (x - mean) * invstd * weight +
// bias (weight, bias optional). backward: grad_bias = sum dy, grad_weight = sum dy * xhat (each
// when defined), grad_x (when defined) = (dy - [training] (mean dy + xhat mean(dy xhat))) *
// invstd * weight.
AG_DECLARE_KERNEL(batch_norm_stats, void(const Tensor& x, int64_t outer, int64_t inner, double eps, const Tensor& mean,
                                         const Tensor& invstd, const Tensor& running_mean, const Tensor& running_var,
                                         double momentum));
AG_DECLARE_KERNEL(batch_norm_apply, void(const Tensor& x, int64_t outer, int64_t inner, const Tensor& mean,
                                         const Tensor& invstd, const Tensor& weight, const Tensor& bias,
                                         const Tensor& y));
AG_DECLARE_KERNEL(batch_norm_backward,
                  void(const Tensor& dy, const Tensor& x, int64_t outer, int64_t inner, const Tensor& mean,
                       const Tensor& invstd, const Tensor& weight, bool training, const Tensor& grad_x,
                       const Tensor& grad_weight, const Tensor& grad_bias));

// Layer norm over x viewed as contiguous [rows, n] (Note [Fused layer norm] in ops/norm.cpp;
// CUDA only: ops check has(device) first), x Float32 or Float64, weight and bias contiguous
// [n] of x's dtype (each optional). forward: y (contiguous, x's dtype) = (x - mean) * rstd *
// weight + bias, mean and rstd = 1/sqrt(var + eps) (biased var) of each row into contiguous
// [rows] tensors of x's dtype; y_low, when defined (Float16 or BFloat16, contiguous, x
// Float32), gets y rounded to its dtype in the same pass (a ready cast: Note [Cast reuse] in
// amp/cast_reuse.h). With `residual` (add_layer_norm, Note [Add and layer norm]: contiguous
// [rows, n] of x's dtype, or Float16/BFloat16 for a Float32 x), the row normalized is x +
// residual (an add in x's dtype), also written to `sum` (contiguous, x's dtype); both
// undefined for layer_norm. backward: dy is the sum of dy (x's dtype) and dy_low (y_low's
// dtype), each optional, contiguous [rows, n], and x the row normalized (the sum, for
// add_layer_norm); grad_x = rstd * (dy w - mean(dy w) - xhat mean(dy w xhat)) (xhat = (x -
// mean) * rstd, means over the row), grad_weight = sum over rows of dy xhat and grad_bias =
// sum dy, each when defined; sums in a fixed order (deterministic). grad_x is added to, each
// an add rounded once, in this order: what grad_x holds with `accumulate` (the engine's
// running sum: Note [Backward context] in autograd/backward_context.h), then grad_sum when
// defined (the sum's own gradient, x's dtype, contiguous); grad_x_low, when defined (Float16 or
// BFloat16, x Float32), gets the final grad_x rounded to its dtype.
AG_DECLARE_KERNEL(layer_norm_forward, void(const Tensor& x, const Tensor& residual, const Tensor& weight,
                                           const Tensor& bias, double eps, const Tensor& sum, const Tensor& y,
                                           const Tensor& mean, const Tensor& rstd, const Tensor& y_low));
AG_DECLARE_KERNEL(layer_norm_backward, void(const Tensor& dy, const Tensor& dy_low, const Tensor& x,
                                            const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                                            const Tensor& grad_sum, const Tensor& grad_x, bool accumulate,
                                            const Tensor& grad_x_low, const Tensor& grad_weight,
                                            const Tensor& grad_bias));

// ---- Windows, convolution, dropout ----------------------------------------------------------

// x [N, C, H, W] (any strides) -> cols contiguous [N, C*kh*kw, oh*ow], row (c, i, j) holding
// x[n, c, oy*sh - ph + i*dh, ox*sw - pw + j*dw] or pad_value outside the image.
AG_DECLARE_KERNEL(im2col, void(const Tensor& x, const Tensor& cols, const Window2d& w, double pad_value));
// The adjoint: out contiguous [N, C, H, W] = sum of the cols entries that read each pixel.
// Deterministic: each output pixel gathers its own contributions.
AG_DECLARE_KERNEL(col2im, void(const Tensor& cols, const Tensor& out, const Window2d& w));
// A convolution (core/conv_params.h): x [N, C, H, W] or [N, C, D, H, W], weight
// [K, C/groups, kh, kw] or [K, C/groups, kd, kh, kw], out [N, K, ...]; 4-D tensors in NCHW or
// channels-last (NHWC) strides as given (out is allocated by the caller in x's memory format),
// 5-D any strides. bias [K] or undefined. CUDA: cuDNN (f32, TF32 only when allow_tf32();
// f16/bf16 on tensor cores with f32 accumulation; f64); CPU: im2col and gemm.
AG_DECLARE_KERNEL(conv_forward, void(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
                                     const ConvParams& p));
// grad_in (allocated by the caller, x's shape and format) from grad_out and weight. grad_in
// may be larger than the input whose convolution gives grad_out's size, by less than the
// stride (a transposed convolution's output_padding): its extra rows and columns get what the
// weights reach there.
AG_DECLARE_KERNEL(conv_backward_data, void(const Tensor& grad_out, const Tensor& weight, const Tensor& grad_in,
                                           const ConvParams& p));
// grad_weight (allocated by the caller, weight's shape) from x and grad_out.
AG_DECLARE_KERNEL(conv_backward_weight, void(const Tensor& x, const Tensor& grad_out, const Tensor& grad_weight,
                                             const ConvParams& p));
// out contiguous floating: out[i] = keep(seed, offset + i) ? scale : 0, with keep drawn
// with probability p_keep by the counter-based hash of core/kernel_kinds.h (same bits on
// every device).
AG_DECLARE_KERNEL(dropout_mask, void(const Tensor& out, double p_keep, double scale, uint64_t seed, uint64_t offset));
// out [N, C, oh, ow] (any strides) = the max of each window of x [N, C, H, W] (any strides;
// padding excluded; NaN wins, then the first of equal values), indices (Int32, out's strides)
// = its position y * W + x in the plane (Note [Max pooling] in ops/pool.cpp).
AG_DECLARE_KERNEL(max_pool2d_forward, void(const Tensor& x, const Window2d& w, const Tensor& out, const Tensor& indices));
// grad_x [N, C, H, W] (any strides) = the sum of the gradients g (indices' shape, any strides)
// of the outputs whose max it was; deterministic (each input gathers).
AG_DECLARE_KERNEL(max_pool2d_backward,
                  void(const Tensor& g, const Tensor& indices, const Window2d& w, const Tensor& grad_x));

// ---- Recurrent cells (Note [Fused recurrent cells] in ops/rnn_cells.cpp) ---------------------

// The gates' pointwise part of one step, B rows of H units: gi and gh [B, G * H] are the input
// and hidden GEMMs, b_ih and b_hh [G * H] their biases or undefined, all contiguous of one
// floating dtype T; every value is read as float (double for Float64) and rounded on store.
// hy [B, H] = tanh or relu(gi + b_ih + gh + b_hh) (G = 1), of dtype T.
AG_DECLARE_KERNEL(rnn_cell_forward, void(bool relu, const Tensor& gi, const Tensor& gh, const Tensor& b_ih,
                                         const Tensor& b_hh, const Tensor& hy));
// grad_pre [B, H] (T) = grad_hy * (1 - hy^2) (tanh) or grad_hy * (hy > 0) (relu).
AG_DECLARE_KERNEL(rnn_cell_backward, void(bool relu, const Tensor& grad_hy, const Tensor& hy, const Tensor& grad_pre));
// LSTM, gates i, f, g, o (G = 4): cx [B, H] of dtype T or float32 (the cell state kept in
// float32 under autocast); hy [B, H] (T), cy [B, H] (cx's dtype); ws [B, 4 H] (cx's dtype) the
// activated gates for backward, or undefined (not written).
AG_DECLARE_KERNEL(lstm_cell_forward, void(const Tensor& gi, const Tensor& gh, const Tensor& b_ih, const Tensor& b_hh,
                                          const Tensor& cx, const Tensor& hy, const Tensor& cy, const Tensor& ws));
// grad_gates [B, 4 H] (T) and grad_cx [B, H] (cx's dtype, or undefined: not computed) from
// grad_hy (T) and grad_cy (cx's dtype), either undefined for zero, and the forward's cx, cy, ws.
AG_DECLARE_KERNEL(lstm_cell_backward, void(const Tensor& grad_hy, const Tensor& grad_cy, const Tensor& cx,
                                           const Tensor& cy, const Tensor& ws, const Tensor& grad_gates,
                                           const Tensor& grad_cx));
// GRU, gates r, z, n (G = 3): hx [B, H] (T); hy [B, H] (T); ws [B, 4 H] (T) = r, z, n and the
// hidden n part gh_n + b_hn, or undefined.
AG_DECLARE_KERNEL(gru_cell_forward, void(const Tensor& gi, const Tensor& gh, const Tensor& b_ih, const Tensor& b_hh,
                                         const Tensor& hx, const Tensor& hy, const Tensor& ws));
// grad_gi and grad_gh [B, 3 H] and grad_hx [B, H] (hx's direct share, z * grad_hy), all T.
AG_DECLARE_KERNEL(gru_cell_backward, void(const Tensor& grad_hy, const Tensor& hx, const Tensor& ws,
                                          const Tensor& grad_gi, const Tensor& grad_gh, const Tensor& grad_hx));

}  // namespace ampgrad::kernel
