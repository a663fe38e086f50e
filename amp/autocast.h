// Autocast: the thread-local state, the RAII guard, the per-category cast policy applied at
// each op's entry, and the cast cache (the low, policy part of amp/; Note [Autocast]).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include <ampgrad/amp/category.h>
#include <ampgrad/core/tensor.h>

namespace ampgrad {
struct OpInfo;
}

namespace ampgrad::amp {

// Note [Autocast]
// Every op declares a Category in its record. When the outermost op call on a thread starts
// (ops called by other ops, and backward formulas, are not re-cast) and autocast is enabled
// for the device type of the op's first tensor input, the policy casts the op's floating
// inputs on that device type (never float64, never integers):
//   lower       -> the autocast dtype (fp16 or bf16)
//   fp32        -> float32
//   promote     -> the widest floating dtype among the inputs
//   passthrough -> nothing; ordinary type promotion applies
//   banned      -> Error under fp16 autocast, naming the safe alternative
// Casts are the differentiable `to` op, so gradients reach fp32 leaves in fp32. A float32
// leaf that requires grad (a parameter) is cast once per outermost autocast region and the
// copy is reused (the cast cache): that copy is the step's 16-bit working copy of the
// fp32 master weight. The cache empties when the outermost enabled region exits; the copy
// itself is kept, and reused by later regions while the parameter is unchanged or changed
// only by a fused optimizer step, which refreshes it (Note [Working copies]).
//
// Note [Ready casts]
// An fp32 op's float32 output is often the next `lower` op's input: a pre-norm transformer's
// layer_norm feeds linear, whose input autocast casts to float16, one more launch forward and
// its gradient's cast back one more backward, per norm. A fused fp32 op whose kernel can write
// its output in the autocast dtype as well, in the same pass (layer_norm on CUDA), does so
// while autocast is enabled and offers that copy (detail::offer_cast): it is a second output
// of the op's autograd node, so its gradient goes straight into the op's backward (which
// takes the two outputs' gradients in one kernel) with no cast either way. When a later op's
// policy would cast that output, unchanged since (version), to that dtype, it gets the copy
// instead (cast_cache_stats().ready_hits). The values are the cast's bit for bit: both round
// the same float32 result once. The op's output itself stays float32, as PyTorch's; the copy
// is kept only while the output lives, and costs a write of its bytes when nothing takes it.

bool is_autocast_enabled(DeviceType type);
DType get_autocast_dtype(DeviceType type);

// RAII, nestable, restores the previous state on exit (also on exceptions).
// Defaults: float16 on CUDA, bfloat16 on the CPU. enabled=false turns autocast off inside.
class AutocastGuard {
 public:
  explicit AutocastGuard(DeviceType type = DeviceType::CUDA, std::optional<DType> dtype = std::nullopt,
                         bool enabled = true);
  AutocastGuard(DeviceType type, bool enabled) : AutocastGuard(type, std::nullopt, enabled) {}
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  DeviceType type_;
  bool prev_enabled_;
  DType prev_dtype_;
  bool enabled_region_ = false;
};

// Turns autocast off for both device types in its scope, keeping the cast cache. The
// backward engine runs under one: gradients follow the forward's dtypes (Note [Grad shape
// and dtype]), not the policy.
class AutocastSuspend {
 public:
  AutocastSuspend();
  ~AutocastSuspend();
  AutocastSuspend(const AutocastSuspend&) = delete;
  AutocastSuspend& operator=(const AutocastSuspend&) = delete;

 private:
  bool prev_[2];
};

struct CastCacheStats {
  int64_t entries = 0;
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t bytes_converted = 0;  // bytes written by casts made under autocast
  int64_t working_copy_hits = 0;  // of the hits, served by a kept copy (Note [Working copies])
  int64_t ready_hits = 0;         // of the hits, an op's own 16-bit copy of its output (Note [Ready casts])
};
CastCacheStats cast_cache_stats();  // this thread's, since the outermost region began
void clear_cast_cache();

// One op call seen by the policy, for the trace (amp/trace.h).
struct OpRecord {
  std::string_view op;
  Category category;
  std::vector<DType> input_dtypes;   // as passed by the caller
  std::optional<DType> chosen_dtype; // what the policy cast to, if it acted
  DType output_dtype = DType::Float32;
  int casts = 0;
  int read_16bit = 0;  // 16-bit inputs an fp32 op read as they are (OpInfo::reads_16bit)
  int cache_hits = 0;
  int64_t bytes_converted = 0;
  std::string path;  // which implementation ran, and why, where an op has several (OpScope::note_path)
};


}  // namespace ampgrad::amp
