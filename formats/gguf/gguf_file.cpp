// Reading one GGUF file: mmap, header, metadata and tensor infos, with the checks that keep every
// read and every tensor's bytes inside the file before anything dereferences them.
#include "gguf_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "tandem/error.h"

namespace tandem::gguf {
namespace {

// The byte ranges of every open GgufFile, for GgufFile::owns.
struct Live {
  std::mutex mutex;
  std::vector<std::pair<const uint8_t*, size_t>> ranges;
};
Live& live() {
  static Live* l = new Live();  // never destroyed: files may close during static destruction
  return *l;
}

// Bytes a value of this type takes at least (strings: their length field).
uint64_t min_bytes(ValueType t) {
  switch (t) {
    case ValueType::U8: case ValueType::I8: case ValueType::BOOL: return 1;
    case ValueType::U16: case ValueType::I16: return 2;
    case ValueType::U32: case ValueType::I32: case ValueType::F32: return 4;
    default: return 8;  // U64, I64, F64, STRING (u64 length), ARRAY (never an element)
  }
}

// Sequential little-endian reads that never pass the end of the buffer.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size, std::string at) : data_(data), size_(size), at_(std::move(at)) {}

  size_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }
  const std::string& at() const { return at_; }

  void need(uint64_t n, const std::string& what) const {
    if (n > left())
      fail(at_, "truncated: expected ", n, " bytes for ", what, " at offset ", pos_, ", found ", left());
  }
  uint64_t uint(int bytes, const std::string& what) {
    need(uint64_t(bytes), what);
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | data_[pos_ + size_t(i)];
    pos_ += size_t(bytes);
    return v;
  }
  uint32_t u32(const std::string& what) { return uint32_t(uint(4, what)); }
  int32_t i32(const std::string& what) { return int32_t(uint32_t(uint(4, what))); }
  uint64_t u64(const std::string& what) { return uint(8, what); }
  std::string string(const std::string& what) {
    uint64_t n = u64("the length of " + what);
    if (n > left())
      fail(at_, what, ": string of ", n, " bytes at offset ", pos_, " runs past the end of the file (", left(),
           " bytes left)");
    std::string s(reinterpret_cast<const char*>(data_ + pos_), size_t(n));
    pos_ += size_t(n);
    return s;
  }
  // A count of items that each take at least `each` bytes: larger counts cannot fit in the file.
  uint64_t count(uint64_t each, const std::string& what) {
    uint64_t n = u64(what);
    if (n > left() / each)
      fail(at_, what, " is ", n, ", but the ", left(), " bytes left in the file hold at most ", left() / each);
    return n;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  std::string at_;
};

double f32_of(uint64_t bits) {
  uint32_t u = uint32_t(bits);
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

double f64_of(uint64_t bits) {
  double d;
  std::memcpy(&d, &bits, 8);
  return d;
}

// Sign-extends the low `bytes` bytes of v.
uint64_t sign_extend(uint64_t v, int bytes) {
  int shift = 64 - 8 * bytes;
  return uint64_t(int64_t(v << shift) >> shift);
}

// Appends one element of type t to v.
void read_element(Cursor& c, ValueType t, Value& v, const std::string& what) {
  switch (t) {
    case ValueType::U8: case ValueType::BOOL: v.ints.push_back(c.uint(1, what)); break;
    case ValueType::I8: v.ints.push_back(sign_extend(c.uint(1, what), 1)); break;
    case ValueType::U16: v.ints.push_back(c.uint(2, what)); break;
    case ValueType::I16: v.ints.push_back(sign_extend(c.uint(2, what), 2)); break;
    case ValueType::U32: v.ints.push_back(c.uint(4, what)); break;
    case ValueType::I32: v.ints.push_back(sign_extend(c.uint(4, what), 4)); break;
    case ValueType::U64: case ValueType::I64: v.ints.push_back(c.uint(8, what)); break;
    case ValueType::F32: v.floats.push_back(f32_of(c.uint(4, what))); break;
    case ValueType::F64: v.floats.push_back(f64_of(c.uint(8, what))); break;
    case ValueType::STRING: v.strings.push_back(c.string(what)); break;
    case ValueType::ARRAY: fail(c.at(), what, ": nested arrays are not allowed");
  }
}

Value read_value(Cursor& c, const std::string& key) {
  const std::string what = "key '" + printable(key) + "'";
  int32_t type = c.i32("the value type of " + what);
  check(is_valid_value_type(type), c.at(), what, ": unknown value type ", type, " (expected 0..12)");
  Value v;
  v.type = v.elem = ValueType(type);
  if (v.type != ValueType::ARRAY) {
    read_element(c, v.type, v, what);
    return v;
  }
  int32_t elem = c.i32("the element type of " + what);
  check(is_valid_value_type(elem), c.at(), what, ": unknown array element type ", elem, " (expected 0..12)");
  check(ValueType(elem) != ValueType::ARRAY, c.at(), what, ": nested arrays are not allowed");
  v.elem = ValueType(elem);
  uint64_t n = c.count(min_bytes(v.elem), "the element count of " + what);
  if (v.elem == ValueType::STRING) v.strings.reserve(size_t(n));
  else if (is_float_type(v.elem)) v.floats.reserve(size_t(n));
  else v.ints.reserve(size_t(n));
  for (uint64_t i = 0; i < n; ++i) read_element(c, v.elem, v, what);
  return v;
}

}  // namespace

std::string printable(const std::string& s) {
  std::string out = s.size() > 200 ? s.substr(0, 200) + "…" : s;
  for (char& ch : out)
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = '?';
  return out;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("gguf: cannot open '", path, "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("gguf: '", path, "' is not a regular file");
  }
  f->size_ = size_t(st.st_size);
  if (f->size_ > 0) {
    void* p = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    ::close(fd);
    if (p == MAP_FAILED) fail("gguf: cannot map '", path, "' (", f->size_, " bytes): ", std::strerror(err));
    f->data_ = static_cast<const uint8_t*>(p);
    f->mapped_ = true;
  } else {
    ::close(fd);
  }
  f->parse();
  return f;
}

std::unique_ptr<GgufFile> GgufFile::from_bytes(std::vector<uint8_t> bytes, const std::string& name) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = name;
  f->owned_ = std::move(bytes);
  f->data_ = f->owned_.data();
  f->size_ = f->owned_.size();
  f->parse();
  return f;
}

GgufFile::~GgufFile() {
  {
    std::lock_guard<std::mutex> lock(live().mutex);
    auto& r = live().ranges;
    r.erase(std::remove(r.begin(), r.end(), std::make_pair(data_, size_)), r.end());
  }
  if (mapped_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

bool GgufFile::owns(const void* p) {
  auto* b = static_cast<const uint8_t*>(p);
  std::lock_guard<std::mutex> lock(live().mutex);
  for (const auto& [begin, size] : live().ranges)
    if (b >= begin && b < begin + size) return true;
  return false;
}

const TensorInfo* GgufFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void GgufFile::parse() {
  const std::string at = "gguf: file '" + path_ + "': ";
  metadata_ = Metadata("gguf: file '" + path_ + "'");
  Cursor c(data_, size_, at);

  c.need(4, "the magic 'GGUF'");
  if (std::memcmp(data_, kMagic, 4) != 0) {
    char hex[32];
    std::snprintf(hex, sizeof hex, "%02x %02x %02x %02x", data_[0], data_[1], data_[2], data_[3]);
    fail(at, "bad magic: expected 'GGUF' (47 47 55 46), found ", hex);
  }
  c.uint(4, "the magic");
  version_ = c.u32("the version");
  check(version_ == 3 || version_ == 2, at, "unsupported version ", version_, " (expected 3, or 2)");
  // A tensor info takes at least 24 bytes (empty name, no dims, type, offset), a KV pair 13.
  const uint64_t n_tensors = c.count(24, "the tensor count");
  const uint64_t n_kv = c.count(13, "the metadata key count");

  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.string("metadata key #" + std::to_string(i));
    check(!metadata_.has(key), at, "key '", printable(key), "' appears twice");
    metadata_.set(key, read_value(c, key));
  }
  if (const Value* a = metadata_.find("general.alignment")) {
    check(!a->is_array() && a->type == ValueType::U32, at, "key 'general.alignment': expected UINT32, found ",
          a->type_name());
    uint64_t v = a->ints[0];
    check(v > 0 && (v & (v - 1)) == 0, at, "key 'general.alignment': expected a power of two, found ", v);
    alignment_ = uint32_t(v);
  }

  tensors_.reserve(size_t(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo t;
    t.name = c.string("the name of tensor #" + std::to_string(i));
    const std::string tat = at + "tensor '" + printable(t.name) + "': ";
    check(index_.emplace(t.name, tensors_.size()).second, tat, "appears twice");
    uint32_t n_dims = c.u32("the dimension count of tensor '" + printable(t.name) + "'");
    check(n_dims <= 4, tat, "expected at most 4 dimensions, found ", n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      int64_t ne = int64_t(c.u64("ne[" + std::to_string(d) + "] of tensor '" + printable(t.name) + "'"));
      check(ne >= 0, tat, "ne[", d, "] is ", ne, ", expected >= 0");
      t.ne.push_back(ne);
    }
    int32_t type = c.i32("the type of tensor '" + printable(t.name) + "'");
    t.type = ggml_type_info(type);
    check(t.type != nullptr, tat, "unknown ggml type id ", type);
    t.offset = c.u64("the offset of tensor '" + printable(t.name) + "'");
    tensors_.push_back(std::move(t));
  }

  const uint64_t end_of_infos = c.pos();
  data_offset_ = (end_of_infos + alignment_ - 1) / alignment_ * alignment_;
  const uint64_t data_size = data_offset_ <= size_ ? size_ - data_offset_ : 0;
  check(tensors_.empty() || data_offset_ <= size_, at, "truncated: the data section starts at offset ", data_offset_,
        ", past the end of the file (", size_, " bytes)");
  uint64_t prev_end = 0;
  std::string prev;
  for (TensorInfo& t : tensors_) {
    const std::string tat = at + "tensor '" + printable(t.name) + "': ";
    // Readers multiply any subset of the dimensions (a row's bytes, rows × planes), so the bound is on
    // the product with empty dimensions counted as 1: a [2^61, 0] tensor holds no bytes, but its row
    // size would still overflow int64.
    uint64_t span = 1;
    bool overflow = false;
    for (int64_t d : t.ne) overflow |= __builtin_mul_overflow(span, uint64_t(d > 0 ? d : 1), &span);
    check(!overflow && span <= uint64_t(INT64_MAX), tat, "shape ", shape_str(t.ne), " has too many elements");
    const int64_t ne0 = t.ne.empty() ? 1 : t.ne[0];
    check(ne0 % t.type->block_elems == 0, tat, "ne[0] = ", ne0, " is not a multiple of the ", t.type->name,
          " block size ", t.type->block_elems);
    uint64_t span_bytes = 0;
    overflow = __builtin_mul_overflow(span / uint64_t(t.type->block_elems), uint64_t(t.type->block_bytes), &span_bytes);
    check(!overflow && span_bytes <= uint64_t(INT64_MAX), tat, "shape ", shape_str(t.ne), " of ", t.type->name,
          " needs more than 2^63 bytes");
    uint64_t numel = 1;
    for (int64_t d : t.ne) numel *= uint64_t(d);
    t.nbytes = numel / uint64_t(t.type->block_elems) * uint64_t(t.type->block_bytes);
    check(t.offset % alignment_ == 0, tat, "offset ", t.offset, " is not a multiple of the alignment ", alignment_);
    check(t.offset <= data_size && t.nbytes <= data_size - t.offset, tat, "bytes [", t.offset, ", +", t.nbytes,
          ") lie outside the data section of ", data_size, " bytes");
    check(t.offset >= prev_end, tat, "offset ", t.offset, " overlaps tensor '", printable(prev), "' ending at ",
          prev_end, " (tensors must be stored in order)");
    prev_end = t.offset + t.nbytes;
    prev = t.name;
    t.data = data_ + data_offset_ + t.offset;
  }

  std::lock_guard<std::mutex> lock(live().mutex);
  live().ranges.emplace_back(data_, size_);
}

}  // namespace tandem::gguf
