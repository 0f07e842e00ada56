// Jinja operators with Python's semantics: arithmetic on ints and floats (bool counts as int),
// str and list concatenation and repetition, '~' as str() concatenation, comparisons, 'in',
// subscripts and slices.
#include <algorithm>
#include <cmath>
#include <limits>

#include "jinja_eval.h"
#include "jinja_text.h"

namespace tandem::jinja {
namespace {

[[noreturn]] void unsupported(std::string_view op, const Value& a, const Value& b) {
  if (a.is_undefined() && !a.hint().empty()) fault(a.hint());
  if (b.is_undefined() && !b.hint().empty()) fault(b.hint());
  fault("unsupported operand type(s) for ", op, ": '", a.type_name(), "' and '", b.type_name(), "'");
}

bool is_intlike(const Value& v) { return v.is_int() || v.is_bool(); }

Value repeat(const Value& seq, int64_t n) {
  const uint64_t times = uint64_t(std::max<int64_t>(n, 0));
  if (seq.is_string()) {
    if (!seq.str().empty() && times > kMaxStringBytes / seq.str().size())
      fault("'", seq.type_name(), "' * ", n, " would make a string past the limit of ", kMaxStringBytes, " bytes");
    // By doubling: a one-character string times 30 million is 25 appends, not 30 million.
    const size_t total = seq.str().size() * times;
    std::string r;
    r.reserve(total);
    if (total) r = seq.str();
    while (r.size() < total) r.append(r, 0, std::min(r.size(), total - r.size()));
    return Value::string(std::move(r));
  }
  if (!seq.items().empty() && times > kMaxItems / seq.items().size())
    fault("'", seq.type_name(), "' * ", n, " would make a list past the limit of ", kMaxItems, " items");
  Array r;
  for (int64_t i = 0; i < n; ++i) r.insert(r.end(), seq.items().begin(), seq.items().end());
  return Value::array(std::move(r), seq.is_tuple());
}

template <class Op>
int64_t checked(Op op, int64_t x, int64_t y) {
  int64_t r = 0;
  if (op(x, y, &r)) fault("integer overflow (beyond 64 bits)");
  return r;
}
bool add(int64_t x, int64_t y, int64_t* r) { return __builtin_add_overflow(x, y, r); }
bool sub(int64_t x, int64_t y, int64_t* r) { return __builtin_sub_overflow(x, y, r); }
bool mul(int64_t x, int64_t y, int64_t* r) { return __builtin_mul_overflow(x, y, r); }

Value arithmetic(std::string_view op, const Value& a, const Value& b) {
  const bool ints = is_intlike(a) && is_intlike(b);
  if (ints) {
    const int64_t x = a.as_int(), y = b.as_int();
    if (op == "+") return Value::integer(checked(add, x, y));
    if (op == "-") return Value::integer(checked(sub, x, y));
    if (op == "*") return Value::integer(checked(mul, x, y));
    if (op == "/") {
      if (y == 0) fault("division by zero");
      return Value::number(static_cast<double>(x) / static_cast<double>(y));
    }
    if (op == "//" || op == "%") {
      if (y == 0) fault("integer division or modulo by zero");
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        --q;
        m += y;
      }
      return Value::integer(op == "//" ? q : m);
    }
    if (op == "**") {
      if (y < 0) {
        if (x == 0) fault("0.0 cannot be raised to a negative power");
        return Value::number(std::pow(static_cast<double>(x), static_cast<double>(y)));
      }
      int64_t acc = 1;
      for (int64_t i = 0; i < y; ++i) acc = checked(mul, acc, x);
      return Value::integer(acc);
    }
  }
  const double x = a.as_float(), y = b.as_float();
  if (op == "+") return Value::number(x + y);
  if (op == "-") return Value::number(x - y);
  if (op == "*") return Value::number(x * y);
  if (op == "/" || op == "//" || op == "%") {
    if (y == 0) fault("float division by zero");
    if (op == "/") return Value::number(x / y);
    if (op == "//") return Value::number(std::floor(x / y));
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return Value::number(m);
  }
  if (op == "**") {
    if (x == 0 && y < 0) fault("0.0 cannot be raised to a negative power");
    return Value::number(std::pow(x, y));
  }
  unsupported(op, a, b);
}

// Python's slice index normalization (PySlice_AdjustIndices).
std::vector<int64_t> slice_indices(int64_t n, const Value& start, const Value& stop, const Value& step) {
  auto given = [](const Value& v) { return !v.is_undefined() && !v.is_none(); };
  auto as_index = [](const Value& v) {
    if (!is_intlike(v)) fault("slice indices must be integers or None, not ", v.type_name());
    return v.as_int();
  };
  const int64_t st = given(step) ? as_index(step) : 1;
  if (st == 0) fault("slice step cannot be zero");
  const int64_t lower = st > 0 ? 0 : -1, upper = st > 0 ? n : n - 1;
  auto adjust = [&](const Value& v, int64_t fallback) {
    if (!given(v)) return fallback;
    int64_t i = as_index(v);
    if (i < 0) return std::max(i + n, lower);
    return std::min(i, upper);
  };
  const int64_t b = adjust(start, st > 0 ? lower : upper);
  const int64_t e = adjust(stop, st > 0 ? upper : lower);
  std::vector<int64_t> idx;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) idx.push_back(i);
  return idx;
}

}  // namespace

Value binary_op(std::string_view op, const Value& a, const Value& b) {
  if (op == "~") return Value::string(to_str(a) + to_str(b));
  if (a.is_number() && b.is_number()) return arithmetic(op, a, b);
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value::string(a.str() + b.str());
    if (a.is_array() && b.is_array() && a.is_tuple() == b.is_tuple()) {
      Array r = a.items();
      r.insert(r.end(), b.items().begin(), b.items().end());
      return Value::array(std::move(r), a.is_tuple());
    }
  }
  if (op == "*") {
    if ((a.is_string() || a.is_array()) && is_intlike(b)) return repeat(a, b.as_int());
    if ((b.is_string() || b.is_array()) && is_intlike(a)) return repeat(b, a.as_int());
  }
  if (op == "%" && a.is_string()) fault("printf-style formatting ('...' % x) is not supported; use ~ or format()");
  unsupported(op, a, b);
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Kind::undefined: return false;
    case Kind::string:
      if (!item.is_string()) fault("'in <string>' requires string as left operand, not ", item.type_name());
      return container.str().find(item.str()) != std::string::npos;
    case Kind::array:
      for (const auto& x : container.items())
        if (equals(x, item)) return true;
      return false;
    case Kind::object: return item.is_string() && container.object().find(item.str()) != nullptr;
    default: fault("argument of type '", container.type_name(), "' is not iterable");
  }
}

bool compare_op(std::string_view op, const Value& a, const Value& b) {
  if (op == "==") return equals(a, b);
  if (op == "!=") return !equals(a, b);
  if (op == "in") return contains(b, a);
  if (op == "notin") return !contains(b, a);
  if (a.is_undefined() && !a.hint().empty()) fault(a.hint());
  if (b.is_undefined() && !b.hint().empty()) fault(b.hint());
  const int c = compare(a, b, op);
  if (op == "<") return c < 0;
  if (op == "<=") return c <= 0;
  if (op == ">") return c > 0;
  return c >= 0;
}

Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_array()) {
    const auto& a = obj.items();
    Array r;
    for (int64_t i : slice_indices(static_cast<int64_t>(a.size()), start, stop, step)) r.push_back(a[i]);
    return Value::array(std::move(r), obj.is_tuple());
  }
  if (obj.is_string()) {
    const std::u32string u = text::to_u32(obj.str());
    std::u32string r;
    for (int64_t i : slice_indices(static_cast<int64_t>(u.size()), start, stop, step)) r += u[i];
    return Value::string(text::to_utf8(r));
  }
  if (obj.is_undefined()) fault(obj.hint().empty() ? "cannot slice an undefined value" : obj.hint());
  fault("'", obj.type_name(), "' object is not subscriptable");
}

Value get_item(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Kind::object:
    case Kind::ns:
      if (key.is_string()) {
        if (const Value* v = obj.object().find(key.str())) return *v;
        if (obj.is_object()) return get_attr(obj, key.str());
      }
      return Value::undefined(cat("'", obj.type_name(), " object' has no key ", repr(key)));
    case Kind::array:
    case Kind::string: {
      if (key.is_string()) return get_attr(obj, key.str());
      if (!is_intlike(key)) return Value::undefined(cat("'", obj.type_name(), " object' has no item ", repr(key)));
      int64_t i = key.as_int();
      if (obj.is_array()) {
        const auto n = static_cast<int64_t>(obj.items().size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) return Value::undefined(cat("list index ", key.as_int(), " is out of range (length ", n, ")"));
        return obj.items()[i];
      }
      const std::u32string u = text::to_u32(obj.str());
      const auto n = static_cast<int64_t>(u.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined(cat("string index ", key.as_int(), " is out of range (length ", n, ")"));
      return Value::string(text::to_utf8(u.substr(i, 1)));
    }
    default: return Value::undefined(cat("'", obj.type_name(), "' object has no item ", repr(key)));
  }
}

}  // namespace tandem::jinja
