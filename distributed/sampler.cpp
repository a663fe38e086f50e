// DistributedSampler (distributed/sampler.h).
#include <ampgrad/distributed/sampler.h>

#include <ampgrad/core/error.h>

namespace ampgrad::distributed {

DistributedSampler::DistributedSampler(int world_size, int rank, bool drop_last)
    : world_size_(world_size), rank_(rank), drop_last_(drop_last) {
  AG_CHECK(world_size >= 1 && rank >= 0 && rank < world_size,
           "DistributedSampler: rank {} is not in [0, world size {})", rank, world_size);
}

std::vector<int64_t> DistributedSampler::shard(const std::vector<int64_t>& order) const {
  const auto n = static_cast<int64_t>(order.size()), w = static_cast<int64_t>(world_size_);
  AG_CHECK(n > 0 || drop_last_, "DistributedSampler: the order to shard is empty");
  const int64_t total = drop_last_ ? n / w * w : (n + w - 1) / w * w;
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(total / w));
  for (int64_t i = rank_; i < total; i += w) mine.push_back(order[static_cast<size_t>(i % n)]);
  return mine;
}

}  // namespace ampgrad::distributed
