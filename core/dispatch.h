// Kernels declared once and implemented per device (Note [Kernel dispatch]): the Kernel
// stub, its two macros, and the current op that a missing kernel's error names.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <ampgrad/core/device.h>

namespace ampgrad {

class Tensor;

// Note [Kernel dispatch]
// A kernel's name and signature are declared once, in a header every device sees (the
// library's in core/kernels.h and core/fused_kernels.h):
//     AG_DECLARE_KERNEL(unary, void(UnaryKind k, const Tensor& x, const Tensor& out, double a, double b));
// (an inline variable: the declaration is the definition), and each device's own file
// registers its implementation, a plain function of that signature:
//     AG_REGISTER_KERNEL(kernel::unary, kCPU, unary);   // ops/cpu_elementwise.cpp
//     AG_REGISTER_KERNEL(kernel::unary, kCUDA, unary);  // cuda/unary.cu
// An op calls it with the device to run on first: kernel::unary(out.device(), k, x, out, a, b).
// That is one load and an indirect call (PyTorch's DispatchStub); the op never names a
// device's code, so ops/ compiles the same with and without CUDA. A device with no
// implementation (a CPU-only build, a program's kernel registered for the CPU alone) raises
// ag::Error naming the op that called it, the kernel and the device. Stubs are constant-
// initialized, so registrations running at load time, in any order, always find them.
// Programs outside the library declare and register their own kernels the same way.

// Note [Fast CPU kernels]
// A CPU kernel may have two implementations. The reference loop (ops/cpu_*.cpp and
// optim/cpu_fused.cpp, registered
// with AG_REGISTER_KERNEL) is plain and obviously right; it is the ground truth. The fast one
// (cpu/, registered with AG_REGISTER_FAST_KERNEL: oneDNN, vectorized loops, threads) handles
// the cases it was built for and calls kernel.reference(args...) for every other one, so both
// always give an answer. A CPU call runs the fast one while fast_cpu_kernels() is on (the
// default; AMPGRAD_CPU_REFERENCE=1 in the environment turns it off at start-up, and
// set_fast_cpu_kernels in cpu/parallel.h at run time), and the tests run the two on the same
// inputs (tests/test_cpu_fast.cpp).

// The op running on this thread, innermost first: OpScope sets it (ops/op_scope.h), a backward
// node while its formula runs (autograd/node.cpp), an optimizer's step while its kernels run. A
// missing kernel's error names it, and so do the errors of the device's calls it makes (a
// failed launch, cuBLAS, cuDNN: cuda/runtime.cpp). `name` must outlive the scope (an OpInfo's).
class CurrentOp {
 public:
  explicit CurrentOp(std::string_view name, bool backward = false) {
    State& s = state_;  // one thread-local lookup (from a shared library, a call) per scope
    prev_ = s;
    s = State{name, backward, nullptr, 0};
  }
  ~CurrentOp() { state_ = prev_; }
  // The op's tensor arguments, for errors that name their shapes (Note [Device-side errors] in
  // cuda/device_error.h); they must outlive the scope (OpScope's).
  void set_inputs(const Tensor* const* inputs, size_t n) {
    State& s = state_;
    s.inputs = inputs;
    s.n_inputs = n;
  }
  static const Tensor* const* inputs() { return state_.inputs; }
  static size_t input_count() { return state_.n_inputs; }
  CurrentOp(const CurrentOp&) = delete;
  CurrentOp& operator=(const CurrentOp&) = delete;
  static std::string_view name() { return state_.name; }
  static bool backward() { return state_.backward; }
  // "linear", "linear's backward", or "" outside any op: for error messages.
  static std::string label() {
    const State& s = state_;
    return label(s.name, s.backward);
  }
  static std::string label(std::string_view name, bool backward) {
    return backward && !name.empty() ? std::string(name) + "'s backward" : std::string(name);
  }

 private:
  struct State {  // no member initializers: a thread-local is zero-initialized
    std::string_view name;
    bool backward;
    const Tensor* const* inputs;
    size_t n_inputs;
  };
  State prev_;
  static inline thread_local State state_;
};

namespace detail {
inline constexpr int kDeviceTypes = 2;  // DeviceType::CPU, DeviceType::CUDA
bool fast_cpu_kernels_default();
inline bool fast_cpu = fast_cpu_kernels_default();
[[noreturn]] void kernel_missing(const char* kernel, Device device);
void kernel_registered(const char* kernel, DeviceType type, bool again, bool fast = false);
}  // namespace detail

template <class Signature> class Kernel;

template <class R, class... Args> class Kernel<R(Args...)> {
 public:
  using Fn = R (*)(Args...);

  constexpr explicit Kernel(const char* name) : name_(name) {}
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;

  // Runs the implementation registered for `device`'s type (the fast CPU one when there is
  // one and fast_cpu_kernels() is on).
  R operator()(Device device, Args... args) const {
    Fn f = fns_[static_cast<int>(device.type)];
    if (device.type == DeviceType::CPU && fast_ != nullptr && detail::fast_cpu) f = fast_;
    if (f == nullptr) [[unlikely]] detail::kernel_missing(name_, device);
    return f(static_cast<Args&&>(args)...);
  }
  // The CPU reference loop, for a fast kernel's cases it does not take.
  R reference(Args... args) const {
    const Fn f = fns_[static_cast<int>(DeviceType::CPU)];
    if (f == nullptr) [[unlikely]] detail::kernel_missing(name_, Device(DeviceType::CPU));
    return f(static_cast<Args&&>(args)...);
  }
  bool has(Device device) const { return fns_[static_cast<int>(device.type)] != nullptr; }
  bool has_fast_cpu() const { return fast_ != nullptr; }
  const char* name() const { return name_; }

  // Used by AG_REGISTER_KERNEL; a second registration for one device type replaces the
  // first (and is reported by the registry test as a bug).
  bool set(DeviceType type, Fn f) {
    detail::kernel_registered(name_, type, fns_[static_cast<int>(type)] != nullptr);
    fns_[static_cast<int>(type)] = f;
    return true;
  }
  bool set_fast(Fn f) {
    detail::kernel_registered(name_, DeviceType::CPU, fast_ != nullptr, true);
    fast_ = f;
    return true;
  }

 private:
  const char* name_;
  Fn fns_[detail::kDeviceTypes] = {};
  Fn fast_ = nullptr;
};

// Kernels registered twice for one device type (a bug), for the tests: "name on cuda".
const std::vector<std::string>& kernel_registration_clashes();
// Whether any kernel is registered for a device type (false for CUDA in a CPU-only build).
bool kernels_registered(DeviceType type);

}  // namespace ampgrad

// In a header, at namespace scope: the kernel's name and signature, e.g.
// AG_DECLARE_KERNEL(swish, void(const Tensor& x, const Tensor& out)).
#define AG_DECLARE_KERNEL(name, ...) inline constinit ::ampgrad::Kernel<__VA_ARGS__> name{#name}
// In the device's file, at namespace scope: `fn` implements `kernel` for `type` (kCPU, kCUDA).
#define AG_REGISTER_KERNEL(kernel, type, fn) \
  [[maybe_unused]] static const bool AG_KERNEL_CONCAT(ag_kernel_registered_, __LINE__) = (kernel).set(type, fn)
// In cpu/, at namespace scope: `fn` is `kernel`'s fast CPU implementation (Note [Fast CPU kernels]).
#define AG_REGISTER_FAST_KERNEL(kernel, fn) \
  [[maybe_unused]] static const bool AG_KERNEL_CONCAT(ag_fast_kernel_registered_, __LINE__) = (kernel).set_fast(fn)
#define AG_KERNEL_CONCAT(a, b) AG_KERNEL_CONCAT_(a, b)
#define AG_KERNEL_CONCAT_(a, b) a##b
