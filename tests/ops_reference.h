// Float64 references for tests/test_ops.cpp, computed with plain loops (index arithmetic,
// broadcasting, reductions grouped by kept index, NumPy matmul), and its input makers and
// tolerances (atol + rtol * eps(dtype)).
#pragma once

#include <algorithm>
#include <functional>
#include <vector>

#include "common.h"

namespace ops_reference {

using Shape = ag::Shape;
using Vec = std::vector<double>;

inline constexpr ag::DType kFloatTypes[] = {ag::kFloat32, ag::kFloat16, ag::kBFloat16};

inline Vec vals(const ag::Tensor& t) { return t.to_vector<double>(); }

// ---- Index arithmetic for the references (row-major) ----------------------------------------

inline Shape unravel(int64_t flat, const Shape& shape) {
  Shape idx(shape.size(), 0);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return idx;
}

inline int64_t ravel(const Shape& idx, const Shape& shape) {
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + idx[d];
  return flat;
}

// Flat index into an input of shape `in` for the element `out_idx` of the broadcast result.
inline int64_t bcast_flat(const Shape& out_idx, const Shape& in) {
  const size_t lead = out_idx.size() - in.size();
  int64_t flat = 0;
  for (size_t d = 0; d < in.size(); ++d) flat = flat * in[d] + (in[d] == 1 ? 0 : out_idx[lead + d]);
  return flat;
}

inline Shape bcast_shape(const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    out[i] = x == 1 ? y : x;
  }
  return out;
}

// ref[i] = f(multi-index i) over every element of `shape`.
inline Vec build(const Shape& shape, const std::function<double(const Shape&)>& f) {
  Vec out(static_cast<size_t>(ag::shape_numel(shape)));
  for (size_t i = 0; i < out.size(); ++i) out[i] = f(unravel(static_cast<int64_t>(i), shape));
  return out;
}

// ---- Inputs ---------------------------------------------------------------------------------

// Uniform in [lo, hi), drawn in float64 and rounded to `d`: the reference reads back exactly
// the values the op sees.
inline ag::Tensor uni(const Shape& s, double lo, double hi, ag::DType d = ag::kFloat32) {
  return (ag::rand(s, ag::kFloat64) * (hi - lo) + lo).to(d);
}
inline ag::Tensor normal(const Shape& s, ag::DType d = ag::kFloat32, double scale = 1) {
  return (ag::randn(s, ag::kFloat64) * scale).to(d);
}
// The same draws as a non-contiguous view: the last two dims are stored transposed.
inline ag::Tensor transposed_view(ag::Tensor stored) {
  ag::Tensor t = stored.transpose(-1, -2);
  REQUIRE(!t.is_contiguous());
  return t;
}
inline ag::Tensor uni_t(const Shape& s, double lo, double hi, ag::DType d = ag::kFloat32) {
  Shape st = s;
  std::swap(st[st.size() - 1], st[st.size() - 2]);
  return transposed_view(uni(st, lo, hi, d));
}
inline ag::Tensor normal_t(const Shape& s, ag::DType d = ag::kFloat32) {
  Shape st = s;
  std::swap(st[st.size() - 1], st[st.size() - 2]);
  return transposed_view(normal(st, d));
}
// Every other element of the last dim of a wider tensor.
inline ag::Tensor normal_strided(const Shape& s, ag::DType d = ag::kFloat32) {
  Shape wide = s;
  wide.back() *= 2;
  ag::Tensor t = normal(wide, d).slice(-1, 1, wide.back(), 2);
  REQUIRE(!t.is_contiguous());
  return t;
}

struct Tol {
  double atol, rtol;
};
// Results are computed in float (or double) and rounded once to the output dtype.
inline Tol tol(ag::DType d, double ulps = 2) {
  if (d == ag::kFloat64) return {1e-12, 8 * eps_of(d)};
  if (d == ag::kFloat32) return {1e-6, 2 * ulps * eps_of(d)};
  return {1e-5, ulps * eps_of(d)};
}
inline void check_vs(const ag::Tensor& got, const Vec& ref, ag::DType d, double ulps = 2) {
  const Tol t = tol(d, ulps);
  check_close(got, ref, t.atol, t.rtol);
}

// ---- Reductions ----------------------------------------------------------------------------

// Groups the elements of x (shape `shape`) by their position outside the reduced dims; each
// group lists its elements in row-major order (so a single reduced dim is in index order).
struct Groups {
  Shape out_shape;
  std::vector<Vec> g;
};
inline Groups group_by(const Vec& x, const Shape& shape, Shape dims, bool keepdim) {
  const int64_t n = static_cast<int64_t>(shape.size());
  std::vector<bool> red(shape.size(), dims.empty());
  for (int64_t d : dims) red[d < 0 ? d + n : d] = true;
  Groups out;
  Shape kept;
  for (int64_t d = 0; d < n; ++d) {
    if (!red[d]) kept.push_back(shape[d]);
    if (!red[d] || keepdim) out.out_shape.push_back(red[d] ? 1 : shape[d]);
  }
  out.g.resize(static_cast<size_t>(ag::shape_numel(kept)));
  for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i) {
    Shape idx = unravel(i, shape), kidx;
    for (int64_t d = 0; d < n; ++d)
      if (!red[d]) kidx.push_back(idx[d]);
    out.g[ravel(kidx, kept)].push_back(x[i]);
  }
  return out;
}

inline Vec reduce_ref(const Groups& gr, const std::function<double(const Vec&)>& f) {
  Vec out;
  for (const Vec& g : gr.g) out.push_back(f(g));
  return out;
}

inline double ref_sum(const Vec& g) {
  double s = 0;
  for (double v : g) s += v;
  return s;
}
inline double ref_mean(const Vec& g) { return ref_sum(g) / static_cast<double>(g.size()); }
inline double ref_prod(const Vec& g) {
  double p = 1;
  for (double v : g) p *= v;
  return p;
}
inline double ref_var(const Vec& g, double correction) {
  const double m = ref_mean(g);
  double ss = 0;
  for (double v : g) ss += (v - m) * (v - m);
  return ss / (static_cast<double>(g.size()) - correction);
}
inline double ref_logsumexp(const Vec& g) {
  const double m = *std::max_element(g.begin(), g.end());
  double s = 0;
  for (double v : g) s += std::exp(v - m);
  return m + std::log(s);
}
inline double ref_argmax(const Vec& g) { return static_cast<double>(std::max_element(g.begin(), g.end()) - g.begin()); }
inline double ref_argmin(const Vec& g) { return static_cast<double>(std::min_element(g.begin(), g.end()) - g.begin()); }

// ---- Matmul ---------------------------------------------------------------------------------

// NumPy matmul in float64: 1-D operands are promoted and their dim dropped, batch dims broadcast.
inline Vec ref_matmul(const Vec& a, Shape sa, const Vec& b, Shape sb, Shape* out_shape) {
  const bool a1 = sa.size() == 1, b1 = sb.size() == 1;
  if (a1) sa.insert(sa.begin(), 1);
  if (b1) sb.push_back(1);
  const int64_t m = sa[sa.size() - 2], k = sa.back(), n = sb.back();
  REQUIRE(sb[sb.size() - 2] == k);
  const Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  const Shape batch = bcast_shape(ba, bb);
  Vec out;
  for (int64_t bi = 0; bi < ag::shape_numel(batch); ++bi) {
    const Shape bidx = unravel(bi, batch);
    const int64_t oa = bcast_flat(bidx, ba) * m * k, ob = bcast_flat(bidx, bb) * k * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t kk = 0; kk < k; ++kk) s += a[oa + i * k + kk] * b[ob + kk * n + j];
        out.push_back(s);
      }
  }
  *out_shape = batch;
  if (!a1) out_shape->push_back(m);
  if (!b1) out_shape->push_back(n);
  return out;
}

// float32 and 16-bit inputs accumulate in float32: allow K roundings of the running sum.
inline Tol matmul_tol(ag::DType d, int64_t k) {
  if (d == ag::kFloat64) return {1e-12, 1e-12};
  return {static_cast<double>(k) * 2e-6, 2 * eps_of(d)};
}

}  // namespace ops_reference
