// The character-level GPT of `ampgrad train --model gpt` and `ampgrad sample`.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ampgrad/nn/attention.h>
#include <ampgrad/nn/layers.h>
#include <ampgrad/nn/module.h>
#include <ampgrad/optim/adam.h>

namespace ampgrad::cli {

struct GptConfig {
  int64_t vocab = 0, context = 128, width = 256, layers = 4, heads = 8;
};

// Token and position embeddings, `layers` pre-norm blocks (x + attn(ln1(x)) with a causal
// mask, then x + mlp(ln2(x)), the MLP width -> 4 width -> width with GELU tanh), a final
// LayerNorm and a linear head. forward(idx [B, T] int64, T <= context) gives logits [B, T, vocab].
class Gpt : public nn::Module {
 public:
  explicit Gpt(const GptConfig& c);
  Tensor forward(const Tensor& idx) override;
  const GptConfig& config() const { return c_; }

 private:
  GptConfig c_;
  std::shared_ptr<nn::Embedding> tok_, pos_;
  std::shared_ptr<nn::ModuleList> blocks_;
  std::shared_ptr<nn::LayerNorm> ln_;
  std::shared_ptr<nn::Linear> head_;
  // The causal mask [T, T] of the last T and device, built once (as nanoGPT's registered
  // buffer) rather than in every step. Not kept while a graph captures: it would hold nothing
  // until the graph replays.
  Tensor causal_;
};

// A text and its vocabulary: the distinct bytes it holds, in byte order; ids index them.
struct Corpus {
  std::string vocab;
  std::vector<int64_t> ids;
  // The ids of `text`; ag::Error naming the first byte the vocabulary lacks.
  std::vector<int64_t> encode(const std::string& text) const;
  std::string decode(const std::vector<int64_t>& ids) const;
  // Unigram entropy of ids in nats per character.
  double unigram_entropy() const;
  // The cross-entropy of ids[split:] under the character frequencies of ids[:split] (each
  // count plus one): what a model that ignores context reaches on the held-out text.
  double unigram_baseline(size_t split) const;
};

// A file, or every regular file of a folder (names sorted; fortune's .dat index files skipped).
Corpus read_corpus(const std::string& path);

// `length` characters after `prompt`, each drawn from softmax(logits / temperature) over the
// top_k likeliest (top_k 0: all), conditioned on the last `context` characters.
std::string sample_text(Gpt& model, const Corpus& corpus, const std::string& prompt, int64_t length,
                        double temperature, int64_t top_k, uint64_t seed, Device device);

// The GPT job's optimizer settings: AdamW(lr), weight decay 0.1, betas (0.9, 0.95); `ampgrad
// bench step` times its GPT rows with the same.
optim::AdamWOptions gpt_adamw(double lr);

// `ampgrad train --model gpt`: the options it reads.
struct GptTrainArgs {
  std::string data = "/usr/share/games/fortunes";
  std::string device = "auto", amp = "auto";  // amp: fp16, bf16, off, auto (fp16 on CUDA, bf16 on the CPU)
  int64_t steps = 0;                          // 0: 2000 on CUDA, 300 on the CPU
  int64_t batch_size = 0;                     // 0: 32 on CUDA, 16 on the CPU
  // metrics: JSON lines, or CSV when the name ends in .csv; save: written at the end
  double lr = 1e-3;
  uint64_t seed = 0;
  std::string save, metrics, plot;
};
void run_train_gpt(const GptTrainArgs& a);

}  // namespace ampgrad::cli
