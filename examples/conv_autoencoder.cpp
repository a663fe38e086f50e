// examples/conv_autoencoder.cpp: a convolutional autoencoder on Fashion-MNIST. The encoder's
// strided Conv2d layers shrink a 28x28 image to 32 maps of 7x7; the decoder's ConvTranspose2d
// layers (stride 2, output_padding 1) grow them back to 28x28. The loss is the mean squared
// error against the input; on CUDA it trains under float16 autocast with a GradScaler (the
// convolutions and transposed convolutions run in float16, mse_loss in float32). Writes a PNG
// with eight test images (top) above their reconstructions (bottom).
//
//   ./conv_autoencoder [cpu|cuda] [steps] [out.png] [fashion-mnist dir]
//   exits 1 unless the test reconstruction loss fell to under half of its first value
#include <ampgrad/ampgrad.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace ag = ampgrad;
namespace nn = ampgrad::nn;

namespace {

std::shared_ptr<nn::Sequential> autoencoder() {
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Conv2d>(1, 16, 3, nn::Conv2dOptions{.stride = {2, 2}, .padding = {1, 1}}));
  net->push_back(std::make_shared<nn::ReLU>());  // [16, 14, 14]
  net->push_back(std::make_shared<nn::Conv2d>(16, 32, 3, nn::Conv2dOptions{.stride = {2, 2}, .padding = {1, 1}}));
  net->push_back(std::make_shared<nn::ReLU>());  // [32, 7, 7]
  const nn::ConvTranspose2dOptions up{.stride = {2, 2}, .padding = {1, 1}, .output_padding = {1, 1}};
  net->push_back(std::make_shared<nn::ConvTranspose2d>(32, 16, 3, up));
  net->push_back(std::make_shared<nn::ReLU>());  // [16, 14, 14]
  net->push_back(std::make_shared<nn::ConvTranspose2d>(16, 1, 3, up));  // [1, 28, 28]
  return net;
}

// A grayscale 8-bit PNG: signature, IHDR, one zlib-compressed IDAT, IEND.
void write_png(const std::string& path, const std::vector<uint8_t>& gray, uint32_t width, uint32_t height) {
  std::vector<uint8_t> raw;  // each row: filter byte 0, then the pixels
  for (uint32_t y = 0; y < height; ++y) {
    raw.push_back(0);
    raw.insert(raw.end(), gray.begin() + y * width, gray.begin() + (y + 1) * width);
  }
  uLongf zlen = compressBound(static_cast<uLong>(raw.size()));
  std::vector<uint8_t> z(zlen);
  if (compress(z.data(), &zlen, raw.data(), static_cast<uLong>(raw.size())) != Z_OK)
    throw std::runtime_error("zlib compress failed");
  z.resize(zlen);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw std::runtime_error("cannot write " + path);
  auto be32 = [](uint32_t v) {
    return std::vector<uint8_t>{uint8_t(v >> 24), uint8_t(v >> 16), uint8_t(v >> 8), uint8_t(v)};
  };
  auto chunk = [&](const char* type, const std::vector<uint8_t>& data) {
    std::vector<uint8_t> body(type, type + 4);
    body.insert(body.end(), data.begin(), data.end());
    const std::vector<uint8_t> len = be32(static_cast<uint32_t>(data.size()));
    const std::vector<uint8_t> crc = be32(static_cast<uint32_t>(crc32(0, body.data(), static_cast<uInt>(body.size()))));
    std::fwrite(len.data(), 1, 4, f);
    std::fwrite(body.data(), 1, body.size(), f);
    std::fwrite(crc.data(), 1, 4, f);
  };
  const uint8_t sig[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  std::fwrite(sig, 1, sizeof(sig), f);
  std::vector<uint8_t> ihdr = be32(width);
  const std::vector<uint8_t> h = be32(height);
  ihdr.insert(ihdr.end(), h.begin(), h.end());
  ihdr.insert(ihdr.end(), {8, 0, 0, 0, 0});  // 8-bit grayscale, deflate, no filter, no interlace
  chunk("IHDR", ihdr);
  chunk("IDAT", z);
  chunk("IEND", {});
  std::fclose(f);
}

// Normalized [k, 1, 28, 28] images back to 0..255 pixels, laid side by side.
void put_row(std::vector<uint8_t>& canvas, uint32_t width, uint32_t row, const ag::Tensor& images) {
  const std::vector<float> v = images.to(ag::kCPU).to(ag::kFloat32).to_vector<float>();
  const int64_t k = images.size(0);
  for (int64_t i = 0; i < k; ++i)
    for (int64_t y = 0; y < 28; ++y)
      for (int64_t x = 0; x < 28; ++x) {
        const float p = v[static_cast<size_t>((i * 28 + y) * 28 + x)] * ag::data::kFashionMnistStd +
                        ag::data::kFashionMnistMean;
        canvas[(row * 28 + y) * width + i * 28 + x] = static_cast<uint8_t>(std::clamp(p, 0.0f, 1.0f) * 255.0f + 0.5f);
      }
}

}  // namespace

int main(int argc, char** argv) {
  const bool cuda = argc > 1 && std::strcmp(argv[1], "cuda") == 0;
  if (cuda && !ag::cuda::is_available()) {
    std::printf("conv_autoencoder: no CUDA device here\n");
    return 0;
  }
  const int steps = argc > 2 ? std::atoi(argv[2]) : (cuda ? 600 : 60);
  const std::string png = argc > 3 ? argv[3] : "conv_autoencoder.png";
  const std::string dir = argc > 4 ? argv[4] : ag::data::kFashionMnistDebianDir;
  const ag::Device dev = cuda ? ag::Device(ag::kCUDA) : ag::Device(ag::kCPU);
  const ag::data::Dataset train = ag::data::load_fashion_mnist(dir, true, 8192);
  const ag::data::Dataset test = ag::data::load_fashion_mnist(dir, false, 256);
  const ag::Tensor test_x = test.images.to(dev);

  ag::manual_seed(0);
  auto net = autoencoder();
  net->to(dev);
  ag::optim::Adam opt(net->parameters(), ag::optim::AdamOptions(2e-3));
  // float16 on CUDA, scaled; bfloat16 on the CPU, unscaled (its range is float32's).
  const ag::DType amp_dtype = cuda ? ag::kFloat16 : ag::kBFloat16;
  ag::amp::GradScaler scaler(ag::amp::GradScalerOptions().enabled(cuda));
  auto test_loss = [&] {
    ag::NoGradGuard no_grad;
    ag::amp::AutocastGuard autocast(dev.type, amp_dtype);
    return ag::mse_loss((*net)(test_x), test_x).item<double>();
  };

  const double first = test_loss();
  std::printf("test reconstruction loss before training %.4f\n", first);
  const ag::data::DataLoader loader(train, ag::data::DataLoaderOptions(64).shuffle(true).seed(1).drop_last(true).device(dev));
  for (int step = 0; step < steps; ++step) {
    const int64_t per_epoch = loader.num_batches();
    const ag::Tensor x = loader.epoch(step / per_epoch).batch(step % per_epoch).images;
    opt.zero_grad();
    ag::Tensor loss;
    {
      ag::amp::AutocastGuard autocast(dev.type, amp_dtype);
      loss = ag::mse_loss((*net)(x), x);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    if (step % std::max(1, steps / 5) == 0) std::printf("step %4d  train loss %.4f\n", step, loss.item<double>());
  }
  const double last = test_loss();

  // Eight test images above their reconstructions.
  const uint32_t k = 8, width = 28 * k, height = 56;
  std::vector<uint8_t> canvas(width * height, 0);
  const ag::Tensor shown = test_x.narrow(0, 0, k);
  ag::Tensor recon;
  {
    ag::NoGradGuard no_grad;
    recon = (*net)(shown);
  }
  put_row(canvas, width, 0, shown);
  put_row(canvas, width, 1, recon);
  write_png(png, canvas, width, height);
  std::printf("wrote %s (inputs above reconstructions)\n", png.c_str());
  const bool ok = last < 0.5 * first;
  std::printf("test reconstruction loss %.4f -> %.4f: %s\n", first, last, ok ? "fell" : "did NOT fall enough");
  return ok ? 0 : 1;
}
