// Finds the Fashion-MNIST files in a folder, checks that they belong together, normalizes.
#include <ampgrad/data/fashion_mnist.h>

#include <algorithm>
#include <filesystem>

#include <ampgrad/data/idx.h>

namespace ampgrad::data {

namespace {

// `dir/name` if it exists, else `dir/name.gz`; throws naming both when neither exists.
std::string find_file(const std::string& dir, const std::string& name) {
  const std::filesystem::path plain = std::filesystem::path(dir) / name;
  const std::filesystem::path gz = std::filesystem::path(dir) / (name + ".gz");
  if (std::filesystem::exists(plain)) return plain.string();
  if (std::filesystem::exists(gz)) return gz.string();
  AG_CHECK(false,
           "load_fashion_mnist: neither {} nor {} exists (the Debian package dataset-fashion-mnist installs the "
           "files to {})",
           plain.string(), gz.string(), kFashionMnistDebianDir);
  return {};
}

}  // namespace

Dataset load_fashion_mnist(const std::string& dir, bool train, std::optional<int64_t> limit) {
  AG_CHECK(!limit || *limit >= 0, "load_fashion_mnist: limit must be >= 0, got {}", limit.value_or(0));
  const std::string prefix = train ? "train" : "t10k";
  const std::string images_path = find_file(dir, prefix + "-images-idx3-ubyte");
  const std::string labels_path = find_file(dir, prefix + "-labels-idx1-ubyte");
  const Tensor pixels = read_idx_images(images_path);
  const Tensor labels = read_idx_labels(labels_path);

  AG_CHECK(pixels.size(1) == 28 && pixels.size(2) == 28, "load_fashion_mnist: {}: images are {}x{}, expected 28x28",
           images_path, pixels.size(1), pixels.size(2));
  AG_CHECK(labels.size(0) == pixels.size(0), "load_fashion_mnist: {} has {} labels but {} has {} images", labels_path,
           labels.size(0), images_path, pixels.size(0));
  const int64_t n = std::min(pixels.size(0), limit.value_or(pixels.size(0)));

  Dataset ds;
  ds.labels = labels.narrow(0, 0, n).clone();
  const int64_t* l = ds.labels.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    AG_CHECK(l[i] >= 0 && l[i] <= 9, "load_fashion_mnist: {}: label {} of example {} is outside 0..9", labels_path,
             l[i], i);

  ds.images = empty({n, 1, 28, 28}, kFloat32);
  float table[256];  // every pixel value's normalized float, computed once
  for (int v = 0; v < 256; ++v) table[v] = (static_cast<float>(v) / 255.0f - kFashionMnistMean) / kFashionMnistStd;
  const uint8_t* p = pixels.data_ptr<uint8_t>();
  float* x = ds.images.data_ptr<float>();
  for (int64_t i = 0; i < ds.images.numel(); ++i) x[i] = table[p[i]];
  return ds;
}

}  // namespace ampgrad::data
