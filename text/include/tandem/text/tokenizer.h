// Byte-level BPE tokenizer (GPT-2 byte↔unicode mapping) built from an HF tokenizer.json text, or
// from the one a GGUF checkpoint synthesizes ("pre_tokenizer": {"type": "ggml", "name": …}), plus
// a streaming detokenizer that only ever hands out whole UTF-8 characters.
// Owner: a Tokenizer shares its immutable tables between copies; a StreamDecoder borrows its
// Tokenizer, which must outlive it. Thread: a Tokenizer's const methods may be called from any
// thread at once; a StreamDecoder belongs to one sequence and one thread. Sync: none.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/plugin_abi.h"
#include "tandem/text/utf8.h"

namespace tandem {

// A piece of a prompt. `plain`: ordinary text (a chat user's words), in which no added token is
// read, special or not; otherwise the text of the prompt's own format, whose added-token strings
// become their ids.
struct TextSegment {
  std::string text;
  bool plain = false;
};

class TANDEM_API Tokenizer {
 public:
  // tokenizer_json: the text of tokenizer.json (model.vocab, model.merges as "a b" or [a, b],
  // added_tokens, pre_tokenizer, model.ignore_merges). tokenizer_config_json (optional, "" when
  // absent): bos_token, eos_token, add_bos_token, add_eos_token, chat_template. `source` names the
  // file in error messages. Errors: one line naming the field (missing model.vocab, a bad merges
  // entry, an unknown pre-tokenizer, …).
  static Tokenizer from_json(const std::string& tokenizer_json, const std::string& tokenizer_config_json = "",
                             const std::string& source = "tokenizer.json");

  // Text → ids. Added tokens that are not special are always matched first (longest first);
  // special ones only with parse_special, otherwise their text is tokenized like any other.
  // add_special prepends bos when add_bos() (and appends eos when add_eos()).
  std::vector<int32_t> encode(std::string_view text, bool parse_special = false, bool add_special = false) const;
  // Segments → ids, as encode(joined text, true, add_special) would give them except that an added
  // token is read only where it lies wholly in segments that are not plain. Text runs across segment
  // boundaries into BPE as one, so a prompt of ordinary words gets the ids its joined text gets.
  std::vector<int32_t> encode(const std::vector<TextSegment>& segments, bool add_special = false) const;
  // Ids → text. Byte sequences that are not valid UTF-8 (a character cut by the end of `ids`)
  // become U+FFFD. skip_special drops special (control) tokens. An id outside the vocabulary is an
  // error naming it.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;
  // The raw bytes one token stands for (may be part of a UTF-8 character).
  const std::string& token_bytes(int32_t id) const;
  // The pieces BPE sees for `text` (no added-token matching), as raw bytes (a split after an HF
  // ByteLevel step may cut a character): for tests and inspect.
  std::vector<std::string> pre_tokenize(std::string_view text) const;

  // The vocabulary string of an id, as tokenizer.json spells it ("Ġthe"); error when out of range.
  const std::string& token_text(int32_t id) const;
  // The id of a vocabulary string (tokenizer.json spelling, or an added token's content); -1 if none.
  int32_t token_id(std::string_view text) const;
  int32_t vocab_size() const;  // one past the largest id
  bool is_special(int32_t id) const;
  // The content of every added token (special or not), e.g. "<|im_end|>", "<think>".
  std::vector<std::string> added_texts() const;

  int32_t bos_id() const;  // -1 when none
  int32_t eos_id() const;  // -1 when none
  bool add_bos() const;
  bool add_eos() const;
  // End of generation: eos plus tokens such as <|im_end|>, <|eot_id|>, <|endoftext|> when present.
  bool is_eog(int32_t id) const;
  const std::vector<int32_t>& eog_ids() const;
  // From tokenizer_config.json ("" when absent).
  const std::string& chat_template() const;
  // What the pre-tokenizer is, for inspect: "ggml:pixtral", "Sequence[Split, ByteLevel]", ….
  const std::string& pre_tokenizer_name() const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;
};

// Feeds token ids one at a time and returns only complete UTF-8 text: bytes of a character that the
// next token may finish are held back; bytes that can never be valid become U+FFFD at once (a
// Utf8Decoder, the rule TextStream follows too).
// The concatenation of every push() and the final flush() equals Tokenizer::decode of all ids.
class TANDEM_API StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false);
  std::string push(int32_t id);
  // The held-back remainder, with U+FFFD for an unfinished character; the decoder is then empty.
  std::string flush();
  size_t pending_bytes() const { return utf8_.pending_bytes(); }

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  Utf8Decoder utf8_;
};

// Byte b (0..255) as the character byte-level BPE vocabularies use for it (GPT-2's alphabet), UTF-8.
TANDEM_API const std::string& byte_level_symbol(int b);

}  // namespace tandem
