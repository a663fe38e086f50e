// Tests of data/: the IDX reader on good and corrupt files, Fashion-MNIST loading, DataLoader.
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include "common.h"

namespace fs = std::filesystem;
using ag::data::DataLoader;
using ag::data::DataLoaderOptions;

namespace {

// A folder of its own for this process, removed at exit.
const fs::path& tmp_dir() {
  struct Dir {
    fs::path path = fs::temp_directory_path() / fmt::format("ampgrad_test_data_{}", ::getpid());
    Dir() { fs::create_directories(path); }
    ~Dir() { fs::remove_all(path); }
  };
  static Dir dir;
  return dir.path;
}

std::string tmp_path(const std::string& name) { return (tmp_dir() / name).string(); }

void put_be32(std::vector<uint8_t>& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}

// An IDX file: magic, big-endian dims, data.
std::vector<uint8_t> idx_bytes(uint32_t magic, const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out;
  put_be32(out, magic);
  for (uint32_t d : dims) put_be32(out, d);
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

std::vector<uint8_t> pattern(size_t n, uint8_t mul = 37) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * mul + 11);
  return v;
}

std::string write_plain(const std::string& name, const std::vector<uint8_t>& bytes) {
  const std::string path = tmp_path(name);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return path;
}

std::string write_gz(const std::string& name, const std::vector<uint8_t>& bytes) {
  const std::string path = tmp_path(name);
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
  REQUIRE(gzclose(f) == Z_OK);
  return path;
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<int64_t> widen(const std::vector<uint8_t>& v) { return {v.begin(), v.end()}; }

}  // namespace

TEST_CASE("IDX images and labels are read from plain and gzipped files", "[data][idx]") {
  const std::vector<uint8_t> pixels = pattern(3 * 2 * 4);
  const std::vector<uint8_t> labels = {7, 0, 255};
  const auto images_file = idx_bytes(0x803, {3, 2, 4}, pixels);
  const auto labels_file = idx_bytes(0x801, {3}, labels);
  for (bool gz : {false, true}) {
    DYNAMIC_SECTION((gz ? "gzipped" : "plain")) {
      const auto write = gz ? write_gz : write_plain;
      const ag::Tensor img = ag::data::read_idx_images(write(gz ? "img.gz" : "img", images_file));
      CHECK(img.dtype() == ag::kUInt8);
      CHECK(img.is_cpu());
      CHECK(img.shape() == ag::Shape{3, 2, 4});
      CHECK(img.to_vector<uint8_t>() == pixels);
      const ag::Tensor lab = ag::data::read_idx_labels(write(gz ? "lab.gz" : "lab", labels_file));
      CHECK(lab.dtype() == ag::kInt64);
      CHECK(lab.shape() == ag::Shape{3});
      CHECK(lab.to_vector<int64_t>() == widen(labels));
    }
  }
  SECTION("an empty set is valid") {
    CHECK(ag::data::read_idx_images(write_plain("none", idx_bytes(0x803, {0, 28, 28}, {}))).shape() ==
          ag::Shape{0, 28, 28});
  }
}

TEST_CASE("IDX reader errors name the file and the fault", "[data][idx][errors]") {
  const auto good = idx_bytes(0x803, {3, 2, 4}, pattern(24));
  SECTION("missing file") {
    const std::string path = tmp_path("no-such-file");
    const std::string msg = error_message([&] { ag::data::read_idx_images(path); });
    CHECK_THAT(msg, Catch::Contains(path + ": cannot open: No such file or directory"));
  }
  SECTION("truncated magic") {
    const std::string path = write_plain("short", {0, 0});
    CHECK(error_message([&] { ag::data::read_idx_images(path); }) ==
          path + ": truncated: the file has 2 bytes, too few for the 4-byte magic number");
  }
  SECTION("truncated header") {
    const std::string path = write_plain("hdr", std::vector<uint8_t>(good.begin(), good.begin() + 10));
    CHECK(error_message([&] { ag::data::read_idx_images(path); }) ==
          path + ": truncated: the file has 10 bytes, too few for the 16-byte header of an IDX images file");
  }
  SECTION("truncated data") {
    const std::string path = write_plain("data", std::vector<uint8_t>(good.begin(), good.begin() + 16 + 10));
    CHECK(error_message([&] { ag::data::read_idx_images(path); }) ==
          path + ": truncated: header says 3 images of 2x4 (24 bytes) but only 10 bytes follow");
    const std::string labels = write_plain("labels", idx_bytes(0x801, {3}, {1}));
    CHECK(error_message([&] { ag::data::read_idx_labels(labels); }) ==
          labels + ": truncated: header says 3 labels (3 bytes) but only 1 bytes follow");
  }
  SECTION("truncated gzip data") {
    const std::vector<uint8_t> gz = read_bytes(write_gz("full.gz", idx_bytes(0x803, {40, 28, 28}, pattern(40 * 784))));
    const std::string path = write_plain("cut.gz", std::vector<uint8_t>(gz.begin(), gz.begin() + gz.size() / 2));
    const std::string msg = error_message([&] { ag::data::read_idx_images(path); });
    CHECK_THAT(msg, Catch::StartsWith(path + ": truncated: header says 40 images of 28x28 (31360 bytes) but only ") &&
                        Catch::EndsWith(" bytes follow (the gzip stream ends early: unexpected end of file)"));
    const std::string trailer = write_plain("trailer.gz", std::vector<uint8_t>(gz.begin(), gz.end() - 8));
    CHECK(error_message([&] { ag::data::read_idx_images(trailer); }) ==
          trailer + ": truncated: the data is all there but its gzip trailer is missing (the gzip stream ends early: "
                    "unexpected end of file)");
  }
  SECTION("corrupt gzip data") {
    std::vector<uint8_t> gz = read_bytes(write_gz("crc.gz", good));
    gz[gz.size() - 8] ^= 0xff;  // the CRC-32 in the trailer
    const std::string path = write_plain("crc_bad.gz", gz);
    CHECK_THAT(error_message([&] { ag::data::read_idx_images(path); }),
               Catch::StartsWith(path + ": corrupt gzip data") && Catch::Contains("incorrect data check"));
  }
  SECTION("extra bytes after the data") {
    auto bytes = good;
    bytes.push_back(1);
    bytes.push_back(2);
    const std::string path = write_plain("extra", bytes);
    CHECK(error_message([&] { ag::data::read_idx_images(path); }) ==
          path + ": malformed: header says 3 images of 2x4 (24 bytes) but 26 bytes follow (2 too many)");
  }
  SECTION("bad magic") {
    const std::string path = write_plain("magic", idx_bytes(0x802, {3, 2, 4}, pattern(24)));
    CHECK(error_message([&] { ag::data::read_idx_images(path); }) ==
          path + ": bad magic number 0x00000802 (expected 0x00000803 for images)");
    const std::string labels = write_plain("labels", idx_bytes(0x801, {3}, {1, 2, 3}));
    CHECK(error_message([&] { ag::data::read_idx_images(labels); }) ==
          labels + ": bad magic number 0x00000801 (expected 0x00000803 for images); this is a labels file");
    const std::string images = write_plain("images", good);
    CHECK(error_message([&] { ag::data::read_idx_labels(images); }) ==
          images + ": bad magic number 0x00000803 (expected 0x00000801 for labels); this is an images file");
  }
  SECTION("wrong dims") {
    const std::string zero = write_plain("zero", idx_bytes(0x803, {3, 0, 4}, {}));
    CHECK(error_message([&] { ag::data::read_idx_images(zero); }) ==
          zero + ": malformed: header says 3 images of 0x4; rows and columns must be positive");
    const std::string huge = write_plain("huge", idx_bytes(0x803, {0xffffffff, 0xffffffff, 0xffffffff}, pattern(8)));
    CHECK(error_message([&] { ag::data::read_idx_images(huge); }) ==
          huge + ": truncated: header says 4294967295 images of 4294967295x4294967295 (over 2^64 bytes) but only 8 "
                 "bytes follow");
  }
}

namespace {

// A train set in `dir`: images gzipped, labels plain, n images of rows x cols.
std::string write_set(const std::string& dir, uint32_t n, const std::vector<uint8_t>& labels, uint32_t rows = 28,
                      uint32_t cols = 28) {
  const fs::path d = tmp_dir() / dir;
  fs::create_directories(d);
  write_gz(dir + "/train-images-idx3-ubyte.gz", idx_bytes(0x803, {n, rows, cols}, pattern(n * rows * cols)));
  write_plain(dir + "/train-labels-idx1-ubyte", idx_bytes(0x801, {static_cast<uint32_t>(labels.size())}, labels));
  return d.string();
}

}  // namespace

TEST_CASE("load_fashion_mnist finds, checks and normalizes the files", "[data][fashion_mnist]") {
  const std::vector<uint8_t> labels = {3, 1, 4, 1, 5};
  const std::string dir = write_set("set", 5, labels);
  SECTION("shapes, labels and the normalization") {
    const ag::data::Dataset ds = ag::data::load_fashion_mnist(dir, true);
    CHECK(ds.size() == 5);
    CHECK(ds.images.shape() == ag::Shape{5, 1, 28, 28});
    CHECK(ds.images.dtype() == ag::kFloat32);
    CHECK(ds.labels.shape() == ag::Shape{5});
    CHECK(ds.labels.to_vector<int64_t>() == widen(labels));
    const std::vector<uint8_t> p = pattern(5 * 784);
    std::vector<double> ref(p.size());
    for (size_t i = 0; i < p.size(); ++i) ref[i] = (p[i] / 255.0 - 0.2860) / 0.3530;
    check_close(ds.images, ref, 1e-6, 1e-6);
  }
  SECTION("limit") {
    const ag::data::Dataset ds = ag::data::load_fashion_mnist(dir, true, 3);
    CHECK(ds.images.shape() == ag::Shape{3, 1, 28, 28});
    CHECK(ds.labels.to_vector<int64_t>() == std::vector<int64_t>{3, 1, 4});
    CHECK(ag::data::load_fashion_mnist(dir, true, 100).size() == 5);
    CHECK(ag::data::load_fashion_mnist(dir, true, 0).size() == 0);
    CHECK_THROWS_WITH_SUBSTR(ag::data::load_fashion_mnist(dir, true, -1), "limit must be >= 0, got -1");
  }
  SECTION("missing files name both candidates and the package") {
    const std::string msg = error_message([&] { ag::data::load_fashion_mnist(dir, false); });
    CHECK_THAT(msg, Catch::Contains("t10k-images-idx3-ubyte nor ") &&
                        Catch::Contains("t10k-images-idx3-ubyte.gz exists") &&
                        Catch::Contains("dataset-fashion-mnist"));
  }
  SECTION("labels count differs from images count") {
    const std::string bad = write_set("count", 5, {1, 2, 3, 4});
    CHECK(error_message([&] { ag::data::load_fashion_mnist(bad, true); }) ==
          fmt::format("load_fashion_mnist: {0}/train-labels-idx1-ubyte has 4 labels but "
                      "{0}/train-images-idx3-ubyte.gz has 5 images",
                      bad));
  }
  SECTION("images that are not 28x28") {
    const std::string bad = write_set("dims", 2, {1, 2}, 32, 32);
    CHECK(error_message([&] { ag::data::load_fashion_mnist(bad, true); }) ==
          fmt::format("load_fashion_mnist: {}/train-images-idx3-ubyte.gz: images are 32x32, expected 28x28", bad));
  }
  SECTION("a label outside 0..9") {
    const std::string bad = write_set("label", 3, {1, 10, 2});
    CHECK(error_message([&] { ag::data::load_fashion_mnist(bad, true); }) ==
          fmt::format("load_fashion_mnist: {}/train-labels-idx1-ubyte: label 10 of example 1 is outside 0..9", bad));
  }
}

namespace {

// n examples whose image i is filled with i and whose label is i, to follow them through batches.
ag::data::Dataset numbered(int64_t n) {
  std::vector<float> px;
  std::vector<int64_t> lab;
  for (int64_t i = 0; i < n; ++i) {
    for (int k = 0; k < 6; ++k) px.push_back(static_cast<float>(i));
    lab.push_back(i);
  }
  return {ag::tensor(px, {n, 1, 2, 3}), ag::tensor(lab)};
}

// Labels of every batch of one epoch, in order, checking that images travel with their labels.
std::vector<int64_t> visit(const DataLoader& loader, int64_t epoch, std::vector<int64_t>* sizes = nullptr) {
  std::vector<int64_t> seen;
  for (const ag::data::Batch& b : loader.epoch(epoch)) {
    REQUIRE(b.images.dim() == 4);
    REQUIRE(b.images.size(0) == b.labels.size(0));
    CHECK(b.images.shape() == ag::Shape{b.labels.size(0), 1, 2, 3});
    const auto px = b.images.to_vector<float>();
    const auto lab = b.labels.to_vector<int64_t>();
    for (size_t i = 0; i < lab.size(); ++i) CHECK(px[i * 6 + 5] == static_cast<float>(lab[i]));
    seen.insert(seen.end(), lab.begin(), lab.end());
    if (sizes) sizes->push_back(b.labels.size(0));
  }
  return seen;
}

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t{0});
  return v;
}

}  // namespace

TEST_CASE("DataLoader batches in order without shuffle", "[data][loader]") {
  std::vector<int64_t> sizes;
  SECTION("keeps the short last batch") {
    const DataLoader loader(numbered(10), DataLoaderOptions(4));
    CHECK(loader.num_batches() == 3);
    CHECK(visit(loader, 0, &sizes) == iota(10));
    CHECK(sizes == std::vector<int64_t>{4, 4, 2});
    CHECK(loader.epoch(0).batch(2).labels.to_vector<int64_t>() == std::vector<int64_t>{8, 9});
  }
  SECTION("drop_last") {
    const DataLoader loader(numbered(10), DataLoaderOptions(4).drop_last(true));
    CHECK(loader.num_batches() == 2);
    CHECK(visit(loader, 0, &sizes) == iota(8));
    CHECK(sizes == std::vector<int64_t>{4, 4});
    CHECK(DataLoader(numbered(8), DataLoaderOptions(4).drop_last(true)).num_batches() == 2);
    CHECK(DataLoader(numbered(3), DataLoaderOptions(4).drop_last(true)).num_batches() == 0);
  }
  SECTION("labels are int64 and images float32 on the CPU by default") {
    const ag::data::Batch b = DataLoader(numbered(5), DataLoaderOptions(2)).epoch(0).batch(0);
    CHECK(b.images.dtype() == ag::kFloat32);
    CHECK(b.labels.dtype() == ag::kInt64);
    CHECK(b.images.is_cpu());
  }
}

TEST_CASE("DataLoader shuffles deterministically per seed and epoch", "[data][loader]") {
  const int64_t n = 103;
  const DataLoader a(numbered(n), DataLoaderOptions(16).shuffle(true).seed(42));
  const DataLoader b(numbered(n), DataLoaderOptions(16).shuffle(true).seed(42));
  const DataLoader c(numbered(n), DataLoaderOptions(16).shuffle(true).seed(43));

  std::set<std::vector<int64_t>> orders;
  for (int64_t epoch = 0; epoch < 5; ++epoch) {
    std::vector<int64_t> sizes;
    const std::vector<int64_t> seen = visit(a, epoch, &sizes);
    CHECK(seen == a.permutation(epoch));
    CHECK(seen == visit(b, epoch));   // same seed, same epoch: same order
    CHECK(seen == visit(a, epoch));   // and again: epochs do not depend on what ran before
    CHECK(seen != visit(c, epoch));   // another seed
    CHECK(sizes == std::vector<int64_t>{16, 16, 16, 16, 16, 16, 7});
    std::vector<int64_t> sorted = seen;
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted == iota(n));  // every example exactly once
    CHECK(seen != iota(n));
    orders.insert(seen);
  }
  CHECK(orders.size() == 5);  // each epoch its own order

  SECTION("drop_last leaves out the tail of the permutation, a different one each epoch") {
    const DataLoader d(numbered(n), DataLoaderOptions(16).shuffle(true).seed(42).drop_last(true));
    std::set<int64_t> dropped_first_epoch;
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      const std::vector<int64_t> seen = visit(d, epoch);
      CHECK(seen.size() == 96);
      CHECK(std::set<int64_t>(seen.begin(), seen.end()).size() == 96);
      const std::vector<int64_t> order = d.permutation(epoch);
      CHECK(seen == std::vector<int64_t>(order.begin(), order.begin() + 96));
    }
    CHECK(d.permutation(0) != d.permutation(1));
  }
}

TEST_CASE("DataLoader shuffle is roughly uniform", "[data][loader]") {
  // Position of example 0 over many epochs: each of the 4 places about a quarter of the time.
  const DataLoader loader(numbered(4), DataLoaderOptions(4).shuffle(true).seed(7));
  std::vector<int> where(4, 0);
  for (int64_t epoch = 0; epoch < 4000; ++epoch) {
    const std::vector<int64_t> order = loader.permutation(epoch);
    ++where[std::find(order.begin(), order.end(), 0) - order.begin()];
  }
  for (int count : where) CHECK(std::abs(count - 1000) < 120);  // > 4 standard deviations
}

TEST_CASE("DataLoader errors", "[data][loader][errors]") {
  CHECK_THROWS_WITH_SUBSTR(DataLoader(numbered(4), DataLoaderOptions(0)), "batch_size must be positive, got 0");
  ag::data::Dataset bad = numbered(4);
  bad.labels = ag::tensor(std::vector<int64_t>{0, 1, 2});
  CHECK_THROWS_WITH_SUBSTR(DataLoader(bad, DataLoaderOptions(2)), "must share their first dimension");
  CHECK_THROWS_WITH_SUBSTR(DataLoader(numbered(4), DataLoaderOptions(2)).epoch(0).batch(2),
                           "batch 2 is out of range (the epoch has 2 batches)");
}

TEST_CASE("DataLoader moves batches to a CUDA device", "[data][loader][cuda]") {
  if (skip_without_cuda()) return;
  const DataLoader loader(numbered(10), DataLoaderOptions(4).shuffle(true).device(ag::kCUDA));
  const ag::data::Batch b = loader.epoch(0).batch(1);
  CHECK(b.images.is_cuda());
  CHECK(b.labels.is_cuda());
  const std::vector<int64_t> order = loader.permutation(0);
  CHECK(b.labels.to_vector<int64_t>() == std::vector<int64_t>(order.begin() + 4, order.begin() + 8));
}

TEST_CASE("the real Fashion-MNIST files, when installed", "[data][fashion_mnist][real]") {
  const std::string dir = ag::data::kFashionMnistDebianDir;
  if (!fs::exists(dir)) {
    fmt::print("[the real Fashion-MNIST files] skipped: {} not found (apt-get install dataset-fashion-mnist)\n", dir);
    return;
  }
  SECTION("the test set") {
    const ag::data::Dataset ds = ag::data::load_fashion_mnist(dir, false);
    CHECK(ds.size() == 10000);
    CHECK(ds.images.shape() == ag::Shape{10000, 1, 28, 28});
    std::vector<int> per_class(10, 0);
    for (int64_t l : ds.labels.to_vector<int64_t>()) {
      REQUIRE(l >= 0);
      REQUIRE(l <= 9);
      ++per_class[l];
    }
    CHECK(per_class == std::vector<int>(10, 1000));  // Fashion-MNIST's test set is balanced
    const ag::data::Batch b = DataLoader(ds, DataLoaderOptions(64).shuffle(true)).epoch(0).batch(0);
    CHECK(b.images.shape() == ag::Shape{64, 1, 28, 28});
  }
  SECTION("the training set is standardized by the documented mean and std") {
    const ag::data::Dataset ds = ag::data::load_fashion_mnist(dir, true);
    CHECK(ds.size() == 60000);
    const std::vector<float> x = ds.images.to_vector<float>();
    double sum = 0, sq = 0;
    for (float v : x) {
      sum += v;
      sq += static_cast<double>(v) * v;
    }
    const double mean = sum / x.size(), std = std::sqrt(sq / x.size() - mean * mean);
    CHECK(std::abs(mean) < 1e-3);
    CHECK(std::abs(std - 1) < 1e-3);
  }
}
