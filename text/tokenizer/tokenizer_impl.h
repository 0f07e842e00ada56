// The tables behind a Tokenizer, shared by loading (tokenizer_load.cpp) and encoding/decoding
// (tokenizer.cpp). Private to the core.
// Owner: a Tokenizer holds one Impl through a shared_ptr<const Impl>. Thread: immutable once built,
// so any thread may read it. Sync: none.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tandem/text/tokenizer.h"
#include "tokenizer_pretok.h"

namespace tandem {

// Added tokens, matched on raw text before pre-tokenization: a byte trie, longest match wins.
class AddedTokens {
 public:
  struct Entry {
    std::string content;
    int32_t id;
    bool special, lstrip, rstrip, single_word;
  };
  void add(Entry e);
  // The longest entry starting at text[pos] (special ones only when allowed), or nullptr.
  const Entry* match(std::string_view text, size_t pos, bool allow_special) const;
  bool may_start(unsigned char c) const { return first_[c]; }
  bool empty() const { return entries_.empty(); }

 private:
  std::vector<Entry> entries_;
  std::unordered_map<uint64_t, int32_t> edges_;  // (node << 8 | byte) → child node
  std::vector<int32_t> terminal_;                // node → entry index, -1 for none
  std::array<bool, 256> first_{};
};

// std::string keys found by string_view without a copy.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

struct Tokenizer::Impl {
  enum : uint8_t { kPresent = 1, kAdded = 2, kSpecial = 4 };
  struct Merge {
    int32_t rank, result;
  };

  std::vector<std::string> text;   // id → tokenizer.json spelling
  std::vector<std::string> bytes;  // id → raw bytes it stands for
  std::vector<uint8_t> flags;      // id → kPresent | kAdded | kSpecial
  TokenMap ids;                                     // spelling or added content → id
  std::unordered_map<uint64_t, Merge> merges;       // (left id << 32 | right id) → rank, result
  std::array<int32_t, 256> byte_ids{};              // byte → id of its one-character token, -1 if none
  AddedTokens added;
  std::unique_ptr<PreTokenizer> pre;
  bool ignore_merges = false;

  int32_t bos = -1, eos = -1, unk = -1;
  bool add_bos = false, add_eos = false;
  std::vector<int32_t> eog;
  std::string chat_template;

  static uint64_t pair_key(int32_t a, int32_t b) { return uint64_t(uint32_t(a)) << 32 | uint32_t(b); }
  void check_id(int32_t id) const;
  // Appends the BPE ids of one pre-tokenized piece.
  void bpe(std::string_view piece, std::vector<int32_t>& out) const;
  void encode_text(std::string_view text, std::vector<int32_t>& out, std::vector<std::string>& scratch) const;
  // Tokenizer::encode; `plain`: sorted, disjoint byte ranges [first, second) in which no added token is read.
  std::vector<int32_t> encode(std::string_view text, const std::vector<std::pair<size_t, size_t>>& plain,
                              bool parse_special, bool add_special) const;
};

// Builds the tables from tokenizer.json (+ tokenizer_config.json) text; errors name the field.
std::shared_ptr<const Tokenizer::Impl> load_tokenizer(const std::string& tokenizer_json,
                                                      const std::string& config_json, const std::string& source);

}  // namespace tandem
