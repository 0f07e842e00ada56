// Reading one safetensors file: mmap, header JSON, and the checks that keep every tensor's bytes
// inside the file before anything dereferences them.
#include "safetensors_file.h"

#include <fcntl.h>
#include <rapidjson/document.h>
#include <rapidjson/error/en.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unordered_set>

#include "tandem/error.h"
#include "tandem/json_depth.h"

namespace tandem::safetensors {
namespace {

struct DtypeInfo {
  const char* name;
  size_t bytes;
};
constexpr DtypeInfo kDtypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"I16", 2}, {"U16", 2},     {"F16", 2},     {"BF16", 2},    {"I32", 4},
    {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8}, {"U64", 8}, {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"F8_E8M0", 1},
};

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}


struct Entry {
  RawTensor raw;
  uint64_t begin = 0, end = 0;
};

// Tensor names come from the file: keep control characters out of one-line messages.
std::string printable(const std::string& s) {
  std::string out = s;
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20) c = '?';
  return out;
}

std::string where(const std::string& file, const std::string& tensor) {
  return "safetensors: file '" + file + "': tensor '" + printable(tensor) + "': ";
}

// A JSON value that must be a non-negative integer; `what` names the field in errors.
uint64_t non_negative(const rapidjson::Value& v, const std::string& prefix, const char* what) {
  if (v.IsInt64() && v.GetInt64() < 0) fail(prefix, what, " is ", v.GetInt64(), ", expected a non-negative integer");
  check(v.IsUint64(), prefix, what, " is not an integer, expected a non-negative integer");
  return v.GetUint64();
}

Entry parse_entry(const std::string& name, const rapidjson::Value& v, const std::string& file, uint64_t buffer) {
  std::string at = where(file, name);
  check(v.IsObject(), at, "expected an object {dtype, shape, data_offsets}");
  Entry e;
  e.raw.name = name;
  e.raw.file = file;

  auto dtype = v.FindMember("dtype");
  check(dtype != v.MemberEnd() && dtype->value.IsString(), at, "field 'dtype' missing or not a string");
  e.raw.dtype.assign(dtype->value.GetString(), dtype->value.GetStringLength());
  size_t elem = dtype_bytes(e.raw.dtype);
  check(elem != 0, at, "dtype '", e.raw.dtype, "' unknown, expected one of ", known_dtypes());

  auto shape = v.FindMember("shape");
  check(shape != v.MemberEnd() && shape->value.IsArray(), at, "field 'shape' missing or not an array");
  uint64_t bytes = elem;
  bool overflow = false;
  for (const auto& d : shape->value.GetArray()) {
    uint64_t dim = non_negative(d, at, "shape dimension");
    check(dim <= uint64_t(INT64_MAX), at, "shape dimension ", dim, " too large");
    e.raw.shape.push_back(int64_t(dim));
    overflow |= __builtin_mul_overflow(bytes, dim, &bytes);
  }

  auto offsets = v.FindMember("data_offsets");
  check(offsets != v.MemberEnd() && offsets->value.IsArray() && offsets->value.Size() == 2, at,
        "field 'data_offsets' missing or not an array [begin, end]");
  e.begin = non_negative(offsets->value[0], at, "data_offsets begin");
  e.end = non_negative(offsets->value[1], at, "data_offsets end");
  check(e.begin <= e.end, at, "data_offsets [", e.begin, ", ", e.end, "] end before they begin");
  check(e.end <= buffer, at, "data_offsets [", e.begin, ", ", e.end, "] lie outside the data buffer of ", buffer,
        " bytes");
  check(!overflow && e.end - e.begin == bytes, at, "shape ", shape_str(e.raw.shape), " of ", e.raw.dtype,
        " needs ", overflow ? std::string("more than 2^64") : std::to_string(bytes), " bytes, data_offsets [",
        e.begin, ", ", e.end, "] hold ", e.end - e.begin);
  e.raw.nbytes = size_t(bytes);
  return e;
}

}  // namespace

size_t dtype_bytes(std::string_view dtype) {
  for (const auto& d : kDtypes)
    if (dtype == d.name) return d.bytes;
  return 0;
}

const char* known_dtypes() {
  return "BOOL, U8, I8, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64, F8_E4M3, F8_E5M2, F8_E8M0";
}

Mapping::Mapping(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("safetensors: cannot open '", path, "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("safetensors: '", path, "' is not a regular file");
  }
  size_ = size_t(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    ::close(fd);
    if (p == MAP_FAILED) fail("safetensors: cannot map '", path, "' (", size_, " bytes): ", std::strerror(err));
    data_ = static_cast<const uint8_t*>(p);
  } else {
    ::close(fd);
  }
}

Mapping::~Mapping() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

std::vector<RawTensor> parse_file(const uint8_t* bytes, size_t size, const std::string& file) {
  const std::string at = "safetensors: file '" + file + "': ";
  check(size >= 8, at, "truncated: expected at least 8 bytes for the header length, found ", size);
  uint64_t n = read_u64_le(bytes);
  check(n <= kMaxHeaderBytes, at, "header length ", n, " exceeds the limit of ", kMaxHeaderBytes, " bytes");
  check(n <= size - 8, at, "header length ", n, " runs past the end of the file (", size - 8,
        " bytes after the length field)");
  const char* json = reinterpret_cast<const char*>(bytes + 8);
  const uint64_t buffer = size - 8 - n;

  check(json_depth({json, n}) <= 16, at, "header JSON nests deeper than 16 levels");
  rapidjson::Document doc;
  doc.Parse<rapidjson::kParseIterativeFlag | rapidjson::kParseValidateEncodingFlag>(json, n);
  check(!doc.HasParseError(), at, "header is not valid JSON: ", rapidjson::GetParseError_En(doc.GetParseError()),
        " at byte ", doc.GetErrorOffset());
  check(doc.IsObject(), at, "header JSON is not an object");

  std::vector<Entry> entries;
  std::unordered_set<std::string> names;
  for (const auto& m : doc.GetObject()) {
    std::string name(m.name.GetString(), m.name.GetStringLength());
    if (name == "__metadata__") continue;
    check(names.insert(name).second, at, "tensor '", printable(name), "' appears twice in the header");
    entries.push_back(parse_entry(name, m.value, file, buffer));
  }

  // The ranges must tile the buffer exactly: no byte belongs to two tensors or to none.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t pos = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    if (e.begin < pos)  // never for i == 0, where pos is 0
      fail(where(file, e.raw.name), "data_offsets [", e.begin, ", ", e.end, "] overlap tensor '",
           printable(entries[i - 1].raw.name), "' ending at ", pos);
    if (e.begin > pos)
      fail(where(file, e.raw.name), "data_offsets begin at ", e.begin, ", expected ", pos, ": bytes [", pos, ", ",
           e.begin, ") of the data buffer belong to no tensor");
    pos = e.end;
  }
  check(pos == buffer, at, "data buffer holds ", buffer, " bytes, but the tensors end at ", pos);

  const uint8_t* data = bytes + 8 + n;
  std::vector<RawTensor> out;
  out.reserve(entries.size());
  for (auto& e : entries) {
    e.raw.data = data + e.begin;
    out.push_back(std::move(e.raw));
  }
  return out;
}

}  // namespace tandem::safetensors
