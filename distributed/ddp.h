// DistributedDataParallel: replicas start equal and their gradients are averaged over the
// process group in buckets, overlapped with backward (Note [DistributedDataParallel]).
#pragma once

#include <memory>

#include <ampgrad/distributed/process_group.h>
#include <ampgrad/nn/module.h>

namespace ampgrad::distributed {

struct DDPOptions {
  double bucket_cap_mb = 25;  // PyTorch's default
};

class DistributedDataParallel {
 public:
  // Broadcasts rank 0's parameters and buffers to every rank and hooks the parameters'
  // gradient accumulation. The module's parameters must be contiguous on pg.device().
  DistributedDataParallel(std::shared_ptr<nn::Module> module, ProcessGroup& pg, DDPOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // The module's forward. The backward that follows averages the gradients; it throws if a
  // parameter received no gradient (every parameter must be used in every step).
  Tensor operator()(const Tensor& x);
  // Broadcasts rank 0's buffers (BatchNorm's running statistics, which each rank updates from
  // its own batches) to every rank: before evaluating or saving.
  void sync_buffers();
  nn::Module& module() { return *module_; }
  size_t num_buckets() const;

 private:
  struct State;
  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<State> state_;
};

}  // namespace ampgrad::distributed
