// DataLoader: batches of a Dataset in a seeded, per-epoch shuffled order, moved to a device.
#pragma once

#include <cstdint>
#include <iterator>
#include <vector>

#include <ampgrad/core/device.h>
#include <ampgrad/core/tensor.h>
#include <ampgrad/data/fashion_mnist.h>

namespace ampgrad::data {

struct DataLoaderOptions {
  explicit DataLoaderOptions(int64_t batch_size) : batch_size_(batch_size) {}
  DataLoaderOptions& shuffle(bool v) { shuffle_ = v; return *this; }
  DataLoaderOptions& seed(uint64_t v) { seed_ = v; return *this; }
  DataLoaderOptions& drop_last(bool v) { drop_last_ = v; return *this; }
  DataLoaderOptions& device(Device v) { device_ = v; return *this; }
  int64_t batch_size_;
  bool shuffle_ = false;
  uint64_t seed_ = 0;
  bool drop_last_ = false;  // drop the last batch when it is smaller than batch_size
  Device device_;
};

struct Batch {
  Tensor images;  // [B, ...] on the loader's device
  Tensor labels;  // [B]
};

class DataLoader;

// One pass over the data in one order: `for (const Batch& b : loader.epoch(e))`. It refers to
// its loader, which must outlive it.
class Epoch {
 public:
  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    Iterator(const Epoch* epoch, int64_t i) : epoch_(epoch), i_(i) {}
    Batch operator*() const { return epoch_->batch(i_); }
    Iterator& operator++() { ++i_; return *this; }
    bool operator==(const Iterator& o) const { return i_ == o.i_; }

   private:
    const Epoch* epoch_;
    int64_t i_;
  };

  Epoch(const DataLoader& loader, std::vector<int64_t> order) : loader_(&loader), order_(std::move(order)) {}
  int64_t size() const;  // number of batches
  Batch batch(int64_t i) const;
  const std::vector<int64_t>& order() const { return order_; }  // example indices, in visiting order
  Iterator begin() const { return {this, 0}; }
  Iterator end() const { return {this, size()}; }

 private:
  const DataLoader* loader_;
  std::vector<int64_t> order_;
};

class DataLoader {
 public:
  // `dataset` must hold CPU tensors with the same first dimension.
  DataLoader(Dataset dataset, DataLoaderOptions options);
  const Dataset& dataset() const { return dataset_; }
  const DataLoaderOptions& options() const { return options_; }
  int64_t num_batches() const;  // per epoch
  // The visiting order of epoch `epoch`: the identity without shuffle, otherwise a
  // permutation that depends only on (seed, epoch), so a run resumed at epoch k sees the
  // same batches as an uninterrupted one.
  std::vector<int64_t> permutation(int64_t epoch) const;
  Epoch epoch(int64_t epoch) const { return Epoch(*this, permutation(epoch)); }

 private:
  Dataset dataset_;
  DataLoaderOptions options_;
};

}  // namespace ampgrad::data
