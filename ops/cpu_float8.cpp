// The CPU reference kernels of FP8 autocast (core/float8_kernels.h): quantization with a
// per-tensor scale and the delayed-scaling update, plain loops the CUDA kernels are tested against.
#include <algorithm>
#include <cmath>

#include <ampgrad/core/float8.h>
#include <ampgrad/core/float8_kernels.h>
#include <ampgrad/core/half.h>
#include <ampgrad/core/step_formulas.h>

namespace ampgrad::cpu {

namespace {

float* f32(const Tensor& t) { return static_cast<float*>(detail::address(t)); }

using step_formulas::fp8_scale;

template <class Format> void quantize_as(const Tensor& x, const kernel::Fp8Quantize& q, const Tensor& out,
                                         const Tensor& out_t) {
  const int64_t rows = x.size(0), cols = x.size(1);
  const int64_t sr = x.stride(0), sc = x.stride(1);
  const float fmax = Float8<Format>::from_bits(Format::kMaxFinite);
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      const T* xp = static_cast<const T*>(detail::address(x));
      // x's value at (r, c), zero where a mask is <= 0 (a NaN mask passes it, as relu's backward).
      const BFloat16* mp = q.mask.defined() ? static_cast<const BFloat16*>(detail::address(q.mask)) : nullptr;
      const int64_t msr = mp ? q.mask.stride(0) : 0, msc = mp ? q.mask.stride(1) : 0;
      auto value = [&](int64_t r, int64_t c) {
        const float v = static_cast<float>(xp[r * sr + c * sc]);
        return mp && static_cast<float>(mp[r * msr + c * msc]) <= 0 ? 0.0f : v;
      };
      float amax = 0;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          const float v = std::fabs(value(r, c));
          if (std::isnan(v) || std::isnan(amax)) amax = NAN;
          else amax = std::max(amax, v);
        }
      float* am = f32(q.amax);
      if (q.current) am[0] = amax;
      else am[0] = (std::isnan(am[0]) || std::isnan(amax)) ? NAN : std::max(am[0], amax);
      float* sp = f32(q.scale);
      if (q.current) sp[0] = fp8_scale(am[0], q.fp8_max, q.margin, sp[0]);
      const float s = sp[0];
      f32(q.scale_inv)[0] = 1.0f / s;
      uint8_t* op = static_cast<uint8_t*>(detail::address(out));
      uint8_t* tp = out_t.defined() ? static_cast<uint8_t*>(detail::address(out_t)) : nullptr;
      int64_t saturated = 0, flushed = 0;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          const float v = value(r, c);
          const float y = v * s;
          const uint8_t b = Format::encode(y, true);
          saturated += std::fabs(y) > fmax;
          flushed += v != 0 && (b & 0x7F) == 0;
          op[r * cols + c] = b;
          if (tp) tp[c * rows + r] = b;
        }
      if (q.col_sums.defined()) {
        float* cs = f32(q.col_sums);
        for (int64_t c = 0; c < cols; ++c) {
          float t = 0;
          for (int64_t r = 0; r < rows; ++r) t += value(r, c);
          cs[c] = t;
        }
      }
      if (q.counts.defined()) {
        int64_t* cp = static_cast<int64_t*>(detail::address(q.counts));
        cp[0] += saturated;
        cp[1] += flushed;
      }
    } else {
      AG_CHECK(false, "fp8 quantization: x must be float32, float16 or bfloat16, got {}", dtype_name(x.dtype()));
    }
  });
}

void fp8_quantize(const Tensor& x, const kernel::Fp8Quantize& q, const Tensor& out, const Tensor& out_t) {
  kernel::check_fp8_quantize(x, q);
  if (out.dtype() == kFloat8_e4m3fn) quantize_as<detail::E4M3FN>(x, q, out, out_t);
  else quantize_as<detail::E5M2>(x, q, out, out_t);
}

void fp8_update_scales(const kernel::Fp8Update& u) {
  const int64_t len = u.history.size(1);
  int32_t* pos = static_cast<int32_t*>(detail::address(u.pos));
  float *amax = f32(u.amax), *hist = f32(u.history), *fmax = f32(u.fp8_max), *scale = f32(u.scale),
        *scale_inv = f32(u.scale_inv);
  for (int64_t i = 0; i < u.n; ++i) {
    const float a = amax[i];
    amax[i] = 0;
    const bool finite = std::isfinite(a);
    float* h = hist + i * len;
    h[pos[i]] = finite ? a : 0.0f;
    pos[i] = static_cast<int32_t>((pos[i] + 1) % len);
    if (!finite) continue;  // a non-finite amax keeps the old scale, and is not remembered
    float m = a;
    if (!u.most_recent) m = *std::max_element(h, h + len);
    const float s = fp8_scale(m, fmax[i], u.margin, scale[i]);
    scale[i] = s;
    scale_inv[i] = 1.0f / s;
  }
}

}  // namespace

AG_REGISTER_KERNEL(kernel::fp8_quantize, kCPU, fp8_quantize);
AG_REGISTER_KERNEL(kernel::fp8_update_scales, kCPU, fp8_update_scales);

}  // namespace ampgrad::cpu
