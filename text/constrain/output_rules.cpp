// Request → OutputRules: the JSON schema of response_format and the per-parameter value rules of
// the declared tools.
#include "tandem/text/output_rules.h"

#include <algorithm>

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "tandem/request.h"
#include "tandem/error.h"

namespace tandem {

namespace rj = rapidjson;

namespace {

std::string to_json(const rj::Value& v) {
  rj::StringBuffer b;
  rj::Writer<rj::StringBuffer> w(b);
  v.Accept(w);
  return std::string(b.GetString(), b.GetSize());
}

JsonSchema compile(const std::string& schema, const std::string& param) {
  try {
    return JsonSchema::compile(schema);
  } catch (const Error& e) {
    throw invalid_request("invalid_value", param, "'" + param + "' cannot be enforced: " + e.what());
  }
}

const rj::Value* find(const rj::Value& obj, const char* name) {
  if (!obj.IsObject()) return nullptr;
  auto it = obj.FindMember(name);
  return it == obj.MemberEnd() || it->value.IsNull() ? nullptr : &it->value;
}

// A local "#/…" reference, resolved in `root`; the schema itself when it is none.
const rj::Value& resolve(const rj::Value& root, const rj::Value& schema) {
  const rj::Value* ref = find(schema, "$ref");
  if (!ref || !ref->IsString() || std::string_view(ref->GetString()).substr(0, 2) != "#/") return schema;
  const rj::Value* cur = &root;
  std::string path = ref->GetString() + 2, part;
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i < path.size() && path[i] != '/') {
      part += path[i];
      continue;
    }
    cur = find(*cur, part.c_str());
    if (!cur) return schema;
    part.clear();
  }
  return *cur;
}

// Whether the parser reads this property as a raw string: its type admits "string", or it has no
// type at all (spec §10.5; mirrors the output parser's typing).
bool reads_as_text(const rj::Value& root, const rj::Value& prop_in, int depth = 0) {
  if (depth > 8 || !prop_in.IsObject()) return true;
  const rj::Value& prop = resolve(root, prop_in);
  if (const rj::Value* t = find(prop, "type")) {
    if (t->IsString()) return std::string_view(t->GetString()) == "string";
    if (t->IsArray())
      for (const auto& e : t->GetArray())
        if (e.IsString() && std::string_view(e.GetString()) == "string") return true;
    return false;
  }
  for (const char* k : {"anyOf", "oneOf"})
    if (const rj::Value* alts = find(prop, k); alts && alts->IsArray()) {
      for (const auto& a : alts->GetArray())
        if (reads_as_text(root, a, depth + 1)) return true;
      return false;
    }
  const rj::Value* e = find(prop, "enum");
  if (e && e->IsArray()) {
    for (const auto& v : e->GetArray())
      if (v.IsString()) return true;
    return false;
  }
  if (const rj::Value* c = find(prop, "const")) return c->IsString();
  return true;
}

int64_t length_bound(const rj::Value& prop, const char* kw, int64_t def) {
  const rj::Value* v = find(prop, kw);
  return v && v->IsInt64() && v->GetInt64() >= 0 ? v->GetInt64() : def;
}

ToolParam compile_param(const rj::Value& root, const std::string& name, const rj::Value& prop_in,
                        const std::string& param) {
  ToolParam p;
  p.name = name;
  const rj::Value& prop = resolve(root, prop_in);
  const rj::Value* e = find(prop, "enum");
  const rj::Value* c = find(prop, "const");
  if ((e && e->IsArray() && !e->Empty()) || c) {
    // Strings as they are (the parser keeps them raw), everything else as JSON text.
    p.kind = ToolParam::Kind::choice;
    auto add = [&](const rj::Value& v) { p.choices.push_back(v.IsString() ? v.GetString() : to_json(v)); };
    if (c) add(*c);
    else
      for (const auto& v : e->GetArray()) add(v);
    for (const auto& s : p.choices)
      if (s.find('\n') != std::string::npos || s.find('<') != std::string::npos)
        throw invalid_request("invalid_value", param, "'" + param + "': a value with a newline or '<' cannot be written as a tool-call parameter");
    return p;
  }
  if (reads_as_text(root, prop)) {
    p.min_length = length_bound(prop, "minLength", 0);
    p.max_length = length_bound(prop, "maxLength", -1);
    return p;
  }
  p.kind = ToolParam::Kind::json;
  // The property's schema with the root's definitions beside it, so local $refs still resolve.
  rj::Document d;
  d.CopyFrom(prop, d.GetAllocator());
  if (d.IsObject())
    for (const char* defs : {"$defs", "definitions"})
      if (const rj::Value* v = find(root, defs); v && !d.HasMember(defs))
        d.AddMember(rj::Value(defs, d.GetAllocator()), rj::Value(*v, d.GetAllocator()), d.GetAllocator());
  p.schema = compile(to_json(d), param);
  return p;
}

}  // namespace

std::vector<ToolGrammar> compile_tool_grammars(const rj::Value& tools) {
  std::vector<ToolGrammar> out;
  if (!tools.IsArray()) return out;
  for (rj::SizeType i = 0; i < tools.Size(); ++i) {
    const rj::Value& fn = tools[i]["function"];
    ToolGrammar g;
    g.name = fn["name"].GetString();
    const std::string where = "tools[" + std::to_string(i) + "].function.parameters";
    const rj::Value* params = find(fn, "parameters");
    const rj::Value* props = params ? find(*params, "properties") : nullptr;
    if (props && props->IsObject()) {
      std::vector<std::string> required;
      if (const rj::Value* r = find(*params, "required"); r && r->IsArray())
        for (const auto& n : r->GetArray())
          if (n.IsString()) required.emplace_back(n.GetString());
      for (auto it = props->MemberBegin(); it != props->MemberEnd(); ++it) {
        std::string name = it->name.GetString();
        if (name.find('>') != std::string::npos || name.find('\n') != std::string::npos)
          throw invalid_request("invalid_value", where, "'" + where + "': parameter name '" + name +
                                                        "' cannot be written in a tool call ('>' or newline)");
        ToolParam p = compile_param(*params, name, it->value, where + ".properties." + name);
        p.required = std::find(required.begin(), required.end(), name) != required.end();
        g.params.push_back(std::move(p));
      }
    }
    out.push_back(std::move(g));
  }
  return out;
}

std::optional<JsonSchema> compile_response_format(const rj::Value* rf, const rj::Value* top_schema) {
  if (top_schema) {
    if (!top_schema->IsObject() && !top_schema->IsBool())
      throw invalid_request("invalid_type", "json_schema", "'json_schema' must be a JSON-schema object");
    return compile(to_json(*top_schema), "json_schema");
  }
  if (!rf) return std::nullopt;
  const rj::Value* t = find(*rf, "type");
  std::string type = t && t->IsString() ? t->GetString() : "";
  if (type == "text") return std::nullopt;
  if (type == "json_object") {
    // llama.cpp also takes a schema here.
    if (const rj::Value* s = find(*rf, "schema")) return compile(to_json(*s), "response_format.schema");
    return JsonSchema::any_object();
  }
  if (type == "json_schema") {
    const rj::Value* js = find(*rf, "json_schema");
    if (!js || !js->IsObject())
      throw invalid_request("missing_field", "response_format.json_schema", "'response_format.json_schema' must be an object");
    const rj::Value* s = find(*js, "schema");
    if (!s) throw invalid_request("missing_field", "response_format.json_schema.schema",
                              "'response_format.json_schema.schema' is required");
    return compile(to_json(*s), "response_format.json_schema.schema");
  }
  throw invalid_request("invalid_value", "response_format.type",
                    "'response_format.type' must be text, json_object or json_schema");
}

}  // namespace tandem
