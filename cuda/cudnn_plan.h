// cuDNN's graph (backend) API for one convolution pass: execution plans chosen by heuristics
// or timed, cached per geometry, and run with a variant pack (Note [cuDNN plans]).
#pragma once

#include <cudnn.h>

#include <array>
#include <compare>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ampgrad/core/dtype.h>
#include <ampgrad/cuda/check.h>

namespace ampgrad::cuda::dnn {

// The library's cuDNN handle of a device, bound to its stream (Note [CUDA stream]).
cudnnHandle_t handle(int device);

// One owner of a backend descriptor.
class Desc {
 public:
  explicit Desc(cudnnBackendDescriptorType_t type) { AG_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d_)); }
  ~Desc() { (void)cudnnBackendDestroyDescriptor(d_); }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const void* values) {
    AG_CUDNN_CHECK(cudnnBackendSetAttribute(d_, name, type, count, values));
  }
  void set(cudnnBackendAttributeName_t name, const Desc& other) {
    cudnnBackendDescriptor_t v = other.get();
    set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v);
  }
  void finalize() { AG_CUDNN_CHECK(cudnnBackendFinalize(d_)); }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};
using DescPtr = std::shared_ptr<Desc>;

// The engine configurations one heuristics mode proposes for an operation graph, best first
// (none when the mode has nothing for it).
std::vector<DescPtr> engine_configs(const Desc& graph, cudnnBackendHeurMode_t mode);

enum class Pass { Forward, BackwardData, BackwardFilter };
const char* pass_name(Pass p);

// Everything an execution plan depends on, in forward's naming: x [N, C, (D,) H, W],
// w [K, C/groups, (kd,) kh, kw], y [N, K, ...], each packed in one format (groups follow from
// C / w's second dim; NHWC for 4-D only). The pass writes y (forward), x (backward data) or w
// (backward filter).
struct ConvGeometry {
  Pass pass = Pass::Forward;
  int device = 0;
  DType dtype = DType::Float32;
  bool tf32 = false;        // float32 may round through TF32
  bool nhwc = false;        // all three tensors channels-last
  bool accumulate = false;  // output += result (beta = 1)
  int64_t dims = 4;                    // 4 or 5: the first `dims` entries of x, w, y are used
  std::array<int64_t, 5> x{}, w{}, y{};
  std::array<int64_t, 9> window{};  // stride, padding, dilation: dims - 2 entries each, in that order
  auto operator<=>(const ConvGeometry&) const = default;
};

// Runs the pass on 16-byte-aligned packed tensors. False (and `why`) when no cuDNN engine
// can run this geometry; throws ag::Error on any other cuDNN or CUDA failure.
bool run_conv(const ConvGeometry& g, void* x, void* w, void* y, bool benchmark, std::string& why);

}  // namespace ampgrad::cuda::dnn
