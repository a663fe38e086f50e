// FP8 autocast's scaling recipes: DelayedScaling and CurrentScaling, as Transformer Engine's,
// and Fp8Recipe, which holds the per-tensor scales and amax histories on the device
// (Note [FP8 scaling], Note [FP8 autocast]).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ampgrad/core/tensor.h>

namespace ampgrad::amp {

// Note [FP8 scaling]
// An FP8 GEMM multiplies tensors scaled into FP8's narrow range: q = saturated(x * scale),
// x ~ q / scale, and the GEMM takes 1 / scale of each operand as its dequantization scale
// (cuBLASLt's A/B scale pointers, read on the device). A recipe picks each tensor's scale so
// that its largest magnitude, amax, lands near the format's largest finite value (448 in
// e4m3fn, 57344 in e5m2):
//     scale = fp8_max / amax / 2^margin
// - DelayedScaling (Transformer Engine's default): each tensor (a GEMM's input, its weight,
//   and the gradient of its output) keeps a history of the amaxes of its last
//   amax_history_len steps; the quantization of this step uses the scale computed from the
//   history before it, and records this step's amax (max |x|, in the same kernel). The update,
//   one kernel for all of a recipe's tensors, runs as FP8 autocast's outermost guard is
//   entered (so once per step, after the previous step's backward): per tensor, the amax
//   recorded since the last update goes into the history (a ring of amax_history_len slots),
//   amax = the history's max (amax_compute_algo max) or that latest amax (most_recent), and the
//   scale is recomputed. A zero amax (the tensor was not used, or is all zeros) keeps the old
//   scale; so does a non-finite one (an overflowed step), which the history records as 0, so
//   it is forgotten at once (Transformer Engine keeps it, freezing the scale for
//   amax_history_len steps). Scales start at 1. Nothing of it touches the host: the update is
//   a kernel, the scales are read by kernels, so a step under FP8 autocast can be captured in
//   a CUDA graph and replayed, its scales updating on the device.
// - CurrentScaling: the scale of each quantization comes from the amax of the tensor itself,
//   reduced first (one more pass over it; no history, no delay).
// Format HYBRID quantizes the forward's tensors (inputs, weights) to e4m3fn and the gradients
// to e5m2 (range over precision); E4M3 uses e4m3fn for all. A GEMM that multiplies no
// parameter (attention's q @ k^T, say) has no tensor to keep a history for: it uses current
// scaling whatever the recipe. Each quantization also writes 1 / scale, the scale it used,
// beside its FP8 tensor: a backward that runs after the next update (gradient accumulation)
// still dequantizes with the scale its forward quantized with.
enum class Fp8Format : uint8_t { E4M3, HYBRID };
enum class AmaxComputeAlgo : uint8_t { max, most_recent };

struct DelayedScaling {
  int margin = 0;
  Fp8Format fp8_format = Fp8Format::HYBRID;
  int64_t amax_history_len = 1024;
  AmaxComputeAlgo amax_compute_algo = AmaxComputeAlgo::max;
};

struct CurrentScaling {
  int margin = 0;
  Fp8Format fp8_format = Fp8Format::HYBRID;
};

// Which of a GEMM's tensors a scale belongs to.
enum class Fp8Role : uint8_t { input, weight, grad_output };
std::string_view fp8_role_name(Fp8Role r);

// One tensor's scaling state, read back from the device (Fp8Recipe::stats()).
struct Fp8TensorStats {
  const TensorImpl* parameter = nullptr;  // the parameter whose GEMM this is (name it with named_parameters())
  Fp8Role role = Fp8Role::input;
  DType dtype = DType::Float8_e4m3fn;
  float amax = 0;          // recorded since the last update (delayed) or by the last quantization (current)
  float history_max = 0;   // the history's max (delayed scaling)
  float scale = 1;         // the scale the next quantization uses
  int64_t quantized = 0;   // values quantized while stats were collected
  int64_t saturated = 0;   // of them, clamped to the largest finite value
  int64_t flushed = 0;     // of them, non-zero values quantized to zero
};

namespace detail {
struct Fp8Meta;
}

// A recipe and the state it keeps: for each (parameter, role) one scale, one amax and (delayed
// scaling) one history, in device memory, made the first time FP8 autocast multiplies that
// parameter (not during a CUDA graph capture: run the step once before capturing it, as
// captures need anyway). Keep it alive while its steps' backward passes run.
class Fp8Recipe {
 public:
  explicit Fp8Recipe(DelayedScaling config = {});
  explicit Fp8Recipe(CurrentScaling config);
  ~Fp8Recipe();
  Fp8Recipe(const Fp8Recipe&) = delete;
  Fp8Recipe& operator=(const Fp8Recipe&) = delete;

  bool delayed() const { return delayed_; }
  const DelayedScaling& config() const { return config_; }  // CurrentScaling: its margin and format, history 1
  DType dtype(Fp8Role role) const;  // e4m3fn, or e5m2 for gradients under HYBRID
  float fp8_max(Fp8Role role) const;

  // The delayed-scaling update of every tensor (Note [FP8 scaling]); FP8 autocast's outermost
  // guard runs it on entry. One kernel per 256 tensors; nothing for CurrentScaling.
  void update();

  // Counting saturated and flushed values costs an atomic per warp; `ampgrad explain --amp fp8` turns it on.
  void collect_stats(bool on) { collect_stats_ = on; }
  bool collecting_stats() const { return collect_stats_; }
  // Reads the device (synchronizes): for explain and tests, not for the step.
  std::vector<Fp8TensorStats> stats() const;
  int64_t num_tensors() const;

  // Internal (ops/fp8_gemm.cpp): the state of (parameter, role) on `device`, made on first use.
  detail::Fp8Meta& meta(const Tensor& parameter, Fp8Role role);

 private:
  struct Slab;
  struct Entry;
  bool delayed_;
  DelayedScaling config_;
  bool collect_stats_ = false;
  std::vector<std::unique_ptr<Slab>> slabs_;
  std::vector<std::unique_ptr<Entry>> entries_;  // pointers: the metas handed out stay put
};

namespace detail {
// Views of one tensor's state in its recipe's device buffers (float32 [1] each; counts int64 [2]).
struct Fp8Meta {
  Tensor amax, scale, counts;
  DType dtype = DType::Float8_e4m3fn;
  float fp8_max = 448;
  int64_t quantized = 0;
};
}  // namespace detail

}  // namespace ampgrad::amp
