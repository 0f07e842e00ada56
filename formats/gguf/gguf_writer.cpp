// GGUF writer: the inverse of gguf_file.cpp, byte for byte in llama.cpp's layout.
#include "gguf_writer.h"

#include <cstring>
#include <fstream>
#include <unordered_set>

#include "gguf_file.h"
#include "tandem/error.h"
#include "tandem/tensor.h"

namespace tandem::gguf {
namespace {

class Bytes {
 public:
  void uint(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out_.push_back(uint8_t(v >> (8 * i)));
  }
  void string(const std::string& s) {
    uint(s.size(), 8);
    out_.insert(out_.end(), s.begin(), s.end());
  }
  void raw(const std::vector<uint8_t>& b) { out_.insert(out_.end(), b.begin(), b.end()); }
  void pad(uint64_t alignment) {
    while (out_.size() % alignment) out_.push_back(0);
  }
  std::vector<uint8_t>& out() { return out_; }

 private:
  std::vector<uint8_t> out_;
};

// Bytes of an integer type and whether its stored bits are a value it can hold.
int int_bytes(ValueType t) {
  switch (t) {
    case ValueType::U8: case ValueType::I8: case ValueType::BOOL: return 1;
    case ValueType::U16: case ValueType::I16: return 2;
    case ValueType::U32: case ValueType::I32: return 4;
    default: return 8;
  }
}

bool int_fits(ValueType t, uint64_t bits) {
  const int b = int_bytes(t);
  if (t == ValueType::BOOL) return bits <= 1;
  if (b == 8) return true;
  const bool is_signed = t == ValueType::I8 || t == ValueType::I16 || t == ValueType::I32;
  if (!is_signed) return bits >> (8 * b) == 0;
  const int64_t v = int64_t(bits), lim = int64_t(1) << (8 * b - 1);
  return v >= -lim && v < lim;
}

void write_element(Bytes& out, ValueType t, const Value& v, size_t i, const std::string& key) {
  if (t == ValueType::STRING) {
    check(i < v.strings.size(), "gguf writer: key '", key, "': missing string element ", i);
    return out.string(v.strings[i]);
  }
  if (t == ValueType::F32 || t == ValueType::F64) {
    check(i < v.floats.size(), "gguf writer: key '", key, "': missing float element ", i);
    if (t == ValueType::F64) {
      uint64_t bits;
      std::memcpy(&bits, &v.floats[i], 8);
      return out.uint(bits, 8);
    }
    float f = float(v.floats[i]);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    return out.uint(bits, 4);
  }
  check(is_integer_type(t), "gguf writer: key '", key, "': cannot write a value of type ", value_type_name(t));
  check(i < v.ints.size(), "gguf writer: key '", key, "': missing integer element ", i);
  check(int_fits(t, v.ints[i]), "gguf writer: key '", key, "': value ", int64_t(v.ints[i]), " does not fit ",
        value_type_name(t));
  out.uint(v.ints[i], int_bytes(t));
}

void write_value(Bytes& out, const std::string& key, const Value& v) {
  check(is_valid_value_type(int32_t(v.type)), "gguf writer: key '", key, "': invalid type ", int(v.type));
  out.uint(uint32_t(v.type), 4);
  if (!v.is_array()) {
    check(v.elem == v.type, "gguf writer: key '", key, "': a scalar's element type must equal its type");
    return write_element(out, v.type, v, 0, key);
  }
  check(is_valid_value_type(int32_t(v.elem)) && v.elem != ValueType::ARRAY, "gguf writer: key '", key,
        "': arrays of ", value_type_name(v.elem), " cannot be written (no nested arrays)");
  out.uint(uint32_t(v.elem), 4);
  out.uint(v.size(), 8);
  for (size_t i = 0; i < v.size(); ++i) write_element(out, v.elem, v, i, key);
}

template <class F>
WriteTensor make(const std::string& name, int type, const std::vector<int64_t>& ne, const std::vector<float>& values,
                 int elem_bytes, F encode) {
  WriteTensor t{name, type, ne, {}};
  t.data.resize(values.size() * size_t(elem_bytes));
  for (size_t i = 0; i < values.size(); ++i) {
    uint32_t bits = encode(values[i]);
    std::memcpy(&t.data[i * size_t(elem_bytes)], &bits, size_t(elem_bytes));  // little-endian host
  }
  return t;
}

}  // namespace

GgufHeader serialize_gguf_header(const Metadata& metadata, const std::vector<TensorLayout>& tensors) {
  GgufHeader h;
  h.alignment = kDefaultAlignment;
  if (const Value* a = metadata.find("general.alignment")) {
    check(!a->is_array() && a->type == ValueType::U32 && !a->ints.empty(),
          "gguf writer: key 'general.alignment' must be a UINT32");
    h.alignment = a->ints[0];
    check(h.alignment > 0 && (h.alignment & (h.alignment - 1)) == 0,
          "gguf writer: key 'general.alignment' must be a power of two, found ", h.alignment);
  }

  Bytes out;
  out.raw({uint8_t(kMagic[0]), uint8_t(kMagic[1]), uint8_t(kMagic[2]), uint8_t(kMagic[3])});
  out.uint(3, 4);
  out.uint(tensors.size(), 8);
  out.uint(metadata.entries().size(), 8);
  for (const auto& [key, value] : metadata.entries()) {
    out.string(key);
    write_value(out, key, value);
  }

  std::unordered_set<std::string> names;
  uint64_t offset = 0;
  for (const TensorLayout& t : tensors) {
    const std::string at = "gguf writer: tensor '" + t.name + "': ";
    check(names.insert(t.name).second, at, "appears twice");
    check(t.name.size() < 64, at, "name is ", t.name.size(), " bytes, llama.cpp reads at most 63");
    const GgmlTypeInfo* type = ggml_type_info(t.type);
    check(type != nullptr, at, "unknown ggml type id ", t.type);
    check(!t.ne.empty() && t.ne.size() <= 4, at, "expected 1 to 4 dimensions, found ", t.ne.size());
    int64_t numel = 1;
    for (int64_t d : t.ne) {
      check(d >= 0, at, "negative dimension in ", shape_str(t.ne));
      numel *= d;
    }
    check(t.ne[0] % type->block_elems == 0, at, "ne[0] = ", t.ne[0], " is not a multiple of the ", type->name,
          " block size ", type->block_elems);
    const uint64_t nbytes = uint64_t(numel / type->block_elems) * uint64_t(type->block_bytes);
    h.nbytes.push_back(nbytes);
    out.string(t.name);
    out.uint(t.ne.size(), 4);
    for (int64_t d : t.ne) out.uint(uint64_t(d), 8);
    out.uint(uint32_t(t.type), 4);
    out.uint(offset, 8);
    offset += (nbytes + h.alignment - 1) / h.alignment * h.alignment;
  }
  out.pad(h.alignment);
  h.bytes = std::move(out.out());
  return h;
}

std::vector<uint8_t> serialize_gguf(const Metadata& metadata, const std::vector<WriteTensor>& tensors) {
  std::vector<TensorLayout> layout;
  for (const WriteTensor& t : tensors) layout.push_back({t.name, t.type, t.ne});
  GgufHeader h = serialize_gguf_header(metadata, layout);
  for (size_t i = 0; i < tensors.size(); ++i)
    check(tensors[i].data.size() == h.nbytes[i], "gguf writer: tensor '", tensors[i].name, "': shape ",
          shape_str(tensors[i].ne), " of ", ggml_type_info(tensors[i].type)->name, " needs ", h.nbytes[i],
          " bytes, found ", tensors[i].data.size());
  Bytes out;
  out.raw(h.bytes);
  for (const WriteTensor& t : tensors) {
    out.raw(t.data);
    out.pad(h.alignment);
  }
  return std::move(out.out());
}

void write_gguf(const std::string& path, const Metadata& metadata, const std::vector<WriteTensor>& tensors) {
  std::vector<uint8_t> bytes = serialize_gguf(metadata, tensors);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  check(bool(f), "gguf writer: cannot create '", path, "'");
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  f.close();
  check(bool(f), "gguf writer: cannot write '", path, "'");
}

WriteTensor make_f32(const std::string& name, const std::vector<int64_t>& ne, const std::vector<float>& values) {
  return make(name, 0, ne, values, 4, [](float v) {
    uint32_t b;
    std::memcpy(&b, &v, 4);
    return b;
  });
}

WriteTensor make_f16(const std::string& name, const std::vector<int64_t>& ne, const std::vector<float>& values) {
  return make(name, 1, ne, values, 2, [](float v) { return uint32_t(f32_to_f16(v)); });
}

WriteTensor make_bf16(const std::string& name, const std::vector<int64_t>& ne, const std::vector<float>& values) {
  return make(name, 30, ne, values, 2, [](float v) { return uint32_t(f32_to_bf16(v)); });
}

}  // namespace tandem::gguf
