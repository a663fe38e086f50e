// Process-wide numeric switches (no CUDA): whether float32 matmuls may use TF32 tensor cores.
#pragma once

#include <atomic>

namespace ampgrad {

namespace detail {
inline std::atomic<bool> g_allow_tf32{false};
}  // namespace detail

// Off by default: float32 matmuls run in full float32. On, cuBLAS may round their inputs to
// TF32 (10-bit mantissa) on tensor cores, as torch.backends.cuda.matmul.allow_tf32.
inline void set_allow_tf32(bool allow) { detail::g_allow_tf32.store(allow, std::memory_order_relaxed); }
inline bool allow_tf32() { return detail::g_allow_tf32.load(std::memory_order_relaxed); }

}  // namespace ampgrad
