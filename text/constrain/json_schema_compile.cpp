// JSON schema text → Grammar (server spec §11). Supported: type (incl. unions), properties,
// required, additionalProperties, enum, const, items, minItems/maxItems, minLength/maxLength,
// anyOf/oneOf whose alternatives differ by JSON type, allOf of one schema, local $ref/$defs
// without recursion. Annotations (title, description, ...) are ignored; any other keyword is an
// error naming it — `pattern`, `format`, `minimum` & co. are refused, not ignored.
#include <algorithm>
#include <set>
#include <tuple>

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "json_schema.h"
#include "tandem/error.h"

namespace tandem::json {
namespace {

using rapidjson::Value;

// Nesting depth of free-form values (a property with no schema, json_object mode).
constexpr uint32_t kAnyDepth = 8;

const std::set<std::string_view> kAnnotations = {"title",   "description", "default",  "examples", "$schema",
                                                 "$id",     "$comment",    "deprecated", "readOnly", "writeOnly"};
const std::set<std::string_view> kKeywords = {"type",     "properties", "required",  "additionalProperties",
                                              "enum",     "const",      "items",     "minItems",
                                              "maxItems", "minLength",  "maxLength", "anyOf",
                                              "oneOf",    "allOf",      "$ref",      "$defs",
                                              "definitions"};
const std::set<std::string_view> kObjectKeywords = {"properties", "required", "additionalProperties"};
const std::set<std::string_view> kArrayKeywords = {"items", "minItems", "maxItems"};
const std::set<std::string_view> kStringKeywords = {"minLength", "maxLength"};

std::string_view name_of(const Value& v) { return {v.GetString(), v.GetStringLength()}; }

std::string canonical(const Value& v) {
  rapidjson::StringBuffer sb;
  rapidjson::Writer<rapidjson::StringBuffer> w(sb);
  v.Accept(w);
  return std::string(sb.GetString(), sb.GetSize());
}

// JSON string escaping as RapidJSON's Writer does it, without the quotes: the bytes a declared
// property name is written with.
std::string encode_name(std::string_view name) {
  Value v(rapidjson::StringRef(name.data(), name.size()));
  std::string q = canonical(v);
  return q.substr(1, q.size() - 2);
}

std::string pointer_token(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

std::string where(const std::string& path) { return "json schema at '" + (path.empty() ? "/" : path) + "': "; }

class Builder {
 public:
  Grammar g;

  uint32_t add(Node n) {
    g.nodes.push_back(std::move(n));
    return uint32_t(g.nodes.size() - 1);
  }

  uint32_t new_trie_node(uint8_t free_state) {
    g.trie.emplace_back();
    g.trie.back().free_state = free_state;
    return uint32_t(g.trie.size() - 1);
  }

  // Inserts `bytes` under `root`; records `index` as terminal and in `below` along the path.
  void trie_insert(uint32_t root, std::string_view bytes, int32_t index) {
    uint32_t cur = root;
    if (index >= 0) g.trie[cur].below.push_back(uint32_t(index));
    for (unsigned char c : bytes) {
      int64_t child = g.trie[cur].child(c);
      if (child < 0) {
        uint8_t fs = g.trie[cur].free_state;
        if (fs != kNoFree) {
          int next = (fs == kUtf8None && c == '\\') ? -1 : utf8_step(fs, c);
          fs = next < 0 ? uint8_t(kNoFree) : uint8_t(next);
        }
        uint32_t id = new_trie_node(fs);
        g.trie[cur].edges.emplace_back(c, id);
        child = id;
      }
      cur = uint32_t(child);
      if (index >= 0) g.trie[cur].below.push_back(uint32_t(index));
    }
    g.trie[cur].terminal = index >= 0 ? index : 0;
  }

  uint32_t literal(std::vector<std::string> lits) {
    std::sort(lits.begin(), lits.end());
    lits.erase(std::unique(lits.begin(), lits.end()), lits.end());
    Node n;
    n.kind = Kind::literal;
    n.lit_trie = new_trie_node(kNoFree);
    for (const std::string& l : lits) trie_insert(n.lit_trie, l, -1);
    n.literals = std::move(lits);
    return add(std::move(n));
  }

  uint32_t simple(Kind k) {
    Node n;
    n.kind = k;
    return add(std::move(n));
  }

  // Every JSON value nested at most `depth` containers deep.
  uint32_t any(uint32_t depth) {
    if (depth < any_.size() && any_[depth] >= 0) return uint32_t(any_[depth]);
    std::vector<uint32_t> alts = {simple(Kind::string), simple(Kind::number), literal({"true", "false", "null"})};
    if (depth > 0) {
      uint32_t inner = any(depth - 1);
      alts.push_back(object({}, int32_t(inner)));
      Node arr;
      arr.kind = Kind::array;
      arr.items = inner;
      alts.push_back(add(std::move(arr)));
    }
    uint32_t id = choice(alts, false, "");
    g.nodes[id].is_any = true;
    if (any_.size() <= depth) any_.resize(depth + 1, -1);
    any_[depth] = int32_t(id);
    return id;
  }

  uint32_t object(std::vector<Property> props, int32_t extra) {
    Node n;
    n.kind = Kind::object;
    n.extra = extra;
    n.key_trie = new_trie_node(kUtf8None);
    for (size_t i = 0; i < props.size(); ++i) trie_insert(n.key_trie, encode_name(props[i].name), int32_t(i));
    n.next_required.assign(props.size() + 1, uint32_t(props.size()));
    for (size_t i = props.size(); i-- > 0;) n.next_required[i] = props[i].required ? uint32_t(i) : n.next_required[i + 1];
    n.props = std::move(props);
    return add(std::move(n));
  }

  // A value matching one of `alts`, told apart by its first byte.
  uint32_t choice(const std::vector<uint32_t>& alts_in, bool one_of, const std::string& path) {
    const char* kw = one_of ? "'oneOf'" : "'anyOf'";
    std::vector<uint32_t> alts;
    for (uint32_t a : alts_in) {
      const Node& n = g.nodes[a];
      if (n.is_any) {
        if (one_of && alts_in.size() > 1)
          fail(where(path), kw, ": an alternative accepts every value, so the others can never be the one match");
        return a;
      }
      if (n.kind == Kind::choice) alts.insert(alts.end(), n.alts.begin(), n.alts.end());
      else alts.push_back(a);
    }
    int32_t by_kind[7] = {-1, -1, -1, -1, -1, -1, -1};
    std::vector<std::string> lits;
    static const char* kind_names[] = {"object", "array", "string", "number", "integer", "literal", "choice"};
    for (uint32_t a : alts) {
      const Node& n = g.nodes[a];
      if (n.kind == Kind::literal) {
        lits.insert(lits.end(), n.literals.begin(), n.literals.end());
        continue;
      }
      int k = int(n.kind);
      if (by_kind[k] >= 0)
        fail(where(path), kw, ": two alternatives are both of type ", kind_names[k],
             "; only alternatives of different JSON types are supported");
      by_kind[k] = int32_t(a);
    }
    const int32_t num = by_kind[int(Kind::number)], integer = by_kind[int(Kind::integer)];
    if (num >= 0 && integer >= 0) {
      if (one_of) fail(where(path), kw, ": alternatives of type number and integer overlap");
      by_kind[int(Kind::integer)] = -1;
    }
    // A literal another alternative already admits is dropped; one that overlaps it otherwise is refused.
    std::vector<std::string> kept;
    for (const std::string& l : lits) {
      const char c = l[0];
      int32_t other = -1;
      bool subsumed = false;
      if (c == '"') {
        other = by_kind[int(Kind::string)];
        subsumed = other >= 0 && !g.nodes[size_t(other)].counted();
      } else if (c == '-' || (c >= '0' && c <= '9')) {
        int32_t n2 = by_kind[int(Kind::number)], i2 = by_kind[int(Kind::integer)];
        other = n2 >= 0 ? n2 : i2;
        subsumed = n2 >= 0 || (i2 >= 0 && l.find_first_of(".eE") == std::string::npos);
      } else if (c == '{') {
        other = by_kind[int(Kind::object)];
      } else if (c == '[') {
        other = by_kind[int(Kind::array)];
      }
      if (other < 0) {
        kept.push_back(l);
        continue;
      }
      if (!subsumed || one_of)
        fail(where(path), kw, ": the value ", l, " overlaps an alternative of type ",
             kind_names[int(g.nodes[size_t(other)].kind)]);
    }
    Node n;
    n.kind = Kind::choice;
    for (int k = 0; k < 5; ++k)
      if (by_kind[k] >= 0) n.alts.push_back(uint32_t(by_kind[k]));
    if (!kept.empty()) n.alts.push_back(literal(kept));
    if (n.alts.size() == 1) return n.alts[0];
    n.first.assign(256, -1);
    for (uint32_t a : n.alts) {
      const Node& an = g.nodes[a];
      auto set = [&](uint8_t c) { n.first[c] = int32_t(a); };
      switch (an.kind) {
        case Kind::object: set('{'); break;
        case Kind::array: set('['); break;
        case Kind::string: set('"'); break;
        case Kind::number:
        case Kind::integer:
          set('-');
          for (uint8_t d = '0'; d <= '9'; ++d) set(d);
          break;
        case Kind::literal:
          for (const auto& e : g.trie[an.lit_trie].edges) set(e.first);
          break;
        case Kind::choice: break;
      }
    }
    return add(std::move(n));
  }

 private:
  std::vector<int32_t> any_;
};

class Compiler {
 public:
  Compiler(const Value& root, Builder& b) : root_(root), b_(b) {}

  uint32_t compile(const Value& s, const std::string& path, uint32_t level) {
    if (level > kMaxFrames) fail(where(path), "the schema nests deeper than ", kMaxFrames, " levels");
    if (s.IsBool()) {
      if (!s.GetBool()) fail(where(path), "the schema 'false' admits no value");
      return any_at(level);
    }
    if (!s.IsObject()) fail(where(path), "expected a schema object or boolean");
    std::vector<std::string_view> constraints;  // keywords present, annotations and $defs aside
    for (const auto& m : s.GetObject()) {
      std::string_view k = name_of(m.name);
      if (kAnnotations.count(k)) continue;
      if (!kKeywords.count(k)) fail(where(path), "unsupported keyword '", k, "'");
      if (k != "$defs" && k != "definitions") constraints.push_back(k);
    }
    auto has = [&](std::string_view k) { return std::find(constraints.begin(), constraints.end(), k) != constraints.end(); };
    auto alone = [&](std::string_view k, std::initializer_list<std::string_view> also_ok = {}) {
      for (std::string_view c : constraints)
        if (c != k && std::find(also_ok.begin(), also_ok.end(), c) == also_ok.end())
          fail(where(path), "'", k, "' together with '", c, "' is not supported");
    };

    if (has("$ref")) {
      alone("$ref");
      return compile_ref(s["$ref"], path, level);
    }
    if (has("allOf")) {
      alone("allOf");
      const Value& all = s["allOf"];
      if (!all.IsArray() || all.Size() != 1) fail(where(path), "'allOf' is supported with exactly one schema");
      return compile(all[0], path + "/allOf/0", level);
    }
    for (const char* kw : {"anyOf", "oneOf"}) {
      if (!has(kw)) continue;
      alone(kw);
      const Value& alts = s[kw];
      if (!alts.IsArray() || alts.Empty()) fail(where(path), "'", kw, "' must be a non-empty array");
      std::vector<uint32_t> ids;
      for (rapidjson::SizeType i = 0; i < alts.Size(); ++i)
        ids.push_back(compile(alts[i], path + "/" + kw + "/" + std::to_string(i), level));
      return b_.choice(ids, std::string_view(kw) == "oneOf", path + "/" + kw);
    }
    std::vector<std::string> types = read_types(s, path);
    if (has("enum") || has("const")) return compile_literals(s, path, types, has("enum") ? "enum" : "const", alone);
    if (types.empty()) {
      for (std::string_view c : constraints) {
        if (kObjectKeywords.count(c)) types.push_back("object");
        else if (kArrayKeywords.count(c)) types.push_back("array");
        else if (kStringKeywords.count(c)) types.push_back("string");
      }
      std::sort(types.begin(), types.end());
      types.erase(std::unique(types.begin(), types.end()), types.end());
      if (types.empty()) return any_at(level);
    }
    std::vector<uint32_t> ids;
    for (const std::string& t : types) ids.push_back(compile_type(t, s, path, level));
    return ids.size() == 1 ? ids[0] : b_.choice(ids, false, path + "/type");
  }

 private:
  const Value& root_;
  Builder& b_;
  std::vector<std::string> refs_;  // $refs being expanded, to refuse cycles

  uint32_t any_at(uint32_t level) { return b_.any(std::min<uint32_t>(kAnyDepth, kMaxFrames - std::min(level, kMaxFrames))); }

  std::vector<std::string> read_types(const Value& s, const std::string& path) {
    std::vector<std::string> types;
    auto it = s.FindMember("type");
    if (it == s.MemberEnd()) return types;
    static const std::set<std::string_view> known = {"object", "array", "string", "number", "integer", "boolean", "null"};
    auto take = [&](const Value& v) {
      if (!v.IsString() || !known.count(name_of(v)))
        fail(where(path), "'type' must be one of object, array, string, number, integer, boolean, null, found ",
             canonical(v));
      types.emplace_back(name_of(v));
    };
    if (it->value.IsArray()) {
      for (const auto& v : it->value.GetArray()) take(v);
      if (types.empty()) fail(where(path), "'type' is an empty array");
    } else {
      take(it->value);
    }
    return types;
  }

  template <class Alone>
  uint32_t compile_literals(const Value& s, const std::string& path, const std::vector<std::string>& types,
                            const char* kw, Alone& alone) {
    alone(kw, {"type"});
    std::vector<const Value*> values;
    if (std::string_view(kw) == "enum") {
      const Value& e = s["enum"];
      if (!e.IsArray() || e.Empty()) fail(where(path), "'enum' must be a non-empty array");
      for (const auto& v : e.GetArray()) values.push_back(&v);
    } else {
      values.push_back(&s["const"]);
    }
    std::vector<std::string> lits;
    for (const Value* v : values)
      if (types.empty() || matches_type(*v, types)) lits.push_back(canonical(*v));
    if (lits.empty()) fail(where(path), "no '", kw, "' value has the schema's 'type'");
    return b_.literal(std::move(lits));
  }

  static bool matches_type(const Value& v, const std::vector<std::string>& types) {
    for (const std::string& t : types) {
      if ((t == "object" && v.IsObject()) || (t == "array" && v.IsArray()) || (t == "string" && v.IsString()) ||
          (t == "number" && v.IsNumber()) || (t == "boolean" && v.IsBool()) || (t == "null" && v.IsNull()) ||
          (t == "integer" && (v.IsInt64() || v.IsUint64())))
        return true;
    }
    return false;
  }

  // minItems/maxItems or minLength/maxLength: [0, kUnbounded) when absent.
  std::pair<uint32_t, uint32_t> read_range(const Value& s, const char* min_kw, const char* max_kw,
                                           const std::string& path) {
    auto read = [&](const char* kw, uint32_t fallback) {
      auto it = s.FindMember(kw);
      if (it == s.MemberEnd()) return fallback;
      if (!it->value.IsUint() || it->value.GetUint() == kUnbounded)
        fail(where(path), "'", kw, "' must be a non-negative integer, found ", canonical(it->value));
      return it->value.GetUint();
    };
    std::pair<uint32_t, uint32_t> r = {read(min_kw, 0), read(max_kw, kUnbounded)};
    if (r.first > r.second) fail(where(path), "'", min_kw, "' is greater than '", max_kw, "'");
    return r;
  }

  uint32_t compile_type(const std::string& t, const Value& s, const std::string& path, uint32_t level) {
    if (t == "object") return compile_object(s, path, level);
    if (t == "array") {
      Node n;
      n.kind = Kind::array;
      std::tie(n.min_items, n.max_items) = read_range(s, "minItems", "maxItems", path);
      auto items = s.FindMember("items");
      if (items == s.MemberEnd()) n.items = any_at(level + 1);
      else if (items->value.IsArray()) fail(where(path), "'items' as an array (tuple form) is not supported");
      else n.items = compile(items->value, path + "/items", level + 1);
      return b_.add(std::move(n));
    }
    if (t == "string") {
      Node n;
      n.kind = Kind::string;
      std::tie(n.min_len, n.max_len) = read_range(s, "minLength", "maxLength", path);
      return b_.add(std::move(n));
    }
    if (t == "number") return b_.simple(Kind::number);
    if (t == "integer") return b_.simple(Kind::integer);
    if (t == "boolean") return b_.literal({"true", "false"});
    return b_.literal({"null"});
  }

  uint32_t compile_object(const Value& s, const std::string& path, uint32_t level) {
    std::vector<Property> props;
    auto pit = s.FindMember("properties");
    if (pit != s.MemberEnd()) {
      if (!pit->value.IsObject()) fail(where(path), "'properties' must be an object");
      for (const auto& m : pit->value.GetObject()) {
        std::string name(name_of(m.name));
        uint32_t v = compile(m.value, path + "/properties/" + pointer_token(name), level + 1);
        props.push_back({name, v, false});
      }
    }
    auto rit = s.FindMember("required");
    if (rit != s.MemberEnd()) {
      if (!rit->value.IsArray()) fail(where(path), "'required' must be an array of names");
      for (const auto& r : rit->value.GetArray()) {
        if (!r.IsString()) fail(where(path), "'required' must be an array of names");
        auto p = std::find_if(props.begin(), props.end(), [&](const Property& q) { return q.name == name_of(r); });
        if (p == props.end()) fail(where(path), "'required' names '", name_of(r), "', which is not in 'properties'");
        p->required = true;
      }
    }
    int32_t extra = int32_t(any_at(level + 1));  // JSON Schema's default: additional properties allowed
    auto ait = s.FindMember("additionalProperties");
    if (ait != s.MemberEnd()) {
      if (ait->value.IsFalse()) extra = -1;
      else if (!ait->value.IsTrue()) extra = int32_t(compile(ait->value, path + "/additionalProperties", level + 1));
    }
    return b_.object(std::move(props), extra);
  }

  uint32_t compile_ref(const Value& ref, const std::string& path, uint32_t level) {
    if (!ref.IsString()) fail(where(path), "'$ref' must be a string");
    std::string r(name_of(ref));
    if (r.empty() || r[0] != '#') fail(where(path), "'$ref' '", r, "' is not local (only '#/...' is supported)");
    if (std::find(refs_.begin(), refs_.end(), r) != refs_.end())
      fail(where(path), "'$ref' '", r, "' is recursive; recursive schemas are not supported");
    const Value* cur = &root_;
    size_t i = 1;
    while (i < r.size()) {
      if (r[i] != '/') fail(where(path), "'$ref' '", r, "' is not a JSON pointer");
      size_t j = r.find('/', i + 1);
      if (j == std::string::npos) j = r.size();
      std::string tok;
      for (size_t k = i + 1; k < j; ++k) {
        if (r[k] == '~' && k + 1 < j && (r[k + 1] == '0' || r[k + 1] == '1')) {
          tok += r[k + 1] == '0' ? '~' : '/';
          ++k;
        } else {
          tok += r[k];
        }
      }
      auto m = cur->IsObject() ? cur->FindMember(tok.c_str()) : cur->MemberEnd();
      if (!cur->IsObject() || m == cur->MemberEnd()) fail(where(path), "'$ref' '", r, "' points at nothing");
      cur = &m->value;
      i = j;
    }
    refs_.push_back(r);
    uint32_t id = compile(*cur, r.substr(1), level);
    refs_.pop_back();
    return id;
  }
};

}  // namespace

std::shared_ptr<const Grammar> compile_schema(std::string_view schema_json) {
  rapidjson::Document doc;
  doc.Parse<rapidjson::kParseValidateEncodingFlag>(schema_json.data(), schema_json.size());
  if (doc.HasParseError()) fail("json schema: not valid JSON (offset ", doc.GetErrorOffset(), ")");
  auto b = std::make_shared<Builder>();
  Compiler c(doc, *b);
  b->g.root = c.compile(doc, "", 1);
  return std::shared_ptr<const Grammar>(b, &b->g);
}

std::shared_ptr<const Grammar> any_object_grammar(uint32_t max_depth) {
  check(max_depth >= 1 && max_depth <= kMaxFrames, "json_object: nesting depth must be 1..", kMaxFrames,
        ", found ", max_depth);
  auto b = std::make_shared<Builder>();
  b->g.root = b->object({}, int32_t(b->any(max_depth - 1)));
  return std::shared_ptr<const Grammar>(b, &b->g);
}

}  // namespace tandem::json
