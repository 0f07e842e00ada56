// Tool-call pieces of the chat output parser: the declared tools with each parameter's JSON types,
// reading one `<parameter>` value by its schema type, the JSON call body, and call ids.
// Owner: one ToolTable per parser. Thread: the parser's. Sync: none.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/text/chat_output.h"

namespace tandem::chat {

// JSON Schema types a parameter accepts; 0 = unknown (no schema, no type): read as a string.
enum TypeBits : uint32_t {
  kTypeString = 1,
  kTypeInteger = 2,
  kTypeNumber = 4,
  kTypeBoolean = 8,
  kTypeNull = 16,
  kTypeObject = 32,
  kTypeArray = 64,
};

struct Tool {
  std::string name;
  std::map<std::string, uint32_t, std::less<>> param_types;
  uint32_t types_of(std::string_view param) const;
};

class ToolTable {
 public:
  // Throws tandem::Error naming the tool when its parameters are not a JSON object.
  explicit ToolTable(const std::vector<ToolSpec>& specs);
  const Tool* find(std::string_view name) const;

 private:
  std::vector<Tool> tools_;
};

// A value streams as raw text when it can only be a string; any other type is held until complete.
inline bool streams_raw(uint32_t types) { return types == 0 || types == kTypeString; }

// The JSON text of a complete typed value: the value itself when it parses (JSON, or Python's
// True/False/None) as one of the non-string types in `types`, else the raw text as a JSON string.
std::string typed_value_json(std::string_view raw, uint32_t types);

// `s` escaped for the inside of a JSON string (no quotes), byte by byte so any split escapes alike.
void append_json_escaped(std::string& out, std::string_view s);
std::string json_quote(std::string_view s);

struct JsonCall {
  std::string name;
  std::string arguments;
};
// A `<tool_call>` body written as JSON: {"name": ..., "arguments"|"parameters": {...}}. Empty when
// it is not one, or names no declared tool.
std::optional<JsonCall> parse_json_call(std::string_view body, const ToolTable& tools);

// "call_" + 24 alphanumerics, a function of (seed, index) only.
std::string make_call_id(uint64_t seed, size_t index);

}  // namespace tandem::chat
