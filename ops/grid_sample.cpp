// grid_sample: input [N, C, H, W] read at the normalized positions of grid [N, Ho, Wo, 2]
// (x then y, -1 and 1 the edges), bilinear or nearest, with zeros, border or reflection
// padding, as torch.nn.functional.grid_sample. Composed of ops: the four corners are gathers
// from the flattened image, weighted by the fractional parts, so autograd gives the input's
// gradient (gather's adjoint, a scatter-add) and the grid's (through the weights).
#include <ampgrad/autograd/node.h>
#include <ampgrad/ops/internal.h>
#include <ampgrad/ops/nn_ops.h>
#include <ampgrad/ops/op_scope.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad {

using amp::Category;

namespace {

const OpInfo kGridSample{"grid_sample", Category::promote, true, "mixes two inputs: both are cast to the wider dtype"};

// PyTorch's reflect_coordinates: x reflected into [lo2 / 2, hi2 / 2] (twice the bounds given).
Tensor reflect(const Tensor& x, double lo2, double hi2) {
  if (lo2 == hi2) return zeros_like(x);
  const double lo = lo2 / 2, span = (hi2 - lo2) / 2;
  const Tensor in = abs(x - lo);
  const Tensor extra = fmod(in, span), flips = floor(in / span);
  return where(eq(fmod(flips, 2.0), 0.0), extra + lo, rsub(extra, span) + lo);
}

// x clipped to [0, hi], its gradient 0 where x <= 0 or x >= hi (PyTorch's
// clip_coordinates_set_grad; clamp's would pass on the bounds).
Tensor clip(const Tensor& x, double hi) {
  const Tensor zero = zeros({}, x.options()), top = full({}, hi, x.options());
  return where(gt(x, 0.0), where(lt(x, hi), x, top), zero);
}

// The pixel coordinate of normalized g along a dim of `size`, padded as `padding` says.
Tensor source_index(const Tensor& g, int64_t size, GridPadding padding, bool align_corners) {
  const double s = static_cast<double>(size);
  Tensor x = align_corners ? (g + 1.0) * ((s - 1) / 2) : ((g + 1.0) * s - 1.0) / 2;
  if (padding == GridPadding::border) {
    x = clip(x, s - 1);
  } else if (padding == GridPadding::reflection) {
    x = align_corners ? reflect(x, 0, 2 * (s - 1)) : reflect(x, -1, 2 * s - 1);
    x = clip(x, s - 1);
  }
  return x;
}

}  // namespace

Tensor grid_sample(const Tensor& input0, const Tensor& grid0, GridMode mode, GridPadding padding, bool align_corners) {
  Tensor input = input0, grid = grid0;
  OpScope scope(kGridSample, input, grid);
  check_defined(kGridSample, input, "input");
  check_defined(kGridSample, grid, "grid");
  check_same_device(kGridSample, input, grid);
  AG_CHECK(input.dim() == 4 && grid.dim() == 4 && grid.size(3) == 2 && grid.size(0) == input.size(0),
           "grid_sample: expected input [N, C, H, W] and grid [N, Ho, Wo, 2], got {} and {}", input.desc(), grid.desc());
  AG_CHECK(is_floating(input.dtype()) && input.dtype() == grid.dtype(),
           "grid_sample: expected input and grid of one floating dtype, got {} and {}", input.desc(), grid.desc());
  const int64_t n = input.size(0), c = input.size(1), h = input.size(2), w = input.size(3);
  const int64_t ho = grid.size(1), wo = grid.size(2);
  // Coordinates and weights in float32 (float64 for float64): 16-bit weights would round.
  const DType wide = input.dtype() == kFloat64 ? kFloat64 : kFloat32;
  const Tensor g = grid.dtype() == wide ? grid : grid.to(wide);
  const Tensor x = source_index(select(g, 3, 0), w, padding, align_corners);  // [N, Ho, Wo]
  const Tensor y = source_index(select(g, 3, 1), h, padding, align_corners);
  const Tensor image = input.reshape({n, c, h * w});
  // The value of pixel (xi, yi) at each output position, 0 outside the image: [N, C, Ho, Wo].
  // A NaN coordinate reads pixel 0 (never cast to an integer) and counts as outside; a corner
  // outside is skipped, not multiplied by 0 (an inf pixel there would give NaN).
  auto pixel = [&](const Tensor& xi, const Tensor& yi) {
    const Tensor in_x = where(ge(xi, 0.0), le(xi, static_cast<double>(w - 1)), ge(xi, 0.0));  // false for NaN
    const Tensor in_y = where(ge(yi, 0.0), le(yi, static_cast<double>(h - 1)), ge(yi, 0.0));
    const Tensor inside = where(in_x, in_y, in_x);
    auto safe = [](const Tensor& t, double hi) { return where(ne(t, t), zeros({}, t.options()), clamp(t, 0.0, hi)); };
    const Tensor flat = (safe(yi, static_cast<double>(h - 1)) * static_cast<double>(w) + safe(xi, static_cast<double>(w - 1)))
                            .to(kInt64)
                            .reshape({n, 1, ho * wo})
                            .expand({n, c, ho * wo});
    const Tensor v = gather(image, 2, contiguous(flat)).reshape({n, c, ho, wo});
    return where(unsqueeze(inside, 1), v.dtype() == wide ? v : v.to(wide), zeros({}, TensorOptions(wide).device(v.device())));
  };
  Tensor out;
  if (mode == GridMode::nearest) {
    // Half to even, as PyTorch's nearbyint. The grid's gradient is zeros, as PyTorch's (not
    // undefined): a node on top passes the gradient to the gathers and zeros to the grid.
    const Tensor picked = pixel(round(x).detach(), round(y).detach());
    out = picked.detach();
    if (autograd::any_requires_grad({&picked, &grid})) {
      autograd::record(kGridSample, out, {picked, grid}, {},
                       [shape = grid.shape()](const Tensor& g, const std::vector<Tensor>&) {
                         return autograd::Grads{g, zeros(shape, g.options())};
                       });
    }
  } else {
    const Tensor x0 = floor(x).detach(), y0 = floor(y).detach();
    const Tensor fx = x - x0, fy = y - y0;  // the grid's gradient flows through these
    auto wt = [](const Tensor& t) { return unsqueeze(t, 1); };
    out = pixel(x0, y0) * wt(rsub(fx, 1) * rsub(fy, 1)) + pixel(x0 + 1.0, y0) * wt(fx * rsub(fy, 1)) +
          pixel(x0, y0 + 1.0) * wt(rsub(fx, 1) * fy) + pixel(x0 + 1.0, y0 + 1.0) * wt(fx * fy);
  }
  return scope.finish(out.dtype() == input.dtype() ? out : out.to(input.dtype()));
}

}  // namespace ampgrad
