// Error checks for CUDA runtime, cuBLAS and cuDNN calls (they throw ag::Error, never exit), and a
// guard that makes a tensor's device current. Internal to cuda/ and the ops that call it.
#pragma once

#include <ampgrad/core/error.h>
#include <ampgrad/cuda/runtime.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string_view>

namespace ampgrad::cuda::detail {
// The messages name the op running on this thread (CurrentOp in core/dispatch.h), or `op`.
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);
[[noreturn]] void throw_cuda_error_in(std::string_view op, cudaError_t err, const char* call, const char* file,
                                      int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line);
// `status` is a cudnnStatus_t, passed as int so that this header needs no cudnn.h.
[[noreturn]] void throw_cudnn_error(int status, const char* call, const char* file, int line);
}  // namespace ampgrad::cuda::detail

// AG_CUDA_CHECK(cudaMemcpyAsync(...)); throws "CUDA error: <call> failed: <name>: <string> (at file:line)".
#define AG_CUDA_CHECK(call)                                                                      \
  do {                                                                                           \
    cudaError_t ag_cuda_err_ = (call);                                                           \
    if (ag_cuda_err_ != cudaSuccess)                                                             \
      ::ampgrad::cuda::detail::throw_cuda_error(ag_cuda_err_, #call, __FILE__, __LINE__);        \
  } while (0)

// After every kernel launch: a bad configuration (grid too large, too much shared memory)
// shows up here, not at the next synchronizing call.
#define AG_CUDA_CHECK_LAUNCH()                                                                   \
  do {                                                                                           \
    cudaError_t ag_cuda_err_ = cudaGetLastError();                                               \
    if (ag_cuda_err_ != cudaSuccess)                                                             \
      ::ampgrad::cuda::detail::throw_cuda_error(ag_cuda_err_, "kernel launch", __FILE__, __LINE__); \
  } while (0)

#define AG_CUBLAS_CHECK(call)                                                                    \
  do {                                                                                           \
    cublasStatus_t ag_cublas_st_ = (call);                                                       \
    if (ag_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                                  \
      ::ampgrad::cuda::detail::throw_cublas_error(ag_cublas_st_, #call, __FILE__, __LINE__);     \
  } while (0)

// In files that include <cudnn.h> (cuda/conv.cpp): throws "cuDNN error: <call> failed:
// <status>: <cuDNN's last error message> (at file:line)".
#define AG_CUDNN_CHECK(call)                                                                     \
  do {                                                                                           \
    cudnnStatus_t ag_cudnn_st_ = (call);                                                         \
    if (ag_cudnn_st_ != CUDNN_STATUS_SUCCESS)                                                    \
      ::ampgrad::cuda::detail::throw_cudnn_error(static_cast<int>(ag_cudnn_st_), #call, __FILE__, __LINE__); \
  } while (0)

namespace ampgrad::cuda {

// Makes `device` current for its scope and restores the previous one (cheap when equal).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    AG_CUDA_CHECK(cudaGetDevice(&prev_));
    if (prev_ != device) AG_CUDA_CHECK(cudaSetDevice(device));
    changed_ = prev_ != device;
  }
  ~DeviceGuard() {
    if (changed_) (void)cudaSetDevice(prev_);  // cannot throw from a destructor
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = 0;
  bool changed_ = false;
};

}  // namespace ampgrad::cuda
