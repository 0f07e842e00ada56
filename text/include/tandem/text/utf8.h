// UTF-8 repair, the one rule for all text tandem hands out (`tandem generate`, the server's streams,
// /detokenize, Tokenizer::decode): each maximal ill-formed subpart becomes one U+FFFD (Unicode §3.9
// "U+FFFD Substitution of Maximal Subparts", as WHATWG, Python and Rust do).
// Owner: free functions; a Utf8Decoder belongs to one stream. Thread: any; a Utf8Decoder to one
// thread at a time. Sync: none.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "tandem/plugin_abi.h"

namespace tandem {

// Unicode Table 3-7 (no overlongs, surrogates or code points past U+10FFFF) as a byte automaton:
// the state after byte c, -1 if c cannot come next. State 0 is between characters (ASCII, controls
// included, stays 0); 1..7 are inside a multi-byte character. The JSON constraint steps it byte by
// byte; everything below is built on it.
TANDEM_API int utf8_step(uint8_t state, uint8_t c);

// What starts at s[i] (i < s.size()): a whole character, the maximal subpart of an ill-formed
// one, or a well-formed start that the end of `s` cuts off. `len` is its length in bytes.
enum class Utf8Seq { whole, bad, cut };
TANDEM_API Utf8Seq utf8_sequence(std::string_view s, size_t i, size_t& len);

// `bytes` as valid UTF-8, each maximal ill-formed subpart (a cut-off end included) one U+FFFD.
TANDEM_API std::string utf8_lossy(std::string_view bytes);
TANDEM_API bool is_valid_utf8(std::string_view bytes);

// utf8_lossy, incrementally: push() returns the text that is final, holding back a trailing start
// of a character that more bytes may finish; flush() ends the stream. The pushes and the flush
// joined equal utf8_lossy of all the bytes, however they were cut.
class TANDEM_API Utf8Decoder {
 public:
  std::string push(std::string_view bytes);
  std::string flush();  // the held-back bytes, one U+FFFD for an unfinished character
  size_t pending_bytes() const { return pending_.size(); }

 private:
  std::string pending_;
};

}  // namespace tandem
