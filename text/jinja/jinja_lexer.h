// Jinja lexer: splits a template into text and tag tokens, applying whitespace control ('-', '+') and
// transformers' settings trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False.
// Owner: free functions and value types. Thread: any. Sync: none.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::jinja {

// The template text with newlines normalized, and how to name a position in it.
struct Source {
  std::string name;  // e.g. the file name; starts every error message
  std::string text;
  std::vector<size_t> line_starts;

  Source(std::string name, std::string_view raw);
  std::string where(size_t offset) const;  // "name:line:column"
};

enum class Tok : uint8_t { text, var_begin, var_end, block_begin, block_end, name, string, integer, floating, op, eof };

struct Token {
  Tok kind;
  std::string text;  // text, name, operator, or the unescaped string literal
  size_t offset;     // into Source::text
  int64_t i = 0;
  double f = 0;
};

std::vector<Token> tokenize(const Source& src);

}  // namespace tandem::jinja
