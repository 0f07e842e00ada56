// Stop strings and UTF-8 hold-back over the bytes of generated tokens.
#include "tandem/text/text_stream.h"

#include <algorithm>

#include "tandem/text/text_codec.h"

namespace tandem {

namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 when it is invalid or cut short.
size_t utf8_len(const std::string& s, size_t i) {
  auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = b(i);
  size_t n;
  uint32_t cp;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) n = 2, cp = c & 0x1F;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, cp = c & 0x0F;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, cp = c & 0x07;
  else return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  // Overlong three/four-byte forms, surrogates and values past U+10FFFF are invalid.
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
    return 0;
  return n;
}

// Bytes at the end of `s` that begin a UTF-8 character not yet complete (0–3).
size_t incomplete_utf8_tail(const std::string& s) {
  // Look back at most 3 bytes for a lead byte whose sequence would run past the end.
  for (size_t k = 1; k <= 3 && k <= s.size(); ++k) {
    unsigned char c = static_cast<unsigned char>(s[s.size() - k]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > k ? k : 0;
  }
  return 0;
}

}  // namespace

bool is_valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    size_t n = utf8_len(s, i);
    if (!n) return false;
    i += n;
  }
  return true;
}

std::string valid_utf8(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t n = utf8_len(s, i);
    if (n) {
      o.append(s, i, n);
      i += n;
    } else {
      o += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return o;
}

TextStream::TextStream(const TextCodec& codec, std::vector<std::string> stop) : codec_(codec), stop_(std::move(stop)) {}

std::string TextStream::push(int32_t token) {
  if (stopped_) return {};
  pending_ += codec_.token_bytes(token);
  // Earliest stop string wins. Text already sent cannot hold the start of one (see the hold below).
  size_t cut = std::string::npos;
  for (const auto& s : stop_) cut = std::min(cut, pending_.find(s));
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = valid_utf8(pending_.substr(0, cut));
    pending_.clear();
    return out;
  }
  size_t hold = incomplete_utf8_tail(pending_);
  for (const auto& s : stop_)
    for (size_t k = std::min(s.size() - 1, pending_.size()); k > hold; --k)
      if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
  std::string out = valid_utf8(pending_.substr(0, pending_.size() - hold));
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string TextStream::flush() {
  std::string out = valid_utf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace tandem
