// Tests of nn/safetensors and nn/checkpoint: bit-exact round trips, the file layout, atomic
// writes, corrupt files, checkpoints of a model, an optimizer and a scaler, load_into.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "common.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using ag::nn::load_safetensors;
using ag::nn::save_safetensors;

namespace {

// A folder of its own for this process, removed at exit.
const fs::path& tmp_dir() {
  struct Dir {
    fs::path path = fs::temp_directory_path() / fmt::format("ampgrad_test_checkpoint_{}", ::getpid());
    Dir() { fs::create_directories(path); }
    ~Dir() { fs::remove_all(path); }
  };
  static Dir dir;
  return dir.path;
}

std::string tmp_path(const std::string& name) { return (tmp_dir() / name).string(); }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

// A safetensors file from a header text (padded to 8 bytes here) and raw data.
std::string safetensors_bytes(std::string header, const std::string& data) {
  header.resize((header.size() + 7) / 8 * 8, ' ');
  return le64(header.size()) + header + data;
}

// The bytes of a tensor as stored: contiguous, on the CPU.
std::string bytes_of(const ag::Tensor& t) {
  const ag::Tensor c = t.cpu().contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

// A tensor of `dtype` whose bytes are random: every bit pattern (NaN payloads, -0,
// subnormals, infinities) must come back unchanged. Booleans get random 0/1 bytes.
ag::Tensor random_bits(const ag::Shape& shape, ag::DType dtype, std::mt19937& rng) {
  ag::Tensor t = ag::empty(shape, dtype);
  auto* p = static_cast<uint8_t*>(t.data_ptr());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<uint8_t>(dtype == ag::kBool ? rng() % 2 : rng());
  return t;
}

const std::vector<ag::DType> kAllDTypes = {ag::kFloat32, ag::kFloat16, ag::kBFloat16, ag::kFloat64,
                                           ag::kInt64,   ag::kInt32,   ag::kBool,     ag::kUInt8};

std::string short_name(ag::DType d) { return std::string(ag::traits(d).short_name); }

// Tensors of every dtype, contiguous and not: transposed, strided, expanded, 0-dim, empty.
std::map<std::string, ag::Tensor> every_kind_of_tensor() {
  std::mt19937 rng(1234);
  std::map<std::string, ag::Tensor> out;
  for (ag::DType d : kAllDTypes) {
    const std::string n = short_name(d);
    out[n + ".plain"] = random_bits({3, 5}, d, rng);
    out[n + ".transposed"] = random_bits({4, 6}, d, rng).t();
    out[n + ".strided"] = random_bits({7, 4}, d, rng).slice(0, 1, 7, 2).slice(1, 0, 4, 3);
    out[n + ".expanded"] = random_bits({3, 1}, d, rng).expand({3, 4});
    out[n + ".scalar"] = random_bits({}, d, rng);
    out[n + ".empty"] = random_bits({0, 4}, d, rng);
  }
  return out;
}

}  // namespace

TEST_CASE("safetensors round trip is bit-exact for every dtype and layout", "[checkpoint][safetensors]") {
  const auto tensors = every_kind_of_tensor();
  REQUIRE_FALSE(tensors.at("f32.transposed").is_contiguous());
  REQUIRE_FALSE(tensors.at("bf16.strided").is_contiguous());
  const std::string path = tmp_path("all.safetensors");
  save_safetensors(path, tensors);
  const ag::nn::SafetensorsFile file = load_safetensors(path);
  CHECK(file.metadata.empty());
  REQUIRE(file.tensors.size() == tensors.size());
  for (const auto& [name, t] : tensors) {
    INFO(name);
    REQUIRE(file.tensors.count(name));
    const ag::Tensor& got = file.tensors.at(name);
    CHECK(got.dtype() == t.dtype());
    CHECK(got.shape() == t.shape());
    CHECK(got.is_cpu());
    CHECK(got.is_contiguous());
    CHECK(bytes_of(got) == bytes_of(t));
  }
}

TEST_CASE("safetensors saves tensors that require grad", "[checkpoint][safetensors]") {
  ag::Tensor w = ag::randn({2, 3}).requires_grad_();
  const ag::Tensor y = w * 2;  // has a grad_fn
  const std::string path = tmp_path("grad.safetensors");
  save_safetensors(path, {{"w", w}, {"y", y}});
  const auto file = load_safetensors(path);
  CHECK(bytes_of(file.tensors.at("w")) == bytes_of(w.detach()));
  CHECK(bytes_of(file.tensors.at("y")) == bytes_of(y.detach()));
  CHECK_FALSE(file.tensors.at("w").requires_grad());
}

TEST_CASE("safetensors saves CUDA tensors and loads them on the CPU", "[checkpoint][safetensors][cuda]") {
  if (skip_without_cuda()) return;
  const std::string path = tmp_path("cuda.safetensors");
  const ag::Tensor c = ag::randn({4, 5}, ag::kFloat16).cuda().t();
  save_safetensors(path, {{"c", c}});
  const auto back = load_safetensors(path);
  CHECK(back.tensors.at("c").is_cpu());
  CHECK(bytes_of(back.tensors.at("c")) == bytes_of(c));
}

TEST_CASE("safetensors metadata round trip", "[checkpoint][safetensors]") {
  const std::map<std::string, std::string> meta = {
      {"epoch", "12"}, {"empty", ""}, {"quote\"and\\slash", "line\nbreak"}, {"unicode", "größe ✓"}};
  const std::string path = tmp_path("meta.safetensors");
  save_safetensors(path, {{"x", ag::ones({2})}}, meta);
  const auto file = load_safetensors(path);
  CHECK(file.metadata == meta);
  save_safetensors(path, {}, meta);  // metadata without tensors
  CHECK(load_safetensors(path).metadata == meta);
  CHECK(load_safetensors(path).tensors.empty());
}

TEST_CASE("the file is valid safetensors", "[checkpoint][safetensors]") {
  SECTION("exact bytes of a one-tensor file") {
    const std::string path = tmp_path("one.safetensors");
    save_safetensors(path, {{"a", ag::tensor({1.f, -2.f})}});
    const float data[2] = {1.f, -2.f};
    const std::string expected = safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                                                   std::string(reinterpret_cast<const char*>(data), 8));
    CHECK(read_file(path) == expected);
  }
  SECTION("header fields, alignment and tiling") {
    const auto tensors = every_kind_of_tensor();
    const std::string path = tmp_path("layout.safetensors");
    save_safetensors(path, tensors, {{"note", "hi"}});
    const std::string bytes = read_file(path);
    REQUIRE(bytes.size() >= 8);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[i]);
    CHECK(n % 8 == 0);  // the data starts 8-aligned
    REQUIRE(8 + n <= bytes.size());
    const std::string text = bytes.substr(8, n);
    CHECK(text.front() == '{');
    CHECK(text.find_last_not_of(' ') == text.rfind('}'));  // only spaces pad the JSON
    const json header = json::parse(text);
    CHECK(header.at("__metadata__") == json({{"note", "hi"}}));

    const std::map<std::string, std::string> codes = {{"f32", "F32"}, {"f16", "F16"}, {"bf16", "BF16"},
                                                      {"f64", "F64"}, {"i64", "I64"}, {"i32", "I32"},
                                                      {"bool", "BOOL"}, {"u8", "U8"}};
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    for (const auto& [name, t] : tensors) {
      INFO(name);
      const json& e = header.at(name);
      CHECK(e.size() == 3);
      CHECK(e.at("dtype") == codes.at(short_name(t.dtype())));
      CHECK(e.at("shape").get<std::vector<int64_t>>() == t.shape());
      const auto off = e.at("data_offsets").get<std::vector<uint64_t>>();
      REQUIRE(off.size() == 2);
      CHECK(off[1] - off[0] == t.nbytes());
      CHECK(off[0] % t.element_size() == 0);  // every tensor aligned to its item size
      CHECK(bytes.substr(8 + n + off[0], off[1] - off[0]) == bytes_of(t));
      ranges.emplace_back(off[0], off[1]);
    }
    CHECK(header.size() == tensors.size() + 1);
    std::sort(ranges.begin(), ranges.end());
    uint64_t at = 0;
    for (const auto& [b, e] : ranges) {
      CHECK(b == at);  // no gaps, no overlaps
      at = e;
    }
    CHECK(8 + n + at == bytes.size());  // nothing after the last tensor
  }
  SECTION("reads files laid out by another writer") {
    // Metadata last, fields in another order, spaces, data not sorted by alignment.
    const int64_t i64 = -5;
    const uint16_t h = 0x3c00;  // 1.0 in float16
    const std::string data = std::string(reinterpret_cast<const char*>(&h), 2) +
                             std::string(reinterpret_cast<const char*>(&i64), 8);
    const std::string path = tmp_path("other.safetensors");
    write_file(path, safetensors_bytes(R"({ "b": {"data_offsets": [2, 10], "shape": [1], "dtype": "I64"},
                                            "a": {"shape": [], "dtype": "F16", "data_offsets": [0, 2]},
                                            "__metadata__": {"format": "pt"} })",
                                       data));
    const auto file = load_safetensors(path);
    CHECK(file.tensors.at("a").item<float>() == 1.0f);
    CHECK(file.tensors.at("a").dim() == 0);
    CHECK(file.tensors.at("b").to_vector<int64_t>() == std::vector<int64_t>{-5});
    CHECK(file.metadata.at("format") == "pt");
  }
}

TEST_CASE("safetensors writes atomically", "[checkpoint][safetensors]") {
  const std::string path = tmp_path("atomic.safetensors");
  save_safetensors(path, {{"x", ag::ones({3})}});
  CHECK(fs::exists(path));
  CHECK_FALSE(fs::exists(path + ".tmp"));
  save_safetensors(path, {{"y", ag::zeros({2, 2})}});  // replaces the file
  CHECK_FALSE(fs::exists(path + ".tmp"));
  const auto file = load_safetensors(path);
  CHECK(file.tensors.size() == 1);
  CHECK(file.tensors.count("y"));

  SECTION("a failed write leaves the old file as it was") {
    const std::string before = read_file(path);
    fs::create_directory(path + ".tmp");  // the temporary file cannot be created
    CHECK_THROWS_WITH(save_safetensors(path, {{"z", ag::ones({5})}}),
                      Catch::Contains("cannot create " + path + ".tmp"));
    CHECK(read_file(path) == before);
    fs::remove(path + ".tmp");
  }
  SECTION("into a folder that does not exist") {
    const std::string missing = tmp_path("no/such/dir/x.safetensors");
    CHECK_THROWS_WITH(save_safetensors(missing, {{"x", ag::ones({1})}}),
                      Catch::Contains(missing + ".tmp") && Catch::Contains("No such file or directory"));
  }
  SECTION("bad names") {
    CHECK_THROWS_WITH_SUBSTR(save_safetensors(path, {{"__metadata__", ag::ones({1})}}), "'__metadata__' is reserved");
    CHECK_THROWS_WITH_SUBSTR(save_safetensors(path, {{"", ag::ones({1})}}), "a tensor has an empty name");
    CHECK_THROWS_WITH_SUBSTR(save_safetensors(path, {{"u", ag::Tensor()}}), "tensor 'u' is undefined");
    CHECK_FALSE(fs::exists(path + ".tmp"));
  }
}

TEST_CASE("corrupt safetensors files give errors naming the file and the tensor", "[checkpoint][safetensors][errors]") {
  const std::string good_path = tmp_path("good.safetensors");
  save_safetensors(good_path, {{"weight", ag::randn({4, 3})}, {"bias", ag::randn({3})}}, {{"k", "v"}});
  const std::string good = read_file(good_path);
  uint64_t n = 0;
  std::memcpy(&n, good.data(), 8);
  const std::string path = tmp_path("bad.safetensors");
  const auto load_error = [&](const std::string& bytes) {
    write_file(path, bytes);
    return error_message([&] { load_safetensors(path); });
  };

  SECTION("truncated at several points") {
    for (size_t cut : {size_t{0}, size_t{5}}) {
      CHECK(load_error(good.substr(0, cut)) ==
            fmt::format("load_safetensors: {}: truncated: the file has {} bytes, too few for the 8-byte header length",
                        path, cut));
    }
    for (size_t cut : {size_t{8}, size_t{8 + n / 2}, size_t{8 + n - 1}}) {
      CHECK(load_error(good.substr(0, cut)) ==
            fmt::format("load_safetensors: {}: header length {} goes beyond the end of the file ({} bytes; truncated "
                        "or not a safetensors file?)",
                        path, n, cut));
    }
    for (size_t cut : {size_t{8 + n}, size_t{8 + n + 12}, good.size() - 1}) {
      INFO(cut);
      CHECK_THAT(load_error(good.substr(0, cut)),
                 Catch::StartsWith(fmt::format("load_safetensors: {}: tensor '", path)) &&
                     Catch::Contains(fmt::format("are out of range: the file holds only {} bytes of data (truncated?)",
                                                 cut - 8 - n)));
    }
  }
  SECTION("bytes after the last tensor") {
    CHECK(load_error(good + "xyz") ==
          fmt::format("load_safetensors: {}: bytes [60, 63) of the data belong to no tensor", path));
  }
  SECTION("garbage header") {
    CHECK_THAT(load_error(safetensors_bytes("this is not json", "")),
               Catch::StartsWith(fmt::format("load_safetensors: {}: invalid JSON header: ", path)));
    CHECK(load_error(safetensors_bytes("[1, 2]", "")) ==
          fmt::format("load_safetensors: {}: the header is JSON but not an object", path));
    CHECK(load_error(std::string("\xff\xff\xff\xff\xff\xff\xff\xff", 8) + "{}") ==
          fmt::format("load_safetensors: {}: header length 18446744073709551615 goes beyond the end of the file (10 "
                      "bytes; truncated or not a safetensors file?)",
                      path));
    CHECK_THAT(load_error(safetensors_bytes(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, )", "1234")),
               Catch::Contains("invalid JSON header"));
  }
  SECTION("unknown dtype") {
    CHECK(load_error(safetensors_bytes(R"({"w": {"dtype": "I16", "shape": [2], "data_offsets": [0, 4]}})", "abcd")) ==
          fmt::format("load_safetensors: {}: tensor 'w': unknown dtype 'I16' (ampgrad reads F32, F16, BF16, F64, I64, "
                      "I32, BOOL, U8, F8_E4M3, F8_E5M2)",
                      path));
    CHECK_THAT(load_error(safetensors_bytes(R"({"w": {"dtype": 3, "shape": [2], "data_offsets": [0, 4]}})", "abcd")),
               Catch::Contains("tensor 'w': 'dtype' must be a string, got 3"));
  }
  SECTION("bad shapes and offsets") {
    const auto entry = [](const std::string& name, const std::string& shape, const std::string& off) {
      return fmt::format(R"("{}": {{"dtype": "F32", "shape": {}, "data_offsets": {}}})", name, shape, off);
    };
    const std::string data(16, 'x');
    CHECK(load_error(safetensors_bytes("{" + entry("w", "[2]", "[0, 4]") + "}", data)) ==
          fmt::format("load_safetensors: {}: tensor 'w': data_offsets [0, 4] hold 4 bytes but F32 [2] needs 8", path));
    CHECK(load_error(safetensors_bytes("{" + entry("w", "[2]", "[8, 24]") + "}", data)) ==
          fmt::format("load_safetensors: {}: tensor 'w': data_offsets [8, 24] hold 16 bytes but F32 [2] needs 8", path));
    CHECK(load_error(safetensors_bytes("{" + entry("w", "[4]", "[8, 24]") + "}", data)) ==
          fmt::format("load_safetensors: {}: tensor 'w': data_offsets [8, 24] are out of range: the file holds only "
                      "16 bytes of data (truncated?)",
                      path));
    CHECK(load_error(safetensors_bytes("{" + entry("a", "[3]", "[0, 12]") + ", " + entry("b", "[2]", "[8, 16]") + "}",
                                       data)) ==
          fmt::format("load_safetensors: {}: tensors 'a' [0, 12] and 'b' [8, 16] overlap", path));
    CHECK(load_error(safetensors_bytes("{" + entry("a", "[1]", "[0, 4]") + ", " + entry("b", "[2]", "[8, 16]") + "}",
                                       data)) ==
          fmt::format("load_safetensors: {}: bytes [4, 8) of the data belong to no tensor (missing data before tensor "
                      "'b')",
                      path));
    CHECK(load_error(safetensors_bytes("{" + entry("w", "[2]", "[8, 0]") + "}", data)) ==
          fmt::format("load_safetensors: {}: tensor 'w': 'data_offsets' must be [begin, end] with 0 <= begin <= end, "
                      "got [8,0]",
                      path));
    CHECK(load_error(safetensors_bytes("{" + entry("w", "[-2]", "[0, 8]") + "}", data)) ==
          fmt::format("load_safetensors: {}: tensor 'w': 'shape' must be an array of non-negative integers, got [-2]",
                      path));
    CHECK(load_error(safetensors_bytes("{" + entry("w", "[4294967296, 4294967296]", "[0, 8]") + "}", data)) ==
          fmt::format("load_safetensors: {}: tensor 'w': shape [4294967296,4294967296] is too large", path));
    CHECK(load_error(safetensors_bytes(R"({"w": {"dtype": "F32", "shape": [2]}})", data)) ==
          fmt::format("load_safetensors: {}: tensor 'w': missing 'data_offsets'", path));
  }
  SECTION("duplicate names, bad metadata, bad booleans") {
    CHECK(load_error(safetensors_bytes(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
                                           "w": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}})",
                                       "ab")) ==
          fmt::format("load_safetensors: {}: the header names tensor 'w' twice", path));
    CHECK(load_error(safetensors_bytes(R"({"__metadata__": {"epoch": 3}})", "")) ==
          fmt::format("load_safetensors: {}: metadata 'epoch' must be a string, got 3", path));
    CHECK(load_error(safetensors_bytes(R"({"m": {"dtype": "BOOL", "shape": [3], "data_offsets": [0, 3]}})",
                                       std::string("\x01\x00\x07", 3))) ==
          fmt::format("load_safetensors: {}: tensor 'm': BOOL element 2 is 7, not 0 or 1", path));
  }
  SECTION("missing file") {
    const std::string missing = tmp_path("missing.safetensors");
    CHECK(error_message([&] { load_safetensors(missing); }) ==
          fmt::format("load_safetensors: cannot open {}: No such file or directory", missing));
  }
  SECTION("a directory") {
    const std::string dir = tmp_path("a_folder");
    fs::create_directory(dir);
    CHECK(error_message([&] { ag::nn::load_checkpoint(dir); }) ==
          fmt::format("load_safetensors: {} is a directory, not a safetensors file (a checkpoint is one file: the "
                      "path given to save_checkpoint)",
                      dir));
  }
}

namespace {

// A tiny model's state: two parameters that require grad.
ag::optim::StateDict model_state() {
  return {{"fc1.weight", ag::randn({4, 3}).requires_grad_()}, {"fc1.bias", ag::randn({4}).requires_grad_()}};
}

std::vector<ag::Tensor> params_of(const ag::optim::StateDict& sd) {
  std::vector<ag::Tensor> out;
  for (const auto& [k, t] : sd) out.push_back(t);
  return out;
}

// One Adam step on loss = sum(p^2) over every parameter.
void adam_step(ag::optim::Adam& opt, const ag::optim::StateDict& model) {
  opt.zero_grad();
  ag::Tensor loss = ag::zeros({});
  for (const auto& [k, p] : model) loss = loss + (p * p).sum();
  loss.backward();
  opt.step();
}

}  // namespace

TEST_CASE("checkpoints hold model, optimizer and scaler sections", "[checkpoint]") {
  ag::manual_seed(3);
  const ag::optim::StateDict model = model_state();
  ag::optim::Adam opt(params_of(model), ag::optim::AdamOptions(0.01));
  adam_step(opt, model);
  ag::amp::GradScaler scaler(ag::amp::GradScalerOptions().init_scale(1024));
  const std::string path = tmp_path("ckpt.safetensors");
  ag::nn::save_checkpoint(path, {{"model", model}, {"optimizer", opt.state_dict()}, {"scaler", scaler.state_dict()},
                                 {"empty", {}}},
                          {{"epoch", "7"}});

  SECTION("names and metadata in the file") {
    const auto file = load_safetensors(path);
    CHECK(file.metadata == std::map<std::string, std::string>{{"epoch", "7"},
                                                              {"format", "ampgrad-checkpoint"},
                                                              {"sections", "empty,model,optimizer,scaler"},
                                                              {"version", "1"}});
    CHECK(file.tensors.count("model/fc1.weight"));
    CHECK(file.tensors.count("optimizer/state.0.exp_avg"));
    CHECK(file.tensors.count("scaler/scale"));
  }
  SECTION("every section comes back, bit-exact") {
    const auto ckpt = ag::nn::load_checkpoint(path);
    REQUIRE(ckpt.size() == 4);
    CHECK(ckpt.at("empty").empty());
    const std::map<std::string, ag::optim::StateDict> saved = {
        {"model", model}, {"optimizer", opt.state_dict()}, {"scaler", scaler.state_dict()}};
    for (const auto& [section, sd] : saved) {
      REQUIRE(ckpt.at(section).size() == sd.size());
      for (const auto& [k, t] : sd) {
        INFO(section << "/" << k);
        REQUIRE(ckpt.at(section).count(k));
        CHECK(ckpt.at(section).at(k).dtype() == t.dtype());
        CHECK(bytes_of(ckpt.at(section).at(k)) == bytes_of(t.detach()));
      }
    }
    CHECK(ckpt.at("scaler").at("scale").item<double>() == 1024);
  }
  SECTION("training resumed from the checkpoint matches training that went on") {
    const auto ckpt = ag::nn::load_checkpoint(path);
    ag::optim::StateDict resumed = model_state();  // other values
    ag::nn::load_into(resumed, ckpt.at("model"), "model");
    ag::optim::Adam opt2(params_of(resumed), ag::optim::AdamOptions(0.01));
    opt2.load_state_dict(ckpt.at("optimizer"));
    ag::amp::GradScaler scaler2;
    scaler2.load_state_dict(ckpt.at("scaler"));
    CHECK(scaler2.get_scale() == 1024);
    adam_step(opt, model);
    adam_step(opt2, resumed);
    for (const auto& [k, t] : model) CHECK(bytes_of(resumed.at(k).detach()) == bytes_of(t.detach()));
  }
  SECTION("reserved names and files that are not checkpoints") {
    CHECK_THROWS_WITH_SUBSTR(ag::nn::save_checkpoint(path, {{"model", model}}, {{"format", "x"}}),
                             "metadata key 'format' is reserved");
    CHECK_THROWS_WITH_SUBSTR(ag::nn::save_checkpoint(path, {{"a/b", model}}),
                             "section name 'a/b' must be non-empty and contain no '/' or ','");
    const std::string plain = tmp_path("plain.safetensors");
    save_safetensors(plain, {{"w", ag::ones({1})}});
    CHECK(error_message([&] { ag::nn::load_checkpoint(plain); }) ==
          fmt::format("load_checkpoint: {}: not an ampgrad checkpoint (metadata 'format' is (missing), expected "
                      "'ampgrad-checkpoint')",
                      plain));
    save_safetensors(plain, {{"w", ag::ones({1})}}, {{"format", "ampgrad-checkpoint"}, {"version", "2"}});
    CHECK(error_message([&] { ag::nn::load_checkpoint(plain); }) ==
          fmt::format("load_checkpoint: {}: checkpoint version '2' is not supported (this build reads version '1')",
                      plain));
    save_safetensors(plain, {{"w", ag::ones({1})}}, {{"format", "ampgrad-checkpoint"}, {"version", "1"}});
    CHECK(error_message([&] { ag::nn::load_checkpoint(plain); }) ==
          fmt::format("load_checkpoint: {}: tensor 'w' has no '<section>/' prefix", plain));
  }
}

TEST_CASE("load_into checks everything before it copies anything", "[checkpoint][load_into]") {
  ag::manual_seed(5);
  ag::optim::StateDict target = model_state();
  const ag::optim::StateDict before = {{"fc1.weight", target.at("fc1.weight").detach().clone()},
                                       {"fc1.bias", target.at("fc1.bias").detach().clone()}};
  const auto unchanged = [&] {
    for (const auto& [k, t] : before) CHECK(bytes_of(target.at(k).detach()) == bytes_of(t));
  };
  // "fc1.bias" sorts first, so a fault in "fc1.weight" is found after bias was checked:
  // had bias been copied then, the check below would see it.
  SECTION("a missing key") {
    const ag::optim::StateDict source = {{"fc1.bias", ag::randn({4})}};
    CHECK(error_message([&] { ag::nn::load_into(target, source, "model"); }) ==
          "load_into(model): tensor 'fc1.weight' is missing from the source");
    unchanged();
  }
  SECTION("a wrong shape") {
    const ag::optim::StateDict source = {{"fc1.bias", ag::randn({4})}, {"fc1.weight", ag::randn({3, 4})}};
    CHECK(error_message([&] { ag::nn::load_into(target, source, "model"); }) ==
          "load_into(model): tensor 'fc1.weight' has shape [3, 4] in the source but [4, 3] in the target");
    unchanged();
  }
  SECTION("a good source is copied in place, keeping the target's dtype and requires_grad") {
    const ag::Tensor weight = target.at("fc1.weight");
    const ag::optim::StateDict source = {{"fc1.bias", ag::randn({4}, ag::kFloat64)},
                                         {"fc1.weight", ag::randn({4, 3})},
                                         {"extra", ag::randn({1})}};
    ag::nn::load_into(target, source, "model");
    CHECK(target.at("fc1.weight").is_same(weight));  // the same tensor, new values
    CHECK(weight.requires_grad());
    CHECK(bytes_of(weight.detach()) == bytes_of(source.at("fc1.weight")));
    CHECK(target.at("fc1.bias").dtype() == ag::kFloat32);
    check_close(target.at("fc1.bias"), source.at("fc1.bias").to_vector<double>(), 0, 1e-7);
  }
}

TEST_CASE("load_into copies into CUDA tensors", "[checkpoint][load_into][cuda]") {
  if (skip_without_cuda()) return;
  ag::optim::StateDict target = {{"w", ag::zeros({2, 3}, ag::kCUDA).requires_grad_()}};
  const ag::optim::StateDict source = {{"w", ag::randn({2, 3})}};
  ag::nn::load_into(target, source, "model");
  CHECK(target.at("w").is_cuda());
  CHECK(target.at("w").requires_grad());
  CHECK(bytes_of(target.at("w").detach()) == bytes_of(source.at("w")));
}

// save_safetensors writes path.tmp, fsyncs it and renames it over path (write_atomically in
// nn/safetensors.cpp). A child that saves over and over is killed with SIGKILL at several
// moments of its writes; each time the file at path loads whole, one version of every tensor.
TEST_CASE("checkpoint: a process killed (SIGKILL) while saving leaves a whole checkpoint", "[checkpoint]") {
  const std::string path = tmp_path("killed.safetensors");
  // Built before forking: the child only writes (no kernels, no threads of its own).
  std::vector<std::map<std::string, ag::Tensor>> versions;
  for (int v = 0; v < 3; ++v)
    versions.push_back({{"a", ag::full({1 << 21}, static_cast<double>(v))}, {"b", ag::full({1 << 19}, v + 0.5)}});
  save_safetensors(path, versions[0], {{"version", "0"}});
  std::set<std::string> seen;
  for (int k = 0; k < 8; ++k) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      for (int i = 1;; i = i % 2 + 1) {
        try {
          save_safetensors(path, versions[static_cast<size_t>(i)], {{"version", std::to_string(i)}});
        } catch (...) {
          ::_exit(3);
        }
      }
    }
    ::usleep(static_cast<useconds_t>(3000 + 4100 * k));  // at different points of a write
    REQUIRE(::kill(pid, SIGKILL) == 0);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFSIGNALED(status));
    INFO("kill " << k);
    const ag::nn::SafetensorsFile f = load_safetensors(path);
    REQUIRE(f.metadata.count("version") == 1);
    const int v = std::stoi(f.metadata.at("version"));
    seen.insert(f.metadata.at("version"));
    REQUIRE(f.tensors.size() == 2);
    CHECK(f.tensors.at("a").to_vector<float>() == std::vector<float>(1 << 21, static_cast<float>(v)));
    CHECK(f.tensors.at("b").to_vector<float>() == std::vector<float>(1 << 19, static_cast<float>(v + 0.5)));
  }
  INFO("versions found: " << seen.size());
  CHECK(seen.size() >= 1);
}
