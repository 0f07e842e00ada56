// Unicode text helpers for the Jinja interpreter: UTF-8 code points and Python's str semantics
// (isspace, strip, split, splitlines, repr, float repr, json.dumps escaping).
// Owner: free functions. Thread: any. Sync: none.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::jinja::text {

// A byte that is not part of a valid UTF-8 character decodes as kByteEscape | byte (a lone low
// surrogate, as Python's surrogateescape does), and append_utf8 writes such a code point back as the
// byte: a string survives strip(), split() and slicing byte for byte. The chat prompt's markers for
// user text (tandem/text/chat_template.h) are such bytes.
inline constexpr char32_t kByteEscape = 0xDC00;
// One code point at s[i], advancing i (one byte for an escaped one).
char32_t decode(std::string_view s, size_t& i);
void append_utf8(std::string& out, char32_t c);
std::u32string to_u32(std::string_view s);
std::string to_utf8(std::u32string_view s);
size_t length(std::string_view s);  // in code points, as Python's len()

bool is_space(char32_t c);  // str.isspace()

// Case mapping covers Latin, Greek and Cyrillic (simple mappings, plus ß -> SS); other scripts pass unchanged.
std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string capitalize(std::string_view s);   // str.capitalize(): first upper, rest lower
std::string title_method(std::string_view s); // str.title(): upper after a non-letter, lower after a letter
std::string title_filter(std::string_view s); // Jinja's |title: words split on whitespace, '-', and opening brackets
bool is_lower(std::string_view s);            // str.islower()
bool is_upper(std::string_view s);            // str.isupper()

// str.strip(chars) family: chars == nullopt strips whitespace.
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split(sep, maxsplit) / str.rsplit; sep == nullopt splits on whitespace runs.
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> splitlines(std::string_view s, bool keepends);
// Stops early, once the result passes max_size, so a caller that limits sizes sees it too long.
std::string replace(std::string_view s, std::string_view old, std::string_view with, int64_t count,
                    size_t max_size = SIZE_MAX);

std::string python_repr(std::string_view s);  // 'quoted', escaped as Python's repr(str)
std::string float_repr(double v);             // repr(float): shortest round-trip, "1.0", "1e+16", "inf"
// Appends s as a JSON string literal, escaped as Python's json.dumps.
void json_quote(std::string& out, std::string_view s, bool ensure_ascii);

}  // namespace tandem::jinja::text
