// DataLoader: Fisher-Yates over ag::Generator, index_select on the CPU, one copy per batch.
#include <ampgrad/data/loader.h>

#include <algorithm>
#include <numeric>
#include <utility>

#include <ampgrad/core/generator.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad::data {

namespace {

// SplitMix64's finalizer: spreads (seed, epoch) over the generator's seed space, so that
// nearby seeds and epochs do not give related streams.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Uniform in [0, bound): rejects the low draws that would make `r % bound` favour small values.
uint64_t uniform_below(Generator& gen, uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
  for (;;) {
    const uint64_t r = gen.next_u64();
    if (r >= threshold) return r % bound;
  }
}

}  // namespace

DataLoader::DataLoader(Dataset dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(options) {
  AG_CHECK(options_.batch_size_ > 0, "DataLoader: batch_size must be positive, got {}", options_.batch_size_);
  AG_CHECK(dataset_.images.defined() && dataset_.labels.defined(), "DataLoader: the dataset has no tensors");
  AG_CHECK(dataset_.images.is_cpu() && dataset_.labels.is_cpu(),
           "DataLoader: the dataset must be on the CPU (images {}, labels {}); batches are moved to the device",
           dataset_.images.desc(), dataset_.labels.desc());
  AG_CHECK(dataset_.images.dim() >= 1 && dataset_.labels.dim() == 1 &&
               dataset_.images.size(0) == dataset_.labels.size(0),
           "DataLoader: images {} and labels {} must share their first dimension", dataset_.images.desc(),
           dataset_.labels.desc());
}

int64_t DataLoader::num_batches() const {
  const int64_t n = dataset_.size(), b = options_.batch_size_;
  return options_.drop_last_ ? n / b : (n + b - 1) / b;
}

std::vector<int64_t> DataLoader::permutation(int64_t epoch) const {
  std::vector<int64_t> order(static_cast<size_t>(dataset_.size()));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (!options_.shuffle_) return order;
  Generator gen(mix(mix(options_.seed_) ^ static_cast<uint64_t>(epoch)));
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[uniform_below(gen, i)]);
  return order;
}

// From this epoch's order, which a DistributedSampler shard makes shorter than the dataset.
int64_t Epoch::size() const {
  const int64_t n = static_cast<int64_t>(order_.size()), b = loader_->options().batch_size_;
  return loader_->options().drop_last_ ? n / b : (n + b - 1) / b;
}

Batch Epoch::batch(int64_t i) const {
  AG_CHECK(i >= 0 && i < size(), "DataLoader: batch {} is out of range (the epoch has {} batches)", i, size());
  const int64_t b = loader_->options().batch_size_;
  const int64_t begin = i * b;
  const int64_t end = std::min(begin + b, static_cast<int64_t>(order_.size()));
  const Tensor index = tensor(std::vector<int64_t>(order_.begin() + begin, order_.begin() + end));
  const Dataset& ds = loader_->dataset();
  const Device device = loader_->options().device_;
  return {ds.images.index_select(0, index).to(device), ds.labels.index_select(0, index).to(device)};
}

}  // namespace ampgrad::data
