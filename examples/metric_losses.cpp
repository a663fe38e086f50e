// examples/metric_losses.cpp: an embedding learned with metric losses, in float64 by default.
// set_default_dtype(kFloat64) makes every factory and layer parameter float64 (as
// torch.set_default_dtype); a two-layer net maps 2-D points of three rings to 2-D embeddings,
// trained with TripletMarginLoss (anchor and positive from one ring, negative from another)
// and CosineEmbeddingLoss. cdist then measures how well the rings separate.
//
//   ./metric_losses [cpu|cuda]     exits 1 unless same-ring pairs end up closer than others
#include <ampgrad/ampgrad.h>

#include <cmath>
#include <cstdio>
#include <cstring>

namespace ag = ampgrad;

namespace {

// n points of ring r (radius 1 + r) with a little noise, [n, 2].
ag::Tensor ring(int r, int64_t n, ag::Device dev) {
  const ag::Tensor angle = ag::rand({n}) * (2 * M_PI);
  const ag::Tensor radius = ag::randn({n}) * 0.05 + (1.0 + r);
  return ag::stack({ag::cos(angle) * radius, ag::sin(angle) * radius}, 1).to(dev);
}

}  // namespace

int main(int argc, char** argv) {
  const bool cuda = argc > 1 && std::strcmp(argv[1], "cuda") == 0;
  if (cuda && !ag::cuda::is_available()) {
    std::printf("metric_losses: no CUDA device here\n");
    return 0;
  }
  const ag::Device dev = cuda ? ag::Device(ag::kCUDA) : ag::Device(ag::kCPU);
  ag::set_default_dtype(ag::kFloat64);
  ag::manual_seed(3);
  auto net = std::make_shared<ag::nn::Sequential>();
  net->push_back(std::make_shared<ag::nn::Linear>(2, 32));
  net->push_back(std::make_shared<ag::nn::Tanh>());
  net->push_back(std::make_shared<ag::nn::Linear>(32, 8));
  net->to(dev);
  std::printf("parameters in %s (the default dtype)\n", ag::dtype_name(net->parameters()[0].dtype()).data());
  ag::nn::TripletMarginLoss triplet(/*margin=*/1.0);
  ag::nn::CosineEmbeddingLoss cosine(/*margin=*/0.2);
  ag::optim::Adam opt(net->parameters(), ag::optim::AdamOptions(1e-2));
  const int64_t n = 64;
  for (int step = 0; step < 300; ++step) {
    const int a = step % 3, b = (step + 1) % 3;
    const ag::Tensor anchor = (*net)(ring(a, n, dev)), positive = (*net)(ring(a, n, dev));
    const ag::Tensor negative = (*net)(ring(b, n, dev));
    const ag::Tensor same = ag::ones({n}, ag::TensorOptions().device(dev));
    ag::Tensor loss = triplet(anchor, positive, negative) + cosine(anchor, positive, same) +
                      cosine(anchor, negative, -same);
    opt.zero_grad();
    loss.backward();
    opt.step();
    if (step % 100 == 0) std::printf("step %3d  loss %.4f\n", step, loss.item<double>());
  }
  // Mean distance between embeddings of one ring and of two rings.
  ag::NoGradGuard no_grad;
  double within = 0, across = 0;
  for (int r = 0; r < 3; ++r) {
    const ag::Tensor e = ag::normalize((*net)(ring(r, n, dev)));
    within += ag::mean(ag::pdist(e)).item<double>() / 3;
    across += ag::mean(ag::cdist(e, ag::normalize((*net)(ring((r + 1) % 3, n, dev))))).item<double>() / 3;
  }
  std::printf("mean distance within a ring %.3f, across rings %.3f\n", within, across);
  const bool ok = within < 0.5 * across;
  std::printf("%s\n", ok ? "separated" : "NOT separated");
  return ok ? 0 : 1;
}
