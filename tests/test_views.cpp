// The gradients views hand back (ops/shape.cpp, ops/unbind.cpp): what they pass through
// without a copy, and that the engine keeps those gradients apart from the caller's.
#include <vector>

#include "common.h"

TEST_CASE("autograd: unbind's backward returns gradients that are already the slices of one tensor as that tensor",
          "[autograd]") {
  // Note [Packed attention gradients] in ops/attention.cpp: stack's backward hands unbind the
  // slices of the caller's gradient in order, which unbind returns as one tensor (no copy);
  // in reverse order they are not its slices and are stacked. Either way the values are the
  // gradient's, and the caller's gradient is left alone.
  ag::manual_seed(fresh_seed());
  const ag::Tensor x0 = ag::randn({2, 3, 4});
  const ag::Tensor g = ag::randn({2, 3, 4});
  const std::vector<double> gv = g.to_vector<double>();
  ag::Tensor x = x0.clone().requires_grad_();
  ag::stack(ag::unbind(x, 1), 1).backward(g);
  check_close(x.grad(), gv, 0, 0);
  ag::Tensor y = x0.clone().requires_grad_();
  const std::vector<ag::Tensor> p = ag::unbind(y, 1);
  ag::Tensor prod = ag::stack({p[2], p[1], p[0]}, 1) * 2.0;
  prod.backward(g);
  std::vector<double> flipped(gv.size());
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 4; ++k) flipped[(i * 3 + j) * 4 + k] = 2 * gv[(i * 3 + (2 - j)) * 4 + k];
  check_close(y.grad(), flipped, 0, 0);
  check_close(g, gv, 0, 0);
}

TEST_CASE("autograd: a slice of a whole dim hands its gradient through; a part of one is zero-filled around it",
          "[autograd]") {
  // (A GPT's positions 0..T-1 as narrow(table, 0, 0, T): at T == context the whole table.)
  ag::manual_seed(fresh_seed());
  const ag::Tensor x0 = ag::randn({4, 3});
  const ag::Tensor g = ag::randn({4, 3});
  const std::vector<double> gv = g.to_vector<double>();
  ag::Tensor x = x0.clone().requires_grad_();
  ag::narrow(x, 0, 0, 4).backward(g);
  check_close(x.grad(), gv, 0, 0);
  // Again, accumulating: the leaf's gradient is its own, the caller's is left alone.
  ag::narrow(x, 0, 0, 4).backward(g);
  std::vector<double> twice(gv.size());
  for (size_t i = 0; i < gv.size(); ++i) twice[i] = 2 * gv[i];
  check_close(x.grad(), twice, 0, 0);
  check_close(g, gv, 0, 0);
  // Twice in one graph, and a part of the dim beside it.
  ag::Tensor y = x0.clone().requires_grad_();
  (ag::narrow(y, 0, 0, 4) + ag::narrow(y, 0, 0, 4)).backward(g);
  check_close(y.grad(), twice, 0, 0);
  // A sum's gradient is a broadcast view: the leaf gets values of its own, accumulating.
  ag::Tensor w = x0.clone().requires_grad_();
  ag::narrow(w, 0, 0, 4).sum().backward();
  ag::narrow(w, 1, 0, 3).sum().backward();
  check_close(w.grad(), std::vector<double>(12, 2.0), 0, 0);
  ag::Tensor z = x0.clone().requires_grad_();
  ag::narrow(z, 0, 1, 2).backward(g.narrow(0, 0, 2));
  std::vector<double> part(gv.size(), 0.0);
  for (size_t i = 0; i < 6; ++i) part[3 + i] = gv[i];
  check_close(z.grad(), part, 0, 0);
}
