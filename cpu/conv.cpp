// Fast CPU convolutions: oneDNN's forward, backward-data and backward-weights primitives
// (Note [oneDNN]), float32 and bfloat16, any strides, groups and dilation, 2 and 3 spatial
// dims; float16 widened to float32 (Note [Float16 on the CPU] in cpu/widen.h). Float64, empty
// problems, geometry oneDNN cannot state (a grad_in larger than its grad_out reaches by more
// than the right padding), a backward-data pass with rows no weight reaches (negative right
// padding) and anything oneDNN refuses run the reference (ops/cpu_conv_nd.cpp).
#include <vector>

#include <ampgrad/core/dispatch.h>
#include <ampgrad/core/kernels.h>
#include <ampgrad/cpu/onednn.h>
#include <ampgrad/cpu/widen.h>

namespace ampgrad::cpu {

#if AMPGRAD_WITH_ONEDNN
namespace {

using onednn::ArgSpec;

std::vector<int64_t> sizes(const Tensor& t) { return {t.shape().begin(), t.shape().end()}; }
std::vector<int64_t> strides(const Tensor& t) {
  std::vector<int64_t> s;
  for (int64_t i = 0; i < t.dim(); ++i) s.push_back(t.stride(i));
  return s;
}

bool fast_dtype(DType d) { return d == kFloat32 || d == kBFloat16; }
// Empty problems (a batch of 0, no channels) keep the reference's early outs and zero fills.
bool fast_dtypes(const Tensor& a, const Tensor& b, const Tensor& c) {
  return fast_dtype(a.dtype()) && b.dtype() == a.dtype() && c.dtype() == a.dtype() && a.numel() > 0 &&
         b.numel() > 0 && c.numel() > 0;
}

// One convolution's descriptors: the tensors' own (plain, their strides) and "any" ones for
// the primitive to choose layouts; the weight grouped as [g, K/g, C/g, k...] when groups > 1.
struct Problem {
  int sp;  // spatial dims
  dnnl_dims_t stride, dilate, pad_l, pad_r;
  dnnl_memory_desc_t x, w, y, x_any, w_any, y_any, bias;
  bool has_bias = false;
  std::string key;
};

// The weight's dims and strides as oneDNN takes them.
void weight_dims(const Tensor& w, int64_t groups, std::vector<int64_t>& dims, std::vector<int64_t>& st) {
  dims = sizes(w);
  st = strides(w);
  if (groups == 1) return;
  dims[0] /= groups;
  dims.insert(dims.begin(), groups);
  st.insert(st.begin(), st[0] * dims[1]);
}

// False when the geometry is not one oneDNN states (grad_in larger than the input that
// gives y's sizes); the caller then runs the reference.
bool problem(const char* op, const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& bias,
             const ConvParams& p, Problem& pr, bool crop = true) {
  pr.sp = static_cast<int>(x.dim()) - 2;
  for (int i = 0; i < pr.sp; ++i) {
    const int64_t in = x.size(2 + i), k = w.size(2 + i), out = y.size(2 + i);
    if (p.out_size(i, in, k) != out) return false;
    pr.stride[i] = p.stride[i];
    pr.dilate[i] = p.dilation[i] - 1;
    pr.pad_l[i] = p.padding[i];
    // oneDNN states the right padding: out = (in + pl + pr - ((k - 1) * d + 1)) / s + 1. It is
    // negative when the last rows of the input are never read (a 1x1 stride-2 convolution of
    // an even size); oneDNN takes that as cropping. Not for the backward data pass, whose
    // cropped rows must come out zero (the reference's): crop false.
    pr.pad_r[i] = (out - 1) * p.stride[i] + (k - 1) * p.dilation[i] + 1 - in - p.padding[i];
    if (pr.pad_r[i] < 0 && !crop) return false;
  }
  std::vector<int64_t> wd, ws;
  weight_dims(w, p.groups, wd, ws);
  pr.x = onednn::plain_md(sizes(x), strides(x), x.dtype());
  pr.w = onednn::plain_md(wd, ws, w.dtype());
  pr.y = onednn::plain_md(sizes(y), strides(y), y.dtype());
  pr.x_any = onednn::any_md(sizes(x), x.dtype());
  pr.w_any = onednn::any_md(wd, w.dtype());
  pr.y_any = onednn::any_md(sizes(y), y.dtype());
  pr.has_bias = bias.defined();
  if (pr.has_bias) pr.bias = onednn::plain_md({bias.size(0)}, {bias.stride(0)}, bias.dtype());
  pr.key = op;
  onednn::key_add(pr.key, x);
  onednn::key_add(pr.key, w);
  onednn::key_add(pr.key, y);
  onednn::key_add(pr.key, bias);
  onednn::key_add(pr.key, {p.groups, p.stride[0], p.stride[1], p.stride[2], p.padding[0], p.padding[1], p.padding[2],
                           p.dilation[0], p.dilation[1], p.dilation[2]});
  return true;
}

dnnl_convolution_desc_t forward_desc(const Problem& pr) {
  dnnl_convolution_desc_t d;
  const dnnl_status_t s = onednn::api().dnnl_dilated_convolution_forward_desc_init(
      &d, dnnl_forward_training, dnnl_convolution_direct, &pr.x_any, &pr.w_any, pr.has_bias ? &pr.bias : nullptr,
      &pr.y_any, pr.stride, pr.dilate, pr.pad_l, pr.pad_r);
  if (s != dnnl_success) d.primitive_kind = dnnl_undefined_primitive;
  return d;
}

// The forward primitive descriptor a backward one is built against.
const_dnnl_primitive_desc_t hint(const Problem& pr) {
  dnnl_convolution_desc_t fd = forward_desc(pr);
  if (fd.primitive_kind == dnnl_undefined_primitive) return nullptr;
  return onednn::hint_pd("hint" + pr.key, &fd);
}

bool all_half(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (t->defined() && (t->dtype() != kFloat16 || t->numel() == 0)) return false;
  return onednn::available();
}

void conv_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& out, const ConvParams& p);
void conv_backward_data(const Tensor& gy, const Tensor& w, const Tensor& gx, const ConvParams& p);
void conv_backward_weight(const Tensor& x, const Tensor& gy, const Tensor& gw, const ConvParams& p);

// Float16: the float32 convolution on widened copies, rounded into the output once.
template <class F> void via_float32(const Tensor& out, F&& run) {
  Tensor wide = float32_like(out);
  run(wide);
  kernel::copy(Device(kCPU), out, wide);
}

void conv_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& out, const ConvParams& p) {
  if (all_half({&x, &w, &bias, &out}))
    return via_float32(out, [&](const Tensor& o) { conv_forward(widened(x), widened(w), widened(bias), o, p); });
  Problem pr;
  if (!onednn::available() || !fast_dtypes(x, w, out) || !problem("fwd", x, w, out, bias, p, pr))
    return kernel::conv_forward.reference(x, w, bias, out, p);
  bool found = false;
  const onednn::Primitive* prim = onednn::find(pr.key, &found);
  if (!found) {
    dnnl_convolution_desc_t d = forward_desc(pr);
    std::vector<ArgSpec> args = {{DNNL_ARG_SRC, pr.x, false, dnnl_query_src_md},
                                 {DNNL_ARG_WEIGHTS, pr.w, false, dnnl_query_weights_md},
                                 {DNNL_ARG_DST, pr.y, true, dnnl_query_dst_md}};
    if (pr.has_bias) args.push_back({DNNL_ARG_BIAS, pr.bias, false, dnnl_query_weights_md, 1});
    onednn::Attr attr;
    prim = d.primitive_kind == dnnl_undefined_primitive ? onednn::refuse(pr.key)
                                                         : onednn::build(pr.key, &d, nullptr, attr.attr, args);
  }
  if (!prim) return kernel::conv_forward.reference(x, w, bias, out, p);
  std::vector<void*> ptrs = {x.data_ptr(), w.data_ptr(), out.data_ptr()};
  if (pr.has_bias) ptrs.push_back(bias.data_ptr());
  prim->run(ptrs, "conv forward");
}

void conv_backward_data(const Tensor& gy, const Tensor& w, const Tensor& gx, const ConvParams& p) {
  if (all_half({&gy, &w, &gx}))
    return via_float32(gx, [&](const Tensor& o) { conv_backward_data(widened(gy), widened(w), o, p); });
  Problem pr;
  if (!onednn::available() || !fast_dtypes(gy, w, gx) || !problem("bwd_data", gx, w, gy, Tensor(), p, pr, /*crop=*/false))
    return kernel::conv_backward_data.reference(gy, w, gx, p);
  bool found = false;
  const onednn::Primitive* prim = onednn::find(pr.key, &found);
  if (!found) {
    dnnl_convolution_desc_t d;
    const_dnnl_primitive_desc_t h = hint(pr);
    const bool ok = h && onednn::api().dnnl_dilated_convolution_backward_data_desc_init(
                             &d, dnnl_convolution_direct, &pr.x_any, &pr.w_any, &pr.y_any, pr.stride, pr.dilate,
                             pr.pad_l, pr.pad_r) == dnnl_success;
    std::vector<ArgSpec> args = {{DNNL_ARG_DIFF_DST, pr.y, false, dnnl_query_diff_dst_md},
                                 {DNNL_ARG_WEIGHTS, pr.w, false, dnnl_query_weights_md},
                                 {DNNL_ARG_DIFF_SRC, pr.x, true, dnnl_query_diff_src_md}};
    onednn::Attr attr;
    prim = ok ? onednn::build(pr.key, &d, h, attr.attr, args) : onednn::refuse(pr.key);
  }
  if (!prim) return kernel::conv_backward_data.reference(gy, w, gx, p);
  prim->run({gy.data_ptr(), w.data_ptr(), gx.data_ptr()}, "conv backward (input)");
}

void conv_backward_weight(const Tensor& x, const Tensor& gy, const Tensor& gw, const ConvParams& p) {
  if (all_half({&x, &gy, &gw}))
    return via_float32(gw, [&](const Tensor& o) { conv_backward_weight(widened(x), widened(gy), o, p); });
  Problem pr;
  if (!onednn::available() || !fast_dtypes(x, gy, gw) || !problem("bwd_weight", x, gw, gy, Tensor(), p, pr))
    return kernel::conv_backward_weight.reference(x, gy, gw, p);
  bool found = false;
  const onednn::Primitive* prim = onednn::find(pr.key, &found);
  if (!found) {
    dnnl_convolution_desc_t d;
    const_dnnl_primitive_desc_t h = hint(pr);
    const bool ok = h && onednn::api().dnnl_dilated_convolution_backward_weights_desc_init(
                             &d, dnnl_convolution_direct, &pr.x_any, &pr.w_any, nullptr, &pr.y_any, pr.stride,
                             pr.dilate, pr.pad_l, pr.pad_r) == dnnl_success;
    std::vector<ArgSpec> args = {{DNNL_ARG_SRC, pr.x, false, dnnl_query_src_md},
                                 {DNNL_ARG_DIFF_DST, pr.y, false, dnnl_query_diff_dst_md},
                                 {DNNL_ARG_DIFF_WEIGHTS, pr.w, true, dnnl_query_diff_weights_md}};
    onednn::Attr attr;
    prim = ok ? onednn::build(pr.key, &d, h, attr.attr, args) : onednn::refuse(pr.key);
  }
  if (!prim) return kernel::conv_backward_weight.reference(x, gy, gw, p);
  prim->run({x.data_ptr(), gy.data_ptr(), gw.data_ptr()}, "conv backward (weight)");
}

}  // namespace

AG_REGISTER_FAST_KERNEL(kernel::conv_forward, conv_forward);
AG_REGISTER_FAST_KERNEL(kernel::conv_backward_data, conv_backward_data);
AG_REGISTER_FAST_KERNEL(kernel::conv_backward_weight, conv_backward_weight);
#endif

}  // namespace ampgrad::cpu
