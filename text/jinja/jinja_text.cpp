// Python str semantics over UTF-8: what chat templates observe through filters and methods.
#include "jinja_text.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "tandem/text/utf8.h"

namespace tandem::jinja::text {

char32_t decode(std::string_view s, size_t& i) {
  size_t len = 0;
  if (utf8_sequence(s, i, len) != Utf8Seq::whole) return kByteEscape | static_cast<unsigned char>(s[i++]);
  const auto b0 = static_cast<unsigned char>(s[i]);
  char32_t c = len == 1 ? b0 : b0 & (0x7F >> len);
  for (size_t k = 1; k < len; ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += len;
  return c;
}

void append_utf8(std::string& out, char32_t c) {
  if (c >= (kByteEscape | 0x80) && c <= (kByteEscape | 0xFF)) {
    out += static_cast<char>(c & 0xFF);
  } else if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

std::u32string to_u32(std::string_view s) {
  std::u32string r;
  r.reserve(s.size());
  for (size_t i = 0; i < s.size();) r += decode(s, i);
  return r;
}

std::string to_utf8(std::u32string_view s) {
  std::string r;
  r.reserve(s.size());
  for (char32_t c : s) append_utf8(r, c);
  return r;
}

size_t length(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

namespace {

// str.isprintable(), approximated by ranges: unassigned code points count as printable.
bool is_printable(char32_t c) {
  struct Range {
    char32_t lo, hi;
  };
  // Control, format, separator (other than ' '), surrogate and private-use ranges.
  static constexpr Range hidden[] = {
      {0x00, 0x1F},       {0x7F, 0xA0},       {0xAD, 0xAD},       {0x600, 0x605},     {0x61C, 0x61C},
      {0x6DD, 0x6DD},     {0x70F, 0x70F},     {0x890, 0x891},     {0x8E2, 0x8E2},     {0x1680, 0x1680},
      {0x180E, 0x180E},   {0x2000, 0x200F},   {0x2028, 0x202F},   {0x205F, 0x206F},   {0x3000, 0x3000},
      {0xD800, 0xF8FF},   {0xFEFF, 0xFEFF},   {0xFFF9, 0xFFFB},   {0xFFFE, 0xFFFF},   {0x110BD, 0x110BD},
      {0x110CD, 0x110CD}, {0x13430, 0x1343F}, {0x1BCA0, 0x1BCA3}, {0x1D173, 0x1D17A}, {0xE0001, 0xE0001},
      {0xE0020, 0xE007F}, {0xF0000, 0x10FFFF}};
  for (const auto& r : hidden)
    if (c >= r.lo && c <= r.hi) return false;
  return true;
}

char32_t to_upper(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0xB5) return c;
  if (c == 0xB5) return 0x39C;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
  if (c == 0xFF) return 0x178;
  if ((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) return c & ~char32_t{1};
  if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c & 1) ? c : c - 1;
  if (c == 0x131) return 'I';
  if (c == 0x17F) return 'S';
  if (c >= 0x3B1 && c <= 0x3CB && c != 0x3C2) return c - 32;
  if (c == 0x3C2) return 0x3A3;
  if (c == 0x3AC) return 0x386;
  if (c >= 0x3AD && c <= 0x3AF) return c - 37;
  if (c == 0x3CC) return 0x38C;
  if (c == 0x3CD || c == 0x3CE) return c - 63;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

char32_t to_lower(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0xC0) return c;
  if (c <= 0xDE && c != 0xD7) return c + 32;
  if (c == 0x178) return 0xFF;
  if ((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) return c | 1;
  if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c & 1) ? c + 1 : c;
  if (c == 0x130) return 'i';
  if (c >= 0x391 && c <= 0x3AB && c != 0x3A2) return c + 32;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 37;
  if (c == 0x38C) return 0x3CC;
  if (c == 0x38E || c == 0x38F) return c + 63;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

bool is_cased(char32_t c) { return to_upper(c) != c || to_lower(c) != c || c == 0xDF; }

template <class F>
std::string map_chars(std::string_view s, F f) {
  std::string r;
  r.reserve(s.size());
  for (size_t i = 0; i < s.size();) append_utf8(r, f(decode(s, i)));
  return r;
}
}  // namespace

std::string upper(std::string_view s) {
  std::string r;
  r.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const char32_t c = decode(s, i);
    if (c == 0xDF) {
      r += "SS";  // the one full case mapping templates are likely to meet
    } else {
      append_utf8(r, to_upper(c));
    }
  }
  return r;
}
std::string lower(std::string_view s) { return map_chars(s, to_lower); }

std::string capitalize(std::string_view s) {
  bool first = true;
  return map_chars(s, [&](char32_t c) {
    const char32_t r = first ? to_upper(c) : to_lower(c);
    first = false;
    return r;
  });
}

std::string title_method(std::string_view s) {
  bool prev_cased = false;
  return map_chars(s, [&](char32_t c) {
    const char32_t r = prev_cased ? to_lower(c) : to_upper(c);
    prev_cased = is_cased(c);
    return r;
  });
}

std::string title_filter(std::string_view s) {
  bool word_start = true;
  return map_chars(s, [&](char32_t c) {
    if (is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<') {
      word_start = true;
      return c;
    }
    const char32_t r = word_start ? to_upper(c) : to_lower(c);
    word_start = false;
    return r;
  });
}

namespace {
// str.islower / str.isupper: at least one cased character and none of the other case.
bool all_cased_are(std::string_view s, bool want_lower) {
  bool any = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = decode(s, i);
    if (!is_cased(c)) continue;
    any = true;
    const bool lower_c = to_upper(c) != c || c == 0xDF;
    if (lower_c != want_lower) return false;
  }
  return any;
}
}  // namespace

bool is_lower(std::string_view s) { return all_cased_are(s, true); }
bool is_upper(std::string_view s) { return all_cased_are(s, false); }

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  const std::u32string set = chars ? to_u32(*chars) : std::u32string();
  auto strippable = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : is_space(c); };
  const std::u32string u = to_u32(s);
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && strippable(u[b])) ++b;
  if (right)
    while (e > b && strippable(u[e - 1])) --e;
  return to_utf8(std::u32string_view(u).substr(b, e - b));
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> parts;
  if (sep) {
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      const size_t at = s.find(*sep, start);
      if (at == std::string_view::npos) break;
      parts.emplace_back(s.substr(start, at - start));
      start = at + sep->size();
    }
    parts.emplace_back(s.substr(start));
    return parts;
  }
  const std::u32string u = to_u32(s);
  size_t i = 0;
  while (true) {
    while (i < u.size() && is_space(u[i])) ++i;
    if (i == u.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      parts.push_back(to_utf8(std::u32string_view(u).substr(i)));
      break;
    }
    size_t j = i;
    while (j < u.size() && !is_space(u[j])) ++j;
    parts.push_back(to_utf8(std::u32string_view(u).substr(i, j - i)));
    i = j;
  }
  return parts;
}

std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> parts;
  if (sep) {
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      if (end < sep->size()) break;
      const size_t at = s.rfind(*sep, end - sep->size());
      if (at == std::string_view::npos) break;
      parts.emplace_back(s.substr(at + sep->size(), end - at - sep->size()));
      end = at;
    }
    parts.emplace_back(s.substr(0, end));
  } else {
    const std::u32string u = to_u32(s);
    size_t e = u.size();
    while (true) {
      while (e > 0 && is_space(u[e - 1])) --e;
      if (e == 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        parts.push_back(to_utf8(std::u32string_view(u).substr(0, e)));
        break;
      }
      size_t b = e;
      while (b > 0 && !is_space(u[b - 1])) --b;
      parts.push_back(to_utf8(std::u32string_view(u).substr(b, e - b)));
      e = b;
    }
  }
  return {parts.rbegin(), parts.rend()};
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
  std::vector<std::string> lines;
  const std::u32string u = to_u32(s);
  size_t start = 0;
  for (size_t i = 0; i < u.size(); ++i) {
    const char32_t c = u[i];
    const bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 ||
                     c == 0x2028 || c == 0x2029;
    if (!brk) continue;
    size_t eol = i + 1;
    if (c == '\r' && i + 1 < u.size() && u[i + 1] == '\n') eol = i + 2;
    lines.push_back(to_utf8(std::u32string_view(u).substr(start, (keepends ? eol : i) - start)));
    start = eol;
    i = eol - 1;
  }
  if (start < u.size()) lines.push_back(to_utf8(std::u32string_view(u).substr(start)));
  return lines;
}

std::string replace(std::string_view s, std::string_view old, std::string_view with, int64_t count, size_t max_size) {
  std::string r;
  if (old.empty()) {
    int64_t n = 0;
    for (size_t i = 0; i < s.size() && r.size() <= max_size;) {
      if (count < 0 || n < count) {
        r += with;
        ++n;
      }
      const size_t j = i;
      decode(s, i);
      r += s.substr(j, i - j);
    }
    if (count < 0 || n < count) r += with;
    return r;
  }
  size_t start = 0;
  for (int64_t n = 0; (count < 0 || n < count) && r.size() <= max_size; ++n) {
    const size_t at = s.find(old, start);
    if (at == std::string_view::npos) break;
    r += s.substr(start, at - start);
    r += with;
    start = at + old.size();
  }
  r += s.substr(start);
  return r;
}

namespace {
void hex_escape(std::string& out, const char* prefix, unsigned value, int digits) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%s%0*x", prefix, digits, value);
  out += buf;
}
}  // namespace

std::string python_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    const char32_t c = decode(s, i);
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      hex_escape(out, "\\x", c, 2);
    } else if (c < 0x80 || is_printable(c)) {
      append_utf8(out, c);
    } else if (c <= 0xFF) {
      hex_escape(out, "\\x", c, 2);
    } else if (c <= 0xFFFF) {
      hex_escape(out, "\\u", c, 4);
    } else {
      hex_escape(out, "\\U", c, 8);
    }
  }
  out += quote;
  return out;
}

std::string float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  const std::string_view sci(buf, res.ptr - buf);  // "-1.2345e+02", shortest round-trip digits
  const size_t e_at = sci.find('e');
  std::string_view mant = sci.substr(0, e_at);
  const int exp10 = std::stoi(std::string(sci.substr(e_at + 1)));
  std::string sign;
  if (!mant.empty() && mant[0] == '-') {
    sign = "-";
    mant.remove_prefix(1);
  }
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  const int decpt = exp10 + 1;  // value = 0.DIGITS * 10^decpt
  const int nd = static_cast<int>(digits.size());
  std::string out = sign;
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(-decpt, '0') + digits;
    } else if (decpt >= nd) {
      out += digits + std::string(decpt - nd, '0') + ".0";
    } else {
      out += digits.substr(0, decpt) + "." + digits.substr(decpt);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (nd > 1) out += "." + digits.substr(1);
  const int e = decpt - 1;
  char ebuf[16];
  std::snprintf(ebuf, sizeof ebuf, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
  return out + ebuf;
}

void json_quote(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    const char32_t c = decode(s, i);
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (c < 0x20 || (ensure_ascii && c == 0x7F)) {
      hex_escape(out, "\\u", c, 4);
    } else if (c < 0x80 || !ensure_ascii) {
      out.append(s.substr(start, i - start));
    } else if (c <= 0xFFFF) {
      hex_escape(out, "\\u", c, 4);
    } else {
      const char32_t v = c - 0x10000;
      hex_escape(out, "\\u", 0xD800 + (v >> 10), 4);
      hex_escape(out, "\\u", 0xDC00 + (v & 0x3FF), 4);
    }
  }
  out += '"';
}

}  // namespace tandem::jinja::text
