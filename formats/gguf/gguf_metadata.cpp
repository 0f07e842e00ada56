// GGUF metadata values, typed access, and the ggml type table.
#include "gguf_metadata.h"

#include <cmath>
#include <type_traits>
#include <limits>

#include "tandem/error.h"

namespace tandem::gguf {
namespace {

// ggml/include/ggml.h ids with ggml.c's block geometry; removed ids (4, 5, 31–33, 36–38) are absent.
// Q1_0 and Q2_0 (newest upstream) follow mainline's QK1_0 = 128 and QK2_0 = 64.
constexpr GgmlTypeInfo kTypes[] = {
    {0, "F32", 1, 4},          {1, "F16", 1, 2},          {2, "Q4_0", 32, 18},      {3, "Q4_1", 32, 20},
    {6, "Q5_0", 32, 22},       {7, "Q5_1", 32, 24},       {8, "Q8_0", 32, 34},      {9, "Q8_1", 32, 36},
    {10, "Q2_K", 256, 84},     {11, "Q3_K", 256, 110},    {12, "Q4_K", 256, 144},   {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},    {15, "Q8_K", 256, 292},    {16, "IQ2_XXS", 256, 66}, {17, "IQ2_XS", 256, 74},
    {18, "IQ3_XXS", 256, 98},  {19, "IQ1_S", 256, 50},    {20, "IQ4_NL", 32, 18},   {21, "IQ3_S", 256, 110},
    {22, "IQ2_S", 256, 82},    {23, "IQ4_XS", 256, 136},  {24, "I8", 1, 1},         {25, "I16", 1, 2},
    {26, "I32", 1, 4},         {27, "I64", 1, 8},         {28, "F64", 1, 8},        {29, "IQ1_M", 256, 56},
    {30, "BF16", 1, 2},        {34, "TQ1_0", 256, 54},    {35, "TQ2_0", 256, 66},   {39, "MXFP4", 32, 17},
    {40, "NVFP4", 64, 36},     {41, "Q1_0", 128, 18},     {42, "Q2_0", 64, 18},
};

const char* const kValueTypeNames[] = {"UINT8", "INT8",  "UINT16", "INT16", "UINT32", "INT32", "FLOAT32",
                                       "BOOL",  "STRING", "ARRAY", "UINT64", "INT64", "FLOAT64"};

bool is_signed(ValueType t) {
  return t == ValueType::I8 || t == ValueType::I16 || t == ValueType::I32 || t == ValueType::I64;
}

// A stored integer: signed types hold sign-extended bits, so `bits` read as int64 is the value when
// `negative`; otherwise `bits` read as uint64 is.
struct IntValue {
  bool negative;
  uint64_t bits;
};

IntValue int_value(ValueType t, uint64_t bits) { return {is_signed(t) && int64_t(bits) < 0, bits}; }

std::string int_text(ValueType t, uint64_t bits) {
  IntValue v = int_value(t, bits);
  return v.negative ? std::to_string(int64_t(v.bits)) : std::to_string(v.bits);
}

template <class T>
const char* wanted();
template <>
const char* wanted<uint32_t>() { return "an unsigned 32-bit integer"; }
template <>
const char* wanted<int32_t>() { return "a signed 32-bit integer"; }
template <>
const char* wanted<float>() { return "a float"; }
template <>
const char* wanted<bool>() { return "a bool"; }
template <>
const char* wanted<std::string>() { return "a string"; }

}  // namespace

const GgmlTypeInfo* ggml_type_info(int id) {
  for (const auto& t : kTypes)
    if (t.id == id) return &t;
  return nullptr;
}

const GgmlTypeInfo* ggml_type_info(const std::string& name) {
  for (const auto& t : kTypes)
    if (name == t.name) return &t;
  return nullptr;
}

std::string value_type_name(ValueType t) {
  int id = int(t);
  if (id >= 0 && id <= 12) return kValueTypeNames[id];
  return "type " + std::to_string(id);
}

bool is_valid_value_type(int32_t id) { return id >= 0 && id <= 12; }

bool is_integer_type(ValueType t) {
  switch (t) {
    case ValueType::U8: case ValueType::I8: case ValueType::U16: case ValueType::I16: case ValueType::U32:
    case ValueType::I32: case ValueType::U64: case ValueType::I64: case ValueType::BOOL: return true;
    default: return false;
  }
}

bool is_float_type(ValueType t) { return t == ValueType::F32 || t == ValueType::F64; }

size_t Value::size() const {
  if (!is_array()) return 1;
  if (elem == ValueType::STRING) return strings.size();
  return is_float_type(elem) ? floats.size() : ints.size();
}

std::string Value::type_name() const {
  if (!is_array()) return value_type_name(type);
  return "[" + value_type_name(elem) + " × " + std::to_string(size()) + "]";
}

Value Value::integer(ValueType t, uint64_t bits) {
  Value v;
  v.type = v.elem = t;
  v.ints = {bits};
  return v;
}

Value Value::real(ValueType t, double x) {
  Value v;
  v.type = v.elem = t;
  v.floats = {x};
  return v;
}

Value Value::str(std::string s) {
  Value v;
  v.type = v.elem = ValueType::STRING;
  v.strings = {std::move(s)};
  return v;
}

Value Value::integers(ValueType elem, std::vector<uint64_t> bits) {
  Value v;
  v.type = ValueType::ARRAY;
  v.elem = elem;
  v.ints = std::move(bits);
  return v;
}

Value Value::reals(ValueType elem, std::vector<double> x) {
  Value v;
  v.type = ValueType::ARRAY;
  v.elem = elem;
  v.floats = std::move(x);
  return v;
}

Value Value::strs(std::vector<std::string> s) {
  Value v;
  v.type = ValueType::ARRAY;
  v.elem = ValueType::STRING;
  v.strings = std::move(s);
  return v;
}

Value Value::i32s(const std::vector<int32_t>& x) {
  std::vector<uint64_t> bits;
  for (int32_t e : x) bits.push_back(uint64_t(int64_t(e)));
  return integers(ValueType::I32, std::move(bits));
}

Value Value::u32s(const std::vector<uint32_t>& x) { return integers(ValueType::U32, {x.begin(), x.end()}); }

Value Value::f32s(const std::vector<float>& x) { return reals(ValueType::F32, {x.begin(), x.end()}); }

void Metadata::set(const std::string& key, Value v) {
  auto it = index_.find(key);
  if (it != index_.end()) {
    entries_[it->second].second = std::move(v);
    return;
  }
  index_.emplace(key, entries_.size());
  entries_.emplace_back(key, std::move(v));
}

const Value* Metadata::find(const std::string& key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

template <class T>
T Metadata::element(const std::string& key, const Value& v, size_t i) const {
  const std::string at = where_ + ": key '" + key + "'";
  const ValueType t = v.elem;
  if constexpr (std::is_same_v<T, std::string>) {
    check(t == ValueType::STRING, at, ": expected a string, found ", v.type_name());
    return v.strings[i];
  } else if constexpr (std::is_same_v<T, bool>) {
    check(t == ValueType::BOOL, at, ": expected a bool, found ", v.type_name());
    return v.ints[i] != 0;
  } else if constexpr (std::is_same_v<T, float>) {
    check(is_float_type(t), at, ": expected a float, found ", v.type_name());
    return float(v.floats[i]);
  } else {
    check(is_integer_type(t) && t != ValueType::BOOL, at, ": expected ", wanted<T>(), ", found ", v.type_name());
    IntValue x = int_value(t, v.ints[i]);
    bool fits = x.negative ? int64_t(x.bits) >= int64_t(std::numeric_limits<T>::min())
                           : x.bits <= uint64_t(std::numeric_limits<T>::max());
    check(fits, at, ": expected ", wanted<T>(), ", found ", int_text(t, v.ints[i]),
          v.is_array() ? " at index " + std::to_string(i) : std::string());
    return x.negative ? T(int64_t(x.bits)) : T(x.bits);
  }
}

template <class T>
std::optional<T> Metadata::get(const std::string& key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  check(!v->is_array(), where_, ": key '", key, "': expected ", wanted<T>(), ", found an array ", v->type_name());
  return element<T>(key, *v, 0);
}

template <class T>
T Metadata::require(const std::string& key) const {
  std::optional<T> v = get<T>(key);
  check(v.has_value(), where_, ": missing required key '", key, "' (", wanted<T>(), ")");
  return *v;
}

template <class T>
std::optional<std::vector<T>> Metadata::get_array(const std::string& key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  check(v->is_array(), where_, ": key '", key, "': expected an array, found ", v->type_name());
  std::vector<T> out;
  out.reserve(v->size());
  for (size_t i = 0; i < v->size(); ++i) out.push_back(element<T>(key, *v, i));
  return out;
}

template <class T>
std::optional<std::vector<T>> Metadata::get_per_layer(const std::string& key, size_t n) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_array()) return std::vector<T>(n, element<T>(key, *v, 0));
  check(v->size() == n, where_, ": key '", key, "': expected one value per layer (", n, "), found an array of ",
        v->size());
  return get_array<T>(key);
}

#define TANDEM_GGUF_INSTANTIATE(T)                                                                   \
  template std::optional<T> Metadata::get<T>(const std::string&) const;                              \
  template T Metadata::require<T>(const std::string&) const;                                         \
  template std::optional<std::vector<T>> Metadata::get_array<T>(const std::string&) const;           \
  template std::optional<std::vector<T>> Metadata::get_per_layer<T>(const std::string&, size_t) const;
TANDEM_GGUF_INSTANTIATE(uint32_t)
TANDEM_GGUF_INSTANTIATE(int32_t)
TANDEM_GGUF_INSTANTIATE(float)
TANDEM_GGUF_INSTANTIATE(bool)
TANDEM_GGUF_INSTANTIATE(std::string)
#undef TANDEM_GGUF_INSTANTIATE

}  // namespace tandem::gguf
