// The Jinja evaluator. Errors raised by builtins (Fault) get the position of the innermost node that
// was being evaluated and leave as one-line tandem::Errors.
#include "jinja_eval.h"

#include "tandem/error.h"

namespace tandem::jinja {

const Value* Scope::find(std::string_view name) const {
  for (const Scope* s = this; s; s = s->parent_.get())
    if (const Value* v = s->vars_.find(name)) return v;
  return nullptr;
}

void Scope::set(std::string name, Value value) { vars_.set(std::move(name), std::move(value)); }

ArgReader::ArgReader(const Args& args, std::string what, std::initializer_list<const char*> names)
    : what_(std::move(what)), given_(names.size(), nullptr) {
  if (args.positional.size() > names.size())
    fault(what_, " takes at most ", names.size(), " argument(s), got ", args.positional.size());
  for (size_t i = 0; i < args.positional.size(); ++i) given_[i] = &args.positional[i];
  for (const auto& [k, v] : args.keywords) {
    size_t i = 0;
    for (const char* n : names) {
      if (k == n) break;
      ++i;
    }
    if (i == names.size()) fault(what_, " got an unexpected keyword argument '", k, "'");
    if (given_[i]) fault(what_, " got multiple values for argument '", k, "'");
    given_[i] = &v;
  }
}

const Value* ArgReader::get(size_t i) const { return i < given_.size() ? given_[i] : nullptr; }
Value ArgReader::get_or(size_t i, Value fallback) const {
  const Value* v = get(i);
  return v ? *v : std::move(fallback);
}
bool ArgReader::flag(size_t i, bool fallback) const {
  const Value* v = get(i);
  return v ? v->truthy() : fallback;
}

std::string Evaluator::render(const ScopePtr& vars) {
  top_ = std::make_shared<Scope>(vars);  // template-level `set`s land here, above the caller's variables
  RenderBudget budget;
  std::string out;
  exec(prog_.body, top_, out);
  return out;
}

void Evaluator::rethrow_at(const Node& n, const Fault& f) const {
  fail(prog_.source.where(n.offset), ": ", f.what());
}

Value Evaluator::call(const Value& fn, Args& args) {
  if (fn.is_callable()) return fn.callable().fn(*this, args);
  if (fn.is_undefined()) fault(fn.hint().empty() ? "called an undefined value" : fn.hint());
  fault("'", fn.type_name(), "' object is not callable");
}

Value Evaluator::filter(std::string_view name, const Value& operand, Args& args) {
  const FilterFn* f = find_filter(name);
  if (!f) fault("unknown filter '", name, "'");
  return (*f)(*this, operand, args);
}

bool Evaluator::test(std::string_view name, const Value& operand, Args& args) {
  const TestFn* t = find_test(name);
  if (!t) fault("unknown test '", name, "'");
  return (*t)(*this, operand, args);
}

Evaluator::Flow Evaluator::exec(const Body& body, const ScopePtr& scope, std::string& out) {
  for (const auto& n : body) {
    const Flow f = exec_node(*n, scope, out);
    if (f != Flow::normal) return f;
  }
  return Flow::normal;
}

Evaluator::Flow Evaluator::exec_node(const Node& n, const ScopePtr& scope, std::string& out) {
  try {
    RenderBudget::spend(kStepUnits);
    switch (n.type) {
      case NodeType::text:
        out += static_cast<const TextNode&>(n).text;
        check_string_size(out.size(), "the output");
        return Flow::normal;
      case NodeType::output:
        append_str(out, eval(*static_cast<const OutputNode&>(n).expr, scope));
        check_string_size(out.size(), "the output");
        return Flow::normal;
      case NodeType::if_: {
        const auto& f = static_cast<const IfNode&>(n);
        for (const auto& [cond, body] : f.branches)
          if (eval(*cond, scope).truthy()) return exec(body, scope, out);
        return exec(f.otherwise, scope, out);
      }
      case NodeType::for_: return exec_for(static_cast<const ForNode&>(n), scope, out);
      case NodeType::set: exec_set(static_cast<const SetNode&>(n), scope); return Flow::normal;
      case NodeType::macro: {
        const auto& m = static_cast<const MacroNode&>(n);
        scope->set(m.name, make_macro(m, scope));
        return Flow::normal;
      }
      case NodeType::filter_block: {
        const auto& fb = static_cast<const FilterBlockNode&>(n);
        std::string text;
        const Flow f = exec(fb.body, scope, text);
        Value v = Value::string(std::move(text));
        for (const auto& filt : fb.filters) {
          Args args = eval_args(filt->args, scope);
          try {
            v = filter(filt->name, v, args);
          } catch (const Fault& e) {
            rethrow_at(*filt, e);
          }
        }
        append_str(out, v);
        return f;
      }
      case NodeType::loop_control:
        return static_cast<const LoopControlNode&>(n).is_break ? Flow::brk : Flow::cont;
      case NodeType::block: return exec(static_cast<const BlockNode&>(n).body, scope, out);
      default: fault("internal: expression where a statement was expected");
    }
  } catch (const Fault& e) {
    rethrow_at(n, e);
  }
}

void Evaluator::bind(const Target& t, const Value& v, Scope& scope) {
  if (!t.unpack) {
    scope.set(t.names[0], v);
    return;
  }
  const Array parts = iterate(v);
  if (parts.size() < t.names.size())
    fault("not enough values to unpack (expected ", t.names.size(), ", got ", parts.size(), ")");
  if (parts.size() > t.names.size()) fault("too many values to unpack (expected ", t.names.size(), ")");
  for (size_t i = 0; i < parts.size(); ++i) scope.set(t.names[i], parts[i]);
}

// Each iteration runs in a fresh scope: a `set` in the body lasts until the end of that iteration.
Evaluator::Flow Evaluator::exec_for(const ForNode& n, const ScopePtr& scope, std::string& out) {
  const Value seq = eval(*n.iter, scope);
  Array items = iterate(seq);
  if (n.filter) {
    Array kept;
    for (auto& item : items) {
      auto s = std::make_shared<Scope>(scope);
      bind(n.target, item, *s);
      if (eval(*n.filter, s).truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) return exec(n.otherwise, std::make_shared<Scope>(scope), out);
  const int64_t count = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < count; ++i) {
    RenderBudget::spend(kStepUnits);  // an iteration with an empty body is still a step
    Object loop;
    loop.items.reserve(12);
    loop.set("index", Value::integer(i + 1));
    loop.set("index0", Value::integer(i));
    loop.set("revindex", Value::integer(count - i));
    loop.set("revindex0", Value::integer(count - i - 1));
    loop.set("first", Value::boolean(i == 0));
    loop.set("last", Value::boolean(i == count - 1));
    loop.set("length", Value::integer(count));
    loop.set("depth", Value::integer(1));
    loop.set("depth0", Value::integer(0));
    if (i > 0) loop.set("previtem", items[i - 1]);
    if (i + 1 < count) loop.set("nextitem", items[i + 1]);
    loop.set("cycle", Value::function("loop.cycle", [i](Evaluator&, Args& a) {
      if (a.positional.empty()) fault("loop.cycle() needs at least one value");
      return a.positional[i % static_cast<int64_t>(a.positional.size())];
    }));
    auto s = std::make_shared<Scope>(scope);
    s->set("loop", Value::object(std::move(loop)));
    bind(n.target, items[i], *s);
    if (exec(n.body, s, out) == Flow::brk) break;
  }
  return Flow::normal;
}

void Evaluator::exec_set(const SetNode& n, const ScopePtr& scope) {
  Value v;
  if (n.value) {
    v = eval(*n.value, scope);
  } else {
    std::string text;
    exec(n.body, scope, text);
    v = Value::string(std::move(text));
  }
  if (n.target.attr.empty()) {
    bind(n.target, v, *scope);
    return;
  }
  const Value* ns = scope->find(n.target.names[0]);
  if (!ns || !ns->is_ns())
    fault("cannot set attribute '", n.target.attr, "' of '", n.target.names[0], "': it is ",
          ns ? "a " + ns->type_name() : std::string("undefined"), ", not a namespace()");
  ns->ns_mut().set(n.target.attr, std::move(v));
}

Value Evaluator::make_macro(const MacroNode& m, const ScopePtr& scope) {
  std::weak_ptr<Scope> closure = scope;  // weak: the macro lives in that scope, a strong ref would cycle
  return Value::function(m.name, [&m, closure](Evaluator& ev, Args& args) {
    ScopePtr s = closure.lock();
    return ev.call_macro(m, s ? s : ev.top_, args);
  });
}

Value Evaluator::call_macro(const MacroNode& m, const ScopePtr& closure, Args& args) {
  if (macro_depth_ >= kMaxMacroDepth) fault("macro '", m.name, "' recursed deeper than ", kMaxMacroDepth, " calls");
  struct Depth {
    int& d;
    explicit Depth(int& x) : d(++x) {}
    ~Depth() { --d; }
  } depth(macro_depth_);
  auto s = std::make_shared<Scope>(closure);
  const size_t np = m.params.size();
  if (args.positional.size() > np && !m.uses_varargs)
    fault("macro '", m.name, "' takes ", np, " argument(s), got ", args.positional.size());
  std::vector<bool> given(np, false);
  for (size_t i = 0; i < np && i < args.positional.size(); ++i) {
    s->set(m.params[i].first, args.positional[i]);
    given[i] = true;
  }
  Object extra_kwargs;
  for (auto& [k, v] : args.keywords) {
    size_t i = 0;
    while (i < np && m.params[i].first != k) ++i;
    if (i == np) {
      if (!m.uses_kwargs) fault("macro '", m.name, "' has no parameter '", k, "'");
      extra_kwargs.set(k, v);
      continue;
    }
    if (given[i]) fault("macro '", m.name, "' got multiple values for parameter '", k, "'");
    s->set(k, v);
    given[i] = true;
  }
  for (size_t i = 0; i < np; ++i) {
    if (given[i]) continue;
    const auto& [name, def] = m.params[i];
    s->set(name, def ? eval(*def, s) : Value::undefined(cat("parameter '", name, "' of macro '", m.name, "' was not given")));
  }
  if (m.uses_varargs) {
    Array rest;
    for (size_t i = np; i < args.positional.size(); ++i) rest.push_back(args.positional[i]);
    s->set("varargs", Value::array(std::move(rest), true));
  }
  if (m.uses_kwargs) s->set("kwargs", Value::object(std::move(extra_kwargs)));
  std::string out;
  exec(m.body, s, out);
  return Value::string(std::move(out));
}

Args Evaluator::eval_args(const ArgList& a, const ScopePtr& scope) {
  Args args;
  args.positional.reserve(a.positional.size());
  for (const auto& p : a.positional) args.positional.push_back(eval(*p, scope));
  for (const auto& [k, v] : a.keywords) args.keywords.emplace_back(k, eval(*v, scope));
  return args;
}

Value Evaluator::eval(const Node& n, const ScopePtr& scope) {
  try {
    RenderBudget::spend(kStepUnits);
    return eval_node(n, scope);
  } catch (const Fault& e) {
    rethrow_at(n, e);
  }
}

Value Evaluator::eval_node(const Node& n, const ScopePtr& scope) {
  switch (n.type) {
    case NodeType::literal: return static_cast<const LiteralNode&>(n).value;
    case NodeType::name: {
      const auto& name = static_cast<const NameNode&>(n).name;
      const Value* v = scope->find(name);
      return v ? *v : Value::undefined("'" + name + "' is undefined");
    }
    case NodeType::list: {
      const auto& l = static_cast<const ListNode&>(n);
      Array items;
      items.reserve(l.items.size());
      for (const auto& x : l.items) items.push_back(eval(*x, scope));
      return Value::array(std::move(items), l.tuple);
    }
    case NodeType::dict: {
      Object o;
      for (const auto& [k, v] : static_cast<const DictNode&>(n).items) {
        const Value key = eval(*k, scope);
        if (!key.is_string()) fault("dict keys must be strings here, found ", key.type_name());
        o.set(key.str(), eval(*v, scope));
      }
      return Value::object(std::move(o));
    }
    case NodeType::getattr: {
      const auto& g = static_cast<const GetAttrNode&>(n);
      const Value obj = eval(*g.object, scope);
      if (obj.is_undefined())
        fault(obj.hint().empty() ? "undefined value" : obj.hint(), " (getting attribute '", g.attr, "')");
      return get_attr(obj, g.attr);
    }
    case NodeType::getitem: {
      const auto& g = static_cast<const GetItemNode&>(n);
      const Value obj = eval(*g.object, scope);
      const Value key = eval(*g.key, scope);
      if (obj.is_undefined())
        fault(obj.hint().empty() ? "undefined value" : obj.hint(), " (getting item ", repr(key), ")");
      return get_item(obj, key);
    }
    case NodeType::slice: {
      const auto& s = static_cast<const SliceNode&>(n);
      const Value obj = eval(*s.object, scope);
      auto part = [&](const NodePtr& p) { return p ? eval(*p, scope) : Value(); };
      return slice(obj, part(s.start), part(s.stop), part(s.step));
    }
    case NodeType::call: {
      const auto& c = static_cast<const CallNode&>(n);
      const Value fn = eval(*c.callee, scope);
      Args args = eval_args(c.args, scope);
      return call(fn, args);
    }
    case NodeType::filter: {
      const auto& f = static_cast<const FilterNode&>(n);
      const Value operand = eval(*f.operand, scope);
      Args args = eval_args(f.args, scope);
      return filter(f.name, operand, args);
    }
    case NodeType::test: {
      const auto& t = static_cast<const TestNode&>(n);
      const Value operand = eval(*t.operand, scope);
      Args args = eval_args(t.args, scope);
      return Value::boolean(test(t.name, operand, args) != t.negated);
    }
    case NodeType::unary: {
      const auto& u = static_cast<const UnaryNode&>(n);
      const Value v = eval(*u.operand, scope);
      if (u.op == "not") return Value::boolean(!v.truthy());
      if (v.is_int() || v.is_bool()) return Value::integer(u.op == "-" ? -v.as_int() : v.as_int());
      if (v.is_float()) return Value::number(u.op == "-" ? -v.as_float() : v.as_float());
      fault("bad operand type for unary ", u.op, ": '", v.type_name(), "'");
    }
    case NodeType::binary: {
      const auto& b = static_cast<const BinaryNode&>(n);
      if (b.op == "and" || b.op == "or") {
        Value l = eval(*b.left, scope);
        if (l.truthy() == (b.op == "or")) return l;
        return eval(*b.right, scope);
      }
      const Value l = eval(*b.left, scope);
      const Value r = eval(*b.right, scope);
      return binary_op(b.op, l, r);
    }
    case NodeType::compare: {
      const auto& c = static_cast<const CompareNode&>(n);
      Value l = eval(*c.first, scope);
      for (const auto& [op, x] : c.rest) {
        Value r = eval(*x, scope);
        if (!compare_op(op, l, r)) return Value::boolean(false);
        l = std::move(r);
      }
      return Value::boolean(true);
    }
    case NodeType::cond: {
      const auto& c = static_cast<const CondNode&>(n);
      if (eval(*c.test, scope).truthy()) return eval(*c.then, scope);
      return c.otherwise ? eval(*c.otherwise, scope) : Value::undefined("the condition was false and there is no else");
    }
    default: fault("internal: statement where an expression was expected");
  }
}

}  // namespace tandem::jinja
