// examples/fp8_matmul.cpp: float8 tensors and the FP8 GEMM. Quantizes two float32 matrices
// to float8_e4m3fn with per-tensor scales (amax / 448, the format's largest value), multiplies
// them with scaled_mm (torch._scaled_mm: cuBLASLt's FP8 kernels on CUDA, float32 on the CPU),
// and compares with the float32 product; saves the float8 operands to safetensors and reads
// them back bit for bit.
//
//   ./fp8_matmul [cpu|cuda] [n]     exits 1 unless the FP8 product is within 10% (relative
//                                   Frobenius error) of float32's and the file round-trips
#include <ampgrad/ampgrad.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

namespace ag = ampgrad;

int main(int argc, char** argv) {
  const bool cuda = argc > 1 && std::strcmp(argv[1], "cuda") == 0;
  const int64_t n = argc > 2 ? std::stoll(argv[2]) : 256;
  if (cuda && !ag::cuda::is_available()) {
    std::printf("fp8_matmul: no CUDA device here\n");
    return 0;
  }
  const ag::Device dev = cuda ? ag::Device(ag::kCUDA) : ag::Device(ag::kCPU);
  ag::NoGradGuard no_grad;
  ag::Tensor a32 = ag::randn({n, n}, dev), b32 = ag::randn({n, n}, dev);

  // Dequantization scales stay on the device: scaled_mm's kernel reads them there.
  ag::Tensor sa = (ag::max(a32.abs()) / 448.0).reshape({1});
  ag::Tensor sb = (ag::max(b32.abs()) / 448.0).reshape({1});
  ag::Tensor a8 = (a32 / sa).to(ag::kFloat8_e4m3fn);                       // [n, n], row-major
  ag::Tensor b8 = (b32.t().contiguous() / sb).to(ag::kFloat8_e4m3fn).t();  // [n, n], column-major
  std::printf("a8: %s, %zu byte(s) per element; a8[0, :4] = %s\n", a8.desc().c_str(), a8.element_size(),
              a8.select(0, 0).slice(0, 0, 4).str().c_str());

  ag::Tensor amax = ag::zeros({1}, dev);
  ag::Tensor c = ag::scaled_mm(a8, b8, sa, sb, ag::Tensor(), ag::kBFloat16, false, amax);
  ag::Tensor ref = ag::mm(a32, b32);
  ag::Tensor d = c.to(ag::kFloat32) - ref;
  const double err = std::sqrt(ag::sum(d * d).item<double>() / ag::sum(ref * ref).item<double>());
  std::printf("scaled_mm on %s: %s, relative error vs float32 %.3e, amax %.2f (float32's %.2f)\n",
              dev.str().c_str(), c.desc().c_str(), err, amax.item<double>(),
              ag::max(ref.abs()).item<double>());

  // Other ops refuse float8 tensors, naming themselves.
  try {
    (void)(a8 + a8);
  } catch (const ag::Error& e) {
    std::printf("a8 + a8: %.60s...\n", e.what());
  }

  const std::string path = "/tmp/ampgrad_fp8_matmul.safetensors";
  ag::nn::save_safetensors(path, {{"a", a8}, {"b", b8}, {"scale_a", sa}, {"scale_b", sb}});
  ag::nn::SafetensorsFile f = ag::nn::load_safetensors(path);
  std::remove(path.c_str());
  const bool same = f.tensors.at("a").to_vector<float>() == a8.to_vector<float>() &&
                    f.tensors.at("b").to_vector<float>() == b8.to_vector<float>();
  std::printf("safetensors round trip (F8_E4M3): %s\n", same ? "bit for bit" : "DIFFERS");
  return err < 0.1 && same ? 0 : 1;
}
