// gradcheck: compares backward's gradients with float64 central differences.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <ampgrad/core/tensor.h>

namespace ampgrad::autograd {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
};

struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0;
  std::string message;  // which input, element and output disagree, with both values
};

// `inputs` are float64 CPU leaves (any strides) that require grad; `fn` maps them to one
// floating tensor. The Jacobian is built column by column from central differences and
// row by row from backward with one-hot gradients, both kept in float64.
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, GradcheckOptions options = {});

}  // namespace ampgrad::autograd
