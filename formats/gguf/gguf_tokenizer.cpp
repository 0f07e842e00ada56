// tokenizer.json and tokenizer_config.json from GGUF tokenizer metadata.
#include "gguf_tokenizer.h"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "tandem/error.h"

namespace tandem::gguf {
namespace {

using JsonWriter = rapidjson::Writer<rapidjson::StringBuffer>;

constexpr int32_t kControl = 3, kUserDefined = 4;

void string(JsonWriter& w, const std::string& s) { w.String(s.data(), rapidjson::SizeType(s.size())); }

// The text of the token whose id a key holds, if the key and the token exist.
std::optional<std::string> token_text(const Metadata& m, const std::vector<std::string>& tokens, const char* key) {
  std::optional<uint32_t> id = m.get<uint32_t>(key);
  if (!id || *id >= tokens.size()) return std::nullopt;
  return tokens[*id];
}

}  // namespace

std::optional<std::string> tokenizer_json(const Metadata& m) {
  std::optional<std::vector<std::string>> tokens = m.get_array<std::string>("tokenizer.ggml.tokens");
  if (!tokens) return std::nullopt;
  const std::string model = m.get<std::string>("tokenizer.ggml.model").value_or("gpt2");
  check(model == "gpt2", m.where(), ": key 'tokenizer.ggml.model' is '", model,
        "', tandem reads only gpt2 (byte-level BPE) tokenizers");
  std::vector<int32_t> types = m.get_array<int32_t>("tokenizer.ggml.token_type").value_or(std::vector<int32_t>{});
  check(types.empty() || types.size() == tokens->size(), m.where(), ": key 'tokenizer.ggml.token_type' has ",
        types.size(), " entries, expected one per token (", tokens->size(), ")");
  std::vector<std::string> merges = m.get_array<std::string>("tokenizer.ggml.merges").value_or(std::vector<std::string>{});
  const std::string pre = m.get<std::string>("tokenizer.ggml.pre").value_or("default");

  rapidjson::StringBuffer buf;
  JsonWriter w(buf);
  w.StartObject();
  w.Key("version");
  w.String("1.0");
  w.Key("truncation");
  w.Null();
  w.Key("padding");
  w.Null();
  w.Key("added_tokens");
  w.StartArray();
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i] != kControl && types[i] != kUserDefined) continue;
    const bool special = types[i] == kControl;
    w.StartObject();
    w.Key("id");
    w.Uint64(i);
    w.Key("content");
    string(w, (*tokens)[i]);
    w.Key("single_word");
    w.Bool(false);
    w.Key("lstrip");
    w.Bool(false);
    w.Key("rstrip");
    w.Bool(false);
    w.Key("normalized");
    w.Bool(!special);
    w.Key("special");
    w.Bool(special);
    w.EndObject();
  }
  w.EndArray();
  w.Key("normalizer");
  w.Null();
  // llama.cpp chooses the split regex from this name; the tokenizer reproduces that choice.
  w.Key("pre_tokenizer");
  w.StartObject();
  w.Key("type");
  w.String("ggml");
  w.Key("name");
  string(w, pre);
  w.EndObject();
  w.Key("post_processor");
  w.Null();
  w.Key("decoder");
  w.StartObject();
  w.Key("type");
  w.String("ByteLevel");
  w.Key("add_prefix_space");
  w.Bool(false);
  w.Key("trim_offsets");
  w.Bool(true);
  w.Key("use_regex");
  w.Bool(true);
  w.EndObject();
  w.Key("model");
  w.StartObject();
  w.Key("type");
  w.String("BPE");
  w.Key("dropout");
  w.Null();
  w.Key("unk_token");
  if (auto unk = token_text(m, *tokens, "tokenizer.ggml.unknown_token_id")) string(w, *unk);
  else w.Null();
  w.Key("continuing_subword_prefix");
  w.Null();
  w.Key("end_of_word_suffix");
  w.Null();
  w.Key("fuse_unk");
  w.Bool(false);
  w.Key("byte_fallback");
  w.Bool(false);
  w.Key("vocab");
  w.StartObject();
  for (size_t i = 0; i < tokens->size(); ++i) {
    string(w, (*tokens)[i]);
    w.Uint64(i);
  }
  w.EndObject();
  w.Key("merges");
  w.StartArray();
  for (const std::string& s : merges) string(w, s);
  w.EndArray();
  w.EndObject();
  w.EndObject();
  return std::string(buf.GetString(), buf.GetSize());
}

std::optional<std::string> tokenizer_config_json(const Metadata& m) {
  std::optional<std::vector<std::string>> tokens = m.get_array<std::string>("tokenizer.ggml.tokens");
  std::optional<std::string> tmpl = m.get<std::string>("tokenizer.chat_template");
  if (!tokens && !tmpl) return std::nullopt;
  const std::vector<std::string> none;
  const std::vector<std::string>& t = tokens ? *tokens : none;

  rapidjson::StringBuffer buf;
  JsonWriter w(buf);
  w.StartObject();
  if (tmpl) {
    w.Key("chat_template");
    string(w, *tmpl);
  }
  static const std::pair<const char*, const char*> kSpecial[] = {
      {"bos_token", "tokenizer.ggml.bos_token_id"},
      {"eos_token", "tokenizer.ggml.eos_token_id"},
      {"unk_token", "tokenizer.ggml.unknown_token_id"},
      {"pad_token", "tokenizer.ggml.padding_token_id"},
  };
  for (const auto& [name, key] : kSpecial)
    if (auto text = token_text(m, t, key)) {
      w.Key(name);
      string(w, *text);
    }
  for (const char* name : {"add_bos_token", "add_eos_token"})
    if (auto v = m.get<bool>(std::string("tokenizer.ggml.") + name)) {
      w.Key(name);
      w.Bool(*v);
    }
  w.EndObject();
  return std::string(buf.GetString(), buf.GetSize());
}

}  // namespace tandem::gguf
