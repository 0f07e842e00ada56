// Attribute access (obj.name), the str and dict methods templates call, and the global functions
// (range, namespace, dict, raise_exception, strftime_now). Lists are read-only: transformers renders
// in Jinja2's ImmutableSandboxedEnvironment, where list.append and friends are refused.
#include <algorithm>
#include <ctime>
#include <optional>
#include <unordered_map>

#include "jinja_eval.h"
#include "jinja_text.h"

namespace tandem::jinja {
namespace {

// `what` names the method in errors, e.g. "str.split()".
using Method = Value (*)(const Value& self, const Args& args, const std::string& what);

std::optional<std::string> opt_string(const Value* v, const std::string& what, const char* param) {
  if (!v || v->is_none()) return std::nullopt;
  if (!v->is_string()) fault(what, ": ", param, " must be a string or None, not ", v->type_name());
  return v->str();
}

int64_t int_arg(const Value* v, int64_t fallback, const std::string& what, const char* param) {
  if (!v || v->is_none()) return fallback;
  if (!v->is_int() && !v->is_bool()) fault(what, ": ", param, " must be an integer, not ", v->type_name());
  return v->as_int();
}

Value strings(const std::vector<std::string>& parts) {
  Array a;
  a.reserve(parts.size());
  for (const auto& p : parts) a.push_back(Value::string(p));
  return Value::array(std::move(a));
}

template <bool Left, bool Right>
Value m_strip(const Value& self, const Args& a, const std::string& what) {
  ArgReader r(a, what, {"chars"});
  return Value::string(text::strip(self.str(), opt_string(r.get(0), r.what(), "chars"), Left, Right));
}

template <bool FromRight>
Value m_split(const Value& self, const Args& a, const std::string& what) {
  ArgReader r(a, what, {"sep", "maxsplit"});
  const auto sep = opt_string(r.get(0), r.what(), "sep");
  if (sep && sep->empty()) fault(r.what(), ": empty separator");
  const int64_t maxsplit = int_arg(r.get(1), -1, r.what(), "maxsplit");
  return strings(FromRight ? text::rsplit(self.str(), sep, maxsplit) : text::split(self.str(), sep, maxsplit));
}

Value m_splitlines(const Value& self, const Args& a, const std::string& what) {
  ArgReader r(a, what, {"keepends"});
  return strings(text::splitlines(self.str(), r.flag(0, false)));
}

// The code points of self[start:end] for startswith/endswith/find/count.
std::u32string window(const Value& self, const ArgReader& r, size_t first) {
  return text::to_u32(to_str(slice(self, r.get_or(first, Value()), r.get_or(first + 1, Value()), Value())));
}

template <bool End>
Value m_affix(const Value& self, const Args& a, const std::string& what) {
  ArgReader r(a, what, {End ? "suffix" : "prefix", "start", "end"});
  if (!r.get(0)) fault(r.what(), " takes at least 1 argument");
  const std::u32string s = window(self, r, 1);
  auto test = [&](const Value& p) {
    if (!p.is_string()) fault(r.what(), ": arguments must be str or a tuple of str, not ", p.type_name());
    const std::u32string x = text::to_u32(p.str());
    if (x.size() > s.size()) return false;
    return End ? s.compare(s.size() - x.size(), x.size(), x) == 0 : s.compare(0, x.size(), x) == 0;
  };
  const Value& p = *r.get(0);
  if (p.is_array()) {
    for (const auto& x : p.items())
      if (test(x)) return Value::boolean(true);
    return Value::boolean(false);
  }
  return Value::boolean(test(p));
}

Value m_replace(const Value& self, const Args& a, const std::string& what) {
  ArgReader r(a, what, {"old", "new", "count"});
  const Value* o = r.get(0);
  const Value* n = r.get(1);
  if (!o || !n || !o->is_string() || !n->is_string()) fault(r.what(), " needs two string arguments");
  std::string out = text::replace(self.str(), o->str(), n->str(), int_arg(r.get(2), -1, r.what(), "count"), kMaxStringBytes);
  check_string_size(out.size(), r.what());
  return Value::string(std::move(out));
}

template <bool Reverse, bool Strict>
Value m_find(const Value& self, const Args& a, const std::string& what) {
  ArgReader r(a, what, {"sub", "start", "end"});
  if (!r.get(0) || !r.get(0)->is_string()) fault(r.what(), " needs a string argument");
  const std::u32string s = window(self, r, 1);
  const std::u32string sub = text::to_u32(r.get(0)->str());
  const size_t at = Reverse ? s.rfind(sub) : s.find(sub);
  if (at == std::u32string::npos) {
    if (Strict) fault(r.what(), ": substring not found");
    return Value::integer(-1);
  }
  // Offsets are relative to the window; shift back by the normalized start.
  const int64_t n = static_cast<int64_t>(text::length(self.str()));
  int64_t start = int_arg(r.get(1), 0, r.what(), "start");
  if (start < 0) start = std::max<int64_t>(0, start + n);
  return Value::integer(static_cast<int64_t>(at) + std::min(start, n));
}

Value m_count(const Value& self, const Args& a, const std::string& what) {
  ArgReader r(a, what, {"sub", "start", "end"});
  if (!r.get(0) || !r.get(0)->is_string()) fault(r.what(), " needs a string argument");
  const std::u32string s = window(self, r, 1);
  const std::u32string sub = text::to_u32(r.get(0)->str());
  if (sub.empty()) return Value::integer(static_cast<int64_t>(s.size()) + 1);
  int64_t n = 0;
  for (size_t at = s.find(sub); at != std::u32string::npos; at = s.find(sub, at + sub.size())) ++n;
  return Value::integer(n);
}

Value m_join(const Value& self, const Args& a, const std::string& what) {
  ArgReader r(a, what, {"iterable"});
  if (!r.get(0)) fault(r.what(), " takes exactly one argument");
  std::string out;
  size_t i = 0;
  for (const auto& x : iterate(*r.get(0))) {
    if (!x.is_string()) fault("sequence item ", i, ": expected str instance, ", x.type_name(), " found");
    if (i++) out += self.str();
    out += x.str();
    check_string_size(out.size(), r.what());
  }
  return Value::string(std::move(out));
}

// str.format with automatic ({}) or explicit ({0}, {name}) fields and !s / !r conversions.
Value m_format(const Value& self, const Args& a, const std::string& what) {
  const std::string& f = self.str();
  std::string out;
  size_t auto_index = 0;
  bool automatic = false, manual = false;
  for (size_t i = 0; i < f.size(); ++i) {
    const char c = f[i];
    if (c == '}') {
      if (i + 1 < f.size() && f[i + 1] == '}') {
        out += '}';
        ++i;
        continue;
      }
      fault(what, ": single '}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < f.size() && f[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const size_t close = f.find('}', i);
    if (close == std::string::npos) fault(what, ": single '{' encountered in format string");
    std::string field = f.substr(i + 1, close - i - 1);
    i = close;
    char conv = 's';
    if (const size_t bang = field.find('!'); bang != std::string::npos) {
      if (bang + 2 != field.size() || (field[bang + 1] != 's' && field[bang + 1] != 'r'))
        fault(what, ": unsupported field '{", field, "}'");
      conv = field[bang + 1];
      field.resize(bang);
    }
    if (field.find_first_of(":.[") != std::string::npos) fault(what, ": unsupported field '{", field, "}'");
    const Value* v = nullptr;
    const bool numbered = !field.empty() && field.find_first_not_of("0123456789") == std::string::npos;
    if ((field.empty() && manual) || (numbered && automatic))
      fault(what, ": cannot mix automatic ({}) and manual ({0}) field numbering");
    if (field.empty()) {
      automatic = true;
      if (auto_index >= a.positional.size()) fault(what, ": replacement index ", auto_index, " out of range");
      v = &a.positional[auto_index++];
    } else if (numbered) {
      manual = true;
      // Digit by digit, stopping once past the arguments: std::stoul would throw on 20 digits.
      size_t k = 0;
      for (size_t d = 0; d < field.size() && k < a.positional.size(); ++d) k = k * 10 + size_t(field[d] - '0');
      if (k >= a.positional.size()) fault(what, ": replacement index ", field, " out of range");
      v = &a.positional[k];
    } else {
      for (const auto& [name, x] : a.keywords)
        if (name == field) v = &x;
      if (!v) fault(what, ": no argument named '", field, "'");
    }
    out += conv == 'r' ? repr(*v) : to_str(*v);
    check_string_size(out.size(), what);
  }
  return Value::string(std::move(out));
}

template <std::string (*F)(std::string_view)>
Value m_case(const Value& self, const Args& a, const std::string& what) {
  ArgReader r(a, what, {});
  return Value::string(F(self.str()));
}

template <bool (*P)(std::string_view)>
Value m_is(const Value& self, const Args& a, const std::string& what) {
  ArgReader r(a, what, {});
  return Value::boolean(P(self.str()));
}

bool all_digits(std::string_view s) {
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return !s.empty();
}
bool all_space(std::string_view s) {
  for (size_t i = 0; i < s.size();)
    if (!text::is_space(text::decode(s, i))) return false;
  return !s.empty();
}

template <bool Suffix>
Value m_remove_affix(const Value& self, const Args& a, const std::string& what) {
  ArgReader r(a, what, {"affix"});
  if (!r.get(0) || !r.get(0)->is_string()) fault(r.what(), " needs a string argument");
  const std::string& s = self.str();
  const std::string& x = r.get(0)->str();
  if (Suffix && s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0)
    return Value::string(s.substr(0, s.size() - x.size()));
  if (!Suffix && s.compare(0, x.size(), x) == 0) return Value::string(s.substr(x.size()));
  return self;
}

const std::unordered_map<std::string_view, Method>& string_methods() {
  static const std::unordered_map<std::string_view, Method> m = {
      {"strip", m_strip<true, true>},
      {"lstrip", m_strip<true, false>},
      {"rstrip", m_strip<false, true>},
      {"split", m_split<false>},
      {"rsplit", m_split<true>},
      {"splitlines", m_splitlines},
      {"startswith", m_affix<false>},
      {"endswith", m_affix<true>},
      {"replace", m_replace},
      {"find", m_find<false, false>},
      {"rfind", m_find<true, false>},
      {"index", m_find<false, true>},
      {"rindex", m_find<true, true>},
      {"count", m_count},
      {"join", m_join},
      {"format", m_format},
      {"upper", m_case<text::upper>},
      {"lower", m_case<text::lower>},
      {"title", m_case<text::title_method>},
      {"capitalize", m_case<text::capitalize>},
      {"islower", m_is<text::is_lower>},
      {"isupper", m_is<text::is_upper>},
      {"isdigit", m_is<all_digits>},
      {"isspace", m_is<all_space>},
      {"removeprefix", m_remove_affix<false>},
      {"removesuffix", m_remove_affix<true>},
  };
  return m;
}

Value d_items(const Value& self, const Args& a, const std::string& what) {
  ArgReader r(a, what, {});
  Array out;
  for (const auto& [k, v] : self.object().items) out.push_back(Value::array({Value::string(k), v}, true));
  return Value::array(std::move(out));
}
Value d_keys(const Value& self, const Args& a, const std::string& what) {
  ArgReader r(a, what, {});
  return Value::array(iterate(self));
}
Value d_values(const Value& self, const Args& a, const std::string& what) {
  ArgReader r(a, what, {});
  Array out;
  for (const auto& [k, v] : self.object().items) out.push_back(v);
  return Value::array(std::move(out));
}
Value d_get(const Value& self, const Args& a, const std::string& what) {
  ArgReader r(a, what, {"key", "default"});
  if (!r.get(0)) fault(r.what(), " takes at least 1 argument");
  if (r.get(0)->is_string())
    if (const Value* v = self.object().find(r.get(0)->str())) return *v;
  return r.get_or(1, Value::none());
}

const std::unordered_map<std::string_view, Method>& dict_methods() {
  static const std::unordered_map<std::string_view, Method> m = {
      {"items", d_items}, {"keys", d_keys}, {"values", d_values}, {"get", d_get}};
  return m;
}

Value bind_method(const Value& self, std::string_view name, Method m) {
  std::string what = (self.is_string() ? "str." : "dict.") + std::string(name) + "()";
  return Value::function(what, [self, m, what](Evaluator&, Args& a) { return m(self, a, what); });
}

Value g_range(Evaluator&, Args& a) {
  ArgReader r(a, "range()", {"start", "stop", "step"});
  if (!r.get(0)) fault("range() takes at least 1 argument");
  auto num = [&](size_t i, int64_t fallback) { return int_arg(r.get(i), fallback, r.what(), "argument"); };
  int64_t start = 0, stop = 0;
  if (r.get(1)) {
    start = num(0, 0);
    stop = num(1, 0);
  } else {
    stop = num(0, 0);
  }
  const int64_t step = num(2, 1);
  if (step == 0) fault("range() arg 3 must not be zero");
  Array out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (out.size() >= 100000) fault("range() is limited to 100000 items");  // Jinja2's sandbox limit
    out.push_back(Value::integer(i));
  }
  return Value::array(std::move(out));
}

Object dict_from_args(const Args& a, const char* what) {
  if (a.positional.size() > 1) fault(what, " takes at most 1 positional argument, got ", a.positional.size());
  Object o;
  if (!a.positional.empty()) {
    const Value& src = a.positional[0];
    if (src.is_object() || src.is_ns()) {
      o = src.object();
    } else {
      for (const auto& pair : iterate(src)) {
        const Array kv = iterate(pair);
        if (kv.size() != 2 || !kv[0].is_string()) fault(what, ": expected a mapping or (str, value) pairs");
        o.set(kv[0].str(), kv[1]);
      }
    }
  }
  for (const auto& [k, v] : a.keywords) o.set(k, v);
  return o;
}

Value g_strftime_now(Evaluator& ev, Args& a) {
  ArgReader r(a, "strftime_now()", {"format"});
  if (!r.get(0) || !r.get(0)->is_string()) fault(r.what(), " needs a format string");
  const std::time_t t = static_cast<std::time_t>(ev.now_unix());
  std::tm tm{};
  localtime_r(&t, &tm);
  std::string buf(64 + r.get(0)->str().size() * 8, '\0');
  const size_t n = std::strftime(buf.data(), buf.size(), r.get(0)->str().c_str(), &tm);
  buf.resize(n);
  return Value::string(std::move(buf));
}

}  // namespace

Value get_attr(const Value& obj, std::string_view name) {
  switch (obj.kind()) {
    case Kind::string: {
      const auto& m = string_methods();
      if (auto it = m.find(name); it != m.end()) return bind_method(obj, name, it->second);
      return Value::undefined(cat("'str object' has no attribute '", name, "'"));
    }
    case Kind::object: {
      const auto& m = dict_methods();
      if (auto it = m.find(name); it != m.end()) return bind_method(obj, name, it->second);
      if (const Value* v = obj.object().find(name)) return *v;
      return Value::undefined(cat("'dict object' has no attribute '", name, "'"));
    }
    case Kind::ns:
      if (const Value* v = obj.object().find(name)) return *v;
      return Value::undefined(cat("namespace has no attribute '", name, "'"));
    case Kind::array:
      if (name == "append" || name == "extend" || name == "insert" || name == "pop" || name == "remove" ||
          name == "clear" || name == "sort" || name == "reverse")
        return Value::undefined(
            cat("list.", name, "() is not allowed: lists are read-only in chat templates (Jinja2's immutable sandbox)"));
      return Value::undefined(cat("'list object' has no attribute '", name, "'"));
    default: return Value::undefined(cat("'", obj.type_name(), " object' has no attribute '", name, "'"));
  }
}

void add_globals(Scope& scope) {
  scope.set("range", Value::function("range", g_range));
  scope.set("namespace", Value::function("namespace", [](Evaluator&, Args& a) {
    return Value::ns(dict_from_args(a, "namespace()"));
  }));
  scope.set("dict", Value::function("dict", [](Evaluator&, Args& a) {
    return Value::object(dict_from_args(a, "dict()"));
  }));
  scope.set("raise_exception", Value::function("raise_exception", [](Evaluator&, Args& a) -> Value {
    const std::string msg = a.positional.empty() ? std::string() : to_str(a.positional[0]);
    fault("raise_exception(): ", text::replace(msg, "\n", "\\n", -1));  // errors stay one line
  }));
  scope.set("strftime_now", Value::function("strftime_now", g_strftime_now));
}

}  // namespace tandem::jinja
