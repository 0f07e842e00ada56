// JsonConstraint: random masked walks over a synthetic vocabulary always end in JSON that an
// independent validator accepts; masks equal token-by-token trial acceptance; unsupported keywords
// are named; mask time on a 131,072-token vocabulary.
#include <chrono>
#include <cstdio>
#include <algorithm>
#include <random>
#include <set>

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include "schema_validator.h"
#include "tandem/text/json_constraint.h"

namespace tandem {
namespace {

constexpr int32_t kEosA = 1, kEosB = 2;

// Specials (empty), every single byte, and multi-byte tokens that span JSON boundaries.
std::vector<std::string> small_vocab() {
  std::vector<std::string> v = {"", "", ""};  // 0: another special; 1, 2: EOS
  for (int b = 0; b < 256; ++b) v.push_back(std::string(1, char(b)));
  for (const char* t :
       {"{\"", "\"}", "\":", "\": ", "\",", "\", \"", ", \"", "\":\"", "\": \"", "\":{\"", "\":[", "},", "}]", "\"]",
        "[\"", "[]", "{}", "true", "false", "null", "tr", "ue", "nu", "0", "12", "345", "-7", "0.", ".5", "e+", "E-1",
        "1e", "  ", "\n", "\t", " {", "name", "age", "tags", "active", "Tokyo", " the", "ing", "\"name", "age\":",
        "user", "id", "email", "scores", "red", "\"red\"", "green", "blue", "color", "version", "mode", "\"a\"", "x",
        "y", "\xc3\xa9", "\xe6\x97\xa5\xe6\x9c\xac", "\xe6\x97", "\xa5", "\xf0\x9f", "\x98\x80", "\\n", "\\\"",
        "\\u00e9", "\\ud83d", "\\u", "\\", "a\\\"b", "\"a\\\"b\"", "\xc3\xa9\":", "v", "w", "\"v\": ", "\"w\":",
        "\"x\": 1", "\"y\": 2}", "extra", "\"extra\":", "true}", "null,", "1, 2", "[1", "2]", "\"}]}", ", "})
    v.push_back(t);
  v.push_back("true");  // two ids with the same bytes
  return v;
}

std::string whitespace_violation(const std::string& out) {
  // Whitespace policy: outside strings only single spaces right after ':' or ','.
  bool in_str = false, esc = false;
  for (size_t i = 0; i < out.size(); ++i) {
    char c = out[i];
    if (in_str) {
      if (esc) esc = false;
      else if (c == '\\') esc = true;
      else if (c == '"') in_str = false;
      continue;
    }
    if (c == '"') in_str = true;
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
      if (c != ' ' || i == 0 || (out[i - 1] != ':' && out[i - 1] != ',') || (i + 1 < out.size() && out[i + 1] == ' '))
        return "whitespace at " + std::to_string(i);
    }
  }
  return "";
}

const rapidjson::Value& deref(const rapidjson::Value& root, const rapidjson::Value& s) {
  auto r = s.FindMember("$ref");
  if (r == s.MemberEnd()) return s;
  std::string ref = r->value.GetString();
  const rapidjson::Value* cur = &root;
  for (size_t i = 1; i < ref.size();) {
    size_t j = ref.find('/', i + 1);
    if (j == std::string::npos) j = ref.size();
    cur = &(*cur)[ref.substr(i + 1, j - i - 1).c_str()];
    i = j;
  }
  return *cur;
}

// Declared properties appear in schema order (our policy, not JSON Schema's).
bool in_schema_order(const rapidjson::Value& root, const rapidjson::Value& v, const rapidjson::Value& s_in) {
  if (!s_in.IsObject()) return true;
  const rapidjson::Value& s = deref(root, s_in);
  if (v.IsObject()) {
    auto props = s.FindMember("properties");
    if (props == s.MemberEnd()) return true;
    int last = -1;
    for (const auto& m : v.GetObject()) {
      int idx = 0, found = -1;
      for (const auto& p : props->value.GetObject()) {
        if (p.name == m.name) found = idx;
        ++idx;
      }
      if (found < 0) continue;
      if (found <= last || !in_schema_order(root, m.value, props->value[m.name])) return false;
      last = found;
    }
  }
  if (v.IsArray())
    if (auto it = s.FindMember("items"); it != s.MemberEnd())
      for (const auto& e : v.GetArray())
        if (!in_schema_order(root, e, it->value)) return false;
  return true;
}

void expect_mask_matches_trials(const JsonConstraint& c, const std::vector<uint8_t>& mask) {
  for (size_t id = 0; id < mask.size(); ++id) {
    JsonConstraint copy = c;
    ASSERT_EQ(copy.accept(int32_t(id)), mask[id] != 0) << "token " << id;
  }
}

// Picks random allowed tokens until EOS; leans towards closing tokens as the walk grows.
std::string walk(JsonConstraint c, const std::vector<std::string>& vocab, std::mt19937& rng, bool brute) {
  std::string out;
  std::vector<uint8_t> mask;
  for (int step = 0; step < 4000; ++step) {
    c.allowed(mask);
    if (brute) expect_mask_matches_trials(c, mask);
    std::vector<int32_t> ids, closing;
    bool eos = false;
    for (size_t i = 0; i < mask.size(); ++i) {
      if (!mask[i]) continue;
      if (i == size_t(kEosA) || i == size_t(kEosB)) eos = true;
      ids.push_back(int32_t(i));
      if (vocab[i].find_first_of("\"]}") != std::string::npos) closing.push_back(int32_t(i));
    }
    EXPECT_FALSE(ids.empty()) << "dead end after: " << out;
    if (ids.empty()) return out;
    EXPECT_EQ(eos, c.complete());
    int32_t pick;
    if (eos && rng() % 10 < 7) pick = rng() % 2 ? kEosA : kEosB;
    else if (!closing.empty() && double(rng() % 1000) / 1000.0 < std::min(0.9, step / 40.0)) pick = closing[rng() % closing.size()];
    else pick = ids[rng() % ids.size()];
    EXPECT_TRUE(c.accept(pick)) << "allowed token " << pick << " refused";
    if (c.finished()) return out;
    out += vocab[size_t(pick)];
  }
  ADD_FAILURE() << "walk did not finish: " << out.substr(0, 200);
  return out;
}

void run_walks(const std::string& schema_text, int walks, int brute_walks, bool any_object = false,
               size_t min_distinct = 0) {
  const std::vector<std::string> vocab = small_vocab();
  ConstraintVocab cv(vocab, {kEosA, kEosB});
  JsonSchema schema = any_object ? JsonSchema::any_object() : JsonSchema::compile(schema_text);
  rapidjson::Document sdoc;
  sdoc.Parse(any_object ? R"({"type":"object"})" : schema_text.c_str());
  ASSERT_FALSE(sdoc.HasParseError());
  test::SchemaValidator validator(sdoc);
  std::mt19937 rng(1234);
  std::set<std::string> distinct;
  for (int w = 0; w < walks; ++w) {
    std::string out = walk(JsonConstraint(schema, cv), vocab, rng, w < brute_walks);
    rapidjson::Document d;
    d.Parse<rapidjson::kParseValidateEncodingFlag>(out.c_str(), out.size());
    ASSERT_FALSE(d.HasParseError()) << "not JSON: " << out;
    EXPECT_EQ(validator.check(d, sdoc), "") << out;
    EXPECT_EQ(whitespace_violation(out), "") << out;
    EXPECT_TRUE(in_schema_order(sdoc, d, sdoc)) << out;
    distinct.insert(out);
  }
  EXPECT_GE(distinct.size(), min_distinct ? min_distinct : size_t(walks / 2)) << "walks should explore, not repeat";
}

const char* kPerson = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string"},
    "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
    "active": {"type": "boolean"}
  },
  "required": ["name", "age"],
  "additionalProperties": false
})";

TEST(JsonConstraint, ObjectWithRequiredAndOptional) { run_walks(kPerson, 60, 4); }

TEST(JsonConstraint, EnumAndConst) {
  run_walks(R"({"type":"object","properties":{
      "color":{"enum":["red","green","blue",7,null]},"version":{"const":2},
      "mode":{"type":"string","enum":["a","b",3]},"pt":{"const":{"x":1,"y":[true]}}},
    "required":["color","version"],"additionalProperties":false})", 60, 4);
}

TEST(JsonConstraint, NestedObjectsArraysAndLengths) {
  run_walks(R"({"type":"object","properties":{
      "user":{"type":"object","properties":{"id":{"type":"integer"},
              "email":{"type":"string","minLength":3,"maxLength":6}},"required":["id","email"],
              "additionalProperties":false},
      "scores":{"type":"array","items":{"type":"number"},"maxItems":4}},
    "required":["user","scores"],"additionalProperties":false})", 60, 4);
}

TEST(JsonConstraint, AnyOfAndTypeUnions) {
  run_walks(R"({"type":"object","properties":{
      "v":{"anyOf":[{"type":"string","maxLength":4},{"type":"null"},{"type":"integer"}]},
      "w":{"type":["number","boolean"]},
      "x":{"oneOf":[{"type":"array","items":{"type":"boolean"}},{"const":"none"}]}},
    "required":["v","w","x"],"additionalProperties":false})", 60, 4);
}

TEST(JsonConstraint, AdditionalPropertiesDefaultAndSchema) {
  run_walks(R"({"type":"object","properties":{"a":{"type":"integer"},"name":{"type":"boolean"}}})", 60, 4);
  run_walks(R"({"type":"object","additionalProperties":{"type":"integer"}})", 40, 2);
}

TEST(JsonConstraint, EscapedAndNonAsciiPropertyNames) {
  run_walks(R"({"type":"object","properties":{"a\"b":{"type":"null"},"\u00e9":{"type":"boolean"},
                 "v":{"type":"integer"}},"required":["a\"b"]})", 60, 6);
}

TEST(JsonConstraint, RefsAndDefs) {
  run_walks(R"({"$defs":{"pt":{"type":"object","properties":{"x":{"type":"number"},"y":{"type":"number"}},
                                "required":["x","y"],"additionalProperties":false}},
              "type":"object","properties":{"a":{"$ref":"#/$defs/pt"},"b":{"$ref":"#/$defs/pt"},
              "c":{"allOf":[{"$ref":"#/$defs/pt"}]}},"required":["a"],"additionalProperties":false})", 40, 3);
}

TEST(JsonConstraint, RootArrayAndRootScalars) {
  run_walks(R"({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":2})", 30, 3);
  run_walks(R"({"type":"integer"})", 30, 3);
  run_walks(R"({"type":"string","maxLength":5})", 30, 3);
  run_walks(R"({"enum":[1,12,123]})", 20, 3, false, 2);
}

TEST(JsonConstraint, JsonObjectMode) { run_walks("", 60, 4, /*any_object=*/true); }

TEST(JsonConstraint, RollbackRestoresTheMask) {
  ConstraintVocab cv(small_vocab(), {kEosA, kEosB});
  JsonConstraint c(JsonSchema::compile(kPerson), cv);
  ASSERT_TRUE(c.accept_bytes("{\"name\": \"Al"));
  std::vector<uint8_t> before, after;
  c.allowed(before);
  ASSERT_TRUE(c.accept_bytes("\", \"age\": 4"));
  ASSERT_TRUE(c.accept_bytes("2}"));
  EXPECT_TRUE(c.complete());
  std::vector<uint8_t> m;
  c.allowed(m);
  EXPECT_EQ(std::count(m.begin(), m.end(), 1), 2);  // only the EOS ids
  ASSERT_TRUE(c.accept(kEosB));
  EXPECT_TRUE(c.finished());
  c.rollback(3);
  EXPECT_FALSE(c.complete());
  c.allowed(after);
  EXPECT_EQ(before, after);
  EXPECT_FALSE(c.accept_bytes("\"}"));  // "age" is required
  EXPECT_FALSE(c.accept_bytes("\n"));
  EXPECT_FALSE(c.accept(0));  // a special token
}

TEST(JsonConstraint, UnsupportedKeywordsAreNamed) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {R"({"type":"string","pattern":"^a"})", {"'pattern'"}},
      {R"({"type":"object","properties":{"when":{"type":"string","format":"date"}}})", {"'format'", "/properties/when"}},
      {R"({"type":"integer","minimum":3})", {"'minimum'"}},
      {R"({"$defs":{"n":{"type":"object","properties":{"next":{"$ref":"#/$defs/n"}}}},"$ref":"#/$defs/n"})",
       {"'$ref'", "recursive"}},
      {R"({"$ref":"http://example.com/s.json"})", {"'$ref'", "not local"}},
      {R"({"$ref":"#/$defs/missing"})", {"'$ref'", "points at nothing"}},
      {R"({"anyOf":[{"type":"object"},{"type":"object","properties":{"a":{}}}]})", {"'anyOf'", "object"}},
      {R"({"oneOf":[{"type":"number"},{"type":"integer"}]})", {"'oneOf'"}},
      {R"({"type":"array","items":[{"type":"string"}]})", {"'items'", "tuple"}},
      {R"({"type":"object","required":["a"]})", {"'required'", "'a'"}},
      {R"({"type":"strings"})", {"'type'"}},
      {R"({"type":"string","minLength":5,"maxLength":2})", {"'minLength'"}},
      {R"({"type":"object","patternProperties":{"^a":{}}})", {"'patternProperties'"}},
      {R"({"type":"string","enum":[1,2]})", {"'enum'"}},
      {"{\"type\":", {"not valid JSON"}},
  };
  for (const auto& [schema, needles] : cases) {
    try {
      JsonSchema::compile(schema);
      ADD_FAILURE() << "accepted: " << schema;
    } catch (const std::exception& e) {
      std::string msg = e.what();
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      for (const std::string& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << msg << " lacks " << n;
    }
  }
  // Annotations are fine; anyOf with an unconstrained string subsumes string literals.
  EXPECT_NO_THROW(JsonSchema::compile(R"({"title":"T","description":"d","type":"object","properties":{
      "a":{"anyOf":[{"type":"string"},{"const":"x"},{"type":"null"}],"default":null,"examples":["q"]}},
      "$schema":"https://json-schema.org/draft/2020-12/schema"})"));
}

// A vocabulary shaped like a byte-level BPE one: every byte, then words with and without a leading
// space, capitalised words, digits, punctuation runs, whitespace runs and UTF-8 pieces.
std::vector<std::string> bpe_like_vocab(size_t n) {
  std::mt19937 rng(7);
  std::set<std::string> seen;
  std::vector<std::string> v = {"", "", ""};
  for (int b = 0; b < 256; ++b) v.push_back(std::string(1, char(b)));
  for (const auto& s : v) seen.insert(s);
  const char* cons = "bcdfghjklmnprstvwyz";
  const char* vow = "aeiou";
  const char* punct = "{}[]\":,.;!?()<>-_=+*/\\'";
  auto word = [&](size_t syll) {
    std::string w;
    for (size_t i = 0; i < syll; ++i) {
      w += cons[rng() % 19];
      w += vow[rng() % 5];
      if (rng() % 3 == 0) w += cons[rng() % 19];
    }
    return w;
  };
  while (v.size() < n) {
    std::string t;
    unsigned r = rng() % 100;
    if (r < 40) t = " " + word(1 + rng() % 4);
    else if (r < 65) t = word(1 + rng() % 3);
    else if (r < 75) {
      t = word(1 + rng() % 3);
      t[0] = char(t[0] - 32);
      if (rng() % 2) t = " " + t;
    } else if (r < 80) t = std::to_string(rng() % 1000);
    else if (r < 85) {
      for (unsigned k = 1 + rng() % 4; k; --k) t += punct[rng() % 24];
    } else if (r < 90) {
      t = std::string(1 + rng() % 16, " \n\t"[rng() % 3]);
    } else {
      for (unsigned k = 1 + rng() % 3; k; --k) {
        uint32_t cp = 0x4E00 + rng() % 0x5000;
        t += char(0xE0 | (cp >> 12));
        t += char(0x80 | ((cp >> 6) & 63));
        t += char(0x80 | (cp & 63));
      }
      if (rng() % 4 == 0) t.pop_back();  // a piece of a character, as byte-level BPE has
    }
    if (seen.insert(t).second) v.push_back(t);
  }
  return v;
}

TEST(JsonConstraint, MaskTimeOn131kVocabulary) {
  const std::vector<std::string> vocab = bpe_like_vocab(131072);
  auto t0 = std::chrono::steady_clock::now();
  ConstraintVocab cv(vocab, {kEosA, kEosB});
  double build_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("vocabulary trie: %zu tokens, built in %.1f ms\n", vocab.size(), build_ms);

  const JsonSchema person = JsonSchema::compile(kPerson);
  const JsonSchema limited = JsonSchema::compile(
      R"({"type":"object","properties":{"code":{"type":"string","maxLength":12},"note":{"type":"string"}}})");
  const JsonSchema any = JsonSchema::any_object();
  struct Case {
    const char* what;
    const JsonSchema* schema;
    const char* prefix;
  };
  const Case cases[] = {
      {"schema, start", &person, ""},
      {"schema, property name", &person, "{\"na"},
      {"schema, in string value", &person, "{\"name\": \"Tok"},
      {"schema, in integer", &person, "{\"name\":\"x\",\"age\": 4"},
      {"schema, after value", &person, "{\"name\":\"x\",\"age\":4"},
      {"schema, in maxLength string", &limited, "{\"code\": \"ab"},
      {"schema, 2 chars left", &limited, "{\"code\": \"abcdefghij"},
      {"schema, name or extra name", &limited, "{\"no"},
      {"json_object, free name", &any, "{\"ab"},
      {"json_object, in string value", &any, "{\"a\": [\"x"},
      {"json_object, value start", &any, "{\"a\": "},
  };
  double worst = 0;
  std::vector<uint8_t> mask;
  for (const Case& c : cases) {
    JsonConstraint jc(*c.schema, cv);
    ASSERT_TRUE(jc.accept_bytes(c.prefix)) << c.prefix;
    double best = 1e9;
    for (int rep = 0; rep < 3; ++rep) {
      JsonConstraint fresh = JsonConstraint(*c.schema, cv);  // own cache: measures the uncached walk
      ASSERT_TRUE(fresh.accept_bytes(c.prefix));
      auto a = std::chrono::steady_clock::now();
      fresh.allowed(mask);
      best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
    }
    std::vector<uint8_t> walked;
    jc.allowed(walked);
    auto a = std::chrono::steady_clock::now();
    jc.allowed(mask);
    double cached = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count();
    EXPECT_EQ(mask, walked) << c.what << ": the cached mask differs from the walk";
    size_t n = size_t(std::count(mask.begin(), mask.end(), 1));
    std::printf("%-32s %7zu allowed  walk %6.2f ms  cached %5.2f ms\n", c.what, n, best, cached);
    worst = std::max(worst, best);
    expect_mask_matches_trials(jc, mask);  // the shortcuts of the walk against byte-by-byte trial
  }
  // The target is ≲ 10 ms on one core. Printed, not asserted: a shared machine's load is no property
  // of the code (bench it on a quiet machine).
  std::printf("worst uncached walk %.2f ms\n", worst);
}

}  // namespace
}  // namespace tandem
