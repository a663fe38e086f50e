// The op table's machinery (Note [Op table] in tests/op_table.h): the value draws, the rows'
// shapes and draws, the registry walks and the layouts. The rows are in tests/op_rows.cpp.
#include "op_table.h"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>

namespace op_table {

namespace {

std::vector<double> values_of(const ag::Tensor& t) { return t.to_vector<double>(); }
ag::Tensor f64(const std::vector<double>& v, const ag::Shape& s) { return ag::tensor(v, s, ag::kFloat64); }

// Moves every value closer than `margin` to one of `points` out to 1.5 margins (repeating
// until none is close). Points are searched sorted: rows draw up to 200k values.
void shift_away(std::vector<double>& v, std::vector<double> points, double margin) {
  std::sort(points.begin(), points.end());
  auto near = [&](double x) -> const double* {
    auto it = std::lower_bound(points.begin(), points.end(), x - margin);
    return it != points.end() && std::abs(*it - x) < margin ? &*it : nullptr;
  };
  for (double& x : v) {
    for (int round = 0; round < 64; ++round) {
      const double* p = near(x);
      if (p == nullptr) break;
      x = *p + (x >= *p ? margin : -margin) * 1.5;
    }
  }
}

}  // namespace

Draw normal(double scale) {
  return [scale](const ag::Shape& s, int64_t, const V&) { return ag::randn(s, ag::kFloat64) * scale; };
}
Draw uniform(double lo, double hi) {
  return [lo, hi](const ag::Shape& s, int64_t, const V&) { return ag::rand(s, ag::kFloat64) * (hi - lo) + lo; };
}
Draw away(std::vector<double> kinks, double scale, double margin) {
  return [kinks, scale, margin](const ag::Shape& s, int64_t, const V&) {
    std::vector<double> v = values_of(ag::randn(s, ag::kFloat64) * scale);
    shift_away(v, kinks, margin);
    return f64(v, s);
  };
}
Draw nonzero() {
  return [](const ag::Shape& s, int64_t, const V&) {
    ag::Tensor mag = ag::rand(s, ag::kFloat64) + 0.5;
    return ag::where(ag::lt(ag::rand(s, ag::kFloat64), 0.5), -mag, mag);
  };
}
Draw near_one() {
  return [](const ag::Shape& s, int64_t, const V&) {
    ag::Tensor mag = ag::rand(s, ag::kFloat64) * 0.02 + 0.99;
    return ag::where(ag::lt(ag::rand(s, ag::kFloat64), 0.5), -mag, mag);
  };
}
Draw untied(size_t i) {
  return [i](const ag::Shape& s, int64_t, const V& earlier) {
    REQUIRE(i < earlier.size());
    std::vector<double> v = values_of(ag::randn(s, ag::kFloat64));
    // Beyond a few thousand values no draw keeps 0.05 from all of them; the sizes that large
    // (the CUDA check's) compare one formula on both devices, which treat ties alike.
    if (earlier[i].numel() <= 4096) shift_away(v, values_of(earlier[i]), 0.05);
    return f64(v, s);
  };
}
Draw distinct(int64_t bound) {
  return [bound](const ag::Shape& s, int64_t n, const V&) {
    const int64_t b = bound == N ? n : bound;
    const int64_t count = ag::shape_numel(s);
    REQUIRE(count <= b);
    std::vector<int64_t> perm(static_cast<size_t>(b));
    for (int64_t i = 0; i < b; ++i) perm[i] = i;
    std::mt19937 rng(static_cast<uint32_t>(b * 31 + count));
    std::shuffle(perm.begin(), perm.end(), rng);
    perm.resize(static_cast<size_t>(count));
    return ag::tensor(perm, s);
  };
}
Draw labels() {
  return [](const ag::Shape& s, int64_t, const V&) {
    return ag::where(ag::lt(ag::rand(s, ag::kFloat64), 0.5), ag::full(s, -1.0, ag::kFloat64), ag::ones(s, ag::kFloat64));
  };
}
Draw shifted(size_t i, Draw by) {
  return [i, by](const ag::Shape& s, int64_t n, const V& earlier) {
    REQUIRE(i < earlier.size());
    return earlier[i].to(ag::kFloat64) + by(s, n, earlier);
  };
}
Draw with_zeros() {
  return [](const ag::Shape& s, int64_t n, const V& earlier) {
    std::vector<double> v = values_of(nonzero()(s, n, earlier));
    for (size_t k = 1; k < v.size(); k += 3) v[k] = 0;
    return f64(v, s);
  };
}
Draw multilabel(int64_t classes) {
  return [classes](const ag::Shape& s, int64_t, const V&) {
    REQUIRE((!s.empty() && s.back() == classes));
    std::vector<int64_t> t(static_cast<size_t>(ag::shape_numel(s)));
    std::mt19937 rng(static_cast<uint32_t>(t.size() * 7 + 3));
    for (size_t row = 0; row < t.size() / classes; ++row) {
      std::vector<int64_t> perm(classes);
      for (int64_t c = 0; c < classes; ++c) perm[c] = c;
      std::shuffle(perm.begin(), perm.end(), rng);
      const int64_t k = static_cast<int64_t>(rng() % classes);  // 0 .. C-1 targets, then -1
      for (int64_t c = 0; c < classes; ++c)
        t[row * classes + c] = c < k ? perm[c] : (c == k ? -1 : static_cast<int64_t>(rng() % classes));
    }
    return ag::tensor(t, s);
  };
}
Draw indices(int64_t bound) {
  return [bound](const ag::Shape& s, int64_t n, const V&) {
    const int64_t b = bound == N ? n : bound;
    return (ag::rand(s, ag::kFloat64) * static_cast<double>(b)).to(ag::kInt64);
  };
}
Draw targets(int64_t classes, int64_t ignored) {
  return [classes, ignored](const ag::Shape& s, int64_t, const V&) {
    std::vector<int64_t> t = (ag::rand(s, ag::kFloat64) * static_cast<double>(classes)).to(ag::kInt64).to_vector<int64_t>();
    for (size_t i = 1; i < t.size(); i += 4) t[i] = ignored;
    return ag::tensor(t, s);
  };
}
Draw mask() {
  return [](const ag::Shape& s, int64_t, const V&) { return ag::gt(ag::rand(s, ag::kFloat64), 0.5); };
}
Draw divisor_of(size_t i) {
  return [i](const ag::Shape& s, int64_t n, const V& earlier) {
    REQUIRE(i < earlier.size());
    if (earlier[i].shape() != s) return nonzero()(s, n, earlier);
    const ag::Tensor k = (ag::rand(s, ag::kFloat64) * 3).to(ag::kInt64).to(ag::kFloat64);  // 0, 1 or 2
    const ag::Tensor q = k + ag::rand(s, ag::kFloat64) * 0.7 + 0.15;
    const ag::Tensor sign = ag::where(ag::lt(ag::rand(s, ag::kFloat64), 0.5), -ag::ones_like(q), ag::ones_like(q));
    return earlier[i] / q * sign;
  };
}
Draw far_bias() {
  return [](const ag::Shape& s, int64_t, const V& earlier) {
    REQUIRE(!earlier.empty());
    const double b = 2 * std::sqrt(static_cast<double>(earlier[0].size(-1)));
    std::vector<double> v(static_cast<size_t>(ag::shape_numel(s)));
    for (size_t i = 0; i < v.size(); ++i) v[i] = i % 2 ? -b : b;
    return f64(v, s);
  };
}
Draw channels_last(Draw inner) {
  return [inner](const ag::Shape& s, int64_t n, const V& earlier) {
    ag::Tensor t = inner(s, n, earlier).to_channels_last();
    REQUIRE(!t.is_contiguous());
    return t;
  };
}

Row& Row::at_sizes(std::vector<int64_t> s, int64_t gradcheck_n) {
  sizes = std::move(s);
  n = gradcheck_n;
  return *this;
}
Row& Row::tolerance(Tol t, double scale) {
  tol = t;
  tol_scale = scale;
  return *this;
}
Row& Row::reference(std::function<double(double)> f) {
  ref = [f](const std::vector<double>& v) { return f(v[0]); };
  return *this;
}
Row& Row::reference(std::function<double(double, double)> f) {
  ref = [f](const std::vector<double>& v) { return f(v[0], v[1]); };
  return *this;
}

ag::Shape Row::shape(size_t i, int64_t size) const {
  ag::Shape s = in.at(i).shape;
  for (int64_t& d : s)
    if (d == N) d = size;
  return s;
}
bool Row::sized() const {
  for (const In& i : in)
    if (std::count(i.shape.begin(), i.shape.end(), N)) return true;
  return false;
}
V Row::draw_shapes(const std::vector<ag::Shape>& shapes, int64_t size) const {
  V out;
  for (size_t i = 0; i < in.size(); ++i) out.push_back(in[i].draw(shapes[i], size, out));
  return out;
}
V Row::draw(int64_t size) const {
  std::vector<ag::Shape> shapes;
  for (size_t i = 0; i < in.size(); ++i) shapes.push_back(shape(i, size));
  return draw_shapes(shapes, size);
}

const std::map<std::string, std::string>& checked_by_hand() {
  static const std::map<std::string, std::string> m = {
      {"to", "a float64 -> float32 cast is not gradcheckable in float64; see TEST_CASE \"to: ...\""},
  };
  return m;
}

std::vector<const ag::OpInfo*> library_ops() {
  // A record lives in libampgrad when dladdr finds it in the object that defines op_registry.
  Dl_info lib{};
  REQUIRE(dladdr(reinterpret_cast<const void*>(&ag::op_registry), &lib) != 0);
  std::vector<const ag::OpInfo*> ops;
  for (const ag::OpInfo* op : ag::op_registry()) {
    Dl_info rec{};
    if (dladdr(op, &rec) != 0 && rec.dli_fbase == lib.dli_fbase) ops.push_back(op);
  }
  return ops;
}

std::vector<std::string> ops_without(Check c) {
  std::vector<std::string> missing;
  for (const ag::OpInfo* op : library_ops()) {
    const std::string name(op->name);
    if (c == Check::gradcheck && (!op->differentiable || checked_by_hand().count(name))) continue;
    // float8 operands do not come from the table's floating inputs.
    if (name == "scaled_mm") continue;  // tests/test_float8.cpp: against float64 on the CPU and CUDA
    const bool covered = std::any_of(rows().begin(), rows().end(), [&](const Row& r) {
      return r.op == name && (c == Check::gradcheck ? r.gradcheck : (c == Check::cuda ? r.cuda : r.autocast));
    });
    if (!covered) missing.push_back(name);
  }
  return missing;
}

std::vector<std::string> stale_rows() {
  std::vector<std::string> stale;
  for (const Row& r : rows())
    if (ag::find_op(r.op) == nullptr) stale.push_back(r.name());
  return stale;
}

ag::Tensor relayout(const ag::Tensor& t, int layout) {
  ag::NoGradGuard no_grad;
  if (layout == 1 && t.dim() > 0) {
    ag::Shape wide = t.shape();
    wide.back() *= 2;
    ag::Tensor v = ag::empty(wide, t.options()).slice(-1, 0, wide.back(), 2);
    v.copy_(t);
    return v;
  }
  if (layout == 2 && t.dim() >= 2) return t.transpose(-1, -2).contiguous().transpose(-1, -2);
  return t;
}

}  // namespace op_table
