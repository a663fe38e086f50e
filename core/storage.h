// Storage: a reference-counted block of memory on one device, shared by views, with the
// version counter that autograd checks (Note [Version counter]).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include <ampgrad/core/device.h>

namespace ampgrad {

// Allocates and frees raw memory for one device type. cuda/ installs the CUDA one.
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes, Device device) = 0;
  virtual void deallocate(void* ptr, size_t nbytes, Device device) noexcept = 0;
};

Allocator* get_allocator(DeviceType type);
void set_allocator(DeviceType type, Allocator* allocator);
// Returns the CPU allocator's kept blocks to the system (Note [CPU block cache] in
// core/storage.cpp), as cuda::empty_cache does for the GPU's.
void cpu_empty_cache();

// Note [Version counter]
// Every in-place write to a storage bumps its version. Autograd records the version of each
// tensor it saves for backward and compares it when backward runs, so that an in-place edit
// of a saved tensor is an error instead of a wrong gradient. Views share their storage and
// therefore their counter, as in PyTorch's Note [Version Counter Sharing].
class Storage {
 public:
  Storage(size_t nbytes, Device device);
  // Wraps memory the caller owns; it is not freed.
  Storage(void* external, size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  uint32_t version() const { return version_; }
  void bump_version() { ++version_; }
  // Views of this storage that autograd tracks, alive now (Note [In-place autograd] in
  // ops/tensor_methods.cpp): a tracked in-place write to it would not reach their histories.
  int tracked_views() const { return tracked_views_; }
  void count_tracked_view(int delta) { tracked_views_ += delta; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;  // null for external memory
  uint32_t version_ = 0;
  int tracked_views_ = 0;
};

}  // namespace ampgrad
