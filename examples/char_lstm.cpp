// examples/char_lstm.cpp: a character-level LSTM language model on real text. Characters
// (printable ASCII and newline: 96 symbols) are embedded by an nn::Embedding (a learned table
// of vectors, looked up by index), run through a 2-layer nn::LSTM and a linear head, and
// trained with cross-entropy on the next character and Adam; on CUDA under float16 autocast with a
// GradScaler (the LSTM's cell state stays float32: Note [Cell state precision]). Trains on the
// first nine tenths of the text and prints, every 10 steps, the loss on a batch of the last
// tenth; on CUDA that validation runs in a memory pool of its own (ag::cuda::MemPool), so
// the training step's tensors keep their addresses and its calls keep replaying as CUDA
// graphs. Prints the loss falling and a short string sampled from the model.
//
//   ./char_lstm [text file] [steps] [cpu|cuda]
//   defaults: /usr/share/common-licenses/GPL-3, 40 steps, cuda when there is a GPU
//   exits 1 unless the loss of the last steps is below the first steps'
#include <ampgrad/ampgrad.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

namespace ag = ampgrad;

namespace {

constexpr int64_t kVocab = 96;  // ' '..'~' and '\n'

int64_t encode(unsigned char c) { return c == '\n' ? 95 : (c >= 32 && c < 127 ? c - 32 : 0); }
char decode(int64_t i) { return i == 95 ? '\n' : static_cast<char>(i + 32); }

// A batch of `batch` windows at random offsets, time-major: inputs and next characters [T * B].
std::pair<ag::Tensor, ag::Tensor> batch_of(const std::vector<int64_t>& text, int64_t steps, int64_t batch, ag::Device dev) {
  std::vector<int64_t> x(static_cast<size_t>(steps * batch)), y(x.size());
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t at = std::rand() % static_cast<int64_t>(text.size() - steps - 1);
    for (int64_t t = 0; t < steps; ++t) {
      x[t * batch + b] = text[at + t];
      y[t * batch + b] = text[at + t + 1];
    }
  }
  return {ag::tensor(x).to(dev), ag::tensor(y).to(dev)};
}

}  // namespace

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : "/usr/share/common-licenses/GPL-3";
  const int steps = argc > 2 ? std::atoi(argv[2]) : 40;
  const bool cuda = argc > 3 ? std::strcmp(argv[3], "cuda") == 0 : ag::cuda::is_available();
  if (cuda && !ag::cuda::is_available()) {
    std::printf("char_lstm: no CUDA device here\n");
    return 0;
  }
  std::ifstream in(path, std::ios::binary);
  const std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (raw.size() < 1000) {
    std::fprintf(stderr, "char_lstm: %s: expected a text file of at least 1000 bytes\n", path.c_str());
    return 1;
  }
  std::vector<int64_t> text;
  for (unsigned char c : raw) text.push_back(encode(c));
  const auto split = static_cast<std::ptrdiff_t>(text.size() * 9 / 10);
  const std::vector<int64_t> train(text.begin(), text.begin() + split), val(text.begin() + split, text.end());
  const ag::Device dev = cuda ? ag::Device(ag::kCUDA) : ag::Device(ag::kCPU);
  ag::manual_seed(5);
  std::srand(5);

  const int64_t embed = 64, hidden = 128, seq = 32, batch = 16;
  ag::nn::Embedding embedding(kVocab, embed);
  ag::nn::RNNOptions lstm_opts;
  lstm_opts.num_layers = 2;
  ag::nn::LSTM lstm(embed, hidden, lstm_opts);
  ag::nn::Linear head(hidden, kVocab);
  embedding.to(dev);
  lstm.to(dev);
  head.to(dev);
  std::vector<ag::Tensor> params = lstm.parameters();
  for (const ag::Tensor& p : head.parameters()) params.push_back(p);
  for (const ag::Tensor& p : embedding.parameters()) params.push_back(p);
  ag::optim::Adam opt(params, ag::optim::AdamOptions(1e-2));
  ag::amp::GradScaler scaler(ag::amp::GradScalerOptions().enabled(cuda));
  std::printf("char_lstm on %s: %zu characters of %s, %s\n", dev.str().c_str(), text.size(), path.c_str(),
              cuda ? "float16 autocast" : "float32");

  auto logits_of = [&](const ag::Tensor& idx, const ag::Tensor& h0, const ag::Tensor& c0, int64_t t, int64_t b) {
    const ag::Tensor x = embedding(idx).reshape({t, b, embed});
    ag::nn::RNNResult r = lstm(x, h0, c0);
    return std::make_pair(head(r.output.reshape({t * b, hidden})), r);
  };
  // The validation loss of a batch of the held-out text. Its tensors, allocated between
  // training steps, would take blocks the next step's tensors had before and move them
  // (Note [Memory pools] in cuda/runtime.h): on CUDA they come from a pool of their own.
  std::optional<ag::cuda::MemPool> eval_pool;
  if (cuda) eval_pool.emplace(dev.index);
  auto validation_loss = [&] {
    std::optional<ag::cuda::MemPoolGuard> in_pool;
    if (eval_pool) in_pool.emplace(*eval_pool);
    ag::NoGradGuard no_grad;
    auto [x, y] = batch_of(val, seq, batch, dev);
    ag::amp::AutocastGuard autocast(dev.type, std::nullopt, cuda);
    return ag::cross_entropy(logits_of(x, ag::Tensor(), ag::Tensor(), seq, batch).first, y).item<float>();
  };
  double first = 0, last = 0;
  const int window = std::max(1, steps / 4);
  for (int step = 0; step < steps; ++step) {
    auto [x, y] = batch_of(train, seq, batch, dev);
    ag::Tensor loss;
    {
      ag::amp::AutocastGuard autocast(dev.type, std::nullopt, cuda);
      loss = ag::cross_entropy(logits_of(x, ag::Tensor(), ag::Tensor(), seq, batch).first, y);
    }
    opt.zero_grad();
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    const double l = loss.item<float>();
    if (step < window) first += l / window;
    if (step >= steps - window) last += l / window;
    if (step % 10 == 0 || step == steps - 1) std::printf("step %3d  loss %.3f  validation %.3f\n", step, l, validation_loss());
  }

  // Sampling: one character at a time, the LSTM's state carried on.
  ag::NoGradGuard no_grad;
  const std::string prompt = "The ";
  std::string sample = prompt;
  ag::Tensor h, c;
  ag::Tensor next = ag::tensor(std::vector<int64_t>{encode('T')}).to(dev);
  for (size_t i = 1; i < prompt.size() + 60; ++i) {
    auto [logits, r] = logits_of(next, h, c, 1, 1);
    h = r.h_n;
    c = r.c_n;
    int64_t pick;
    if (i < prompt.size()) {
      pick = encode(static_cast<unsigned char>(prompt[i]));
    } else {
      const std::vector<float> p = ag::softmax(logits.to(ag::kFloat32), 1).cpu().to_vector<float>();
      double u = static_cast<double>(std::rand()) / RAND_MAX, acc = 0;
      pick = kVocab - 1;
      for (int64_t k = 0; k < kVocab; ++k)
        if ((acc += p[k]) >= u) {
          pick = k;
          break;
        }
      sample += decode(pick);
    }
    next = ag::tensor(std::vector<int64_t>{pick}).to(dev);
  }
  std::printf("sample: \"%s\"\n", sample.c_str());
  std::printf("loss %.3f -> %.3f over %d steps\n", first, last, steps);
  return last < first ? 0 : 1;
}
