// Stop strings over the bytes of generated tokens; what passes them becomes text by the one UTF-8 rule.
#include "tandem/text/text_stream.h"

#include <algorithm>

#include "tandem/text/text_codec.h"

namespace tandem {

TextStream::TextStream(const TextCodec& codec, std::vector<std::string> stop) : codec_(codec), stop_(std::move(stop)) {}

std::string TextStream::push(int32_t token) {
  if (stopped_) return {};
  pending_ += codec_.token_bytes(token);
  // Earliest stop string wins. Bytes already passed on cannot hold the start of one (see the hold below).
  size_t cut = std::string::npos;
  for (const auto& s : stop_) cut = std::min(cut, pending_.find(s));
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = utf8_.push(std::string_view(pending_).substr(0, cut));
    out += utf8_.flush();
    pending_.clear();
    return out;
  }
  size_t hold = 0;
  for (const auto& s : stop_)
    for (size_t k = std::min(s.size() - 1, pending_.size()); k > hold; --k)
      if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
  std::string out = utf8_.push(std::string_view(pending_).substr(0, pending_.size() - hold));
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string TextStream::flush() {
  std::string out = utf8_.push(pending_);
  out += utf8_.flush();
  pending_.clear();
  return out;
}

}  // namespace tandem
