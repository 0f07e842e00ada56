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

int utf8_step(uint8_t state, uint8_t c) {
  const bool cont = c >= 0x80 && c <= 0xBF;
  switch (state) {
    case 0:
      if (c < 0x80) return 0;
      if (c >= 0xC2 && c <= 0xDF) return 1;
      if (c == 0xE0) return 3;
      if (c == 0xED) return 4;
      if (c >= 0xE1 && c <= 0xEF) return 2;
      if (c == 0xF0) return 6;
      if (c >= 0xF1 && c <= 0xF3) return 5;
      if (c == 0xF4) return 7;
      return -1;
    case 1: return cont ? 0 : -1;                            // 1 more
    case 2: return cont ? 1 : -1;                            // 2 more
    case 3: return (c >= 0xA0 && c <= 0xBF) ? 1 : -1;        // after E0: no overlong
    case 4: return (c >= 0x80 && c <= 0x9F) ? 1 : -1;        // after ED: no surrogates
    case 5: return cont ? 2 : -1;                            // 3 more
    case 6: return (c >= 0x90 && c <= 0xBF) ? 2 : -1;        // after F0: no overlong
    case 7: return (c >= 0x80 && c <= 0x8F) ? 2 : -1;        // after F4: ≤ U+10FFFF
  }
  return -1;
}

Utf8Seq utf8_sequence(std::string_view s, size_t i, size_t& len) {
  int state = 0;
  for (len = 0; i + len < s.size();) {
    state = utf8_step(uint8_t(state), uint8_t(s[i + len]));
    if (state < 0) {
      len = len ? len : 1;  // the bytes before the one that cannot follow: the maximal subpart
      return Utf8Seq::bad;
    }
    ++len;
    if (state == 0) return Utf8Seq::whole;
  }
  return Utf8Seq::cut;
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
