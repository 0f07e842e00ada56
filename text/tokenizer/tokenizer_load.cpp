// tokenizer.json (+ tokenizer_config.json) → Tokenizer tables: vocabulary, merge ranks, added
// tokens, pre-tokenizer, special ids. A GGUF checkpoint synthesizes the same JSON from its metadata.
#include <algorithm>
#include <optional>
#include <rapidjson/document.h>
#include <rapidjson/error/en.h>

#include "tandem/error.h"
#include "tokenizer_impl.h"

namespace tandem {
namespace {

using Value = rapidjson::Value;

std::string str_of(const Value& v) { return std::string(v.GetString(), v.GetStringLength()); }

void parse(rapidjson::Document& doc, const std::string& text, const std::string& source) {
  doc.Parse(text.data(), text.size());
  check(!doc.HasParseError(), source, ": not valid JSON at offset ", doc.GetErrorOffset(), ": ",
        rapidjson::GetParseError_En(doc.GetParseError()));
  check(doc.IsObject(), source, ": expected a JSON object at the top level");
}

const Value* member(const Value& o, const char* key) {
  auto it = o.FindMember(key);
  return it == o.MemberEnd() || it->value.IsNull() ? nullptr : &it->value;
}

bool get_bool(const Value& o, const char* key, bool def, const std::string& where) {
  const Value* v = member(o, key);
  if (!v) return def;
  check(v->IsBool(), where, ".", key, ": expected true or false");
  return v->GetBool();
}

// bos_token / eos_token / unk_token: "text", {"content": "text", …} or null.
std::string token_string(const Value& o, const char* key, const std::string& where) {
  const Value* v = member(o, key);
  if (!v) return "";
  if (v->IsString()) return str_of(*v);
  const Value* c = v->IsObject() ? member(*v, "content") : nullptr;
  check(c && c->IsString(), where, ".", key, ": expected a string or {\"content\": …}");
  return str_of(*c);
}

// Tokens that end a turn in the chat formats we serve (llama.cpp marks the same texts as EOG).
constexpr const char* kEogTexts[] = {"<|im_end|>", "<|eot_id|>", "<|endoftext|>", "<|end_of_text|>",
                                     "<|eom_id|>", "<|end|>",    "<end_of_turn>", "<EOT>"};

// Ids index dense tables, so a declared id sizes them: past this one (16 times the largest vocabulary
// released, 262,144) a file would make the tables take gigabytes.
constexpr int32_t kMaxTokenId = (1 << 22) - 1;

void read_vocab(Tokenizer::Impl& t, const Value& vocab, const std::string& where) {
  check(vocab.IsObject(), where, ": expected an object of token → id");
  int32_t max_id = -1;
  for (auto it = vocab.MemberBegin(); it != vocab.MemberEnd(); ++it) {
    check(it->value.IsInt() && it->value.GetInt() >= 0, where, "['", str_of(it->name),
          "']: expected a non-negative integer id");
    check(it->value.GetInt() <= kMaxTokenId, where, "['", str_of(it->name), "']: id ", it->value.GetInt(),
          " is past the largest supported id ", kMaxTokenId);
    max_id = std::max(max_id, it->value.GetInt());
  }
  t.text.resize(max_id + 1);
  t.flags.assign(max_id + 1, 0);
  t.ids.reserve(vocab.MemberCount());
  for (auto it = vocab.MemberBegin(); it != vocab.MemberEnd(); ++it) {
    int32_t id = it->value.GetInt();
    std::string s = str_of(it->name);
    check(!(t.flags[id] & Tokenizer::Impl::kPresent), where, ": id ", id, " is used by both '", t.text[id],
          "' and '", s, "'");
    t.flags[id] = Tokenizer::Impl::kPresent;
    t.ids.emplace(s, id);
    t.text[id] = std::move(s);
  }
}

void read_merges(Tokenizer::Impl& t, const Value& merges, const std::string& where) {
  check(merges.IsArray(), where, ": expected an array of \"a b\" strings or [a, b] pairs");
  t.merges.reserve(merges.Size());
  std::string ab;
  for (rapidjson::SizeType i = 0; i < merges.Size(); ++i) {
    const Value& m = merges[i];
    auto at = [&] { return where + "[" + std::to_string(i) + "]"; };
    std::string_view a, b;
    if (m.IsString()) {
      std::string_view s(m.GetString(), m.GetStringLength());
      // The separator is the first space after the first character (a token may be a space).
      size_t sp = s.find(' ', 1);
      check(sp != std::string_view::npos, at(), ": expected \"a b\", found '", s, "'");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else {
      check(m.IsArray() && m.Size() == 2 && m[0].IsString() && m[1].IsString(), at(),
            ": expected \"a b\" or [a, b]");
      a = std::string_view(m[0].GetString(), m[0].GetStringLength());
      b = std::string_view(m[1].GetString(), m[1].GetStringLength());
    }
    ab.assign(a);
    ab.append(b);
    auto ia = t.ids.find(a), ib = t.ids.find(b), ir = t.ids.find(ab);
    check(ia != t.ids.end(), at(), ": '", a, "' is not in model.vocab");
    check(ib != t.ids.end(), at(), ": '", b, "' is not in model.vocab");
    check(ir != t.ids.end(), at(), ": the merged token '", ab, "' is not in model.vocab");
    t.merges.emplace(Tokenizer::Impl::pair_key(ia->second, ib->second),
                     Tokenizer::Impl::Merge{int32_t(i), ir->second});  // a repeated pair keeps its first rank
  }
}

void read_added(Tokenizer::Impl& t, const Value& list, const std::string& where) {
  check(list.IsArray(), where, ": expected an array");
  for (rapidjson::SizeType i = 0; i < list.Size(); ++i) {
    const Value& a = list[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    check(a.IsObject(), at, ": expected an object");
    const Value* id = member(a, "id");
    const Value* content = member(a, "content");
    check(id && id->IsInt() && id->GetInt() >= 0, at, ".id: expected a non-negative integer");
    check(id->GetInt() <= kMaxTokenId, at, ".id: ", id->GetInt(), " is past the largest supported id ", kMaxTokenId);
    check(content && content->IsString() && content->GetStringLength() > 0, at, ".content: expected a non-empty string");
    AddedTokens::Entry e{str_of(*content), id->GetInt(), get_bool(a, "special", false, at),
                         get_bool(a, "lstrip", false, at), get_bool(a, "rstrip", false, at),
                         get_bool(a, "single_word", false, at)};
    if (size_t(e.id) >= t.text.size()) {
      t.text.resize(e.id + 1);
      t.flags.resize(e.id + 1, 0);
    }
    check(!(t.flags[e.id] & Tokenizer::Impl::kAdded), at, ": id ", e.id, " appears twice in added_tokens");
    t.text[e.id] = e.content;
    t.flags[e.id] = Tokenizer::Impl::kPresent | Tokenizer::Impl::kAdded | (e.special ? Tokenizer::Impl::kSpecial : 0);
    t.ids[e.content] = e.id;  // the added token wins over a vocabulary entry of the same text
    t.added.add(std::move(e));
  }
}

// The bytes a vocabulary token stands for: each character through the byte map. A token with a
// character outside the map (an added token's raw text) stands for its own UTF-8.
std::string token_to_bytes(const std::string& s) {
  const ByteMap& m = ByteMap::get();
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    unsigned char c = s[i];
    uint32_t cp;
    size_t n;
    if (c < 0x80) {
      cp = c, n = 1;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < s.size()) {
      cp = (c & 0x1F) << 6 | (s[i + 1] & 0x3F), n = 2;
    } else {
      return s;  // every stand-in is below U+0800: two bytes at most
    }
    if (cp >= m.to_byte.size() || m.to_byte[cp] < 0) return s;
    out.push_back(char(m.to_byte[cp]));
    i += n;
  }
  return out;
}

// The special token HF's TemplateProcessing puts before a single text ("" when none); it may sit in
// a Sequence of processors (Llama 3: ByteLevel, then TemplateProcessing).
std::string template_bos(const Value& post) {
  const Value* type = post.IsObject() ? member(post, "type") : nullptr;
  if (!type || !type->IsString()) return "";
  if (str_of(*type) == "Sequence") {
    const Value* list = member(post, "processors");
    if (list && list->IsArray())
      for (const Value& p : list->GetArray())
        if (std::string s = template_bos(p); !s.empty()) return s;
    return "";
  }
  const Value* single = member(post, "single");
  if (str_of(*type) != "TemplateProcessing" || !single || !single->IsArray() || single->Empty() ||
      !single->Begin()->IsObject())
    return "";
  const Value* st = member(*single->Begin(), "SpecialToken");
  const Value* id = st && st->IsObject() ? member(*st, "id") : nullptr;
  return id && id->IsString() ? str_of(*id) : "";
}

void read_config(Tokenizer::Impl& t, const std::string& config_json, const std::string& source,
                 std::string& bos_text, std::string& eos_text, std::optional<bool>& add_bos) {
  rapidjson::Document doc;
  parse(doc, config_json, source);
  bos_text = token_string(doc, "bos_token", source);
  eos_text = token_string(doc, "eos_token", source);
  if (const Value* v = member(doc, "add_bos_token")) {
    check(v->IsBool(), source, ".add_bos_token: expected true or false");
    add_bos = v->GetBool();
  }
  t.add_eos = get_bool(doc, "add_eos_token", false, source);
  if (const Value* v = member(doc, "chat_template")) {
    if (v->IsString()) {
      t.chat_template = str_of(*v);
    } else {
      // A list of named templates: the one named "default", else the first.
      check(v->IsArray() && v->Size() > 0, source, ".chat_template: expected a string or a list of {name, template}");
      for (rapidjson::SizeType i = 0; i < v->Size(); ++i) {
        const Value& e = (*v)[i];
        const Value* name = e.IsObject() ? member(e, "name") : nullptr;
        const Value* tmpl = e.IsObject() ? member(e, "template") : nullptr;
        check(tmpl && tmpl->IsString(), source, ".chat_template[", i, "].template: expected a string");
        if (i == 0 || (name && name->IsString() && str_of(*name) == "default")) t.chat_template = str_of(*tmpl);
      }
    }
  }
}

}  // namespace

std::shared_ptr<const Tokenizer::Impl> load_tokenizer(const std::string& tokenizer_json,
                                                      const std::string& config_json, const std::string& source) {
  auto t = std::make_shared<Tokenizer::Impl>();
  rapidjson::Document doc;
  parse(doc, tokenizer_json, source);

  const Value* model = member(doc, "model");
  check(model && model->IsObject(), source, ": missing 'model'");
  if (const Value* type = member(*model, "type")) {
    check(type->IsString() && str_of(*type) == "BPE", source, ": model.type '",
          type->IsString() ? str_of(*type) : "?", "' is not supported (only byte-level BPE)");
  }
  const Value* vocab = member(*model, "vocab");
  check(vocab != nullptr, source, ": missing 'model.vocab'");
  read_vocab(*t, *vocab, source + ": model.vocab");
  const Value* merges = member(*model, "merges");
  check(merges != nullptr, source, ": missing 'model.merges'");
  read_merges(*t, *merges, source + ": model.merges");
  t->ignore_merges = get_bool(*model, "ignore_merges", false, source + ": model");
  if (const Value* added = member(doc, "added_tokens")) read_added(*t, *added, source + ": added_tokens");

  if (const Value* norm = member(doc, "normalizer")) {
    // NFC is the identity on the NFC text that chat clients send; anything else changes the text.
    const Value* type = norm->IsObject() ? member(*norm, "type") : nullptr;
    std::string name = type && type->IsString() ? str_of(*type) : "?";
    check(name == "NFC", source, ": normalizer.type '", name, "' is not supported (byte-level BPE uses none or NFC)");
  }

  PreTokenizer::GgmlTraits traits;
  bool from_ggml = false;
  static const Value kNull;
  const Value* pre = member(doc, "pre_tokenizer");
  const Value* pre_type = pre && pre->IsObject() ? member(*pre, "type") : nullptr;
  if (pre_type && pre_type->IsString() && str_of(*pre_type) == "ggml") {
    const Value* name = member(*pre, "name");
    check(name && name->IsString(), source, ": pre_tokenizer.name: expected the tokenizer.ggml.pre string");
    t->pre = PreTokenizer::from_ggml(str_of(*name), source + ": pre_tokenizer.name", &traits);
    t->ignore_merges = t->ignore_merges || traits.ignore_merges;
    from_ggml = true;
  } else {
    t->pre = PreTokenizer::from_json(pre ? *pre : kNull, source + ": pre_tokenizer");
  }

  t->bytes.resize(t->text.size());
  for (size_t id = 0; id < t->text.size(); ++id)
    if (t->flags[id] & Tokenizer::Impl::kPresent)
      t->bytes[id] = t->flags[id] & Tokenizer::Impl::kAdded ? t->text[id] : token_to_bytes(t->text[id]);
  const ByteMap& bm = ByteMap::get();
  for (int b = 0; b < 256; ++b) {
    auto it = t->ids.find(bm.to_char[b]);
    t->byte_ids[b] = it == t->ids.end() ? -1 : it->second;
  }
  if (const Value* unk = member(*model, "unk_token")) {
    check(unk->IsString(), source, ": model.unk_token: expected a string");
    auto it = t->ids.find(str_of(*unk));
    check(it != t->ids.end(), source, ": model.unk_token '", str_of(*unk), "' is not a token");
    t->unk = it->second;
  }

  // Special ids: tokenizer_config.json names bos/eos by text; without it, HF's post-processor shows
  // which token it prepends.
  std::string bos_text, eos_text;
  std::optional<bool> add_bos;
  if (!config_json.empty()) read_config(*t, config_json, "tokenizer_config.json", bos_text, eos_text, add_bos);
  auto lookup = [&](const std::string& s, const char* what) {
    if (s.empty()) return int32_t(-1);
    auto it = t->ids.find(s);
    check(it != t->ids.end(), "tokenizer_config.json: ", what, " '", s, "' is not a token");
    return it->second;
  };
  t->bos = lookup(bos_text, "bos_token");
  t->eos = lookup(eos_text, "eos_token");
  if (const Value* post = member(doc, "post_processor")) {
    if (std::string bos = template_bos(*post); !bos.empty()) {
      if (t->bos < 0) t->bos = lookup(bos, "post_processor's first special token");
      if (!add_bos) add_bos = true;
    }
  }
  t->add_bos = add_bos.value_or(from_ggml && traits.add_bos) && t->bos >= 0;
  t->add_eos = t->add_eos && t->eos >= 0;

  if (t->eos >= 0) t->eog.push_back(t->eos);
  for (const char* s : kEogTexts) {
    auto it = t->ids.find(s);
    if (it != t->ids.end() && std::find(t->eog.begin(), t->eog.end(), it->second) == t->eog.end())
      t->eog.push_back(it->second);
  }
  return t;
}

}  // namespace tandem
