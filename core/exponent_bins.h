// Where a number falls on float32's exponent line: the bin rule of the exponent histograms, once
// for every device (Note [Exponent histograms]).
#pragma once

#include <math.h>

#include <cstdint>
#include <cstring>

#include <ampgrad/core/kernel_kinds.h>

namespace ampgrad::exponent_bins {

// Note [Exponent histograms]
// AMP is about where values fall on the exponent line: a float16 keeps what lies between 2^-24
// (its smallest subnormal) and 65504, a bfloat16 float32's range with 8 bits of mantissa. An
// exponent histogram counts a tensor's values per binade, [2^e, 2^(e+1)), over float32's whole
// line: kBins bins,
//   bin 0                ±0
//   bin 1 + (e + 149)    finite nonzero values of binade e, e from -149 (float32's smallest
//                        subnormal, 2^-149) to 127 (its largest binade)
//   bin kBins - 2        ±inf
//   bin kBins - 1        NaN
// float16, bfloat16 and float8 values are float32 values, so they land exactly; a float64
// value beyond float32's binades is counted in the first or last binade. One kernel per tensor
// adds its counts into an int64 row of kBins on the tensor's device, with no host wait
// (kernel::exponent_histogram; the CPU's loop and CUDA's kernel both call bin_of), so a
// histogram can be taken inside a captured CUDA graph and read later.
inline constexpr int kMinBinade = -149, kMaxBinade = 127;
inline constexpr int kBins = 1 + (kMaxBinade - kMinBinade + 1) + 2;  // 280
inline constexpr int kZeroBin = 0, kInfBin = kBins - 2, kNanBin = kBins - 1;

// The bin of binade e (kMinBinade <= e <= kMaxBinade).
AG_HOST_DEVICE constexpr int binade_bin(int e) { return 1 + (e - kMinBinade); }

// The binade of a positive finite float32 from its bits: the exponent field, or for a subnormal
// the position of the mantissa's highest set bit.
AG_HOST_DEVICE inline int bin_of(float v) {
  uint32_t bits;
  memcpy(&bits, &v, sizeof bits);
  bits &= 0x7fffffffu;  // |v|
  const uint32_t field = bits >> 23, mantissa = bits & 0x7fffffu;
  if (field == 0xff) return mantissa != 0 ? kNanBin : kInfBin;
  if (field != 0) return binade_bin(static_cast<int>(field) - 127);
  if (mantissa == 0) return kZeroBin;
  int top = 22;  // subnormal: v = mantissa * 2^-149
  while ((mantissa >> top) == 0) --top;
  return binade_bin(top + kMinBinade);
}

AG_HOST_DEVICE inline int bin_of(double v) {
  if (v != v) return kNanBin;
  const double a = fabs(v);
  if (a == 0) return kZeroBin;
  if (isinf(a)) return kInfBin;
  int e;
  frexp(a, &e);  // a = m 2^e with m in [0.5, 1): binade e - 1
  const int b = e - 1 < kMinBinade ? kMinBinade : (e - 1 > kMaxBinade ? kMaxBinade : e - 1);
  return binade_bin(b);
}

}  // namespace ampgrad::exponent_bins
