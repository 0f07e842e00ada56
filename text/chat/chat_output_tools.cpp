// Tool-call pieces of the chat output parser: parameter types from the declared schemas (§10.5),
// schema-typed values, the JSON call body, deterministic call ids.
#include "chat_output_tools.h"

#include <cmath>

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "tandem/error.h"

namespace tandem::chat {
namespace {

using rapidjson::Value;

uint32_t type_bit(std::string_view t) {
  if (t == "string") return kTypeString;
  if (t == "integer") return kTypeInteger;
  if (t == "number") return kTypeNumber;
  if (t == "boolean") return kTypeBoolean;
  if (t == "null") return kTypeNull;
  if (t == "object") return kTypeObject;
  if (t == "array") return kTypeArray;
  return 0;
}

uint32_t kind_of(const Value& v) {
  if (v.IsString()) return kTypeString;
  if (v.IsBool()) return kTypeBoolean;
  if (v.IsNull()) return kTypeNull;
  if (v.IsObject()) return kTypeObject;
  if (v.IsArray()) return kTypeArray;
  if (v.IsInt64() || v.IsUint64()) return kTypeInteger | kTypeNumber;
  double d = v.GetDouble();
  return d == std::floor(d) ? (kTypeInteger | kTypeNumber) : kTypeNumber;
}

const Value* resolve_ref(const Value& root, const Value& schema) {
  auto ref = schema.FindMember("$ref");
  if (ref == schema.MemberEnd() || !ref->value.IsString()) return &schema;
  std::string_view r(ref->value.GetString(), ref->value.GetStringLength());
  if (!r.starts_with("#/")) return &schema;
  const Value* cur = &root;
  size_t i = 2;
  while (i <= r.size() && cur->IsObject()) {
    size_t j = r.find('/', i);
    if (j == std::string_view::npos) j = r.size();
    std::string key(r.substr(i, j - i));
    auto m = cur->FindMember(key.c_str());
    if (m == cur->MemberEnd()) return &schema;
    cur = &m->value;
    i = j + 1;
  }
  return cur->IsObject() ? cur : &schema;
}

// The types a property schema admits: `type`, else the union over anyOf/oneOf, else the kinds of
// its enum/const values. Depth-limited because a $ref may point back up.
uint32_t schema_types(const Value& root, const Value& schema_in, int depth) {
  if (depth > 8 || !schema_in.IsObject()) return 0;
  const Value& schema = *resolve_ref(root, schema_in);
  if (auto t = schema.FindMember("type"); t != schema.MemberEnd()) {
    if (t->value.IsString()) return type_bit(t->value.GetString());
    uint32_t bits = 0;
    if (t->value.IsArray())
      for (const auto& e : t->value.GetArray())
        if (e.IsString()) bits |= type_bit(e.GetString());
    return bits;
  }
  uint32_t bits = 0;
  for (const char* k : {"anyOf", "oneOf"}) {
    auto alts = schema.FindMember(k);
    if (alts == schema.MemberEnd() || !alts->value.IsArray()) continue;
    for (const auto& a : alts->value.GetArray()) {
      uint32_t b = schema_types(root, a, depth + 1);
      if (b == 0) return 0;  // one unconstrained alternative admits anything: read as string
      bits |= b;
    }
  }
  if (bits) return bits;
  if (auto e = schema.FindMember("enum"); e != schema.MemberEnd() && e->value.IsArray())
    for (const auto& v : e->value.GetArray()) bits |= kind_of(v);
  if (auto c = schema.FindMember("const"); c != schema.MemberEnd()) bits |= kind_of(c->value);
  return bits;
}

std::string_view trim(std::string_view s) {
  auto ws = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!s.empty() && ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && ws(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace

uint32_t Tool::types_of(std::string_view param) const {
  auto it = param_types.find(param);
  return it == param_types.end() ? 0 : it->second;
}

ToolTable::ToolTable(const std::vector<ToolSpec>& specs) {
  for (const ToolSpec& spec : specs) {
    Tool tool;
    tool.name = spec.name;
    if (!trim(spec.parameters_json).empty()) {
      rapidjson::Document doc;
      doc.Parse(spec.parameters_json.data(), spec.parameters_json.size());
      check(!doc.HasParseError() && doc.IsObject(), "tool '", spec.name,
            "': function.parameters must be a JSON object");
      auto props = doc.FindMember("properties");
      if (props != doc.MemberEnd() && props->value.IsObject())
        for (const auto& p : props->value.GetObject())
          tool.param_types.emplace(std::string(p.name.GetString(), p.name.GetStringLength()),
                                   schema_types(doc, p.value, 0));
    }
    tools_.push_back(std::move(tool));
  }
}

const Tool* ToolTable::find(std::string_view name) const {
  for (const Tool& t : tools_)
    if (t.name == name) return &t;
  return nullptr;
}

std::string typed_value_json(std::string_view raw, uint32_t types) {
  std::string_view t = trim(raw);
  const uint32_t non_string = types & ~uint32_t(kTypeString);
  if (!t.empty()) {
    rapidjson::Document doc;
    doc.Parse(t.data(), t.size());
    if (!doc.HasParseError() && (kind_of(doc) & non_string) && !doc.IsString()) return std::string(t);
    // Python literals, as models trained on Python tool calls sometimes write them.
    if (t == "True" && (non_string & kTypeBoolean)) return "true";
    if (t == "False" && (non_string & kTypeBoolean)) return "false";
    if (t == "None" && (non_string & kTypeNull)) return "null";
  }
  return json_quote(raw);
}

void append_json_escaped(std::string& out, std::string_view s) {
  static const char hex[] = "0123456789abcdef";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 15];
        } else {
          out += char(c);
        }
    }
  }
}

std::string json_quote(std::string_view s) {
  std::string out = "\"";
  append_json_escaped(out, s);
  out += '"';
  return out;
}

std::optional<JsonCall> parse_json_call(std::string_view body, const ToolTable& tools) {
  rapidjson::Document doc;
  doc.Parse(body.data(), body.size());
  if (doc.HasParseError() || !doc.IsObject()) return std::nullopt;
  auto name = doc.FindMember("name");
  if (name == doc.MemberEnd() || !name->value.IsString()) return std::nullopt;
  JsonCall call{std::string(name->value.GetString(), name->value.GetStringLength()), "{}"};
  if (!tools.find(call.name)) return std::nullopt;
  auto args = doc.FindMember("arguments");
  if (args == doc.MemberEnd()) args = doc.FindMember("parameters");
  if (args == doc.MemberEnd()) return call;
  if (args->value.IsObject()) {
    rapidjson::StringBuffer sb;
    rapidjson::Writer<rapidjson::StringBuffer> w(sb);
    args->value.Accept(w);
    call.arguments.assign(sb.GetString(), sb.GetSize());
    return call;
  }
  if (args->value.IsString()) {  // OpenAI style: the arguments object already as text
    rapidjson::Document inner;
    inner.Parse(args->value.GetString(), args->value.GetStringLength());
    if (inner.HasParseError() || !inner.IsObject()) return std::nullopt;
    call.arguments.assign(args->value.GetString(), args->value.GetStringLength());
    return call;
  }
  return std::nullopt;
}

std::string make_call_id(uint64_t seed, size_t index) {
  static const char alnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  uint64_t x = seed ^ (0x9E3779B97F4A7C15ull * (index + 1));
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) {
    x += 0x9E3779B97F4A7C15ull;  // splitmix64
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    id += alnum[z % 62];
  }
  return id;
}

}  // namespace tandem::chat
