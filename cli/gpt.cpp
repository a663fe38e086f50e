// The character-level GPT of `ampgrad train --model gpt` and `ampgrad sample`.
#include "cli/gpt.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <tuple>

#include <ampgrad/ampgrad.h>
#include <ampgrad/core/device_hooks.h>

namespace ampgrad::cli {

namespace {

class Block : public nn::Module {
 public:
  explicit Block(const GptConfig& c) : nn::Module("Block") {
    ln1 = register_module("ln1", std::make_shared<nn::LayerNorm>(Shape{c.width}));
    attn = register_module("attn", std::make_shared<nn::MultiheadAttention>(
                                       c.width, c.heads, nn::MultiheadAttentionOptions{.batch_first = true}));
    ln2 = register_module("ln2", std::make_shared<nn::LayerNorm>(Shape{c.width}));
    mlp = register_module("mlp", std::make_shared<nn::Sequential>());
    mlp->push_back(std::make_shared<nn::Linear>(c.width, 4 * c.width));
    mlp->push_back(std::make_shared<nn::GELU>("tanh"));
    mlp->push_back(std::make_shared<nn::Linear>(4 * c.width, c.width));
  }
  // Pre-norm: x + attn(ln1(x)), then that + mlp(ln2(that)). Each sublayer's output joins the
  // residual stream in the norm after it (add_layer_norm: one kernel for the add and the norm,
  // Note [Add and layer norm]): given the stream x and h = ln1(x), returns the next stream and
  // `next`'s norm of it (the next block's ln1, or the final ln).
  std::pair<Tensor, Tensor> run(const Tensor& x, const Tensor& h, const Tensor& causal, nn::LayerNorm& next) {
    const Tensor att = (*attn)(h, h, h, Tensor(), /*need_weights=*/false, causal, true, /*is_causal=*/true).first;
    const auto [h2, a] = ln2->add_and_norm(x, att);
    const auto [hn, xn] = next.add_and_norm(a, (*mlp)(h2));
    return {xn, hn};
  }
  std::shared_ptr<nn::LayerNorm> ln1, ln2;
  std::shared_ptr<nn::MultiheadAttention> attn;
  std::shared_ptr<nn::Sequential> mlp;
};

}  // namespace

Gpt::Gpt(const GptConfig& c) : nn::Module("Gpt"), c_(c) {
  AG_CHECK(c.vocab > 0 && c.context > 0 && c.layers > 0 && c.heads > 0 && c.width % c.heads == 0,
           "gpt: vocab {}, context {}, width {}, layers {}, heads {}: each positive, width a multiple of heads",
           c.vocab, c.context, c.width, c.layers, c.heads);
  tok_ = register_module("tok", std::make_shared<nn::Embedding>(c.vocab, c.width));
  pos_ = register_module("pos", std::make_shared<nn::Embedding>(c.context, c.width));
  blocks_ = register_module("blocks", std::make_shared<nn::ModuleList>());
  for (int64_t i = 0; i < c.layers; ++i) blocks_->push_back(std::make_shared<Block>(c));
  ln_ = register_module("ln", std::make_shared<nn::LayerNorm>(Shape{c.width}));
  head_ = register_module("head", std::make_shared<nn::Linear>(c.width, c.vocab));
}

Tensor Gpt::forward(const Tensor& idx) {
  AG_CHECK(idx.dim() == 2 && idx.size(1) <= c_.context, "gpt: input {} must be [batch, T] with T <= context {}",
           shape_str(idx.sizes()), c_.context);
  const int64_t t = idx.size(1);
  Tensor causal = causal_;
  if (!causal.defined() || causal.size(0) != t || causal.device() != idx.device()) {
    // true above the diagonal: position i may not attend to j > i (MultiheadAttention's convention)
    causal = triu(ones({t, t}, TensorOptions().device(idx.device())), 1).to(kBool);
    if (!graph_capturing(idx.device())) causal_ = causal;
  }
  // The positions 0..T-1 pick the table's first T rows: a view of them (pos(arange(T)) copied
  // them in a gather and scattered their gradient back, the same values in two launches more).
  // (The positions broadcast over the batch: this add stays apart.)
  Tensor x = (*tok_)(idx) + narrow(pos_->weight, 0, 0, t);
  auto block = [&](size_t i) { return std::static_pointer_cast<Block>((*blocks_)[i]); };
  Tensor h = (*block(0)->ln1)(x);
  for (size_t i = 0; i < blocks_->size(); ++i)
    std::tie(x, h) = block(i)->run(x, h, causal, i + 1 < blocks_->size() ? *block(i + 1)->ln1 : *ln_);
  return (*head_)(h);
}

optim::AdamWOptions gpt_adamw(double lr) { return optim::AdamWOptions(lr).weight_decay(0.1).betas({0.9, 0.95}); }

std::vector<int64_t> Corpus::encode(const std::string& text) const {
  std::vector<int64_t> out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const size_t at = vocab.find(text[i]);
    AG_CHECK(at != std::string::npos, "gpt: character {:?} (byte {}) at position {} of the prompt is not in the "
             "model's vocabulary of {} characters", std::string(1, text[i]), static_cast<unsigned char>(text[i]), i,
             vocab.size());
    out.push_back(static_cast<int64_t>(at));
  }
  return out;
}

std::string Corpus::decode(const std::vector<int64_t>& v) const {
  std::string out;
  for (int64_t i : v) out.push_back(vocab.at(static_cast<size_t>(i)));
  return out;
}

double Corpus::unigram_entropy() const {
  std::vector<double> count(vocab.size(), 0);
  for (int64_t i : ids) count[static_cast<size_t>(i)] += 1;
  double h = 0;
  for (double c : count)
    if (c > 0) h -= c / static_cast<double>(ids.size()) * std::log(c / static_cast<double>(ids.size()));
  return h;
}

double Corpus::unigram_baseline(size_t split) const {
  std::vector<double> count(vocab.size(), 1);
  for (size_t i = 0; i < split; ++i) count[static_cast<size_t>(ids[i])] += 1;
  const double total = static_cast<double>(split + vocab.size());
  double h = 0;
  for (size_t i = split; i < ids.size(); ++i) h -= std::log(count[static_cast<size_t>(ids[i])] / total);
  return h / static_cast<double>(ids.size() - split);
}

Corpus read_corpus(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  AG_CHECK(fs::exists(path, ec), "gpt: no text at {} (Debian's fortunes package installs /usr/share/games/fortunes)",
           path);
  std::vector<std::string> files;
  if (fs::is_directory(path, ec)) {
    for (const auto& e : fs::directory_iterator(path, ec)) {  // not recursive
      const std::string ext = e.path().extension().string();
      if (e.is_regular_file() && ext != ".dat" && ext != ".u8") files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(path);
  }
  std::string text;
  for (const std::string& f : files) {
    std::ifstream in(f, std::ios::binary);
    AG_CHECK(in.good(), "gpt: cannot read {}", f);
    text.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  Corpus c;
  std::array<bool, 256> seen{};
  for (unsigned char ch : text) seen[ch] = true;
  for (int b = 0; b < 256; ++b)
    if (seen[static_cast<size_t>(b)]) c.vocab.push_back(static_cast<char>(b));
  c.ids = c.encode(text);
  return c;
}

std::string sample_text(Gpt& model, const Corpus& corpus, const std::string& prompt, int64_t length,
                        double temperature, int64_t top_k, uint64_t seed, Device device) {
  AG_CHECK(!prompt.empty(), "ampgrad sample: the prompt is empty");
  AG_CHECK(temperature > 0, "ampgrad sample: --temperature {} must be positive", temperature);
  NoGradGuard no_grad;
  model.eval();
  std::vector<int64_t> ids = corpus.encode(prompt);
  std::mt19937_64 rng(seed);
  const int64_t context = model.config().context;
  for (int64_t i = 0; i < length; ++i) {
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(ids.size()), context);
    const std::vector<int64_t> window(ids.end() - n, ids.end());
    const Tensor logits = model(tensor(window, {1, n}).to(device)).select(1, n - 1).reshape({-1});
    const std::vector<double> l = logits.to(kFloat64).cpu().to_vector<double>();
    std::vector<double> sorted = l;
    std::sort(sorted.begin(), sorted.end(), std::greater<double>());
    const size_t k = top_k > 0 ? std::min<size_t>(static_cast<size_t>(top_k), l.size()) : l.size();
    const double kth = sorted[k - 1], top = sorted[0];
    AG_CHECK(std::isfinite(top), "ampgrad sample: the model's logits are not finite ({})", top);
    std::vector<double> p(l.size());
    // (l - max) / temperature: no overflow however small the temperature.
    for (size_t j = 0; j < l.size(); ++j) p[j] = l[j] >= kth ? std::exp((l[j] - top) / temperature) : 0;
    ids.push_back(static_cast<int64_t>(std::discrete_distribution<size_t>(p.begin(), p.end())(rng)));
  }
  model.train();
  return corpus.decode(ids);
}

}  // namespace ampgrad::cli
