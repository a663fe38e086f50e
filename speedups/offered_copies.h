// Copies of tensors in another dtype that an op wrote in the same pass as the tensor itself,
// offered to whoever would otherwise cast it: ready casts (Note [Cast speed-ups] in
// speedups/casts.cpp) and gradient roundings (Note [Backward speed-ups] in
// speedups/backward.cpp). A copy serves while neither it nor its source has changed since the
// offer (the same tensor, the same versions). An offer keeps the copy, never the source, and
// lives while the source does; a newer offer for the same source replaces it, and a bound
// keeps a caller that holds many sources from growing the list.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include <ampgrad/core/tensor.h>

namespace ampgrad::speedups {

class OfferedCopies {
 public:
  explicit OfferedCopies(size_t bound) : bound_(bound) {}

  bool empty() const { return offers_.empty(); }

  // `low` is `source` in low's dtype, as written now.
  void offer(const Tensor& source, const Tensor& low) {
    std::erase_if(offers_, [&](const Offer& o) {
      const std::shared_ptr<TensorImpl> src = o.source.lock();
      return !src || src.get() == source.unsafe_impl();
    });
    if (offers_.size() >= bound_) offers_.erase(offers_.begin());
    offers_.push_back(Offer{source.weak_impl(), source.version(), low.version(), low});
  }

  // The copy of `t` in `dtype` that still serves, or undefined; with `take`, its offer ends.
  Tensor find(const Tensor& t, DType dtype, bool take = false) {
    for (auto it = offers_.begin(); it != offers_.end(); ++it) {
      const std::shared_ptr<TensorImpl> src = it->source.lock();
      if (src.get() != t.unsafe_impl() || it->low.dtype() != dtype || t.version() != it->source_version ||
          it->low.version() != it->low_version)
        continue;
      if (!take) return it->low;
      Tensor low = std::move(it->low);
      offers_.erase(it);
      return low;
    }
    return Tensor();
  }

  void clear() { offers_.clear(); }

 private:
  struct Offer {
    std::weak_ptr<TensorImpl> source;
    uint32_t source_version = 0, low_version = 0;
    Tensor low;
  };
  size_t bound_;
  std::vector<Offer> offers_;
};

}  // namespace ampgrad::speedups
