// Errors: one line that names the thing (file, key, tensor, field), what was expected, what was found.
// Owner: n/a. Thread: any. Sync: none.
#pragma once
#include <stdexcept>
#include <string>
#include <sstream>

#include "tandem/plugin_abi.h"

namespace tandem {

class TANDEM_API Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg);
  ~Error() override;
};

namespace detail {
inline void append(std::ostringstream&) {}
template <class T, class... R>
void append(std::ostringstream& os, const T& v, const R&... rest) {
  os << v;
  append(os, rest...);
}
}  // namespace detail

// Builds the message from its parts: fail("tensor '", name, "': expected ", a, ", found ", b).
template <class... A>
[[noreturn]] void fail(const A&... parts) {
  std::ostringstream os;
  detail::append(os, parts...);
  throw Error(os.str());
}

// Text from a file (a name, a key, a parser's message) made safe for a one-line error: control
// characters become '?', so a newline in the text cannot break the line.
inline std::string printable(std::string s) {
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return s;
}

// Note: the parts are evaluated even when ok is true; on hot paths, or where a part is only valid
// when the check fails, write `if (!ok) fail(...)` instead.
template <class... A>
void check(bool ok, const A&... parts) {
  if (!ok) fail(parts...);
}

// "[2, 3]"
template <class V>
std::string shape_str(const V& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace tandem
