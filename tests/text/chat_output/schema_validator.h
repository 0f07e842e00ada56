// An independent JSON Schema checker for the subset the constraint supports, written from the
// JSON Schema rules rather than from the constraint's code, to judge what constrained decoding made.
#pragma once
#include <string>
#include <string_view>

#include <rapidjson/document.h>

namespace tandem::test {

class SchemaValidator {
 public:
  explicit SchemaValidator(const rapidjson::Value& root) : root_(root) {}

  // Empty when `v` satisfies `schema`; else what failed, with a JSON pointer.
  std::string check(const rapidjson::Value& v, const rapidjson::Value& schema, const std::string& at = "") const {
    using rapidjson::Value;
    if (schema.IsBool()) return schema.GetBool() ? "" : at + ": schema false";
    if (auto r = schema.FindMember("$ref"); r != schema.MemberEnd()) return check(v, resolve(r->value.GetString()), at);
    if (auto t = schema.FindMember("type"); t != schema.MemberEnd()) {
      bool ok = false;
      if (t->value.IsString()) ok = has_type(v, t->value.GetString());
      else
        for (const auto& e : t->value.GetArray()) ok = ok || has_type(v, e.GetString());
      if (!ok) return at + ": wrong type";
    }
    if (auto e = schema.FindMember("enum"); e != schema.MemberEnd()) {
      bool found = false;
      for (const auto& x : e->value.GetArray()) found = found || equal(v, x);
      if (!found) return at + ": not in enum";
    }
    if (auto c = schema.FindMember("const"); c != schema.MemberEnd() && !equal(v, c->value)) return at + ": not const";
    if (auto a = schema.FindMember("anyOf"); a != schema.MemberEnd()) {
      bool any = false;
      for (const auto& s : a->value.GetArray()) any = any || check(v, s, at).empty();
      if (!any) return at + ": no anyOf alternative";
    }
    if (auto a = schema.FindMember("oneOf"); a != schema.MemberEnd()) {
      int n = 0;
      for (const auto& s : a->value.GetArray()) n += check(v, s, at).empty();
      if (n != 1) return at + ": oneOf matched " + std::to_string(n);
    }
    if (auto a = schema.FindMember("allOf"); a != schema.MemberEnd())
      for (const auto& s : a->value.GetArray())
        if (auto e = check(v, s, at); !e.empty()) return e;
    if (v.IsString()) {
      size_t n = code_points(std::string_view(v.GetString(), v.GetStringLength()));
      if (auto m = schema.FindMember("minLength"); m != schema.MemberEnd() && n < m->value.GetUint()) return at + ": short";
      if (auto m = schema.FindMember("maxLength"); m != schema.MemberEnd() && n > m->value.GetUint()) return at + ": long";
    }
    if (v.IsArray()) {
      if (auto m = schema.FindMember("minItems"); m != schema.MemberEnd() && v.Size() < m->value.GetUint()) return at + ": few items";
      if (auto m = schema.FindMember("maxItems"); m != schema.MemberEnd() && v.Size() > m->value.GetUint()) return at + ": many items";
      if (auto it = schema.FindMember("items"); it != schema.MemberEnd())
        for (rapidjson::SizeType i = 0; i < v.Size(); ++i)
          if (auto e = check(v[i], it->value, at + "/" + std::to_string(i)); !e.empty()) return e;
    }
    if (v.IsObject()) {
      const Value* props = nullptr;
      if (auto p = schema.FindMember("properties"); p != schema.MemberEnd()) props = &p->value;
      if (auto r = schema.FindMember("required"); r != schema.MemberEnd())
        for (const auto& name : r->value.GetArray())
          if (!v.HasMember(name)) return at + ": missing " + name.GetString();
      for (auto m = v.MemberBegin(); m != v.MemberEnd(); ++m) {
        for (auto m2 = m + 1; m2 != v.MemberEnd(); ++m2)
          if (m->name == m2->name) return at + ": duplicate key " + m->name.GetString();
        std::string sub = at + "/" + m->name.GetString();
        if (props && props->HasMember(m->name)) {
          if (auto e = check(m->value, (*props)[m->name], sub); !e.empty()) return e;
          continue;
        }
        auto ap = schema.FindMember("additionalProperties");
        if (ap == schema.MemberEnd()) continue;
        if (auto e = check(m->value, ap->value, sub); !e.empty()) return "extra key " + sub + ": " + e;
      }
    }
    return "";
  }

 private:
  const rapidjson::Value& root_;

  const rapidjson::Value& resolve(std::string_view ref) const {
    const rapidjson::Value* cur = &root_;
    size_t i = 1;
    while (i < ref.size()) {
      size_t j = ref.find('/', i + 1);
      if (j == std::string_view::npos) j = ref.size();
      std::string tok(ref.substr(i + 1, j - i - 1));
      cur = &(*cur)[tok.c_str()];
      i = j;
    }
    return *cur;
  }

  static bool has_type(const rapidjson::Value& v, std::string_view t) {
    if (t == "object") return v.IsObject();
    if (t == "array") return v.IsArray();
    if (t == "string") return v.IsString();
    if (t == "boolean") return v.IsBool();
    if (t == "null") return v.IsNull();
    if (t == "number") return v.IsNumber();
    if (t == "integer") return v.IsInt64() || v.IsUint64() || (v.IsDouble() && v.GetDouble() == double(int64_t(v.GetDouble())));
    return false;
  }

  static bool equal(const rapidjson::Value& a, const rapidjson::Value& b) {
    if (a.IsNumber() && b.IsNumber()) return a.GetDouble() == b.GetDouble();
    return a == b;
  }

  static size_t code_points(std::string_view s) {
    size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
  }
};

}  // namespace tandem::test
