// GPT-2's byte-level alphabet, written from its definition (independent of the tokenizer under
// test), for tests that build byte-level BPE vocabularies.
#pragma once
#include <string>

namespace tandem::test {

// Byte b as the character a byte-level BPE vocabulary uses for it, as UTF-8.
inline std::string byte_symbol(int b) {
  auto direct = [](int c) { return (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF); };
  int cp = b;
  if (!direct(b)) {
    int n = 0;
    for (int c = 0; c < b; ++c) n += !direct(c);
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) s += char(cp);
  else s += char(0xC0 | (cp >> 6)), s += char(0x80 | (cp & 0x3F));
  return s;
}

}  // namespace tandem::test
