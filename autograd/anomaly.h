// Anomaly detection: the first op whose output or gradient holds NaN or inf, named (PyTorch's
// detect_anomaly, with AMP in mind).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <ampgrad/core/error.h>
#include <ampgrad/core/tensor.h>

namespace ampgrad::autograd {

// Note [Anomaly detection]
// While a DetectAnomalyGuard lives on a thread, every op's output there (the first, for an op
// with several) and every gradient a backward node returns is checked for NaN and inf, and the
// first to hold one is raised as AnomalyError: which op, forward or backward, its position (op
// k of the forward: the k-th outermost op since the guard began, the last backward ended or
// check() ran, so row k of an amp::Trace begun at the same point; node k of the backward, in
// the order they ran), for a backward node the forward op that created it, the tensor's dtype
// and shape and how many of its values are NaN and inf. Where a node's gradient is the sum of
// several arriving along different edges, the sum is checked too: two finite float16
// gradients can add up to inf. The node that returned the gradient is then run again with its
// 16-bit (or float32) inputs widened to float32 (or float64), and the result reduced to the
// input's shape there, which tells how large the values that overflowed really were: "its
// largest magnitude is 1.5e+05, 2.3x float16's largest finite value" answers "which op
// overflowed, and by how much?", the question a skipped AMP step asks (`ampgrad explain
// --anomaly`). (Not for an op with several outputs, whose node reads its gradients from the
// outputs' slots: it is named without the magnitude.)
// The check is one kernel per tensor (kernel::anomaly_check) into a flags tensor of the device:
// on the CPU it is read at once, so the error is raised by the op itself; on CUDA nothing waits
// for it, and the flags are read where the forward ends (when backward() starts, or check())
// and where the backward ends: two synchronizations a step, not one per op. The first op
// flagged wins (the checks run in stream order). Until then every backward node on CUDA keeps
// its saved tensors, and every check its incoming gradient (memory, as PyTorch's anomaly mode
// costs time), so the one flagged can be run again. While a CUDA graph captures, nothing is
// checked. The forward's checks flag inf as well as NaN; check_forward = false leaves the
// forward alone, as PyTorch's detect_anomaly does. Outside a guard, an op pays one load of a
// global.
class DetectAnomalyGuard {
 public:
  // check_nan = false turns the checks off inside this guard (PyTorch's argument);
  // check_forward = false checks only the backward's gradients, as PyTorch does (for a model
  // whose forward holds inf on purpose: masked_fill with -inf, log of 0). Guards nest.
  explicit DetectAnomalyGuard(bool check_nan = true, bool check_forward = true);
  ~DetectAnomalyGuard();
  DetectAnomalyGuard(const DetectAnomalyGuard&) = delete;
  DetectAnomalyGuard& operator=(const DetectAnomalyGuard&) = delete;
  // Raises what the checks found so far on this thread (synchronizing the devices they ran on):
  // for a forward that no backward follows.
  static void check();

 private:
  bool prev_check_, prev_forward_;
};

// Whether checks run on this thread now.
bool anomaly_mode_enabled();

// What the check found.
struct Anomaly {
  std::string op;       // the op, e.g. "mm"
  bool backward = false;  // its backward node returned the tensor
  bool sum = false;       // backward: the sum of the gradients reaching the node along several edges
  int64_t position = 0;   // op `position` of the forward created it (0: not known)
  int64_t node = 0;       // backward: node `node` of the backward, in the order they ran
  int64_t input = -1;     // backward: the gradient for this input of the op; -1 for the seed
  std::string tensor;     // its dtype and shape, e.g. "float16 [64, 10]"
  DType dtype = DType::Float32;
  int64_t numel = 0, nan = 0, inf = 0;
  Device device;
  // Backward, when the node could be run again in a wider dtype: that dtype and the largest
  // magnitude of the gradient there (inf where it overflows there too, NaN where it is NaN).
  bool recomputed = false;
  DType wide_dtype = DType::Float32;
  double wide_max_abs = 0;
  std::string message() const;
  double dtype_max() const;  // the largest finite value of `dtype`
};

class AnomalyError : public Error {
 public:
  explicit AnomalyError(Anomaly a) : Error(a.message()), anomaly_(std::move(a)) {}
  const Anomaly& anomaly() const { return anomaly_; }

 private:
  Anomaly anomaly_;
};

namespace detail {
// Guards alive on any thread: the one load an op pays outside anomaly mode.
inline std::atomic<int> anomaly_guards{0};
inline bool anomaly_guarded() { return anomaly_guards.load(std::memory_order_relaxed) != 0; }
// Per-op hooks, for OpScope (ops/op_scope.h), record() and the engine, when anomaly_guards > 0.
// The position of an outermost op beginning on this thread (0 when not checking).
int64_t anomaly_begin_op();
// The position of the outermost op running on this thread (the last one begun; 0 when not checking).
int64_t anomaly_position();
// An op (at `position`) returned `out`.
void anomaly_check_output(std::string_view op, int64_t position, const Tensor& out);
}  // namespace detail

}  // namespace ampgrad::autograd
