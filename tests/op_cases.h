// One invocation of every registered op, for tests that must cover each op (autocast, CUDA).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include <ampgrad/ampgrad.h>

namespace op_cases {

namespace ag = ampgrad;

struct Case {
  // Makes the inputs (floating ones in float32, on `device`), fresh random values.
  std::function<std::vector<ag::Tensor>(ag::Device)> inputs;
  std::function<ag::Tensor(const std::vector<ag::Tensor>&)> run;
};

inline ag::Tensor pos(const ag::Shape& s, ag::Device d) {  // in [0.5, 1.5): away from 0 and kinks
  return ag::rand(s, ag::TensorOptions().device(d)) + 0.5;
}
inline ag::Tensor sym(const ag::Shape& s, ag::Device d) {  // in [-1, 1)
  return ag::rand(s, ag::TensorOptions().device(d)) * 2 - 1;
}

// Keyed by op name; every op of ag::op_registry() must appear (tests check it).
inline const std::map<std::string, Case>& cases() {
  using V = std::vector<ag::Tensor>;
  using D = ag::Device;
  static const std::map<std::string, Case> table = {
      {"conv2d", {[](D d) { return V{sym({2, 3, 6, 6}, d), sym({4, 3, 3, 3}, d), sym({4}, d)}; },
                  [](const V& v) { return ag::conv2d(v[0], v[1], v[2], {1, 1}, {1, 1}); }}},
      {"unfold", {[](D d) { return V{sym({2, 3, 5, 5}, d)}; },
                  [](const V& v) { return ag::unfold(v[0], ag::Window2d{2, 2, 1, 1, 0, 0, 1, 1}); }}},
      {"max_pool2d", {[](D d) { return V{sym({2, 3, 6, 6}, d)}; }, [](const V& v) { return ag::max_pool2d(v[0], {2, 2}); }}},
      {"avg_pool2d", {[](D d) { return V{sym({2, 3, 6, 6}, d)}; }, [](const V& v) { return ag::avg_pool2d(v[0], {3, 3}, {1, 1}, {1, 1}); }}},
      {"adaptive_avg_pool2d", {[](D d) { return V{sym({2, 3, 6, 6}, d)}; },
                               [](const V& v) { return ag::adaptive_avg_pool2d(v[0], {1, 1}); }}},
      {"batch_norm", {[](D d) { return V{sym({4, 3, 2, 2}, d), pos({3}, d), sym({3}, d)}; },
                      [](const V& v) { return ag::batch_norm(v[0], ag::Tensor(), ag::Tensor(), v[1], v[2], true); }}},
      {"layer_norm", {[](D d) { return V{sym({4, 6}, d), pos({6}, d), sym({6}, d)}; },
                      [](const V& v) { return ag::layer_norm(v[0], {6}, v[1], v[2]); }}},
      {"dropout", {[](D d) { return V{sym({4, 5}, d)}; }, [](const V& v) { ag::manual_seed(1); return ag::dropout(v[0], 0.5); }}},
      {"nll_loss", {[](D d) { return V{ag::log_softmax(sym({4, 3}, d), 1), ag::tensor(std::vector<int64_t>{0, 2, 1, 2}).to(d)}; },
                    [](const V& v) { return ag::nll_loss(v[0], v[1]); }}},
      {"cross_entropy", {[](D d) { return V{sym({4, 3}, d), ag::tensor(std::vector<int64_t>{0, 2, 1, 2}).to(d)}; },
                         [](const V& v) { return ag::cross_entropy(v[0], v[1], 0.1); }}},
      {"mse_loss", {[](D d) { return V{sym({4, 3}, d), sym({4, 3}, d)}; }, [](const V& v) { return ag::mse_loss(v[0], v[1]); }}},
      {"binary_cross_entropy_with_logits", {[](D d) { return V{sym({4, 3}, d), pos({4, 3}, d) - 0.5}; },
                                            [](const V& v) { return ag::binary_cross_entropy_with_logits(v[0], v[1]); }}},
      {"binary_cross_entropy", {[](D d) { return V{pos({4, 3}, d) * 0.5, pos({4, 3}, d) - 0.5}; },
                                [](const V& v) { return ag::binary_cross_entropy(v[0], v[1]); }}},
      {"abs", {[](D d) { return V{sym({4, 5}, d)}; }, [](const V& v) { return ag::abs(v[0]); }}},
      {"add", {[](D d) { return V{sym({4, 5}, d), sym({5}, d)}; }, [](const V& v) { return ag::add(v[0], v[1]); }}},
      {"addmm", {[](D d) { return V{sym({5}, d), sym({4, 3}, d), sym({3, 5}, d)}; },
                 [](const V& v) { return ag::addmm(v[0], v[1], v[2], 0.5, 2); }}},
      {"argmax", {[](D d) { return V{sym({4, 5}, d)}; }, [](const V& v) { return ag::argmax(v[0], 1); }}},
      {"argmin", {[](D d) { return V{sym({4, 5}, d)}; }, [](const V& v) { return ag::argmin(v[0], 0); }}},
      {"bmm", {[](D d) { return V{sym({2, 4, 3}, d), sym({2, 3, 5}, d)}; }, [](const V& v) { return ag::bmm(v[0], v[1]); }}},
      {"cat", {[](D d) { return V{sym({2, 3}, d), sym({4, 3}, d)}; }, [](const V& v) { return ag::cat({v[0], v[1]}, 0); }}},
      {"clamp", {[](D d) { return V{sym({4, 5}, d)}; }, [](const V& v) { return ag::clamp(v[0], -0.5, 0.5); }}},
      {"clone", {[](D d) { return V{sym({4, 5}, d)}; }, [](const V& v) { return v[0].t().clone(); }}},
      {"copy_", {[](D d) { return V{sym({4, 5}, d)}; },
                 [](const V& v) { ag::Tensor out = ag::empty({4, 5}, v[0].options()); out.copy_(v[0]); return out; }}},
      {"div", {[](D d) { return V{sym({4, 5}, d), pos({4, 1}, d)}; }, [](const V& v) { return ag::div(v[0], v[1]); }}},
      {"eq", {[](D d) { return V{sym({4, 5}, d)}; }, [](const V& v) { return ag::eq(v[0], v[0].t().t()); }}},
      {"exp", {[](D d) { return V{sym({4, 5}, d)}; }, [](const V& v) { return ag::exp(v[0]); }}},
      {"expand", {[](D d) { return V{sym({4, 1}, d)}; }, [](const V& v) { return ag::expand(v[0], {4, 5}); }}},
      {"ge", {[](D d) { return V{sym({4, 5}, d), sym({5}, d)}; }, [](const V& v) { return ag::ge(v[0], v[1]); }}},
      {"gelu", {[](D d) { return V{sym({4, 5}, d)}; }, [](const V& v) { return ag::gelu(v[0]); }}},
      {"gt", {[](D d) { return V{sym({4, 5}, d), sym({5}, d)}; }, [](const V& v) { return ag::gt(v[0], v[1]); }}},
      {"index_select", {[](D d) { return V{sym({4, 5}, d), ag::tensor(std::vector<int64_t>{3, 0, 3}).to(d)}; },
                        [](const V& v) { return ag::index_select(v[0], 0, v[1]); }}},
      {"le", {[](D d) { return V{sym({4, 5}, d), sym({5}, d)}; }, [](const V& v) { return ag::le(v[0], v[1]); }}},
      {"linear", {[](D d) { return V{sym({2, 4, 3}, d), sym({5, 3}, d), sym({5}, d)}; },
                  [](const V& v) { return ag::linear(v[0], v[1], v[2]); }}},
      {"linear_relu", {[](D d) { return V{sym({2, 4, 3}, d), sym({5, 3}, d), sym({5}, d)}; },
                       [](const V& v) { return ag::linear_relu(v[0], v[1], v[2]); }}},
      {"log", {[](D d) { return V{pos({4, 5}, d)}; }, [](const V& v) { return ag::log(v[0]); }}},
      {"log1p", {[](D d) { return V{pos({4, 5}, d)}; }, [](const V& v) { return ag::log1p(v[0]); }}},
      {"log_softmax", {[](D d) { return V{sym({4, 5}, d)}; }, [](const V& v) { return ag::log_softmax(v[0], 1); }}},
      {"logsumexp", {[](D d) { return V{sym({4, 5}, d)}; }, [](const V& v) { return ag::logsumexp(v[0], {1}); }}},
      {"lt", {[](D d) { return V{sym({4, 5}, d), sym({5}, d)}; }, [](const V& v) { return ag::lt(v[0], v[1]); }}},
      {"matmul", {[](D d) { return V{sym({2, 4, 3}, d), sym({3, 5}, d)}; }, [](const V& v) { return ag::matmul(v[0], v[1]); }}},
      {"max", {[](D d) { return V{sym({4, 5}, d)}; }, [](const V& v) { return ag::max(v[0], 1).first; }}},
      {"maximum", {[](D d) { return V{sym({4, 5}, d), sym({5}, d)}; }, [](const V& v) { return ag::maximum(v[0], v[1]); }}},
      {"mean", {[](D d) { return V{sym({4, 5}, d)}; }, [](const V& v) { return ag::mean(v[0], {0}); }}},
      {"min", {[](D d) { return V{sym({4, 5}, d)}; }, [](const V& v) { return ag::min(v[0]); }}},
      {"minimum", {[](D d) { return V{sym({4, 5}, d), sym({5}, d)}; }, [](const V& v) { return ag::minimum(v[0], v[1]); }}},
      {"mm", {[](D d) { return V{sym({4, 3}, d), sym({3, 5}, d)}; }, [](const V& v) { return ag::mm(v[0], v[1]); }}},
      {"mul", {[](D d) { return V{sym({4, 5}, d), sym({4, 1}, d)}; }, [](const V& v) { return ag::mul(v[0], v[1]); }}},
      {"ne", {[](D d) { return V{sym({4, 5}, d), sym({5}, d)}; }, [](const V& v) { return ag::ne(v[0], v[1]); }}},
      {"neg", {[](D d) { return V{sym({4, 5}, d)}; }, [](const V& v) { return ag::neg(v[0]); }}},
      {"permute", {[](D d) { return V{sym({2, 3, 4}, d)}; }, [](const V& v) { return ag::permute(v[0], {2, 0, 1}); }}},
      {"pow", {[](D d) { return V{pos({4, 5}, d), sym({5}, d)}; }, [](const V& v) { return ag::pow(v[0], v[1]); }}},
      {"prod", {[](D d) { return V{pos({4, 5}, d)}; }, [](const V& v) { return ag::prod(v[0], 1); }}},
      {"reciprocal", {[](D d) { return V{pos({4, 5}, d)}; }, [](const V& v) { return ag::reciprocal(v[0]); }}},
      {"relu", {[](D d) { return V{sym({4, 5}, d)}; }, [](const V& v) { return ag::relu(v[0]); }}},
      {"reshape", {[](D d) { return V{sym({4, 5}, d)}; }, [](const V& v) { return ag::reshape(v[0].t(), {2, 10}); }}},
      {"rsqrt", {[](D d) { return V{pos({4, 5}, d)}; }, [](const V& v) { return ag::rsqrt(v[0]); }}},
      {"rsub", {[](D d) { return V{sym({4, 5}, d)}; }, [](const V& v) { return ag::rsub(v[0], 2.5); }}},
      {"select", {[](D d) { return V{sym({4, 5}, d)}; }, [](const V& v) { return ag::select(v[0], 1, 2); }}},
      {"sigmoid", {[](D d) { return V{sym({4, 5}, d)}; }, [](const V& v) { return ag::sigmoid(v[0]); }}},
      {"sign", {[](D d) { return V{sym({4, 5}, d)}; }, [](const V& v) { return ag::sign(v[0]); }}},
      {"slice", {[](D d) { return V{sym({6, 5}, d)}; }, [](const V& v) { return ag::slice(v[0], 0, 1, 6, 2); }}},
      {"softmax", {[](D d) { return V{sym({4, 5}, d)}; }, [](const V& v) { return ag::softmax(v[0], 0); }}},
      {"softplus", {[](D d) { return V{sym({4, 5}, d)}; }, [](const V& v) { return ag::softplus(v[0]); }}},
      {"sqrt", {[](D d) { return V{pos({4, 5}, d)}; }, [](const V& v) { return ag::sqrt(v[0]); }}},
      {"squeeze", {[](D d) { return V{sym({4, 1, 5}, d)}; }, [](const V& v) { return ag::squeeze(v[0], 1); }}},
      {"stack", {[](D d) { return V{sym({4, 5}, d), sym({4, 5}, d)}; }, [](const V& v) { return ag::stack({v[0], v[1]}, 1); }}},
      {"sub", {[](D d) { return V{sym({4, 5}, d), sym({4, 5}, d)}; }, [](const V& v) { return ag::sub(v[0], v[1]); }}},
      {"sum", {[](D d) { return V{sym({4, 5}, d)}; }, [](const V& v) { return ag::sum(v[0], {1}, true); }}},
      {"tanh", {[](D d) { return V{sym({4, 5}, d)}; }, [](const V& v) { return ag::tanh(v[0]); }}},
      {"to", {[](D d) { return V{sym({4, 5}, d)}; }, [](const V& v) { return v[0].to(ag::kFloat64); }}},
      {"transpose", {[](D d) { return V{sym({4, 5}, d)}; }, [](const V& v) { return ag::transpose(v[0], 0, 1); }}},
      {"unsqueeze", {[](D d) { return V{sym({4, 5}, d)}; }, [](const V& v) { return ag::unsqueeze(v[0], 1); }}},
      {"var", {[](D d) { return V{sym({4, 5}, d)}; }, [](const V& v) { return ag::var(v[0], {1}); }}},
      {"view", {[](D d) { return V{sym({4, 5}, d)}; }, [](const V& v) { return ag::view(v[0], {5, 4}); }}},
      {"where", {[](D d) { return V{ag::gt(sym({4, 5}, d), 0), sym({4, 5}, d), sym({5}, d)}; },
                 [](const V& v) { return ag::where(v[0], v[1], v[2]); }}},
  };
  return table;
}

}  // namespace op_cases
