// examples/gpt.cpp: a character-level GPT written with nn:: modules, trained on real text (the
// fortunes of Debian's `fortunes` package). Token and position embeddings, pre-norm blocks of
// causal multi-head self-attention and a GELU MLP, each with a residual connection, then a
// final LayerNorm and a linear head over the characters. AdamW with a warm-up and a cosine
// decay; float16 autocast with a GradScaler on CUDA, bfloat16 autocast on the CPU. Trains on the
// first nine tenths of the text, reports the validation loss of the last tenth beside the
// corpus's unigram entropy (both in nats per character: a model that ignores context cannot
// beat the entropy), and samples text with a temperature and top-k.
//
//   ./gpt [text file or folder] [steps] [cpu|cuda]
//   defaults: /usr/share/games/fortunes, 150 steps, cuda when there is a GPU
//   exits 1 unless the validation loss fell below the unigram entropy
#include <ampgrad/ampgrad.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numbers>
#include <random>
#include <string>
#include <vector>

namespace ag = ampgrad;
namespace nn = ampgrad::nn;

namespace {

// Printable ASCII and newline; any other byte (tabs, UTF-8: about 1% of the fortunes) reads
// as a space.
constexpr int64_t kVocab = 96;  // ' '..'~' and '\n'
int64_t encode(unsigned char c) { return c == '\n' ? 95 : (c >= 32 && c < 127 ? c - 32 : 0); }
char decode(int64_t i) { return i == 95 ? '\n' : static_cast<char>(i + 32); }

struct Config {
  int64_t context, width, layers, heads, batch;
};

// One pre-norm transformer block: x + attn(ln1(x)), then x + mlp(ln2(x)).
struct Block : nn::Module {
  Block(const Config& c) {
    ln1 = register_module("ln1", std::make_shared<nn::LayerNorm>(ag::Shape{c.width}));
    attn = register_module("attn", std::make_shared<nn::MultiheadAttention>(
                                       c.width, c.heads, nn::MultiheadAttentionOptions{.batch_first = true}));
    ln2 = register_module("ln2", std::make_shared<nn::LayerNorm>(ag::Shape{c.width}));
    mlp = register_module("mlp", std::make_shared<nn::Sequential>());
    mlp->push_back(std::make_shared<nn::Linear>(c.width, 4 * c.width));
    mlp->push_back(std::make_shared<nn::GELU>("tanh"));
    mlp->push_back(std::make_shared<nn::Linear>(4 * c.width, c.width));
  }
  ag::Tensor run(const ag::Tensor& x, const ag::Tensor& causal) {
    const ag::Tensor h = (*ln1)(x);
    const ag::Tensor a = x + (*attn)(h, h, h, ag::Tensor(), /*need_weights=*/false, causal, true, /*is_causal=*/true).first;
    return a + (*mlp)((*ln2)(a));
  }
  std::shared_ptr<nn::LayerNorm> ln1, ln2;
  std::shared_ptr<nn::MultiheadAttention> attn;
  std::shared_ptr<nn::Sequential> mlp;
};

struct Gpt : nn::Module {
  Gpt(const Config& c) : c_(c) {
    tok = register_module("tok", std::make_shared<nn::Embedding>(kVocab, c.width));
    pos = register_module("pos", std::make_shared<nn::Embedding>(c.context, c.width));
    blocks = register_module("blocks", std::make_shared<nn::ModuleList>());  // blocks.0.ln1.weight, ...
    for (int64_t i = 0; i < c.layers; ++i) blocks->push_back(std::make_shared<Block>(c));
    ln = register_module("ln", std::make_shared<nn::LayerNorm>(ag::Shape{c.width}));
    head = register_module("head", std::make_shared<nn::Linear>(c.width, kVocab));
  }
  // idx [B, T] int64 -> logits [B, T, vocab]
  ag::Tensor forward(const ag::Tensor& idx) override {
    const int64_t t = idx.size(1);
    const ag::TensorOptions on = ag::TensorOptions().device(idx.device());
    // true above the diagonal: position i may not attend to j > i (MultiheadAttention's convention)
    const ag::Tensor causal = ag::triu(ag::ones({t, t}, on), 1).to(ag::kBool);
    ag::Tensor x = (*tok)(idx) + (*pos)(ag::arange(t, ag::TensorOptions(ag::kInt64).device(idx.device())));
    for (size_t i = 0; i < blocks->size(); ++i) x = std::static_pointer_cast<Block>((*blocks)[i])->run(x, causal);
    return (*head)((*ln)(x));
  }
  Config c_;
  std::shared_ptr<nn::Embedding> tok, pos;
  std::shared_ptr<nn::ModuleList> blocks;
  std::shared_ptr<nn::LayerNorm> ln;
  std::shared_ptr<nn::Linear> head;
};

std::vector<int64_t> read_corpus(const std::string& path) {
  std::vector<std::string> files;
  if (std::filesystem::is_directory(path)) {
    for (const auto& e : std::filesystem::directory_iterator(path)) {
      const std::string ext = e.path().extension().string();
      if (e.is_regular_file() && ext != ".dat" && ext != ".u8") files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(path);
  }
  std::vector<int64_t> text;
  for (const std::string& f : files) {
    std::ifstream in(f, std::ios::binary);
    for (std::istreambuf_iterator<char> it(in), end; it != end; ++it) text.push_back(encode(static_cast<unsigned char>(*it)));
  }
  return text;
}

// `batch` windows at random offsets of text[lo, hi): inputs [B, T] and next characters [B * T].
std::pair<ag::Tensor, ag::Tensor> batch_of(const std::vector<int64_t>& text, size_t lo, size_t hi, const Config& c,
                                           std::mt19937& rng, ag::Device dev) {
  std::vector<int64_t> x, y;
  std::uniform_int_distribution<size_t> at(lo, hi - static_cast<size_t>(c.context) - 2);
  for (int64_t b = 0; b < c.batch; ++b) {
    const size_t s = at(rng);
    x.insert(x.end(), text.begin() + s, text.begin() + s + c.context);
    y.insert(y.end(), text.begin() + s + 1, text.begin() + s + 1 + c.context);
  }
  return {ag::tensor(x, {c.batch, c.context}).to(dev), ag::tensor(y, {c.batch * c.context}).to(dev)};
}

}  // namespace

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : "/usr/share/games/fortunes";
  const int steps = argc > 2 ? std::atoi(argv[2]) : 150;
  const bool cuda = argc > 3 ? std::strcmp(argv[3], "cuda") == 0 : ag::cuda::is_available();
  if (cuda && !ag::cuda::is_available()) {
    std::printf("gpt: no CUDA device here\n");
    return 0;
  }
  const ag::Device dev = cuda ? ag::Device(ag::kCUDA) : ag::Device(ag::kCPU);
  const ag::DType low = cuda ? ag::kFloat16 : ag::kBFloat16;
  // On CUDA: context 128, width 256, 4 layers of 8 heads, batch 32; a smaller one on the CPU.
  const Config c = cuda ? Config{128, 256, 4, 8, 32} : Config{64, 96, 2, 4, 16};
  const std::vector<int64_t> text = read_corpus(path);
  if (text.size() < 10000) {
    std::fprintf(stderr, "gpt: %s holds %zu characters; install Debian's fortunes package\n", path.c_str(), text.size());
    return 2;
  }
  const size_t split = text.size() * 9 / 10;
  std::vector<double> freq(kVocab, 0);
  for (int64_t t : text) freq[static_cast<size_t>(t)] += 1;
  double entropy = 0;
  for (double f : freq)
    if (f > 0) entropy -= f / text.size() * std::log(f / text.size());

  ag::manual_seed(0);
  auto model = std::make_shared<Gpt>(c);
  model->to(dev);
  ag::optim::AdamW opt(model->parameters(), ag::optim::AdamWOptions(1e-3).weight_decay(0.1).betas({0.9, 0.95}));
  ag::amp::GradScaler scaler(ag::amp::GradScalerOptions().enabled(low == ag::kFloat16));
  std::mt19937 rng(1);
  auto loss_of = [&](const ag::Tensor& x, const ag::Tensor& y) {
    ag::amp::AutocastGuard autocast(dev.type, low);
    return ag::nn::functional::cross_entropy((*model)(x).reshape({-1, kVocab}), y);
  };
  auto validation = [&] {
    ag::NoGradGuard no_grad;
    model->eval();
    double sum = 0;
    for (int i = 0; i < 4; ++i) {
      auto [x, y] = batch_of(text, split, text.size(), c, rng, dev);
      sum += loss_of(x, y).item<double>();
    }
    model->train();
    return sum / 4;
  };
  std::printf("%zu characters, unigram entropy %.3f nats/char; GPT context %lld, width %lld, %lld layers, %lld heads\n",
              text.size(), entropy, (long long)c.context, (long long)c.width, (long long)c.layers, (long long)c.heads);
  const int warmup = std::max(1, steps / 10);
  for (int step = 0; step < steps; ++step) {
    const double lr = step < warmup ? 1e-3 * (step + 1) / warmup
                                    : 0.5e-3 * (1 + std::cos(std::numbers::pi * (step - warmup) / std::max(1, steps - warmup)));
    opt.set_lr(lr);
    auto [x, y] = batch_of(text, 0, split, c, rng, dev);
    opt.zero_grad();
    const ag::Tensor loss = loss_of(x, y);
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    if (step % std::max(1, steps / 5) == 0) std::printf("step %4d  lr %.1e  train loss %.3f\n", step, lr, loss.item<double>());
  }
  const double val = validation();
  std::printf("validation loss %.3f nats/char (unigram entropy %.3f)\n", val, entropy);

  // Sampling: the last `context` characters in, the next one drawn from softmax(logits / 0.8)
  // over the 10 likeliest.
  ag::NoGradGuard no_grad;
  model->eval();
  std::string prompt = "A ";
  std::vector<int64_t> ids;
  for (char ch : prompt) ids.push_back(encode(static_cast<unsigned char>(ch)));
  for (int i = 0; i < 160; ++i) {
    const size_t n = std::min<size_t>(ids.size(), static_cast<size_t>(c.context));
    const std::vector<int64_t> window(ids.end() - static_cast<std::ptrdiff_t>(n), ids.end());
    const ag::Tensor logits = (*model)(ag::tensor(window, {1, static_cast<int64_t>(n)}).to(dev)).select(1, static_cast<int64_t>(n) - 1);
    std::vector<float> l = (logits.to(ag::kCPU).to(ag::kFloat32) / 0.8).to_vector<float>();
    std::vector<float> sorted = l;
    std::nth_element(sorted.begin(), sorted.begin() + 9, sorted.end(), std::greater<float>());
    const float kth = sorted[9], top = *std::max_element(l.begin(), l.end());
    std::vector<double> p(l.size());
    for (size_t j = 0; j < l.size(); ++j) p[j] = l[j] >= kth ? std::exp(static_cast<double>(l[j] - top)) : 0;
    ids.push_back(static_cast<int64_t>(std::discrete_distribution<size_t>(p.begin(), p.end())(rng)));
    prompt += decode(ids.back());
  }
  std::printf("sample:\n%s\n", prompt.c_str());
  const bool ok = val < entropy;
  std::printf("%s\n", ok ? "the model beats the unigram entropy" : "did NOT beat the unigram entropy");
  return ok ? 0 : 1;
}
