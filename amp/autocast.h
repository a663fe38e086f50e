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
// copy is reused (Note [Cast cache] in amp/autocast.cpp): that copy is the step's 16-bit
// working copy of the fp32 master weight. Where the cast is decided: detail::apply_policy in
// amp/autocast.cpp; where it is made or found: cached_cast, beside it.

bool is_autocast_enabled(DeviceType type);
// The dtype `lower` ops run in: float16 or bfloat16 (bfloat16 under FP8 autocast).
DType get_autocast_dtype(DeviceType type);
class Fp8Recipe;
// The recipe of the FP8 autocast enabled for `type`, or null (Note [FP8 autocast]).
Fp8Recipe* get_autocast_fp8_recipe(DeviceType type);
// The ops FP8 autocast runs as FP8 GEMMs.
const std::vector<std::string_view>& fp8_gemm_ops();

// Note [FP8 autocast]
// AutocastGuard(DeviceType::CUDA, kFloat8_e4m3fn, recipe) makes FP8 one more autocast dtype.
// The GEMM ops (linear, linear_relu, linear_gelu, mm, matmul, addmm, bmm: amp::fp8_gemm_ops()) take
// their float inputs as they are and run as FP8 GEMMs, forward and backward
// (ops/fp8_gemm.cpp): each operand is quantized with its scale from the recipe (Note [FP8
// scaling] in amp/fp8.h) in one kernel that also writes its transpose (Hopper's FP8 GEMMs
// take only the "TN" layout) and records its amax; the GEMM reads the scales on the device and
// writes bfloat16, with float32 accumulation. Backward quantizes the output's gradient (e5m2
// under HYBRID) and runs the input-gradient and weight-gradient GEMMs in FP8 too; a float32
// parameter's gradient comes out of its GEMM in float32, so the optimizer steps fp32 master
// weights. bmm and matmul of equal batches run as batched FP8 GEMMs (Note [Batched FP8
// GEMMs] in ops/fp8_gemm.cpp). Where a GEMM cannot run in FP8 (a dimension not a multiple of
// 16, a broadcast batch, float64), it runs in bfloat16, and the trace (`ampgrad explain`)
// says why. Every
// other `lower` op runs in bfloat16, the fp32 and promote ops as always. The outermost FP8
// guard runs the recipe's delayed-scaling update as it is entered; nothing synchronizes with
// the host, so the step can be captured in a CUDA graph. FP8 GEMMs need compute capability
// 8.9 (Ada, Hopper); elsewhere the first FP8 GEMM raises an error; the CPU emulates them
// (float8 values, float32 products), the reference the CUDA path is tested against.

// RAII, nestable, restores the previous state on exit (also on exceptions).
// Defaults: float16 on CUDA, bfloat16 on the CPU. enabled=false turns autocast off inside.
class AutocastGuard {
 public:
  explicit AutocastGuard(DeviceType type = DeviceType::CUDA, std::optional<DType> dtype = std::nullopt,
                         bool enabled = true);
  AutocastGuard(DeviceType type, bool enabled) : AutocastGuard(type, std::nullopt, enabled) {}
  // FP8 autocast (Note [FP8 autocast]): dtype float8_e4m3fn, the forward's format (the recipe's
  // fp8_format picks the gradients'). The recipe must outlive the backward passes of the region.
  AutocastGuard(DeviceType type, DType dtype, Fp8Recipe& recipe, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  DeviceType type_;
  bool prev_enabled_;
  DType prev_dtype_;
  Fp8Recipe* prev_fp8_;
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
  int64_t reused = 0;  // of the hits, casts made outside the region (Note [Cast reuse] in amp/cast_reuse.h)
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
