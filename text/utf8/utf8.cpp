// The maximal-subpart rule over bytes, whole or streamed.
#include "tandem/text/utf8.h"

namespace tandem {

namespace {

constexpr const char* kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Appends the repaired text of bytes[0, end) and returns where it stopped: at `end`, or at a cut
// sequence when `hold_cut` (the stream's next bytes may finish it).
size_t repair(std::string_view bytes, bool hold_cut, std::string& out) {
  size_t i = 0, len = 0;
  for (; i < bytes.size(); i += len) {
    const Utf8Seq s = utf8_sequence(bytes, i, len);
    if (s == Utf8Seq::cut && hold_cut) break;
    if (s == Utf8Seq::whole) out.append(bytes.substr(i, len));
    else out += kReplacement;
  }
  return i;
}

}  // namespace

Utf8Seq utf8_sequence(std::string_view s, size_t i, size_t& len) {
  const unsigned char c = s[i];
  len = 1;
  if (c < 0x80) return Utf8Seq::whole;
  int need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
  } else if (c == 0xE0) {
    need = 2, lo = 0xA0;  // no overlong three-byte forms
  } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
    need = 2;
  } else if (c == 0xED) {
    need = 2, hi = 0x9F;  // no surrogates
  } else if (c == 0xF0) {
    need = 3, lo = 0x90;  // no overlong four-byte forms
  } else if (c >= 0xF1 && c <= 0xF3) {
    need = 3;
  } else if (c == 0xF4) {
    need = 3, hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return Utf8Seq::bad;  // a continuation byte, C0, C1 (overlong two-byte forms) or F5..FF
  }
  for (int j = 0; j < need; ++j, ++len) {
    if (i + len >= s.size()) return Utf8Seq::cut;
    const unsigned char d = s[i + len];
    if (d < lo || d > hi) return Utf8Seq::bad;
    lo = 0x80, hi = 0xBF;
  }
  return Utf8Seq::whole;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  repair(bytes, false, out);
  return out;
}

bool is_valid_utf8(std::string_view bytes) {
  size_t len = 0;
  for (size_t i = 0; i < bytes.size(); i += len)
    if (utf8_sequence(bytes, i, len) != Utf8Seq::whole) return false;
  return true;
}

std::string Utf8Decoder::push(std::string_view bytes) {
  pending_.append(bytes);
  std::string out;
  pending_.erase(0, repair(pending_, true, out));
  return out;
}

std::string Utf8Decoder::flush() {
  std::string out = utf8_lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace tandem
