// UTF-8 repair and the streaming detokenizer: tokens carry bytes, and a character may span tokens,
// so text is handed out only once a character is whole (or can never become whole).
#include <string>

#include "tandem/text/tokenizer.h"

namespace tandem {
namespace {

constexpr const char* kReplacement = "\xEF\xBF\xBD";  // U+FFFD

enum class Seq { Whole, Bad, Cut };

// The sequence starting at s[i] (Unicode Table 3-7): a whole character, the maximal subpart of an
// ill-formed one (one U+FFFD each), or a well-formed start that the end of `s` cuts off.
Seq next_seq(std::string_view s, size_t i, size_t& len) {
  const unsigned char c = s[i];
  len = 1;
  if (c < 0x80) return Seq::Whole;
  int need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
  } else if (c == 0xE0) {
    need = 2, lo = 0xA0;
  } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
    need = 2;
  } else if (c == 0xED) {
    need = 2, hi = 0x9F;  // no surrogates
  } else if (c == 0xF0) {
    need = 3, lo = 0x90;
  } else if (c >= 0xF1 && c <= 0xF3) {
    need = 3;
  } else if (c == 0xF4) {
    need = 3, hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return Seq::Bad;  // a continuation byte, C0, C1 or F5..FF
  }
  for (int j = 0; j < need; ++j, ++len) {
    if (i + len >= s.size()) return Seq::Cut;
    const unsigned char d = s[i + len];
    if (d < lo || d > hi) return Seq::Bad;
    lo = 0x80, hi = 0xBF;
  }
  return Seq::Whole;
}

}  // namespace

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t len = 0;
  for (size_t i = 0; i < bytes.size(); i += len) {
    if (next_seq(bytes, i, len) == Seq::Whole)
      out.append(bytes.substr(i, len));
    else
      out += kReplacement;
  }
  return out;
}

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {}

std::string StreamDecoder::push(int32_t id) {
  const std::string& bytes = tokenizer_.token_bytes(id);  // checks the id
  if (skip_special_ && tokenizer_.is_special(id)) return {};
  pending_ += bytes;
  std::string out;
  size_t i = 0, len = 0;
  for (; i < pending_.size(); i += len) {
    Seq s = next_seq(pending_, i, len);
    if (s == Seq::Cut) break;  // the next token may finish it
    if (s == Seq::Whole)
      out.append(pending_, i, len);
    else
      out += kReplacement;
  }
  pending_.erase(0, i);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = utf8_lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace tandem
