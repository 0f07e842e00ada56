// Turns generated tokens into text that is safe to send: holds back a trailing partial UTF-8
// character and any suffix that could start a stop string, and cuts the text at the first stop
// string (spec/server.md §4 "Hold back"). Everything it returns is final. Its text is what
// utf8_lossy (tandem/text/utf8.h) makes of the tokens' bytes up to the stop string: the server's
// streams and `tandem generate` both print through it.
// Owner: one per request, used on the engine thread only. Thread: one. Sync: none.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tandem/text/utf8.h"

namespace tandem {

class TextCodec;

class TextStream {
 public:
  TextStream(const TextCodec& codec, std::vector<std::string> stop);
  // Adds one token; returns the text that became final.
  std::string push(int32_t token);
  // At the end of generation (not by a stop string): whatever was held back, invalid bytes replaced.
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  const TextCodec& codec_;
  std::vector<std::string> stop_;
  std::string pending_;  // bytes that may begin a stop string, not given to utf8_ yet
  Utf8Decoder utf8_;     // bytes past the stop check → text, holding back a cut character
  bool stopped_ = false;
};

}  // namespace tandem
