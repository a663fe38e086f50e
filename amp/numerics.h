// Seeing the numbers: exponent histograms of tensors, what each storage format keeps of them,
// and how many of an update's elements a 16-bit weight would cancel (Note [Exponent histograms]
// in core/exponent_bins.h).
#pragma once

#include <string_view>
#include <vector>

#include <ampgrad/core/exponent_bins.h>
#include <ampgrad/core/tensor.h>

namespace ampgrad::amp {

inline constexpr int kExponentBins = exponent_bins::kBins;

// The count of t's values (floating, any device) per bin of float32's exponent line, an int64
// [kExponentBins] tensor on t's device: one kernel, no host wait, no autograd.
Tensor exponent_histogram(const Tensor& t);
// Adds t's counts into `counts`, a contiguous int64 [kExponentBins] tensor on t's device (a row
// of a larger buffer, say).
void add_exponent_histogram(const Tensor& t, const Tensor& counts);

// The binade of a histogram's bin (bins 1 .. kExponentBins - 3; the others hold zeros, inf, NaN).
constexpr int binade_of_bin(int bin) { return bin - 1 + exponent_bins::kMinBinade; }

// A storage format's place on the exponent line: its smallest subnormal is 2^min_subnormal, its
// smallest normal 2^min_normal, its largest finite value max_finite, in binade max_binade.
struct FormatRange {
  std::string_view name;
  int min_subnormal, min_normal, max_binade;
  double max_finite;
};
// float16, bfloat16, float8_e4m3fn and float8_e5m2, in that order.
const std::vector<FormatRange>& format_ranges();
// The range of `dtype` (one of those four); an ag::Error for any other.
const FormatRange& format_range(DType dtype);

// What a format keeps of a histogram's values once multiplied by 2^shift (a loss or FP8 scale
// that is a power of two moves every value by exactly that many binades): shares of every
// value counted. By binade, so the edges are approximate within one binade: `flushed` counts
// the nonzero values below the smallest subnormal's binade (they become 0, or in the binade
// just below it round up to it), `overflow` those above the largest finite value's binade
// (they become inf; values of the largest binade beyond max_finite are counted as normal).
struct FormatShares {
  int64_t count = 0;
  double zero = 0, flushed = 0, subnormal = 0, normal = 0, overflow = 0, nonfinite = 0;
};
FormatShares format_shares(const std::vector<int64_t>& counts, const FormatRange& format, int shift = 0);

// Of the elements of `weight` whose `update` (same shape, floating) is nonzero, the share that
// storing weight + update in `storage` (float16 or bfloat16) leaves equal to weight as stored
// there: the update is lost. A float32 0-dim tensor on weight's device, no host wait. This is
// why fp32 master weights exist: with bfloat16 weights, an update smaller than about 2^-9 of
// its weight is cancelled.
Tensor update_cancellation(const Tensor& weight, const Tensor& update, DType storage);

}  // namespace ampgrad::amp
