// The CPU implementation of the convolution kernels (core/kernels.h: conv_forward,
// conv_backward_data, conv_backward_weight) for 2 and 3 spatial dims: an im2col of the
// input (a 2-D convolution is a 3-D one of depth 1) and one GEMM per group, the GEMMs and
// sums written with ops. Outputs are copied into the tensors the op allocated.
#include <array>
#include <vector>

#include <ampgrad/autograd/node.h>
#include <ampgrad/core/kernels.h>
#include <ampgrad/ops/cpu_values.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad::cpu {

namespace {

// One convolution's sizes as three spatial dims (depth 1, kernel 1 for a 2-D one).
struct Dims3 {
  std::array<int64_t, 3> in{1, 1, 1}, k{1, 1, 1}, out{1, 1, 1}, s{1, 1, 1}, p{0, 0, 0}, d{1, 1, 1};
  int64_t kvol() const { return k[0] * k[1] * k[2]; }
  int64_t ovol() const { return out[0] * out[1] * out[2]; }
};

// x_shape [N, C, spatial...], w_shape [K, C/g, kernel...]; out sizes from x's (a larger
// grad_in of a transposed convolution gives grad_out's sizes by the floor of the division).
Dims3 dims3(const Shape& x_shape, const Shape& w_shape, const ConvParams& p) {
  Dims3 g;
  const size_t sp = x_shape.size() - 2, first = 3 - sp;
  for (size_t i = 0; i < sp; ++i) {
    const size_t j = first + i;
    g.in[j] = x_shape[2 + i];
    g.k[j] = w_shape[2 + i];
    g.s[j] = p.stride[i];
    g.p[j] = p.padding[i];
    g.d[j] = p.dilation[i];
    g.out[j] = p.out_size(i, g.in[j], g.k[j]);
  }
  return g;
}

// cols [N, C * kvol, ovol]: row (c, kz, ky, kx) holds x at each output position's window
// element, zero outside the input. x any strides.
Tensor im2col_nd(const Tensor& x, const Dims3& g) {
  const int64_t n_ = x.size(0), c_ = x.size(1), L = g.ovol();
  Tensor cols = empty({n_, c_ * g.kvol(), L}, x.options());
  visit_floating(x, "conv im2col", [&](auto tag) {
    using T = decltype(tag);
    const bool five = x.dim() == 5;
    const int64_t sn = x.stride(0), sc = x.stride(1), sz = five ? x.stride(2) : 0;
    const int64_t sy = x.stride(x.dim() - 2), sx = x.stride(x.dim() - 1);
    const T* px = static_cast<const T*>(x.data_ptr());
    T* pc = static_cast<T*>(cols.data_ptr());
    const T zero = static_cast<T>(0.0f);
    for (int64_t n = 0; n < n_; ++n)
      for (int64_t c = 0; c < c_; ++c)
        for (int64_t kz = 0; kz < g.k[0]; ++kz)
          for (int64_t ky = 0; ky < g.k[1]; ++ky)
            for (int64_t kx = 0; kx < g.k[2]; ++kx) {
              T* row = pc + ((n * c_ + c) * g.kvol() + (kz * g.k[1] + ky) * g.k[2] + kx) * L;
              for (int64_t oz = 0; oz < g.out[0]; ++oz) {
                const int64_t z = oz * g.s[0] - g.p[0] + kz * g.d[0];
                for (int64_t oy = 0; oy < g.out[1]; ++oy) {
                  const int64_t y = oy * g.s[1] - g.p[1] + ky * g.d[1];
                  for (int64_t ox = 0; ox < g.out[2]; ++ox) {
                    const int64_t xx = ox * g.s[2] - g.p[2] + kx * g.d[2];
                    const bool in = z >= 0 && z < g.in[0] && y >= 0 && y < g.in[1] && xx >= 0 && xx < g.in[2];
                    *row++ = in ? px[n * sn + c * sc + z * sz + y * sy + xx * sx] : zero;
                  }
                }
              }
            }
  });
  return cols;
}

// The adjoint of im2col_nd: out (x_shape, contiguous) = the sum of the cols entries that
// read each input element, accumulated in order in the dtype's accumulation type.
Tensor col2im_nd(const Tensor& cols, const Shape& x_shape, const Dims3& g) {
  Tensor out = empty(x_shape, cols.options());
  const Tensor cc = cols.contiguous();
  visit_floating(out, "conv col2im", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const int64_t n_ = x_shape[0], c_ = x_shape[1], L = g.ovol();
    const int64_t vol = g.in[0] * g.in[1] * g.in[2];
    std::vector<A> acc(static_cast<size_t>(n_ * c_ * vol), A(0));
    const T* pc = static_cast<const T*>(cc.data_ptr());
    for (int64_t nc = 0; nc < n_ * c_; ++nc)
      for (int64_t kz = 0; kz < g.k[0]; ++kz)
        for (int64_t ky = 0; ky < g.k[1]; ++ky)
          for (int64_t kx = 0; kx < g.k[2]; ++kx) {
            const T* row = pc + (nc * g.kvol() + (kz * g.k[1] + ky) * g.k[2] + kx) * L;
            A* plane = acc.data() + nc * vol;
            for (int64_t oz = 0; oz < g.out[0]; ++oz) {
              const int64_t z = oz * g.s[0] - g.p[0] + kz * g.d[0];
              for (int64_t oy = 0; oy < g.out[1]; ++oy) {
                const int64_t y = oy * g.s[1] - g.p[1] + ky * g.d[1];
                for (int64_t ox = 0; ox < g.out[2]; ++ox, ++row) {
                  const int64_t xx = ox * g.s[2] - g.p[2] + kx * g.d[2];
                  if (z >= 0 && z < g.in[0] && y >= 0 && y < g.in[1] && xx >= 0 && xx < g.in[2])
                    plane[(z * g.in[1] + y) * g.in[2] + xx] += static_cast<A>(*row);
                }
              }
            }
          }
    T* po = static_cast<T*>(out.data_ptr());
    for (size_t i = 0; i < acc.size(); ++i) po[i] = static_cast<T>(acc[i]);
  });
  return out;
}

// The group slice gi of dim `dim` (of size groups * per), or t itself for one group.
Tensor group(const Tensor& t, int64_t dim, int64_t gi, int64_t groups) {
  if (groups == 1) return t;
  const int64_t per = t.size(dim) / groups;
  return t.narrow(dim, gi * per, per);
}

Tensor join(std::vector<Tensor>& parts, int64_t dim) { return parts.size() == 1 ? parts[0] : cat(parts, dim); }

// out[n] = weight_g @ cols[n] per group; weight [K, C/g, kernel...].
void conv_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out, const ConvParams& p) {
  if (out.numel() == 0) return;
  NoGradGuard no_grad;
  const Dims3 g = dims3(x.shape(), weight.shape(), p);
  const int64_t k = weight.size(0), groups = p.groups;
  const Tensor cols = im2col_nd(x, g);
  const Tensor w2 = weight.reshape({k, -1});
  std::vector<Tensor> outs;
  for (int64_t gi = 0; gi < groups; ++gi)
    outs.push_back(matmul(group(w2, 0, gi, groups), group(cols, 1, gi, groups)));  // [N, K/g, L]
  Tensor r = join(outs, 1).reshape(out.shape());
  if (bias.defined()) {
    Shape bshape(static_cast<size_t>(out.dim()), 1);
    bshape[1] = k;
    r = r + bias.reshape(bshape);
  }
  kernel::copy(out.device(), out, r);
}

void conv_backward_data(const Tensor& grad, const Tensor& weight, const Tensor& grad_in, const ConvParams& p) {
  if (grad_in.numel() == 0) return;
  if (grad.numel() == 0 || weight.numel() == 0) return kernel::fill(grad_in.device(), grad_in, 0);
  NoGradGuard no_grad;
  const Dims3 g = dims3(grad_in.shape(), weight.shape(), p);
  const int64_t n = grad.size(0), k = weight.size(0), groups = p.groups;
  const Tensor gr = grad.reshape({n, k, -1});  // [N, K, L]
  const Tensor w2 = weight.reshape({k, -1});
  std::vector<Tensor> gcols;
  for (int64_t gi = 0; gi < groups; ++gi)
    gcols.push_back(matmul(group(w2, 0, gi, groups).t(), group(gr, 1, gi, groups)));  // [N, C/g * kvol, L]
  kernel::copy(grad_in.device(), grad_in, col2im_nd(join(gcols, 1), grad_in.shape(), g));
}

void conv_backward_weight(const Tensor& x, const Tensor& grad, const Tensor& grad_weight, const ConvParams& p) {
  if (grad_weight.numel() == 0) return;
  if (x.numel() == 0 || grad.numel() == 0) return kernel::fill(grad_weight.device(), grad_weight, 0);  // an empty sum
  NoGradGuard no_grad;
  const Dims3 g = dims3(x.shape(), grad_weight.shape(), p);
  const int64_t n = x.size(0), k = grad_weight.size(0), groups = p.groups;
  const Tensor gr = grad.reshape({n, k, -1});  // [N, K, L]
  const Tensor cols = im2col_nd(x, g);
  std::vector<Tensor> gws;
  for (int64_t gi = 0; gi < groups; ++gi)
    gws.push_back(sum(matmul(group(gr, 1, gi, groups), group(cols, 1, gi, groups).transpose(1, 2)), {0}));
  kernel::copy(grad_weight.device(), grad_weight, join(gws, 0).reshape(grad_weight.shape()));
}

}  // namespace

AG_REGISTER_KERNEL(kernel::conv_forward, kCPU, conv_forward);
AG_REGISTER_KERNEL(kernel::conv_backward_data, kCPU, conv_backward_data);
AG_REGISTER_KERNEL(kernel::conv_backward_weight, kCPU, conv_backward_weight);

}  // namespace ampgrad::cpu
