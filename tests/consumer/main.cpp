// Uses the public API as DESIGN.md shows it; exits non-zero on a wrong answer.
#include <ampgrad/ampgrad.h>

#include <cstdio>

#include "core/tensor.h"  // the consumer's own (own/core/tensor.h), not ampgrad's

namespace ag = ampgrad;

int main() {
  ag::manual_seed(0);
  ag::Tensor b = ag::tensor({1.f, 2.f, 3.f, 4.f}, {2, 2});
  ag::Tensor c = ag::mm(b, b);  // [[7, 10], [15, 22]]
  ag::Tensor p = ag::tensor(2.f).requires_grad_();
  ag::Tensor r = p.pow(2) + 3;
  r.backward();
  std::printf("consumer: r = %g, p.grad = %g, (b@b)[1][1] = %g\n", r.item<float>(), p.grad().item<float>(),
              c.to_vector<float>()[3]);
  const bool ok = ConsumerOwnTensor{}.value == 42 && r.item<float>() == 7.f && p.grad().item<float>() == 4.f && c.to_vector<float>()[3] == 22.f;
  return ok ? 0 : 1;
}
