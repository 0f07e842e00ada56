// GGUF metadata: the typed key/value pairs of a GGUF file (spec/formats.md § 2.2), and the ggml type
// table (§ 2.4) that the reader sizes tensors with, including types tandem cannot compute.
// Owner: value types; a Metadata owns its values. Thread: const methods from any thread. Sync: none.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tandem::gguf {

// Every ggml type id a GGUF file may name, with its block geometry (known even when no kernel exists,
// so that `tandem inspect` can list such tensors and the reader can check their sizes).
struct GgmlTypeInfo {
  int id;
  const char* name;  // "Q4_K", "F32", …
  int block_elems;
  int block_bytes;
};
// nullptr for ids ggml never defined or has removed (4, 5, 31–33, 36–38, ≥ 43).
const GgmlTypeInfo* ggml_type_info(int id);
const GgmlTypeInfo* ggml_type_info(const std::string& name);

enum class ValueType : int32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STRING = 8, ARRAY = 9,
  U64 = 10, I64 = 11, F64 = 12,
};
// "UINT32", "ARRAY", …; "type <id>" for ids outside the table.
std::string value_type_name(ValueType t);
bool is_valid_value_type(int32_t id);
bool is_integer_type(ValueType t);  // U8 … I64 and BOOL are stored as integers
bool is_float_type(ValueType t);

// One metadata value: a scalar, or an array of scalars (GGUF has no nested arrays).
struct Value {
  ValueType type = ValueType::U32;  // ARRAY for arrays
  ValueType elem = ValueType::U32;  // the element type of an array, else equal to `type`
  std::vector<uint64_t> ints;       // integer and bool elements; signed types are sign-extended
  std::vector<double> floats;       // F32/F64 elements
  std::vector<std::string> strings; // STRING elements

  bool is_array() const { return type == ValueType::ARRAY; }
  size_t size() const;  // 1 for a scalar
  std::string type_name() const;  // "UINT32" or "[INT32 × 52]"

  // Scalars. `bits` is the value's two's-complement bit pattern (U64 values above INT64_MAX fit).
  static Value integer(ValueType t, uint64_t bits);
  static Value real(ValueType t, double v);
  static Value u32(uint32_t v) { return integer(ValueType::U32, v); }
  static Value i32(int32_t v) { return integer(ValueType::I32, uint64_t(int64_t(v))); }
  static Value f32(float v) { return real(ValueType::F32, v); }
  static Value boolean(bool v) { return integer(ValueType::BOOL, v ? 1 : 0); }
  static Value str(std::string v);
  // Arrays.
  static Value integers(ValueType elem, std::vector<uint64_t> bits);
  static Value reals(ValueType elem, std::vector<double> v);
  static Value strs(std::vector<std::string> v);
  static Value i32s(const std::vector<int32_t>& v);
  static Value u32s(const std::vector<uint32_t>& v);
  static Value f32s(const std::vector<float>& v);
};

// Keys in file order. Typed getters return nullopt for an absent key and throw a one-line error
// naming the key for a present key of the wrong type or a value that does not fit. Integer getters
// accept any integer type whose value fits (writers disagree on U32 vs I32); float getters accept
// F32 and F64; bool needs BOOL; string needs STRING.
class Metadata {
 public:
  explicit Metadata(std::string where = "gguf") : where_(std::move(where)) {}

  // Replaces the value of an existing key (keeping its position) or appends a new one.
  void set(const std::string& key, Value v);
  const Value* find(const std::string& key) const;
  bool has(const std::string& key) const { return find(key) != nullptr; }
  const std::vector<std::pair<std::string, Value>>& entries() const { return entries_; }
  const std::string& where() const { return where_; }

  // T is uint32_t, int32_t, float, bool or std::string.
  template <class T>
  std::optional<T> get(const std::string& key) const;
  template <class T>
  T require(const std::string& key) const;
  // An array of T (a scalar is not an array here).
  template <class T>
  std::optional<std::vector<T>> get_array(const std::string& key) const;
  // Per-layer hyperparameters (llama.cpp's get_key_or_arr): a scalar repeated n times, or an array
  // of exactly n elements.
  template <class T>
  std::optional<std::vector<T>> get_per_layer(const std::string& key, size_t n) const;

 private:
  template <class T>
  T element(const std::string& key, const Value& v, size_t i) const;
  std::string where_;
  std::vector<std::pair<std::string, Value>> entries_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace tandem::gguf
