// This CPU's measured arithmetic peak per precision, for the benchmarks' "% of peak".
#pragma once

#include <string>

#include <ampgrad/core/dtype.h>

namespace ampgrad::cpu {

// Note [CPU peak]
// GFLOP/s of the team's threads each running independent chains of fused multiply-adds in
// the widest vectors this CPU has (AVX-512, else AVX2 + FMA, else SSE2 multiply and add):
// float32 and float64 FMAs; bfloat16 as AVX512-BF16 dot products (vdpbf16ps: two products per
// float32 lane) where the CPU has them, else float32's (bf16 then computes in float32);
// float16 as float32 (no float16 arithmetic here: Note [Float16 on the CPU]). Three passes of
// 200,000 rounds of the chains per thread (a few ms) after a warm-up, the best kept; measured
// once per dtype and thread count.
double measured_peak_gflops(DType d);
// How the peak of d was measured, for the benchmark tables ("AVX-512 FMA", ...).
std::string peak_method(DType d);

}  // namespace ampgrad::cpu
