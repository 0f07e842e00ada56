// The safetensors writer: header JSON through RapidJSON (so names are escaped), then the tensors' bytes.
#include "safetensors_writer.h"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cstring>
#include <fstream>
#include <unordered_set>

#include "safetensors_file.h"
#include "tandem/error.h"
#include "tandem/tensor.h"

namespace tandem::safetensors {
namespace {

using JsonWriter = rapidjson::Writer<rapidjson::StringBuffer>;

void key(JsonWriter& w, const std::string& s) { w.Key(s.data(), rapidjson::SizeType(s.size())); }

uint64_t numel_of(const std::string& name, const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    check(d >= 0, "safetensors writer: tensor '", name, "': shape ", shape_str(shape), " has a negative dimension");
    check(!__builtin_mul_overflow(n, uint64_t(d), &n), "safetensors writer: tensor '", name, "': shape ",
          shape_str(shape), " overflows");
  }
  return n;
}

void write_bytes(const std::string& path, const std::string& head, const std::vector<const WriteTensor*>& body) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  check(bool(out), "safetensors writer: cannot create '", path, "'");
  out.write(head.data(), std::streamsize(head.size()));
  for (const WriteTensor* t : body) out.write(reinterpret_cast<const char*>(t->data.data()), std::streamsize(t->data.size()));
  out.close();
  check(bool(out), "safetensors writer: cannot write '", path, "'");
}

template <class Encode>
WriteTensor make(const std::string& name, const char* dtype, size_t elem, const std::vector<int64_t>& shape,
                 const std::vector<float>& values, Encode encode) {
  uint64_t n = numel_of(name, shape);
  check(values.size() == n, "safetensors writer: tensor '", name, "': shape ", shape_str(shape), " needs ", n,
        " values, found ", values.size());
  WriteTensor t{name, dtype, shape, std::vector<uint8_t>(n * elem)};
  for (size_t i = 0; i < n; ++i) encode(values[i], t.data.data() + i * elem);
  return t;
}

void put_u16(uint16_t v, uint8_t* p) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
}

}  // namespace

std::string serialize_header(const std::vector<TensorLayout>& tensors, std::vector<uint64_t>* nbytes) {
  rapidjson::StringBuffer sb;
  JsonWriter w(sb);
  w.StartObject();
  key(w, "__metadata__");
  w.StartObject();
  key(w, "format");
  w.String("pt");
  w.EndObject();
  std::unordered_set<std::string> names;
  uint64_t offset = 0;
  for (const TensorLayout& t : tensors) {
    const std::string at = "safetensors writer: tensor '" + t.name + "': ";
    check(t.name != "__metadata__" && names.insert(t.name).second, at, "name used twice or reserved");
    size_t elem = dtype_bytes(t.dtype);
    check(elem != 0, at, "dtype '", t.dtype, "' unknown, expected one of ", known_dtypes());
    uint64_t bytes = numel_of(t.name, t.shape) * elem;
    if (nbytes) nbytes->push_back(bytes);
    key(w, t.name);
    w.StartObject();
    key(w, "dtype");
    w.String(t.dtype.c_str());
    key(w, "shape");
    w.StartArray();
    for (int64_t d : t.shape) w.Int64(d);
    w.EndArray();
    key(w, "data_offsets");
    w.StartArray();
    w.Uint64(offset);
    w.Uint64(offset + bytes);
    w.EndArray();
    w.EndObject();
    offset += bytes;
  }
  w.EndObject();

  std::string json(sb.GetString(), sb.GetSize());
  json.append((8 - json.size() % 8) % 8, ' ');  // the data buffer starts 8-aligned
  std::string head(8, '\0');
  for (int i = 0; i < 8; ++i) head[i] = char(uint64_t(json.size()) >> (8 * i));
  return head + json;
}

void write_file(const std::string& path, const std::vector<WriteTensor>& tensors) {
  std::vector<TensorLayout> layout;
  for (const WriteTensor& t : tensors) layout.push_back({t.name, t.dtype, t.shape});
  std::vector<uint64_t> nbytes;
  std::string head = serialize_header(layout, &nbytes);
  std::vector<const WriteTensor*> body;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const WriteTensor& t = tensors[i];
    check(t.data.size() == nbytes[i], "safetensors writer: tensor '", t.name, "': shape ", shape_str(t.shape), " of ",
          t.dtype, " needs ", nbytes[i], " bytes, found ", t.data.size());
    body.push_back(&t);
  }
  write_bytes(path, head, body);
}

void write_index(const std::string& path, const std::vector<std::pair<std::string, std::string>>& weight_map) {
  rapidjson::StringBuffer sb;
  JsonWriter w(sb);
  w.StartObject();
  key(w, "metadata");
  w.StartObject();
  w.EndObject();
  key(w, "weight_map");
  w.StartObject();
  for (const auto& [tensor, file] : weight_map) {
    key(w, tensor);
    w.String(file.data(), rapidjson::SizeType(file.size()));
  }
  w.EndObject();
  w.EndObject();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(sb.GetString(), std::streamsize(sb.GetSize()));
  out.close();
  check(bool(out), "safetensors writer: cannot write index '", path, "'");
}

WriteTensor make_f32(const std::string& name, const std::vector<int64_t>& shape, const std::vector<float>& values) {
  return make(name, "F32", 4, shape, values, [](float v, uint8_t* p) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    for (int i = 0; i < 4; ++i) p[i] = uint8_t(u >> (8 * i));
  });
}

WriteTensor make_bf16(const std::string& name, const std::vector<int64_t>& shape, const std::vector<float>& values) {
  return make(name, "BF16", 2, shape, values, [](float v, uint8_t* p) { put_u16(f32_to_bf16(v), p); });
}

WriteTensor make_f16(const std::string& name, const std::vector<int64_t>& shape, const std::vector<float>& values) {
  return make(name, "F16", 2, shape, values, [](float v, uint8_t* p) { put_u16(f32_to_f16(v), p); });
}

}  // namespace tandem::safetensors
