// Bad input throws ag::Error whose message names the op, the shapes, dtypes and devices,
// and the library keeps working afterwards.
#include <ampgrad/ops/define_op.h>

#include "common.h"

namespace {

using Catch::Contains;
using Catch::Equals;
using Catch::StartsWith;

// A small computation after an error: the library must still work (nothing corrupted).
void still_works() {
  const ag::Tensor a = ag::tensor({1.f, 2.f, 3.f, 4.f}, {2, 2});
  const ag::Tensor b = ag::tensor({0.5f, -1.f, 2.f, 0.25f}, {2, 2});
  check_close(ag::mm(a, b), {4.5, -0.5, 9.5, -2.0}, 0, 0);
  ag::Tensor x = ag::tensor({1.f, 2.f}).requires_grad_();
  (x * x).sum().backward();
  check_close(x.grad(), {2, 4}, 0, 0);
  CHECK(ag::autograd::grad_mode_enabled());
}

}  // namespace

TEST_CASE("errors: matmul shapes", "[errors]") {
  ag::manual_seed(1);
  SECTION("mm: exact message") {
    REQUIRE_THROWS_WITH(ag::mm(ag::rand({2, 3}), ag::rand({4, 5})),
                        Equals("mm: shapes [2, 3] and [4, 5] cannot be multiplied (3 != 4)"));
    REQUIRE_THROWS_AS(ag::mm(ag::rand({2, 3}), ag::rand({4, 5})), ag::Error);
  }
  SECTION("bmm") {
    REQUIRE_THROWS_WITH(ag::bmm(ag::rand({2, 3, 4}), ag::rand({2, 5, 6})),
                        Equals("bmm: shapes [2, 3, 4] and [2, 5, 6] cannot be multiplied (4 != 5)"));
    REQUIRE_THROWS_WITH(ag::bmm(ag::rand({2, 3, 4}), ag::rand({3, 4, 6})),
                        Contains("bmm") && Contains("[2, 3, 4]") && Contains("[3, 4, 6]") && Contains("batch"));
  }
  SECTION("matmul") {
    REQUIRE_THROWS_WITH(ag::matmul(ag::rand({5, 2, 3}), ag::rand({4})),
                        Equals("matmul: shapes [5, 2, 3] and [4] cannot be multiplied (3 != 4)"));
    REQUIRE_THROWS_WITH(ag::matmul(ag::rand({2, 2, 3}), ag::rand({3, 3, 4})),
                        Contains("matmul") && Contains("[2]") && Contains("[3]") && Contains("broadcast"));
  }
  SECTION("linear") {
    REQUIRE_THROWS_WITH(ag::linear(ag::rand({8, 3}), ag::rand({4, 5})),
                        Contains("[8, 3]") && Contains("[4, 5]") && Contains("3") && Contains("5"));
  }
  still_works();
}

TEST_CASE("errors: broadcasting", "[errors]") {
  ag::manual_seed(2);
  const ag::Tensor a = ag::rand({2, 3});
  const ag::Tensor b = ag::rand({4});
  REQUIRE_THROWS_WITH(ag::add(a, b), Equals("add: shapes [2, 3] and [4] cannot be broadcast (dimension 1: 3 vs 4)"));
  REQUIRE_THROWS_WITH(a + b, StartsWith("add: shapes [2, 3] and [4]"));
  REQUIRE_THROWS_WITH(a * ag::rand({3, 3}), StartsWith("mul: shapes [2, 3] and [3, 3] cannot be broadcast"));
  REQUIRE_THROWS_WITH(ag::sub(ag::rand({5, 1, 2}), ag::rand({4, 3})),
                      Contains("sub") && Contains("[5, 1, 2]") && Contains("[4, 3]") && Contains("2 vs 3"));
  REQUIRE_THROWS_WITH(ag::where(ag::gt(a, 0.5), a, b), StartsWith("where: shapes [2, 3] and [4] cannot be broadcast"));
  REQUIRE_THROWS_WITH(a.expand({4, 3}), Contains("expand") && Contains("[2, 3]") && Contains("[4, 3]"));
  // in place: the result must fit the destination
  ag::Tensor small = ag::rand({3});
  REQUIRE_THROWS_WITH(small.add_(a), Contains("add_") && Contains("[2, 3]") && Contains("[3]"));
  REQUIRE_THROWS_WITH(small.copy_(ag::rand({4})), Contains("copy_") && Contains("[4]") && Contains("[3]"));
  still_works();
}

TEST_CASE("errors: wrong rank", "[errors]") {
  ag::manual_seed(3);
  REQUIRE_THROWS_WITH(ag::mm(ag::rand({2, 3, 4}), ag::rand({4, 5})),
                      Equals("mm: expected 2-D tensors, got float32 [2, 3, 4] on cpu and float32 [4, 5] on cpu"));
  REQUIRE_THROWS_WITH(ag::mm(ag::rand({3}), ag::rand({3, 5})), StartsWith("mm: expected 2-D tensors") &&
                                                                   Contains("float32 [3] on cpu"));
  REQUIRE_THROWS_WITH(ag::bmm(ag::rand({2, 3}), ag::rand({3, 4})),
                      Equals("bmm: expected 3-D tensors, got float32 [2, 3] on cpu and float32 [3, 4] on cpu"));
  REQUIRE_THROWS_WITH(ag::matmul(ag::tensor(1.f), ag::rand({3})), StartsWith("matmul") && Contains("at least 1"));
  REQUIRE_THROWS_WITH(ag::t(ag::rand({2, 3, 4})), StartsWith("t:") && Contains("[2, 3, 4]"));
  REQUIRE_THROWS_WITH(ag::rand({2, 3}).permute({1, 0, 2}), StartsWith("permute") && Contains("[2, 3]"));
  // Running statistics come in pairs (a CUDA kernel would otherwise write through a null one).
  REQUIRE_THROWS_WITH(ag::batch_norm(ag::rand({4, 3}), ag::zeros({3}), ag::Tensor(), ag::Tensor(), ag::Tensor(), true),
                      StartsWith("batch_norm: running_mean and running_var come together") && Contains("none"));
  still_works();
}

TEST_CASE("errors: unsupported dtypes", "[errors]") {
  ag::manual_seed(4);
  const ag::Tensor i = ag::tensor(std::vector<int64_t>{1, 2, 3, 4}, {2, 2});
  SECTION("mm on int64") {
    REQUIRE_THROWS_WITH(ag::mm(i, i),
                        Equals("mm: expected floating inputs, got int64 [2, 2] on cpu and int64 [2, 2] on cpu"));
  }
  SECTION("mm with mixed float dtypes (outside autocast)") {
    REQUIRE_THROWS_WITH(ag::mm(ag::rand({2, 2}), ag::rand({2, 2}).to(ag::kFloat16)),
                        StartsWith("mm: expected both inputs to have the same dtype") &&
                            Contains("float32 [2, 2] on cpu") && Contains("float16 [2, 2] on cpu"));
  }
  SECTION("mean on int64") {
    REQUIRE_THROWS_WITH(ag::mean(i), StartsWith("mean: expected a floating tensor, got int64 [2, 2] on cpu"));
    REQUIRE_THROWS_WITH(i.mean({0}), StartsWith("mean") && Contains("int64"));
  }
  SECTION("requires_grad_ on an integer tensor") {
    ag::Tensor j = i.clone();
    REQUIRE_THROWS_WITH(j.requires_grad_(),
                        Equals("requires_grad_: only floating tensors can require grad, got int64 [2, 2] on cpu"));
    CHECK_FALSE(j.requires_grad());
    REQUIRE_THROWS_WITH(ag::zeros({2}, ag::TensorOptions(ag::kInt32).requires_grad(true)),
                        Contains("require grad") && Contains("int32"));
    REQUIRE_THROWS_WITH(ag::tensor(std::vector<int64_t>{1}, ag::TensorOptions(ag::kInt64).requires_grad(true)),
                        Contains("require grad") && Contains("int64"));
  }
  SECTION("other ops") {
    REQUIRE_THROWS_WITH(ag::softmax(i, 1), StartsWith("softmax: expected a floating tensor, got int64 [2, 2]"));
    const ag::Tensor b = ag::tensor(std::vector<bool>{true, false}, {2});
    REQUIRE_THROWS_WITH(ag::add(b, b), StartsWith("add: arithmetic on bool tensors") && Contains("bool [2] on cpu"));
    REQUIRE_THROWS_WITH(ag::index_select(ag::rand({3}), 0, ag::tensor({0.f, 1.f})),
                        StartsWith("index_select: index must be int64 or int32, got float32 [2] on cpu"));
    REQUIRE_THROWS_WITH(ag::randn({2}, ag::kInt64), Equals("randn: expected a floating dtype, got int64"));
    REQUIRE_THROWS_WITH(ag::rand({2}).data_ptr<double>(), Equals("data_ptr: tensor is float32, asked for float64"));
  }
  still_works();
}

TEST_CASE("errors: mismatched devices", "[errors][cuda]") {
  ag::manual_seed(5);
  SECTION("without CUDA, a CUDA tensor cannot be made") {
    if (cuda_available()) return;
    fmt::print("[errors: mismatched devices] no CUDA device: checking only that CUDA tensors are refused\n");
    REQUIRE_THROWS_WITH(ag::zeros({2}, ag::kCUDA), Contains("cuda"));
    REQUIRE_THROWS_WITH(ag::rand({2}).cuda(), Contains("cuda"));
  }
  SECTION("CPU and CUDA operands") {
    if (skip_without_cuda()) return;
    const ag::Tensor c = ag::rand({2, 3});
    const ag::Tensor g = ag::rand({3, 2}).cuda();
    const ag::Tensor g2 = ag::rand({2, 3}).cuda();
    REQUIRE_THROWS_WITH(ag::mm(c, g), Equals("mm: expected all tensors on the same device, got float32 [2, 3] on cpu "
                                             "and float32 [3, 2] on cuda:0"));
    REQUIRE_THROWS_WITH(ag::add(c, g2), StartsWith("add: expected all tensors on the same device") &&
                                            Contains("on cpu") && Contains("on cuda:0"));
    REQUIRE_THROWS_WITH(ag::cat({c, g2}), StartsWith("cat: expected all tensors on the same device"));
    REQUIRE_THROWS_WITH(ag::index_select(g2, 0, ag::tensor(std::vector<int64_t>{0})),
                        StartsWith("index_select: expected all tensors on the same device"));
    ag::Tensor y = (g2 * 2).sum();
    REQUIRE_THROWS_WITH(y.backward(ag::tensor(1.f)), Contains("backward") && Contains("device"));
  }
  still_works();
}

TEST_CASE("errors: dimension out of range", "[errors]") {
  ag::manual_seed(6);
  const ag::Tensor a = ag::rand({2, 3});
  REQUIRE_THROWS_WITH(
      a.sum({5}), Equals("sum: dimension 5 is out of range for a tensor of 2 dimensions (expected -2 to 1)"));
  REQUIRE_THROWS_WITH(a.sum({-3}), StartsWith("sum: dimension -3 is out of range"));
  REQUIRE_THROWS_WITH(a.mean({2}), StartsWith("mean: dimension 2 is out of range for a tensor of 2 dimensions"));
  REQUIRE_THROWS_WITH(
      a.transpose(0, 2),
      Equals("transpose: dimension 2 is out of range for a tensor of 2 dimensions (expected -2 to 1)"));
  REQUIRE_THROWS_WITH(
      ag::softmax(a, 3),
      Equals("softmax: dimension 3 is out of range for a tensor of 2 dimensions (expected -2 to 1)"));
  REQUIRE_THROWS_WITH(ag::log_softmax(ag::rand({4}), -2),
                      Equals("log_softmax: dimension -2 is out of range for a tensor of 1 dimension (expected -1 to 0)"));
  REQUIRE_THROWS_WITH(ag::cat({a, a}, 2), StartsWith("cat: dimension 2 is out of range"));
  REQUIRE_THROWS_WITH(a.unsqueeze(4), StartsWith("unsqueeze: dimension 4 is out of range"));
  REQUIRE_THROWS_WITH(a.size(2), StartsWith("size: dimension 2 is out of range"));
  REQUIRE_THROWS_WITH(ag::max(a, 2), StartsWith("max: dimension 2 is out of range"));
  REQUIRE_THROWS_WITH(a.sum({0, -2}), Contains("sum") && Contains("more than once"));
  still_works();
}

TEST_CASE("errors: index out of range", "[errors]") {
  ag::manual_seed(7);
  const ag::Tensor a = ag::rand({3, 4});
  REQUIRE_THROWS_WITH(a.index_select(0, ag::tensor(std::vector<int64_t>{0, 10, 1})),
                      Equals("index_select: index 10 is out of range for dimension 0 of size 3 (float32 [3, 4] on cpu)"));
  REQUIRE_THROWS_WITH(a.index_select(1, ag::tensor(std::vector<int64_t>{-1})),
                      StartsWith("index_select: index -1 is out of range for dimension 1 of size 4"));
  REQUIRE_THROWS_WITH(a.select(0, 3),
                      Equals("select: index 3 is out of range for dimension 0 of size 3 (float32 [3, 4] on cpu)"));
  REQUIRE_THROWS_WITH(a.select(1, -5), StartsWith("select: index -5 is out of range for dimension 1 of size 4"));
  REQUIRE_THROWS_WITH(
      a.narrow(0, 2, 2),
      Equals("narrow: start 2 and length 2 are out of range for dimension 0 of size 3 (float32 [3, 4] on cpu)"));
  REQUIRE_THROWS_WITH(a.narrow(1, 0, -1), StartsWith("narrow: start 0 and length -1 are out of range"));
  // negative indices within range are fine
  CHECK(a.select(0, -1).to_vector<float>() == a.select(0, 2).to_vector<float>());
  still_works();
}

TEST_CASE("errors: item on a tensor with several elements", "[errors]") {
  const ag::Tensor a = ag::rand({2, 3});
  REQUIRE_THROWS_WITH(
      a.item<float>(),
      Equals("item: only a tensor with one element can be converted to a number, got float32 [2, 3] on cpu"));
  REQUIRE_THROWS_WITH(ag::zeros({0}).item<double>(), StartsWith("item:") && Contains("float32 [0] on cpu"));
  REQUIRE_THROWS_WITH(ag::arange(3).item<int64_t>(), StartsWith("item:") && Contains("int64 [3] on cpu"));
  CHECK(ag::rand({1, 1}).item<float>() >= 0);  // one element in any shape is fine
  still_works();
}

TEST_CASE("errors: backward misuse", "[errors][autograd]") {
  ag::manual_seed(8);
  SECTION("non-scalar output without a gradient") {
    ag::Tensor x = ag::rand({3}).requires_grad_();
    const ag::Tensor y = x * 2;
    REQUIRE_THROWS_WITH(y.backward(), StartsWith("backward: grad can be implicitly created only for scalar outputs") &&
                                          Contains("float32 [3] on cpu"));
    REQUIRE_THROWS_WITH(y.backward(ag::rand({2})),
                        Contains("backward") && Contains("float32 [2] on cpu") && Contains("float32 [3] on cpu"));
    // the graph is intact: a proper gradient works
    y.backward(ag::ones({3}));
    check_close(x.grad(), {2, 2, 2}, 0, 0);
  }
  SECTION("output that does not require grad") {
    const ag::Tensor x = ag::rand({3});
    const ag::Tensor y = (x * 2).sum();
    REQUIRE_THROWS_WITH(y.backward(), StartsWith("backward: the tensor (float32 [] on cpu) does not require grad"));
    ag::Tensor w = ag::rand({3}).requires_grad_();
    ag::Tensor z;
    {
      ag::NoGradGuard no_grad;
      z = (w * 2).sum();
    }
    REQUIRE_THROWS_WITH(z.backward(), Contains("does not require grad") && Contains("NoGradGuard"));
  }
  SECTION("in-place edit of a tensor saved for backward") {
    ag::Tensor x = ag::rand({3}).requires_grad_();
    ag::Tensor w = ag::rand({3});
    const ag::Tensor y = (x * w).sum();
    w.add_(1);
    REQUIRE_THROWS_WITH(y.backward(), StartsWith("mul: a tensor saved for backward (float32 [3] on cpu) was modified "
                                                 "by an in-place operation") &&
                                          Contains("version 0 is now 1"));
    CHECK_FALSE(x.grad().defined());
  }
  SECTION("in-place edit through a view of a saved tensor") {
    ag::Tensor x = ag::rand({2, 2}).requires_grad_();
    ag::Tensor w = ag::rand({2, 2});
    const ag::Tensor y = ag::mm(x, w).sum();
    ag::Tensor row = w.select(0, 1);
    row.fill_(3);
    REQUIRE_THROWS_WITH(y.backward(), StartsWith("mm: a tensor saved for backward (float32 [2, 2] on cpu) was "
                                                 "modified by an in-place operation"));
  }
  SECTION("in-place on a leaf that requires grad") {
    ag::Tensor x = ag::rand({3}).requires_grad_();
    REQUIRE_THROWS_WITH(x.add_(1), StartsWith("add_: in-place operation on a leaf that requires grad (float32 [3] "
                                              "on cpu)") &&
                                       Contains("NoGradGuard"));
    REQUIRE_THROWS_WITH(x.fill_(0), StartsWith("fill_: in-place operation"));
    REQUIRE_THROWS_WITH(x.copy_(ag::rand({3})), StartsWith("copy_: in-place operation"));
    {
      ag::NoGradGuard no_grad;
      x.mul_(2.0);  // allowed, as optimizers do
    }
  }
  SECTION("second backward without retain_graph") {
    ag::Tensor x = ag::rand({3}).requires_grad_();
    const ag::Tensor y = x.exp().sum();
    y.backward();
    // sum saved nothing and runs again; exp's saved result was freed (as PyTorch reports).
    REQUIRE_THROWS_WITH(y.backward(), StartsWith("exp: trying to run backward through the graph a second time") &&
                                          Contains("retain_graph"));
    // with retain_graph, twice is fine and accumulates
    ag::Tensor p = ag::rand({3}).requires_grad_();
    const ag::Tensor q = (p * 3).sum();
    q.backward({}, /*retain_graph=*/true);
    q.backward();
    check_close(p.grad(), {6, 6, 6}, 0, 0);
  }
  SECTION("requires_grad_(false) on a non-leaf") {
    ag::Tensor x = ag::rand({3}).requires_grad_();
    ag::Tensor y = x * 2;
    REQUIRE_THROWS_WITH(y.requires_grad_(false), StartsWith("requires_grad_: cannot turn off requires_grad of a "
                                                            "non-leaf tensor (float32 [3] on cpu)"));
  }
  still_works();
}

TEST_CASE("errors: views and reshapes", "[errors]") {
  ag::manual_seed(9);
  const ag::Tensor a = ag::rand({3, 4});
  SECTION("view of a non-contiguous tensor") {
    REQUIRE_THROWS_WITH(a.t().view({12}),
                        StartsWith("view: input float32 [4, 3] on cpu is not contiguous (strides [1, 4])") &&
                            Contains("reshape"));
    CHECK(a.t().reshape({12}).numel() == 12);  // the suggested fix works
  }
  SECTION("wrong number of elements") {
    REQUIRE_THROWS_WITH(a.reshape({5, 3}),
                        Equals("reshape: shape [5, 3] is invalid for input float32 [3, 4] on cpu (12 elements)"));
    REQUIRE_THROWS_WITH(a.view({5, -1}),
                        Equals("view: shape [5, -1] is invalid for input float32 [3, 4] on cpu (12 elements)"));
    REQUIRE_THROWS_WITH(a.reshape({-1, -1}), StartsWith("reshape: only one dimension can be -1"));
    REQUIRE_THROWS_WITH(a.reshape({-2, 6}), StartsWith("reshape: invalid size -2"));
  }
  SECTION("factories") {
    REQUIRE_THROWS_WITH(ag::tensor({1.f, 2.f, 3.f}, {2, 2}),
                        Equals("tensor: 3 values cannot fill shape [2, 2] (4 elements)"));
    REQUIRE_THROWS_WITH(ag::zeros({2, -1}), StartsWith("empty: negative dimension in shape [2, -1]"));
    REQUIRE_THROWS_WITH(ag::arange(0, 5, 0), StartsWith("arange: step must be non-zero"));
    REQUIRE_THROWS_WITH(ag::arange(5, 0, 1), StartsWith("arange: start 5 cannot reach end 0"));
  }
  still_works();
}

// PyTorch refuses them ("Storage size calculation overflowed"): an element or byte count past
// int64 never wraps into a small tensor, on either device (the checks run on the host).
TEST_CASE("errors: sizes that overflow", "[errors][cuda]") {
  std::vector<ag::Device> devs{ag::Device(ag::kCPU)};
  if (ag::cuda::is_available()) devs.emplace_back(ag::kCUDA);
  constexpr int64_t k40 = int64_t{1} << 40, k62 = int64_t{1} << 62;
  for (ag::Device dev : devs) {
    INFO(dev.str());
    const auto on = ag::TensorOptions().device(dev);
    CHECK_THROWS_WITH(ag::zeros({k40, k40}, on),
                      Equals("zeros: shape [1099511627776, 1099511627776] has more elements than an int64 can count "
                             "(storage size calculation overflowed)"));
    CHECK_THROWS_WITH(ag::empty({k62}, on.dtype(ag::kFloat32)),
                      Equals("empty: shape [4611686018427387904] of float32 takes more bytes than an int64 can count "
                             "(storage size calculation overflowed)"));
    CHECK_THROWS_WITH(ag::ones({2, 3}, on).expand({k40, k40, 2, 3}),
                      StartsWith("expand: shape [1099511627776, 1099511627776, 2, 3] has more elements"));
    CHECK_THROWS_WITH(ag::ones({6}, on).reshape({k40, k40, -1}),
                      StartsWith("reshape: shape [1099511627776, 1099511627776, -1] has more elements"));
    const ag::Tensor tall = ag::ones({1}, on).expand({k40, 1}), wide = ag::ones({1}, on).expand({1, k40});
    CHECK_THROWS_WITH(tall + wide, StartsWith("add: shape [1099511627776, 1099511627776] has more elements"));
    const ag::Tensor huge = ag::ones({1}, on).expand({k62});
    CHECK_THROWS_WITH(ag::cat({huge, huge, huge}, 0),
                      Equals("cat: the sizes along dimension 0 add up past int64's reach (tensor 1 is "
                             "[4611686018427387904])"));
    CHECK_THROWS_WITH(ag::conv1d(ag::rand({1, 1, 8}, on), ag::rand({1, 1, 3}, on), {}, 1, k62),
                      StartsWith("conv1d: the output size along spatial dim 0 overflows int64"));
    CHECK_THROWS_WITH(ag::max_pool2d(ag::rand({1, 1, 8, 8}, on), {0, 2}),
                      Equals("max_pool2d: kernel size 0x2 must be greater than zero"));
    // The process goes on: a normal tensor after them.
    CHECK(ag::sum(ag::ones({4}, on)).item<double>() == 4.0);
  }
}

TEST_CASE("errors: cat and stack", "[errors]") {
  ag::manual_seed(10);
  REQUIRE_THROWS_WITH(
      ag::cat({ag::rand({2, 3}), ag::rand({2, 4})}, 0),
      Equals("cat: sizes must match except in dimension 0; tensor 1 is [2, 4] but tensor 0 is [2, 3]"));
  REQUIRE_THROWS_WITH(ag::cat({ag::rand({2, 3}), ag::rand({3})}, 0),
                      StartsWith("cat: tensor 1 has 1 dims but tensor 0 has 2"));
  REQUIRE_THROWS_WITH(ag::cat({}, 0), Equals("cat: expected a non-empty list of tensors"));
  REQUIRE_THROWS_WITH(ag::cat({ag::tensor(1.f)}), Contains("cat") && Contains("zero-dim"));
  REQUIRE_THROWS_WITH(ag::stack({ag::rand({2, 3}), ag::rand({3, 2})}),
                      Equals("stack: all tensors must have the same shape; tensor 1 is [3, 2] but tensor 0 is [2, 3]"));
  // along dim 1 the first dims must match
  CHECK(ag::cat({ag::rand({2, 3}), ag::rand({2, 4})}, 1).sizes() == ag::Shape{2, 7});
  still_works();
}

TEST_CASE("errors: undefined tensors", "[errors]") {
  const ag::Tensor u;
  REQUIRE_THROWS_WITH(u.shape(), Contains("undefined"));
  REQUIRE_THROWS_WITH(ag::add(u, ag::rand({2})), Equals("add: first input is an undefined tensor"));
  REQUIRE_THROWS_WITH(ag::mm(ag::rand({2, 2}), u), Equals("mm: second input is an undefined tensor"));
  CHECK(u.str() == "tensor(undefined)");
  still_works();
}

TEST_CASE("errors: device strings", "[errors]") {
  REQUIRE_THROWS_WITH(ag::Device("gpu"), Equals("device: cannot parse 'gpu' (expected cpu, cuda or cuda:N)"));
  REQUIRE_THROWS_WITH(ag::Device("cuda:x"), StartsWith("device:") && Contains("cuda:x"));
  CHECK(ag::Device("cuda:1").index == 1);
  still_works();
}

// A kernel with an implementation for one device only, and an op that calls it (Note [Kernel
// dispatch]): the error names the op, the kernel and the device.
AG_DECLARE_KERNEL(test_cuda_only_kernel, void(const ag::Tensor& x));
namespace {
void test_cuda_only_impl(const ag::Tensor&) {}
const ag::OpInfo kTestCudaOnly{"test_cuda_only", ag::amp::Category::passthrough, false, "a test op"};
// Named as a built-in op: registering it cannot throw, calling it does.
const ag::OpInfo kTestDuplicate{"relu", ag::amp::Category::fp32, false, "a test op that takes relu's name"};
void test_cuda_only(const ag::Tensor& x0) {
  ag::Tensor x = x0;
  ag::OpScope scope(kTestCudaOnly, x);
  test_cuda_only_kernel(x.device(), x);
}
}  // namespace
AG_REGISTER_KERNEL(test_cuda_only_kernel, ag::kCUDA, test_cuda_only_impl);

TEST_CASE("errors: integers to negative integer powers", "[errors]") {
  // As PyTorch; a floating exponent is fine (float32), and so are floating tensors.
  CHECK_THROWS_WITH(ag::pow(ag::tensor(std::vector<int64_t>{2, 3}), -1),
                    Contains("pow: integers to negative integer powers are not allowed (int64 [2] on cpu ** -1)"));
  CHECK(ag::pow(ag::tensor(std::vector<int64_t>{2, 4}), -0.5).dtype() == ag::kFloat32);
  check_close(ag::pow(ag::tensor({2.f, 4.f}), -1), {0.5, 0.25}, 0, 0);
  still_works();
}

TEST_CASE("errors: a kernel without an implementation for the tensor's device", "[errors]") {
  const std::string msg = error_message([] { test_cuda_only(ag::ones({2})); });
  CHECK_THAT(msg, StartsWith("test_cuda_only (kernel test_cuda_only_kernel): no cpu implementation"));
  CHECK_THAT(msg, Contains("cpu tensors") && Contains("AG_REGISTER_KERNEL(test_cuda_only_kernel, kCPU, fn)"));
  // Called outside any op, it names the kernel alone.
  CHECK_THAT(error_message([] { test_cuda_only_kernel(ag::kCPU, ag::ones({2})); }),
             StartsWith("test_cuda_only_kernel: no cpu implementation"));
  CHECK(test_cuda_only_kernel.has(ag::kCUDA));
  CHECK_FALSE(test_cuda_only_kernel.has(ag::kCPU));
  // The library registers each of its kernels once per device.
  INFO(fmt::format("{}", fmt::join(ag::kernel_registration_clashes(), ", ")));
  CHECK(ag::kernel_registration_clashes().empty());
  CHECK(ag::kernels_registered(ag::kCPU));
  still_works();
}

TEST_CASE("errors: an op registered under a name already taken refuses to run", "[errors]") {
  CHECK(kTestDuplicate.duplicate);
  CHECK(ag::find_op("relu")->category == ag::amp::Category::passthrough);  // the first record stays
  int relus = 0;
  for (const ag::OpInfo* op : ag::op_registry()) relus += op->name == "relu";
  CHECK(relus == 1);
  ag::Tensor x = ag::ones({2});
  CHECK_THROWS_WITH(ag::OpScope(kTestDuplicate, x), Contains("relu: another op is already registered under this name"));
  still_works();
}

TEST_CASE("errors: losses, norms and distances", "[errors][loss]") {
  ag::manual_seed(3);
  const ag::Tensor x = ag::rand({3, 4});
  SECTION("a target of another shape") {
    REQUIRE_THROWS_WITH(ag::l1_loss(x, ag::rand({3, 1})),
                        Equals("l1_loss: the target float32 [3, 1] on cpu must have the input's shape [3, 4]"));
    REQUIRE_THROWS_WITH(ag::kl_div(x, ag::rand({4})), Contains("kl_div") && Contains("[4]") && Contains("[3, 4]"));
    REQUIRE_THROWS_WITH(ag::margin_ranking_loss(ag::rand({5}), ag::rand({5}), ag::rand({4})),
                        Contains("margin_ranking_loss") && Contains("[5]") && Contains("[4]"));
    REQUIRE_THROWS_WITH(ag::cosine_embedding_loss(x, x, ag::ones({4})),
                        Contains("cosine_embedding_loss") && Contains("[3]") && Contains("[4]"));
  }
  SECTION("a target of the wrong dtype") {
    REQUIRE_THROWS_WITH(ag::mse_loss(x, ag::zeros({3, 4}, ag::kInt64)),
                        Contains("mse_loss") && Contains("floating target") && Contains("int64 [3, 4]"));
    REQUIRE_THROWS_WITH(ag::multi_margin_loss(x, ag::zeros({3})),
                        Contains("multi_margin_loss") && Contains("int64 target") && Contains("float32 [3]"));
    REQUIRE_THROWS_WITH(ag::multilabel_margin_loss(x, ag::zeros({3, 4})),
                        Contains("multilabel_margin_loss") && Contains("int64 target"));
  }
  SECTION("targets out of range, options out of range") {
    REQUIRE_THROWS_WITH(ag::multi_margin_loss(x, ag::tensor(std::vector<int64_t>{0, 4, 1})),
                        Contains("multi_margin_loss: target 4 is out of range for 4 classes"));
    REQUIRE_THROWS_WITH(ag::multilabel_margin_loss(x, ag::full({3, 4}, 5, ag::kInt64)),
                        Contains("target 5 is out of range"));
    REQUIRE_THROWS_WITH(ag::smooth_l1_loss(x, x, ag::Reduction::Mean, -1), Contains("beta must be >= 0"));
    REQUIRE_THROWS_WITH(ag::huber_loss(x, x, ag::Reduction::Mean, 0), Contains("delta must be > 0"));
    REQUIRE_THROWS_WITH(ag::multi_margin_loss(x, ag::zeros({3}, ag::kInt64), 3), Contains("p must be 1 or 2"));
    REQUIRE_THROWS_WITH(ag::l1_loss(x, x, ag::Reduction::BatchMean), Contains("l1_loss: reduction batchmean is kl_div's only"));
    REQUIRE_THROWS_WITH(ag::margin_ranking_loss(ag::rand({2}), ag::rand({2}), ag::ones({2}), 0, ag::Reduction::BatchMean),
                        Contains("margin_ranking_loss: reduction batchmean"));
  }
  SECTION("norms: p < 0, integer inputs; cdist's feature sizes") {
    REQUIRE_THROWS_WITH(ag::norm(x, -1), Equals("norm: p must be >= 0 (or -inf), got -1"));
    REQUIRE_THROWS_WITH(ag::norm(ag::zeros({2}, ag::kInt64)), Contains("norm: expected a floating input"));
    REQUIRE_THROWS_WITH(ag::cdist(ag::rand({5, 3}), ag::rand({4, 2})),
                        Equals("cdist: x1 float32 [5, 3] on cpu and x2 float32 [4, 2] on cpu must have the same number "
                               "of features (last dim)"));
    REQUIRE_THROWS_WITH(ag::cdist(ag::rand({5}), ag::rand({4, 5})), Contains("cdist: expected inputs of at least 2 dims"));
    REQUIRE_THROWS_WITH(ag::pdist(ag::rand({5})), Contains("pdist: expected a 2-D input"));
    REQUIRE_THROWS_WITH(ag::renorm(x, 0, 0, 1), Contains("renorm: p must be > 0"));
    REQUIRE_THROWS_WITH(ag::group_norm(ag::rand({2, 6, 3}), 4), Contains("group_norm: 6 channels") && Contains("4 groups"));
    REQUIRE_THROWS_WITH(ag::norm(ag::zeros({0, 3}), INFINITY, {0}), Contains("norm: cannot reduce over an empty dimension"));
  }
  SECTION("domain errors are NaN, as PyTorch's, not exceptions") {
    CHECK(std::isnan(ag::acos(ag::tensor({2.f})).item<float>()));
    CHECK(std::isnan(ag::poisson_nll_loss(ag::tensor({-1.f}), ag::tensor({1.f}), false).item<float>()));
    CHECK(ag::norm(ag::zeros({0, 3}), 2, {0}).to_vector<float>() == std::vector<float>{0, 0, 0});
  }
  SECTION("the default dtype takes floating dtypes only") {
    REQUIRE_THROWS_WITH(ag::set_default_dtype(ag::kBool), Equals("set_default_dtype: only floating dtypes can be the default, got bool"));
  }
  still_works();
}

TEST_CASE("errors: convolutions", "[errors][conv]") {
  ag::manual_seed(4);
  SECTION("a 2-D input to conv3d, a 2-D weight") {
    REQUIRE_THROWS_WITH(ag::conv3d(ag::rand({4, 5}), ag::rand({2, 1, 3, 3, 3})),
                        Equals("conv3d: expected a 5-D input [N, C, D, H, W] (or 4-D unbatched), got float32 [4, 5] "
                               "on cpu"));
    REQUIRE_THROWS_WITH(ag::conv1d(ag::rand({1, 2, 8}), ag::rand({2, 2})),
                        Contains("conv1d: weight must be 3-D [out_channels, in_channels/groups, k...]") &&
                            Contains("[2, 2]"));
  }
  SECTION("mismatched channels") {
    REQUIRE_THROWS_WITH(ag::conv1d(ag::rand({1, 3, 8}), ag::rand({4, 2, 3})),
                        Equals("conv1d: input float32 [1, 3, 8] on cpu has 3 channels but weight [4, 2, 3] expects 2 "
                               "(in_channels/groups 2 x groups 1)"));
    REQUIRE_THROWS_WITH(ag::conv_transpose2d(ag::rand({1, 3, 4, 4}), ag::rand({4, 2, 3, 3})),
                        Contains("conv_transpose2d: input float32 [1, 3, 4, 4] on cpu has 3 channels but weight "
                                 "[4, 2, 3, 3] expects 4"));
    REQUIRE_THROWS_WITH(ag::conv3d(ag::rand({1, 4, 3, 3, 3}), ag::rand({3, 2, 1, 1, 1}), {}, {1, 1, 1}, {0, 0, 0},
                                   {1, 1, 1}, 2),
                        Contains("conv3d: groups 2 must divide the output channels 3"));
    REQUIRE_THROWS_WITH(ag::conv1d(ag::rand({1, 2, 8}), ag::rand({4, 2, 3}), ag::rand({3})),
                        Equals("conv1d: bias must be [4] of float32, got float32 [3] on cpu"));
  }
  SECTION("a kernel larger than the padded input") {
    REQUIRE_THROWS_WITH(ag::conv3d(ag::rand({1, 1, 2, 5, 5}), ag::rand({1, 1, 3, 3, 3})),
                        Equals("conv3d: input [1, 1, 2, 5, 5] (padded by [0, 0, 0]) is smaller than the kernel "
                               "[3, 3, 3] (dilation [1, 1, 1]) along spatial dim 0"));
    REQUIRE_THROWS_WITH(ag::conv1d(ag::rand({1, 1, 4}), ag::rand({1, 1, 3}), {}, 1, 0, 2),
                        Contains("conv1d: input [1, 1, 4] (padded by [0]) is smaller than the kernel [3] (dilation [2])"));
  }
  SECTION("output_padding not below the stride, bad strides") {
    REQUIRE_THROWS_WITH(ag::conv_transpose2d(ag::rand({1, 2, 4, 4}), ag::rand({2, 2, 3, 3}), {}, {2, 2}, {0, 0}, {2, 1}),
                        Equals("conv_transpose2d: output_padding [2, 1] must be non-negative and smaller than the "
                               "stride [2, 2]"));
    REQUIRE_THROWS_WITH(ag::conv_transpose1d(ag::rand({1, 2, 4}), ag::rand({2, 2, 3}), {}, 1, 0, 1),
                        Contains("conv_transpose1d: output_padding [1] must be non-negative and smaller than the stride [1]"));
    REQUIRE_THROWS_WITH(ag::conv1d(ag::rand({1, 2, 8}), ag::rand({4, 2, 3}), {}, 0),
                        Equals("conv1d: stride [0]: non-positive stride is not supported"));
    REQUIRE_THROWS_WITH(ag::conv2d(ag::rand({1, 2, 8, 8}), ag::rand({4, 2, 3, 3}), {}, {1, 1}, {0, -1}),
                        Equals("conv2d: padding [0, -1]: negative padding is not supported"));
    REQUIRE_THROWS_WITH(ag::conv1d(ag::rand({1, 2, 8}), ag::rand({4, 2, 3}), {}, 1, 0, 0),
                        Equals("conv1d: dilation [0]: dilation should be greater than zero"));
  }
  SECTION("dtypes and layers") {
    REQUIRE_THROWS_WITH(ag::conv1d(ag::rand({1, 2, 8}), ag::rand({4, 2, 3}, ag::TensorOptions(ag::kFloat64))),
                        Contains("conv1d: input and weight must share a floating dtype"));
    REQUIRE_THROWS_WITH(ag::nn::ConvTranspose2d(3, 4, 3, {.groups = 2}),
                        Equals("ConvTranspose2d: channels in 3 and out 4 must be positive multiples of groups 2"));
    REQUIRE_THROWS_WITH(ag::nn::Conv3d(2, 2, {3, 0, 3}), Equals("Conv3d: kernel size [3, 0, 3] must be positive"));
  }
}

TEST_CASE("errors: recurrent cells and modules", "[errors][rnn]") {
  ag::manual_seed(22);
  const ag::Tensor x = ag::rand({3, 5}), h = ag::rand({3, 4}), c = ag::rand({3, 4});
  const ag::Tensor wi = ag::rand({16, 5}), wh = ag::rand({16, 4});
  SECTION("input size against weight_ih") {
    REQUIRE_THROWS_WITH(ag::lstm_cell(ag::rand({3, 6}), h, c, wi, wh),
                        Equals("lstm_cell: input float32 [3, 6] on cpu has 6 features, but weight_ih float32 [16, 5] on "
                               "cpu expects input_size 5"));
  }
  SECTION("hidden sizes of the weights") {
    REQUIRE_THROWS_WITH(ag::lstm_cell(x, h, c, wi, ag::rand({12, 4})),
                        Equals("lstm_cell: weight_hh float32 [12, 4] on cpu must be [4 * hidden_size, hidden_size]"));
    REQUIRE_THROWS_WITH(ag::gru_cell(x, h, ag::rand({16, 5}), ag::rand({12, 4})),
                        StartsWith("gru_cell: weight_ih float32 [16, 5] on cpu must be [12, input_size] (3 * hidden_size 4"));
    REQUIRE_THROWS_WITH(ag::rnn_tanh_cell(x, h, ag::rand({4, 5}), ag::rand({4, 4}), ag::rand({5})),
                        Equals("rnn_tanh_cell: bias float32 [5] on cpu must be [4] (1 * hidden_size 4)"));
  }
  SECTION("hx and cx of the wrong shape") {
    REQUIRE_THROWS_WITH(ag::lstm_cell(x, ag::rand({2, 4}), c, wi, wh),
                        Equals("lstm_cell: hx float32 [2, 4] on cpu must be [3, 4] (batch, hidden_size 4) for input "
                               "float32 [3, 5] on cpu"));
    REQUIRE_THROWS_WITH(ag::lstm_cell(x, h, ag::rand({3, 3}), wi, wh),
                        Equals("lstm_cell: cx float32 [3, 3] on cpu must be [3, 4] (hx's shape: batch, hidden_size 4) "
                               "for input float32 [3, 5] on cpu"));
    REQUIRE_THROWS_WITH(ag::rnn_relu_cell(ag::rand({5}), ag::rand({3, 4}), ag::rand({4, 5}), ag::rand({4, 4})),
                        Contains("rnn_relu_cell: hx float32 [3, 4] on cpu must be [4] (hidden_size 4)"));
  }
  SECTION("dtypes") {
    REQUIRE_THROWS_WITH(ag::gru_cell(x, h.to(ag::kFloat64), ag::rand({12, 5}), ag::rand({12, 4})),
                        StartsWith("gru_cell: input, hx, weights and biases must share one floating dtype; got input "
                                   "float32 [3, 5] on cpu, hx float64 [3, 4] on cpu"));
    REQUIRE_THROWS_WITH(ag::lstm_cell(x, h, c.to(ag::kFloat16), wi, wh),
                        Equals("lstm_cell: cx float16 [3, 4] on cpu must have the input's dtype (float32) or be float32 "
                               "with a 16-bit input"));
    REQUIRE_THROWS_WITH(ag::_thnn_fused_lstm_cell(ag::rand({3, 16}), ag::rand({3, 16}), ag::rand({3, 4}, ag::kFloat64)),
                        Contains("_thnn_fused_lstm_cell: cx float64 [3, 4] on cpu must have the gates' dtype (float32)"));
  }
  SECTION("modules: input size, h0 and c0") {
    ag::nn::RNNOptions o;
    o.num_layers = 2;
    ag::nn::LSTM lstm(5, 4, o);
    REQUIRE_THROWS_WITH(lstm(ag::rand({7, 3, 6})),
                        Equals("LSTM: input float32 [7, 3, 6] on cpu has 6 features, but input_size is 5"));
    REQUIRE_THROWS_WITH(lstm(ag::rand({7, 3, 5}), ag::rand({1, 3, 4})),
                        Equals("LSTM: h0 float32 [1, 3, 4] on cpu must be [2, 3, 4] (num_layers * num_directions, "
                               "batch, hidden_size) for input float32 [7, 3, 5] on cpu"));
    REQUIRE_THROWS_WITH(lstm(ag::rand({7, 3, 5}), ag::rand({2, 3, 4}), ag::rand({2, 3, 5})),
                        StartsWith("LSTM: c0 float32 [2, 3, 5] on cpu must be [2, 3, 4]"));
    ag::nn::GRU gru(5, 4);
    REQUIRE_THROWS_WITH(gru.forward(ag::rand({7, 3, 5}), ag::rand({1, 3, 4}), ag::rand({1, 3, 4})),
                        Equals("GRU: c0 is an LSTM's cell state; GRU takes h0 only"));
    REQUIRE_THROWS_WITH(gru(ag::rand({5})), StartsWith("GRU: expected input of 3 dims (seq, batch, input_size) or 2"));
    REQUIRE_THROWS_WITH(ag::nn::RNN(5, 0), Equals("RNN: input_size 5 and hidden_size 0 must be positive"));
  }
  still_works();
}
