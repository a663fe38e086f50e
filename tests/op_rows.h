// The op table's row helpers, shared by the files of rows (tests/op_rows*.cpp).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "op_table.h"

namespace op_table {

using S = ag::Shape;
inline In nrm(S s, double scale = 1) { return In{std::move(s), normal(scale)}; }
inline In uni(S s, double lo, double hi) { return In{std::move(s), uniform(lo, hi)}; }
inline In pos(S s) { return In{std::move(s), positive()}; }
inline In sy(S s) { return In{std::move(s), sym()}; }
inline In nz(S s) { return In{std::move(s), nonzero()}; }
inline In kinked(S s, std::vector<double> kinks) { return In{std::move(s), away(std::move(kinks))}; }
inline In fixed(In i) {
  i.constant = true;
  return i;
}
inline Row row(std::string op, std::string form, std::vector<In> in, Fn run) {
  Row r;
  r.op = std::move(op);
  r.form = std::move(form);
  r.in = std::move(in);
  r.run = std::move(run);
  return r;
}
// A matrix product's rows: sums of n products (Tol::sum).
inline Row sum_row(std::string op, std::string form, std::vector<In> in, Fn run) {
  return row(std::move(op), std::move(form), std::move(in), std::move(run)).tolerance(Tol::sum);
}
// Images [2, 3, n, n] at n = 5 and 9 (4 for gradcheck).
inline Row image_row(std::string op, std::string form, std::vector<In> in, Fn run) {
  return row(std::move(op), std::move(form), std::move(in), std::move(run)).at_sizes({5, 9}, 4);
}

// The rows of the losses, norms, distances and grid_sample (tests/op_rows_nn.cpp), and of the
// ternary ops, the products and the writes by index (tests/op_rows_products.cpp).
std::vector<Row> nn_rows();
std::vector<Row> product_rows();
// The recurrent cells, their fused parts and unbind (tests/op_rows_rnn.cpp).
std::vector<Row> rnn_rows();

}  // namespace op_table
