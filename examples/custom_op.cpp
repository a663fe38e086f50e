// examples/custom_op.cpp: an op defined outside ampgrad the way ampgrad defines its own (Note
// [Defining an op] in <ampgrad/ops/define_op.h>), then a tiny network trained with it under
// autocast. The op is swish with a learnable slope per feature, y = x * sigmoid(beta * x):
// a record with its autocast category, a kernel with a CPU and a CUDA implementation
// (custom_op_cuda.cu), and a backward. Autocast, the trace, the op table, gradcheck and the
// errors treat it as they treat ampgrad's own ops; the category is all it takes to make it
// run in float32 under float16 autocast (PyTorch needs custom_fwd or register_autocast).
//
//   ./custom_op [cpu|cuda]     exits 1 if the gradient check fails or the net does not learn
#include <ampgrad/ampgrad.h>
#include <ampgrad/ops/define_op.h>  // defining an op of our own

#include <cmath>
#include <cstdio>
#include <cstring>

namespace ag = ampgrad;

// ---- 1. The kernel: declared once, implemented per device ------------------------------------

// y = x * sigmoid(beta * x) over contiguous x [..., features] and beta [features], one dtype.
AG_DECLARE_KERNEL(swish_forward, void(const ag::Tensor& x, const ag::Tensor& beta, const ag::Tensor& y));

namespace {
template <class T> void swish_forward_typed(const ag::Tensor& x, const ag::Tensor& beta, const ag::Tensor& y) {
  const int64_t n = x.numel(), features = beta.numel();
  const T* px = x.data_ptr<T>();
  const T* pb = beta.data_ptr<T>();
  T* py = y.data_ptr<T>();
  for (int64_t i = 0; i < n; ++i) py[i] = px[i] / (T(1) + std::exp(-pb[i % features] * px[i]));
}
void swish_forward_cpu(const ag::Tensor& x, const ag::Tensor& beta, const ag::Tensor& y) {
  if (x.dtype() == ag::kFloat64) return swish_forward_typed<double>(x, beta, y);
  swish_forward_typed<float>(x, beta, y);
}
}  // namespace
AG_REGISTER_KERNEL(swish_forward, ag::kCPU, swish_forward_cpu);

#ifdef CUSTOM_OP_CUDA
// In custom_op_cuda.cu: queues the kernel on a stream, returns nullptr or the launch's error.
const char* swish_forward_launch(const float* x, const float* beta, float* y, int64_t n, int64_t features,
                                 CUstream_st* stream);
namespace {
void swish_forward_cuda(const ag::Tensor& x, const ag::Tensor& beta, const ag::Tensor& y) {
  AG_CHECK(x.dtype() == ag::kFloat32, "swish on cuda: float32 only, got {}", x.desc());
  // current_stream(): ampgrad's stream, after all the work it has queued (Note [CUDA stream]).
  // Taken before the pointers: it submits what ampgrad held back, so data_ptr() has nothing to
  // wait for (Note [Raw access] in <ampgrad/core/tensor.h>).
  CUstream_st* stream = ag::cuda::current_stream(x.device().index);
  const char* error = swish_forward_launch(x.data_ptr<float>(), beta.data_ptr<float>(), y.data_ptr<float>(), x.numel(),
                                           beta.numel(), stream);
  AG_CHECK(error == nullptr, "swish: CUDA kernel launch failed: {}", error ? error : "");
}
}  // namespace
AG_REGISTER_KERNEL(swish_forward, ag::kCUDA, swish_forward_cuda);
#endif

// ---- 2. The record: name, autocast category and why ------------------------------------------

const ag::OpInfo kSwish{"swish", ag::amp::Category::fp32, /*differentiable=*/true,
                        "e^(-beta x) overflows float16 below beta x = -11: float32, as softplus"};

// ---- 3. The op, and 4. its backward ----------------------------------------------------------

ag::Tensor swish(const ag::Tensor& x0, const ag::Tensor& beta0) {
  ag::Tensor x = x0, beta = beta0;
  ag::OpScope scope(kSwish, x, beta);  // under autocast, both arrive here in float32
  ag::check_defined(kSwish, x, "input");
  ag::check_defined(kSwish, beta, "beta");
  ag::check_same_device(kSwish, x, beta);
  AG_CHECK(x.dim() >= 1 && beta.dim() == 1 && x.size(-1) == beta.size(0),
           "swish: beta {} must hold one slope per feature of the input {}", beta.desc(), x.desc());
  AG_CHECK(x.dtype() == beta.dtype() && (x.dtype() == ag::kFloat32 || x.dtype() == ag::kFloat64),
           "swish: expected float32 or float64 tensors of one dtype, got {} and {}", x.desc(), beta.desc());
  ag::Tensor y = ag::empty(x.shape(), x.options());
  if (y.numel()) swish_forward(y.device(), x.contiguous(), beta.contiguous(), y);
  if (ag::autograd::any_requires_grad({&x, &beta})) {
    // Written with ops, so it runs on every device. The engine sums beta's gradient over the
    // rows (its broadcast) and casts each gradient to its input's dtype.
    ag::autograd::record(kSwish, y, {x, beta}, {x, beta}, [](const ag::Tensor& g, const std::vector<ag::Tensor>& s) {
      const ag::Tensor& xs = s[0];
      const ag::Tensor& bs = s[1];
      const ag::Tensor sig = ag::sigmoid(bs * xs);
      const ag::Tensor dsig = sig * (1 - sig);  // sigmoid'(beta x)
      return ag::autograd::Grads{g * (sig + bs * xs * dsig), g * xs * xs * dsig};
    });
  }
  return scope.finish(y);
}

#ifndef CUSTOM_OP_PLUGIN  // the same file, built as a library for `ampgrad ops --load`, stops here

// ---- A tiny network with it, trained under autocast ----------------------------------------

struct Swish : ag::nn::Module {
  explicit Swish(int64_t features) : Module("Swish"), beta(register_parameter("beta", ag::ones({features}))) {}
  ag::Tensor forward(const ag::Tensor& x) override { return swish(x, beta); }
  ag::Tensor beta;
};

// Two interleaved spirals: points [n, 2] and labels [n].
std::pair<ag::Tensor, ag::Tensor> spirals(int64_t n) {
  std::vector<float> xy;
  std::vector<int64_t> labels;
  ag::Tensor noise = ag::randn({n, 2}) * 0.05;
  const std::vector<float> jitter = noise.to_vector<float>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = i % 2;
    const float t = 0.5f + 3.0f * static_cast<float>(i / 2) / static_cast<float>(n / 2);
    const float angle = t * 2.2f + static_cast<float>(c) * 3.14159265f;
    xy.push_back(t * std::cos(angle) / 3.5f + jitter[2 * i]);
    xy.push_back(t * std::sin(angle) / 3.5f + jitter[2 * i + 1]);
    labels.push_back(c);
  }
  return {ag::tensor(xy, {n, 2}), ag::tensor(labels)};
}

int main(int argc, char** argv) {
  const bool want_cuda = argc > 1 ? std::strcmp(argv[1], "cuda") == 0 : ag::cuda::is_available();
  const ag::Device dev = want_cuda ? ag::Device(ag::kCUDA) : ag::Device(ag::kCPU);
  const ag::DType amp_dtype = dev.is_cuda() ? ag::kFloat16 : ag::kBFloat16;
  ag::manual_seed(0);

  // The op table lists it like a built-in op (the same table `ampgrad ops` prints).
  for (const auto& e : ag::amp::op_table())
    if (e.name == "swish") std::printf("%s\n", ag::amp::format_op_table({e}).c_str());

  // Its gradient against float64 central differences, like every built-in op's.
  const ag::Tensor gx = ag::randn({3, 4}, ag::kFloat64).requires_grad_();
  const ag::Tensor gb = (ag::rand({4}, ag::kFloat64) + 0.5).requires_grad_();
  const ag::autograd::GradcheckResult check =
      ag::autograd::gradcheck([](const std::vector<ag::Tensor>& v) { return swish(v[0], v[1]); }, {gx, gb});
  std::printf("gradcheck of swish in float64: %s %s\n", check.ok ? "ok" : "FAILED", check.message.c_str());

  // A clear error for bad input, naming the op and the shapes.
  try {
    swish(ag::ones({2, 3}), ag::ones({4}));
  } catch (const ag::Error& e) {
    std::printf("bad input: %s\n", e.what());
  }

  auto [x, y] = spirals(512);
  x = x.to(dev);
  y = y.to(dev);
  auto net = std::make_shared<ag::nn::Sequential>();
  net->push_back(std::make_shared<ag::nn::Linear>(2, 64));
  net->push_back(std::make_shared<Swish>(64));
  net->push_back(std::make_shared<ag::nn::Linear>(64, 64));
  net->push_back(std::make_shared<Swish>(64));
  net->push_back(std::make_shared<ag::nn::Linear>(64, 2));
  net->to(dev);
  ag::optim::Adam opt(net->parameters(), ag::optim::AdamOptions(1e-2));
  // float16 needs the loss scaled; bfloat16 has float32's range and needs none.
  ag::amp::GradScaler scaler(ag::amp::GradScalerOptions().enabled(amp_dtype == ag::kFloat16));

  // One step traced: linear runs in 16 bits, swish in float32 (its category), and the next
  // linear casts swish's float32 output back down.
  {
    ag::amp::Trace trace;
    ag::amp::AutocastGuard autocast(dev.type, amp_dtype);
    (void)ag::cross_entropy((*net)(x), y);
    std::printf("\none forward under %s autocast on %s:\n%s\n", std::string(ag::dtype_name(amp_dtype)).c_str(),
                dev.str().c_str(), ag::amp::format_trace(trace.records()).c_str());
  }

  double first_loss = 0, loss_value = 0;
  for (int step = 0; step < 300; ++step) {
    opt.zero_grad();
    ag::Tensor loss;
    {
      ag::amp::AutocastGuard autocast(dev.type, amp_dtype);
      loss = ag::cross_entropy((*net)(x), y);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    if (step % 100 == 0 || step == 299) {
      loss_value = loss.item<double>();
      if (step == 0) first_loss = loss_value;
      std::printf("step %3d  loss %.4f\n", step, loss_value);
    }
  }
  ag::Tensor logits;
  {
    ag::NoGradGuard no_grad;
    logits = (*net)(x);
  }
  const double accuracy = ag::eq(ag::argmax(logits, 1), y).to(ag::kFloat32).mean().item<double>();
  std::printf("accuracy on the spirals %.3f, loss %.4f -> %.4f\n", accuracy, first_loss, loss_value);
  return check.ok && accuracy > 0.9 && loss_value < first_loss ? 0 : 1;
}

#endif  // CUSTOM_OP_PLUGIN
