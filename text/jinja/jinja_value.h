// Values of the Jinja interpreter: JSON-like data (none, bool, int, float, str, list, dict) plus undefined,
// namespace() objects and callables. Semantics follow Python, since chat templates are written for
// transformers' Jinja2: str(True) is "True", dicts keep insertion order, ints and floats compare equal.
// Owner: value type; lists, dicts and strings are immutable and shared, a namespace is shared and mutable.
// Thread: a Value is used by one render at a time. Sync: none.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tandem/error.h"

namespace tandem::jinja {

// An error without a template position; the evaluator adds the position of the node that raised it.
struct Fault : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <class... A>
[[noreturn]] void fault(const A&... parts) {
  std::ostringstream os;
  tandem::detail::append(os, parts...);
  throw Fault(tandem::printable(os.str()));  // names and messages from the template's strings: one line
}

// Concatenates the parts' stream output (also sidesteps GCC 12's false -Wrestrict on "'" + std::string).
template <class... A>
std::string cat(const A&... parts) {
  std::ostringstream os;
  tandem::detail::append(os, parts...);
  return os.str();
}

// What one render may build. A chat template comes with the model file, so a hostile one must get an
// error, not hang the server or exhaust its memory: no string past kMaxStringBytes, no list or dict
// past kMaxItems, and a work budget, kRenderBudget units, of which every evaluator step (and loop
// iteration) spends kStepUnits, and every string, list and dict built during the render one unit per
// kBytesPerUnit bytes and kItemUnits per item. The whole budget is a million steps, or 8 million list
// items or 512 MiB of strings built: a fraction of a second in a release build, a few seconds under
// ASan. A chat template rendering 2,000 messages spends a few percent of it.
constexpr size_t kMaxStringBytes = size_t(32) << 20;
constexpr size_t kMaxItems = size_t(1) << 20;
constexpr uint64_t kRenderBudget = uint64_t(1) << 26;
constexpr uint64_t kStepUnits = 64;
constexpr uint64_t kItemUnits = 8;
constexpr uint64_t kBytesPerUnit = 8;

// The budget of the render running on this thread while it is alive (renders on other threads
// have their own). Outside a render nothing is counted or capped.
class RenderBudget {
 public:
  RenderBudget();
  ~RenderBudget();
  RenderBudget(const RenderBudget&) = delete;
  RenderBudget& operator=(const RenderBudget&) = delete;
  static void spend(uint64_t units);  // faults when the current render's budget runs out

 private:
  RenderBudget* outer_;
  uint64_t left_ = kRenderBudget;
};

// Faults, during a render, when an operation (`what`) would make a string of n bytes, past
// kMaxStringBytes; checked before building where the size is known up front, and as it grows where
// it is not.
void check_string_size(uint64_t n, std::string_view what);

enum class Kind : uint8_t { undefined, none, boolean, integer, floating, string, array, object, ns, callable };

class Value;
class Evaluator;
using Array = std::vector<Value>;

// A dict (or namespace): keys in insertion order, as Python dicts and JSON objects keep them.
struct Object {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(std::string_view key) const;
  void set(std::string key, Value value);
};

// Arguments of a call, filter or test (operand excluded).
struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keywords;
};

using NativeFn = std::function<Value(Evaluator&, Args&)>;
struct Callable {
  std::string name;
  NativeFn fn;
};

class Value {
 public:
  Value() = default;  // undefined
  static Value undefined(std::string hint);  // hint: what was looked up, for error messages
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double f);
  static Value string(std::string s);
  static Value array(Array items, bool tuple = false);
  static Value object(Object o);
  static Value ns(Object o);
  static Value function(std::string name, NativeFn fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::undefined; }
  bool is_none() const { return kind_ == Kind::none; }
  bool is_bool() const { return kind_ == Kind::boolean; }
  bool is_int() const { return kind_ == Kind::integer; }
  bool is_float() const { return kind_ == Kind::floating; }
  bool is_number() const { return kind_ == Kind::integer || kind_ == Kind::floating || kind_ == Kind::boolean; }
  bool is_string() const { return kind_ == Kind::string; }
  bool is_array() const { return kind_ == Kind::array; }
  bool is_tuple() const { return kind_ == Kind::array && tuple_; }
  bool is_object() const { return kind_ == Kind::object; }
  bool is_ns() const { return kind_ == Kind::ns; }
  bool is_callable() const { return kind_ == Kind::callable; }

  bool as_bool() const { return n_.b; }
  int64_t as_int() const { return kind_ == Kind::boolean ? n_.b : n_.i; }  // bool counts as int, as in Python
  double as_float() const;                                                  // any number
  const std::string& str() const;
  const Array& items() const;
  const Object& object() const;  // dict or namespace
  Object& ns_mut() const;
  const Callable& callable() const;
  const std::string& hint() const;  // of an undefined value; "" when none

  bool truthy() const;
  std::string type_name() const;  // Python's: 'str', 'int', 'list', 'dict', 'NoneType', 'Undefined'

 private:
  Kind kind_ = Kind::undefined;
  bool tuple_ = false;
  union {
    bool b;
    int64_t i;
    double f;
  } n_{};
  std::shared_ptr<const void> p_;  // the std::string, Array, Object or Callable of this kind
};

// Python str() and repr() of a value; undefined is "" under str().
std::string to_str(const Value& v);
std::string repr(const Value& v);
void append_str(std::string& out, const Value& v);

// Python ==, and <-style ordering (-1, 0, 1); ordering unlike types is a Fault naming both.
bool equals(const Value& a, const Value& b);
int compare(const Value& a, const Value& b, std::string_view op);

struct JsonStyle {
  std::string indent;  // "" with has_indent: newlines without indentation, as json.dumps(indent=0)
  bool has_indent = false;
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool ensure_ascii = false;
  bool sort_keys = false;
};
// json.dumps of a value; undefined, namespaces and callables are a Fault ("not JSON serializable").
std::string to_json(const Value& v, const JsonStyle& style);

// The elements a for-loop sees: list items, dict keys, string characters; undefined is empty.
Array iterate(const Value& v);
int64_t length(const Value& v);  // len(); a Fault for values without one

}  // namespace tandem::jinja
