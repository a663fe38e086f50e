// Exponent histograms, the formats' ranges over them, and the update-cancellation meter.
#include <ampgrad/amp/numerics.h>

#include <cmath>

#include <ampgrad/amp/autocast.h>
#include <ampgrad/autograd/grad_mode.h>
#include <ampgrad/core/kernels.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad::amp {

void add_exponent_histogram(const Tensor& t, const Tensor& counts) {
  AG_CHECK(t.defined() && is_floating(t.dtype()), "exponent_histogram: expected a floating tensor, got {}", t.desc());
  AG_CHECK(counts.defined() && counts.dtype() == kInt64 && counts.shape() == Shape{kExponentBins} &&
               counts.is_contiguous() && counts.device() == t.device(),
           "exponent_histogram: expected counts int64 [{}], contiguous, on {}, got {}", kExponentBins,
           t.device().str(), counts.desc());
  if (t.numel() == 0) return;
  // The kernels read the elements in memory order: any dense layout will do.
  kernel::exponent_histogram(t.device(), is_non_overlapping_and_dense(t) ? t : t.contiguous(), counts);
}

Tensor exponent_histogram(const Tensor& t) {
  AG_CHECK(t.defined(), "exponent_histogram: expected a floating tensor, got an undefined tensor");
  Tensor counts = zeros({kExponentBins}, TensorOptions(kInt64).device(t.device()));
  add_exponent_histogram(t, counts);
  return counts;
}

const std::vector<FormatRange>& format_ranges() {
  static const std::vector<FormatRange> ranges = {
      {"float16", -24, -14, 15, 65504.0},
      {"bfloat16", -133, -126, 127, 3.3895313892515355e38},
      {"float8_e4m3fn", -9, -6, 8, 448.0},
      {"float8_e5m2", -16, -14, 15, 57344.0},
  };
  return ranges;
}

const FormatRange& format_range(DType dtype) {
  const auto& r = format_ranges();
  switch (dtype) {
    case DType::Float16: return r[0];
    case DType::BFloat16: return r[1];
    case DType::Float8_e4m3fn: return r[2];
    case DType::Float8_e5m2: return r[3];
    default: break;
  }
  AG_CHECK(false, "format_range: {} is not a 16- or 8-bit floating format", dtype_name(dtype));
  return r[0];
}

FormatShares format_shares(const std::vector<int64_t>& counts, const FormatRange& f, int shift) {
  AG_CHECK(counts.size() == static_cast<size_t>(kExponentBins), "format_shares: expected {} counts, got {}",
           kExponentBins, counts.size());
  FormatShares s;
  int64_t zero = 0, flushed = 0, subnormal = 0, normal = 0, overflow = 0, nonfinite = 0;
  for (int bin = 0; bin < kExponentBins; ++bin) {
    const int64_t c = counts[static_cast<size_t>(bin)];
    s.count += c;
    if (bin == exponent_bins::kZeroBin) {
      zero += c;
    } else if (bin == exponent_bins::kInfBin || bin == exponent_bins::kNanBin) {
      nonfinite += c;
    } else {
      const int e = binade_of_bin(bin) + shift;
      (e < f.min_subnormal ? flushed : e < f.min_normal ? subnormal : e <= f.max_binade ? normal : overflow) += c;
    }
  }
  if (s.count == 0) return s;
  const double n = static_cast<double>(s.count);
  s.zero = static_cast<double>(zero) / n;
  s.flushed = static_cast<double>(flushed) / n;
  s.subnormal = static_cast<double>(subnormal) / n;
  s.normal = static_cast<double>(normal) / n;
  s.overflow = static_cast<double>(overflow) / n;
  s.nonfinite = static_cast<double>(nonfinite) / n;
  return s;
}

Tensor update_cancellation(const Tensor& weight, const Tensor& update, DType storage) {
  AG_CHECK(weight.defined() && update.defined() && is_floating(weight.dtype()) && is_floating(update.dtype()) &&
               weight.shape() == update.shape() && weight.device() == update.device(),
           "update_cancellation: expected a floating weight and update of one shape on one device, got {} and {}",
           weight.desc(), update.desc());
  AG_CHECK(storage == kFloat16 || storage == kBFloat16,
           "update_cancellation: storage must be float16 or bfloat16, got {}", dtype_name(storage));
  NoGradGuard no_grad;
  AutocastGuard plain(weight.device().type, std::nullopt, /*enabled=*/false);  // the comparison as written
  const DType wide = weight.dtype() == kFloat64 || update.dtype() == kFloat64 ? kFloat64 : kFloat32;
  const Tensor w = weight.to(wide), u = update.to(wide);
  const Tensor moved = ne(u, 0.0).to(kFloat32);
  const Tensor lost = eq((w + u).to(storage), w.to(storage)).to(kFloat32) * moved;
  return sum(lost) / clamp(sum(moved), 1.0, std::nullopt);
}

}  // namespace ampgrad::amp
