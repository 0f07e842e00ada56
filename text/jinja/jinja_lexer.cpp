// Jinja lexer. Whitespace rules are Jinja2's: '{%-' strips all whitespace before the tag, '-%}' all
// after; with lstrip_blocks, spaces and tabs between a line start and '{%'/'{#' go; with trim_blocks,
// the first newline after '%}'/'#}' goes; '+' turns either off for one tag.
#include "jinja_lexer.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "jinja_text.h"
#include "tandem/error.h"

namespace tandem::jinja {

Source::Source(std::string name_, std::string_view raw) : name(std::move(name_)) {
  text.reserve(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] == '\r') {
      text += '\n';
      if (i + 1 < raw.size() && raw[i + 1] == '\n') ++i;
    } else {
      text += raw[i];
    }
  }
  if (!text.empty() && text.back() == '\n') text.pop_back();  // keep_trailing_newline=False
  line_starts.push_back(0);
  for (size_t i = 0; i < text.size(); ++i)
    if (text[i] == '\n') line_starts.push_back(i + 1);
}

std::string Source::where(size_t offset) const {
  offset = std::min(offset, text.size());
  const size_t line = std::upper_bound(line_starts.begin(), line_starts.end(), offset) - line_starts.begin();
  const size_t col = text::length(std::string_view(text).substr(line_starts[line - 1], offset - line_starts[line - 1]));
  return name + ":" + std::to_string(line) + ":" + std::to_string(col + 1);
}

namespace {

bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
 public:
  explicit Lexer(const Source& src) : src_(src), s_(src.text) {}

  std::vector<Token> run() {
    while (pos_ < s_.size()) {
      const size_t p = next_tag(pos_);
      std::string text = s_.substr(pos_, p == std::string::npos ? std::string::npos : p - pos_);
      if (p == std::string::npos) {
        push_text(std::move(text), pos_);
        break;
      }
      const char kind = s_[p + 1];
      const char mod = p + 2 < s_.size() ? s_[p + 2] : '\0';
      if (mod == '-') {
        text = rstrip(text);
      } else if (mod != '+' && kind != '{') {
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting_) && text.find_first_not_of(" \t", l_pos) == std::string::npos)
          text.resize(l_pos);
      }
      push_text(std::move(text), pos_);
      const size_t body = p + 2 + (mod == '-' || mod == '+' ? 1 : 0);
      if (kind == '#') {
        comment(p, body);
      } else {
        tag(p, body, kind);
      }
    }
    tokens_.push_back(Token{Tok::eof, "", s_.size()});
    return std::move(tokens_);
  }

 private:
  template <class... A>
  [[noreturn]] void error(size_t offset, const A&... parts) const {
    std::ostringstream os;  // parts may quote the template's text: one line, whatever it holds
    tandem::detail::append(os, parts...);
    fail(src_.where(offset), ": ", printable(os.str()));
  }

  size_t next_tag(size_t from) const {
    for (size_t i = s_.find('{', from); i != std::string::npos; i = s_.find('{', i + 1)) {
      if (i + 1 < s_.size() && (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  static std::string rstrip(const std::string& t) { return text::strip(t, std::nullopt, false, true); }

  // Skips whitespace (Unicode, as Python's \s) from i.
  size_t skip_space(size_t i) const {
    while (i < s_.size()) {
      size_t j = i;
      if (!text::is_space(text::decode(s_, j))) break;
      i = j;
    }
    return i;
  }

  void push_text(std::string text, size_t offset) {
    if (!text.empty()) tokens_.push_back(Token{Tok::text, std::move(text), offset});
  }

  void comment(size_t open, size_t body) {
    const size_t close = s_.find("#}", body);
    if (close == std::string::npos) error(open, "comment is not closed with '#}'");
    size_t after = close + 2;
    const char mod = close > body ? s_[close - 1] : '\0';
    if (mod == '-') {
      after = skip_space(after);
    } else if (mod != '+' && after < s_.size() && s_[after] == '\n') {
      ++after;  // trim_blocks
    }
    line_starting_ = s_[after - 1] == '\n';
    pos_ = after;
  }

  void tag(size_t open, size_t body, char kind) {
    const bool is_var = kind == '{';
    const char* close = is_var ? "}}" : "%}";
    tokens_.push_back(Token{is_var ? Tok::var_begin : Tok::block_begin, "", open});
    std::vector<char> brackets;
    size_t i = body;
    while (true) {
      i = skip_space(i);
      if (i >= s_.size()) error(open, "tag is not closed with '", close, "'");
      if (brackets.empty()) {
        size_t after = std::string::npos;
        if (s_[i] == '-' && s_.compare(i + 1, 2, close) == 0) {
          after = skip_space(i + 3);
        } else if (!is_var && s_[i] == '+' && s_.compare(i + 1, 2, close) == 0) {
          after = i + 3;
        } else if (s_.compare(i, 2, close) == 0) {
          after = i + 2;
          if (!is_var && after < s_.size() && s_[after] == '\n') ++after;  // trim_blocks
        }
        if (after != std::string::npos) {
          tokens_.push_back(Token{is_var ? Tok::var_end : Tok::block_end, "", i});
          line_starting_ = s_[after - 1] == '\n';
          pos_ = after;
          return;
        }
      }
      i = token(i, brackets);
    }
  }

  size_t token(size_t i, std::vector<char>& brackets) {
    const char c = s_[i];
    if (is_name_start(c)) {
      size_t j = i;
      while (j < s_.size() && is_name_char(s_[j])) ++j;
      tokens_.push_back(Token{Tok::name, s_.substr(i, j - i), i});
      return j;
    }
    if (is_digit(c)) return number(i);
    if (c == '\'' || c == '"') return string(i);
    static const char* const two[] = {"//", "**", "==", "!=", "<=", ">="};
    for (const char* op : two)
      if (s_.compare(i, 2, op) == 0) {
        tokens_.push_back(Token{Tok::op, op, i});
        return i + 2;
      }
    if (std::string_view("+-*/%~<>=.,:|()[]{};").find(c) == std::string_view::npos)
      error(i, "unexpected character '", s_.substr(i, 1), "' in tag");
    if (c == '(' || c == '[' || c == '{') {
      brackets.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (brackets.empty() || brackets.back() != c) error(i, "unexpected '", std::string(1, c), "'");
      brackets.pop_back();
    }
    tokens_.push_back(Token{Tok::op, std::string(1, c), i});
    return i + 1;
  }

  size_t digits(size_t j) const {
    while (j < s_.size() && (is_digit(s_[j]) || (s_[j] == '_' && j + 1 < s_.size() && is_digit(s_[j + 1])))) ++j;
    return j;
  }

  size_t number(size_t i) {
    size_t j = digits(i);
    bool is_float = false;
    const bool after_dot = i > 0 && s_[i - 1] == '.';  // foo.0.1 is two subscripts, not a float
    if (!after_dot && j + 1 < s_.size() && s_[j] == '.' && is_digit(s_[j + 1])) {
      j = digits(j + 1);
      is_float = true;
    }
    if (!after_dot && j < s_.size() && (s_[j] == 'e' || s_[j] == 'E')) {
      size_t k = j + 1;
      if (k < s_.size() && (s_[k] == '+' || s_[k] == '-')) ++k;
      if (k < s_.size() && is_digit(s_[k])) {
        j = digits(k);
        is_float = true;
      }
    }
    std::string lit;
    for (size_t k = i; k < j; ++k)
      if (s_[k] != '_') lit += s_[k];
    Token t{is_float ? Tok::floating : Tok::integer, lit, i};
    if (is_float) {
      t.f = std::strtod(lit.c_str(), nullptr);
    } else {
      errno = 0;
      t.i = std::strtoll(lit.c_str(), nullptr, 10);
      if (errno == ERANGE) error(i, "integer literal ", lit, " does not fit in 64 bits");
    }
    tokens_.push_back(std::move(t));
    return j;
  }

  // Python string literal escapes (Jinja2 decodes literals with 'unicode-escape').
  size_t string(size_t i) {
    const char quote = s_[i];
    std::string out;
    size_t j = i + 1;
    while (true) {
      if (j >= s_.size()) error(i, "string literal is not closed");
      const char c = s_[j];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        ++j;
        continue;
      }
      if (j + 1 >= s_.size()) error(i, "string literal is not closed");
      const char e = s_[j + 1];
      j += 2;
      switch (e) {
        case '\n': break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case 'x':
        case 'u':
        case 'U': {
          const int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          char32_t cp = 0;
          for (int k = 0; k < n; ++k) {
            const int h = j + k < s_.size() ? hex_value(s_[j + k]) : -1;
            if (h < 0) error(j - 2, "truncated \\", std::string(1, e), " escape in string literal");
            cp = cp * 16 + h;
          }
          if (cp > 0x10FFFF) error(j - 2, "escape \\U beyond U+10FFFF in string literal");
          text::append_utf8(out, cp);
          j += n;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            char32_t cp = e - '0';
            for (int k = 0; k < 2 && j < s_.size() && s_[j] >= '0' && s_[j] <= '7'; ++k) cp = cp * 8 + (s_[j++] - '0');
            text::append_utf8(out, cp);
          } else {
            out += '\\';  // Python keeps unknown escapes as written
            out += e;
          }
      }
    }
    tokens_.push_back(Token{Tok::string, std::move(out), i});
    return j + 1;
  }

  const Source& src_;
  const std::string& s_;
  size_t pos_ = 0;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(const Source& src) { return Lexer(src).run(); }

}  // namespace tandem::jinja
