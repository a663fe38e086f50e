// safetensors: the writer (atomic, aligned) and the reader, which checks the header against
// the file before it trusts a byte of it (Note [safetensors layout]).
#include <ampgrad/nn/safetensors.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <set>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include <ampgrad/autograd/node.h>
#include <ampgrad/ops/ops.h>

namespace ampgrad::nn {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data; ampgrad writes its tensors' bytes as they are");

namespace {

using json = nlohmann::json;

struct Code {
  const char* name;
  DType dtype;
};
constexpr Code kCodes[] = {{"F32", kFloat32}, {"F16", kFloat16}, {"BF16", kBFloat16}, {"F64", kFloat64},
                           {"I64", kInt64},   {"I32", kInt32},   {"BOOL", kBool},     {"U8", kUInt8},
                           {"F8_E4M3", kFloat8_e4m3fn}, {"F8_E5M2", kFloat8_e5m2}};

const char* code_of(DType d) {
  for (const Code& c : kCodes)
    if (c.dtype == d) return c.name;
  AG_INTERNAL_ASSERT(false, "no safetensors code for {}", dtype_name(d));
  return "";
}

// ---- writing --------------------------------------------------------------------------

// Writes all of `bytes` to fd, retrying short writes and interrupted calls.
void write_all(int fd, const void* bytes, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(bytes);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    AG_CHECK(w > 0, "save_safetensors: {}: write failed: {}", path, std::strerror(errno));
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// Writes `header` and the tensors' bytes to `tmp`, fsyncs it, renames it over `path` and
// fsyncs the folder, so that a crash leaves either the old file or the new one.
void write_atomically(const std::string& path, const std::string& header, const std::vector<Tensor>& data) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  AG_CHECK(fd >= 0, "save_safetensors: cannot create {}: {}", tmp, std::strerror(errno));
  try {
    const uint64_t n = header.size();
    write_all(fd, &n, sizeof n, tmp);
    write_all(fd, header.data(), header.size(), tmp);
    for (const Tensor& t : data) write_all(fd, t.data_ptr(), t.nbytes(), tmp);
    AG_CHECK(::fsync(fd) == 0, "save_safetensors: {}: fsync failed: {}", tmp, std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  const bool closed = ::close(fd) == 0;
  if (!closed || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    AG_CHECK(false, "save_safetensors: cannot {} {}: {}", closed ? "rename to" : "close", closed ? path : tmp, why);
  }
  std::string dir = std::filesystem::path(path).parent_path().string();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {  // best effort: the data itself is already durable
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace

void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<std::pair<std::string, Tensor>> entries;
  {
    NoGradGuard no_grad;
    for (const auto& [name, t] : tensors) {
      AG_CHECK(!name.empty(), "save_safetensors: {}: a tensor has an empty name", path);
      AG_CHECK(name != "__metadata__", "save_safetensors: {}: '__metadata__' is reserved and cannot name a tensor", path);
      AG_CHECK(t.defined(), "save_safetensors: {}: tensor '{}' is undefined", path, name);
      entries.emplace_back(name, t.detach().cpu().contiguous());
    }
  }
  std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return a.second.element_size() > b.second.element_size();  // names stay sorted within a size
  });

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<Tensor> data;
  uint64_t offset = 0;
  for (const auto& [name, t] : entries) {
    header[name] = {{"dtype", code_of(t.dtype())}, {"shape", t.shape()}, {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
    data.push_back(t);
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    AG_CHECK(false, "save_safetensors: {}: a name or metadata string is not valid UTF-8 ({})", path, e.what());
  }
  text.resize((text.size() + 7) / 8 * 8, ' ');
  write_atomically(path, text, data);
}

// ---- reading --------------------------------------------------------------------------

namespace {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

// Parses the header, rejecting duplicate names, which nlohmann::json would silently merge.
json parse_header(const std::string& path, const std::string& text) {
  std::string duplicate;
  std::set<std::string> seen;
  const json::parser_callback_t on_key = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1 && !seen.insert(parsed.get<std::string>()).second)
      duplicate = parsed.get<std::string>();
    return true;
  };
  json header;
  try {
    header = json::parse(text, on_key);
  } catch (const json::parse_error& e) {
    AG_CHECK(false, "load_safetensors: {}: invalid JSON header: {}", path, e.what());
  }
  AG_CHECK(duplicate.empty(), "load_safetensors: {}: the header names tensor '{}' twice", path, duplicate);
  AG_CHECK(header.is_object(), "load_safetensors: {}: the header is JSON but not an object", path);
  return header;
}

DType dtype_of_code(const std::string& path, const std::string& name, const json& code) {
  AG_CHECK(code.is_string(), "load_safetensors: {}: tensor '{}': 'dtype' must be a string, got {}", path, name,
           code.dump());
  for (const Code& c : kCodes)
    if (code.get<std::string>() == c.name) return c.dtype;
  AG_CHECK(false, "load_safetensors: {}: tensor '{}': unknown dtype '{}' (ampgrad reads F32, F16, BF16, F64, I64, "
           "I32, BOOL, U8, F8_E4M3, F8_E5M2)", path, name, code.get<std::string>());
  return kFloat32;
}

// Reads one tensor's entry and checks it on its own: types, sizes, and that its byte range
// matches shape x itemsize and lies inside the data.
Entry parse_entry(const std::string& path, const std::string& name, const json& info, uint64_t data_size) {
  AG_CHECK(info.is_object(), "load_safetensors: {}: tensor '{}': entry must be an object, got {}", path, name,
           info.dump());
  for (const char* field : {"dtype", "shape", "data_offsets"})
    AG_CHECK(info.contains(field), "load_safetensors: {}: tensor '{}': missing '{}'", path, name, field);
  Entry e{name, dtype_of_code(path, name, info["dtype"]), {}, 0, 0};

  const json& shape = info["shape"];
  const auto is_uint = [](const json& v) { return v.is_number_unsigned(); };
  AG_CHECK(shape.is_array() && std::all_of(shape.begin(), shape.end(), is_uint),
           "load_safetensors: {}: tensor '{}': 'shape' must be an array of non-negative integers, got {}", path, name,
           shape.dump());
  uint64_t nbytes = itemsize(e.dtype);
  for (const json& d : shape) {
    const uint64_t v = d.get<uint64_t>();
    AG_CHECK(v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) &&
                 (v == 0 || nbytes <= std::numeric_limits<uint64_t>::max() / v),
             "load_safetensors: {}: tensor '{}': shape {} is too large", path, name, shape.dump());
    nbytes *= v;
    e.shape.push_back(static_cast<int64_t>(v));
  }

  const json& off = info["data_offsets"];
  AG_CHECK(off.is_array() && off.size() == 2 && is_uint(off[0]) && is_uint(off[1]) &&
               off[0].get<uint64_t>() <= off[1].get<uint64_t>(),
           "load_safetensors: {}: tensor '{}': 'data_offsets' must be [begin, end] with 0 <= begin <= end, got {}", path,
           name, off.dump());
  e.begin = off[0].get<uint64_t>();
  e.end = off[1].get<uint64_t>();
  AG_CHECK(e.end - e.begin == nbytes,
           "load_safetensors: {}: tensor '{}': data_offsets [{}, {}] hold {} bytes but {} {} needs {}", path, name,
           e.begin, e.end, e.end - e.begin, code_of(e.dtype), shape_str(e.shape), nbytes);
  AG_CHECK(e.end <= data_size,
           "load_safetensors: {}: tensor '{}': data_offsets [{}, {}] are out of range: the file holds only {} bytes of "
           "data (truncated?)", path, name, e.begin, e.end, data_size);
  return e;
}

// The tensors must tile [0, data_size) exactly: no overlaps, no bytes that belong to none.
void check_tiling(const std::string& path, std::vector<Entry>& entries, uint64_t data_size) {
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return std::tie(a.begin, a.end) < std::tie(b.begin, b.end); });
  uint64_t at = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    AG_CHECK(e.begin >= at, "load_safetensors: {}: tensors '{}' [{}, {}] and '{}' [{}, {}] overlap", path,
             prev ? prev->name : "", prev ? prev->begin : 0, at, e.name, e.begin, e.end);
    AG_CHECK(e.begin == at, "load_safetensors: {}: bytes [{}, {}) of the data belong to no tensor (missing data before "
             "tensor '{}')", path, at, e.begin, e.name);
    at = e.end;
    prev = &e;
  }
  AG_CHECK(at == data_size, "load_safetensors: {}: bytes [{}, {}) of the data belong to no tensor", path, at,
           data_size);
}

}  // namespace

SafetensorsFile load_safetensors(const std::string& path) {
  std::error_code ec;
  AG_CHECK(!std::filesystem::is_directory(path, ec),
           "load_safetensors: {} is a directory, not a safetensors file (a checkpoint is one file: the path "
           "given to save_checkpoint)",
           path);
  errno = 0;
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
  AG_CHECK(f != nullptr, "load_safetensors: cannot open {}: {}", path, std::strerror(errno));
  AG_CHECK(fseeko(f.get(), 0, SEEK_END) == 0, "load_safetensors: {}: cannot seek: {}", path, std::strerror(errno));
  const uint64_t file_size = static_cast<uint64_t>(ftello(f.get()));
  std::rewind(f.get());

  const auto read = [&](void* dst, uint64_t n, const char* what) {
    AG_CHECK(std::fread(dst, 1, n, f.get()) == n, "load_safetensors: {}: truncated while reading {}", path, what);
  };
  AG_CHECK(file_size >= 8, "load_safetensors: {}: truncated: the file has {} bytes, too few for the 8-byte header "
           "length", path, file_size);
  uint64_t n = 0;
  read(&n, 8, "the header length");
  AG_CHECK(n <= file_size - 8, "load_safetensors: {}: header length {} goes beyond the end of the file ({} bytes; "
           "truncated or not a safetensors file?)", path, n, file_size);
  std::string text(n, '\0');
  read(text.data(), n, "the header");
  const json header = parse_header(path, text);
  const uint64_t data_size = file_size - 8 - n;

  SafetensorsFile out;
  std::vector<Entry> entries;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      AG_CHECK(info.is_object(), "load_safetensors: {}: '__metadata__' must be an object, got {}", path, info.dump());
      for (const auto& [k, v] : info.items()) {
        AG_CHECK(v.is_string(), "load_safetensors: {}: metadata '{}' must be a string, got {}", path, k, v.dump());
        out.metadata[k] = v.get<std::string>();
      }
    } else {
      entries.push_back(parse_entry(path, name, info, data_size));
    }
  }
  check_tiling(path, entries, data_size);

  for (const Entry& e : entries) {
    Tensor t = empty(e.shape, e.dtype);
    AG_CHECK(fseeko(f.get(), static_cast<off_t>(8 + n + e.begin), SEEK_SET) == 0, "load_safetensors: {}: cannot seek: {}",
             path, std::strerror(errno));
    read(t.data_ptr(), t.nbytes(), ("tensor '" + e.name + "'").c_str());
    if (e.dtype == kBool) {  // any other byte would be undefined behaviour as a C++ bool
      const uint8_t* b = static_cast<const uint8_t*>(t.data_ptr());
      for (int64_t i = 0, count = t.numel(); i < count; ++i)
        AG_CHECK(b[i] <= 1, "load_safetensors: {}: tensor '{}': BOOL element {} is {}, not 0 or 1", path, e.name, i,
                 int{b[i]});
    }
    out.tensors.emplace(e.name, std::move(t));
  }
  return out;
}

}  // namespace ampgrad::nn
