// safetensors reading (spec/formats.md § 1) and writing for the MLX folder.
#include "mlx_files.h"

#include <fcntl.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>

#include "tandem/error.h"

namespace tandem::mlx {
namespace {

constexpr uint64_t kMaxHeader = 100'000'000;

uint64_t read_u64le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Parses the JSON header; fills `out` with tensors whose data point at data + offsets.
void parse_header(const char* json, size_t n, const uint8_t* data, uint64_t data_size, const std::string& file,
                  std::vector<RawTensor>& out) {
  const std::string at = "mlx: file '" + file + "': ";
  check(json_depth({json, n}) <= kMaxJsonDepth, at, "the safetensors header nests deeper than ", kMaxJsonDepth,
        " levels");
  rapidjson::Document doc;
  doc.Parse(json, n);
  check(!doc.HasParseError() && doc.IsObject(), at, "the safetensors header is not a JSON object");
  for (auto it = doc.MemberBegin(); it != doc.MemberEnd(); ++it) {
    const std::string name(it->name.GetString(), it->name.GetStringLength());
    if (name == "__metadata__") continue;
    const std::string shown = printable(name);
    const auto& v = it->value;
    check(v.IsObject(), at, "tensor '", shown, "': header entry is not an object");
    auto dt = v.FindMember("dtype"), sh = v.FindMember("shape"), off = v.FindMember("data_offsets");
    check(dt != v.MemberEnd() && dt->value.IsString(), at, "tensor '", shown, "': no dtype string");
    check(sh != v.MemberEnd() && sh->value.IsArray(), at, "tensor '", shown, "': no shape list");
    check(off != v.MemberEnd() && off->value.IsArray() && off->value.Size() == 2 && off->value[0].IsUint64() &&
              off->value[1].IsUint64(),
          at, "tensor '", shown, "': data_offsets is not a pair of offsets");
    RawTensor t;
    t.name = name;
    t.dtype = dt->value.GetString();
    t.file = file;
    const size_t eb = element_bytes(t.dtype);
    check(eb != 0, at, "tensor '", shown, "': unknown dtype '", printable(t.dtype), "'");
    uint64_t numel = 1;
    for (const auto& d : sh->value.GetArray()) {
      check(d.IsUint64() && d.GetUint64() < (uint64_t(1) << 40), at, "tensor '", shown, "': bad shape entry");
      t.shape.push_back(int64_t(d.GetUint64()));
      // Checked before multiplying: three dimensions of 2^39 would wrap the product to 0 bytes.
      check(d.GetUint64() == 0 || numel < (uint64_t(1) << 44) / d.GetUint64(), at, "tensor '", shown, "': shape ",
            shape_str(t.shape), "… has more than 2^44 elements");
      numel *= d.GetUint64();
    }
    const uint64_t b = off->value[0].GetUint64(), e = off->value[1].GetUint64();
    check(b <= e && e <= data_size, at, "tensor '", shown, "': data_offsets [", b, ", ", e, "] outside the ",
          data_size, " data bytes");
    check(e - b == numel * eb, at, "tensor '", shown, "': ", t.dtype, " ", shape_str(t.shape), " needs ", numel * eb,
          " bytes, data_offsets give ", e - b);
    t.data = data + b;
    t.nbytes = size_t(e - b);
    out.push_back(std::move(t));
  }
  std::sort(out.begin(), out.end(), [](const RawTensor& a, const RawTensor& b) { return a.data < b.data; });
}

}  // namespace



size_t element_bytes(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "U8" || d == "I8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const std::string at = "mlx: file '" + path + "': ";
  const int fd = ::open(path.c_str(), O_RDONLY);
  check(fd >= 0, at, "cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    fail(at, "cannot stat");
  }
  size_ = size_t(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    check(p != MAP_FAILED, at, "cannot map: ", std::strerror(errno));
    data_ = static_cast<const uint8_t*>(p);
  } else {
    ::close(fd);
  }
  try {
    check(size_ >= 8, at, "shorter than a safetensors header (", size_, " bytes)");
    const uint64_t n = read_u64le(data_);
    check(n <= kMaxHeader && n <= size_ - 8, at, "header length ", n, " exceeds the file (", size_, " bytes)");
    parse_header(reinterpret_cast<const char*>(data_ + 8), size_t(n), data_ + 8 + n, size_ - 8 - n, path, tensors_);
  } catch (...) {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
    throw;
  }
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

std::vector<std::string> header_names(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  uint8_t len[8];
  if (!in.read(reinterpret_cast<char*>(len), 8)) return {};
  const uint64_t n = read_u64le(len);
  if (n > kMaxHeader) return {};
  std::string json(size_t(n), '\0');
  if (!in.read(json.data(), std::streamsize(n))) return {};
  if (json_depth(json) > kMaxJsonDepth) return {};
  rapidjson::Document doc;
  doc.Parse(json.data(), json.size());
  if (doc.HasParseError() || !doc.IsObject()) return {};
  std::vector<std::string> names;
  for (auto it = doc.MemberBegin(); it != doc.MemberEnd(); ++it) names.emplace_back(it->name.GetString());
  return names;
}

SafetensorsOut::SafetensorsOut(const std::string& path, const std::vector<OutTensor>& tensors) : path_(path) {
  rapidjson::StringBuffer sb;
  rapidjson::Writer<rapidjson::StringBuffer> w(sb);
  w.StartObject();
  w.Key("__metadata__");
  w.StartObject();
  w.Key("format");
  w.String("mlx");
  w.EndObject();
  uint64_t off = 0;
  for (const OutTensor& t : tensors) {
    const size_t eb = element_bytes(t.dtype);
    check(eb != 0, "mlx: writing '", path, "': tensor '", t.name, "' has unknown dtype '", t.dtype, "'");
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= uint64_t(d);
    w.Key(t.name.c_str());
    w.StartObject();
    w.Key("dtype");
    w.String(t.dtype.c_str());
    w.Key("shape");
    w.StartArray();
    for (int64_t d : t.shape) w.Uint64(uint64_t(d));
    w.EndArray();
    w.Key("data_offsets");
    w.StartArray();
    w.Uint64(off);
    off += numel * eb;
    w.Uint64(off);
    w.EndArray();
    w.EndObject();
  }
  w.EndObject();
  std::string header = sb.GetString();
  while (header.size() % 8) header += ' ';  // the data buffer starts 8-byte aligned
  expected_ = off;
  f_ = std::fopen(path.c_str(), "wb");
  check(f_ != nullptr, "mlx: cannot create '", path, "': ", std::strerror(errno));
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(header.size()) >> (8 * i));
  write(len, 8);
  write(header.data(), header.size());
  written_ = 0;
}

SafetensorsOut::~SafetensorsOut() {
  if (f_) std::fclose(f_);
}

void SafetensorsOut::write(const void* data, size_t n) {
  check(f_ && std::fwrite(data, 1, n, f_) == n, "mlx: writing '", path_, "' failed");
  written_ += n;
}

void SafetensorsOut::close() {
  check(written_ == expected_, "mlx: writing '", path_, "': ", written_, " tensor bytes written, the header lists ",
        expected_);
  const bool ok = std::fflush(f_) == 0 && ::fsync(fileno(f_)) == 0;
  const bool closed = std::fclose(f_) == 0;
  f_ = nullptr;
  check(ok && closed, "mlx: flushing '", path_, "' failed");
}

}  // namespace tandem::mlx
