// cuDNN convolution (forward, backward data, backward filter) over 4-D and 5-D tensors: each
// tensor's layout (NCHW or NHWC; 5-D tensors always NCDHW) decides the call's format, non-packed operands go through packed copies, and the
// batch is split where cuDNN's 32-bit indexing ends. Plans come from cuda/cudnn_plan.cpp.
#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <numeric>
#include <string>

#include <ampgrad/core/config.h>
#include <ampgrad/cuda/check.h>
#include <ampgrad/cuda/cudnn_plan.h>
#include <ampgrad/core/kernels.h>
#include <ampgrad/cuda/runtime.h>

namespace ampgrad::cuda {

// Note [cuDNN convolution]
// Layout: cuDNN wants x, w and y in one memory format, each packed. A call takes NHWC when
// any of its tensors is channels-last (and not also NCHW-packed, as a [N, C, 1, 1] tensor is),
// NCHW otherwise (always for float64, which cuDNN runs in NCHW only), and NCHW again when
// cuDNN has no engine for the NHWC call. A tensor that is not packed in the call's format,
// or not 16-byte aligned, goes through a packed copy (outputs: packed scratch copied back).
// cuDNN's kernels index with 32 bits, so the batch is split into chunks whose x and y hold
// fewer than 2^31 elements (backward filter accumulates over chunks).
// Bias: added afterwards by the library's broadcast add (any dtype and layout, as PyTorch
// does). Math and engine choice: Note [cuDNN plans].

namespace {

using dnn::Pass;

std::atomic<bool> g_benchmark{false};

// ---- layout -------------------------------------------------------------------------------

// Strides of a packed [N, C, spatial...] tensor stored as NC... or (4-D) NHWC.
Shape packed_strides(const Shape& s, bool nhwc) {
  const int64_t n = static_cast<int64_t>(s.size());
  Shape st(s.size(), 0);
  int64_t e = 1;
  auto put = [&](int64_t d) {
    st[static_cast<size_t>(d)] = e;
    e *= s[static_cast<size_t>(d)];
  };
  if (nhwc) {
    put(1);
    for (int64_t d = n - 1; d >= 2; --d) put(d);
    put(0);
  } else {
    for (int64_t d = n - 1; d >= 0; --d) put(d);
  }
  return st;
}

bool is_packed(const Tensor& t, bool nhwc) {
  const Shape st = packed_strides(t.shape(), nhwc);
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.size(d) != 1 && t.stride(d) != st[static_cast<size_t>(d)]) return false;
  return true;
}

bool usable_as_is(const Tensor& t, bool nhwc) {
  return is_packed(t, nhwc) && reinterpret_cast<uintptr_t>(ampgrad::detail::address(t)) % 16 == 0;
}

bool wants_nhwc(std::initializer_list<const Tensor*> ts) {
  if ((*ts.begin())->dtype() == DType::Float64 || (*ts.begin())->dim() != 4) return false;
  return std::any_of(ts.begin(), ts.end(),
                     [](const Tensor* t) { return is_packed(*t, true) && !is_packed(*t, false); });
}

Tensor empty_packed(const Tensor& like, bool nhwc) {
  const Shape& s = like.shape();
  if (!nhwc) return empty(s, like.options());
  Tensor storage = empty({s[0], s[2], s[3], s[1]}, like.options());
  return make_tensor(storage.storage(), s, packed_strides(s, true), 0, like.dtype());  // fresh memory: not a view
}

Tensor packed_input(const Tensor& t, bool nhwc) {
  if (usable_as_is(t, nhwc)) return t;
  Tensor c = empty_packed(t, nhwc);
  kernel::copy(c.device(), c, t);
  return c;
}

// `t` itself, or scratch that the caller copies back into `t` after the call.
Tensor packed_output(const Tensor& t, bool nhwc) { return usable_as_is(t, nhwc) ? t : empty_packed(t, nhwc); }

Tensor batch_slice(const Tensor& t, int64_t start, int64_t count) {
  if (start == 0 && count == t.size(0)) return t;
  Shape s = t.shape();
  s[0] = count;
  return alias_with(t, s, t.strides(), t.storage_offset() + start * t.stride(0));
}

// Calls f(a_chunk, b_chunk, first) over batch chunks of at most 2^31 - 1 elements each.
template <class F> void for_each_batch_chunk(const Tensor& a, const Tensor& b, F&& f) {
  const int64_t n = a.size(0);
  const int64_t per_sample = std::max(a.numel(), b.numel()) / n;
  AG_CHECK(per_sample <= INT32_MAX,
           "convolution on cuda: one sample of {} or {} has more than 2^31 - 1 elements, beyond cuDNN's 32-bit indexing",
           a.desc(), b.desc());
  int64_t chunk = std::min<int64_t>(n, INT32_MAX / per_sample);
  if (chunk < n) {
    // Every chunk's start 16-byte aligned, as the plans declare: a multiple of the samples
    // whose bytes make 16.
    auto samples_for_16 = [](const Tensor& t) {
      return 16 / std::gcd<int64_t>(t.numel() / t.size(0) * static_cast<int64_t>(itemsize(t.dtype())), 16);
    };
    const int64_t m = std::lcm(samples_for_16(a), samples_for_16(b));
    AG_CHECK(chunk >= m, "convolution on cuda: samples of {} elements are too large to split the batch of {} into "
             "16-byte-aligned chunks under cuDNN's 32-bit indexing", per_sample, a.desc());
    chunk -= chunk % m;
  }
  for (int64_t start = 0; start < n; start += chunk) {
    const int64_t count = std::min(chunk, n - start);
    f(batch_slice(a, start, count), batch_slice(b, start, count), start == 0);
  }
}

// One pass in forward's naming (x, w, y; the pass says which one it writes) in one layout,
// over batch chunks; false when cuDNN has no algorithm for it.
bool run_in_layout(Pass pass, const Tensor& x, const Tensor& w, const Tensor& y, const ConvParams& p, bool nhwc,
                   std::string& why) {
  const bool writes_x = pass == Pass::BackwardData, writes_w = pass == Pass::BackwardFilter;
  const bool writes_y = pass == Pass::Forward;
  const Tensor xp = writes_x ? packed_output(x, nhwc) : packed_input(x, nhwc);
  const Tensor wp = writes_w ? packed_output(w, nhwc) : packed_input(w, nhwc);
  const Tensor yp = writes_y ? packed_output(y, nhwc) : packed_input(y, nhwc);
  bool ok = true;
  const bool benchmark = g_benchmark.load(std::memory_order_relaxed);
  for_each_batch_chunk(xp, yp, [&](const Tensor& xc, const Tensor& yc, bool first) {
    if (!ok) return;
    dnn::ConvGeometry g;
    g.pass = pass;
    g.device = xc.device().index;
    g.dtype = xc.dtype();
    g.tf32 = xc.dtype() == DType::Float32 && allow_tf32();
    g.nhwc = nhwc;
    g.accumulate = writes_w && !first;  // backward filter sums over the batch: later chunks add
    g.dims = xc.dim();
    for (size_t d = 0; d < static_cast<size_t>(g.dims); ++d) {
      g.x[d] = xc.size(static_cast<int64_t>(d));
      g.w[d] = wp.size(static_cast<int64_t>(d));
      g.y[d] = yc.size(static_cast<int64_t>(d));
    }
    const size_t sp = static_cast<size_t>(g.dims - 2);
    for (size_t i = 0; i < sp; ++i) {
      g.window[i] = p.stride[i];
      g.window[sp + i] = p.padding[i];
      g.window[2 * sp + i] = p.dilation[i];
    }
    ok = dnn::run_conv(g, ampgrad::detail::address(xc), ampgrad::detail::address(wp), ampgrad::detail::address(yc),
                       benchmark, why);
  });
  if (!ok) return false;
  const Tensor& out = writes_x ? x : (writes_w ? w : y);
  const Tensor& packed = writes_x ? xp : (writes_w ? wp : yp);
  if (!packed.is_same(out)) kernel::copy(out.device(), out, packed);
  return true;
}

void run_pass(Pass pass, const Tensor& x, const Tensor& w, const Tensor& y, const ConvParams& p) {
  std::string why = "no algorithm supports it";
  const bool nhwc = wants_nhwc({&x, &w, &y});
  if (run_in_layout(pass, x, w, y, p, nhwc, why)) return;
  // Not every NHWC case has a cuDNN kernel (float32 on FMA kernels may not); NCHW covers all.
  if (nhwc && run_in_layout(pass, x, w, y, p, false, why)) return;
  AG_CHECK(false, "convolution {} on cuda: no cuDNN engine could run ({})", dnn::pass_name(pass), why);
}

// Adds the call's shapes and parameters to any error it throws.
template <class F>
void with_context(const char* what, std::initializer_list<const Tensor*> ts, const ConvParams& p, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    std::string operands;
    for (const Tensor* t : ts) operands += fmt::format("{}{} strides {}", operands.empty() ? "" : ", ", t->desc(),
                                                       shape_str(t->strides()));
    const auto sp = static_cast<std::ptrdiff_t>(p.spatial);
    auto arr = [&](const std::array<int64_t, 3>& a) { return shape_str(Shape(a.begin(), a.begin() + sp)); };
    throw Error(fmt::format("{}\n  in convolution {} on cuda: {}; stride {}, padding {}, dilation {}, groups {}",
                            e.what(), what, operands, arr(p.stride), arr(p.padding), arr(p.dilation), p.groups));
  }
}

}  // namespace

void conv_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
                    const ConvParams& p) {
  if (out.numel() == 0) return;
  DeviceGuard guard(out.device().index);
  with_context("forward", {&x, &weight, &out}, p, [&] {
    if (x.numel() == 0 || weight.numel() == 0) {  // no input channels: an empty sum
      kernel::fill(out.device(), out, 0);
    } else {
      run_pass(Pass::Forward, x, weight, out, p);
    }
    if (bias.defined()) {  // out += bias[k], broadcast over n, y, x by zero strides
      Shape st(static_cast<size_t>(out.dim()), 0);
      st[1] = bias.stride(0);
      Tensor b = alias_with(bias, out.shape(), st, bias.storage_offset());
      kernel::binary(out.device(), BinaryKind::Add, out, b, out);
    }
  });
}

void conv_backward_data(const Tensor& grad_out, const Tensor& weight, const Tensor& grad_in,
                          const ConvParams& p) {
  if (grad_in.numel() == 0) return;
  DeviceGuard guard(grad_in.device().index);
  with_context("backward data", {&grad_out, &weight, &grad_in}, p, [&] {
    if (grad_out.numel() == 0 || weight.numel() == 0) {
      kernel::fill(grad_in.device(), grad_in, 0);
      return;
    }
    run_pass(Pass::BackwardData, grad_in, weight, grad_out, p);
  });
}

void conv_backward_weight(const Tensor& x, const Tensor& grad_out, const Tensor& grad_weight,
                            const ConvParams& p) {
  if (grad_weight.numel() == 0) return;
  DeviceGuard guard(grad_weight.device().index);
  with_context("backward filter", {&x, &grad_out, &grad_weight}, p, [&] {
    if (x.numel() == 0 || grad_out.numel() == 0) {
      kernel::fill(grad_weight.device(), grad_weight, 0);
      return;
    }
    run_pass(Pass::BackwardFilter, x, grad_weight, grad_out, p);
  });
}

void set_cudnn_benchmark(bool on) { g_benchmark.store(on, std::memory_order_relaxed); }
bool cudnn_benchmark() { return g_benchmark.load(std::memory_order_relaxed); }

AG_REGISTER_KERNEL(kernel::conv_forward, kCUDA, conv_forward);
AG_REGISTER_KERNEL(kernel::conv_backward_data, kCUDA, conv_backward_data);
AG_REGISTER_KERNEL(kernel::conv_backward_weight, kCUDA, conv_backward_weight);

}  // namespace ampgrad::cuda
