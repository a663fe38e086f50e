// Reads IDX files through zlib (which passes plain files through unchanged) and checks
// the header against the data that follows it.
#include <ampgrad/data/idx.h>

#include <zlib.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

namespace ampgrad::data {

namespace {

constexpr uint32_t kImagesMagic = 0x00000803;  // unsigned bytes, 3 dims
constexpr uint32_t kLabelsMagic = 0x00000801;  // unsigned bytes, 1 dim

// The whole (decompressed) content of a file. `cut` is empty, or says that the gzip stream
// ends early; it is reported with the header's view of what is missing, which says more.
struct Content {
  std::vector<uint8_t> bytes;
  std::string cut;  // " (the gzip stream ends early: <zlib's message>)" or ""
};

// zlib's message for the last error, without the path it puts in front.
std::string gz_message(gzFile f, const std::string& path) {
  int code = 0;
  std::string msg = gzerror(f, &code);
  if (msg.rfind(path + ": ", 0) == 0) msg.erase(0, path.size() + 2);
  return msg;
}

Content read_all(const std::string& path) {
  errno = 0;
  const std::unique_ptr<gzFile_s, int (*)(gzFile)> f(gzopen(path.c_str(), "rb"), gzclose);
  AG_CHECK(f != nullptr, "{}: cannot open: {}", path, errno ? std::strerror(errno) : "out of memory");
  gzbuffer(f.get(), 1 << 18);
  Content c;
  constexpr size_t kChunk = 1 << 22;
  for (;;) {
    const size_t at = c.bytes.size();
    c.bytes.resize(at + kChunk);
    const int n = gzread(f.get(), c.bytes.data() + at, kChunk);
    AG_CHECK(n >= 0, "{}: corrupt gzip data after {} bytes: {}", path, at, gz_message(f.get(), path));
    c.bytes.resize(at + static_cast<size_t>(n));
    if (n == 0) break;
  }
  // zlib returns what it could decompress and flags a stream cut short with Z_BUF_ERROR.
  int code = 0;
  gzerror(f.get(), &code);
  if (code != Z_OK) c.cut = fmt::format(" (the gzip stream ends early: {})", gz_message(f.get(), path));
  return c;
}

uint32_t read_be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// Checks the magic number and the sizes, and returns the dims and the data that follows.
struct Idx {
  std::vector<int64_t> dims;
  const uint8_t* data = nullptr;
};

Idx parse(const std::string& path, const Content& content, uint32_t magic, const char* what) {
  const std::vector<uint8_t>& bytes = content.bytes;
  const size_t ndim = magic & 0xff;
  const size_t header = 4 + 4 * ndim;
  AG_CHECK(bytes.size() >= 4, "{}: truncated: the file has {} bytes, too few for the 4-byte magic number{}", path,
           bytes.size(), content.cut);
  const uint32_t got = read_be32(bytes.data());
  if (got != magic) {
    const char* hint = got == kImagesMagic ? "; this is an images file"
                       : got == kLabelsMagic ? "; this is a labels file"
                                             : "";
    AG_CHECK(false, "{}: bad magic number 0x{:08x} (expected 0x{:08x} for {}){}", path, got, magic, what, hint);
  }
  AG_CHECK(bytes.size() >= header, "{}: truncated: the file has {} bytes, too few for the {}-byte header of an IDX {} file{}",
           path, bytes.size(), header, what, content.cut);

  Idx idx;
  uint64_t item = 1;  // bytes per image (or label)
  for (size_t d = 0; d < ndim; ++d) {
    idx.dims.push_back(read_be32(bytes.data() + 4 + 4 * d));
    if (d > 0) item *= static_cast<uint64_t>(idx.dims[d]);
  }
  const uint64_t n = static_cast<uint64_t>(idx.dims[0]);
  std::string shape = fmt::format("{} {}", n, what);
  if (ndim == 3) {
    AG_CHECK(idx.dims[1] > 0 && idx.dims[2] > 0, "{}: malformed: header says {} of {}x{}; rows and columns must be positive",
             path, shape, idx.dims[1], idx.dims[2]);
    shape += fmt::format(" of {}x{}", idx.dims[1], idx.dims[2]);
  }
  // Checked before multiplying: a corrupt header can claim more than 2^64 bytes.
  const uint64_t follows = bytes.size() - header;
  AG_CHECK(n <= std::numeric_limits<uint64_t>::max() / item && n * item <= follows,
           "{}: truncated: header says {} ({} bytes) but only {} bytes follow{}", path, shape,
           n <= std::numeric_limits<uint64_t>::max() / item ? fmt::format("{}", n * item) : std::string("over 2^64"),
           follows, content.cut);
  AG_CHECK(n * item == follows, "{}: malformed: header says {} ({} bytes) but {} bytes follow ({} too many)", path,
           shape, n * item, follows, follows - n * item);
  AG_CHECK(content.cut.empty(), "{}: truncated: the data is all there but its gzip trailer is missing{}", path,
           content.cut);
  idx.data = bytes.data() + header;
  return idx;
}

}  // namespace

Tensor read_idx_images(const std::string& path) {
  const Content content = read_all(path);
  const Idx idx = parse(path, content, kImagesMagic, "images");
  Tensor out = empty(idx.dims, kUInt8);
  if (out.numel()) std::memcpy(out.data_ptr(), idx.data, out.nbytes());
  return out;
}

Tensor read_idx_labels(const std::string& path) {
  const Content content = read_all(path);
  const Idx idx = parse(path, content, kLabelsMagic, "labels");
  Tensor out = empty(idx.dims, kInt64);
  int64_t* p = out.data_ptr<int64_t>();
  for (int64_t i = 0; i < out.numel(); ++i) p[i] = idx.data[i];
  return out;
}

}  // namespace ampgrad::data
