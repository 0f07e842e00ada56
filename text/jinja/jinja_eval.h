// The Jinja evaluator: walks a Program's statements with a chain of scopes and writes the output.
// Scoping follows Jinja2: for-loops and macro calls open a scope, if-blocks do not; `set` writes to
// the innermost scope, so a loop cannot change an outer variable except through a namespace().
// Owner: one Evaluator per render. Thread: the rendering thread. Sync: none.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jinja_ast.h"
#include "jinja_value.h"

namespace tandem::jinja {

class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent) : parent_(std::move(parent)) {}
  const Value* find(std::string_view name) const;  // here or in a parent
  void set(std::string name, Value value);         // here

 private:
  std::shared_ptr<Scope> parent_;
  Object vars_;
};
using ScopePtr = std::shared_ptr<Scope>;

class Evaluator {
 public:
  Evaluator(const Program& program, int64_t now_unix) : prog_(program), now_unix_(now_unix) {}

  // Renders the program with `vars` (the caller's variables, whose parent holds the builtins).
  std::string render(const ScopePtr& vars);

  // For builtins that call back: map/select apply filters and tests by name, macros run bodies.
  Value call(const Value& fn, Args& args);
  Value filter(std::string_view name, const Value& operand, Args& args);
  bool test(std::string_view name, const Value& operand, Args& args);
  int64_t now_unix() const { return now_unix_; }

 private:
  enum class Flow { normal, brk, cont };
  Flow exec(const Body& body, const ScopePtr& scope, std::string& out);
  Flow exec_node(const Node& n, const ScopePtr& scope, std::string& out);
  Flow exec_for(const ForNode& n, const ScopePtr& scope, std::string& out);
  void exec_set(const SetNode& n, const ScopePtr& scope);
  Value eval(const Node& n, const ScopePtr& scope);
  Value eval_node(const Node& n, const ScopePtr& scope);
  Args eval_args(const ArgList& a, const ScopePtr& scope);
  void bind(const Target& t, const Value& v, Scope& scope);
  Value make_macro(const MacroNode& m, const ScopePtr& scope);
  Value call_macro(const MacroNode& m, const ScopePtr& closure, Args& args);
  [[noreturn]] void rethrow_at(const Node& n, const Fault& f) const;

  static constexpr int kMaxMacroDepth = 256;  // a runaway recursion is an error, not a stack overflow
  const Program& prog_;
  int64_t now_unix_;
  int macro_depth_ = 0;
  ScopePtr top_;  // the render's variables; macros whose defining scope is gone resolve names here
};

// --- builtins (jinja_filters.cpp, jinja_methods.cpp, jinja_ops.cpp) ---

using FilterFn = Value (*)(Evaluator&, const Value& operand, Args& args);
using TestFn = bool (*)(Evaluator&, const Value& operand, Args& args);
const FilterFn* find_filter(std::string_view name);
const TestFn* find_test(std::string_view name);

Value get_attr(const Value& obj, std::string_view name);  // obj.name: methods first, then keys
Value get_item(const Value& obj, const Value& key);       // obj[key]: keys first, then methods
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
Value binary_op(std::string_view op, const Value& a, const Value& b);
bool compare_op(std::string_view op, const Value& a, const Value& b);  // == != < <= > >= in notin
bool contains(const Value& container, const Value& item);
void add_globals(Scope& scope);  // range, namespace, dict, raise_exception, strftime_now

// Reads a builtin's arguments by position or keyword, like a Python signature.
class ArgReader {
 public:
  ArgReader(const Args& args, std::string what, std::initializer_list<const char*> names);
  const Value* get(size_t i) const;  // the i-th parameter, or null when not given
  Value get_or(size_t i, Value fallback) const;
  bool flag(size_t i, bool fallback) const;  // truthiness
  const std::string& what() const { return what_; }

 private:
  std::string what_;
  std::vector<const Value*> given_;
};

}  // namespace tandem::jinja
