// The gradcheck table of tests/test_autograd.cpp: for every differentiable op of
// ag::op_registry(), one case per form (overload, shape, broadcast, layout), with input makers
// that draw fresh float64 leaves and keep away from kinks.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common.h"

namespace gradcheck_cases {

using V = std::vector<ag::Tensor>;
using Fn = std::function<ag::Tensor(const V&)>;

// ---- Input makers -------------------------------------------------------------------------
// Every maker draws fresh values from ag's generator; kinks are kept away from explicitly.

inline int64_t numel_of(const ag::Shape& s) { return ag::shape_numel(s); }

inline std::vector<double> normal(int64_t n, double scale = 1) {
  std::vector<double> v = ag::randn({n}, ag::kFloat64).to_vector<double>();
  for (double& x : v) x *= scale;
  return v;
}

inline std::vector<double> uniform(int64_t n, double lo, double hi) {
  std::vector<double> v = ag::rand({n}, ag::kFloat64).to_vector<double>();
  for (double& x : v) x = lo + (hi - lo) * x;
  return v;
}

// Moves every value closer than `margin` to one of `points` out to that distance (repeating
// until none is close), so that central differences never straddle a kink.
inline void shift_away(std::vector<double>& v, const std::vector<double>& points, double margin) {
  for (double& x : v) {
    for (int round = 0; round < 64; ++round) {
      bool moved = false;
      for (double p : points) {
        if (std::abs(x - p) < margin) {
          x = p + (x >= p ? margin : -margin) * 1.5;
          moved = true;
        }
      }
      if (!moved) break;
    }
  }
}

inline std::vector<double> normal_away(int64_t n, const std::vector<double>& points, double margin = 0.05) {
  std::vector<double> v = normal(n);
  shift_away(v, points, margin);
  return v;
}

enum class Layout { kContiguous, kTransposed, kStrided };

// A float64 leaf that requires grad, holding `v` in row-major order of `shape`.
// kTransposed: a 2-D leaf viewed through .t() (column-major strides).
// kStrided: every other element of a buffer twice as long in the last dim (the skipped
// elements hold 1e3, which would show up in any result that read them).
inline ag::Tensor leaf(const ag::Shape& shape, const std::vector<double>& v, Layout layout = Layout::kContiguous) {
  REQUIRE(static_cast<int64_t>(v.size()) == numel_of(shape));
  switch (layout) {
    case Layout::kContiguous:
      return ag::tensor(v, shape, ag::kFloat64).requires_grad_();
    case Layout::kTransposed: {
      REQUIRE(shape.size() == 2);
      const int64_t r = shape[0], c = shape[1];
      std::vector<double> buf(v.size());
      for (int64_t i = 0; i < r; ++i)
        for (int64_t j = 0; j < c; ++j) buf[j * r + i] = v[i * c + j];
      ag::Tensor t = ag::tensor(buf, {c, r}, ag::kFloat64).t().detach().requires_grad_();
      REQUIRE(!t.is_contiguous());
      return t;
    }
    case Layout::kStrided: {
      REQUIRE(!shape.empty());
      ag::Shape wide = shape;
      wide.back() *= 2;
      std::vector<double> buf(v.size() * 2, 1e3);
      for (size_t k = 0; k < v.size(); ++k) buf[2 * k] = v[k];
      ag::Tensor t = ag::tensor(buf, wide, ag::kFloat64).slice(-1, 0, wide.back(), 2).detach().requires_grad_();
      REQUIRE(!t.is_contiguous());
      return t;
    }
  }
  return {};
}

inline constexpr Layout kC = Layout::kContiguous;
inline constexpr Layout kT = Layout::kTransposed;
inline constexpr Layout kS = Layout::kStrided;

inline ag::Tensor N(const ag::Shape& s, Layout l = kC) { return leaf(s, normal(numel_of(s)), l); }
// Positive, away from 0: for log, sqrt, rsqrt, reciprocal, pow, div's denominator.
inline ag::Tensor P(const ag::Shape& s, Layout l = kC) { return leaf(s, uniform(numel_of(s), 0.5, 1.5), l); }
// Normal values kept away from the given kinks.
inline ag::Tensor A(const ag::Shape& s, const std::vector<double>& kinks, Layout l = kC) {
  return leaf(s, normal_away(numel_of(s), kinks), l);
}
// Nonzero with magnitude in [0.5, 1.5) and a random sign: for prod (no zeros) and division.
inline ag::Tensor NZ(const ag::Shape& s, Layout l = kC) {
  std::vector<double> v = uniform(numel_of(s), 0.5, 1.5), sign = uniform(numel_of(s), -1, 1);
  for (size_t i = 0; i < v.size(); ++i) v[i] = sign[i] < 0 ? -v[i] : v[i];
  return leaf(s, v, l);
}
// Two tensors whose values (after broadcasting) never tie: b's values are drawn first and
// a's are shifted away from every one of them.
inline V untied(const ag::Shape& sa, const ag::Shape& sb, Layout la = kC) {
  std::vector<double> b = normal(numel_of(sb));
  std::vector<double> a = normal_away(numel_of(sa), b, 0.05);
  return V{leaf(sa, a, la), leaf(sb, b)};
}

inline ag::Tensor bool_mask(const ag::Shape& s) { return ag::gt(ag::rand(s, ag::kFloat64), 0.5); }
inline ag::Tensor indices_of(std::vector<int64_t> v) { return ag::tensor(v); }

// ---- The gradcheck table --------------------------------------------------------------------

struct Case {
  std::string form;           // which overload / shape / layout this case exercises
  std::function<V()> inputs;  // fresh float64 leaves
  Fn fn;
};

using Table = std::map<std::string, std::vector<Case>>;

// One entry per differentiable op of ag::op_registry(), with one case per form of the op.
inline const Table& gradcheck_table() {
  static const Table table = [] {
    Table t;
    auto add = [&t](const std::string& op, std::string form, std::function<V()> in, Fn fn) {
      t[op].push_back(Case{std::move(form), std::move(in), std::move(fn)});
    };

    // Unary.
    add("neg", "[3,4]", [] { return V{N({3, 4})}; }, [](const V& v) { return ag::neg(v[0]); });
    add("neg", "transposed, operator-", [] { return V{N({3, 4}, kT)}; }, [](const V& v) { return -v[0]; });
    add("exp", "[3,4]", [] { return V{N({3, 4})}; }, [](const V& v) { return ag::exp(v[0]); });
    add("exp", "strided", [] { return V{N({3, 4}, kS)}; }, [](const V& v) { return v[0].exp(); });
    add("log", "positive", [] { return V{P({3, 4})}; }, [](const V& v) { return ag::log(v[0]); });
    add("log", "positive, transposed", [] { return V{P({3, 4}, kT)}; }, [](const V& v) { return v[0].log(); });
    add("log1p", "(-0.5, 1.5)", [] { return V{leaf({3, 4}, uniform(12, -0.5, 1.5))}; },
        [](const V& v) { return ag::log1p(v[0]); });
    add("sqrt", "positive", [] { return V{P({3, 4})}; }, [](const V& v) { return ag::sqrt(v[0]); });
    add("sqrt", "positive, strided", [] { return V{P({3, 4}, kS)}; }, [](const V& v) { return v[0].sqrt(); });
    add("rsqrt", "positive", [] { return V{P({3, 4})}; }, [](const V& v) { return ag::rsqrt(v[0]); });
    add("reciprocal", "away from 0, both signs", [] { return V{NZ({3, 4})}; },
        [](const V& v) { return ag::reciprocal(v[0]); });
    add("abs", "away from 0", [] { return V{A({3, 4}, {0})}; }, [](const V& v) { return ag::abs(v[0]); });
    add("abs", "away from 0, transposed", [] { return V{A({3, 4}, {0}, kT)}; }, [](const V& v) { return v[0].abs(); });
    add("relu", "away from 0", [] { return V{A({3, 4}, {0})}; }, [](const V& v) { return ag::relu(v[0]); });
    add("relu", "away from 0, strided", [] { return V{A({3, 4}, {0}, kS)}; }, [](const V& v) { return v[0].relu(); });
    add("gelu", "[3,4] x2", [] { return V{leaf({3, 4}, normal(12, 2))}; }, [](const V& v) { return ag::gelu(v[0]); });
    add("tanh", "[3,4] x2", [] { return V{leaf({3, 4}, normal(12, 2))}; }, [](const V& v) { return ag::tanh(v[0]); });
    add("sigmoid", "[3,4] x3", [] { return V{leaf({3, 4}, normal(12, 3))}; },
        [](const V& v) { return ag::sigmoid(v[0]); });
    add("softplus", "[3,4] x3", [] { return V{leaf({3, 4}, normal(12, 3))}; },
        [](const V& v) { return ag::softplus(v[0]); });
    add("clamp", "min and max, away from bounds", [] { return V{A({3, 4}, {-0.5, 0.5})}; },
        [](const V& v) { return ag::clamp(v[0], -0.5, 0.5); });
    add("clamp", "min only", [] { return V{A({3, 4}, {-0.2})}; },
        [](const V& v) { return ag::clamp(v[0], -0.2, std::nullopt); });
    add("clamp", "max only, transposed", [] { return V{A({3, 4}, {0.3}, kT)}; },
        [](const V& v) { return ag::clamp(v[0], std::nullopt, 0.3); });

    // Binary, with broadcasting and non-contiguous operands.
    add("add", "same shape", [] { return V{N({3, 4}), N({3, 4})}; }, [](const V& v) { return ag::add(v[0], v[1]); });
    add("add", "broadcast [3,1]+[4]", [] { return V{N({3, 1}), N({4})}; }, [](const V& v) { return v[0] + v[1]; });
    add("add", "transposed + strided", [] { return V{N({3, 4}, kT), N({3, 4}, kS)}; },
        [](const V& v) { return v[0] + v[1]; });
    add("add", "alpha 2.5", [] { return V{N({3, 4}), N({4})}; }, [](const V& v) { return ag::add(v[0], v[1], 2.5); });
    add("add", "scalar", [] { return V{N({3, 4})}; }, [](const V& v) { return v[0] + 1.5; });
    add("add", "0-dim + [3,4]", [] { return V{N({}), N({3, 4})}; }, [](const V& v) { return v[0] + v[1]; });
    add("sub", "same shape", [] { return V{N({3, 4}), N({3, 4})}; }, [](const V& v) { return ag::sub(v[0], v[1]); });
    add("sub", "broadcast [4]-[3,1]", [] { return V{N({4}), N({3, 1})}; }, [](const V& v) { return v[0] - v[1]; });
    add("sub", "alpha -2", [] { return V{N({3, 4}), N({3, 4}, kT)}; },
        [](const V& v) { return ag::sub(v[0], v[1], -2); });
    add("sub", "scalar", [] { return V{N({3, 4})}; }, [](const V& v) { return v[0] - 0.75; });
    add("rsub", "scalar - tensor", [] { return V{N({3, 4})}; }, [](const V& v) { return ag::rsub(v[0], 2.0); });
    add("rsub", "operator, strided", [] { return V{N({3, 4}, kS)}; }, [](const V& v) { return 3 - v[0]; });
    add("mul", "same shape", [] { return V{N({3, 4}), N({3, 4})}; }, [](const V& v) { return ag::mul(v[0], v[1]); });
    add("mul", "broadcast [2,3]*[3]", [] { return V{N({2, 3}), N({3})}; }, [](const V& v) { return v[0] * v[1]; });
    add("mul", "transposed * strided", [] { return V{N({3, 4}, kT), N({3, 4}, kS)}; },
        [](const V& v) { return v[0] * v[1]; });
    add("mul", "x * x (one input twice)", [] { return V{N({3, 4})}; }, [](const V& v) { return v[0] * v[0]; });
    add("mul", "scalar", [] { return V{N({3, 4})}; }, [](const V& v) { return v[0] * -1.5; });
    add("div", "same shape", [] { return V{N({3, 4}), NZ({3, 4})}; }, [](const V& v) { return ag::div(v[0], v[1]); });
    add("div", "broadcast [3,4]/[3,1]", [] { return V{N({3, 4}), NZ({3, 1})}; },
        [](const V& v) { return v[0] / v[1]; });
    add("div", "scalar denominator", [] { return V{N({3, 4})}; }, [](const V& v) { return v[0] / 4.0; });
    add("div", "scalar numerator (rdiv)", [] { return V{NZ({3, 4}, kT)}; }, [](const V& v) { return 2.0 / v[0]; });
    add("pow", "scalar 2, any sign", [] { return V{N({3, 4})}; }, [](const V& v) { return v[0].pow(2); });
    add("pow", "scalar 3, any sign", [] { return V{N({3, 4}, kS)}; }, [](const V& v) { return ag::pow(v[0], 3); });
    add("pow", "scalar 0.5, positive", [] { return V{P({3, 4})}; }, [](const V& v) { return ag::pow(v[0], 0.5); });
    add("pow", "scalar -1.5, positive", [] { return V{P({3, 4})}; }, [](const V& v) { return ag::pow(v[0], -1.5); });
    add("pow", "tensor exponent, broadcast [3,4]^[4]", [] { return V{P({3, 4}), N({4})}; },
        [](const V& v) { return ag::pow(v[0], v[1]); });
    add("pow", "tensor exponent, broadcast [3,1]^[3,4] transposed", [] { return V{P({3, 1}), N({3, 4}, kT)}; },
        [](const V& v) { return v[0].pow(v[1]); });
    add("maximum", "same shape, no ties", [] { return untied({3, 4}, {3, 4}); },
        [](const V& v) { return ag::maximum(v[0], v[1]); });
    add("maximum", "broadcast [3,1] vs [4], no ties", [] { return untied({3, 1}, {4}); },
        [](const V& v) { return ag::maximum(v[0], v[1]); });
    add("minimum", "same shape, no ties, transposed", [] { return untied({3, 4}, {3, 4}, kT); },
        [](const V& v) { return ag::minimum(v[0], v[1]); });
    add("minimum", "broadcast [3,1] vs [4], no ties", [] { return untied({3, 1}, {4}); },
        [](const V& v) { return ag::minimum(v[1], v[0]); });
    {
      ag::Tensor c34 = bool_mask({3, 4}), c4 = bool_mask({4});
      add("where", "same shape", [] { return V{N({3, 4}), N({3, 4})}; },
          [c34](const V& v) { return ag::where(c34, v[0], v[1]); });
      add("where", "broadcast cond [3,4], a [3,1], b [4]", [] { return V{N({3, 1}), N({4})}; },
          [c34](const V& v) { return ag::where(c34, v[0], v[1]); });
      add("where", "scalar other, cond [4] broadcast", [] { return V{N({3, 4}, kT)}; },
          [c4](const V& v) { return ag::where(c4, v[0], 0.5); });
    }

    // Reductions.
    add("sum", "all", [] { return V{N({3, 4})}; }, [](const V& v) { return v[0].sum(); });
    add("sum", "dim 1", [] { return V{N({3, 4})}; }, [](const V& v) { return ag::sum(v[0], {1}); });
    add("sum", "dim -1 keepdim, transposed", [] { return V{N({3, 4}, kT)}; },
        [](const V& v) { return ag::sum(v[0], {-1}, true); });
    add("sum", "dims {0,2} (non-adjacent)", [] { return V{N({2, 3, 4})}; },
        [](const V& v) { return ag::sum(v[0], {0, 2}); });
    add("sum", "dims {0,2} keepdim", [] { return V{N({2, 3, 4})}; },
        [](const V& v) { return ag::sum(v[0], {0, 2}, true); });
    add("mean", "all", [] { return V{N({3, 4})}; }, [](const V& v) { return v[0].mean(); });
    add("mean", "dim 0", [] { return V{N({3, 4}, kS)}; }, [](const V& v) { return ag::mean(v[0], {0}); });
    add("mean", "dims {0,2} keepdim", [] { return V{N({2, 3, 4})}; },
        [](const V& v) { return ag::mean(v[0], {0, 2}, true); });
    add("prod", "all, no zeros", [] { return V{NZ({2, 3})}; }, [](const V& v) { return ag::prod(v[0]); });
    add("prod", "dim 1", [] { return V{NZ({3, 4})}; }, [](const V& v) { return ag::prod(v[0], 1); });
    add("prod", "dim 0 keepdim, transposed", [] { return V{NZ({3, 4}, kT)}; },
        [](const V& v) { return ag::prod(v[0], 0, true); });
    add("var", "all", [] { return V{N({3, 4})}; }, [](const V& v) { return ag::var(v[0]); });
    add("var", "dim 1, correction 1", [] { return V{N({3, 4})}; }, [](const V& v) { return ag::var(v[0], {1}); });
    add("var", "dims {0,2}, correction 0, keepdim", [] { return V{N({2, 3, 4})}; },
        [](const V& v) { return ag::var(v[0], {0, 2}, 0, true); });
    add("logsumexp", "dim 1", [] { return V{N({3, 4})}; }, [](const V& v) { return ag::logsumexp(v[0], {1}); });
    add("logsumexp", "all", [] { return V{N({3, 4}, kT)}; }, [](const V& v) { return ag::logsumexp(v[0], {}); });
    add("logsumexp", "dims {0,2} keepdim", [] { return V{N({2, 3, 4})}; },
        [](const V& v) { return ag::logsumexp(v[0], {0, 2}, true); });
    add("max", "all", [] { return V{N({3, 4})}; }, [](const V& v) { return ag::max(v[0]); });
    add("max", "dim 1", [] { return V{N({3, 4})}; }, [](const V& v) { return ag::max(v[0], 1).first; });
    add("max", "dim 0 keepdim, transposed", [] { return V{N({3, 4}, kT)}; },
        [](const V& v) { return ag::max(v[0], 0, true).first; });
    add("min", "all", [] { return V{N({3, 4}, kS)}; }, [](const V& v) { return ag::min(v[0]); });
    add("min", "dim -1", [] { return V{N({2, 3, 4})}; }, [](const V& v) { return ag::min(v[0], -1).first; });
    add("min", "dim 1 keepdim", [] { return V{N({2, 3, 4})}; },
        [](const V& v) { return ag::min(v[0], 1, true).first; });
    add("softmax", "dim 1", [] { return V{N({3, 4})}; }, [](const V& v) { return ag::softmax(v[0], 1); });
    add("softmax", "dim 0, transposed", [] { return V{N({3, 4}, kT)}; },
        [](const V& v) { return ag::softmax(v[0], 0); });
    add("softmax", "dim -1 of 3-D", [] { return V{N({2, 3, 4})}; }, [](const V& v) { return ag::softmax(v[0], -1); });
    add("log_softmax", "dim 1", [] { return V{N({3, 4})}; }, [](const V& v) { return ag::log_softmax(v[0], 1); });
    add("log_softmax", "dim 0, strided", [] { return V{N({3, 4}, kS)}; },
        [](const V& v) { return ag::log_softmax(v[0], 0); });
    add("log_softmax", "dim 1 of 3-D", [] { return V{N({2, 3, 4})}; },
        [](const V& v) { return ag::log_softmax(v[0], 1); });

    // Shape ops.
    add("view", "[3,4] -> [2,6]", [] { return V{N({3, 4})}; }, [](const V& v) { return v[0].view({2, 6}); });
    add("view", "[2,3,4] -> [-1]", [] { return V{N({2, 3, 4})}; }, [](const V& v) { return ag::view(v[0], {-1}); });
    add("reshape", "contiguous", [] { return V{N({3, 4})}; }, [](const V& v) { return v[0].reshape({4, 3}); });
    add("reshape", "transposed (copies)", [] { return V{N({3, 4}, kT)}; },
        [](const V& v) { return v[0].reshape({2, -1}); });
    add("reshape", "flatten(1) of 3-D", [] { return V{N({2, 3, 4}, kS)}; }, [](const V& v) { return v[0].flatten(1); });
    add("transpose", "(0,2) of 3-D", [] { return V{N({2, 3, 4})}; }, [](const V& v) { return v[0].transpose(0, 2); });
    add("transpose", "t() of 2-D", [] { return V{N({3, 4})}; }, [](const V& v) { return ag::t(v[0]); });
    add("permute", "{2,0,1}", [] { return V{N({2, 3, 4})}; }, [](const V& v) { return v[0].permute({2, 0, 1}); });
    add("permute", "{1,0} of transposed", [] { return V{N({3, 4}, kT)}; },
        [](const V& v) { return ag::permute(v[0], {1, 0}); });
    add("slice", "dim 1 [1,4)", [] { return V{N({3, 5})}; }, [](const V& v) { return v[0].slice(1, 1, 4); });
    add("slice", "dim 1 step 2", [] { return V{N({3, 5})}; }, [](const V& v) { return ag::slice(v[0], 1, 0, 5, 2); });
    add("slice", "dim 0 step 3, negative start", [] { return V{N({7, 2}, kS)}; },
        [](const V& v) { return ag::slice(v[0], 0, -6, 7, 3); });
    add("slice", "narrow dim 0", [] { return V{N({5, 3})}; }, [](const V& v) { return v[0].narrow(0, 1, 3); });
    add("select", "dim 0", [] { return V{N({3, 4})}; }, [](const V& v) { return v[0].select(0, 1); });
    add("select", "dim -1, index -1, transposed", [] { return V{N({3, 4}, kT)}; },
        [](const V& v) { return ag::select(v[0], -1, -1); });
    add("expand", "[3,1] -> [2,3,4]", [] { return V{N({3, 1})}; }, [](const V& v) { return v[0].expand({2, 3, 4}); });
    add("expand", "[4,1] strided -> [2,4,3]", [] { return V{N({4, 1}, kS)}; },
        [](const V& v) { return v[0].expand({2, 4, 3}); });
    add("expand", "[4] -> [3,-1]", [] { return V{N({4})}; }, [](const V& v) { return ag::expand(v[0], {3, -1}); });
    add("squeeze", "dim 1 of [3,1,4]", [] { return V{N({3, 1, 4})}; }, [](const V& v) { return v[0].squeeze(1); });
    add("squeeze", "all dims of [1,3,1,2]", [] { return V{N({1, 3, 1, 2})}; },
        [](const V& v) { return ag::squeeze(v[0]); });
    add("unsqueeze", "dim 0", [] { return V{N({3, 4})}; }, [](const V& v) { return v[0].unsqueeze(0); });
    add("unsqueeze", "dim -1, transposed", [] { return V{N({3, 4}, kT)}; },
        [](const V& v) { return ag::unsqueeze(v[0], -1); });
    add("unsqueeze", "dim 1", [] { return V{N({3, 4})}; }, [](const V& v) { return ag::unsqueeze(v[0], 1); });
    add("cat", "dim 0, three inputs", [] { return V{N({2, 3}), N({1, 3}), N({3, 3}, kT)}; },
        [](const V& v) { return ag::cat({v[0], v[1], v[2]}, 0); });
    add("cat", "dim 1", [] { return V{N({3, 2}), N({3, 4}, kS)}; },
        [](const V& v) { return ag::cat({v[0], v[1]}, 1); });
    add("cat", "dim -1 of 3-D", [] { return V{N({2, 3, 1}), N({2, 3, 2})}; },
        [](const V& v) { return ag::cat({v[0], v[1]}, -1); });
    add("stack", "dim 0", [] { return V{N({3, 4}), N({3, 4}, kT)}; },
        [](const V& v) { return ag::stack({v[0], v[1]}, 0); });
    add("stack", "dim 1", [] { return V{N({3, 4}), N({3, 4}), N({3, 4})}; },
        [](const V& v) { return ag::stack({v[0], v[1], v[2]}, 1); });
    add("stack", "dim -1", [] { return V{N({3, 2}), N({3, 2}, kS)}; },
        [](const V& v) { return ag::stack({v[0], v[1]}, -1); });
    {
      ag::Tensor rep0 = indices_of({2, 0, 2, 1, 2}), rep1 = indices_of({3, 3, 0});
      add("index_select", "dim 0, repeated indices", [] { return V{N({3, 4})}; },
          [rep0](const V& v) { return ag::index_select(v[0], 0, rep0); });
      add("index_select", "dim 1, repeated indices, transposed", [] { return V{N({3, 4}, kT)}; },
          [rep1](const V& v) { return v[0].index_select(1, rep1); });
    }

    // Matmul family.
    add("mm", "[3,4]@[4,2]", [] { return V{N({3, 4}), N({4, 2})}; }, [](const V& v) { return ag::mm(v[0], v[1]); });
    add("mm", "transposed operands", [] { return V{N({3, 4}, kT), N({4, 2}, kT)}; },
        [](const V& v) { return v[0].mm(v[1]); });
    add("bmm", "[2,3,4]@[2,4,2]", [] { return V{N({2, 3, 4}), N({2, 4, 2})}; },
        [](const V& v) { return ag::bmm(v[0], v[1]); });
    add("bmm", "transposed inner dims", [] { return V{N({2, 4, 3}), N({2, 2, 4})}; },
        [](const V& v) { return ag::bmm(v[0].transpose(1, 2), v[1].transpose(1, 2)); });
    add("matmul", "1-D . 1-D", [] { return V{N({4}), N({4})}; }, [](const V& v) { return ag::matmul(v[0], v[1]); });
    add("matmul", "1-D @ 2-D", [] { return V{N({4}), N({4, 3})}; }, [](const V& v) { return ag::matmul(v[0], v[1]); });
    add("matmul", "2-D @ 1-D", [] { return V{N({3, 4}, kT), N({4})}; }, [](const V& v) { return v[0].matmul(v[1]); });
    add("matmul", "2-D @ 2-D", [] { return V{N({3, 4}), N({4, 2}, kS)}; },
        [](const V& v) { return ag::matmul(v[0], v[1]); });
    add("matmul", "3-D @ 3-D", [] { return V{N({2, 3, 4}), N({2, 4, 2})}; },
        [](const V& v) { return ag::matmul(v[0], v[1]); });
    add("matmul", "3-D @ 2-D", [] { return V{N({2, 3, 4}), N({4, 2})}; },
        [](const V& v) { return ag::matmul(v[0], v[1]); });
    add("matmul", "1-D @ 3-D", [] { return V{N({4}), N({2, 4, 3})}; },
        [](const V& v) { return ag::matmul(v[0], v[1]); });
    add("matmul", "3-D @ 1-D", [] { return V{N({2, 3, 4}), N({4})}; },
        [](const V& v) { return ag::matmul(v[0], v[1]); });
    add("matmul", "broadcast batch [2,1,3,4]@[3,4,2]", [] { return V{N({2, 1, 3, 4}), N({3, 4, 2})}; },
        [](const V& v) { return ag::matmul(v[0], v[1]); });
    add("addmm", "c [3,2]", [] { return V{N({3, 2}), N({3, 4}), N({4, 2})}; },
        [](const V& v) { return ag::addmm(v[0], v[1], v[2]); });
    add("addmm", "c [2] broadcast, beta 0.5, alpha 2", [] { return V{N({2}), N({3, 4}), N({4, 2})}; },
        [](const V& v) { return ag::addmm(v[0], v[1], v[2], 0.5, 2); });
    add("addmm", "c [3,1], beta 0, alpha -1, transposed mat1", [] { return V{N({3, 1}), N({3, 4}, kT), N({4, 2})}; },
        [](const V& v) { return ag::addmm(v[0], v[1], v[2], 0, -1); });
    add("linear", "with bias", [] { return V{N({3, 4}), N({2, 4}), N({2})}; },
        [](const V& v) { return ag::linear(v[0], v[1], v[2]); });
    add("linear", "without bias", [] { return V{N({3, 4}), N({2, 4})}; },
        [](const V& v) { return ag::linear(v[0], v[1]); });
    add("linear", "3-D input, transposed weight", [] { return V{N({2, 3, 4}), N({2, 4}, kT), N({2})}; },
        [](const V& v) { return ag::linear(v[0], v[1], v[2]); });
    add("linear_relu", "with bias", [] { return V{N({5, 4}), N({3, 4}), N({3})}; },
        [](const V& v) { return ag::linear_relu(v[0], v[1], v[2]); });
    add("linear_relu", "without bias, 3-D input", [] { return V{N({2, 3, 4}), N({3, 4})}; },
        [](const V& v) { return ag::linear_relu(v[0], v[1]); });

    // Neural-network ops (ops/nn_ops.h).
    add("conv2d", "bias, stride 1", [] { return V{N({1, 2, 5, 5}), N({3, 2, 3, 3}), N({3})}; },
        [](const V& v) { return ag::conv2d(v[0], v[1], v[2]); });
    add("conv2d", "stride 2, padding 1, no bias, batch 2", [] { return V{N({2, 2, 5, 4}), N({2, 2, 3, 3})}; },
        [](const V& v) { return ag::conv2d(v[0], v[1], {}, {2, 2}, {1, 1}); });
    add("conv2d", "dilation 2, groups 2", [] { return V{N({1, 4, 5, 5}), N({2, 2, 2, 2}), N({2})}; },
        [](const V& v) { return ag::conv2d(v[0], v[1], v[2], {1, 1}, {0, 0}, {2, 2}, 2); });
    add("conv2d", "channels-last input, rectangular kernel",
        [] {
          ag::Tensor x = ag::randn({1, 4, 5, 2}, ag::kFloat64).permute({0, 3, 1, 2}).detach().requires_grad_();
          return V{x, N({3, 2, 2, 3})};
        },
        [](const V& v) { return ag::conv2d(v[0], v[1]); });
    add("unfold", "2x2 stride 2", [] { return V{N({1, 2, 4, 4})}; },
        [](const V& v) { return ag::unfold(v[0], ag::Window2d{2, 2, 2, 2, 0, 0, 1, 1}); });
    add("unfold", "3x3 padding 1 (pad value 0.5), dilation 2 in w", [] { return V{N({1, 1, 4, 5})}; },
        [](const V& v) { return ag::unfold(v[0], ag::Window2d{3, 2, 1, 1, 1, 1, 1, 2}, 0.5); });
    add("max_pool2d", "2x2", [] { return V{N({1, 2, 4, 4})}; },
        [](const V& v) { return ag::max_pool2d(v[0], {2, 2}); });
    add("max_pool2d", "3x3 stride 1 padding 1", [] { return V{N({1, 1, 4, 4})}; },
        [](const V& v) { return ag::max_pool2d(v[0], {3, 3}, {1, 1}, {1, 1}); });
    add("max_pool2d", "2x2 dilation 2, strided input", [] { return V{N({1, 2, 5, 5}, kS)}; },
        [](const V& v) { return ag::max_pool2d(v[0], {2, 2}, {1, 1}, {0, 0}, {2, 2}); });
    add("avg_pool2d", "2x2", [] { return V{N({1, 2, 4, 4})}; },
        [](const V& v) { return ag::avg_pool2d(v[0], {2, 2}); });
    add("avg_pool2d", "3x3 stride 2 padding 1", [] { return V{N({2, 1, 5, 4})}; },
        [](const V& v) { return ag::avg_pool2d(v[0], {3, 3}, {2, 2}, {1, 1}); });
    add("adaptive_avg_pool2d", "to 1x1", [] { return V{N({1, 2, 4, 4})}; },
        [](const V& v) { return ag::adaptive_avg_pool2d(v[0], {1, 1}); });
    add("adaptive_avg_pool2d", "5x5 to 2x3 (uneven, overlapping bins)", [] { return V{N({1, 2, 5, 5})}; },
        [](const V& v) { return ag::adaptive_avg_pool2d(v[0], {2, 3}); });
    {
      // Running statistics are buffers (updated in place in training), not gradcheck inputs.
      ag::Tensor rm = ag::randn({3}, ag::kFloat64), rv = ag::rand({3}, ag::kFloat64) + 0.5;
      add("batch_norm", "training, affine, running stats", [] { return V{N({4, 3, 2, 2}), N({3}), N({3})}; },
          [rm, rv](const V& v) { return ag::batch_norm(v[0], rm, rv, v[1], v[2], true); });
      add("batch_norm", "training, no affine, 2-D input", [] { return V{N({5, 3})}; },
          [](const V& v) { return ag::batch_norm(v[0], {}, {}, {}, {}, true); });
      add("batch_norm", "evaluation, affine", [] { return V{N({2, 3, 2, 2}), N({3}), N({3})}; },
          [rm, rv](const V& v) { return ag::batch_norm(v[0], rm, rv, v[1], v[2], false); });
    }
    add("layer_norm", "last dim, affine", [] { return V{N({3, 4}), N({4}), N({4})}; },
        [](const V& v) { return ag::layer_norm(v[0], {4}, v[1], v[2]); });
    add("layer_norm", "last two dims, no affine, transposed", [] { return V{N({2, 3, 4})}; },
        [](const V& v) { return ag::layer_norm(v[0].transpose(1, 2), {4, 3}); });
    // The same mask on every evaluation: the generator is reseeded before each draw.
    add("dropout", "p 0.3, fixed mask", [] { return V{N({4, 5})}; },
        [](const V& v) {
          ag::manual_seed(5);
          return ag::dropout(v[0], 0.3);
        });
    add("dropout", "evaluation: identity", [] { return V{N({4, 5})}; },
        [](const V& v) { return ag::dropout(v[0], 0.3, false) * 1.0; });
    {
      ag::Tensor target = indices_of({2, 0, 1, 2}), ignored = indices_of({2, -100, 1, 0});
      add("nll_loss", "4 rows, 3 classes", [] { return V{N({4, 3})}; },
          [target](const V& v) { return ag::nll_loss(v[0], target); });
      add("nll_loss", "one row ignored", [] { return V{N({4, 3})}; },
          [ignored](const V& v) { return ag::nll_loss(v[0], ignored); });
      ag::Tensor ignored_m1 = indices_of({-1, 0, 2, -1});
      add("nll_loss", "ignore_index -1", [] { return V{N({4, 3})}; },
          [ignored_m1](const V& v) { return ag::nll_loss(v[0], ignored_m1, -1); });
      add("cross_entropy", "ignore_index -1, label smoothing 0.2", [] { return V{N({4, 3})}; },
          [ignored_m1](const V& v) { return ag::cross_entropy(v[0], ignored_m1, 0.2, -1); });
      add("cross_entropy", "4 rows, 3 classes", [] { return V{N({4, 3})}; },
          [target](const V& v) { return ag::cross_entropy(v[0], target); });
      add("cross_entropy", "label smoothing 0.1, one row ignored, transposed", [] { return V{N({4, 3}, kT)}; },
          [ignored](const V& v) { return ag::cross_entropy(v[0], ignored, 0.1); });
    }
    add("mse_loss", "input and target", [] { return V{N({3, 4}), N({3, 4}, kT)}; },
        [](const V& v) { return ag::mse_loss(v[0], v[1]); });
    add("binary_cross_entropy_with_logits", "logits away from 0, soft targets",
        [] { return V{A({3, 4}, {0}), leaf({3, 4}, uniform(12, 0, 1))}; },
        [](const V& v) { return ag::binary_cross_entropy_with_logits(v[0], v[1]); });
    add("binary_cross_entropy", "probabilities in (0.1, 0.9), soft targets",
        [] { return V{leaf({3, 4}, uniform(12, 0.1, 0.9)), leaf({3, 4}, uniform(12, 0, 1))}; },
        [](const V& v) { return ag::binary_cross_entropy(v[0], v[1]); });

    // Copies (`to` between dtypes is checked by hand: see the "to" test case).
    add("clone", "contiguous", [] { return V{N({3, 4})}; }, [](const V& v) { return v[0].clone(); });
    add("clone", "contiguous() of transposed", [] { return V{N({3, 4}, kT)}; },
        [](const V& v) { return v[0].contiguous(); });
    return t;
  }();
  return table;
}

// Differentiable ops checked by a dedicated test case instead of gradcheck, with the reason.
inline const std::map<std::string, std::string>& checked_by_hand() {
  static const std::map<std::string, std::string> m = {
      {"to", "a float64 -> float32 cast is not gradcheckable in float64; see TEST_CASE \"to: ...\""},
  };
  return m;
}

}  // namespace gradcheck_cases
