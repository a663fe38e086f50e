// einsum, as torch.einsum: sums of products named by subscripts, planned into permutes, sums,
// elementwise products and one bmm per contracted pair (Note [einsum]).
#include <algorithm>
#include <string>

#include <fmt/format.h>

#include <ampgrad/amp/autocast.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad {

// Note [einsum]
// torch.einsum has no autocast rule of its own: it is written in terms of other ops, and each
// of them decides for itself. ampgrad's einsum is the same composite. It opens no OpScope, so
// under autocast its bmm calls run in float16/bfloat16 (bmm is `lower`) while its sums and
// elementwise products keep their inputs' dtype: the result is 16-bit exactly when a
// contraction ran, as PyTorch's. A trace shows those ops, and autograd differentiates them.
// The plan is PyTorch's (aten/src/ATen/native/Linear.cpp), in five steps:
//   1. parse: each operand's subscripts (letters, at most one ellipsis "..."), and the output's;
//      without "->" the output is the ellipsis' dims, then the subscripts seen once, sorted
//      (A-Z before a-z);
//   2. align: a subscript repeated within one operand takes the diagonal; each operand is
//      permuted into one order of every axis (the output's first, then the summed ones), with
//      a size-1 dim where it lacks one. Sizes must match or be 1 (which broadcasts);
//   3. an axis outside the output that only one operand has (size > 1) is summed there;
//   4. the operands are combined left to right. An axis outside the output that no later
//      operand has is contracted: the pair becomes one bmm, [batch, left, k] @ [batch, k,
//      right]; a pair with nothing to contract is multiplied elementwise;
//   5. what remains outside the output is summed, and the result is viewed as the output.
// Operands are contracted in the order given (PyTorch's without an opt_einsum path), so a
// chain like "ij,jk,kl" costs what ((A B) C) costs.

namespace {

constexpr int kLetters = 52;  // A-Z are 0-25, a-z 26-51; an ellipsis dim k is axis kLetters + k
constexpr int kEllipsis = -1;

int subscript_of(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return 26 + (c - 'a');
  return -2;
}
char letter_of(int s) { return s < 26 ? static_cast<char>('A' + s) : static_cast<char>('a' + (s - 26)); }

struct Equation {
  std::vector<std::vector<int>> inputs;  // each operand's subscripts, kEllipsis where "..." stands
  std::vector<int> output;
  bool explicit_output = false;
};

// Step 1.
Equation parse(std::string_view eq) {
  Equation e;
  e.inputs.emplace_back();
  std::vector<int>* term = &e.inputs.back();
  bool in_output = false;
  for (size_t i = 0; i < eq.size(); ++i) {
    const char c = eq[i];
    if (c == ' ') continue;
    if (c == ',' && !in_output) {
      e.inputs.emplace_back();
      term = &e.inputs.back();
    } else if (c == '-' && !in_output && i + 1 < eq.size() && eq[i + 1] == '>') {
      in_output = e.explicit_output = true;
      term = &e.output;
      ++i;
    } else if (c == '.') {
      AG_CHECK(eq.substr(i, 3) == "...", "einsum: '.' at index {} of \"{}\" is not part of an ellipsis \"...\"", i, eq);
      AG_CHECK(std::count(term->begin(), term->end(), kEllipsis) == 0,
               "einsum: more than one ellipsis in one term of \"{}\"", eq);
      term->push_back(kEllipsis);
      i += 2;
    } else {
      AG_CHECK(subscript_of(c) >= 0,
               "einsum: invalid character '{}' at index {} of \"{}\" (subscripts are the letters a-z and A-Z, "
               "with \"...\", \",\" and \"->\")",
               c, i, eq);
      term->push_back(subscript_of(c));
    }
  }
  return e;
}

// A diagonal of x over two of its dims of one size: dim d2 dropped, its index equal to d1's.
// Multiplying by the identity and summing is exact (one nonzero term), and autograd's.
Tensor diagonal_of(const Tensor& x, int64_t d1, int64_t d2) {
  const int64_t n = x.size(d1);
  Shape rows(x.dim(), 1), cols(x.dim(), 1);
  rows[d1] = cols[d2] = n;
  const TensorOptions idx = TensorOptions(kInt64).device(x.device());
  const Tensor eye = eq(arange(n, idx).reshape(rows), arange(n, idx).reshape(cols)).to(x.dtype());
  return sum(x * eye, {d2});
}

// x with its dims in the order of `axes` (a permutation of x's dims, as axis ids) moved to
// `order`: dims for the axes of `order` that x lacks are inserted with size 1.
Tensor align(const Tensor& x, const std::vector<int>& axes, const std::vector<int>& order) {
  Shape perm;
  for (int a : order)
    if (auto it = std::find(axes.begin(), axes.end(), a); it != axes.end()) perm.push_back(it - axes.begin());
  Tensor y = permute(x, perm);
  for (size_t j = 0; j < order.size(); ++j)
    if (std::find(axes.begin(), axes.end(), order[j]) == axes.end()) y = unsqueeze(y, static_cast<int64_t>(j));
  return y;
}

// Step 4 for one pair, as PyTorch's sumproduct_pair: a and b have one dim per axis (size 1
// where absent); the axes in `k` both have, and are summed: one bmm. The result keeps them
// with size 1.
Tensor contract(const Tensor& a, const Tensor& b, const Shape& k) {
  const int64_t r = a.dim();
  Shape both, left, right;  // the kept axes in a and b, only in a, only in b
  int64_t nb = 1, nl = 1, nr = 1, nk = 1;
  for (int64_t j : k) nk *= a.size(j);
  for (int64_t j = 0; j < r; ++j) {
    if (std::find(k.begin(), k.end(), j) != k.end()) continue;
    const bool in_a = a.size(j) != 1, in_b = b.size(j) != 1;
    if (in_a && in_b) both.push_back(j), nb *= a.size(j);
    else if (in_a) left.push_back(j), nl *= a.size(j);
    else if (in_b) right.push_back(j), nr *= b.size(j);
  }
  AG_CHECK(a.dtype() == b.dtype() || amp::is_autocast_enabled(a.device().type),
           "einsum: contracting operands of dtypes {} and {} (one bmm takes one dtype, as in PyTorch's einsum): cast "
           "them to one dtype, or run under autocast",
           dtype_name(a.dtype()), dtype_name(b.dtype()));
  // The permutation listing the `first` axes, then every other axis (all of size 1 there).
  auto then_rest = [r](std::initializer_list<const Shape*> first) {
    Shape p;
    for (const Shape* s : first) p.insert(p.end(), s->begin(), s->end());
    for (int64_t j = 0; j < r; ++j)
      if (std::find(p.begin(), p.end(), j) == p.end()) p.push_back(j);
    return p;
  };
  const Tensor a3 = permute(a, then_rest({&both, &left, &k})).reshape({nb, nl, nk});
  const Tensor b3 = permute(b, then_rest({&both, &k, &right})).reshape({nb, nk, nr});
  // [nb, nl, nr] back to one dim per axis: the sizes in the order both, left, right, the rest
  // (1), then the inverse permutation.
  const Shape p = then_rest({&both, &left, &right});
  Shape sizes, inverse(r);
  for (int64_t j = 0; j < r; ++j) {
    const bool kept = std::find(k.begin(), k.end(), p[j]) == k.end();
    sizes.push_back(kept ? std::max(a.size(p[j]), b.size(p[j])) : 1);
    inverse[p[j]] = j;
  }
  return permute(bmm(a3, b3).reshape(sizes), inverse);
}

}  // namespace

Tensor einsum(std::string_view equation, const std::vector<Tensor>& operands) {
  Equation e = parse(equation);
  AG_CHECK(!operands.empty(), "einsum: \"{}\" needs at least one operand", equation);
  AG_CHECK(e.inputs.size() == operands.size(), "einsum: \"{}\" names {} operand(s), {} were given", equation,
           e.inputs.size(), operands.size());
  for (size_t i = 0; i < operands.size(); ++i) {
    AG_CHECK(operands[i].defined(), "einsum: operand {} is an undefined tensor", i);
    AG_CHECK(operands[i].device() == operands[0].device(),
             "einsum: operands on different devices: operand 0 {} and operand {} {}", operands[0].desc(), i,
             operands[i].desc());
  }

  // Step 2, the axes: each operand's dims as axis ids (its ellipsis dims right-aligned, as
  // broadcasting aligns them), and every axis's size (1 where no operand has it above 1).
  int64_t ellipsis_dims = 0;
  std::vector<std::vector<int>> axes(operands.size());
  for (size_t i = 0; i < operands.size(); ++i) {
    const std::vector<int>& term = e.inputs[i];
    const bool has_ellipsis = std::count(term.begin(), term.end(), kEllipsis) == 1;
    const int64_t named = static_cast<int64_t>(term.size()) - has_ellipsis, dims = operands[i].dim();
    AG_CHECK(has_ellipsis ? dims >= named : dims == named,
             "einsum: operand {} {} has {} dim(s), but \"{}\" gives it {} subscript(s){}", i, operands[i].desc(), dims,
             equation, named, has_ellipsis ? " and an ellipsis" : "");
    ellipsis_dims = std::max(ellipsis_dims, dims - named);
  }
  for (size_t i = 0; i < operands.size(); ++i) {
    const int64_t covered = operands[i].dim() - (static_cast<int64_t>(e.inputs[i].size()) -
                                                 std::count(e.inputs[i].begin(), e.inputs[i].end(), kEllipsis));
    for (int s : e.inputs[i]) {
      if (s != kEllipsis) {
        axes[i].push_back(s);
        continue;
      }
      for (int64_t k = ellipsis_dims - covered; k < ellipsis_dims; ++k) axes[i].push_back(kLetters + static_cast<int>(k));
    }
  }
  // The output: as written, or the ellipsis then the subscripts seen once, sorted.
  std::vector<int> count(kLetters, 0);
  for (const auto& term : e.inputs)
    for (int s : term)
      if (s != kEllipsis) ++count[s];
  std::vector<int> out_axes;
  if (e.explicit_output) {
    for (int s : e.output) {
      if (s == kEllipsis) {  // no operand's ellipsis covers a dim: it stands for none
        for (int64_t k = 0; k < ellipsis_dims; ++k) out_axes.push_back(kLetters + static_cast<int>(k));
        continue;
      }
      AG_CHECK(count[s] > 0, "einsum: output subscript '{}' of \"{}\" is not a subscript of any operand",
               letter_of(s), equation);
      AG_CHECK(std::count(e.output.begin(), e.output.end(), s) == 1,
               "einsum: output subscript '{}' of \"{}\" appears more than once", letter_of(s), equation);
      out_axes.push_back(s);
    }
  } else {
    for (int64_t k = 0; k < ellipsis_dims; ++k) out_axes.push_back(kLetters + static_cast<int>(k));
    for (int s = 0; s < kLetters; ++s)
      if (count[s] == 1) out_axes.push_back(s);
  }
  // Every axis: the output's, then the summed ones in subscript order (ellipsis dims left out of
  // an explicit output are summed too, as PyTorch sums them).
  std::vector<int> order = out_axes;
  for (int a = 0; a < kLetters + ellipsis_dims; ++a)
    if (std::find(order.begin(), order.end(), a) == order.end() && (a >= kLetters || count[a] > 0))
      order.push_back(a);
  const size_t n_out = out_axes.size();

  // Diagonals of repeated subscripts, then every operand aligned to `order`.
  std::vector<Tensor> ops(operands.size());
  std::vector<int64_t> size(kLetters + ellipsis_dims, 1);
  std::vector<int> seen_in(kLetters + ellipsis_dims, -1);
  for (size_t i = 0; i < operands.size(); ++i) {
    Tensor x = operands[i];
    std::vector<int>& ax = axes[i];
    for (size_t d = 0; d < ax.size(); ++d) {
      for (size_t d2 = d + 1; d2 < ax.size();) {
        if (ax[d2] != ax[d]) {
          ++d2;
          continue;
        }
        AG_CHECK(x.size(static_cast<int64_t>(d)) == x.size(static_cast<int64_t>(d2)),
                 "einsum: subscript '{}' repeats in operand {} {} with sizes {} and {} (a diagonal needs one size)",
                 letter_of(ax[d]), i, operands[i].desc(), x.size(static_cast<int64_t>(d)),
                 x.size(static_cast<int64_t>(d2)));
        x = diagonal_of(x, static_cast<int64_t>(d), static_cast<int64_t>(d2));
        ax.erase(ax.begin() + static_cast<std::ptrdiff_t>(d2));
      }
    }
    for (size_t d = 0; d < ax.size(); ++d) {
      const int64_t s = x.size(static_cast<int64_t>(d));
      int64_t& known = size[ax[d]];
      if (s != 1 && known != 1)
        AG_CHECK(s == known, "einsum: {} has size {} in operand {} {}, which does not broadcast with size {} in "
                 "operand {}", ax[d] < kLetters ? fmt::format("subscript '{}'", letter_of(ax[d])) : std::string("an ellipsis dim"),
                 s, i, operands[i].desc(), known, seen_in[ax[d]]);
      if (s != 1) known = s, seen_in[ax[d]] = static_cast<int>(i);
    }
    ops[i] = align(x, ax, order);
  }

  // Step 3: an axis outside the output that only one operand has is summed there.
  const int64_t r = static_cast<int64_t>(order.size());
  auto has = [&](size_t i, int64_t j) { return ops[i].size(j) != 1; };
  for (size_t i = 0; i < ops.size(); ++i) {
    Shape alone;
    for (int64_t j = static_cast<int64_t>(n_out); j < r; ++j) {
      bool elsewhere = false;
      for (size_t o = 0; o < ops.size(); ++o) elsewhere |= o != i && has(o, j);
      if (has(i, j) && !elsewhere) alone.push_back(j);
    }
    if (!alone.empty()) ops[i] = sum(ops[i], alone, true);
  }

  // Step 4: left to right. An axis outside the output that no later operand has is summed
  // now: by the bmm when both have it, before the product when one does.
  Tensor result = ops[0];
  for (size_t i = 1; i < ops.size(); ++i) {
    Tensor next = ops[i];
    Shape k, result_alone, next_alone;
    for (int64_t j = static_cast<int64_t>(n_out); j < r; ++j) {
      bool later = false;
      for (size_t o = i + 1; o < ops.size(); ++o) later |= has(o, j);
      if (later) continue;
      const bool in_result = result.size(j) != 1, in_next = next.size(j) != 1;
      if (in_result && in_next) k.push_back(j);
      else if (in_result) result_alone.push_back(j);
      else if (in_next) next_alone.push_back(j);
    }
    if (!result_alone.empty()) result = sum(result, result_alone, true);
    if (!next_alone.empty()) next = sum(next, next_alone, true);
    result = k.empty() ? result * next : contract(result, next, k);
  }

  // Step 5: anything left outside the output (size 1 by now) drops out of the view.
  Shape out_shape;
  for (size_t j = 0; j < n_out; ++j) out_shape.push_back(result.size(static_cast<int64_t>(j)));
  return result.reshape(out_shape);
}

}  // namespace ampgrad
