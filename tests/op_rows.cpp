// The op table's rows: every registered op, one row per form (Note [Op table] in
// tests/op_table.h). Values stay away from kinks and zeros; shapes hold N where a size may grow.
#include <cmath>
#include <optional>

#include "op_rows.h"

namespace op_table {

namespace {

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
// erf's inverse in float64 by bisection (|y| < 1).
double erfinv_ref(double y) {
  double lo = -6, hi = 6;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (std::erf(mid) < y ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}
// Points between lo and hi `step` apart: the kinks of rounding and of fmod's jumps.
std::vector<double> grid(double lo, double hi, double step) {
  std::vector<double> g;
  for (double v = lo; v <= hi + 1e-9; v += step) g.push_back(v);
  return g;
}
double python_mod(double x, double y) {
  const double r = std::fmod(x, y);
  return r != 0 && ((r < 0) != (y < 0)) ? r + y : r;
}

}  // namespace

const std::vector<Row>& rows() {
  static const std::vector<Row> table = [] {
  std::vector<Row> all = {
      // ---- Unary elementwise -------------------------------------------------------------------
      row("neg", "", {nrm({3, N})}, [](const V& v) { return ag::neg(v[0]); }).reference([](double x) { return -x; }),
      row("neg", "operator-", {nrm({3, N})}, [](const V& v) { return -v[0]; }),
      row("exp", "", {nrm({3, N})}, [](const V& v) { return ag::exp(v[0]); }).reference([](double x) { return std::exp(x); }),
      row("exp", "method", {nrm({3, N})}, [](const V& v) { return v[0].exp(); }),
      row("log", "", {uni({3, N}, 0.05, 5)}, [](const V& v) { return ag::log(v[0]); })
          .reference([](double x) { return std::log(x); }),
      row("log", "method", {pos({3, N})}, [](const V& v) { return v[0].log(); }),
      row("log1p", "", {uni({3, N}, -0.5, 3)}, [](const V& v) { return ag::log1p(v[0]); })
          .reference([](double x) { return std::log1p(x); }),
      row("sqrt", "", {uni({3, N}, 0.05, 5)}, [](const V& v) { return ag::sqrt(v[0]); })
          .reference([](double x) { return std::sqrt(x); }),
      row("sqrt", "method", {pos({3, N})}, [](const V& v) { return v[0].sqrt(); }),
      row("rsqrt", "", {uni({3, N}, 0.05, 5)}, [](const V& v) { return ag::rsqrt(v[0]); })
          .reference([](double x) { return 1 / std::sqrt(x); }),
      row("reciprocal", "both signs", {nz({3, N})}, [](const V& v) { return ag::reciprocal(v[0]); })
          .reference([](double x) { return 1 / x; }),
      row("abs", "", {kinked({3, N}, {0})}, [](const V& v) { return ag::abs(v[0]); })
          .reference([](double x) { return std::abs(x); }),
      row("abs", "method", {kinked({3, N}, {0})}, [](const V& v) { return v[0].abs(); }),
      row("sign", "", {kinked({3, N}, {0})}, [](const V& v) { return ag::sign(v[0]); })
          .reference([](double x) { return x > 0 ? 1.0 : -1.0; }),
      row("relu", "", {kinked({3, N}, {0})}, [](const V& v) { return ag::relu(v[0]); })
          .reference([](double x) { return x > 0 ? x : 0.0; }),
      row("relu", "method", {kinked({3, N}, {0})}, [](const V& v) { return v[0].relu(); }),
      row("gelu", "x2", {nrm({3, N}, 2)}, [](const V& v) { return ag::gelu(v[0]); })
          .reference([](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }),
      row("gelu", "approximate tanh, x2", {nrm({3, N}, 2)}, [](const V& v) { return ag::gelu(v[0], "tanh"); })
          .reference([](double x) {
            return 0.5 * x * (1 + std::tanh(std::sqrt(2 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
          }),
      row("tanh", "x2", {nrm({3, N}, 2)}, [](const V& v) { return ag::tanh(v[0]); })
          .reference([](double x) { return std::tanh(x); }),
      row("sigmoid", "x3", {nrm({3, N}, 3)}, [](const V& v) { return ag::sigmoid(v[0]); }).reference(sigmoid),
      row("silu", "x3", {nrm({3, N}, 3)}, [](const V& v) { return ag::silu(v[0]); })
          .reference([](double x) { return x * sigmoid(x); }),
      row("sin", "x2", {nrm({3, N}, 2)}, [](const V& v) { return ag::sin(v[0]); }).reference([](double x) { return std::sin(x); }),
      row("cos", "x2", {nrm({3, N}, 2)}, [](const V& v) { return ag::cos(v[0]); }).reference([](double x) { return std::cos(x); }),
      row("tan", "(-1.2, 1.2)", {uni({3, N}, -1.2, 1.2)}, [](const V& v) { return ag::tan(v[0]); })
          .reference([](double x) { return std::tan(x); }),
      row("asin", "(-0.9, 0.9)", {uni({3, N}, -0.9, 0.9)}, [](const V& v) { return ag::asin(v[0]); })
          .reference([](double x) { return std::asin(x); }),
      row("acos", "(-0.9, 0.9)", {uni({3, N}, -0.9, 0.9)}, [](const V& v) { return ag::acos(v[0]); })
          .reference([](double x) { return std::acos(x); }),
      row("atan", "x2", {nrm({3, N}, 2)}, [](const V& v) { return ag::atan(v[0]); }).reference([](double x) { return std::atan(x); }),
      row("sinh", "x1.5", {nrm({3, N}, 1.5)}, [](const V& v) { return ag::sinh(v[0]); })
          .reference([](double x) { return std::sinh(x); }),
      row("cosh", "x1.5", {nrm({3, N}, 1.5)}, [](const V& v) { return ag::cosh(v[0]); })
          .reference([](double x) { return std::cosh(x); }),
      row("erf", "x1.5", {nrm({3, N}, 1.5)}, [](const V& v) { return ag::erf(v[0]); }).reference([](double x) { return std::erf(x); }),
      row("erfinv", "(-0.95, 0.95)", {uni({3, N}, -0.95, 0.95)}, [](const V& v) { return ag::erfinv(v[0]); })
          .reference(erfinv_ref),
      row("expm1", "", {nrm({3, N})}, [](const V& v) { return ag::expm1(v[0]); }).reference([](double x) { return std::expm1(x); }),
      row("log2", "", {uni({3, N}, 0.05, 5)}, [](const V& v) { return ag::log2(v[0]); })
          .reference([](double x) { return std::log2(x); }),
      row("log10", "", {uni({3, N}, 0.05, 5)}, [](const V& v) { return ag::log10(v[0]); })
          .reference([](double x) { return std::log10(x); }),
      row("floor", "away from integers", {In{{3, N}, away(grid(-8, 8, 1), 2)}}, [](const V& v) { return ag::floor(v[0]); })
          .reference([](double x) { return std::floor(x); }),
      row("ceil", "away from integers", {In{{3, N}, away(grid(-8, 8, 1), 2)}}, [](const V& v) { return ag::ceil(v[0]); })
          .reference([](double x) { return std::ceil(x); }),
      row("trunc", "away from integers", {In{{3, N}, away(grid(-8, 8, 1), 2)}}, [](const V& v) { return ag::trunc(v[0]); })
          .reference([](double x) { return std::trunc(x); }),
      row("round", "half to even, away from the halves", {In{{3, N}, away(grid(-8.5, 8.5, 1), 2)}},
          [](const V& v) { return ag::round(v[0]); })
          .reference([](double x) { return std::nearbyint(x); }),
      row("round", "exact halves go to even", {In{{2, 4}, [](const S& s, int64_t, const V&) {
                                                  return ag::tensor(std::vector<double>{-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 4.5}, s);
                                                }}},
          [](const V& v) { return ag::round(v[0]); })
          .reference([](double x) { return std::nearbyint(x); })
          .no_gradcheck(),
      // Rounding to decimals has jumps 0.01 apart: no central differences across them.
      row("round", "decimals 2", {uni({3, N}, -3, 3)}, [](const V& v) { return ag::round(v[0], 2); })
          .reference([](double x) { return std::nearbyint(x * 100) / 100; })
          .no_gradcheck(),
      row("round", "decimals -1", {uni({3, N}, -300, 300)}, [](const V& v) { return ag::round(v[0], -1); })
          .reference([](double x) { return std::nearbyint(x / 10) * 10; })
          .no_gradcheck(),
      row("hardtanh", "", {kinked({3, N}, {-1, 1})}, [](const V& v) { return ag::hardtanh(v[0]); })
          .reference([](double x) { return std::min(1.0, std::max(-1.0, x)); }),
      row("hardtanh", "min -0.5, max 2", {In{{3, N}, away({-0.5, 2}, 2)}}, [](const V& v) { return ag::hardtanh(v[0], -0.5, 2); })
          .reference([](double x) { return std::min(2.0, std::max(-0.5, x)); }),
      row("leaky_relu", "", {kinked({3, N}, {0})}, [](const V& v) { return ag::leaky_relu(v[0]); })
          .reference([](double x) { return x > 0 ? x : 0.01 * x; }),
      row("leaky_relu", "slope 0.2", {kinked({3, N}, {0})}, [](const V& v) { return ag::leaky_relu(v[0], 0.2); })
          .reference([](double x) { return x > 0 ? x : 0.2 * x; }),
      row("elu", "", {kinked({3, N}, {0})}, [](const V& v) { return ag::elu(v[0]); })
          .reference([](double x) { return x > 0 ? x : std::expm1(x); }),
      row("elu", "alpha 0.5", {kinked({3, N}, {0})}, [](const V& v) { return ag::elu(v[0], 0.5); })
          .reference([](double x) { return x > 0 ? x : 0.5 * std::expm1(x); }),
      row("mish", "x3", {nrm({3, N}, 3)}, [](const V& v) { return ag::mish(v[0]); })
          .reference([](double x) { return x * std::tanh(std::log1p(std::exp(x))); }),
      row("hardswish", "x3", {In{{3, N}, away({-3, 3}, 3)}}, [](const V& v) { return ag::hardswish(v[0]); })
          .reference([](double x) { return x <= -3 ? 0.0 : (x >= 3 ? x : x * (x + 3) / 6); }),
      row("softplus", "x3", {nrm({3, N}, 3)}, [](const V& v) { return ag::softplus(v[0]); })
          .reference([](double x) { return std::log1p(std::exp(x)); }),
      row("softplus", "past the threshold", {In{{3, N}, away({-20, 20}, 15)}}, [](const V& v) { return ag::softplus(v[0]); })
          .reference([](double x) { return x > 20 ? x : std::log1p(std::exp(x)); }),
      row("softplus", "beta 2, threshold 5", {In{{3, N}, away({-2.5, 2.5}, 3)}},
          [](const V& v) { return ag::softplus(v[0], 2, 5); })
          .reference([](double x) { return 2 * x > 5 ? x : std::log1p(std::exp(2 * x)) / 2; }),
      row("clamp", "min and max", {kinked({3, N}, {-0.5, 0.5})}, [](const V& v) { return ag::clamp(v[0], -0.5, 0.5); })
          .reference([](double x) { return std::min(0.5, std::max(-0.5, x)); }),
      row("clamp", "min only", {kinked({3, N}, {-0.2})}, [](const V& v) { return ag::clamp(v[0], -0.2, std::nullopt); })
          .reference([](double x) { return std::max(-0.2, x); }),
      row("clamp", "max only", {kinked({3, N}, {0.3})}, [](const V& v) { return ag::clamp(v[0], std::nullopt, 0.3); })
          .reference([](double x) { return std::min(0.3, x); }),

      // ---- Binary elementwise, with broadcasting -------------------------------------------------
      row("add", "same shape", {nrm({3, N}), nrm({3, N})}, [](const V& v) { return ag::add(v[0], v[1]); })
          .reference([](double a, double b) { return a + b; }),
      row("add", "broadcast [3,1] + [n]", {nrm({3, 1}), nrm({N})}, [](const V& v) { return v[0] + v[1]; }),
      row("add", "alpha 0.5", {nrm({3, N}), nrm({N})}, [](const V& v) { return ag::add(v[0], v[1], 0.5); })
          .reference([](double a, double b) { return a + 0.5 * b; }),
      row("add", "scalar", {nrm({3, N})}, [](const V& v) { return v[0] + 1.5; })
          .reference([](double x) { return x + 1.5; }),
      row("add", "0-dim + [3,n]", {nrm({}), nrm({3, N})}, [](const V& v) { return v[0] + v[1]; }),
      row("sub", "same shape", {nrm({3, N}), nrm({3, N})}, [](const V& v) { return ag::sub(v[0], v[1]); })
          .reference([](double a, double b) { return a - b; }),
      row("sub", "broadcast [n] - [3,1]", {nrm({N}), nrm({3, 1})}, [](const V& v) { return v[0] - v[1]; }),
      row("sub", "alpha -2", {nrm({3, N}), nrm({3, N})}, [](const V& v) { return ag::sub(v[0], v[1], -2); })
          .reference([](double a, double b) { return a + 2 * b; }),
      row("sub", "scalar", {nrm({3, N})}, [](const V& v) { return v[0] - 0.75; })
          .reference([](double x) { return x - 0.75; }),
      row("rsub", "scalar - tensor", {nrm({3, N})}, [](const V& v) { return ag::rsub(v[0], 2.5); })
          .reference([](double x) { return 2.5 - x; }),
      row("rsub", "operator", {nrm({3, N})}, [](const V& v) { return 3 - v[0]; }),
      row("mul", "same shape", {nrm({3, N}), nrm({3, N})}, [](const V& v) { return ag::mul(v[0], v[1]); })
          .reference([](double a, double b) { return a * b; }),
      row("mul", "broadcast [3,n] * [3,1]", {nrm({3, N}), nrm({3, 1})}, [](const V& v) { return v[0] * v[1]; }),
      row("mul", "broadcast [2,n] * [n]", {nrm({2, N}), nrm({N})}, [](const V& v) { return v[0] * v[1]; }),
      row("mul", "x * x (one input twice)", {nrm({3, N})}, [](const V& v) { return v[0] * v[0]; })
          .reference([](double x) { return x * x; }),
      row("mul", "scalar", {nrm({3, N})}, [](const V& v) { return v[0] * -1.5; })
          .reference([](double x) { return x * -1.5; }),
      row("div", "same shape", {nrm({3, N}), nz({3, N})}, [](const V& v) { return ag::div(v[0], v[1]); })
          .reference([](double a, double b) { return a / b; }),
      row("div", "broadcast [3,n] / [3,1]", {nrm({3, N}), nz({3, 1})}, [](const V& v) { return v[0] / v[1]; }),
      row("div", "broadcast [3,n] / [n]", {sy({3, N}), pos({N})}, [](const V& v) { return v[0] / v[1]; }),
      row("div", "scalar denominator", {nrm({3, N})}, [](const V& v) { return v[0] / 4.0; })
          .reference([](double x) { return x / 4; }),
      row("rdiv", "scalar / tensor", {nz({3, N})}, [](const V& v) { return 2.0 / v[0]; })
          .reference([](double x) { return 2 / x; }),
      row("rdiv", "function", {nz({3, N})}, [](const V& v) { return ag::rdiv(v[0], -3); }).reference([](double x) { return -3 / x; }),
      row("rtruediv", "", {nz({3, N})}, [](const V& v) { return ag::rtruediv(v[0], 1.5); })
          .reference([](double x) { return 1.5 / x; }),
      row("rpow", "2.5 ** x", {nrm({3, N})}, [](const V& v) { return ag::pow(2.5, v[0]); })
          .reference([](double x) { return std::pow(2.5, x); }),
      row("rpow", "0.5 ** x", {nrm({3, N})}, [](const V& v) { return ag::pow(0.5, v[0]); })
          .reference([](double x) { return std::pow(0.5, x); }),
      row("pow", "scalar 2, any sign", {nrm({3, N})}, [](const V& v) { return v[0].pow(2); })
          .reference([](double x) { return x * x; }),
      row("pow", "scalar 3, any sign", {nrm({3, N})}, [](const V& v) { return ag::pow(v[0], 3); })
          .reference([](double x) { return x * x * x; }),
      row("pow", "scalar 0.5, positive", {pos({3, N})}, [](const V& v) { return ag::pow(v[0], 0.5); })
          .reference([](double x) { return std::sqrt(x); }),
      row("pow", "scalar 2.5, positive", {uni({3, N}, 0.1, 3)}, [](const V& v) { return v[0].pow(2.5); })
          .reference([](double x) { return std::pow(x, 2.5); }),
      row("pow", "scalar -1.5, positive", {pos({3, N})}, [](const V& v) { return ag::pow(v[0], -1.5); })
          .reference([](double x) { return std::pow(x, -1.5); }),
      // The exponent's gradient sums three terms g * x^y * ln x of up to ~10 times its size,
      // which can cancel: CPU and CUDA (each within an ulp per term) differ by more than ulps of it.
      row("pow", "tensor exponent, broadcast [3,n] ^ [n]", {uni({3, N}, 0.1, 3), uni({N}, -2, 2)},
          [](const V& v) { return ag::pow(v[0], v[1]); })
          .reference([](double a, double b) { return std::pow(a, b); })
          .tolerance(Tol::elementwise, 4),
      row("pow", "tensor exponent, broadcast [3,1] ^ [3,n]", {pos({3, 1}), nrm({3, N})},
          [](const V& v) { return v[0].pow(v[1]); }),
      row("maximum", "same shape, no ties", {nrm({3, N}), In{{3, N}, untied(0)}},
          [](const V& v) { return ag::maximum(v[0], v[1]); })
          .reference([](double a, double b) { return std::max(a, b); }),
      row("maximum", "broadcast [3,1] vs [n], no ties", {nrm({3, 1}), In{{N}, untied(0)}},
          [](const V& v) { return ag::maximum(v[0], v[1]); }),
      row("minimum", "same shape, no ties", {nrm({3, N}), In{{3, N}, untied(0)}},
          [](const V& v) { return ag::minimum(v[0], v[1]); })
          .reference([](double a, double b) { return std::min(a, b); }),
      row("minimum", "broadcast [3,1] vs [n], no ties", {nrm({3, 1}), In{{N}, untied(0)}},
          [](const V& v) { return ag::minimum(v[1], v[0]); }),
      row("atan2", "same shape, away from the origin", {nz({3, N}), nz({3, N})}, [](const V& v) { return ag::atan2(v[0], v[1]); })
          .reference([](double a, double b) { return std::atan2(a, b); }),
      row("atan2", "broadcast [3,n] vs [n]", {nz({3, N}), nz({N})}, [](const V& v) { return ag::atan2(v[0], v[1]); }),
      row("fmod", "same shape", {nrm({3, N}, 3), In{{3, N}, divisor_of(0)}}, [](const V& v) { return ag::fmod(v[0], v[1]); })
          .reference([](double a, double b) { return std::fmod(a, b); }),
      row("fmod", "scalar divisor", {In{{3, N}, away(grid(-9, 9, 0.75), 3)}}, [](const V& v) { return ag::fmod(v[0], 0.75); })
          .reference([](double x) { return std::fmod(x, 0.75); }),
      // Broadcast divisors meet x / y near integers, where the gradient jumps: no gradcheck.
      row("fmod", "broadcast [3,n] by [n]", {nrm({3, N}, 3), nz({N})}, [](const V& v) { return ag::fmod(v[0], v[1]); }).no_gradcheck(),
      row("fmod", "int64", {In{{3, N}, indices(100)}, In{{3, N}, indices(7)}},
          [](const V& v) { return ag::fmod(v[0] - 50, v[1] + 1); })
          .no_gradcheck(),
      row("remainder", "same shape", {nrm({3, N}, 3), In{{3, N}, divisor_of(0)}},
          [](const V& v) { return ag::remainder(v[0], v[1]); })
          .reference(python_mod),
      row("remainder", "scalar divisor", {In{{3, N}, away(grid(-9, 9, 0.75), 3)}},
          [](const V& v) { return ag::remainder(v[0], -0.75); })
          .reference([](double x) { return python_mod(x, -0.75); }),
      row("remainder", "int64", {In{{3, N}, indices(100)}, In{{3, N}, indices(7)}},
          [](const V& v) { return ag::remainder(v[0] - 50, v[1] + 1); })
          .no_gradcheck(),
      row("where", "same shape", {In{{3, N}, mask()}, nrm({3, N}), nrm({3, N})},
          [](const V& v) { return ag::where(v[0], v[1], v[2]); }),
      row("where", "broadcast cond [3,n], a [3,1], b [n]", {In{{3, N}, mask()}, nrm({3, 1}), nrm({N})},
          [](const V& v) { return ag::where(v[0], v[1], v[2]); }),
      row("where", "scalar other, cond [n] broadcast", {In{{N}, mask()}, nrm({3, N})},
          [](const V& v) { return ag::where(v[0], v[1], 0.5); }),
      row("eq", "a == maximum(a, b)", {sy({3, N}), sy({N})}, [](const V& v) { return ag::eq(v[0], ag::maximum(v[0], v[1])); }),
      row("eq", "a == a through two transposes", {sy({3, N})}, [](const V& v) { return ag::eq(v[0], v[0].t().t()); }),
      row("ne", "a != minimum(a, b)", {sy({3, N}), sy({3, 1})}, [](const V& v) { return ag::ne(v[0], ag::minimum(v[0], v[1])); }),
      row("lt", "broadcast row", {sy({3, N}), sy({N})}, [](const V& v) { return ag::lt(v[0], v[1]); }),
      row("le", "same shape", {sy({3, N}), sy({3, N})}, [](const V& v) { return ag::le(v[0], v[1]); }),
      row("gt", "broadcast column", {sy({3, N}), sy({3, 1})}, [](const V& v) { return ag::gt(v[0], v[1]); }),
      row("ge", "broadcast row", {sy({3, N}), sy({N})}, [](const V& v) { return ag::ge(v[0], v[1]); }),

      // ---- Reductions and softmax --------------------------------------------------------------
      sum_row("sum", "all", {nrm({3, N})}, [](const V& v) { return v[0].sum(); }),
      sum_row("sum", "dim 1", {nrm({3, N})}, [](const V& v) { return ag::sum(v[0], {1}); }),
      sum_row("sum", "dim -1 keepdim", {nrm({3, N})}, [](const V& v) { return ag::sum(v[0], {-1}, true); }),
      sum_row("sum", "dim 0 keepdim", {nrm({3, N})}, [](const V& v) { return ag::sum(v[0], {0}, true); }),
      sum_row("sum", "dims {0,2} (non-adjacent)", {nrm({2, 3, N})}, [](const V& v) { return ag::sum(v[0], {0, 2}); }),
      sum_row("sum", "dims {0,2} keepdim", {nrm({2, 3, N})}, [](const V& v) { return ag::sum(v[0], {0, 2}, true); }),
      sum_row("mean", "all", {nrm({3, N})}, [](const V& v) { return v[0].mean(); }),
      sum_row("mean", "dim 0", {nrm({3, N})}, [](const V& v) { return ag::mean(v[0], {0}); }),
      sum_row("mean", "dim 1", {nrm({3, N})}, [](const V& v) { return ag::mean(v[0], {1}); }),
      sum_row("mean", "dims {0,2} keepdim", {nrm({2, 3, N})}, [](const V& v) { return ag::mean(v[0], {0, 2}, true); }),
      row("prod", "all, no zeros", {In{{3, N}, near_one()}}, [](const V& v) { return ag::prod(v[0]); })
          .tolerance(Tol::normalized),
      row("prod", "dim 1", {In{{3, N}, near_one()}}, [](const V& v) { return ag::prod(v[0], 1); }).tolerance(Tol::normalized),
      row("prod", "dim 0 keepdim", {In{{3, N}, near_one()}}, [](const V& v) { return ag::prod(v[0], 0, true); })
          .tolerance(Tol::normalized),
      row("prod", "all of [2,3], magnitudes in [0.5, 1.5)", {nz({2, 3})}, [](const V& v) { return ag::prod(v[0]); })
          .tolerance(Tol::normalized),
      // n + 1 elements: a dim of one element has no variance with correction 1.
      sum_row("var", "all", {nrm({3, N})}, [](const V& v) { return ag::var(v[0]); }).at_sizes({2, 8, 1024, 65538}, 4),
      sum_row("var", "dim 1, correction 1", {nrm({3, N})}, [](const V& v) { return ag::var(v[0], {1}); })
          .at_sizes({2, 8, 1024, 65538}, 4),
      sum_row("var", "dim 0, correction 0", {nrm({3, N})}, [](const V& v) { return ag::var(v[0], {0}, 0); }),
      sum_row("var", "dims {0,2}, correction 0, keepdim", {nrm({2, 3, N})},
              [](const V& v) { return ag::var(v[0], {0, 2}, 0, true); }),
      sum_row("cumsum", "dim 1", {nrm({3, N})}, [](const V& v) { return ag::cumsum(v[0], 1); }),
      sum_row("cumsum", "dim 0 (short lines)", {nrm({3, N})}, [](const V& v) { return ag::cumsum(v[0], 0); }),
      sum_row("cumsum", "dim 1 of 3-D, strided lines", {nrm({2, N, 3})}, [](const V& v) { return ag::cumsum(v[0], -2); }),
      // Lines of a fixed length whatever N: positive values, so no partial sum cancels (the
      // sum tolerance scales with N, not with the line: at N = 7 a line of 72 float32 terms,
      // summed in another order, was 5 ulps off its float64 value for one seed on the H200,
      // over the bound; twice the bound).
      sum_row("cumsum", "many lines of 70 (a warp each on CUDA)", {pos({N, 70})}, [](const V& v) { return ag::cumsum(v[0], 1); })
          .tolerance(Tol::sum, 2),
      sum_row("cumsum", "many lines of 72, vector loads", {pos({N, 72})}, [](const V& v) { return ag::cumsum(v[0], -1); })
          .tolerance(Tol::sum, 2),
      sum_row("cumsum", "dtype float64", {nrm({3, N})}, [](const V& v) { return ag::cumsum(v[0], 1, ag::kFloat64); }),
      sum_row("cumsum", "int32 input sums in int64", {In{{3, N}, indices(7)}},
              [](const V& v) { return ag::cumsum(v[0].to(ag::kInt32), 1); })
          .no_gradcheck(),
      row("logsumexp", "dim 1", {nrm({3, N})}, [](const V& v) { return ag::logsumexp(v[0], {1}); }).tolerance(Tol::normalized),
      row("logsumexp", "dim 0", {nrm({3, N})}, [](const V& v) { return ag::logsumexp(v[0], {0}); }).tolerance(Tol::normalized),
      row("logsumexp", "all", {nrm({3, N})}, [](const V& v) { return ag::logsumexp(v[0], {}); }).tolerance(Tol::normalized),
      row("logsumexp", "dims {0,2} keepdim", {nrm({2, 3, N})}, [](const V& v) { return ag::logsumexp(v[0], {0, 2}, true); })
          .tolerance(Tol::normalized),
      row("max", "all", {nrm({3, N})}, [](const V& v) { return ag::max(v[0]); }),
      row("max", "dim 1", {nrm({3, N})}, [](const V& v) { return ag::max(v[0], 1).first; }),
      row("max", "dim 0 keepdim", {nrm({3, N})}, [](const V& v) { return ag::max(v[0], 0, true).first; }),
      row("min", "all", {nrm({3, N})}, [](const V& v) { return ag::min(v[0]); }),
      row("min", "dim -1", {nrm({2, 3, N})}, [](const V& v) { return ag::min(v[0], -1).first; }),
      row("min", "dim 1 keepdim", {nrm({2, 3, N})}, [](const V& v) { return ag::min(v[0], 1, true).first; }),
      row("min", "dim 0", {nrm({3, N})}, [](const V& v) { return ag::min(v[0], 0).first; }),
      row("argmax", "dim 1", {sy({3, N})}, [](const V& v) { return ag::argmax(v[0], 1); }),
      row("argmax", "dim 0", {sy({3, N})}, [](const V& v) { return ag::argmax(v[0], 0); }),
      row("argmax", "all", {sy({3, N})}, [](const V& v) { return ag::argmax(v[0]); }),
      row("argmin", "dim 1", {sy({3, N})}, [](const V& v) { return ag::argmin(v[0], 1); }),
      row("argmin", "dim 0", {sy({3, N})}, [](const V& v) { return ag::argmin(v[0], 0); }),
      row("softmax", "dim 1", {uni({3, N}, -4, 4)}, [](const V& v) { return ag::softmax(v[0], 1); }).tolerance(Tol::normalized),
      row("softmax", "dim 0", {uni({3, N}, -4, 4)}, [](const V& v) { return ag::softmax(v[0], 0); }).tolerance(Tol::normalized),
      row("softmax", "dim -1 of 3-D", {nrm({2, 3, N})}, [](const V& v) { return ag::softmax(v[0], -1); })
          .tolerance(Tol::normalized),
      row("log_softmax", "dim 1", {uni({3, N}, -4, 4)}, [](const V& v) { return ag::log_softmax(v[0], 1); })
          .tolerance(Tol::normalized),
      row("log_softmax", "dim 0", {uni({3, N}, -4, 4)}, [](const V& v) { return ag::log_softmax(v[0], 0); })
          .tolerance(Tol::normalized),
      row("log_softmax", "dim 1 of 3-D", {nrm({2, 3, N})}, [](const V& v) { return ag::log_softmax(v[0], 1); })
          .tolerance(Tol::normalized),

      // ---- Shapes and views --------------------------------------------------------------------
      row("view", "[3,n] -> [n,3]", {nrm({3, N})}, [](const V& v) { return ag::view(v[0], {v[0].size(1), 3}); }).contiguous(),
      row("view", "[2,3,n] -> [-1]", {nrm({2, 3, N})}, [](const V& v) { return v[0].view({-1}); }).contiguous(),
      row("reshape", "[3,n] -> [n,3]", {nrm({3, N})}, [](const V& v) { return v[0].reshape({v[0].size(1), 3}); }),
      row("reshape", "of a transpose (copies)", {nrm({3, N})}, [](const V& v) { return ag::reshape(v[0].t(), {-1}); }),
      row("reshape", "flatten(1) of 3-D", {nrm({2, 3, N})}, [](const V& v) { return v[0].flatten(1); }),
      row("transpose", "(0,2) of 3-D", {nrm({2, 3, N})}, [](const V& v) { return v[0].transpose(0, 2); }),
      row("transpose", "t() of 2-D", {nrm({3, N})}, [](const V& v) { return ag::t(v[0]); }),
      row("permute", "{2,0,1}", {nrm({2, N, 3})}, [](const V& v) { return v[0].permute({2, 0, 1}); }),
      row("permute", "{1,0}", {nrm({3, N})}, [](const V& v) { return ag::permute(v[0], {1, 0}); }),
      row("slice", "dim 1 step 2", {nrm({3, N})}, [](const V& v) { return ag::slice(v[0], 1, 0, v[0].size(1), 2); }),
      row("slice", "dim 1 [1,4)", {nrm({3, 5})}, [](const V& v) { return v[0].slice(1, 1, 4); }),
      row("slice", "dim 0 step 3, negative start", {nrm({7, 2})}, [](const V& v) { return ag::slice(v[0], 0, -6, 7, 3); }),
      row("slice", "narrow dim 0", {nrm({5, 3})}, [](const V& v) { return v[0].narrow(0, 1, 3); }),
      row("select", "dim 0", {nrm({3, N})}, [](const V& v) { return v[0].select(0, 1); }),
      row("select", "dim -1, index -1", {nrm({3, N})}, [](const V& v) { return ag::select(v[0], -1, -1); }),
      row("expand", "[3,1] -> [2,3,4]", {nrm({3, 1})}, [](const V& v) { return v[0].expand({2, 3, 4}); }),
      row("expand", "[n,1] -> [2,n,3]", {nrm({N, 1})}, [](const V& v) { return ag::expand(v[0], {2, v[0].size(0), 3}); }),
      row("expand", "[n] -> [3,-1]", {nrm({N})}, [](const V& v) { return ag::expand(v[0], {3, -1}); }),
      row("squeeze", "dim 1 of [3,1,n]", {nrm({3, 1, N})}, [](const V& v) { return v[0].squeeze(1); }),
      row("squeeze", "all dims of [1,3,1,2]", {nrm({1, 3, 1, 2})}, [](const V& v) { return ag::squeeze(v[0]); }),
      row("unsqueeze", "dim 0", {nrm({3, N})}, [](const V& v) { return v[0].unsqueeze(0); }),
      row("unsqueeze", "dim -1", {nrm({3, N})}, [](const V& v) { return ag::unsqueeze(v[0], -1); }),
      row("unsqueeze", "dim 1", {nrm({3, N})}, [](const V& v) { return ag::unsqueeze(v[0], 1); }),
      row("cat", "dim 0, three inputs", {nrm({2, N}), nrm({1, N}), nrm({3, N})},
          [](const V& v) { return ag::cat({v[0], v[1], v[2]}, 0); }),
      row("cat", "dim 1", {nrm({3, 2}), nrm({3, N})}, [](const V& v) { return ag::cat({v[0], v[1]}, 1); }),
      row("cat", "dim -1 of 3-D", {nrm({2, 3, 1}), nrm({2, 3, N})}, [](const V& v) { return ag::cat({v[0], v[1]}, -1); }),
      row("stack", "dim 0", {nrm({3, N}), nrm({3, N})}, [](const V& v) { return ag::stack({v[0], v[1]}, 0); }),
      row("stack", "dim 1, three inputs", {nrm({3, N}), nrm({3, N}), nrm({3, N})},
          [](const V& v) { return ag::stack({v[0], v[1], v[2]}, 1); }),
      row("stack", "dim -1", {nrm({N, 2}), nrm({N, 2})}, [](const V& v) { return ag::stack({v[0], v[1]}, -1); }),
      // More indices than rows: some repeat, and their gradients add up.
      row("index_select", "dim 0, repeated indices", {nrm({N, 4}), In{{7}, indices(N)}},
          [](const V& v) { return ag::index_select(v[0], 0, v[1]); }),
      row("index_select", "dim 1, repeated indices", {nrm({3, N}), In{{5}, indices(N)}},
          [](const V& v) { return v[0].index_select(1, v[1]); }),
      // masked_fill, tril, triu (#27): where's gradients, zero where a value was replaced.
      row("masked_fill", "broadcast mask, value 0.5", {nrm({3, N}), In{{N}, mask()}},
          [](const V& v) { return ag::masked_fill(v[0], v[1], 0.5); }),
      row("masked_fill", "a 0-dim tensor value, input and mask broadcast", {nrm({1, N}), In{{3, 1}, mask()}, nrm({})},
          [](const V& v) { return ag::masked_fill(v[0], v[1], v[2]); }),
      // n x n: at the table's default sizes (65537) one float64 input is 34 GB (test_cuda's
      // RSS reached 100-128 GB on the H200 and it was killed).
      row("tril", "square", {nrm({N, N})}, [](const V& v) { return ag::tril(v[0]); }).at_sizes({1, 7, 130}, 4),
      row("tril", "batched, diagonal 1", {nrm({2, 3, N})}, [](const V& v) { return ag::tril(v[0], 1); }),
      row("triu", "of a transpose, diagonal -1", {nrm({N, 4})}, [](const V& v) { return ag::triu(v[0].t(), -1); }),
      row("triu", "wide, diagonal 2", {nrm({3, N})}, [](const V& v) { return ag::triu(v[0], 2); }),
      // embedding (#27): repeated indices' rows summed in position order (Note [Embedding backward]).
      row("embedding", "2-D input, repeated indices", {In{{3, 4}, indices(N)}, nrm({N, 5})},
          [](const V& v) { return ag::embedding(v[0], v[1]); }),
      row("embedding", "a transposed table", {In{{6}, indices(N)}, nrm({3, N})},
          [](const V& v) { return ag::embedding(v[0], v[1].t()); }),
      // The padding row: the last, appended, never picked (padding_idx's zero gradient is not
      // the forward's derivative, nor is scale_grad_by_freq's scaled one: both are checked by
      // value in test_nn.cpp, and against the CPU on CUDA).
      row("embedding", "padding_idx -1", {In{{9}, indices(N)}, nrm({N, 3}), nrm({1, 3})},
          [](const V& v) { return ag::embedding(v[0], ag::cat({v[1], v[2]}, 0), -1); }),

      // ---- Matrix products (sums of n products) --------------------------------------------------
      // Values in [-1, 1): sums of n products stay near sqrt(n) / 3, which the CUDA check's
      // tolerance is made for (normal values, three times larger, exceed it in bfloat16 at n =
      // 65537 on the H200), and far_bias is then 6 standard deviations.
      sum_row("mm", "[7,n] @ [n,5]", {sy({7, N}), sy({N, 5})}, [](const V& v) { return ag::mm(v[0], v[1]); }),
      sum_row("mm", "method", {sy({3, N}), sy({N, 2})}, [](const V& v) { return v[0].mm(v[1]); }),
      sum_row("bmm", "[2,3,n] @ [2,n,4]", {sy({2, 3, N}), sy({2, N, 4})}, [](const V& v) { return ag::bmm(v[0], v[1]); }),
      sum_row("bmm", "transposed inner dims", {sy({2, N, 3}), sy({2, 4, N})},
              [](const V& v) { return ag::bmm(v[0].transpose(1, 2), v[1].transpose(1, 2)); }),
      sum_row("matmul", "1-D . 1-D", {sy({N}), sy({N})}, [](const V& v) { return ag::matmul(v[0], v[1]); }),
      sum_row("matmul", "1-D @ 2-D", {sy({N}), sy({N, 3})}, [](const V& v) { return ag::matmul(v[0], v[1]); }),
      sum_row("matmul", "2-D @ 1-D", {sy({3, N}), sy({N})}, [](const V& v) { return v[0].matmul(v[1]); }),
      sum_row("matmul", "2-D @ 2-D", {sy({3, N}), sy({N, 2})}, [](const V& v) { return ag::matmul(v[0], v[1]); }),
      sum_row("matmul", "3-D @ 3-D", {sy({2, 3, N}), sy({2, N, 2})}, [](const V& v) { return ag::matmul(v[0], v[1]); }),
      sum_row("matmul", "3-D @ 2-D", {sy({2, 3, N}), sy({N, 4})}, [](const V& v) { return ag::matmul(v[0], v[1]); }),
      sum_row("matmul", "1-D @ 3-D", {sy({N}), sy({2, N, 3})}, [](const V& v) { return ag::matmul(v[0], v[1]); }),
      sum_row("matmul", "3-D @ 1-D", {sy({2, 3, N}), sy({N})}, [](const V& v) { return ag::matmul(v[0], v[1]); }),
      sum_row("matmul", "broadcast batch [2,1,3,n] @ [3,n,2]", {sy({2, 1, 3, N}), sy({3, N, 2})},
              [](const V& v) { return ag::matmul(v[0], v[1]); }),
      sum_row("addmm", "c [3,2]", {sy({3, 2}), sy({3, N}), sy({N, 2})}, [](const V& v) { return ag::addmm(v[0], v[1], v[2]); }),
      sum_row("addmm", "c [4] broadcast, beta 0.5, alpha 2", {sy({4}), sy({3, N}), sy({N, 4})},
              [](const V& v) { return ag::addmm(v[0], v[1], v[2], 0.5, 2); }),
      sum_row("addmm", "c [3,1], beta 0, alpha -1", {sy({3, 1}), sy({3, N}), sy({N, 2})},
              [](const V& v) { return ag::addmm(v[0], v[1], v[2], 0, -1); }),
      sum_row("linear", "with bias", {sy({3, N}), sy({5, N}), sy({5})}, [](const V& v) { return ag::linear(v[0], v[1], v[2]); }),
      sum_row("linear", "without bias", {sy({3, N}), sy({5, N})}, [](const V& v) { return ag::linear(v[0], v[1]); }),
      sum_row("linear", "3-D input", {sy({2, 3, N}), sy({5, N}), sy({5})},
              [](const V& v) { return ag::linear(v[0], v[1], v[2]); }),
      // Biases 6 standard deviations from relu's kink: the CPU and the GPU agree on the mask.
      sum_row("linear_relu", "3-D input, with bias", {sy({2, 3, N}), sy({5, N}), In{{5}, far_bias()}},
              [](const V& v) { return ag::linear_relu(v[0], v[1], v[2]); }),
      // Without a bias some outputs sit at relu's kink, where the two devices' roundings may
      // disagree on the mask: gradcheck and autocast only.
      sum_row("linear_relu", "without bias", {sy({2, 3, N}), sy({3, N})}, [](const V& v) { return ag::linear_relu(v[0], v[1]); })
          .no_cuda(),
      // out_features 8 and 16 (multiples of 8): the CUDA GEMM takes the gelu epilogue.
      sum_row("linear_gelu", "3-D input, with bias", {sy({2, 3, N}), sy({8, N}), sy({8})},
              [](const V& v) { return ag::linear_gelu(v[0], v[1], v[2]); }),
      sum_row("linear_gelu", "without bias", {sy({2, 3, N}), sy({16, N})}, [](const V& v) { return ag::linear_gelu(v[0], v[1]); }),
      sum_row("linear_gelu", "out_features 5 (unfused on CUDA)", {sy({4, N}), sy({5, N}), sy({5})},
              [](const V& v) { return ag::linear_gelu(v[0], v[1], v[2]); }),

      // ---- Neural-network ops (cuDNN may pick Winograd or FFT algorithms: looser) ----------------
      image_row("conv2d", "bias, padding 1", {nrm({2, 3, N, N}), nrm({4, 3, 3, 3}), nrm({4})},
                [](const V& v) { return ag::conv2d(v[0], v[1], v[2], {1, 1}, {1, 1}); })
          .tolerance(Tol::sum, 32),
      row("conv2d", "stride 2, padding 1, no bias", {nrm({2, 2, 5, 4}), nrm({2, 2, 3, 3})},
          [](const V& v) { return ag::conv2d(v[0], v[1], {}, {2, 2}, {1, 1}); })
          .tolerance(Tol::sum, 32),
      row("conv2d", "dilation 2, groups 2", {nrm({1, 4, 5, 5}), nrm({2, 2, 2, 2}), nrm({2})},
          [](const V& v) { return ag::conv2d(v[0], v[1], v[2], {1, 1}, {0, 0}, {2, 2}, 2); })
          .tolerance(Tol::sum, 32),
      row("conv2d", "channels-last input, rectangular kernel", {In{{1, 2, 4, 5}, channels_last(normal())}, nrm({3, 2, 2, 3})},
          [](const V& v) { return ag::conv2d(v[0], v[1]); })
          .tolerance(Tol::sum, 32),
      row("conv1d", "bias, stride 2, padding 1", {nrm({2, 3, N}), nrm({4, 3, 3}), nrm({4})},
          [](const V& v) { return ag::conv1d(v[0], v[1], v[2], 2, 1); })
          .tolerance(Tol::sum, 32),
      row("conv1d", "dilation 2, groups 2, no bias", {nrm({1, 4, 9}), nrm({6, 2, 3})},
          [](const V& v) { return ag::conv1d(v[0], v[1], {}, 1, 0, 2, 2); })
          .tolerance(Tol::sum, 32),
      row("conv1d", "unbatched", {nrm({3, 7}), nrm({2, 3, 2})}, [](const V& v) { return ag::conv1d(v[0], v[1]); })
          .tolerance(Tol::sum, 32),
      row("conv3d", "bias, padding 1", {nrm({2, 2, 4, 4, 3}), nrm({3, 2, 3, 3, 2}), nrm({3})},
          [](const V& v) { return ag::conv3d(v[0], v[1], v[2], {1, 1, 1}, {1, 1, 1}); })
          .tolerance(Tol::sum, 32),
      row("conv3d", "stride (2,1,2), padding (0,1,1), dilation (1,2,1), groups 2", {nrm({1, 4, 5, 6, 5}), nrm({2, 2, 2, 2, 3})},
          [](const V& v) { return ag::conv3d(v[0], v[1], {}, {2, 1, 2}, {0, 1, 1}, {1, 2, 1}, 2); })
          .tolerance(Tol::sum, 32),
      row("conv_transpose1d", "bias, stride 2, padding 1, output_padding 1", {nrm({2, 3, N}), nrm({3, 2, 3}), nrm({2})},
          [](const V& v) { return ag::conv_transpose1d(v[0], v[1], v[2], 2, 1, 1); })
          .tolerance(Tol::sum, 32),
      row("conv_transpose1d", "groups 2, dilation 2", {nrm({1, 4, 6}), nrm({4, 3, 2})},
          [](const V& v) { return ag::conv_transpose1d(v[0], v[1], {}, 1, 0, 0, 2, 2); })
          .tolerance(Tol::sum, 32),
      image_row("conv_transpose2d", "bias, stride 2, padding 1, output_padding 1", {nrm({2, 3, N, N}), nrm({3, 4, 3, 3}), nrm({4})},
                [](const V& v) { return ag::conv_transpose2d(v[0], v[1], v[2], {2, 2}, {1, 1}, {1, 1}); })
          .tolerance(Tol::sum, 32),
      row("conv_transpose2d", "stride (1,2), padding (0,1), output_padding (0,1), groups 2, dilation (2,1)",
          {nrm({1, 4, 4, 5}), nrm({4, 1, 2, 3})},
          [](const V& v) { return ag::conv_transpose2d(v[0], v[1], {}, {1, 2}, {0, 1}, {0, 1}, 2, {2, 1}); })
          .tolerance(Tol::sum, 32),
      row("conv_transpose2d", "channels-last input", {In{{1, 2, 4, 5}, channels_last(normal())}, nrm({2, 3, 2, 2})},
          [](const V& v) { return ag::conv_transpose2d(v[0], v[1]); })
          .tolerance(Tol::sum, 32),
      row("conv_transpose3d", "bias, stride 2, padding (0,1,0), output_padding (1,0,1)",
          {nrm({1, 2, 3, 3, 2}), nrm({2, 3, 2, 3, 2}), nrm({3})},
          [](const V& v) { return ag::conv_transpose3d(v[0], v[1], v[2], {2, 2, 2}, {0, 1, 0}, {1, 0, 1}); })
          .tolerance(Tol::sum, 32),
      image_row("unfold", "2x3 window, stride (1,2), padding (1,0)", {nrm({2, 3, N, N})},
                [](const V& v) { return ag::unfold(v[0], ag::Window2d{2, 3, 1, 2, 1, 0, 1, 1}); }),
      row("unfold", "2x2 stride 2", {nrm({1, 2, 4, 4})}, [](const V& v) { return ag::unfold(v[0], ag::Window2d{2, 2, 2, 2, 0, 0, 1, 1}); }),
      row("unfold", "3x2 padding 1 (pad value 0.5), dilation 2 in w", {nrm({1, 1, 4, 5})},
          [](const V& v) { return ag::unfold(v[0], ag::Window2d{3, 2, 1, 1, 1, 1, 1, 2}, 0.5); }),
      image_row("max_pool2d", "2x2", {nrm({2, 3, N, N})}, [](const V& v) { return ag::max_pool2d(v[0], {2, 2}); }),
      row("max_pool2d", "3x3 stride 1 padding 1", {nrm({1, 1, 4, 4})},
          [](const V& v) { return ag::max_pool2d(v[0], {3, 3}, {1, 1}, {1, 1}); }),
      row("max_pool2d", "2x2 dilation 2", {nrm({1, 2, 5, 5})},
          [](const V& v) { return ag::max_pool2d(v[0], {2, 2}, {1, 1}, {0, 0}, {2, 2}); }),
      image_row("avg_pool2d", "3x3 stride 2 padding 1", {nrm({2, 3, N, N})},
                [](const V& v) { return ag::avg_pool2d(v[0], {3, 3}, {2, 2}, {1, 1}); }),
      row("avg_pool2d", "2x2", {nrm({1, 2, 4, 4})}, [](const V& v) { return ag::avg_pool2d(v[0], {2, 2}); }),
      image_row("adaptive_avg_pool2d", "to 3x2", {nrm({2, 3, N, N})}, [](const V& v) { return ag::adaptive_avg_pool2d(v[0], {3, 2}); }),
      row("adaptive_avg_pool2d", "to 1x1", {nrm({1, 2, 4, 4})}, [](const V& v) { return ag::adaptive_avg_pool2d(v[0], {1, 1}); }),
      row("adaptive_avg_pool2d", "5x5 to 2x3 (uneven, overlapping bins)", {nrm({1, 2, 5, 5})},
          [](const V& v) { return ag::adaptive_avg_pool2d(v[0], {2, 3}); }),
      // Running statistics are buffers (updated in place in training), not differentiated.
      row("batch_norm", "training, affine, running stats",
          {nrm({N, 3, 2, 2}), fixed(uni({3}, -0.1, 0.1)), fixed(pos({3})), pos({3}), sy({3})},
          [](const V& v) { return ag::batch_norm(v[0], v[1], v[2], v[3], v[4], true); })
          .at_sizes({1, 7, 1023}, 4)
          .tolerance(Tol::normalized),
      row("batch_norm", "training, no affine, 2-D input", {nrm({N, 3})},
          [](const V& v) { return ag::batch_norm(v[0], {}, {}, {}, {}, true); })
          .at_sizes({2, 7, 1023}, 5)
          .tolerance(Tol::normalized),
      row("batch_norm", "evaluation, affine", {nrm({2, 3, 2, 2}), fixed(nrm({3})), fixed(pos({3})), pos({3}), sy({3})},
          [](const V& v) { return ag::batch_norm(v[0], v[1], v[2], v[3], v[4], false); })
          .tolerance(Tol::normalized),
      row("layer_norm", "last dim, affine", {nrm({N, 6}), pos({6}), sy({6})},
          [](const V& v) { return ag::layer_norm(v[0], {6}, v[1], v[2]); })
          .tolerance(Tol::normalized),
      row("layer_norm", "last two dims of a transpose, no affine", {nrm({2, 3, 4})},
          [](const V& v) { return ag::layer_norm(v[0].transpose(1, 2), {4, 3}); })
          .tolerance(Tol::normalized),
      // Both outputs reach the loss: the norm's and the sum's gradients meet in the backward.
      row("add_layer_norm", "last dim, affine, both outputs", {nrm({N, 6}), nrm({N, 6}), pos({6}), sy({6})},
          [](const V& v) {
            const auto [y, s] = ag::add_layer_norm(v[0], v[1], {6}, v[2], v[3]);
            return y + s * 0.75;
          })
          .tolerance(Tol::normalized),
      // A float32 residual (constant) with 16-bit x: the sum is float32 (add's promotion).
      row("add_layer_norm", "rows of N, a float32 constant residual, no affine", {nrm({3, N}), fixed(nrm({3, N}))},
          [](const V& v) { return ag::add_layer_norm(v[0], v[1], {v[0].size(1)}).first; })
          .tolerance(Tol::normalized),
      // The same mask on every evaluation: the generator is reseeded before each draw.
      row("dropout", "p 0.3, fixed mask", {nrm({3, N})},
          [](const V& v) {
            ag::manual_seed(5);
            return ag::dropout(v[0], 0.3);
          }),
      row("dropout", "evaluation: identity", {nrm({3, N})}, [](const V& v) { return ag::dropout(v[0], 0.3, false) * 1.0; }),
      row("nll_loss", "of log_softmax", {sy({N, 5}), In{{N}, indices(5)}},
          [](const V& v) { return ag::nll_loss(ag::log_softmax(v[0], 1), v[1]); })
          .tolerance(Tol::normalized),
      row("nll_loss", "rows ignored (-100)", {nrm({N, 5}), In{{N}, targets(5, -100)}},
          [](const V& v) { return ag::nll_loss(v[0], v[1]); })
          .tolerance(Tol::normalized),
      row("nll_loss", "ignore_index -1", {nrm({N, 5}), In{{N}, targets(5, -1)}},
          [](const V& v) { return ag::nll_loss(v[0], v[1], -1); })
          .tolerance(Tol::normalized),
      row("cross_entropy", "label smoothing 0.1", {uni({N, 5}, -3, 3), In{{N}, indices(5)}},
          [](const V& v) { return ag::cross_entropy(v[0], v[1], 0.1); })
          .tolerance(Tol::normalized),
      row("cross_entropy", "no smoothing", {nrm({N, 3}), In{{N}, indices(3)}}, [](const V& v) { return ag::cross_entropy(v[0], v[1]); })
          .tolerance(Tol::normalized),
      row("cross_entropy", "rows ignored (-100), label smoothing 0.1", {nrm({N, 3}), In{{N}, targets(3, -100)}},
          [](const V& v) { return ag::cross_entropy(v[0], v[1], 0.1); })
          .tolerance(Tol::normalized),
      row("cross_entropy", "ignore_index -1, label smoothing 0.2", {nrm({N, 3}), In{{N}, targets(3, -1)}},
          [](const V& v) { return ag::cross_entropy(v[0], v[1], 0.2, -1); })
          .tolerance(Tol::normalized),
      // Class weights (a constant, in the input's dtype as PyTorch wants it), the reductions and
      // the spatial and one-sample shapes (Note [Classification shapes] in ops/loss.cpp).
      row("nll_loss", "spatial [2, 5, N], class weights, rows ignored", {nrm({2, 5, N}), In{{2, N}, targets(5, -100)}, fixed(pos({5}))},
          [](const V& v) { return ag::nll_loss(v[0], v[1], v[2].to(v[0].dtype())); })
          .tolerance(Tol::normalized),
      row("nll_loss", "reduction None, ignore_index -1", {nrm({N, 5}), In{{N}, targets(5, -1)}},
          [](const V& v) { return ag::nll_loss(v[0], v[1], ag::Tensor(), -1, ag::Reduction::None); }),
      row("nll_loss", "reduction Sum, class weights", {nrm({N, 4}), In{{N}, indices(4)}, fixed(pos({4}))},
          [](const V& v) { return ag::nll_loss(v[0], v[1], v[2].to(v[0].dtype()), -100, ag::Reduction::Sum); })
          .tolerance(Tol::normalized),
      row("nll_loss", "one sample [N]", {nrm({N}), In{{}, indices(N)}}, [](const V& v) { return ag::nll_loss(v[0], v[1]); }),
      row("cross_entropy", "spatial [N, 3, 2, 2], rows ignored", {nrm({N, 3, 2, 2}), In{{N, 2, 2}, targets(3, -100)}},
          [](const V& v) { return ag::cross_entropy(v[0], v[1]); })
          .tolerance(Tol::normalized),
      row("cross_entropy", "class weights, label smoothing 0.1", {nrm({N, 4}), In{{N}, targets(4, -100)}, fixed(pos({4}))},
          [](const V& v) { return ag::cross_entropy(v[0], v[1], v[2].to(v[0].dtype()), -100, ag::Reduction::Mean, 0.1); })
          .tolerance(Tol::normalized),
      row("cross_entropy", "spatial [2, 3, N], class weights, reduction None, label smoothing 0.2",
          {nrm({2, 3, N}), In{{2, N}, targets(3, -1)}, fixed(pos({3}))},
          [](const V& v) { return ag::cross_entropy(v[0], v[1], v[2].to(v[0].dtype()), -1, ag::Reduction::None, 0.2); })
          .tolerance(Tol::normalized),
      row("cross_entropy", "reduction Sum", {nrm({N, 3}), In{{N}, indices(3)}},
          [](const V& v) { return ag::cross_entropy(v[0], v[1], ag::Tensor(), -100, ag::Reduction::Sum); })
          .tolerance(Tol::normalized),
      row("mse_loss", "", {nrm({3, N}), nrm({3, N})}, [](const V& v) { return ag::mse_loss(v[0], v[1]); }).tolerance(Tol::normalized),
      row("binary_cross_entropy_with_logits", "logits away from 0, soft targets", {In{{3, N}, away({0}, 3)}, uni({3, N}, 0, 1)},
          [](const V& v) { return ag::binary_cross_entropy_with_logits(v[0], v[1]); })
          .tolerance(Tol::normalized),
      row("binary_cross_entropy", "probabilities in (0.05, 0.95), soft targets", {uni({3, N}, 0.05, 0.95), uni({3, N}, 0, 1)},
          [](const V& v) { return ag::binary_cross_entropy(v[0], v[1]); })
          .tolerance(Tol::normalized),

      // ---- Copies ------------------------------------------------------------------------------
      row("clone", "", {nrm({3, N})}, [](const V& v) { return v[0].clone(); }),
      row("clone", "of a transpose", {nrm({3, N})}, [](const V& v) { return v[0].t().clone(); }),
      row("clone", "contiguous() of a transpose", {nrm({3, N})}, [](const V& v) { return v[0].t().contiguous(); }),
      row("copy_", "into a transposed shape", {nrm({3, N})},
          [](const V& v) {
            ag::Tensor out = ag::empty(v[0].t().shape(), v[0].options());
            out.copy_(v[0].t());
            return out;
          }),
      row("copy_", "into a tracked tensor, broadcast source", {nrm({3, N}), nrm({N})},
          [](const V& v) {
            ag::Tensor y = v[0] * 2.0;
            y.copy_(v[1]);  // the old values get gradient 0 (Note [In-place autograd])
            return y + v[0];
          }),
      // In-place arithmetic on a tensor autograd tracks (Note [In-place autograd] in
      // ops/tensor_methods.cpp): the gradients of the out-of-place op.
      row("mul", "in place: mul_ of a tracked tensor by a tensor", {nrm({3, N}), nrm({3, N})},
          [](const V& v) {
            ag::Tensor y = v[0].clone();
            y.mul_(v[1]);
            return y;
          }),
      row("add", "in place: add_ with alpha, broadcast source", {nrm({3, N}), nrm({N})},
          [](const V& v) {
            ag::Tensor y = v[0].clone();
            y.add_(v[1], 0.5);
            return y;
          }),
      row("sub", "in place: sub_, then mul_ and div_ by scalars", {nrm({3, N}), nrm({3, N})},
          [](const V& v) {
            ag::Tensor y = v[0].clone();
            y.sub_(v[1]);
            y.mul_(3.0);
            y.div_(4.0);
            return y;
          }),
      // A cast to float64 and back is not gradcheckable in float64 (checked_by_hand).
      row("to", "to float64", {nrm({3, N})}, [](const V& v) { return v[0].to(ag::kFloat64) * 2; }).no_gradcheck(),
  };
  for (Row& r : nn_rows()) all.push_back(std::move(r));
  for (Row& r : product_rows()) all.push_back(std::move(r));
  for (Row& r : rnn_rows()) all.push_back(std::move(r));
  return all;
  }();
  return table;
}

}  // namespace op_table
