// Printing tensors the way PyTorch does: tensor([[1.5000, 2.0000], ...], dtype=torch.float16).
#include <cmath>
#include <ostream>

#include "ops/ops.h"

namespace ampgrad {

namespace {

struct Style {
  bool integral = true;  // all finite values are whole numbers
  bool scientific = false;
  bool is_float = true;
  bool is_bool = false;
  int width = 1;
};

std::string format_value(double v, const Style& s) {
  if (s.is_bool) return v != 0 ? "True" : "False";
  if (!s.is_float) return fmt::format("{}", static_cast<int64_t>(v));
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (s.scientific) return fmt::format("{:.4e}", v);
  if (s.integral) return fmt::format("{:.0f}.", v);
  return fmt::format("{:.4f}", v);
}

void print_dims(std::string& out, const std::vector<double>& vals, const Shape& shape, const Shape& strides,
                size_t dim, int64_t offset, const Style& s, int indent, bool summarize) {
  const int64_t n = shape[dim];
  const int64_t edge = 3;
  out += '[';
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * edge && i == edge) {
      out += dim + 1 == shape.size() ? "..., " : fmt::format("...,\n{:{}}", "", indent + 1);
      i = n - edge;
    }
    if (dim + 1 == shape.size()) {
      std::string v = format_value(vals[offset + i * strides[dim]], s);
      out += fmt::format("{:>{}}", v, s.width);
    } else {
      print_dims(out, vals, shape, strides, dim + 1, offset + i * strides[dim], s, indent + 1, summarize);
    }
    if (i + 1 < n) {
      out += ',';
      if (dim + 1 == shape.size()) {
        out += ' ';
      } else {
        out += std::string(shape.size() - dim - 1, '\n');
        out += std::string(indent + 1, ' ');
      }
    }
  }
  out += ']';
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  Tensor c = contiguous();
  std::vector<double> vals = c.to_vector<double>();
  Style s;
  s.is_float = is_floating(dtype());
  s.is_bool = dtype() == kBool;
  double max_abs = 0, min_abs = INFINITY;
  for (double v : vals) {
    if (!std::isfinite(v)) continue;
    if (v != std::floor(v)) s.integral = false;
    max_abs = std::max(max_abs, std::fabs(v));
    if (v != 0) min_abs = std::min(min_abs, std::fabs(v));
  }
  if (s.is_float && (max_abs >= 1e8 || (!s.integral && min_abs < 1e-4))) s.scientific = true;
  const bool summarize = numel() > 1000;
  for (double v : vals) s.width = std::max<int>(s.width, static_cast<int>(format_value(v, s).size()));
  std::string body;
  if (dim() == 0) {
    body = format_value(vals.empty() ? 0 : vals[0], s);
  } else if (numel() == 0) {
    body = "[]";
  } else {
    print_dims(body, vals, shape(), contiguous_strides(shape()), 0, 0, s, 7, summarize);
  }
  std::string suffix;
  if (device().is_cuda()) suffix += fmt::format(", device='{}'", device().str());
  if (numel() == 0 && dim() != 1) suffix += fmt::format(", size={}", shape_str(shape()));
  if (dtype() != kFloat32 && dtype() != kInt64 && dtype() != kBool) suffix += fmt::format(", dtype=torch.{}", dtype_name(dtype()));
  if (grad_fn()) {
    suffix += ", grad_fn=<...>";
  } else if (requires_grad()) {
    suffix += ", requires_grad=True";
  }
  return fmt::format("tensor({}{})", body, suffix);
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace ampgrad
