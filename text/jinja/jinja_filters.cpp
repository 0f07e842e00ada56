// Jinja2's built-in filters and tests as chat templates use them, with transformers' tojson
// (json.dumps with ensure_ascii=False; parameters ensure_ascii, indent, separators, sort_keys).
#include <algorithm>
#include <charconv>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>

#include "jinja_eval.h"
#include "jinja_text.h"

namespace tandem::jinja {
namespace {

std::string what(const char* filter) { return std::string("filter '") + filter + "'"; }

// Jinja's attribute path for map/selectattr/sort/...: "a.b.0" looks up key a, then b, then item 0.
Value attr_path(const Value& item, const std::string& path) {
  Value v = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (v.is_undefined()) return v;
    // Digits that fit an int64 index a list (std::stoll would throw past that); others are keys.
    int64_t index = 0;
    const bool numeric = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos &&
                         std::from_chars(part.data(), part.data() + part.size(), index).ec == std::errc();
    v = get_item(v, numeric ? Value::integer(index) : Value::string(part));
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

std::string attribute_arg(const Value* v, const std::string& w) {
  if (!v || v->is_none()) return "";
  if (v->is_int()) return std::to_string(v->as_int());
  if (!v->is_string()) fault(w, ": attribute must be a string");
  return v->str();
}

// A sort key: the attribute (if any), lowercased when comparing strings case-insensitively.
Value sort_key(const Value& item, const std::string& attr, bool case_sensitive) {
  Value k = attr.empty() ? item : attr_path(item, attr);
  if (!case_sensitive && k.is_string()) return Value::string(text::lower(k.str()));
  return k;
}

Value f_abs(Evaluator&, const Value& v, Args& a) {
  ArgReader r(a, what("abs"), {});
  if (v.is_float()) return Value::number(std::fabs(v.as_float()));
  if (v.is_int() || v.is_bool()) return Value::integer(std::llabs(v.as_int()));
  fault("bad operand type for abs(): '", v.type_name(), "'");
}

Value f_attr(Evaluator&, const Value& v, Args& a) {
  ArgReader r(a, what("attr"), {"name"});
  if (!r.get(0) || !r.get(0)->is_string()) fault(r.what(), " needs an attribute name");
  if (v.is_undefined()) fault(v.hint().empty() ? "undefined value" : v.hint());
  // Jinja2's attr() is getattr() only: a dict's keys are not its attributes.
  Value found = get_attr(v, r.get(0)->str());
  if (v.is_object() && !found.is_callable())
    return Value::undefined(cat("'dict object' has no attribute '", r.get(0)->str(), "'"));
  return found;
}

Value f_capitalize(Evaluator&, const Value& v, Args& a) {
  ArgReader r(a, what("capitalize"), {});
  return Value::string(text::capitalize(to_str(v)));
}

Value f_default(Evaluator&, const Value& v, Args& a) {
  ArgReader r(a, what("default"), {"default_value", "boolean"});
  if (v.is_undefined() || (r.flag(1, false) && !v.truthy())) return r.get_or(0, Value::string(""));
  return v;
}

Value pairs(const Value& v, const char* filter) {
  if (v.is_undefined()) return Value::array({});
  if (!v.is_object()) fault("filter '", filter, "': can only get item pairs from a mapping, not ", v.type_name());
  Array out;
  for (const auto& [k, x] : v.object().items) out.push_back(Value::array({Value::string(k), x}, true));
  return Value::array(std::move(out));
}

Value f_items(Evaluator&, const Value& v, Args& a) {
  ArgReader r(a, what("items"), {});
  return pairs(v, "items");
}

Value f_dictsort(Evaluator&, const Value& v, Args& a) {
  ArgReader r(a, what("dictsort"), {"case_sensitive", "by", "reverse"});
  const bool cs = r.flag(0, false), rev = r.flag(2, false);
  const Value by = r.get_or(1, Value::string("key"));
  if (!by.is_string() || (by.str() != "key" && by.str() != "value"))
    fault(r.what(), ": 'by' must be 'key' or 'value'");
  Array items = pairs(v, "dictsort").items();
  const size_t pos = by.str() == "key" ? 0 : 1;
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    const Value kx = sort_key(x.items()[pos], "", cs), ky = sort_key(y.items()[pos], "", cs);
    return rev ? compare(ky, kx, "<") < 0 : compare(kx, ky, "<") < 0;
  });
  return Value::array(std::move(items));
}

Value f_first(Evaluator&, const Value& v, Args& a) {
  ArgReader r(a, what("first"), {});
  const Array items = iterate(v);
  return items.empty() ? Value::undefined("no first item: the sequence is empty") : items.front();
}

Value f_last(Evaluator&, const Value& v, Args& a) {
  ArgReader r(a, what("last"), {});
  const Array items = iterate(v);
  return items.empty() ? Value::undefined("no last item: the sequence is empty") : items.back();
}

// Python float(str): optional sign, digits with '.', exponent, or inf/infinity/nan; surrounding spaces ok.
bool parse_float(const std::string& raw, double& out) {
  std::string s = text::strip(raw, std::nullopt, true, true);
  std::string t;
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i] != '_' || (i > 0 && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i - 1])) &&
                        std::isdigit(static_cast<unsigned char>(s[i + 1]))))
      t += s[i];
  std::string low = text::lower(t);
  size_t p = (!low.empty() && (low[0] == '+' || low[0] == '-')) ? 1 : 0;
  const std::string word = low.substr(p);
  if (word == "inf" || word == "infinity" || word == "nan") {
    out = std::strtod(low.c_str(), nullptr);
    return true;
  }
  size_t digits = 0;
  while (p < low.size() && std::isdigit(static_cast<unsigned char>(low[p]))) ++p, ++digits;
  if (p < low.size() && low[p] == '.') {
    ++p;
    while (p < low.size() && std::isdigit(static_cast<unsigned char>(low[p]))) ++p, ++digits;
  }
  if (digits == 0) return false;
  if (p < low.size() && low[p] == 'e') {
    ++p;
    if (p < low.size() && (low[p] == '+' || low[p] == '-')) ++p;
    size_t ed = 0;
    while (p < low.size() && std::isdigit(static_cast<unsigned char>(low[p]))) ++p, ++ed;
    if (ed == 0) return false;
  }
  if (p != low.size()) return false;
  out = std::strtod(low.c_str(), nullptr);
  return true;
}

Value f_float(Evaluator&, const Value& v, Args& a) {
  ArgReader r(a, what("float"), {"default"});
  const Value fallback = r.get_or(0, Value::number(0.0));
  if (v.is_number()) return Value::number(v.as_float());
  double d = 0;
  if (v.is_string() && parse_float(v.str(), d)) return Value::number(d);
  return fallback;
}

Value f_int(Evaluator&, const Value& v, Args& a) {
  ArgReader r(a, what("int"), {"default", "base"});
  const Value fallback = r.get_or(0, Value::integer(0));
  if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
  if (v.is_float()) {
    if (!std::isfinite(v.as_float())) fault("cannot convert float ", text::float_repr(v.as_float()), " to integer");
    return Value::integer(static_cast<int64_t>(std::trunc(v.as_float())));
  }
  if (!v.is_string()) return fallback;
  const int base = static_cast<int>(r.get_or(1, Value::integer(10)).as_int());
  std::string s = text::strip(v.str(), std::nullopt, true, true);
  std::string t;
  for (char c : s)
    if (c != '_') t += c;
  if (!t.empty()) {
    errno = 0;
    char* end = nullptr;
    const long long n = std::strtoll(t.c_str(), &end, base);
    if (errno == 0 && end && *end == '\0' && !std::isspace(static_cast<unsigned char>(t[0]))) return Value::integer(n);
  }
  double d = 0;
  if (parse_float(v.str(), d) && std::isfinite(d)) return Value::integer(static_cast<int64_t>(std::trunc(d)));
  return fallback;
}

Value f_join(Evaluator&, const Value& v, Args& a) {
  ArgReader r(a, what("join"), {"d", "attribute"});
  const Value sep = r.get_or(0, Value::string(""));
  const std::string attr = attribute_arg(r.get(1), r.what());
  std::string out;
  bool first = true;
  for (const auto& x : iterate(v)) {
    if (!first) out += to_str(sep);
    first = false;
    append_str(out, attr.empty() ? x : attr_path(x, attr));
    check_string_size(out.size(), r.what());
  }
  return Value::string(std::move(out));
}

Value f_length(Evaluator&, const Value& v, Args& a) {
  ArgReader r(a, what("length"), {});
  return Value::integer(length(v));
}

Value f_list(Evaluator&, const Value& v, Args& a) {
  ArgReader r(a, what("list"), {});
  return Value::array(iterate(v));
}

Value f_lower(Evaluator&, const Value& v, Args& a) {
  ArgReader r(a, what("lower"), {});
  return Value::string(text::lower(to_str(v)));
}

Value f_upper(Evaluator&, const Value& v, Args& a) {
  ArgReader r(a, what("upper"), {});
  return Value::string(text::upper(to_str(v)));
}

Value f_title(Evaluator&, const Value& v, Args& a) {
  ArgReader r(a, what("title"), {});
  return Value::string(text::title_filter(to_str(v)));
}

Value f_map(Evaluator& ev, const Value& v, Args& a) {
  Array out;
  if (a.positional.empty()) {  // map(attribute='x', default=...)
    ArgReader r(a, what("map"), {"attribute", "default"});
    if (!r.get(0)) fault(r.what(), " needs a filter name or attribute=");
    const std::string attr = attribute_arg(r.get(0), r.what());
    for (const auto& item : iterate(v)) {
      Value m = attr_path(item, attr);
      if (m.is_undefined() && r.get(1)) m = *r.get(1);
      out.push_back(std::move(m));
    }
    return Value::array(std::move(out));
  }
  if (!a.positional[0].is_string()) fault("filter 'map': the filter name must be a string");
  const std::string name = a.positional[0].str();
  const Args rest{{a.positional.begin() + 1, a.positional.end()}, a.keywords};
  for (const auto& item : iterate(v)) {
    Args copy = rest;
    out.push_back(ev.filter(name, item, copy));
  }
  return Value::array(std::move(out));
}

template <bool Select, bool ByAttr>
Value f_select(Evaluator& ev, const Value& v, Args& a) {
  const char* name = ByAttr ? (Select ? "selectattr" : "rejectattr") : (Select ? "select" : "reject");
  if (!a.keywords.empty()) fault("filter '", name, "' takes no keyword arguments");
  size_t i = 0;
  std::string attr;
  if (ByAttr) {
    if (a.positional.empty()) fault("filter '", name, "' needs an attribute name");
    attr = attribute_arg(&a.positional[i++], what(name));
  }
  std::string test;
  if (i < a.positional.size()) {
    if (!a.positional[i].is_string()) fault("filter '", name, "': the test name must be a string");
    test = a.positional[i++].str();
  }
  Args test_args{{a.positional.begin() + static_cast<std::ptrdiff_t>(i), a.positional.end()}, {}};
  Array out;
  for (const auto& item : iterate(v)) {
    const Value x = ByAttr ? attr_path(item, attr) : item;
    Args copy = test_args;
    const bool ok = test.empty() ? x.truthy() : ev.test(test, x, copy);
    if (ok == Select) out.push_back(item);
  }
  return Value::array(std::move(out));
}

template <bool Max>
Value f_minmax(Evaluator&, const Value& v, Args& a) {
  ArgReader r(a, what(Max ? "max" : "min"), {"case_sensitive", "attribute"});
  const bool cs = r.flag(0, false);
  const std::string attr = attribute_arg(r.get(1), r.what());
  const Array items = iterate(v);
  if (items.empty()) return Value::undefined("no aggregated item: the sequence is empty");
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    const int c = compare(sort_key(items[i], attr, cs), sort_key(items[best], attr, cs), "<");
    if (Max ? c > 0 : c < 0) best = i;
  }
  return items[best];
}

Value f_replace(Evaluator&, const Value& v, Args& a) {
  ArgReader r(a, what("replace"), {"old", "new", "count"});
  if (!r.get(0) || !r.get(1)) fault(r.what(), " needs old and new strings");
  const Value* c = r.get(2);
  const int64_t count = c && !c->is_none() ? c->as_int() : -1;
  std::string out = text::replace(to_str(v), to_str(*r.get(0)), to_str(*r.get(1)), count, kMaxStringBytes);
  check_string_size(out.size(), r.what());
  return Value::string(std::move(out));
}

Value f_reverse(Evaluator&, const Value& v, Args& a) {
  ArgReader r(a, what("reverse"), {});
  if (v.is_string()) {
    std::u32string u = text::to_u32(v.str());
    std::reverse(u.begin(), u.end());
    return Value::string(text::to_utf8(u));
  }
  Array items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::array(std::move(items));
}

Value f_round(Evaluator&, const Value& v, Args& a) {
  ArgReader r(a, what("round"), {"precision", "method"});
  const int64_t prec = r.get_or(0, Value::integer(0)).as_int();
  const Value method = r.get_or(1, Value::string("common"));
  if (!v.is_number()) fault(r.what(), ": cannot round a ", v.type_name());
  if (!method.is_string() || (method.str() != "common" && method.str() != "ceil" && method.str() != "floor"))
    fault(r.what(), ": method must be 'common', 'ceil' or 'floor'");
  if (method.str() == "common") {
    if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
    if (prec < 0 || prec > 300 || !std::isfinite(v.as_float())) return Value::number(v.as_float());
    // Python's round(): the exactly represented value, rounded half to even, as printf does.
    char buf[400];
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(prec), v.as_float());
    return Value::number(std::strtod(buf, nullptr));
  }
  const double scale = std::pow(10.0, static_cast<double>(prec));
  const double x = v.as_float() * scale;
  return Value::number((method.str() == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Value f_string(Evaluator&, const Value& v, Args& a) {
  ArgReader r(a, what("string"), {});
  return Value::string(to_str(v));
}

Value f_sort(Evaluator&, const Value& v, Args& a) {
  ArgReader r(a, what("sort"), {"reverse", "case_sensitive", "attribute"});
  const bool rev = r.flag(0, false), cs = r.flag(1, false);
  const std::string attr = attribute_arg(r.get(2), r.what());
  Array items = iterate(v);
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    const Value kx = sort_key(x, attr, cs), ky = sort_key(y, attr, cs);
    return rev ? compare(ky, kx, "<") < 0 : compare(kx, ky, "<") < 0;
  });
  return Value::array(std::move(items));
}

Value f_sum(Evaluator&, const Value& v, Args& a) {
  ArgReader r(a, what("sum"), {"attribute", "start"});
  const std::string attr = attribute_arg(r.get(0), r.what());
  Value acc = r.get_or(1, Value::integer(0));
  for (const auto& x : iterate(v)) acc = binary_op("+", acc, attr.empty() ? x : attr_path(x, attr));
  return acc;
}

Value f_tojson(Evaluator&, const Value& v, Args& a) {
  ArgReader r(a, what("tojson"), {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonStyle st;
  st.ensure_ascii = r.flag(0, false);
  st.sort_keys = r.flag(3, false);
  if (const Value* ind = r.get(1); ind && !ind->is_none()) {
    st.has_indent = true;
    if (ind->is_string()) {
      st.indent = ind->str();
    } else if (ind->is_int()) {
      check_string_size(uint64_t(std::max<int64_t>(0, ind->as_int())), r.what());
      st.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, ind->as_int())), ' ');
    } else {
      fault(r.what(), ": indent must be an integer or a string");
    }
    st.item_sep.assign(1, ',');  // json.dumps drops the space after "," once indenting
  }
  if (const Value* sep = r.get(2); sep && !sep->is_none()) {
    if (!sep->is_array() || sep->items().size() != 2 || !sep->items()[0].is_string() || !sep->items()[1].is_string())
      fault(r.what(), ": separators must be a pair of strings");
    st.item_sep = sep->items()[0].str();
    st.key_sep = sep->items()[1].str();
  }
  return Value::string(to_json(v, st));
}

Value f_trim(Evaluator&, const Value& v, Args& a) {
  ArgReader r(a, what("trim"), {"chars"});
  std::optional<std::string> chars;
  if (const Value* c = r.get(0); c && !c->is_none()) chars = to_str(*c);
  return Value::string(text::strip(to_str(v), chars, true, true));
}

Value f_unique(Evaluator&, const Value& v, Args& a) {
  ArgReader r(a, what("unique"), {"case_sensitive", "attribute"});
  const bool cs = r.flag(0, false);
  const std::string attr = attribute_arg(r.get(1), r.what());
  Array out, seen;
  for (const auto& x : iterate(v)) {
    Value k = sort_key(x, attr, cs);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, k); })) continue;
    seen.push_back(std::move(k));
    out.push_back(x);
  }
  return Value::array(std::move(out));
}

Value f_indent(Evaluator&, const Value& v, Args& a) {
  ArgReader r(a, what("indent"), {"width", "first", "blank"});
  const Value width = r.get_or(0, Value::integer(4));
  if (!width.is_string()) check_string_size(uint64_t(std::max<int64_t>(0, width.as_int())), r.what());
  const std::string pad = width.is_string() ? width.str() : std::string(static_cast<size_t>(std::max<int64_t>(0, width.as_int())), ' ');
  const bool first = r.flag(1, false), blank = r.flag(2, false);
  const std::vector<std::string> lines = text::splitlines(to_str(v) + "\n", false);
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) out += '\n';
    const bool indent = i == 0 ? first : (blank || !lines[i].empty());
    if (indent) out += pad;
    out += lines[i];
  }
  return Value::string(std::move(out));
}

Value f_safe(Evaluator&, const Value& v, Args& a) {
  ArgReader r(a, what("safe"), {});
  return Value::string(to_str(v));  // no autoescaping in chat templates: marking safe only makes a string
}

Value f_escape(Evaluator&, const Value& v, Args& a) {
  ArgReader r(a, what("escape"), {});
  std::string out;
  for (char c : to_str(v)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return Value::string(std::move(out));
}

const std::unordered_map<std::string_view, FilterFn>& filters() {
  static const std::unordered_map<std::string_view, FilterFn> m = {
      {"abs", f_abs},         {"attr", f_attr},
      {"capitalize", f_capitalize}, {"count", f_length},
      {"d", f_default},       {"default", f_default},
      {"dictsort", f_dictsort}, {"e", f_escape},
      {"escape", f_escape},   {"first", f_first},
      {"float", f_float},     {"indent", f_indent},
      {"int", f_int},         {"items", f_items},
      {"join", f_join},       {"last", f_last},
      {"length", f_length},   {"list", f_list},
      {"lower", f_lower},     {"map", f_map},
      {"max", f_minmax<true>}, {"min", f_minmax<false>},
      {"reject", f_select<false, false>}, {"rejectattr", f_select<false, true>},
      {"replace", f_replace}, {"reverse", f_reverse},
      {"round", f_round},     {"safe", f_safe},
      {"select", f_select<true, false>}, {"selectattr", f_select<true, true>},
      {"sort", f_sort},       {"string", f_string},
      {"sum", f_sum},         {"title", f_title},
      {"tojson", f_tojson},   {"trim", f_trim},
      {"unique", f_unique},   {"upper", f_upper},
  };
  return m;
}

// --- tests ---

const Value& arg0(const Args& a, const char* test) {
  if (a.positional.size() != 1 || !a.keywords.empty()) fault("test '", test, "' takes exactly one argument");
  return a.positional[0];
}

template <Kind K>
bool t_kind(Evaluator&, const Value& v, Args&) { return v.kind() == K; }
bool t_defined(Evaluator&, const Value& v, Args&) { return !v.is_undefined(); }
bool t_true(Evaluator&, const Value& v, Args&) { return v.is_bool() && v.as_bool(); }
bool t_false(Evaluator&, const Value& v, Args&) { return v.is_bool() && !v.as_bool(); }
bool t_number(Evaluator&, const Value& v, Args&) { return v.is_number(); }
// As in Python: undefined has __iter__, __len__ and __getitem__, so it is iterable and a sequence.
bool t_iterable(Evaluator&, const Value& v, Args&) {
  return v.is_undefined() || v.is_string() || v.is_array() || v.is_object();
}
bool t_callable(Evaluator&, const Value& v, Args&) { return v.is_callable() || v.is_undefined(); }
bool t_odd(Evaluator&, const Value& v, Args&) {
  if (!v.is_int() && !v.is_bool()) fault("test 'odd' needs an integer, not ", v.type_name());
  return v.as_int() % 2 != 0;
}
bool t_even(Evaluator& ev, const Value& v, Args& a) { return !t_odd(ev, v, a); }
bool t_divisibleby(Evaluator&, const Value& v, Args& a) {
  const Value& n = arg0(a, "divisibleby");
  const Value m = binary_op("%", v, n);
  return !m.truthy();
}
template <const char* Op>
bool t_compare(Evaluator&, const Value& v, Args& a) { return compare_op(Op, v, arg0(a, Op)); }
bool t_in(Evaluator&, const Value& v, Args& a) { return contains(arg0(a, "in"), v); }
bool t_lower(Evaluator&, const Value& v, Args&) { return text::is_lower(to_str(v)); }
bool t_upper(Evaluator&, const Value& v, Args&) { return text::is_upper(to_str(v)); }
bool t_sameas(Evaluator&, const Value& v, Args& a) {
  const Value& o = arg0(a, "sameas");
  if (v.kind() != o.kind()) return false;
  switch (v.kind()) {
    case Kind::undefined:
    case Kind::none: return true;
    case Kind::boolean:
    case Kind::integer:
    case Kind::floating: return equals(v, o);
    case Kind::string: return &v.str() == &o.str();
    case Kind::array: return &v.items() == &o.items();
    case Kind::object:
    case Kind::ns: return &v.object() == &o.object();
    case Kind::callable: return &v.callable() == &o.callable();
  }
  return false;
}
bool t_escaped(Evaluator&, const Value&, Args&) { return false; }
bool t_filter(Evaluator&, const Value& v, Args&) { return v.is_string() && find_filter(v.str()); }
bool t_test(Evaluator&, const Value& v, Args&) { return v.is_string() && find_test(v.str()); }

constexpr char eq[] = "==", ne[] = "!=", lt[] = "<", le[] = "<=", gt[] = ">", ge[] = ">=";

const std::unordered_map<std::string_view, TestFn>& tests() {
  static const std::unordered_map<std::string_view, TestFn> m = {
      {"defined", t_defined},
      {"undefined", t_kind<Kind::undefined>},
      {"none", t_kind<Kind::none>},
      {"boolean", t_kind<Kind::boolean>},
      {"true", t_true},
      {"false", t_false},
      {"integer", t_kind<Kind::integer>},
      {"float", t_kind<Kind::floating>},
      {"number", t_number},
      {"string", t_kind<Kind::string>},
      {"mapping", t_kind<Kind::object>},
      {"iterable", t_iterable},
      {"sequence", t_iterable},
      {"callable", t_callable},
      {"odd", t_odd},
      {"even", t_even},
      {"divisibleby", t_divisibleby},
      {"eq", t_compare<eq>},
      {"equalto", t_compare<eq>},
      {"==", t_compare<eq>},
      {"ne", t_compare<ne>},
      {"!=", t_compare<ne>},
      {"lt", t_compare<lt>},
      {"lessthan", t_compare<lt>},
      {"<", t_compare<lt>},
      {"le", t_compare<le>},
      {"<=", t_compare<le>},
      {"gt", t_compare<gt>},
      {"greaterthan", t_compare<gt>},
      {">", t_compare<gt>},
      {"ge", t_compare<ge>},
      {">=", t_compare<ge>},
      {"in", t_in},
      {"lower", t_lower},
      {"upper", t_upper},
      {"sameas", t_sameas},
      {"escaped", t_escaped},
      {"filter", t_filter},
      {"test", t_test},
  };
  return m;
}

}  // namespace

const FilterFn* find_filter(std::string_view name) {
  const auto& m = filters();
  auto it = m.find(name);
  return it == m.end() ? nullptr : &it->second;
}

const TestFn* find_test(std::string_view name) {
  const auto& m = tests();
  auto it = m.find(name);
  return it == m.end() ? nullptr : &it->second;
}

}  // namespace tandem::jinja
