// Pre-tokenizer splits with PCRE2. HF's Split/ByteLevel/Digits/Punctuation/Whitespace types map to
// regex steps with HF's split behaviours; llama.cpp pre-tokenizer names map to the regex sequences
// llama.cpp uses for them (each step splits every piece again, keeping matches and gaps).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer_pretok.h"

#include <algorithm>
#include <cctype>
#include <pcre2.h>

#include "tandem/error.h"
#include "tandem/text/utf8.h"

namespace tandem {

namespace {

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

// The regexes, as their tokenizer.json files spell them (PCRE2 takes them unchanged).
constexpr const char* kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kTekken =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|)"
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|)"
    R"(\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kGpt4o =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
    R"(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// HF's Punctuation: ASCII punctuation (which Unicode partly files as symbols) or any \p{P}.
constexpr const char* kPunct = R"([\p{P}!-/:-@\[-`{-~])";

struct GgmlEntry {
  std::vector<const char*> names;
  std::vector<const char*> regexes;
  bool ignore_merges;
  bool add_bos;
};

// llama.cpp's tokenizer.ggml.pre names and what each means (src/llama-vocab.cpp, llm_tokenizer_bpe).
const std::vector<GgmlEntry>& ggml_table() {
  static const std::vector<GgmlEntry> table = {
      {{"gpt-2", "phi-2", "mpt", "olmo", "jina-es", "jina-de", "jina-v2-es", "jina-v2-de", "jina-v1-en",
        "jina-v2-code", "roberta-bpe", "gigachat", "a.x-4.0", "mellum", "modern-bert", "exaone4", "jais",
        "trillion", "granite-docling"},
       {kGpt2}, false, false},
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2"},
       {R"(\p{N})", kGpt2}, false, false},
      {{"falcon"}, {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"}, false, false},
      {{"deepseek-coder"},
       {"[\\r\\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", R"([\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+)",
        R"(\p{N})"},
       false, false},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"},
       {kLlama3}, true, true},
      {{"dbrx", "smaug-bpe", "glm4", "chatglm-bpe"}, {kLlama3}, false, false},
      {{"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan", "solar-open"},
       {kQwen2}, false, false},
      {{"tekken"}, {kTekken}, true, true},
      {{"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"}, {kGpt4o}, false, false},
      {{"default", ""}, {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"}, false, false},
  };
  return table;
}

struct CodeDeleter {
  void operator()(pcre2_code* c) const { pcre2_code_free(c); }
};

pcre2_code* compile(const std::string& pattern, bool literal, const std::string& where) {
  int err = 0;
  PCRE2_SIZE err_off = 0;
  // MATCH_INVALID_UTF: text that is not valid UTF-8 still splits (bad bytes never match and end up
  // in the gaps, which byte-level BPE encodes like any other bytes).
  // (PCRE2 refuses UCP beside LITERAL, and a literal has no classes for it to change.)
  uint32_t opts = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), opts, &err,
                                   &err_off, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    fail(where, ": regex '", pattern, "' does not compile at offset ", err_off, ": ",
         reinterpret_cast<const char*>(msg));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // the interpreter runs it when JIT is unavailable
  return code;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return std::tolower(x) == std::tolower(y); });
}

Behavior parse_behavior(const rapidjson::Value& node, const std::string& where) {
  auto it = node.FindMember("behavior");
  if (it == node.MemberEnd()) return Behavior::Isolated;
  check(it->value.IsString(), where, ".behavior: expected a string");
  std::string_view s(it->value.GetString(), it->value.GetStringLength());
  if (iequals(s, "Removed")) return Behavior::Removed;
  if (iequals(s, "Isolated")) return Behavior::Isolated;
  if (iequals(s, "MergedWithPrevious")) return Behavior::MergedWithPrevious;
  if (iequals(s, "MergedWithNext")) return Behavior::MergedWithNext;
  if (iequals(s, "Contiguous")) return Behavior::Contiguous;
  fail(where, ".behavior: unknown split behaviour '", s,
       "' (expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous)");
}

bool get_bool(const rapidjson::Value& node, const char* key, bool def, const std::string& where) {
  auto it = node.FindMember(key);
  if (it == node.MemberEnd() || it->value.IsNull()) return def;
  check(it->value.IsBool(), where, ".", key, ": expected true or false");
  return it->value.GetBool();
}

}  // namespace

// One split of every piece: the regex finds delimiters (or, inverted, the pieces to keep) and the
// behaviour says what happens to them. No regex: the piece passes through (ByteLevel without
// use_regex, which may still add a prefix space).
struct PreTokenizer::Step {
  std::unique_ptr<pcre2_code, CodeDeleter> re;
  Behavior behavior = Behavior::Isolated;
  bool invert = false;
  bool prefix_space = false;
  bool byte_level = false;  // HF ByteLevel: later steps see the byte stand-ins, not the text
  std::string pattern;

  void apply(std::string_view piece, pcre2_match_data* md, std::vector<std::string>& out) const {
    std::string prefixed;
    if (prefix_space && (piece.empty() || piece[0] != ' ')) {
      prefixed = " " + std::string(piece);
      piece = prefixed;
    }
    if (!re) {
      if (!piece.empty()) out.emplace_back(piece);
      return;
    }
    // Segments covering the piece: (begin, end, is_match).
    struct Seg {
      size_t b, e;
      bool match;
    };
    std::vector<Seg> segs;
    size_t prev = 0, off = 0;
    const size_t n = piece.size();
    while (off < n) {
      int rc = pcre2_match(re.get(), reinterpret_cast<PCRE2_SPTR>(piece.data()), n, off, 0, md, nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        fail("pre-tokenizer regex '", pattern, "': match failed: ", reinterpret_cast<const char*>(msg));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      size_t b = ov[0], e = ov[1];
      if (e == b) {  // an empty match splits nothing; step over one character
        size_t len = 0;
        utf8_sequence(piece, b, len);  // a character, or the ill-formed bytes PCRE2 skips as one
        off = b + len;
        continue;
      }
      if (b > prev) segs.push_back({prev, b, false});
      segs.push_back({b, e, true});
      prev = off = e;
    }
    if (prev < n) segs.push_back({prev, n, false});
    if (invert)
      for (auto& s : segs) s.match = !s.match;

    // HF tokenizers' SplitDelimiterBehavior, on (begin, end) ranges.
    std::vector<std::pair<size_t, size_t>> keep;
    bool prev_match = false;
    switch (behavior) {
      case Behavior::Removed:
        for (auto& s : segs)
          if (!s.match) keep.push_back({s.b, s.e});
        break;
      case Behavior::Isolated:
        for (auto& s : segs) keep.push_back({s.b, s.e});
        break;
      case Behavior::MergedWithPrevious:
        for (auto& s : segs) {
          if (s.match && !prev_match && !keep.empty())
            keep.back().second = s.e;
          else
            keep.push_back({s.b, s.e});
          prev_match = s.match;
        }
        break;
      case Behavior::MergedWithNext:
        for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
          if (it->match && !prev_match && !keep.empty())
            keep.back().first = it->b;
          else
            keep.push_back({it->b, it->e});
          prev_match = it->match;
        }
        std::reverse(keep.begin(), keep.end());
        break;
      case Behavior::Contiguous:
        for (size_t i = 0; i < segs.size(); ++i) {
          if (i > 0 && segs[i].match == prev_match)
            keep.back().second = segs[i].e;
          else
            keep.push_back({segs[i].b, segs[i].e});
          prev_match = segs[i].match;
        }
        break;
    }
    for (auto [b, e] : keep)
      if (e > b) out.emplace_back(piece.substr(b, e - b));
  }
};

ByteMap::ByteMap() {
  to_byte.fill(-1);
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    // Printable Latin-1 bytes stand for themselves; the rest take code points from U+0100 on.
    bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    uint32_t cp = printable ? uint32_t(b) : uint32_t(256 + extra++);
    to_byte[cp] = int16_t(b);
    std::string& s = to_char[b];
    if (cp < 0x80) {
      s.push_back(char(cp));
    } else {
      s.push_back(char(0xC0 | (cp >> 6)));
      s.push_back(char(0x80 | (cp & 0x3F)));
    }
  }
}

const ByteMap& ByteMap::get() {
  static const ByteMap m;
  return m;
}

const std::string& byte_level_symbol(int b) {
  check(b >= 0 && b < 256, "byte_level_symbol: ", b, " is not a byte");
  return ByteMap::get().to_char[size_t(b)];
}

PreTokenizer::PreTokenizer() = default;
PreTokenizer::~PreTokenizer() = default;

namespace {

std::unique_ptr<PreTokenizer::Step> make_step(const std::string& pattern, bool literal, Behavior behavior, bool invert,
                                              const std::string& where) {
  auto s = std::make_unique<PreTokenizer::Step>();
  s->re.reset(compile(pattern, literal, where));
  s->behavior = behavior;
  s->invert = invert;
  s->pattern = pattern;
  return s;
}

}  // namespace

void PreTokenizer::add_json(const rapidjson::Value& node, const std::string& where, std::vector<std::string>& names) {
  check(node.IsObject(), where, ": expected an object");
  auto t = node.FindMember("type");
  check(t != node.MemberEnd() && t->value.IsString(), where, ": missing 'type'");
  const std::string type(t->value.GetString(), t->value.GetStringLength());
  if (type == "Sequence") {
    auto list = node.FindMember("pretokenizers");
    check(list != node.MemberEnd() && list->value.IsArray(), where, ".pretokenizers: expected an array");
    for (rapidjson::SizeType i = 0; i < list->value.Size(); ++i)
      add_json(list->value[i], where + ".pretokenizers[" + std::to_string(i) + "]", names);
    return;
  }
  names.push_back(type);
  if (type == "Split") {
    auto p = node.FindMember("pattern");
    check(p != node.MemberEnd() && p->value.IsObject(), where, ".pattern: expected {\"Regex\": …} or {\"String\": …}");
    auto re = p->value.FindMember("Regex");
    auto str = p->value.FindMember("String");
    bool literal = re == p->value.MemberEnd();
    auto& v = literal ? str : re;
    check(v != p->value.MemberEnd() && v->value.IsString(), where, ".pattern: expected {\"Regex\": …} or {\"String\": …}");
    std::string pattern(v->value.GetString(), v->value.GetStringLength());
    steps_.push_back(make_step(pattern, literal, parse_behavior(node, where), get_bool(node, "invert", false, where),
                               where + ".pattern"));
  } else if (type == "ByteLevel") {
    // The byte mapping itself happens in BPE; here only the split and the prefix space.
    std::unique_ptr<Step> s;
    if (get_bool(node, "use_regex", true, where))
      s = make_step(kGpt2, false, Behavior::Isolated, false, where);
    else
      s = std::make_unique<Step>();
    s->prefix_space = get_bool(node, "add_prefix_space", true, where);
    s->byte_level = true;
    steps_.push_back(std::move(s));
  } else if (type == "Digits") {
    bool single = get_bool(node, "individual_digits", false, where);
    steps_.push_back(make_step(single ? R"(\p{N})" : R"(\p{N}+)", false, Behavior::Isolated, false, where));
  } else if (type == "Punctuation") {
    steps_.push_back(make_step(kPunct, false, parse_behavior(node, where), false, where));
  } else if (type == "Whitespace") {
    steps_.push_back(make_step(R"(\w+|[^\w\s]+)", false, Behavior::Removed, true, where));
  } else if (type == "WhitespaceSplit") {
    steps_.push_back(make_step(R"(\s+)", false, Behavior::Removed, false, where));
  } else {
    fail(where, ": pre-tokenizer type '", type,
         "' is not supported (byte-level BPE needs Split, ByteLevel, Digits, Punctuation, Whitespace or Sequence)");
  }
}

std::unique_ptr<PreTokenizer> PreTokenizer::from_json(const rapidjson::Value& node, const std::string& where) {
  std::unique_ptr<PreTokenizer> p(new PreTokenizer());
  if (node.IsNull()) {
    p->name_ = "none";
    return p;
  }
  std::vector<std::string> names;
  p->add_json(node, where, names);
  if (names.size() == 1) {
    p->name_ = names[0];
  } else {
    p->name_ = "Sequence[";
    for (size_t i = 0; i < names.size(); ++i) p->name_ += (i ? ", " : "") + names[i];
    p->name_ += "]";
  }
  return p;
}

std::unique_ptr<PreTokenizer> PreTokenizer::from_ggml(const std::string& name, const std::string& where,
                                                      GgmlTraits* traits) {
  for (const auto& e : ggml_table()) {
    if (std::find(e.names.begin(), e.names.end(), name) == e.names.end()) continue;
    std::unique_ptr<PreTokenizer> p(new PreTokenizer());
    for (const char* re : e.regexes) p->steps_.push_back(make_step(re, false, Behavior::Isolated, false, where));
    p->name_ = "ggml:" + (name.empty() ? std::string("default") : name);
    if (traits) *traits = {e.ignore_merges, e.add_bos};
    return p;
  }
  std::string known;
  for (const auto& e : ggml_table()) known += std::string(known.empty() ? "" : ", ") + e.names[0];
  fail(where, ": unknown pre-tokenizer name '", name, "' (known families: ", known, ")");
}

namespace {

std::string to_stand_ins(const std::string& raw) {
  const ByteMap& m = ByteMap::get();
  std::string out;
  out.reserve(raw.size() * 2);
  for (unsigned char c : raw) out += m.to_char[c];
  return out;
}

// Inverse of to_stand_ins; splits never cut a stand-in, so every character is one.
std::string from_stand_ins(const std::string& mapped) {
  const ByteMap& m = ByteMap::get();
  std::string out;
  for (size_t i = 0; i < mapped.size();) {
    unsigned char c = mapped[i];
    uint32_t cp = c < 0x80 ? c : uint32_t(c & 0x1F) << 6 | (mapped[i + 1] & 0x3F);
    out.push_back(char(m.to_byte[cp]));
    i += c < 0x80 ? 1 : 2;
  }
  return out;
}

}  // namespace

void PreTokenizer::split(std::string_view text, std::vector<std::string>& out) const {
  if (steps_.empty()) {
    if (!text.empty()) out.emplace_back(text);
    return;
  }
  // Match data sized for the largest pattern, made per call so split() is re-entrant.
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> md(pcre2_match_data_create(32, nullptr),
                                                                    pcre2_match_data_free);
  std::vector<std::string> cur, next;
  bool mapped = false;
  for (size_t i = 0; i < steps_.size(); ++i) {
    const Step& step = *steps_[i];
    // The usual case, one step on the raw text, writes straight to `out`.
    const bool direct = steps_.size() == 1 && !step.byte_level;
    std::vector<std::string>& dst = direct ? out : next;
    if (i == 0)
      step.apply(text, md.get(), dst);
    else
      for (const auto& piece : cur) step.apply(piece, md.get(), dst);
    if (direct) return;
    if (step.byte_level && !mapped) {
      for (auto& piece : next) piece = to_stand_ins(piece);
      mapped = true;
    }
    cur.swap(next);
    next.clear();
  }
  for (auto& piece : cur) out.push_back(mapped ? from_stand_ins(piece) : std::move(piece));
}

}  // namespace tandem
