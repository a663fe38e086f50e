// The op table: every op's test rows, one per form, in one list (tests/op_table.cpp), read by
// each per-op check (Note [Op table]).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common.h"

namespace op_table {

// Note [Op table]
// A row is one form of one op (an overload, a shape, a broadcast, a parameter): how to draw
// its inputs and how to call it. Every check that must cover every op reads the same rows:
//   gradcheck in float64, central differences (test_autograd.cpp), in four layouts;
//   CPU against CUDA in float32, float16 and bfloat16, forward and gradients, over sizes and
//     layouts (test_cuda.cpp);
//   autocast against hand-cast inputs, bitwise, on each device (test_amp.cpp);
//   the float64 reference of an elementwise op, when the row has one (test_ops.cpp).
// Each of those walks the op registry and fails for an op without a row it can use; adding an
// op is adding its rows here. A row's inputs are drawn fresh, in float64 on the CPU (integer
// and bool inputs as they are), from shapes in which N stands for the check's size n; each
// check casts, moves and relays them out itself.

using V = std::vector<ag::Tensor>;
using Fn = std::function<ag::Tensor(const V&)>;

// In a shape, N stands for the size the check runs at.
inline constexpr int64_t N = -1;

// Draws one input of a shape, in float64 (or an integer or bool dtype) on the CPU, at the
// check's size n; `earlier` holds the inputs drawn before it.
using Draw = std::function<ag::Tensor(const ag::Shape& shape, int64_t n, const V& earlier)>;

Draw normal(double scale = 1);
Draw uniform(double lo, double hi);
inline Draw sym() { return uniform(-1, 1); }
inline Draw positive() { return uniform(0.5, 1.5); }
// Normal values moved at least `margin` away from each kink, so central differences never
// straddle one.
Draw away(std::vector<double> kinks, double scale = 1, double margin = 0.05);
// Magnitudes in [0.5, 1.5), random signs: no zeros (prod, division).
Draw nonzero();
// Magnitudes in [0.99, 1.01), random signs: long products neither overflow nor vanish.
Draw near_one();
// Normal values away from every value of earlier input i: no ties under any broadcast (while
// input i has at most 4096 values).
Draw untied(size_t i);
// Int64 in [0, bound), N standing for n.
Draw indices(int64_t bound);
// Distinct int64 values in [0, bound) (a random permutation's first ones): writes that must
// not collide (index_copy, index_put).
Draw distinct(int64_t bound);
// Int64 class targets in [0, classes), every fourth row (from the second) set to `ignored`.
Draw targets(int64_t classes, int64_t ignored);
Draw mask();  // bool, each true with probability 1/2
// A divisor of earlier input i (of the same shape) that keeps x / y 0.15 from every integer, so
// fmod's and remainder's jumps stay away; nonzero() values at other shapes.
Draw divisor_of(size_t i);
// A bias for earlier input 0 @ earlier input 1^T (values in [-1, 1)) that keeps every output
// 6 standard deviations from relu's kink: +-2 sqrt(k) by turns, k the inner dim.
Draw far_bias();
// Labels 1 and -1 in float64, each with probability 1/2.
Draw labels();
// Earlier input i plus a draw of `by` (same shape): a target a chosen distance from its input.
Draw shifted(size_t i, Draw by);
// nonzero() values with every third element (from the second) exactly 0.
Draw with_zeros();
// Int64 multilabel targets [.., C]: each row a few distinct classes, then -1, then anything.
Draw multilabel(int64_t classes);
// The values of `inner` with channels-last (NHWC) strides (4-D shapes).
Draw channels_last(Draw inner);

struct In {
  ag::Shape shape;  // N stands for the check's size
  Draw draw;
  bool constant = false;  // no gradient, kept in float32 by the CUDA check (running statistics)
};

// The tolerance family of the CPU-against-CUDA check (test_cuda.cpp).
// chain: a product of several matrices (multi_dot, chain_matmul) whose 16-bit intermediates
// hold sums of n products: the two devices' float sums may round to neighbouring 16-bit values
// there (one ulp of a value near sqrt(n)), and the later products carry that difference on.
enum class Tol { elementwise, sum, normalized, chain };

struct Row {
  std::string op;    // the registry's name
  std::string form;  // what this row exercises
  std::vector<In> in;
  Fn run;

  // CPU against CUDA: sizes n, tolerance family and scale; views that need contiguous input.
  std::vector<int64_t> sizes = {1, 7, 1023, 65537};
  Tol tol = Tol::elementwise;
  double tol_scale = 1;
  bool contiguous_only = false;
  // gradcheck and autocast run at size n.
  int64_t n = 4;
  // The float64 value of an elementwise op from its inputs' values at one (broadcast) position.
  std::function<double(const std::vector<double>&)> ref;
  // Which checks read the row; broadcasts: the op broadcasts its two inputs (the pointwise
  // losses take a target of the input's shape only).
  bool gradcheck = true, cuda = true, autocast = true, broadcasts = true;

  Row& at_sizes(std::vector<int64_t> s, int64_t gradcheck_n);
  Row& tolerance(Tol t, double scale = 1);
  Row& contiguous() { contiguous_only = true; return *this; }
  Row& reference(std::function<double(double)> f);
  Row& reference(std::function<double(double, double)> f);
  Row& no_gradcheck() { gradcheck = false; return *this; }
  Row& no_cuda() { cuda = false; return *this; }
  Row& no_autocast() { autocast = false; return *this; }
  Row& same_shapes() { broadcasts = false; return *this; }

  ag::Shape shape(size_t i, int64_t n) const;
  // Every input drawn fresh at size n (float64 or integer/bool, on the CPU).
  V draw(int64_t n) const;
  V draw_shapes(const std::vector<ag::Shape>& shapes, int64_t n) const;  // the same draws at other shapes
  bool sized() const;  // whether any input's shape holds N
  std::string name() const { return form.empty() ? op : op + " [" + form + "]"; }
};

const std::vector<Row>& rows();

// The registry's ops that the library defines (a test binary's own ops, which test how a
// program defines one, are not the table's to cover).
std::vector<const ag::OpInfo*> library_ops();
enum class Check { gradcheck, cuda, autocast };
// The library's registered ops (differentiable ones for gradcheck) with no row the check reads.
std::vector<std::string> ops_without(Check c);
// Rows whose op is not registered (a renamed op leaves one behind), or whose op is not
// differentiable while the row asks for gradcheck.
std::vector<std::string> stale_rows();
// Differentiable ops checked by a dedicated test case instead of gradcheck, with the reason.
const std::map<std::string, std::string>& checked_by_hand();

// The same values in another memory layout: 1 = every other element of a wider last dim,
// 2 = stored transposed (last two dims swapped in memory); 0 leaves t as it is.
ag::Tensor relayout(const ag::Tensor& t, int layout);

}  // namespace op_table
