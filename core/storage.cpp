// Storage and the per-device allocator table; the CPU allocator lives here.
#include <ampgrad/core/storage.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include <ampgrad/core/error.h>

namespace ampgrad {

namespace {

// Note [CPU block cache]
// A training step allocates the same large buffers every step (a CNN's activations at batch
// 128 are 6-13 MB each). From malloc they come as fresh mmap'd or trimmed pages each time, and
// the page faults that zero them cost more than the kernels that fill them: the CPU CNN step
// ran 80 ms against 58 ms with glibc told to keep its memory. Blocks of 256 KB and more are
// therefore kept when freed, by exact size (rounded to 4 KB), and handed back to the next
// request of that size, up to AMPGRAD_CPU_CACHE_MB (default 2048) of kept memory;
// cpu_empty_cache() returns them to the system. Smaller blocks go to malloc, which reuses
// them well.
class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, Device) override {
    const size_t rounded = round(nbytes);
    if (rounded >= kCacheMin) {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(rounded);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_ -= rounded;
        return p;
      }
    }
    // 64-byte alignment: vector loads and cache lines; aligned_alloc wants a multiple of it.
    void* p = std::aligned_alloc(64, rounded);
    if (p == nullptr) {  // the cache may hold what the system lacks
      empty_cache();
      p = std::aligned_alloc(64, rounded);
    }
    AG_CHECK(p != nullptr, "out of memory: failed to allocate {} bytes on the CPU", nbytes);
    return p;
  }
  void deallocate(void* ptr, size_t nbytes, Device) noexcept override {
    const size_t rounded = round(nbytes);
    if (rounded >= kCacheMin) {
      std::lock_guard<std::mutex> lock(mu_);
      if (cached_ + rounded <= limit()) {
        try {
          free_[rounded].push_back(ptr);
          cached_ += rounded;
          return;
        } catch (...) {  // no memory for the list: free the block instead
        }
      }
    }
    std::free(ptr);
  }
  void empty_cache() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [size, blocks] : free_)
      for (void* p : blocks) std::free(p);
    free_.clear();
    cached_ = 0;
  }

 private:
  static constexpr size_t kCacheMin = 256 * 1024;
  static size_t round(size_t nbytes) {
    const size_t n = std::max<size_t>(nbytes, 1);
    return n >= kCacheMin ? (n + 4095) / 4096 * 4096 : (n + 63) / 64 * 64;
  }
  static size_t limit() {
    static const size_t mb = [] {
      const char* v = std::getenv("AMPGRAD_CPU_CACHE_MB");
      return v ? static_cast<size_t>(std::strtoull(v, nullptr, 10)) : size_t{2048};
    }();
    return mb << 20;
  }
  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  size_t cached_ = 0;
};

CpuAllocator& cpu_allocator() {
  static CpuAllocator* a = new CpuAllocator;  // never destroyed: tensors may outlive static destruction
  return *a;
}

Allocator*& allocator_slot(DeviceType type) {
  static Allocator* table[2] = {&cpu_allocator(), nullptr};
  return table[static_cast<int>(type)];
}
}  // namespace

Allocator* get_allocator(DeviceType type) {
  Allocator* a = allocator_slot(type);
  AG_CHECK(a != nullptr, "{}: no allocator; ampgrad was built without CUDA support (AMPGRAD_CUDA=OFF)",
           Device(type).str());
  return a;
}

void set_allocator(DeviceType type, Allocator* allocator) { allocator_slot(type) = allocator; }

void cpu_empty_cache() { cpu_allocator().empty_cache(); }

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  allocator_ = get_allocator(device.type);
  data_ = nbytes ? allocator_->allocate(nbytes, device) : nullptr;
}

Storage::Storage(void* external, size_t nbytes, Device device) : data_(external), nbytes_(nbytes), device_(device) {}

Storage::~Storage() {
  if (allocator_ && data_) allocator_->deallocate(data_, nbytes_, device_);
}

}  // namespace ampgrad
