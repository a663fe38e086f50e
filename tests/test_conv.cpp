// The convolution family beside conv2d (conv1d, conv3d, conv_transpose1d/2d/3d; conv2d's
// own tests are in test_conv_cuda): the CPU kernels against a direct float64 loop, CUDA
// (cuDNN) against the same loop and the CPU's float64 gradients in float32, float16 and
// bfloat16 with non-contiguous and channels-last inputs, and the layers' shapes and
// PyTorch's initialization bounds. Gradients are also gradchecked by the op table's rows.
#include <array>
#include <cmath>

#include "common.h"

namespace {

const ag::Device kGpu(ag::kCUDA);
const ag::Device kCpu(ag::kCPU);
using Arr3 = std::array<int64_t, 3>;

struct Case {
  int64_t spatial;  // 1, 2 or 3
  bool transposed;
  ag::Shape x, w;
  bool bias;
  Arr3 stride{1, 1, 1}, padding{0, 0, 0}, dilation{1, 1, 1}, output_padding{0, 0, 0};
  int64_t groups = 1;
  std::string str() const {
    return fmt::format("{}conv{}d x {} w {} bias {} stride {} padding {} dilation {} output_padding {} groups {}",
                       transposed ? "transposed " : "", spatial, ag::shape_str(x), ag::shape_str(w), bias,
                       fmt::join(stride, ","), fmt::join(padding, ","), fmt::join(dilation, ","),
                       fmt::join(output_padding, ","), groups);
  }
  int64_t out_channels() const { return transposed ? w[1] * groups : w[0]; }
  // The products summed into one output element (the tolerance's term count).
  int64_t terms() const {
    int64_t k = 1;
    for (size_t d = 2; d < w.size(); ++d) k *= w[d];
    return (transposed ? w[0] / groups : w[1]) * k + 1;
  }
};

const std::vector<Case>& cases() {
  static const std::vector<Case> cs = {
      {1, false, {2, 3, 11}, {4, 3, 3}, true, {2, 1, 1}, {1, 0, 0}},
      {1, false, {3, 4, 9}, {6, 2, 3}, false, {1, 1, 1}, {2, 0, 0}, {2, 1, 1}, {0, 0, 0}, 2},
      {3, false, {2, 2, 5, 4, 6}, {3, 2, 3, 3, 2}, true, {1, 1, 1}, {1, 1, 1}},
      {3, false, {1, 4, 6, 7, 5}, {2, 2, 2, 3, 3}, false, {2, 1, 2}, {0, 1, 1}, {1, 2, 1}, {0, 0, 0}, 2},
      {1, true, {2, 3, 6}, {3, 2, 3}, true, {2, 1, 1}, {1, 0, 0}, {1, 1, 1}, {1, 0, 0}},
      {1, true, {2, 4, 7}, {4, 3, 2}, false, {1, 1, 1}, {0, 0, 0}, {2, 1, 1}, {0, 0, 0}, 2},
      {2, true, {2, 3, 5, 4}, {3, 4, 3, 3}, true, {2, 2, 1}, {1, 1, 0}, {1, 1, 1}, {1, 1, 0}},
      {2, true, {1, 4, 4, 5}, {4, 1, 2, 3}, false, {1, 2, 1}, {0, 1, 0}, {2, 1, 1}, {0, 1, 0}, 2},
      {2, true, {4, 64, 6, 6}, {64, 32, 3, 3}, true, {2, 2, 1}, {1, 1, 0}, {1, 1, 1}, {1, 1, 0}},  // tensor-core sized
      {3, true, {1, 2, 3, 3, 2}, {2, 3, 2, 3, 2}, true, {2, 2, 2}, {0, 1, 0}, {1, 1, 1}, {1, 0, 1}},
  };
  return cs;
}

ag::Tensor call(const Case& c, const ag::Tensor& x, const ag::Tensor& w, const ag::Tensor& b) {
  const Arr3 &s = c.stride, &p = c.padding, &d = c.dilation, &o = c.output_padding;
  if (!c.transposed) {
    if (c.spatial == 1) return ag::conv1d(x, w, b, s[0], p[0], d[0], c.groups);
    if (c.spatial == 2) return ag::conv2d(x, w, b, {s[0], s[1]}, {p[0], p[1]}, {d[0], d[1]}, c.groups);
    return ag::conv3d(x, w, b, s, p, d, c.groups);
  }
  if (c.spatial == 1) return ag::conv_transpose1d(x, w, b, s[0], p[0], o[0], c.groups, d[0]);
  if (c.spatial == 2)
    return ag::conv_transpose2d(x, w, b, {s[0], s[1]}, {p[0], p[1]}, {o[0], o[1]}, c.groups, {d[0], d[1]});
  return ag::conv_transpose3d(x, w, b, s, p, o, c.groups, d);
}

// Three spatial sizes of a shape's spatial dims (leading ones padded with 1).
Arr3 spatial3(const ag::Shape& s) {
  Arr3 r{1, 1, 1};
  const size_t sp = s.size() - 2;
  for (size_t i = 0; i < sp; ++i) r[3 - sp + i] = s[2 + i];
  return r;
}
Arr3 param3(const Arr3& a, int64_t spatial, int64_t fill) {
  Arr3 r{fill, fill, fill};
  for (int64_t i = 0; i < spatial; ++i) r[static_cast<size_t>(3 - spatial + i)] = a[static_cast<size_t>(i)];
  return r;
}

// The definition, one product at a time in float64. A convolution gathers
// out[n, k, o] = b[k] + sum x[n, c, o * s - p + j * d] w[k, c, j]; a transposed one scatters
// each x[n, c, i] w[c, k, j] to out[n, k, i * s - p + j * d].
std::vector<double> direct(const Case& c, const ag::Tensor& xt, const ag::Tensor& wt, const ag::Tensor& bt,
                           const ag::Shape& out_shape) {
  const std::vector<double> x = xt.to_vector<double>(), w = wt.to_vector<double>();
  const std::vector<double> b = bt.defined() ? bt.to_vector<double>() : std::vector<double>();
  const Arr3 xs = spatial3(c.x), ks = spatial3(c.w), os = spatial3(out_shape);
  const Arr3 s = param3(c.stride, c.spatial, 1), p = param3(c.padding, c.spatial, 0),
             d = param3(c.dilation, c.spatial, 1);
  const int64_t n_ = c.x[0], cin = c.x[1], cout = out_shape[1], g = c.groups;
  const int64_t xvol = xs[0] * xs[1] * xs[2], ovol = os[0] * os[1] * os[2], kvol = ks[0] * ks[1] * ks[2];
  std::vector<double> out(static_cast<size_t>(n_ * cout * ovol), 0.0);
  for (int64_t n = 0; n < n_; ++n)
    for (int64_t ci = 0; ci < cin; ++ci) {
      const int64_t gi = ci / (cin / g), cl = ci % (cin / g);
      for (int64_t kl = 0; kl < cout / g; ++kl) {
        const int64_t co = gi * (cout / g) + kl;
        for (int64_t j = 0; j < kvol; ++j) {
          const int64_t jz = j / (ks[1] * ks[2]), jy = j / ks[2] % ks[1], jx = j % ks[2];
          const double wv = c.transposed ? w[static_cast<size_t>((ci * (cout / g) + kl) * kvol + j)]
                                         : w[static_cast<size_t>((co * (cin / g) + cl) * kvol + j)];
          // Pairs (input position, output position) joined by kernel element j.
          const Arr3& in_sizes = c.transposed ? xs : os;  // the side that is iterated
          for (int64_t a = 0; a < in_sizes[0] * in_sizes[1] * in_sizes[2]; ++a) {
            const Arr3 q{a / (in_sizes[1] * in_sizes[2]), a / in_sizes[2] % in_sizes[1], a % in_sizes[2]};
            Arr3 r{};  // the other side's position
            bool inside = true;
            const Arr3 jj{jz, jy, jx};
            const Arr3& other = c.transposed ? os : xs;
            for (size_t e = 0; e < 3; ++e) {
              r[e] = q[e] * s[e] - p[e] + jj[e] * d[e];
              inside = inside && r[e] >= 0 && r[e] < other[e];
            }
            if (!inside) continue;
            const int64_t qi = (q[0] * in_sizes[1] + q[1]) * in_sizes[2] + q[2];
            const int64_t ri = (r[0] * other[1] + r[1]) * other[2] + r[2];
            const int64_t xi = c.transposed ? qi : ri, oi = c.transposed ? ri : qi;
            out[static_cast<size_t>((n * cout + co) * ovol + oi)] += x[static_cast<size_t>((n * cin + ci) * xvol + xi)] * wv;
          }
        }
      }
    }
  if (!b.empty())
    for (int64_t n = 0; n < n_; ++n)
      for (int64_t co = 0; co < cout; ++co)
        for (int64_t o = 0; o < ovol; ++o) out[static_cast<size_t>((n * cout + co) * ovol + o)] += b[static_cast<size_t>(co)];
  return out;
}

ag::Tensor sym(const ag::Shape& s) { return ag::rand(s, ag::TensorOptions(ag::kFloat64)) * 2.0 - 1.0; }

// Every other element of a wider last dim: strided, packed in no format.
ag::Tensor strided(const ag::Tensor& t) {
  ag::NoGradGuard no_grad;
  ag::Shape wide = t.shape();
  wide.back() *= 2;
  ag::Tensor v = ag::empty(wide, t.options()).slice(-1, 0, wide.back(), 2);
  v.copy_(t);
  return v;
}

struct Inputs {
  ag::Tensor x, w, b;
};
Inputs draw(const Case& c, ag::DType d) {
  return {sym(c.x).to(d), (sym(c.w) * 0.5).to(d), c.bias ? sym({c.out_channels()}).to(d) : ag::Tensor()};
}

}  // namespace

TEST_CASE("conv: the CPU kernels equal the definition in float64", "[conv]") {
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  ag::manual_seed(seed);
  for (const Case& c : cases()) {
    INFO(c.str());
    const Inputs in = draw(c, ag::kFloat64);
    const ag::Tensor out = call(c, in.x, in.w, in.b);
    check_close(out, direct(c, in.x, in.w, in.b, out.shape()), 1e-13 * static_cast<double>(c.terms()), 1e-13);
    // A strided input gives the same values.
    check_close(call(c, strided(in.x), in.w, in.b), out.to_vector<double>(), 0, 0);
  }
}

TEST_CASE("conv: unbatched inputs are a batch of one", "[conv]") {
  const Case& c = cases()[6];  // conv_transpose2d with bias
  const Inputs in = draw(c, ag::kFloat64);
  const ag::Tensor one = in.x.select(0, 1);
  const ag::Tensor got = call(c, one, in.w, in.b);
  CHECK(got.dim() == 3);
  check_close(got, call(c, in.x, in.w, in.b).select(0, 1).to_vector<double>(), 0, 0);
  ag::Tensor x1 = ag::rand({3, 7}, ag::TensorOptions(ag::kFloat64)).requires_grad_();
  ag::Tensor w1 = ag::rand({2, 3, 2}, ag::TensorOptions(ag::kFloat64)).requires_grad_();
  const auto r = ag::autograd::gradcheck([](const std::vector<ag::Tensor>& v) { return ag::conv1d(v[0], v[1]); }, {x1, w1});
  INFO(r.message);
  CHECK(r.ok);
}

TEST_CASE("conv: empty batches give empty outputs and zero weight gradients", "[conv][cuda]") {
  for (const ag::Device dev : {kCpu, kGpu}) {
    if (dev.is_cuda() && skip_without_cuda()) continue;
    INFO(dev.str());
    for (size_t i : {0, 2, 4, 6, 9}) {
      Case c = cases()[i];
      INFO(c.str());
      c.x[0] = 0;
      ag::Tensor x = ag::rand(c.x, ag::TensorOptions().device(dev)).requires_grad_();
      ag::Tensor w = ag::rand(c.w, ag::TensorOptions().device(dev)).requires_grad_();
      ag::Tensor b = c.bias ? ag::rand({c.out_channels()}, ag::TensorOptions().device(dev)).requires_grad_() : ag::Tensor();
      const ag::Tensor out = call(c, x, w, b);
      CHECK(out.numel() == 0);
      CHECK(out.size(0) == 0);
      ag::sum(out).backward();
      CHECK(x.grad().shape() == x.shape());
      check_close(w.grad(), std::vector<double>(static_cast<size_t>(w.numel()), 0.0), 0, 0);
    }
  }
}

TEST_CASE("conv: CUDA matches the definition and the CPU's gradients in float32, float16 and bfloat16", "[conv][cuda]") {
  if (skip_without_cuda()) return;
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  ag::manual_seed(seed);
  for (const Case& c : cases())
    for (ag::DType d : {ag::kFloat32, ag::kFloat16, ag::kBFloat16})
      for (int layout = 0; layout < 3; ++layout) {  // as drawn, strided input, channels-last (4-D only)
        if (layout == 2 && c.x.size() != 4) continue;
        INFO(c.str() << " in " << ag::dtype_name(d) << ", layout " << layout);
        const Inputs in = draw(c, d);  // rounded to d on the CPU: both sides read the same values
        // float64 on the CPU: the reference forward and gradients.
        ag::Tensor xr = in.x.to(ag::kFloat64).requires_grad_(), wr = in.w.to(ag::kFloat64).requires_grad_();
        ag::Tensor br = c.bias ? in.b.to(ag::kFloat64).requires_grad_() : ag::Tensor();
        const ag::Tensor ref = call(c, xr, wr, br);
        const ag::Tensor g = sym(ref.shape()).to(d);
        ref.backward(g.to(ag::kFloat64));
        ag::Tensor xg = in.x.to(kGpu);
        if (layout == 1) xg = strided(xg);
        if (layout == 2) xg = xg.to_channels_last();
        xg = xg.detach().requires_grad_();
        ag::Tensor wg = in.w.to(kGpu).detach().requires_grad_();
        ag::Tensor bg = c.bias ? in.b.to(kGpu).detach().requires_grad_() : ag::Tensor();
        const ag::Tensor out = call(c, xg, wg, bg);
        REQUIRE(out.dtype() == d);
        REQUIRE(out.shape() == ref.shape());
        if (layout == 2) CHECK(ag::is_channels_last(out));
        out.backward(g.to(kGpu));
        // float32: FMA accumulation in any order (cuDNN's algorithms); 16-bit: the output's rounding.
        const double t = static_cast<double>(c.terms()), e = eps_of(d);
        const double atol = d == ag::kFloat32 ? 8 * e * t : 2 * e * std::sqrt(t), rtol = 4 * e;
        check_close(out, direct(c, in.x, in.w, in.b, out.shape()), atol, rtol);
        // Gradients sum over more terms (the batch and positions for the weight).
        const double gatol = d == ag::kFloat32 ? 8 * e * t * 16 : 4 * e * std::sqrt(t * 16);
        check_close(xg.grad(), xr.grad().to_vector<double>(), gatol, rtol);
        check_close(wg.grad(), wr.grad().to_vector<double>(), gatol * 4, rtol);
        if (c.bias) check_close(bg.grad(), br.grad().to_vector<double>(), gatol * 4, rtol);
      }
}

TEST_CASE("conv: layers have PyTorch's shapes and initialization bounds", "[conv][nn]") {
  ag::manual_seed(3);
  auto within = [](const ag::Tensor& t, double bound) {
    const std::vector<double> v = t.to_vector<double>();
    double m = 0;
    for (double e : v) m = std::max(m, std::abs(e));
    // At most the bound, and not far below it (a uniform draw of this many values reaches 80%).
    return m <= bound && m >= 0.8 * bound;
  };
  ag::nn::Conv1d c1(3, 4, 5, {.stride = 2});
  CHECK(c1.weight.shape() == ag::Shape{4, 3, 5});
  CHECK(within(c1.weight, 1 / std::sqrt(15.0)));
  CHECK(within(c1.bias, 1 / std::sqrt(15.0)));
  CHECK(c1(ag::rand({2, 3, 21})).shape() == ag::Shape{2, 4, 9});
  ag::nn::Conv3d c3(2, 6, {3, 1, 2}, {.padding = {1, 0, 0}, .groups = 2, .bias = false});
  CHECK(c3.weight.shape() == ag::Shape{6, 1, 3, 1, 2});
  CHECK_FALSE(c3.bias.defined());
  CHECK(c3(ag::rand({1, 2, 4, 5, 6})).shape() == ag::Shape{1, 6, 4, 5, 5});
  ag::nn::ConvTranspose1d t1(4, 2, 3, {.stride = 2, .output_padding = 1});
  CHECK(t1.weight.shape() == ag::Shape{4, 2, 3});
  CHECK(within(t1.weight, 1 / std::sqrt(6.0)));  // fan_in = weight.size(1) * k, as PyTorch
  CHECK(t1(ag::rand({1, 4, 5})).shape() == ag::Shape{1, 2, 12});
  ag::nn::ConvTranspose2d t2(6, 4, 3, {.stride = {2, 2}, .padding = {1, 1}, .output_padding = {1, 1}, .groups = 2});
  CHECK(t2.weight.shape() == ag::Shape{6, 2, 3, 3});
  CHECK(within(t2.bias, 1 / std::sqrt(18.0)));
  CHECK(t2(ag::rand({2, 6, 7, 7})).shape() == ag::Shape{2, 4, 14, 14});
  ag::nn::ConvTranspose3d t3(2, 3, {2, 2, 2}, {.stride = {2, 2, 2}});
  CHECK(t3(ag::rand({1, 2, 3, 4, 5})).shape() == ag::Shape{1, 3, 6, 8, 10});
  // state_dict names as PyTorch's.
  const auto sd = t3.state_dict();
  CHECK(sd.count("weight") == 1);
  CHECK(sd.count("bias") == 1);
}
