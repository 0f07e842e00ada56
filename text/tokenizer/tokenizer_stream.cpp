// The streaming detokenizer: tokens carry bytes, and a character may span tokens, so text is handed
// out only once a character is whole (or can never become whole); tandem/text/utf8.h decides which.
#include <string>

#include "tandem/text/tokenizer.h"

namespace tandem {

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {}

std::string StreamDecoder::push(int32_t id) {
  const std::string& bytes = tokenizer_.token_bytes(id);  // checks the id
  if (skip_special_ && tokenizer_.is_special(id)) return {};
  return utf8_.push(bytes);
}

std::string StreamDecoder::flush() { return utf8_.flush(); }

}  // namespace tandem
