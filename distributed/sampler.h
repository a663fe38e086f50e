// DistributedSampler: each rank's share of one epoch's global order (PyTorch's interleaving).
#pragma once

#include <cstdint>
#include <vector>

namespace ampgrad::distributed {

// Rank r takes order[r], order[r + W], order[r + 2W], ... of the global order every rank
// computes alike (data::DataLoader::permutation depends only on seed and epoch). The order is
// first padded by repeating its start to a multiple of W (or cut to one, drop_last), so all
// ranks take the same number of steps. With a per-rank batch of B / W, step s of all ranks
// together covers exactly the examples of step s of one process with batch B.
class DistributedSampler {
 public:
  DistributedSampler(int world_size, int rank, bool drop_last = false);
  std::vector<int64_t> shard(const std::vector<int64_t>& order) const;
  int world_size() const { return world_size_; }
  int rank() const { return rank_; }

 private:
  int world_size_;
  int rank_;
  bool drop_last_;
};

}  // namespace ampgrad::distributed
