// The public op functions (ag::add, ag::mm, ...). Each is defined, with its record and its
// backward formula, in its family's .cpp file.
#pragma once

#include <initializer_list>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include <ampgrad/core/generator.h>
#include <ampgrad/core/tensor.h>

namespace ampgrad {

// Factories (ops/factory.cpp).
Tensor tensor(const std::vector<float>& values, const Shape& shape, TensorOptions options = {});
Tensor tensor(const std::vector<float>& values, TensorOptions options = {});
// Braced lists, as in ag::tensor({1.f, 2.f, 3.f, 4.f}, {2, 2}): without these, {1.f, ...}
// converts equally well to every std::vector overload and the call is ambiguous.
Tensor tensor(std::initializer_list<float> values, const Shape& shape, TensorOptions options = {});
Tensor tensor(std::initializer_list<float> values, TensorOptions options = {});
Tensor tensor(const std::vector<double>& values, const Shape& shape, TensorOptions options = kFloat64);
Tensor tensor(const std::vector<int64_t>& values, const Shape& shape, TensorOptions options = kInt64);
Tensor tensor(const std::vector<int64_t>& values, TensorOptions options = kInt64);
Tensor tensor(const std::vector<bool>& values, const Shape& shape, TensorOptions options = kBool);
Tensor tensor(float value, TensorOptions options = {});  // 0-dim
Tensor scalar_tensor(const Scalar& value, TensorOptions options = {});
Tensor zeros(const Shape& shape, TensorOptions options = {});
Tensor ones(const Shape& shape, TensorOptions options = {});
Tensor full(const Shape& shape, const Scalar& value, TensorOptions options = {});
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, const Scalar& value);
// int64 when start, end and step are all integers, else float32, unless options say.
Tensor arange(const Scalar& end, TensorOptions options = {});
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step = 1, TensorOptions options = {});
Tensor rand(const Shape& shape, TensorOptions options = {});   // uniform [0, 1)
Tensor randn(const Shape& shape, TensorOptions options = {});  // standard normal
Tensor rand(const Shape& shape, Generator& gen, TensorOptions options = {});
Tensor randn(const Shape& shape, Generator& gen, TensorOptions options = {});

// Elementwise with broadcasting (ops/binary.cpp, ops/unary.cpp). The ops that are one kind
// each are declared from their tables: ops/unary_ops.def (neg, exp, log, sqrt, abs, relu,
// tanh, sigmoid, silu, softplus, the trigonometric ones, erf, erfinv, floor, hardtanh,
// leaky_relu, elu, mish, hardswish, ...) and ops/binary_ops.def
// (maximum, minimum, atan2, fmod, remainder, and the comparisons eq, ne, lt, le, gt, ge with
// tensors and scalars).
#define AG_UNARY_OP(name, Kind, category, reason) Tensor name(const Tensor& x);
#define AG_UNARY_OP1(name, Kind, category, reason, p, p0) Tensor name(const Tensor& x, double p = p0);
#define AG_UNARY_OP2(name, Kind, category, reason, p, p0, q, q0) \
  Tensor name(const Tensor& x, double p = p0, double q = q0);
#include <ampgrad/ops/unary_ops.def>
// x * Phi(x), Phi the standard normal's distribution function; approximate "tanh" computes
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) instead, as torch.nn.functional.gelu.
Tensor gelu(const Tensor& x, std::string_view approximate = "none");
#define AG_BINARY_OP(name, Kind, category, reason) Tensor name(const Tensor& a, const Tensor& b);
#define AG_BINARY_OP_S(name, Kind, category, reason) \
  Tensor name(const Tensor& a, const Tensor& b);    \
  Tensor name(const Tensor& a, const Scalar& b);
#define AG_COMPARE_OP(name, Kind)                 \
  Tensor name(const Tensor& a, const Tensor& b); \
  Tensor name(const Tensor& a, const Scalar& b);
#include <ampgrad/ops/binary_ops.def>
Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha = 1);
Tensor add(const Tensor& a, const Scalar& b);
Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha = 1);
Tensor sub(const Tensor& a, const Scalar& b);
Tensor rsub(const Tensor& a, const Scalar& b);  // b - a
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Scalar& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Scalar& b);
Tensor rdiv(const Tensor& a, const Scalar& b);      // b / a
Tensor rtruediv(const Tensor& a, const Scalar& b);  // b / a, Python's name for it
Tensor pow(const Tensor& a, const Scalar& exponent);
Tensor pow(const Tensor& a, const Tensor& exponent);
Tensor pow(const Scalar& base, const Tensor& exponent);  // base ** exponent ("rpow")
// Half to even (PyTorch's); decimals < 0 rounds to tens, hundreds, ...
Tensor round(const Tensor& a, int64_t decimals = 0);
// self + value * tensor1 * tensor2 and self + value * tensor1 / tensor2, broadcasting all
// three (ops/ternary.cpp).
Tensor addcmul(const Tensor& self, const Tensor& tensor1, const Tensor& tensor2, const Scalar& value = 1);
Tensor addcdiv(const Tensor& self, const Tensor& tensor1, const Tensor& tensor2, const Scalar& value = 1);
// start + weight * (end - start), in PyTorch's form that is exact at weight 0 and 1.
Tensor lerp(const Tensor& start, const Tensor& end, const Tensor& weight);
Tensor lerp(const Tensor& start, const Tensor& end, const Scalar& weight);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, const Scalar& b);
Tensor clamp(const Tensor& a, std::optional<Scalar> min, std::optional<Scalar> max);
// input with value where mask (bool, broadcast with input) is true, as torch.masked_fill;
// the result has their broadcast shape and input's dtype. A 0-dim tensor value gets a gradient
// (ops/masking.cpp).
Tensor masked_fill(const Tensor& input, const Tensor& mask, const Scalar& value);
Tensor masked_fill(const Tensor& input, const Tensor& mask, const Tensor& value);
// The lower (tril) or upper (triu) triangle of the last two dims, from the diagonal
// `diagonal` (0 the main one, > 0 above it, < 0 below), zeros elsewhere, as torch.tril/triu.
Tensor tril(const Tensor& input, int64_t diagonal = 0);
Tensor triu(const Tensor& input, int64_t diagonal = 0);

// Reductions (ops/reduce.cpp, ops/softmax.cpp). An empty `dims` reduces over every dim.
Tensor sum(const Tensor& a);
Tensor sum(const Tensor& a, const Shape& dims, bool keepdim = false);
Tensor mean(const Tensor& a);
Tensor mean(const Tensor& a, const Shape& dims, bool keepdim = false);
// Running sums along dim (dtype as PyTorch's: integers give int64 unless it says otherwise).
Tensor cumsum(const Tensor& a, int64_t dim, std::optional<DType> dtype = std::nullopt);
// Running products along dim (dtype as cumsum's); its gradient is right at zeros.
Tensor cumprod(const Tensor& a, int64_t dim, std::optional<DType> dtype = std::nullopt);
Tensor prod(const Tensor& a);
Tensor prod(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor var(const Tensor& a, const Shape& dims = {}, double correction = 1, bool keepdim = false);
Tensor logsumexp(const Tensor& a, const Shape& dims, bool keepdim = false);
Tensor max(const Tensor& a);
Tensor min(const Tensor& a);
std::pair<Tensor, Tensor> max(const Tensor& a, int64_t dim, bool keepdim = false);  // values, indices
std::pair<Tensor, Tensor> min(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& a);
Tensor argmax(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& a, int64_t dim, bool keepdim = false);
// dtype, as PyTorch's: the result's dtype (the input is cast to it first; a float16 or bfloat16
// input with kFloat32 is read as is and computed in float32, with no cast kernel).
Tensor softmax(const Tensor& a, int64_t dim, std::optional<DType> dtype = std::nullopt);
Tensor log_softmax(const Tensor& a, int64_t dim, std::optional<DType> dtype = std::nullopt);
Tensor softmin(const Tensor& a, int64_t dim, std::optional<DType> dtype = std::nullopt);  // softmax(-a)
// Sums `a` down to `shape` (the reverse of broadcasting), used by autograd.
Tensor sum_to(const Tensor& a, const Shape& shape);

// Shape (ops/shape.cpp, ops/join.cpp). Views share storage with their input.
Tensor view(const Tensor& a, const Shape& shape);
Tensor reshape(const Tensor& a, const Shape& shape);
Tensor flatten(const Tensor& a, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor transpose(const Tensor& a, int64_t d0, int64_t d1);
Tensor permute(const Tensor& a, const Shape& dims);
Tensor t(const Tensor& a);
Tensor narrow(const Tensor& a, int64_t dim, int64_t start, int64_t length);
Tensor slice(const Tensor& a, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor select(const Tensor& a, int64_t dim, int64_t index);
// The slices of a along dim, as views; backward stacks their gradients (one node, not one
// select each: Note [Several outputs] in autograd/multi_output.h).
std::vector<Tensor> unbind(const Tensor& a, int64_t dim = 0);
Tensor expand(const Tensor& a, const Shape& shape);
Tensor squeeze(const Tensor& a, int64_t dim);
Tensor squeeze(const Tensor& a);
Tensor unsqueeze(const Tensor& a, int64_t dim);
Tensor index_select(const Tensor& a, int64_t dim, const Tensor& index);
// Writes by index (ops/index.cpp), out of place, as torch.index_add / index_copy / index_put /
// scatter_add and gather. Indices are int64. index_add and index_copy take 1-D indices into
// dim and a source of n rows there; index_copy and index_put without accumulate keep one of
// the rows a repeated index writes (unspecified which on CUDA, as PyTorch's). index_put:
// one index tensor for each of self's leading dims (negative indices count from the end),
// broadcast together; values broadcast to what they pick. scatter_add adds src at p into
// out at p with dim's coordinate replaced by index[p]; gather reads so. On CUDA the adding
// ones are atomic: repeated targets add in an unspecified order, so float results may differ
// in the last bits from run to run (PyTorch's too).
Tensor index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source, const Scalar& alpha = 1);
Tensor index_copy(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source);
Tensor index_put(const Tensor& self, const std::vector<Tensor>& indices, const Tensor& values, bool accumulate = false);
Tensor gather(const Tensor& self, int64_t dim, const Tensor& index);
Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor contiguous(const Tensor& a);

// Matmul family (ops/matmul.cpp).
Tensor mm(const Tensor& a, const Tensor& b);
Tensor bmm(const Tensor& a, const Tensor& b);
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor addmm(const Tensor& c, const Tensor& a, const Tensor& b, const Scalar& beta = 1, const Scalar& alpha = 1);
// ops/matmul_family.cpp, PyTorch's: mv (matrix @ vector); addmv, addr (beta * M + alpha *
// outer(v1, v2)), baddbmm (per batch) and addbmm (summed over the batch) as addmm, beta 0
// ignoring the input (NaN included); multi_dot (the first and last may be 1-D) and
// chain_matmul (2-D only) multiply in the order of least work.
Tensor mv(const Tensor& mat, const Tensor& vec);
Tensor addmv(const Tensor& input, const Tensor& mat, const Tensor& vec, const Scalar& beta = 1, const Scalar& alpha = 1);
Tensor addr(const Tensor& input, const Tensor& vec1, const Tensor& vec2, const Scalar& beta = 1, const Scalar& alpha = 1);
Tensor baddbmm(const Tensor& input, const Tensor& batch1, const Tensor& batch2, const Scalar& beta = 1,
               const Scalar& alpha = 1);
Tensor addbmm(const Tensor& input, const Tensor& batch1, const Tensor& batch2, const Scalar& beta = 1,
              const Scalar& alpha = 1);
Tensor multi_dot(const std::vector<Tensor>& tensors);
Tensor chain_matmul(const std::vector<Tensor>& matrices);
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// Products composed of matmul (ops/products.cpp). dot and vdot: two 1-D tensors of one size
// and dtype -> 0-dim. tensordot: the dims_a of a against the dims_b of b (or a's last `dims`
// against b's first), the free dims of a then of b. cross: of 3-vectors along dim (without
// dim, the first of size 3, as torch.cross), broadcasting.
Tensor dot(const Tensor& a, const Tensor& b);
Tensor vdot(const Tensor& a, const Tensor& b);
Tensor tensordot(const Tensor& a, const Tensor& b, const Shape& dims_a, const Shape& dims_b);
Tensor tensordot(const Tensor& a, const Tensor& b, int64_t dims = 2);
Tensor cross(const Tensor& a, const Tensor& b, std::optional<int64_t> dim = std::nullopt);
// Sums of products named by subscripts, as torch.einsum: "ij,jk->ik" (matmul), "bhqd,bhkd->bhqk",
// "ii->i" (a diagonal), "...ij->...ji"; without "->" the output is the subscripts that appear
// once, sorted. A composite (Note [einsum] in ops/einsum.cpp): its contractions are bmm calls
// (autocast `lower`), its other steps sums and products, so autocast treats it as PyTorch's.
Tensor einsum(std::string_view equation, const std::vector<Tensor>& operands);
namespace linalg {
// sum(x * y, dim) of two floating tensors of one dtype, broadcasting, as torch.linalg.vecdot
// (real tensors: no conjugate).
Tensor vecdot(const Tensor& x, const Tensor& y, int64_t dim = -1);
}  // namespace linalg
// relu(linear(x, weight, bias)) as one op: the relu in the GEMM's epilogue (Note [Linear + ReLU]).
Tensor linear_relu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// gelu(linear(x, weight, bias), approximate="tanh") as one op: the gelu in the GEMM's epilogue
// (Note [Linear + GELU] in ops/linear.cpp).
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// Casts and copies (ops/copy.cpp). `to` is differentiable: gradients flow back in the
// source dtype.
Tensor to(const Tensor& a, Device device, DType dtype);

// Operators with tensors and scalars.
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, const Scalar& b);
Tensor operator-(const Tensor& a, const Scalar& b);
Tensor operator*(const Tensor& a, const Scalar& b);
Tensor operator/(const Tensor& a, const Scalar& b);
Tensor operator+(const Scalar& a, const Tensor& b);
Tensor operator-(const Scalar& a, const Tensor& b);
Tensor operator*(const Scalar& a, const Tensor& b);
Tensor operator/(const Scalar& a, const Tensor& b);
Tensor operator-(const Tensor& a);

}  // namespace ampgrad
