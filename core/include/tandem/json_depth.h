// The nesting depth of JSON text, checked by readers before they parse a file's JSON: RapidJSON frees
// (and, without kParseIterativeFlag, parses) values recursively, so a hostile file of nested
// brackets would overflow the stack.
// Owner: n/a. Thread: any. Sync: none.
#pragma once
#include <algorithm>
#include <cstddef>
#include <string_view>

namespace tandem {

// The deepest nesting of brackets in `s` (brackets inside strings not counted).
inline size_t json_depth(std::string_view s) {
  size_t depth = 0, max_depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      max_depth = std::max(max_depth, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return max_depth;
}

}  // namespace tandem
