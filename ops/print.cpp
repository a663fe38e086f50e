// Printing tensors the way PyTorch does: tensor([[1.5000, 2.0000], ...], dtype=torch.float16).
#include <cctype>
#include <cmath>
#include <ostream>

#include <ampgrad/autograd/node.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad {

namespace {

// A port of torch/_tensor_str.py (default print options): one formatter for the whole
// tensor, built from the values that are printed, and PyTorch's line wrapping.
constexpr int64_t kEdgeItems = 3;
constexpr int64_t kThreshold = 1000;
constexpr size_t kLineWidth = 80;
constexpr int kPrecision = 4;

struct Formatter {
  bool is_float = true;
  bool is_bool = false;
  bool int_mode = true;  // all finite values are whole numbers
  bool sci_mode = false;
  size_t width = 1;

  std::string raw(double v) const {
    if (is_bool) return v != 0 ? "True" : "False";
    if (!is_float) return fmt::format("{}", static_cast<int64_t>(v));
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    if (sci_mode) return fmt::format("{:.{}e}", v, kPrecision);
    if (int_mode) return fmt::format("{:.0f}.", v);
    return fmt::format("{:.{}f}", v, kPrecision);
  }
  std::string format(double v) const {
    std::string r = raw(v);
    return r.size() < width ? std::string(width - r.size(), ' ') + r : r;
  }
};

// _Formatter.__init__: floats pick int/fixed/scientific from their nonzero finite values,
// and only those set the width.
Formatter make_formatter(const std::vector<double>& vals, DType dtype) {
  Formatter f;
  f.is_float = is_floating(dtype);
  f.is_bool = dtype == kBool;
  if (!f.is_float) {
    for (double v : vals) f.width = std::max(f.width, f.raw(v).size());
    return f;
  }
  std::vector<double> nz;
  for (double v : vals)
    if (std::isfinite(v) && v != 0) nz.push_back(v);
  if (nz.empty()) return f;
  double lo = INFINITY, hi = 0;
  for (double v : nz) {
    lo = std::min(lo, std::fabs(v));
    hi = std::max(hi, std::fabs(v));
    if (v != std::ceil(v)) f.int_mode = false;
  }
  f.sci_mode = hi / lo > 1000.0 || hi > 1.0e8 || (!f.int_mode && lo < 1.0e-4);
  for (double v : nz) f.width = std::max(f.width, f.raw(v).size());
  return f;
}

struct View {
  const std::vector<double>& vals;  // contiguous values of the whole tensor
  const Shape& shape;
  const Shape& strides;
  bool summarize;
  bool elided(size_t dim) const { return summarize && shape[dim] > 2 * kEdgeItems; }
  // Indices printed along `dim`, with -1 where "..." goes.
  std::vector<int64_t> indices(size_t dim) const {
    std::vector<int64_t> out;
    for (int64_t i = 0; i < shape[dim]; ++i) {
      if (elided(dim) && i == kEdgeItems) {
        out.push_back(-1);
        i = shape[dim] - kEdgeItems;
      }
      out.push_back(i);
    }
    return out;
  }
};

// get_summarized_data: the values that will be printed.
void collect(const View& v, size_t dim, int64_t offset, std::vector<double>& out) {
  for (int64_t i : v.indices(dim)) {
    if (i < 0) continue;
    const int64_t at = offset + i * v.strides[dim];
    if (dim + 1 == v.shape.size()) {
      out.push_back(v.vals[at]);
    } else {
      collect(v, dim + 1, at, out);
    }
  }
}

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? sep : "") + parts[i];
  return out;
}

// _tensor_str_with_formatter and _vector_str.
std::string tensor_str(const View& v, const Formatter& f, size_t dim, int64_t offset, size_t indent) {
  std::vector<std::string> parts;
  const bool last = dim + 1 == v.shape.size();
  for (int64_t i : v.indices(dim)) {
    if (i < 0) {
      parts.push_back(last ? " ..." : "...");
    } else if (last) {
      parts.push_back(f.format(v.vals[offset + i * v.strides[dim]]));
    } else {
      parts.push_back(tensor_str(v, f, dim + 1, offset + i * v.strides[dim], indent + 1));
    }
  }
  if (!last) {
    const size_t rest = v.shape.size() - dim;  // dims of this sub-tensor
    return "[" + join(parts, "," + std::string(rest - 1, '\n') + std::string(indent + 1, ' ')) + "]";
  }
  const size_t per_line = std::max<size_t>(1, (kLineWidth - std::min(indent, kLineWidth)) / (f.width + 2));
  std::vector<std::string> lines;
  for (size_t i = 0; i < parts.size(); i += per_line)
    lines.push_back(join({parts.begin() + i, parts.begin() + std::min(parts.size(), i + per_line)}, ", "));
  return "[" + join(lines, ",\n" + std::string(indent + 1, ' ')) + "]";
}

// _add_suffixes: a suffix that would pass the line width goes on its own line.
std::string add_suffixes(const std::string& body, const std::vector<std::string>& suffixes, size_t indent) {
  std::string out = body;
  const size_t nl = body.rfind('\n');
  // PyTorch's len(s) - s.rfind("\n") + 1, where rfind gives -1 for a single line.
  size_t last_line = nl == std::string::npos ? body.size() + 2 : body.size() - nl + 1;
  for (const std::string& s : suffixes) {
    if (last_line + s.size() + 2 > kLineWidth) {
      out += ",\n" + std::string(indent, ' ') + s;
      last_line = indent + s.size();
    } else {
      out += ", " + s;
      last_line += s.size() + 2;
    }
  }
  return out + ")";
}

// "mul" -> "MulBackward0", "log_softmax" -> "LogSoftmaxBackward0", as PyTorch names its nodes.
std::string node_class_name(std::string_view op) {
  std::string out;
  bool upper = true;
  for (char c : op) {
    if (c == '_') {
      upper = true;
      continue;
    }
    out += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    upper = false;
  }
  return out + "Backward0";
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  const std::string prefix = "tensor(";
  const size_t indent = prefix.size();
  std::vector<std::string> suffixes;
  if (device().is_cuda()) suffixes.push_back(fmt::format("device='{}'", device().str()));
  std::string body;
  if (numel() == 0) {
    if (dim() != 1) suffixes.push_back(fmt::format("size=({})", fmt::join(shape(), ", ")));
    body = "[]";
  } else {
    const std::vector<double> vals = contiguous().to_vector<double>();
    const Shape strides = contiguous_strides(shape());
    const View v{vals, shape(), strides, numel() > kThreshold};
    if (dim() == 0) {
      body = make_formatter(vals, dtype()).format(vals[0]);
    } else {
      std::vector<double> shown;
      if (v.summarize) collect(v, 0, 0, shown);
      body = tensor_str(v, make_formatter(v.summarize ? shown : vals, dtype()), 0, 0, indent);
    }
  }
  // An empty tensor has no values to tell int64 or bool apart, so only float32 goes unnamed.
  if (dtype() != kFloat32 && (numel() == 0 || (dtype() != kInt64 && dtype() != kBool)))
    suffixes.push_back(fmt::format("dtype=torch.{}", dtype_name(dtype())));
  if (grad_fn()) {
    // A cast of a leaf has the leaf's accumulator as its edge (Note [Leaf casts]).
    const std::string_view op = grad_fn()->name() == "AccumulateGrad" ? "to_copy" : grad_fn()->name();
    suffixes.push_back(fmt::format("grad_fn=<{}>", node_class_name(op)));
  } else if (requires_grad()) {
    suffixes.push_back("requires_grad=True");
  }
  return add_suffixes(prefix + body, suffixes, indent);
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace ampgrad
