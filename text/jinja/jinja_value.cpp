// Jinja values: construction, Python str/repr, equality and ordering, json.dumps.
#include "jinja_value.h"

#include <algorithm>
#include <cmath>

#include "jinja_text.h"

namespace tandem::jinja {

namespace {
thread_local RenderBudget* current_budget = nullptr;
}  // namespace

RenderBudget::RenderBudget() : outer_(current_budget) { current_budget = this; }
RenderBudget::~RenderBudget() { current_budget = outer_; }

void RenderBudget::spend(uint64_t units) {
  RenderBudget* b = current_budget;
  if (!b) return;
  if (units > b->left_) {
    b->left_ = 0;
    fault("the template did more work than a render may (", kRenderBudget, " units: steps, and bytes and items built)");
  }
  b->left_ -= units;
}

void check_string_size(uint64_t n, std::string_view what) {
  if (current_budget && n > kMaxStringBytes) fault(what, " would make a string of ", n, " bytes, past the limit of ", kMaxStringBytes);
}

const Value* Object::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void Object::set(std::string key, Value value) {
  for (auto& [k, v] : items)
    if (k == key) {
      v = std::move(value);
      return;
    }
  items.emplace_back(std::move(key), std::move(value));
}

Value Value::undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.p_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}
Value Value::none() {
  Value v;
  v.kind_ = Kind::none;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::boolean;
  v.n_.b = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::integer;
  v.n_.i = i;
  return v;
}
Value Value::number(double f) {
  Value v;
  v.kind_ = Kind::floating;
  v.n_.f = f;
  return v;
}
Value Value::string(std::string s) {
  if (current_budget) {
    check_string_size(s.size(), "a string");
    RenderBudget::spend(s.size() / kBytesPerUnit);
  }
  Value v;
  v.kind_ = Kind::string;
  v.p_ = std::make_shared<const std::string>(std::move(s));
  return v;
}
Value Value::array(Array items, bool tuple) {
  if (current_budget) {
    if (items.size() > kMaxItems) fault("a list of ", items.size(), " items is past the limit of ", kMaxItems);
    RenderBudget::spend(items.size() * kItemUnits);
  }
  Value v;
  v.kind_ = Kind::array;
  v.tuple_ = tuple;
  v.p_ = std::make_shared<const Array>(std::move(items));
  return v;
}
Value Value::object(Object o) {
  if (current_budget) {
    if (o.items.size() > kMaxItems) fault("a dict of ", o.items.size(), " items is past the limit of ", kMaxItems);
    RenderBudget::spend(o.items.size() * kItemUnits);
  }
  Value v;
  v.kind_ = Kind::object;
  v.p_ = std::make_shared<const Object>(std::move(o));
  return v;
}
Value Value::ns(Object o) {
  Value v;
  v.kind_ = Kind::ns;
  v.p_ = std::make_shared<Object>(std::move(o));
  return v;
}
Value Value::function(std::string name, NativeFn fn) {
  Value v;
  v.kind_ = Kind::callable;
  v.p_ = std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

double Value::as_float() const {
  if (kind_ == Kind::floating) return n_.f;
  return static_cast<double>(as_int());
}
const std::string& Value::str() const { return *static_cast<const std::string*>(p_.get()); }
const Array& Value::items() const { return *static_cast<const Array*>(p_.get()); }
const Object& Value::object() const { return *static_cast<const Object*>(p_.get()); }
Object& Value::ns_mut() const { return *const_cast<Object*>(static_cast<const Object*>(p_.get())); }
const Callable& Value::callable() const { return *static_cast<const Callable*>(p_.get()); }
const std::string& Value::hint() const {
  static const std::string empty;
  return kind_ == Kind::undefined && p_ ? str() : empty;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::undefined:
    case Kind::none: return false;
    case Kind::boolean: return n_.b;
    case Kind::integer: return n_.i != 0;
    case Kind::floating: return n_.f != 0.0;
    case Kind::string: return !str().empty();
    case Kind::array: return !items().empty();
    case Kind::object: return !object().items.empty();
    case Kind::ns:
    case Kind::callable: return true;
  }
  return false;
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::undefined: return "Undefined";
    case Kind::none: return "NoneType";
    case Kind::boolean: return "bool";
    case Kind::integer: return "int";
    case Kind::floating: return "float";
    case Kind::string: return "str";
    case Kind::array: return tuple_ ? "tuple" : "list";
    case Kind::object: return "dict";
    case Kind::ns: return "Namespace";
    case Kind::callable: return "function";
  }
  return "?";
}

namespace {
void append_repr(std::string& out, const Value& v);

void append_dict(std::string& out, const Object& o) {
  out += '{';
  bool first = true;
  for (const auto& [k, x] : o.items) {
    if (!first) out += ", ";
    first = false;
    out += text::python_repr(k);
    out += ": ";
    append_repr(out, x);
  }
  out += '}';
}

void append_repr(std::string& out, const Value& v) {
  switch (v.kind()) {
    case Kind::undefined: out += "Undefined"; return;
    case Kind::string: out += text::python_repr(v.str()); return;
    case Kind::array: {
      const auto& a = v.items();
      out += v.is_tuple() ? '(' : '[';
      for (size_t i = 0; i < a.size(); ++i) {
        if (i) out += ", ";
        append_repr(out, a[i]);
      }
      if (v.is_tuple() && a.size() == 1) out += ',';
      out += v.is_tuple() ? ')' : ']';
      return;
    }
    case Kind::object: append_dict(out, v.object()); return;
    default: append_str(out, v);
  }
}
}  // namespace

void append_str(std::string& out, const Value& v) {
  switch (v.kind()) {
    case Kind::undefined: return;
    case Kind::none: out += "None"; return;
    case Kind::boolean: out += v.as_bool() ? "True" : "False"; return;
    case Kind::integer: out += std::to_string(v.as_int()); return;
    case Kind::floating: out += text::float_repr(v.as_float()); return;
    case Kind::string: out += v.str(); return;
    case Kind::array:
    case Kind::object: append_repr(out, v); return;
    case Kind::ns:
      out += "<Namespace ";
      append_dict(out, v.object());
      out += '>';
      return;
    case Kind::callable: out += "<function " + v.callable().name + ">"; return;
  }
}

std::string to_str(const Value& v) {
  if (v.is_string()) return v.str();
  std::string s;
  append_str(s, v);
  return s;
}

std::string repr(const Value& v) {
  std::string s;
  append_repr(s, v);
  return s;
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::undefined:
    case Kind::none: return true;
    case Kind::string: return a.str() == b.str();
    case Kind::array: {
      if (a.is_tuple() != b.is_tuple()) return false;
      const auto &x = a.items(), &y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!equals(x[i], y[i])) return false;
      return true;
    }
    case Kind::object: {
      const auto& x = a.object().items;
      const auto& y = b.object();
      if (x.size() != y.items.size()) return false;
      for (const auto& [k, v] : x) {
        const Value* o = y.find(k);
        if (!o || !equals(v, *o)) return false;
      }
      return true;
    }
    case Kind::ns: return &a.object() == &b.object();
    case Kind::callable: return &a.callable() == &b.callable();
    default: return false;
  }
}

int compare(const Value& a, const Value& b, std::string_view op) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      const double x = a.as_float(), y = b.as_float();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    const int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.str().compare(b.str());  // byte order of UTF-8 is code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_array() && b.is_array() && a.is_tuple() == b.is_tuple()) {
    const auto &x = a.items(), &y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals(x[i], y[i])) continue;
      return compare(x[i], y[i], op);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  fault("'", op, "' not supported between instances of '", a.type_name(), "' and '", b.type_name(), "'");
}

namespace {
void append_json(std::string& out, const Value& v, const JsonStyle& st, int depth) {
  auto newline = [&](int d) {
    out += '\n';
    for (int i = 0; i < d; ++i) {
      out += st.indent;
      check_string_size(out.size(), "tojson");
    }
  };
  switch (v.kind()) {
    case Kind::none: out += "null"; return;
    case Kind::boolean: out += v.as_bool() ? "true" : "false"; return;
    case Kind::integer: out += std::to_string(v.as_int()); return;
    case Kind::floating: {
      const double f = v.as_float();
      if (std::isnan(f)) out += "NaN";
      else if (std::isinf(f)) out += f > 0 ? "Infinity" : "-Infinity";
      else out += text::float_repr(f);
      return;
    }
    case Kind::string: text::json_quote(out, v.str(), st.ensure_ascii); return;
    case Kind::array: {
      const auto& a = v.items();
      if (a.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < a.size(); ++i) {
        if (i) out += st.item_sep;
        if (st.has_indent) newline(depth + 1);
        append_json(out, a[i], st, depth + 1);
        check_string_size(out.size(), "tojson");
      }
      if (st.has_indent) newline(depth);
      out += ']';
      return;
    }
    case Kind::object: {
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& e : v.object().items) entries.push_back(&e);
      if (entries.empty()) {
        out += "{}";
        return;
      }
      if (st.sort_keys)
        std::stable_sort(entries.begin(), entries.end(), [](auto* x, auto* y) { return x->first < y->first; });
      out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += st.item_sep;
        if (st.has_indent) newline(depth + 1);
        text::json_quote(out, entries[i]->first, st.ensure_ascii);
        out += st.key_sep;
        append_json(out, entries[i]->second, st, depth + 1);
        check_string_size(out.size(), "tojson");
      }
      if (st.has_indent) newline(depth);
      out += '}';
      return;
    }
    default: fault("Object of type ", v.type_name(), " is not JSON serializable");
  }
}
}  // namespace

std::string to_json(const Value& v, const JsonStyle& style) {
  std::string out;
  append_json(out, v, style, 0);
  return out;
}

Array iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::undefined: return {};
    case Kind::array: return v.items();
    case Kind::object: {
      Array keys;
      for (const auto& [k, x] : v.object().items) keys.push_back(Value::string(k));
      return keys;
    }
    case Kind::string: {
      Array chars;
      const std::string& s = v.str();
      for (size_t i = 0; i < s.size();) {
        const size_t j = i;
        text::decode(s, i);
        chars.push_back(Value::string(s.substr(j, i - j)));
      }
      return chars;
    }
    default: fault("'", v.type_name(), "' object is not iterable");
  }
}

int64_t length(const Value& v) {
  switch (v.kind()) {
    case Kind::undefined: return 0;
    case Kind::string: return static_cast<int64_t>(text::length(v.str()));
    case Kind::array: return static_cast<int64_t>(v.items().size());
    case Kind::object: return static_cast<int64_t>(v.object().items.size());
    default: fault("object of type '", v.type_name(), "' has no len()");
  }
}

}  // namespace tandem::jinja
