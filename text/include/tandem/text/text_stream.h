// Turns generated tokens into text that is safe to send: holds back a trailing partial UTF-8
// character and any suffix that could start a stop string, and cuts the text at the first stop
// string (spec/server.md §4 "Hold back"). Everything it returns is final.
// Owner: one per request, used on the engine thread only. Thread: one. Sync: none.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

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
  std::string pending_;  // decoded bytes not sent yet
  bool stopped_ = false;
};

// `s` with every invalid UTF-8 sequence replaced by U+FFFD, so JSON output stays valid.
std::string valid_utf8(const std::string& s);
// Whether `s` is entirely valid UTF-8.
bool is_valid_utf8(const std::string& s);

}  // namespace tandem
