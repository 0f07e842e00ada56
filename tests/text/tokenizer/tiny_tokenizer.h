// A hand-written byte-level BPE tokenizer.json for tests: every printable ASCII character, Ġ (space)
// and Ċ (newline) as single-character tokens, plus the merges, extra tokens and other top-level
// fields a test asks for.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace tandem::test {

struct TinySpec {
  std::vector<std::string> extra_tokens;  // after the single characters, in order
  std::string merges_json = "[]";         // the model.merges array as JSON
  std::string added_json = "[]";          // the added_tokens array as JSON
  std::string pre_json = "null";          // pre_tokenizer
  std::string model_extra;                // more model fields: "\"ignore_merges\": true"
  std::string top_extra;                  // more top-level fields
};

inline std::string json_quote(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o + "\"";
}

// Ids: printable ASCII 0x21..0x7E are 0..93, "Ġ" is 94, "Ċ" is 95, extra tokens follow from 96.
inline int tiny_id(char c) { return c == ' ' ? 94 : c == '\n' ? 95 : c - 0x21; }

inline std::string tiny_json(const TinySpec& spec) {
  std::vector<std::string> vocab;
  for (int c = 0x21; c <= 0x7E; ++c) vocab.push_back(std::string(1, char(c)));
  vocab.push_back("\xC4\xA0");  // Ġ, byte 0x20
  vocab.push_back("\xC4\x8A");  // Ċ, byte 0x0A
  for (const auto& t : spec.extra_tokens) vocab.push_back(t);
  std::string v = "{";
  for (size_t i = 0; i < vocab.size(); ++i) v += (i ? ", " : "") + json_quote(vocab[i]) + ": " + std::to_string(i);
  v += "}";
  std::string j = "{\"version\": \"1.0\", \"added_tokens\": " + spec.added_json +
                  ", \"normalizer\": null, \"pre_tokenizer\": " + spec.pre_json +
                  ", \"model\": {\"type\": \"BPE\", \"vocab\": " + v + ", \"merges\": " + spec.merges_json;
  if (!spec.model_extra.empty()) j += ", " + spec.model_extra;
  j += "}";
  if (!spec.top_extra.empty()) j += ", " + spec.top_extra;
  return j + "}";
}

}  // namespace tandem::test
