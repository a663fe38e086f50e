// Central-difference Jacobians against backward's, in float64.
#include <ampgrad/autograd/gradcheck.h>

#include <cmath>

#include <ampgrad/autograd/node.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad::autograd {

namespace {
// Offsets (in elements) of every element of t in row-major index order.
std::vector<int64_t> element_offsets(const Tensor& t) {
  std::vector<int64_t> offs;
  offs.reserve(static_cast<size_t>(t.numel()));
  Shape idx(t.dim(), 0);
  for (int64_t n = 0; n < t.numel(); ++n) {
    int64_t off = 0;
    for (int64_t d = 0; d < t.dim(); ++d) off += idx[d] * t.stride(d);
    offs.push_back(off);
    for (int64_t d = t.dim() - 1; d >= 0; --d) {
      if (++idx[d] < t.size(d)) break;
      idx[d] = 0;
    }
  }
  return offs;
}

std::vector<double> flat_output(const Tensor& out) { return out.detach().to_vector<double>(); }
}  // namespace

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, GradcheckOptions opt) {
  for (const Tensor& in : inputs) {
    AG_CHECK(in.dtype() == kFloat64 && in.is_cpu(), "gradcheck: inputs must be float64 CPU tensors, got {}",
             in.desc());
    AG_CHECK(in.requires_grad() && in.is_leaf(), "gradcheck: inputs must be leaves that require grad, got {}",
             in.desc());
  }
  Tensor out0 = fn(inputs);
  AG_CHECK(is_floating(out0.dtype()), "gradcheck: fn must return a floating tensor, got {}", out0.desc());
  const int64_t n_out = out0.numel();

  GradcheckResult result;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& in = inputs[i];
    const std::vector<int64_t> offs = element_offsets(in);
    auto* data = static_cast<double*>(in.storage()->data()) + in.storage_offset();
    // Numerical Jacobian, column j: d out / d in[j].
    std::vector<std::vector<double>> numeric(offs.size());
    {
      NoGradGuard no_grad;
      for (size_t j = 0; j < offs.size(); ++j) {
        double orig = data[offs[j]];
        data[offs[j]] = orig + opt.eps;
        std::vector<double> plus = flat_output(fn(inputs));
        data[offs[j]] = orig - opt.eps;
        std::vector<double> minus = flat_output(fn(inputs));
        data[offs[j]] = orig;
        numeric[j].resize(static_cast<size_t>(n_out));
        for (int64_t k = 0; k < n_out; ++k) numeric[j][k] = (plus[k] - minus[k]) / (2 * opt.eps);
      }
    }
    // Analytic Jacobian, row k: backward with a one-hot gradient on output k.
    for (int64_t k = 0; k < n_out; ++k) {
      for (const Tensor& t : inputs) t.set_grad(Tensor());
      Tensor out = fn(inputs);
      AG_CHECK(out.requires_grad(), "gradcheck: the output {} does not require grad", out.desc());
      std::vector<double> onehot(static_cast<size_t>(n_out), 0.0);
      onehot[k] = 1.0;
      Tensor g = tensor(onehot, out.shape(), TensorOptions(out.dtype()));
      out.backward(g);
      Tensor grad = in.grad();
      std::vector<double> analytic =
          grad.defined() ? grad.to_vector<double>() : std::vector<double>(offs.size(), 0.0);
      for (size_t j = 0; j < offs.size(); ++j) {
        const double a = analytic[j], n = numeric[j][k];
        const double err = std::fabs(a - n);
        result.max_abs_error = std::max(result.max_abs_error, err);
        if (!(err <= opt.atol + opt.rtol * std::fabs(n)) && result.ok) {
          result.ok = false;
          result.message = fmt::format(
              "input {} ({}), element {}, output element {}: analytic {:.10g} vs numerical {:.10g} (error {:.3g})",
              i, in.desc(), j, k, a, n, err);
        }
      }
    }
  }
  for (const Tensor& t : inputs) t.set_grad(Tensor());
  return result;
}

}  // namespace ampgrad::autograd
