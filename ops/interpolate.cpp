// interpolate, as torch.nn.functional.interpolate: nearest, nearest-exact, linear, bilinear,
// bicubic and trilinear resampling, one spatial dim at a time (Note [Interpolation]); area
// resampling is adaptive_avg_pool2d, as PyTorch's.
#include <algorithm>
#include <array>
#include <cmath>

#include <fmt/format.h>

#include <ampgrad/ops/internal.h>
#include <ampgrad/ops/nn_ops.h>
#include <ampgrad/ops/op_scope.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad {

using amp::Category;

// Note [Interpolation]
// Along one spatial dim, each output position reads a few input positions with weights that
// depend only on the coordinates: nearest reads one (weight 1), linear two, cubic four. So
// resampling [N, C, d1, ..., dk] is k resamplings of one dim each: per tap, an index_select of
// the positions read, times the tap's weights, summed over the taps (bilinear is linear along
// W, then along H). The positions and weights are PyTorch's (aten/src/ATen/native/UpSample.h),
// computed in float32 (float64 for a float64 input) as its kernels compute them, so the same
// pixels are read with the same weights. A 16-bit input is resampled in float32 and rounded
// once at the end, as PyTorch's kernels accumulate in float32. Autograd differentiates the
// index_selects: their backward adds each output gradient into the positions it read.
// This is the reference: a few passes over the data per dim. One kernel per mode would be a
// speed-up behind it, and would have to give these values.

namespace {

const OpInfo kInterpolate{"interpolate", Category::fp32, true,
                          "resampling: PyTorch's upsample ops (nearest, linear, cubic) are on its fp32 list"};

const char* mode_name(InterpolateMode m) {
  switch (m) {
    case InterpolateMode::nearest: return "nearest";
    case InterpolateMode::nearest_exact: return "nearest-exact";
    case InterpolateMode::linear: return "linear";
    case InterpolateMode::bilinear: return "bilinear";
    case InterpolateMode::bicubic: return "bicubic";
    case InterpolateMode::trilinear: return "trilinear";
    case InterpolateMode::area: return "area";
  }
  return "?";
}

// One tap of a dim's resampling: for each output position, the input position it reads and
// its weight.
struct Tap {
  std::vector<int64_t> index;
  std::vector<double> weight;
};

// PyTorch's compute_scales_value and area_pixel_compute_scale: input positions per output
// position. A scale_factor the caller gave is used as given (1 / scale), else in / out.
template <class A> A compute_scale(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  if (align_corners) return out > 1 ? static_cast<A>(in - 1) / static_cast<A>(out - 1) : A(0);
  return scale && *scale > 0 ? static_cast<A>(1.0 / *scale) : static_cast<A>(in) / static_cast<A>(out);
}

// PyTorch's area_pixel_compute_source_index: where output position o falls in the input.
// Without align_corners, pixel centres are matched ((o + 0.5) * scale - 0.5), clamped at 0
// except for cubic.
template <class A> A source_index(A scale, int64_t o, bool align_corners, bool cubic) {
  if (align_corners) return scale * static_cast<A>(o);
  const A src = scale * (static_cast<A>(o) + A(0.5)) - A(0.5);
  return !cubic && src < A(0) ? A(0) : src;
}

// The cubic convolution kernel of Keys, a = -0.75 (PyTorch's get_cubic_upsample_coefficients).
template <class A> std::array<A, 4> cubic_weights(A t) {
  const A a = A(-0.75);
  auto near = [a](A x) { return ((a + 2) * x - (a + 3)) * x * x + 1; };        // |x| <= 1
  auto far = [a](A x) { return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a; };  // 1 < |x| < 2
  return {far(t + 1), near(t), near(1 - t), far(2 - t)};
}

template <class A>
std::vector<Tap> taps_of(InterpolateMode mode, int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  const size_t n = static_cast<size_t>(out);
  if (mode == InterpolateMode::nearest || mode == InterpolateMode::nearest_exact) {
    // PyTorch's nearest_idx and nearest_exact_idx, in float whatever the dtype.
    Tap t{std::vector<int64_t>(n), std::vector<double>(n, 1.0)};
    const float s = compute_scale<float>(in, out, false, scale);
    for (int64_t o = 0; o < out; ++o) {
      int64_t i;
      if (mode == InterpolateMode::nearest_exact)
        i = static_cast<int64_t>(std::floor(static_cast<float>((static_cast<double>(o) + 0.5) * s)));
      else if (out == in)
        i = o;
      else if (out == 2 * in)
        i = o >> 1;
      else
        i = static_cast<int64_t>(std::floor(static_cast<float>(o) * s));
      t.index[static_cast<size_t>(o)] = std::min(i, in - 1);
    }
    return {t};
  }
  const A s = compute_scale<A>(in, out, align_corners, scale);
  if (mode == InterpolateMode::bicubic) {
    std::vector<Tap> taps(4, Tap{std::vector<int64_t>(n), std::vector<double>(n)});
    for (int64_t o = 0; o < out; ++o) {
      const A real = source_index<A>(s, o, align_corners, /*cubic=*/true);
      const int64_t i = std::min(static_cast<int64_t>(std::floor(real)), in - 1);
      const A t = std::min(std::max(real - static_cast<A>(i), A(0)), A(1));
      const std::array<A, 4> w = cubic_weights<A>(t);
      for (size_t k = 0; k < 4; ++k) {  // positions i - 1 .. i + 2, clamped to the input
        taps[k].index[static_cast<size_t>(o)] = std::clamp<int64_t>(i - 1 + static_cast<int64_t>(k), 0, in - 1);
        taps[k].weight[static_cast<size_t>(o)] = static_cast<double>(w[k]);
      }
    }
    return taps;
  }
  // linear, bilinear, trilinear: PyTorch's compute_source_index_and_lambda.
  std::vector<Tap> taps(2, Tap{std::vector<int64_t>(n), std::vector<double>(n)});
  for (int64_t o = 0; o < out; ++o) {
    int64_t i0 = o, i1 = o;
    A l1 = 0;
    if (out != in) {
      const A real = source_index<A>(s, o, align_corners, /*cubic=*/false);
      i0 = std::min(static_cast<int64_t>(std::floor(real)), in - 1);
      l1 = std::min(std::max(real - static_cast<A>(i0), A(0)), A(1));
      i1 = i0 + (i0 < in - 1 ? 1 : 0);
    }
    const size_t p = static_cast<size_t>(o);
    taps[0].index[p] = i0, taps[0].weight[p] = static_cast<double>(A(1) - l1);
    taps[1].index[p] = i1, taps[1].weight[p] = static_cast<double>(l1);
  }
  return taps;
}

// x resampled along `dim` to the taps' length: the sum over taps of the positions read times
// their weights.
Tensor resample_dim(const Tensor& x, int64_t dim, const std::vector<Tap>& taps) {
  const int64_t out = static_cast<int64_t>(taps[0].index.size());
  Shape wshape(static_cast<size_t>(x.dim()), 1);
  wshape[dim] = out;
  Tensor y;
  for (const Tap& t : taps) {
    const Tensor read = index_select(x, dim, tensor(t.index, {out}).to(x.device(), kInt64));
    if (taps.size() == 1) return read;  // nearest: weight 1
    const Tensor term = read * tensor(t.weight, wshape, kFloat64).to(x.device(), x.dtype());
    y = y.defined() ? y + term : term;
  }
  return y;
}

}  // namespace

Tensor interpolate(const Tensor& input0, const InterpolateOptions& o) {
  const InterpolateMode mode = o.mode_;
  const char* name = mode_name(mode);
  const bool linear_family = mode == InterpolateMode::linear || mode == InterpolateMode::bilinear ||
                             mode == InterpolateMode::bicubic || mode == InterpolateMode::trilinear;
  AG_CHECK(input0.defined(), "interpolate: input is an undefined tensor");
  AG_CHECK(input0.dim() >= 3 && input0.dim() <= 5,
           "interpolate: expected input [N, C, d1] to [N, C, d1, d2, d3] (3-D to 5-D), got {}", input0.desc());
  const int64_t spatial = input0.dim() - 2;
  const int64_t wants = mode == InterpolateMode::linear ? 3
                        : mode == InterpolateMode::bilinear || mode == InterpolateMode::bicubic || mode == InterpolateMode::area
                            ? 4
                        : mode == InterpolateMode::trilinear ? 5
                                                             : 0;
  AG_CHECK(wants == 0 || input0.dim() == wants, "interpolate: mode {} needs {}-D input, got {}{}", name, wants,
           input0.desc(), mode == InterpolateMode::area ? " (area is adaptive_avg_pool2d here: 4-D only)" : "");
  AG_CHECK(!o.align_corners_ || linear_family,
           "interpolate: align_corners can only be set with the interpolating modes linear, bilinear, bicubic and "
           "trilinear, not {}",
           name);
  AG_CHECK(o.size_.has_value() != o.scale_factor_.has_value(),
           "interpolate: give exactly one of size and scale_factor (got {})", o.size_ ? "both" : "neither");
  // One value stands for every spatial dim, as PyTorch's int arguments.
  auto per_dim = [spatial](auto v) {
    if (v.size() == 1) v.assign(static_cast<size_t>(spatial), v[0]);
    return v;
  };
  Shape size;
  std::vector<std::optional<double>> scales(static_cast<size_t>(spatial));
  if (o.size_) {
    size = per_dim(*o.size_);
    AG_CHECK(static_cast<int64_t>(size.size()) == spatial,
             "interpolate: input {} has {} spatial dim(s), size {} gives {}", input0.desc(), spatial,
             shape_str(*o.size_), o.size_->size());
  } else {
    const std::vector<double> f = per_dim(*o.scale_factor_);
    AG_CHECK(static_cast<int64_t>(f.size()) == spatial, "interpolate: input {} has {} spatial dim(s), scale_factor gives {}",
             input0.desc(), spatial, o.scale_factor_->size());
    for (int64_t d = 0; d < spatial; ++d) {
      AG_CHECK(f[d] > 0 && std::isfinite(f[d]), "interpolate: scale_factor must be positive and finite, got {}", f[d]);
      size.push_back(static_cast<int64_t>(std::floor(static_cast<double>(input0.size(d + 2)) * f[d])));
      // The factor itself maps coordinates unless recompute_scale_factor asks for in / out.
      if (!o.recompute_scale_factor_.value_or(false)) scales[d] = f[d];
    }
  }
  for (int64_t d = 0; d < spatial; ++d)
    AG_CHECK(size[d] > 0 && input0.size(d + 2) > 0,
             "interpolate: input and output sizes must be greater than 0, got input {} and output size {}",
             input0.desc(), shape_str(size));
  // Area resampling is an average pool, whose category is its own (PyTorch's runs adaptive_avg_pool2d).
  if (mode == InterpolateMode::area) return adaptive_avg_pool2d(input0, {size[0], size[1]});

  Tensor input = input0;
  OpScope scope(kInterpolate, input);
  AG_CHECK(!linear_family || is_floating(input.dtype()), "interpolate: mode {} needs a floating input, got {}", name,
           input.desc());
  const DType dtype = input.dtype();
  Tensor x = is_reduced_float(dtype) && linear_family ? input.to(input.device(), kFloat32) : input;
  const bool align = o.align_corners_.value_or(false);
  for (int64_t d = 0; d < spatial; ++d) {
    const int64_t in = x.size(d + 2);
    const std::vector<Tap> taps = x.dtype() == kFloat64 ? taps_of<double>(mode, in, size[d], align, scales[d])
                                                        : taps_of<float>(mode, in, size[d], align, scales[d]);
    x = resample_dim(x, d + 2, taps);
  }
  return scope.finish(x.dtype() == dtype ? x : x.to(x.device(), dtype));
}

}  // namespace ampgrad
