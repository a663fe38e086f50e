// Storage and the per-device allocator table; the CPU allocator lives here.
#include <ampgrad/core/storage.h>

#include <cstdlib>
#include <new>

#include <ampgrad/core/error.h>

namespace ampgrad {

namespace {
class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, Device) override {
    // 64-byte alignment: vector loads and cache lines; aligned_alloc wants a multiple of it.
    size_t rounded = (std::max<size_t>(nbytes, 1) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    AG_CHECK(p != nullptr, "out of memory: failed to allocate {} bytes on the CPU", nbytes);
    return p;
  }
  void deallocate(void* ptr, size_t, Device) noexcept override { std::free(ptr); }
};

Allocator*& allocator_slot(DeviceType type) {
  static CpuAllocator cpu;
  static Allocator* table[2] = {&cpu, nullptr};
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

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  allocator_ = get_allocator(device.type);
  data_ = nbytes ? allocator_->allocate(nbytes, device) : nullptr;
}

Storage::Storage(void* external, size_t nbytes, Device device) : data_(external), nbytes_(nbytes), device_(device) {}

Storage::~Storage() {
  if (allocator_ && data_) allocator_->deallocate(data_, nbytes_, device_);
}

}  // namespace ampgrad
