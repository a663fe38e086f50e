// CPU forward numerics of every op family against float64 references computed here with plain
// loops on the same (fresh, random, never zero) inputs, in float32, float16 and bfloat16, over
// broadcast and non-contiguous operands: the elementwise ops from the references of their rows
// in the op table (tests/op_rows.cpp), the others here. Tolerance: atol + rtol * eps(dtype).
#include <functional>
#include <limits>

#include "common.h"
#include "op_table.h"
#include "ops_reference.h"

using namespace ops_reference;  // Vec, Shape, the references, input makers and tolerances

// ---- Elementwise ---------------------------------------------------------------------------

TEST_CASE("ops: every elementwise row against its float64 reference, contiguous and not, f32/f16/bf16",
          "[ops][unary][binary]") {
  // One-input rows at their shape (n = 7) in three layouts; two-input rows over broadcast and
  // non-contiguous shape pairs, drawn by the row's own draws.
  struct Shapes {
    const char* name;
    Shape a, b;
    int layout_a, layout_b;  // op_table::relayout: 1 strided, 2 stored transposed
  };
  const std::vector<Shapes> shapes = {
      {"same", {3, 5}, {3, 5}, 0, 0},       {"[3,1,5] x [4,1]", {3, 1, 5}, {4, 1}, 0, 0}, {"[5] x [3,5]", {5}, {3, 5}, 0, 0},
      {"0-dim x [3,5]", {}, {3, 5}, 0, 0}, {"transposed a", {3, 5}, {5}, 2, 0},           {"strided b", {2, 3, 5}, {3, 5}, 0, 1},
      {"strided a, transposed b", {3, 5}, {3, 5}, 1, 2},
  };
  int n_rows = 0;
  for (const op_table::Row& r : op_table::rows()) {
    if (!r.ref) continue;
    REQUIRE(r.in.size() <= 2);
    ++n_rows;
    for (ag::DType d : kFloatTypes) {
      if (r.in.size() == 1) {
        for (int layout = 0; layout < 3; ++layout) {
          ag::Tensor x = op_table::relayout(r.draw(7)[0].to(d), layout);
          ag::Tensor y = r.run({x});
          INFO(r.name() << " in " << ag::dtype_name(d) << ", layout " << layout);
          CHECK(y.dtype() == d);
          REQUIRE(y.shape() == x.shape());
          Vec ref = vals(x);
          for (double& v : ref) v = r.ref({v});
          check_vs(y, ref, d);
        }
        continue;
      }
      for (const Shapes& s : shapes) {
        if (!r.broadcasts && s.a != s.b) continue;
        const op_table::V drawn = r.draw_shapes({s.a, s.b}, 5);
        const ag::Tensor a = op_table::relayout(drawn[0].to(d), s.layout_a);
        const ag::Tensor b = op_table::relayout(drawn[1].to(d), s.layout_b);
        ag::Tensor y = r.run({a, b});
        INFO(r.name() << " " << s.name << " in " << ag::dtype_name(d));
        const Shape out = bcast_shape(s.a, s.b);
        REQUIRE(y.shape() == out);
        CHECK(y.dtype() == d);
        const Vec va = vals(a), vb = vals(b);
        check_vs(y, build(out, [&](const Shape& i) { return r.ref({va[bcast_flat(i, s.a)], vb[bcast_flat(i, s.b)]}); }),
                 d);
      }
    }
  }
  CHECK(n_rows >= 30);
}

TEST_CASE("ops: type promotion of mixed floating operands", "[ops][binary]") {
  ag::Tensor h = normal({3, 4}, ag::kFloat16), b = normal({3, 4}, ag::kBFloat16), f = normal({4});
  const Vec vh = vals(h), vb = vals(b), vf = vals(f);
  ag::Tensor hf = h + f;
  CHECK(hf.dtype() == ag::kFloat32);
  check_vs(hf, build({3, 4}, [&](const Shape& i) { return vh[i[0] * 4 + i[1]] + vf[i[1]]; }), ag::kFloat32);
  ag::Tensor hb = h * b;  // float16 and bfloat16 meet in float32, as in PyTorch
  CHECK(hb.dtype() == ag::kFloat32);
  check_vs(hb, build({3, 4}, [&](const Shape& i) { return vh[i[0] * 4 + i[1]] * vb[i[0] * 4 + i[1]]; }), ag::kFloat32);
  // A 0-dim float32 tensor does not upcast a dimensioned float16 one.
  ag::Tensor z = ag::tensor(1.5f);
  ag::Tensor hz = h * z;
  CHECK(hz.dtype() == ag::kFloat16);
  check_vs(hz, build({3, 4}, [&](const Shape& i) { return vh[i[0] * 4 + i[1]] * 1.5; }), ag::kFloat16);
}

TEST_CASE("ops: comparisons return bool, with broadcasting and scalar operands", "[ops][compare]") {
  using Cmp = std::function<ag::Tensor(const ag::Tensor&, const ag::Tensor&)>;
  using CmpS = std::function<ag::Tensor(const ag::Tensor&, double)>;
  struct Case {
    const char* name;
    Cmp op;
    CmpS op_s;
    std::function<bool(double, double)> ref;
  };
  const std::vector<Case> cases = {
      {"eq", [](auto& a, auto& b) { return ag::eq(a, b); }, [](auto& a, double s) { return ag::eq(a, s); },
       [](double a, double b) { return a == b; }},
      {"ne", [](auto& a, auto& b) { return ag::ne(a, b); }, [](auto& a, double s) { return ag::ne(a, s); },
       [](double a, double b) { return a != b; }},
      {"lt", [](auto& a, auto& b) { return ag::lt(a, b); }, [](auto& a, double s) { return ag::lt(a, s); },
       [](double a, double b) { return a < b; }},
      {"le", [](auto& a, auto& b) { return ag::le(a, b); }, [](auto& a, double s) { return ag::le(a, s); },
       [](double a, double b) { return a <= b; }},
      {"gt", [](auto& a, auto& b) { return ag::gt(a, b); }, [](auto& a, double s) { return ag::gt(a, s); },
       [](double a, double b) { return a > b; }},
      {"ge", [](auto& a, auto& b) { return ag::ge(a, b); }, [](auto& a, double s) { return ag::ge(a, s); },
       [](double a, double b) { return a >= b; }},
  };
  // Values on a coarse grid (multiples of 0.5 in [-1.5, 1.5]), so that ties are frequent.
  auto grid = [](const Shape& s, ag::DType d) {
    Vec v = vals(ag::rand(s, ag::kFloat64));
    for (double& x : v) x = std::floor(x * 7) * 0.5 - 1.5;
    return ag::tensor(v, s, ag::kFloat64).to(d);
  };
  for (ag::DType d : {ag::kFloat32, ag::kFloat16, ag::kBFloat16, ag::kInt64}) {
    for (const Case& c : cases) {
      INFO(c.name << " in " << ag::dtype_name(d));
      ag::Tensor a = grid({3, 1, 5}, d), b = grid({4, 5}, d);
      ag::Tensor at = transposed_view(grid({5, 4}, d));  // [4, 5], non-contiguous
      const Vec va = vals(a), vb = vals(b), vat = vals(at);
      ag::Tensor y = c.op(a, b);
      REQUIRE(y.dtype() == ag::kBool);
      REQUIRE(y.shape() == Shape{3, 4, 5});
      check_close(y,
                  build({3, 4, 5},
                        [&](const Shape& i) {
                          return c.ref(va[bcast_flat(i, {3, 1, 5})], vb[bcast_flat(i, {4, 5})]) ? 1.0 : 0.0;
                        }),
                  0, 0);
      ag::Tensor yt = c.op(at, b);
      check_close(yt,
                  build({4, 5},
                        [&](const Shape& i) {
                          return c.ref(vat[ravel(i, {4, 5})], vb[ravel(i, {4, 5})]);
                        }),
                  0, 0);
      ag::Tensor ys = c.op_s(b, 0.5);
      REQUIRE(ys.dtype() == ag::kBool);
      check_close(ys,
                  build({4, 5},
                        [&](const Shape& i) {
                          return c.ref(vb[ravel(i, {4, 5})], 0.5) ? 1.0 : 0.0;
                        }),
                  0, 0);
    }
  }
}

TEST_CASE("ops: where selects with a broadcast bool condition", "[ops][where]") {
  for (ag::DType d : kFloatTypes) {
    INFO(ag::dtype_name(d));
    ag::Tensor cond = ag::gt(ag::rand({3, 1, 5}), 0.5);
    ag::Tensor a = normal({4, 5}, d), b = normal({3, 8, 1}, d).slice(1, 0, 8, 2);  // [3, 4, 1], strided
    REQUIRE(!b.is_contiguous());
    const Vec vc = vals(cond), va = vals(a), vb = vals(b);
    ag::Tensor y = ag::where(cond, a, b);
    REQUIRE(y.shape() == Shape{3, 4, 5});
    CHECK(y.dtype() == d);
    check_close(
        y,
        build({3, 4, 5},
              [&](const Shape& i) {
                return vc[bcast_flat(i, {3, 1, 5})] != 0 ? va[bcast_flat(i, {4, 5})] : vb[bcast_flat(i, {3, 4, 1})];
              }),
        0, 0);
    ag::Tensor ys = ag::where(cond, a, 2.5);
    CHECK(ys.dtype() == d);
    check_close(ys,
                build({3, 4, 5},
                      [&](const Shape& i) {
                        return vc[bcast_flat(i, {3, 1, 5})] != 0 ? va[bcast_flat(i, {4, 5})] : 2.5;
                      }),
                0, 0);
  }
}

// ---- Reductions ----------------------------------------------------------------------------

TEST_CASE("ops: sum/mean/var/logsumexp over dims, keepdim, f32/f16/bf16", "[ops][reduce]") {
  const std::vector<Shape> dim_sets = {{1}, {-1}, {0}, {0, 1}, {0, 2}, {1, 2}, {}, {0, 1, 2}};
  for (ag::DType d : kFloatTypes) {
    for (int layout = 0; layout < 2; ++layout) {
      // [3, 4, 5], contiguous or a permuted view of a [5, 3, 4] tensor.
      ag::Tensor x = layout == 0 ? normal({3, 4, 5}, d) : normal({5, 3, 4}, d).permute({1, 2, 0});
      REQUIRE(x.shape() == Shape{3, 4, 5});
      const Vec vx = vals(x);
      for (const Shape& dims : dim_sets) {
        for (bool keepdim : {false, true}) {
          INFO(ag::dtype_name(d) << " layout " << layout << " dims " << fmt::format("{}", dims) << " keepdim "
                                 << keepdim);
          const Groups gr = group_by(vx, {3, 4, 5}, dims, keepdim);
          ag::Tensor s = ag::sum(x, dims, keepdim);
          CHECK(s.shape() == gr.out_shape);
          CHECK(s.dtype() == d);
          check_vs(s, reduce_ref(gr, ref_sum), d);
          ag::Tensor m = ag::mean(x, dims, keepdim);
          CHECK(m.shape() == gr.out_shape);
          check_vs(m, reduce_ref(gr, ref_mean), d);
          for (double corr : {0.0, 1.0}) {
            ag::Tensor v = ag::var(x, dims, corr, keepdim);
            CHECK(v.shape() == gr.out_shape);
            check_vs(v, reduce_ref(gr, [corr](const Vec& g) { return ref_var(g, corr); }), d);
          }
          ag::Tensor l = ag::logsumexp(x, dims, keepdim);
          CHECK(l.shape() == gr.out_shape);
          check_vs(l, reduce_ref(gr, ref_logsumexp), d);
        }
      }
    }
    // The all-dims forms without arguments give 0-dim tensors.
    ag::Tensor x = normal({3, 4}, d);
    const Vec vx = vals(x);
    CHECK(ag::sum(x).dim() == 0);
    check_vs(ag::sum(x), {ref_sum(vx)}, d);
    check_vs(x.mean(), {ref_mean(vx)}, d);
    check_vs(ag::var(x), {ref_var(vx, 1)}, d);
  }
}

TEST_CASE("ops: prod over a dim and over all, no zeros", "[ops][reduce]") {
  for (ag::DType d : kFloatTypes) {
    Vec mag = vals(uni({3, 4, 5}, 0.6, 1.4, ag::kFloat64)), sgn = vals(uni({3, 4, 5}, -1, 1, ag::kFloat64));
    for (size_t i = 0; i < mag.size(); ++i) mag[i] *= sgn[i] < 0 ? -1 : 1;
    ag::Tensor x = ag::tensor(mag, {3, 4, 5}, ag::kFloat64).to(d);
    const Vec vx = vals(x);
    for (int64_t dim : {0, 1, 2, -1}) {
      for (bool keepdim : {false, true}) {
        INFO(ag::dtype_name(d) << " dim " << dim << " keepdim " << keepdim);
        const Groups gr = group_by(vx, {3, 4, 5}, {dim}, keepdim);
        ag::Tensor p = ag::prod(x, dim, keepdim);
        CHECK(p.shape() == gr.out_shape);
        check_vs(p, reduce_ref(gr, ref_prod), d);
      }
    }
    // Over all elements of a [3, 4] slice (12 factors: no overflow or underflow in float16).
    ag::Tensor small = x.select(2, 1).t();  // non-contiguous [4, 3]
    const Vec vs = vals(small);
    check_vs(ag::prod(small), {ref_prod(vs)}, d, 4);
    CHECK(ag::prod(small).dim() == 0);
  }
}

TEST_CASE("ops: max/min with indices, argmax/argmin, over each dim and over all", "[ops][reduce]") {
  for (ag::DType d : kFloatTypes) {
    for (int layout = 0; layout < 2; ++layout) {
      // Distinct values (a shuffled grid), so that the winner is unique in every dtype.
      Vec grid(60);
      Vec key = vals(ag::rand({60}, ag::kFloat64));
      std::vector<size_t> order(60);
      for (size_t i = 0; i < 60; ++i) order[i] = i;
      std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key[a] < key[b]; });
      for (size_t i = 0; i < 60; ++i) grid[order[i]] = static_cast<double>(i) * 0.25 - 7.3;
      ag::Tensor x = ag::tensor(grid, {3, 4, 5}, ag::kFloat64).to(d);
      if (layout == 1) x = ag::tensor(grid, {5, 4, 3}, ag::kFloat64).to(d).permute({2, 1, 0});
      const Vec vx = vals(x);
      for (int64_t dim : {0, 1, 2, -1}) {
        for (bool keepdim : {false, true}) {
          INFO(ag::dtype_name(d) << " layout " << layout << " dim " << dim << " keepdim " << keepdim);
          const Groups gr = group_by(vx, {3, 4, 5}, {dim}, keepdim);
          auto [mx, imx] = ag::max(x, dim, keepdim);
          auto [mn, imn] = ag::min(x, dim, keepdim);
          CHECK(mx.shape() == gr.out_shape);
          CHECK(imx.shape() == gr.out_shape);
          CHECK(imx.dtype() == ag::kInt64);
          CHECK(mx.dtype() == d);
          check_close(mx, reduce_ref(gr, [](const Vec& g) { return *std::max_element(g.begin(), g.end()); }), 0, 0);
          check_close(mn, reduce_ref(gr, [](const Vec& g) { return *std::min_element(g.begin(), g.end()); }), 0, 0);
          check_close(imx, reduce_ref(gr, ref_argmax), 0, 0);
          check_close(imn, reduce_ref(gr, ref_argmin), 0, 0);
          ag::Tensor am = ag::argmax(x, dim, keepdim), an = ag::argmin(x, dim, keepdim);
          CHECK(am.dtype() == ag::kInt64);
          CHECK(am.shape() == gr.out_shape);
          check_close(am, reduce_ref(gr, ref_argmax), 0, 0);
          check_close(an, reduce_ref(gr, ref_argmin), 0, 0);
        }
      }
      check_close(ag::max(x), {*std::max_element(vx.begin(), vx.end())}, 0, 0);
      check_close(ag::min(x), {*std::min_element(vx.begin(), vx.end())}, 0, 0);
      CHECK(ag::max(x).dim() == 0);
      ag::Tensor am = ag::argmax(x);
      CHECK(am.dim() == 0);
      check_close(am, {ref_argmax(vx)}, 0, 0);  // index into the row-major flattening
    }
  }
}

TEST_CASE("ops: softmax and log_softmax over each dim", "[ops][softmax]") {
  for (ag::DType d : kFloatTypes) {
    for (int layout = 0; layout < 2; ++layout) {
      ag::Tensor x = layout == 0 ? normal({3, 4, 5}, d, 2) : normal_t({3, 4, 5}, d);
      const Vec vx = vals(x);
      for (int64_t dim : {0, 1, 2, -1}) {
        INFO(ag::dtype_name(d) << " layout " << layout << " dim " << dim);
        const int64_t dd = dim < 0 ? dim + 3 : dim;
        const Groups gr = group_by(vx, {3, 4, 5}, {dim}, true);
        auto ref = [&](bool log) {
          return build({3, 4, 5}, [&](const Shape& i) {
            Shape k = i;
            k[dd] = 0;
            const Vec& g = gr.g[ravel(k, gr.out_shape)];
            const double lse = ref_logsumexp(g), v = vx[ravel(i, {3, 4, 5})];
            return log ? v - lse : std::exp(v - lse);
          });
        };
        ag::Tensor s = ag::softmax(x, dim), l = ag::log_softmax(x, dim);
        CHECK(s.dtype() == d);
        CHECK(s.shape() == Shape{3, 4, 5});
        check_vs(s, ref(false), d);
        check_vs(l, ref(true), d);
      }
    }
  }
}

// Note [Reading 16-bit inputs]: a 16-bit input read into a float32 result, and a backward
// that writes the input's dtype in one kernel; on the CPU, and on CUDA when present.
TEST_CASE("ops: softmax and log_softmax with dtype=float32 read 16-bit inputs as they are", "[ops][softmax][cuda]") {
  std::vector<ag::Device> devices{ag::Device(ag::kCPU)};
  if (cuda_available()) devices.push_back(ag::Device(ag::kCUDA));
  for (const ag::Device& dev : devices) {
    for (ag::DType d : {ag::kFloat16, ag::kBFloat16}) {
      // [4, 33] over dim 1 (the row kernels) and [3, 6, 5] over dim 1 (the column kernels).
      for (const Shape& shape : {Shape{4, 33}, Shape{3, 6, 5}}) {
        for (bool log : {false, true}) {
          INFO(dev.str() << " " << ag::dtype_name(d) << " " << shape.size() << "-D log " << log);
          ag::Tensor x = normal(shape, d, 2).to(dev).requires_grad_();
          ag::Tensor y = log ? ag::log_softmax(x, 1, ag::kFloat32) : ag::softmax(x, 1, ag::kFloat32);
          CHECK(y.dtype() == ag::kFloat32);
          const Vec vx = vals(x), vy = vals(y);
          const Groups gr = group_by(vx, shape, {1}, true);
          const Shape& os = gr.out_shape;
          auto lse_at = [&](const Shape& i) {
            Shape k = i;
            k[1] = 0;
            return ref_logsumexp(gr.g[ravel(k, os)]);
          };
          check_vs(y, build(shape, [&](const Shape& i) {
                     const double v = vx[ravel(i, shape)] - lse_at(i);
                     return log ? v : std::exp(v);
                   }), ag::kFloat32, 8);
          // The cast-first result, up to float32 rounding (a row may be summed in another order).
          ag::Tensor cast_first = log ? ag::log_softmax(x.detach().to(ag::kFloat32), 1)
                                      : ag::softmax(x.detach().to(ag::kFloat32), 1);
          check_close(cast_first, vy, 1e-6, 4 * eps_of(ag::kFloat32));
          ag::Tensor g = normal(shape, ag::kFloat32).to(dev);
          y.backward(g);
          REQUIRE(x.grad().defined());
          CHECK(x.grad().dtype() == d);
          // Reference from the float64 forward: log: g - p * sum(g); softmax: p * (g - sum(g p)).
          const Vec vg = vals(g);
          Vec ref(vg.size());
          for (int64_t flat = 0; flat < static_cast<int64_t>(vg.size()); ++flat) {
            const Shape i = unravel(flat, shape);
            double s = 0;
            Shape j = i;
            for (int64_t r = 0; r < shape[1]; ++r) {
              j[1] = r;
              const double p = std::exp(vx[ravel(j, shape)] - lse_at(j));
              s += log ? vg[ravel(j, shape)] : vg[ravel(j, shape)] * p;
            }
            const double p = std::exp(vx[flat] - lse_at(i));
            ref[flat] = log ? vg[flat] - p * s : p * (vg[flat] - s);
          }
          // Rounded once into the 16-bit dtype; sums of up to 33 terms of either sign.
          check_close(x.grad(), ref, 4 * eps_of(d), 2 * eps_of(d));
        }
      }
    }
  }
}

TEST_CASE("ops: softmax, log_softmax and logsumexp stay finite on large inputs", "[ops][softmax]") {
  for (ag::DType d : kFloatTypes) {
    INFO(ag::dtype_name(d));
    // Rows around +1000 and -1000: exp would overflow or underflow without the max shift.
    Vec v = vals(uni({4, 6}, -4, 4, ag::kFloat64));
    for (size_t i = 0; i < v.size(); ++i) v[i] = std::round(v[i] * 2) / 2 + (i < 12 ? 1000.0 : -1000.0);
    ag::Tensor x = ag::tensor(v, {4, 6}, ag::kFloat64).to(d);
    const Vec vx = vals(x);
    const Groups gr = group_by(vx, {4, 6}, {1}, true);
    ag::Tensor s = ag::softmax(x, 1), l = ag::log_softmax(x, 1), lse = ag::logsumexp(x, {1});
    for (const Vec& out : {vals(s), vals(l), vals(lse)})
      for (double o : out) CHECK(std::isfinite(o));
    check_vs(
        s, build({4, 6}, [&](const Shape& i) { return std::exp(vx[i[0] * 6 + i[1]] - ref_logsumexp(gr.g[i[0]])); }), d);
    check_vs(l, build({4, 6}, [&](const Shape& i) { return vx[i[0] * 6 + i[1]] - ref_logsumexp(gr.g[i[0]]); }), d);
    check_vs(lse, reduce_ref(gr, ref_logsumexp), d);
    // One row spanning 2000: log_softmax keeps the small terms' logs finite.
    ag::Tensor wide = ag::tensor(std::vector<double>{1000, -1000, 0, 500}, {4}, ag::kFloat64).to(d);
    check_vs(ag::log_softmax(wide, 0), {0, -2000, -1000, -500}, d);
    check_vs(ag::softmax(wide, 0), {1, 0, 0, 0}, d);
  }
}

// ---- Shape ops -----------------------------------------------------------------------------

TEST_CASE("ops: views and reshapes keep values in the expected order", "[ops][shape]") {
  for (ag::DType d : kFloatTypes) {
    INFO(ag::dtype_name(d));
    ag::Tensor x = normal({3, 4, 5}, d);
    const Vec vx = vals(x);
    auto at = [&](int64_t i, int64_t j, int64_t k) { return vx[(i * 4 + j) * 5 + k]; };

    ag::Tensor v = x.view({12, 5});
    CHECK(v.shape() == Shape{12, 5});
    CHECK(v.storage() == x.storage());
    check_close(v, vx, 0, 0);
    CHECK(x.view({-1}).shape() == Shape{60});
    check_close(x.reshape({5, -1, 3}), vx, 0, 0);
    check_close(x.flatten(), vx, 0, 0);
    CHECK(x.flatten(1).shape() == Shape{3, 20});
    CHECK(x.flatten(0, 1).shape() == Shape{12, 5});
    check_close(x.flatten(0, 1), vx, 0, 0);

    ag::Tensor p = x.permute({2, 0, 1});
    CHECK(p.shape() == Shape{5, 3, 4});
    CHECK(p.storage() == x.storage());
    check_close(p, build({5, 3, 4}, [&](const Shape& i) { return at(i[1], i[2], i[0]); }), 0, 0);
    ag::Tensor t = x.transpose(0, 2);
    check_close(t, build({5, 4, 3}, [&](const Shape& i) { return at(i[2], i[1], i[0]); }), 0, 0);
    // reshape of a non-contiguous view copies, in the view's logical order.
    ag::Tensor r = t.reshape({20, 3});
    check_close(r,
                build({20, 3},
                      [&](const Shape& i) {
                        const int64_t f = i[0] * 3 + i[1];
                        return at(f % 3, (f / 3) % 4, f / 12);
                      }),
                0, 0);
    CHECK_THROWS_AS(t.view({60}), ag::Error);
    ag::Tensor m2 = normal({4, 6}, d);
    const Vec v2 = vals(m2);
    check_close(m2.t(), build({6, 4}, [&](const Shape& i) { return v2[i[1] * 6 + i[0]]; }), 0, 0);

    ag::Tensor n = x.narrow(1, 1, 2);
    CHECK(n.shape() == Shape{3, 2, 5});
    check_close(n, build({3, 2, 5}, [&](const Shape& i) { return at(i[0], i[1] + 1, i[2]); }), 0, 0);
    ag::Tensor sl = x.slice(2, 1, 5, 2);
    CHECK(sl.shape() == Shape{3, 4, 2});
    check_close(sl, build({3, 4, 2}, [&](const Shape& i) { return at(i[0], i[1], 1 + 2 * i[2]); }), 0, 0);
    ag::Tensor sl2 = x.slice(0, -2, 3).slice(2, 0, 5, 3);  // negative start, then step 3
    CHECK(sl2.shape() == Shape{2, 4, 2});
    check_close(sl2, build({2, 4, 2}, [&](const Shape& i) { return at(i[0] + 1, i[1], 3 * i[2]); }), 0, 0);
    ag::Tensor se = x.select(1, -1);
    CHECK(se.shape() == Shape{3, 5});
    check_close(se, build({3, 5}, [&](const Shape& i) { return at(i[0], 3, i[1]); }), 0, 0);

    ag::Tensor col = x.slice(1, 2, 3);  // [3, 1, 5], non-contiguous
    ag::Tensor e = col.expand({2, 3, 4, 5});
    CHECK(e.shape() == Shape{2, 3, 4, 5});
    check_close(e, build({2, 3, 4, 5}, [&](const Shape& i) { return at(i[1], 2, i[3]); }), 0, 0);
    ag::Tensor sq = col.squeeze(1);
    CHECK(sq.shape() == Shape{3, 5});
    check_close(sq, build({3, 5}, [&](const Shape& i) { return at(i[0], 2, i[1]); }), 0, 0);
    CHECK(col.squeeze(0).shape() == Shape{3, 1, 5});  // size 3: unchanged
    CHECK(col.unsqueeze(0).squeeze().shape() == Shape{3, 5});
    ag::Tensor u = x.unsqueeze(-1);
    CHECK(u.shape() == Shape{3, 4, 5, 1});
    check_close(u, vx, 0, 0);
    CHECK(x.unsqueeze(1).shape() == Shape{3, 1, 4, 5});
    check_close(t.unsqueeze(1).squeeze(1), vals(t), 0, 0);
  }
}

TEST_CASE("ops: cat, stack and index_select values", "[ops][join]") {
  for (ag::DType d : kFloatTypes) {
    INFO(ag::dtype_name(d));
    ag::Tensor a = normal({2, 3}, d), b = normal_t({4, 3}, d), c = normal({1, 3}, d);
    const Vec va = vals(a), vb = vals(b), vc = vals(c);
    ag::Tensor c0 = ag::cat({a, b, c}, 0);
    REQUIRE(c0.shape() == Shape{7, 3});
    CHECK(c0.dtype() == d);
    check_close(c0,
                build({7, 3},
                      [&](const Shape& i) {
                        if (i[0] < 2) return va[i[0] * 3 + i[1]];
                        if (i[0] < 6) return vb[(i[0] - 2) * 3 + i[1]];
                        return vc[i[1]];
                      }),
                0, 0);
    ag::Tensor p = normal({3, 2}, d), q = normal_strided({3, 4}, d);
    const Vec vp = vals(p), vq = vals(q);
    for (int64_t dim : {1, -1}) {
      ag::Tensor c1 = ag::cat({p, q}, dim);
      REQUIRE(c1.shape() == Shape{3, 6});
      check_close(
          c1, build({3, 6}, [&](const Shape& i) { return i[1] < 2 ? vp[i[0] * 2 + i[1]] : vq[i[0] * 4 + i[1] - 2]; }),
          0, 0);
    }

    ag::Tensor s1 = normal({3, 4}, d), s2 = normal_t({3, 4}, d);
    const Vec v1 = vals(s1), v2 = vals(s2);
    for (int64_t dim : {0, 1, 2, -1}) {
      ag::Tensor st = ag::stack({s1, s2}, dim);
      const int64_t dd = dim < 0 ? dim + 3 : dim;
      Shape shape{3, 4};
      shape.insert(shape.begin() + dd, 2);
      REQUIRE(st.shape() == shape);
      check_close(st,
                  build(shape,
                        [&](const Shape& i) {
                          Shape k = i;
                          const int64_t which = k[dd];
                          k.erase(k.begin() + dd);
                          return (which == 0 ? v1 : v2)[k[0] * 4 + k[1]];
                        }),
                  0, 0);
    }

    ag::Tensor x = normal({3, 4, 5}, d).transpose(0, 1);  // [4, 3, 5], non-contiguous
    const Vec vx = vals(x);
    const std::vector<int64_t> idx_v{2, 0, 2, 4, 1, 2};
    for (int64_t dim : {0, 1, 2}) {
      const int64_t size = x.size(dim);
      std::vector<int64_t> idx;
      for (int64_t k : idx_v)
        if (k < size) idx.push_back(k);
      ag::Tensor sel = x.index_select(dim, ag::tensor(idx));
      Shape shape = x.shape();
      shape[dim] = static_cast<int64_t>(idx.size());
      REQUIRE(sel.shape() == shape);
      check_close(sel,
                  build(shape,
                        [&](const Shape& i) {
                          Shape k = i;
                          k[dim] = idx[i[dim]];
                          return vx[ravel(k, {4, 3, 5})];
                        }),
                  0, 0);
    }
  }
}

// ---- Matmul family -------------------------------------------------------------------------

TEST_CASE("ops: mm, bmm and matmul vs float64, transposed operands and broadcast batches", "[ops][matmul]") {
  struct Case {
    const char* name;
    std::function<ag::Tensor(ag::DType)> a, b;
    std::function<ag::Tensor(const ag::Tensor&, const ag::Tensor&)> op;
  };
  auto mm = [](const ag::Tensor& a, const ag::Tensor& b) { return ag::mm(a, b); };
  auto bmm = [](const ag::Tensor& a, const ag::Tensor& b) { return ag::bmm(a, b); };
  auto mat = [](const ag::Tensor& a, const ag::Tensor& b) { return ag::matmul(a, b); };
  auto N = [](Shape s) { return [s](ag::DType d) { return normal(s, d); }; };
  auto T = [](Shape s) { return [s](ag::DType d) { return normal_t(s, d); }; };
  auto S = [](Shape s) { return [s](ag::DType d) { return normal_strided(s, d); }; };
  const std::vector<Case> cases = {
      {"mm", N({5, 7}), N({7, 3}), mm},
      {"mm a^T", T({5, 7}), N({7, 3}), mm},
      {"mm b^T", N({5, 7}), T({7, 3}), mm},
      {"mm a^T b^T", T({5, 7}), T({7, 3}), mm},
      {"mm strided", S({5, 7}), N({7, 3}), mm},
      {"bmm", N({2, 5, 7}), N({2, 7, 3}), bmm},
      {"bmm transposed", T({2, 5, 7}), T({2, 7, 3}), bmm},
      {"matmul 1-D . 1-D", N({7}), N({7}), mat},
      {"matmul 1-D @ 2-D", N({7}), N({7, 3}), mat},
      {"matmul 2-D @ 1-D", T({5, 7}), N({7}), mat},
      {"matmul 2-D @ 2-D", N({5, 7}), T({7, 3}), mat},
      {"matmul 3-D @ 2-D", N({2, 5, 7}), N({7, 3}), mat},
      {"matmul 2-D @ 3-D", N({5, 7}), T({2, 7, 3}), mat},
      {"matmul 1-D @ 3-D", N({7}), N({2, 7, 3}), mat},
      {"matmul 3-D @ 1-D", N({2, 5, 7}), N({7}), mat},
      {"matmul broadcast [2,1,5,7] @ [3,7,4]", N({2, 1, 5, 7}), N({3, 7, 4}), mat},
      {"matmul broadcast [3,5,7] @ [2,1,7,4]^T", T({3, 5, 7}), T({2, 1, 7, 4}), mat},
  };
  for (ag::DType d : {ag::kFloat32, ag::kFloat16, ag::kBFloat16, ag::kFloat64}) {
    for (const Case& c : cases) {
      INFO(c.name << " in " << ag::dtype_name(d));
      ag::Tensor a = c.a(d), b = c.b(d);
      Shape out_shape;
      const Vec ref = ref_matmul(vals(a), a.shape(), vals(b), b.shape(), &out_shape);
      ag::Tensor y = c.op(a, b);
      CHECK(y.dtype() == d);
      REQUIRE(y.shape() == out_shape);
      const Tol t = matmul_tol(d, 7);
      check_close(y, ref, t.atol, t.rtol);
    }
  }
}

TEST_CASE("ops: addmm with beta/alpha and linear with and without bias", "[ops][matmul]") {
  for (ag::DType d : {ag::kFloat32, ag::kFloat16, ag::kBFloat16, ag::kFloat64}) {
    const Tol t = matmul_tol(d, 7);
    struct AddmmCase {
      Shape c;
      double beta, alpha;
      bool transposed;
    };
    for (const AddmmCase& ac : std::vector<AddmmCase>{
             {{5, 3}, 1, 1, false}, {{3}, 0.5, 2, false}, {{5, 1}, 0, -1, true}, {{5, 3}, -1.5, 0.25, true}}) {
      INFO("addmm c " << fmt::format("{}", ac.c) << " beta " << ac.beta << " alpha " << ac.alpha << " transposed "
                      << ac.transposed << " in " << ag::dtype_name(d));
      ag::Tensor c = normal(ac.c, d);
      ag::Tensor a = ac.transposed ? normal_t({5, 7}, d) : normal({5, 7}, d);
      ag::Tensor b = ac.transposed ? normal_t({7, 3}, d) : normal({7, 3}, d);
      Shape os;
      const Vec ab = ref_matmul(vals(a), {5, 7}, vals(b), {7, 3}, &os);
      const Vec vc = vals(c);
      ag::Tensor y = ag::addmm(c, a, b, ac.beta, ac.alpha);
      REQUIRE(y.shape() == Shape{5, 3});
      CHECK(y.dtype() == d);
      check_close(
          y,
          build({5, 3},
                [&](const Shape& i) { return ac.beta * vc[bcast_flat(i, ac.c)] + ac.alpha * ab[i[0] * 3 + i[1]]; }),
          t.atol * 2, t.rtol);
    }
    for (bool with_bias : {true, false}) {
      for (bool wt : {false, true}) {
        INFO("linear bias " << with_bias << " weight transposed " << wt << " in " << ag::dtype_name(d));
        ag::Tensor x = normal({2, 5, 7}, d);
        ag::Tensor w = wt ? normal_t({3, 7}, d) : normal({3, 7}, d);
        ag::Tensor bias = with_bias ? normal({3}, d) : ag::Tensor();
        const Vec vx = vals(x), vw = vals(w), vb = with_bias ? vals(bias) : Vec(3, 0.0);
        ag::Tensor y = ag::linear(x, w, bias);
        REQUIRE(y.shape() == Shape{2, 5, 3});
        CHECK(y.dtype() == d);
        check_close(y,
                    build({2, 5, 3},
                          [&](const Shape& i) {
                            double s = vb[i[2]];
                            for (int64_t k = 0; k < 7; ++k) s += vx[(i[0] * 5 + i[1]) * 7 + k] * vw[i[2] * 7 + k];
                            return s;
                          }),
                    t.atol * 2, t.rtol);
        ag::Tensor y1 = ag::linear(x.select(0, 1).select(0, 2), w, bias);  // 1-D input
        REQUIRE(y1.shape() == Shape{3});
      }
    }
  }
}

// ---- Integer ops ---------------------------------------------------------------------------

TEST_CASE("ops: integer arithmetic stays int64, sums of int64 are int64", "[ops][int]") {
  auto ints = [](const Shape& s, int64_t lo, int64_t hi) {
    std::vector<int64_t> v;
    for (double u : vals(ag::rand(s, ag::kFloat64))) {
      int64_t x = lo + static_cast<int64_t>(u * static_cast<double>(hi - lo + 1));
      v.push_back(x == 0 ? 1 : x);  // never zero
    }
    return ag::tensor(v, s);
  };
  ag::Tensor a = ints({3, 4}, -50, 50), b = ints({4}, -50, 50);
  const std::vector<int64_t> va = a.to_vector<int64_t>(), vb = b.to_vector<int64_t>();
  REQUIRE(a.dtype() == ag::kInt64);
  auto exact = [](const ag::Tensor& t, const std::vector<int64_t>& ref) {
    REQUIRE(t.dtype() == ag::kInt64);
    CHECK(t.to_vector<int64_t>() == ref);
  };
  std::vector<int64_t> add_r, sub_r, mul_r, adds_r, muls_r, neg_r, abs_r;
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j) {
      const int64_t x = va[i * 4 + j], y = vb[j];
      add_r.push_back(x + y);
      sub_r.push_back(x - y);
      mul_r.push_back(x * y);
      adds_r.push_back(x + 7);
      muls_r.push_back(x * -3);
      neg_r.push_back(-x);
      abs_r.push_back(x < 0 ? -x : x);
    }
  exact(a + b, add_r);
  exact(a - b, sub_r);
  exact(a * b, mul_r);
  exact(a + 7, adds_r);
  exact(a * -3, muls_r);
  exact(-a, neg_r);
  exact(ag::abs(a), abs_r);
  // Integer powers stay integers, as PyTorch's; a floating exponent gives float32.
  std::vector<int64_t> cube_r;
  for (int64_t x : va) cube_r.push_back(x * x * x);
  exact(a.pow(3), cube_r);
  CHECK(a.pow(0.5).dtype() == ag::kFloat32);
  // Large values survive (no trip through float).
  ag::Tensor big = ag::tensor(std::vector<int64_t>{(int64_t{1} << 53) + 1, 3});
  exact(big + 2, {(int64_t{1} << 53) + 3, 5});
  exact(ag::sum(big), {(int64_t{1} << 53) + 4});

  int64_t total = 0;
  std::vector<int64_t> rows(3, 0), cols(4, 0), row_prod(3, 1);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j) {
      total += va[i * 4 + j];
      rows[i] += va[i * 4 + j];
      cols[j] += va[i * 4 + j];
      row_prod[i] *= va[i * 4 + j];
    }
  exact(ag::sum(a), {total});
  CHECK(ag::sum(a).dim() == 0);
  exact(ag::sum(a, {1}), rows);
  exact(ag::sum(a, {0}, true), cols);
  CHECK(ag::sum(a, {0}, true).shape() == Shape{1, 4});
  exact(ag::sum(a.t(), {0}), rows);
  exact(ag::prod(a, 1), row_prod);
  auto [mx, imx] = ag::max(a, 1);
  CHECK(mx.dtype() == ag::kInt64);
  for (int64_t i = 0; i < 3; ++i) {
    const auto row = va.begin() + i * 4;
    CHECK(mx.to_vector<int64_t>()[i] == *std::max_element(row, row + 4));
    CHECK(imx.to_vector<int64_t>()[i] == std::max_element(row, row + 4) - row);
  }
  exact(ag::argmax(a, 0), [&] {
    std::vector<int64_t> r;
    for (int64_t j = 0; j < 4; ++j) {
      int64_t best = 0;
      for (int64_t i = 1; i < 3; ++i)
        if (va[i * 4 + j] > va[best * 4 + j]) best = i;
      r.push_back(best);
    }
    return r;
  }());

  // Mixing with floats promotes to float32, as a Python float would in PyTorch.
  ag::Tensor af = a + 0.5;
  CHECK(af.dtype() == ag::kFloat32);
  check_close(af, build({3, 4}, [&](const Shape& i) { return static_cast<double>(va[i[0] * 4 + i[1]]) + 0.5; }), 0, 0);
  ag::Tensor f = normal({4});
  ag::Tensor mixed = a * f;
  CHECK(mixed.dtype() == ag::kFloat32);
  const Vec vf = vals(f);
  check_vs(mixed, build({3, 4}, [&](const Shape& i) { return static_cast<double>(va[i[0] * 4 + i[1]]) * vf[i[1]]; }),
           ag::kFloat32);
  CHECK((a / b).dtype() == ag::kFloat32);  // true division
}

// ---- Edge cases ----------------------------------------------------------------------------

TEST_CASE("ops: masked_fill, tril and triu as PyTorch's", "[ops][masking]") {
  const ag::Tensor x = ag::tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3});
  const ag::Tensor row_mask = ag::tensor(std::vector<bool>{true, false, true}, {3});
  // The mask broadcast over the rows; the input's dtype kept.
  check_close(ag::masked_fill(x, row_mask, -1), {-1, 2, -1, -1, 5, -1}, 0, 0);
  CHECK(ag::masked_fill(x.to(ag::kFloat16), row_mask, 2.5).dtype() == ag::kFloat16);
  const ag::Tensor ints = ag::tensor(std::vector<int64_t>{1, 2, 3}, {3});
  CHECK(ag::masked_fill(ints, row_mask, 7).to_vector<int64_t>() == std::vector<int64_t>{7, 2, 7});
  // A 0-dim tensor value gets the gradient of the positions it fills; the input the others'.
  const ag::Tensor xg = x.detach().requires_grad_(true), v = ag::tensor(10.f).requires_grad_(true);
  const ag::Tensor y = ag::masked_fill(xg, row_mask, v);
  check_close(y, {10, 2, 10, 10, 5, 10}, 0, 0);
  y.backward(ag::tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3}));
  check_close(v.grad(), {1 + 3 + 4 + 6}, 0, 0);
  check_close(xg.grad(), {0, 2, 0, 0, 5, 0}, 0, 0);
  // The result has the broadcast shape of input and mask.
  CHECK(ag::masked_fill(ag::ones({1, 3}), ag::tensor(std::vector<bool>{true, false}, {2, 1}), 0).shape() == ag::Shape{2, 3});
  CHECK_THROWS_WITH(ag::masked_fill(x, ag::ones({3}), 0), Catch::StartsWith("masked_fill: mask must be bool, got float32 [3]"));
  CHECK_THROWS_WITH(ag::masked_fill(x, ag::tensor(std::vector<bool>{true, false}, {2}), 0), Catch::StartsWith("masked_fill"));
  CHECK_THROWS_WITH(ag::masked_fill(ints, row_mask, -INFINITY),
                    Catch::StartsWith("masked_fill: value -inf cannot be converted to int64 without overflow"));
  CHECK_THROWS_WITH(ag::masked_fill(x.to(ag::kFloat16), row_mask, 1e5), Catch::Contains("cannot be converted to float16"));
  CHECK(std::isinf(ag::masked_fill(x.to(ag::kFloat16), row_mask, -INFINITY).to_vector<double>()[0]));
  CHECK_THROWS_WITH(ag::masked_fill(x, row_mask, ag::ones({1})),
                    Catch::StartsWith("masked_fill: value must be a 0-dim tensor (or a number), got float32 [1]"));

  // Triangles of the last two dims, from any diagonal, batched.
  const ag::Tensor m = ag::arange(1, 13).to(ag::kFloat32).reshape({3, 4});
  check_close(ag::tril(m), {1, 0, 0, 0, 5, 6, 0, 0, 9, 10, 11, 0}, 0, 0);
  check_close(ag::tril(m, 1), {1, 2, 0, 0, 5, 6, 7, 0, 9, 10, 11, 12}, 0, 0);
  check_close(ag::triu(m), {1, 2, 3, 4, 0, 6, 7, 8, 0, 0, 11, 12}, 0, 0);
  check_close(ag::triu(m, -1), {1, 2, 3, 4, 5, 6, 7, 8, 0, 10, 11, 12}, 0, 0);
  check_close(ag::triu(m, 5), std::vector<double>(12, 0.0), 0, 0);
  check_close(ag::tril(m, INT64_MAX), m.to_vector<double>(), 0, 0);  // past the edge: the whole matrix
  check_close(ag::tril(m, INT64_MIN), std::vector<double>(12, 0.0), 0, 0);
  const ag::Tensor batch = ag::stack({m, m * 2}, 0);
  check_close(ag::tril(batch, -1).select(0, 1), {0, 0, 0, 0, 10, 0, 0, 0, 18, 20, 0, 0}, 0, 0);
  CHECK(ag::triu(m.to(ag::kInt64)).dtype() == ag::kInt64);
  // The causal mask of attention: -inf above the diagonal.
  const ag::Tensor causal = ag::masked_fill(ag::zeros({3, 3}), ag::gt(ag::triu(ag::ones({3, 3}), 1), 0.0), -INFINITY);
  CHECK(std::isinf(causal.to_vector<double>()[1]));
  CHECK(causal.to_vector<double>()[3] == 0);
  CHECK_THROWS_WITH(ag::tril(ag::ones({3})), Catch::StartsWith("tril: input must have at least 2 dims"));
  CHECK_THROWS_WITH(ag::triu(ag::ones({3})), Catch::StartsWith("triu: input must have at least 2 dims"));
}
