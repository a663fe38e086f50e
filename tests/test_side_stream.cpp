// Weight gradients beside the stream (Note [Weight gradients beside the stream] in
// cuda/side_stream.h): the same bits as on the library stream, and only where nothing reads the
// gradient before backward ends. Its captured GPT step is in test_gpt.cpp; layer norm's in-place
// sum with the switch on, in test_amp.cpp.
#include <vector>

#include "common.h"

// Note [Weight gradients beside the stream] in cuda/side_stream.h: a linear layer's weight and
// bias gradients that become .grad as they are run on the side stream; anything else stays on
// the library stream. Four layers of products large enough to go beside it (2^24 multiply-adds
// and more), so that each side GEMM overlaps the next layer's backward and the lag join frees
// its operands while later layers allocate.
TEST_CASE("weight gradients beside the stream: the stream's bits, joined before anything reads them", "[cuda]") {
  if (skip_without_cuda()) return;
  ag::manual_seed(fresh_seed());
  const auto opt = ag::TensorOptions().device(ag::kCUDA);
  const int64_t rows = 1024, width = 256, hidden = 512;
  auto param = [&](ag::Shape s, double scale) { return (ag::randn(s, opt) * scale).detach().requires_grad_(); };
  std::vector<ag::Tensor> ps{param({hidden, width}, 0.06), param({hidden}, 0.1),  param({width, hidden}, 0.04),
                             param({width}, 0.1),          param({width, width}, 0.06), param({width, width}, 0.06),
                             param({width}, 0.1)};
  const ag::Tensor x = ag::randn({rows, width}, opt), gy = ag::randn({rows, width}, opt);
  // Each layer's weight GEMM: 512 x 256 x 1024 and up; the last layer has no bias.
  auto backward = [&](bool amp) {
    ag::amp::AutocastGuard autocast(ag::kCUDA, ag::kFloat16, amp);
    ag::Tensor h = ag::linear_gelu(x, ps[0], ps[1]);
    h = ag::linear(h, ps[2], ps[3]);
    h = ag::layer_norm(h, {width});
    h = ag::linear(h, ps[4], ps[6]);
    h = ag::linear(h, ps[5]);
    (h * gy).sum().backward();
  };
  auto grads = [&] {
    std::vector<std::vector<double>> g;
    for (const ag::Tensor& p : ps) g.push_back(p.grad().to_vector<double>());
    return g;
  };
  auto clear = [&] {
    for (ag::Tensor& p : ps) p.set_grad({});
  };
  struct Restore {
    bool on = ag::cuda::overlap_weight_grads();
    ~Restore() { ag::cuda::set_overlap_weight_grads(on); }
  } restore;
  for (bool amp : {true, false}) {
    INFO("autocast " << amp);
    ag::cuda::set_overlap_weight_grads(false);
    clear();
    uint64_t works = ag::cuda::side_stream_works();
    backward(amp);
    const auto on_stream = grads();
    CHECK(ag::cuda::side_stream_works() == works);
    backward(amp);  // accumulated: .grad holds a sum now
    const auto on_stream_twice = grads();

    ag::cuda::set_overlap_weight_grads(true);
    clear();
    works = ag::cuda::side_stream_works();
    backward(amp);
    CHECK(ag::cuda::side_stream_works() - works == 4);  // every weight, with its bias where it has one
    CHECK(grads() == on_stream);
    works = ag::cuda::side_stream_works();
    backward(amp);  // .grad is no longer empty: the accumulator adds, on the library stream
    CHECK(ag::cuda::side_stream_works() == works);
    CHECK(grads() == on_stream_twice);
    if (amp) CHECK(ps[0].grad().dtype() == ag::kFloat32);  // the wide gradient (Note [Wide weight gradients])

    // A post-accumulate hook reads the gradient as it lands: that layer's stays on the stream.
    clear();
    double seen = 0;
    ps[2].register_post_accumulate_grad_hook([&](const ag::Tensor& leaf) { seen = leaf.grad().sum().item<double>(); });
    works = ag::cuda::side_stream_works();
    backward(amp);
    CHECK(ag::cuda::side_stream_works() - works == 3);
    CHECK(grads() == on_stream);
    CHECK(seen == ps[2].grad().sum().item<double>());  // the hook saw the finished gradient
    ag::TensorImpl& impl = *ps[2].unsafe_impl();
    impl.post_accumulate_grad_hooks.clear();
  }

  // One weight used twice: its gradient is a sum, added on the library stream.
  {
    ag::cuda::set_overlap_weight_grads(true);
    clear();
    const uint64_t works = ag::cuda::side_stream_works();
    {
      ag::amp::AutocastGuard autocast(ag::kCUDA, ag::kFloat16);
      ag::Tensor h = ag::linear(ag::linear(x, ps[4]), ps[4]);
      (h * gy).sum().backward();
    }
    CHECK(ag::cuda::side_stream_works() == works);
    const auto twice = ps[4].grad().to_vector<double>();
    ag::cuda::set_overlap_weight_grads(false);
    ps[4].set_grad({});
    {
      ag::amp::AutocastGuard autocast(ag::kCUDA, ag::kFloat16);
      ag::Tensor h = ag::linear(ag::linear(x, ps[4]), ps[4]);
      (h * gy).sum().backward();
    }
    CHECK(ps[4].grad().to_vector<double>() == twice);
  }

  // In a CUDA graph the side stream forks from the capture and joins it again: replays give the
  // eager step's gradients.
  ag::cuda::set_overlap_weight_grads(false);
  clear();
  backward(true);
  const auto eager = grads();
  ag::cuda::set_overlap_weight_grads(true);
  clear();
  backward(true);  // warm-up outside the capture (the side stream and its workspace are made there)
  ag::cuda::CudaGraph graph;
  const uint64_t works = ag::cuda::side_stream_works();
  graph.capture([&] {
    clear();
    backward(true);
  });
  CHECK(ag::cuda::side_stream_works() - works == 4);
  for (int i = 0; i < 3; ++i) {
    graph.replay();
    CHECK(grads() == eager);
  }
}
