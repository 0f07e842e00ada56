// Pre-tokenizer: splits text into the pieces BPE runs on, by a sequence of PCRE2 regex splits
// (UTF + UCP, so \p{L}, \p{N}, \s follow Unicode). Built from tokenizer.json's "pre_tokenizer" or
// from a llama.cpp pre-tokenizer name (GGUF tokenizer.ggml.pre). Private to the core.
// Owner: owns its compiled patterns. Thread: split() may run on many threads at once (match data is
// per call). Sync: none.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <rapidjson/document.h>

namespace tandem {

// GPT-2's byte↔unicode mapping: every byte has a printable stand-in character, so BPE works on
// text while covering arbitrary bytes.
struct ByteMap {
  std::array<std::string, 256> to_char;  // byte → UTF-8 of its stand-in
  std::array<int16_t, 324> to_byte;      // stand-in code point → byte, -1 for none
  ByteMap();
  static const ByteMap& get();
};

class PreTokenizer {
 public:
  struct Step;

  // `node` is tokenizer.json's "pre_tokenizer" value (null: the whole text is one piece); `where`
  // names it in errors ("tokenizer.json: pre_tokenizer").
  static std::unique_ptr<PreTokenizer> from_json(const rapidjson::Value& node, const std::string& where);

  // What a llama.cpp name implies beyond the splits.
  struct GgmlTraits {
    bool ignore_merges = false;  // a piece that is itself a token is emitted whole
    bool add_bos = false;        // default when the file does not say
  };
  // A tokenizer.ggml.pre name ("gpt-2", "pixtral", …); unknown names are an error naming `where`.
  static std::unique_ptr<PreTokenizer> from_ggml(const std::string& name, const std::string& where,
                                                 GgmlTraits* traits);

  ~PreTokenizer();
  // Appends the pieces of `text` to `out`, in order. Empty pieces are dropped.
  void split(std::string_view text, std::vector<std::string>& out) const;
  const std::string& name() const { return name_; }

 private:
  PreTokenizer();
  void add_json(const rapidjson::Value& node, const std::string& where, std::vector<std::string>& names);
  std::vector<std::unique_ptr<Step>> steps_;
  std::string name_;
};

}  // namespace tandem
