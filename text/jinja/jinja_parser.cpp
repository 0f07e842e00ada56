// Jinja parser: recursive descent over the lexer's tokens, with Jinja2's operator precedence
// (or < and < not < comparisons < + - < ~ < * / // % < ** < unary minus < postfix, filters and tests).
#include <algorithm>
#include <initializer_list>

#include "jinja_ast.h"
#include "jinja_eval.h"
#include "tandem/error.h"

namespace tandem::jinja {
namespace {

class Parser {
 public:
  Parser(Program& prog, std::vector<Token> tokens) : prog_(prog), t_(std::move(tokens)) {}

  void run() { prog_.body = body({}, nullptr, 0, ""); }

 private:
  // --- token helpers ---
  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  bool is_op(std::string_view op) const { return cur().kind == Tok::op && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().kind == Tok::name && cur().text == n; }
  const Token& advance() { return t_[i_ < t_.size() - 1 ? i_++ : i_]; }

  template <class... A>
  [[noreturn]] void error(size_t offset, const A&... parts) const {
    std::ostringstream os;  // parts may quote the template's text: one line, whatever it holds
    tandem::detail::append(os, parts...);
    fail(prog_.source.where(offset), ": ", printable(os.str()));
  }
  std::string describe(const Token& t) const {
    switch (t.kind) {
      case Tok::text: return "text";
      case Tok::var_begin: return "'{{'";
      case Tok::var_end: return "'}}'";
      case Tok::block_begin: return "'{%'";
      case Tok::block_end: return "'%}'";
      case Tok::eof: return "end of template";
      case Tok::string: return "string literal";
      default: return "'" + t.text + "'";
    }
  }
  void expect_op(std::string_view op) {
    if (!is_op(op)) error(cur().offset, "expected '", op, "', found ", describe(cur()));
    advance();
  }
  void expect(Tok kind, const char* what) {
    if (cur().kind != kind) error(cur().offset, "expected ", what, ", found ", describe(cur()));
    advance();
  }
  std::string expect_name(const char* what) {
    if (cur().kind != Tok::name) error(cur().offset, "expected ", what, ", found ", describe(cur()));
    return advance().text;
  }

  // --- statements ---

  // Parses until a block tag named in `ends` (consumed with its name); returns the body.
  Body body(std::initializer_list<std::string_view> ends, std::string* which, size_t open, std::string_view opener) {
    Body out;
    while (true) {
      const Token& t = cur();
      switch (t.kind) {
        case Tok::text:
          out.push_back(std::make_unique<TextNode>(t.offset, t.text));
          advance();
          break;
        case Tok::var_begin: {
          advance();
          auto e = tuple(true, false);
          expect(Tok::var_end, "'}}'");
          out.push_back(std::make_unique<OutputNode>(t.offset, std::move(e)));
          break;
        }
        case Tok::block_begin: {
          const Token& name = peek();
          if (name.kind == Tok::name && std::find(ends.begin(), ends.end(), name.text) != ends.end()) {
            if (which) *which = name.text;
            advance();
            advance();
            return out;
          }
          advance();
          out.push_back(statement(t.offset));
          break;
        }
        case Tok::eof:
          if (ends.size() == 0) return out;
          error(t.offset, "unexpected end of template: '", opener, "' opened at ", prog_.source.where(open),
                " is not closed with 'end", opener, "'");
        default: error(t.offset, "unexpected ", describe(t));
      }
    }
  }

  NodePtr statement(size_t open) {
    if (++depth_ > kMaxDepth) error(open, "blocks nested deeper than ", kMaxDepth, " levels");
    NodePtr n = statement_body(open);
    --depth_;
    return n;
  }

  NodePtr statement_body(size_t open) {
    if (cur().kind != Tok::name) error(cur().offset, "expected a tag name, found ", describe(cur()));
    const std::string tag = advance().text;
    if (tag == "if") return if_stmt(open);
    if (tag == "for") return for_stmt(open);
    if (tag == "set") return set_stmt(open);
    if (tag == "macro") return macro_stmt(open);
    if (tag == "filter") return filter_block(open);
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) error(open, "'", tag, "' outside a for loop");
      expect(Tok::block_end, "'%}'");
      return std::make_unique<LoopControlNode>(open, tag == "break");
    }
    if (tag == "generation") {  // transformers' assistant-mask marker: renders its body unchanged
      expect(Tok::block_end, "'%}'");
      auto n = std::make_unique<BlockNode>(open);
      n->body = body({"endgeneration"}, nullptr, open, "generation");
      expect(Tok::block_end, "'%}'");
      return n;
    }
    static const char* const closers[] = {"endif", "endfor", "endset", "endmacro", "endfilter", "elif", "else",
                                          "endgeneration"};
    for (const char* c : closers)
      if (tag == c) error(open, "unexpected '", tag, "' with no open block it could close");
    error(open, "unknown or unsupported tag '", tag, "'");
  }

  NodePtr if_stmt(size_t open) {
    auto n = std::make_unique<IfNode>(open);
    auto cond = tuple(false, false);
    std::string which;
    while (true) {
      expect(Tok::block_end, "'%}'");
      n->branches.emplace_back(std::move(cond), body({"elif", "else", "endif"}, &which, open, "if"));
      if (which != "elif") break;
      cond = tuple(false, false);
    }
    if (which == "else") {
      expect(Tok::block_end, "'%}'");
      n->otherwise = body({"endif"}, nullptr, open, "if");
    }
    expect(Tok::block_end, "'%}'");
    return n;
  }

  Target assign_target(bool allow_attr) {
    Target t;
    const bool paren = is_op("(");
    if (paren) advance();
    t.names.push_back(expect_name("a variable name"));
    if (allow_attr && !paren && is_op(".")) {
      advance();
      t.attr = expect_name("an attribute name");
      return t;
    }
    while (is_op(",")) {
      advance();
      t.unpack = true;
      if (cur().kind != Tok::name) break;  // trailing comma
      t.names.push_back(advance().text);
    }
    if (paren) {
      t.unpack = true;
      expect_op(")");
    }
    return t;
  }

  NodePtr for_stmt(size_t open) {
    auto n = std::make_unique<ForNode>(open);
    n->target = assign_target(false);
    if (!is_name("in")) error(cur().offset, "expected 'in' in for loop, found ", describe(cur()));
    advance();
    n->iter = tuple(false, false);
    if (is_name("if")) {
      advance();
      n->filter = expression(true);
    }
    if (is_name("recursive")) error(cur().offset, "recursive for loops are not supported");
    expect(Tok::block_end, "'%}'");
    std::string which;
    ++loop_depth_;
    n->body = body({"endfor", "else"}, &which, open, "for");
    --loop_depth_;
    if (which == "else") {
      expect(Tok::block_end, "'%}'");
      n->otherwise = body({"endfor"}, nullptr, open, "for");
    }
    expect(Tok::block_end, "'%}'");
    return n;
  }

  NodePtr set_stmt(size_t open) {
    auto n = std::make_unique<SetNode>(open);
    n->target = assign_target(true);
    if (is_op("=")) {
      advance();
      n->value = tuple(true, false);
      expect(Tok::block_end, "'%}'");
      return n;
    }
    if (n->target.unpack || !n->target.attr.empty()) error(cur().offset, "a block set assigns one plain name");
    expect(Tok::block_end, "'%}'");
    n->body = body({"endset"}, nullptr, open, "set");
    expect(Tok::block_end, "'%}'");
    return n;
  }

  NodePtr macro_stmt(size_t open) {
    auto n = std::make_unique<MacroNode>(open);
    n->name = expect_name("a macro name");
    expect_op("(");
    while (!is_op(")")) {
      if (!n->params.empty()) expect_op(",");
      if (is_op(")")) break;
      std::string p = expect_name("a parameter name");
      NodePtr def;
      if (is_op("=")) {
        advance();
        def = expression(true);
      } else if (!n->params.empty() && n->params.back().second) {
        error(cur().offset, "macro parameter '", p, "' without a default follows one with a default");
      }
      n->params.emplace_back(std::move(p), std::move(def));
    }
    expect_op(")");
    expect(Tok::block_end, "'%}'");
    const int saved_depth = loop_depth_;
    loop_depth_ = 0;
    macros_.push_back(n.get());
    n->body = body({"endmacro"}, nullptr, open, "macro");
    macros_.pop_back();
    loop_depth_ = saved_depth;
    expect(Tok::block_end, "'%}'");
    return n;
  }

  NodePtr filter_block(size_t open) {
    auto n = std::make_unique<FilterBlockNode>(open);
    while (true) {
      const size_t off = cur().offset;
      auto f = std::make_unique<FilterNode>(off, nullptr, expect_name("a filter name"));
      check_filter(*f);
      if (is_op("(")) f->args = call_args();
      n->filters.push_back(std::move(f));
      if (!is_op("|")) break;
      advance();
    }
    expect(Tok::block_end, "'%}'");
    n->body = body({"endfilter"}, nullptr, open, "filter");
    expect(Tok::block_end, "'%}'");
    return n;
  }

  // --- expressions ---

  bool tuple_end() const {
    const Token& t = cur();
    return t.kind == Tok::var_end || t.kind == Tok::block_end || t.kind == Tok::eof ||
           (t.kind == Tok::op && (t.text == ")" || t.text == "]")) ||
           (t.kind == Tok::name && (t.text == "if" || t.text == "recursive"));
  }

  // Comma-separated expressions: a tuple when a comma appears (or `()`), else the single expression.
  NodePtr tuple(bool with_cond, bool explicit_parens) {
    const size_t off = cur().offset;
    std::vector<NodePtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (tuple_end() && (!items.empty() || explicit_parens)) break;
      items.push_back(expression(with_cond));
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple && items.size() == 1) return std::move(items[0]);
    auto n = std::make_unique<ListNode>(off, true);
    n->items = std::move(items);
    return n;
  }

  // Deeply nested input is an error rather than a stack overflow.
  struct Nesting {
    Parser& p;
    explicit Nesting(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxDepth) p.error(p.cur().offset, "expressions nested deeper than ", kMaxDepth, " levels");
    }
    ~Nesting() { --p.depth_; }
  };

  NodePtr expression(bool with_cond) {
    Nesting guard(*this);
    return with_cond ? cond_expr() : or_expr();
  }

  NodePtr cond_expr() {
    auto e = or_expr();
    while (is_name("if")) {
      const size_t off = advance().offset;
      auto test = or_expr();
      auto n = std::make_unique<CondNode>(off, std::move(test), std::move(e));
      if (is_name("else")) {
        advance();
        n->otherwise = cond_expr();
      }
      e = std::move(n);
    }
    return e;
  }

  // One left-associative level: operand (op operand)*, op being an operator token or a keyword.
  NodePtr binary_level(NodePtr (Parser::*operand)(), std::initializer_list<std::string_view> ops) {
    NodePtr l = (this->*operand)();
    while ((cur().kind == Tok::op || cur().kind == Tok::name) &&
           std::find(ops.begin(), ops.end(), cur().text) != ops.end()) {
      const Token& op = advance();
      l = std::make_unique<BinaryNode>(op.offset, op.text, std::move(l), (this->*operand)());
    }
    return l;
  }
  NodePtr or_expr() { return binary_level(&Parser::and_expr, {"or"}); }
  NodePtr and_expr() { return binary_level(&Parser::not_expr, {"and"}); }

  NodePtr not_expr() {
    Nesting guard(*this);
    if (is_name("not")) {
      const size_t off = advance().offset;
      return std::make_unique<UnaryNode>(off, "not", not_expr());
    }
    return compare();
  }

  NodePtr compare() {
    const size_t off = cur().offset;
    auto first = math1();
    std::unique_ptr<CompareNode> n;
    while (true) {
      std::string op;
      if (cur().kind == Tok::op &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" ||
           cur().text == ">" || cur().text == ">=")) {
        op = advance().text;
      } else if (is_name("in")) {
        advance();
        op = "in";
      } else if (is_name("not") && peek().kind == Tok::name && peek().text == "in") {
        advance();
        advance();
        op = "notin";
      } else {
        break;
      }
      if (!n) n = std::make_unique<CompareNode>(off, std::move(first));
      n->rest.emplace_back(std::move(op), math1());
    }
    if (n) return n;
    return first;
  }

  NodePtr math1() { return binary_level(&Parser::concat, {"+", "-"}); }
  NodePtr concat() { return binary_level(&Parser::math2, {"~"}); }
  NodePtr math2() { return binary_level(&Parser::pow, {"*", "/", "//", "%"}); }
  NodePtr pow() { return binary_level(&Parser::filtered_unary, {"**"}); }  // left-associative, as in Jinja2
  NodePtr filtered_unary() { return unary(true); }

  NodePtr unary(bool with_filter) {
    Nesting guard(*this);
    NodePtr n;
    if (is_op("-") || is_op("+")) {
      const Token& op = advance();
      n = std::make_unique<UnaryNode>(op.offset, op.text, unary(false));
    } else {
      n = primary();
    }
    n = postfix(std::move(n));
    if (with_filter) n = filter_expr(std::move(n));
    return n;
  }

  NodePtr primary() {
    const Token& t = cur();
    switch (t.kind) {
      case Tok::name: {
        advance();
        if (t.text == "true" || t.text == "True") return std::make_unique<LiteralNode>(t.offset, Value::boolean(true));
        if (t.text == "false" || t.text == "False")
          return std::make_unique<LiteralNode>(t.offset, Value::boolean(false));
        if (t.text == "none" || t.text == "None") return std::make_unique<LiteralNode>(t.offset, Value::none());
        prog_.names_read.insert(t.text);
        for (MacroNode* m : macros_) {
          if (t.text == "varargs") m->uses_varargs = true;
          if (t.text == "kwargs") m->uses_kwargs = true;
        }
        return std::make_unique<NameNode>(t.offset, t.text);
      }
      case Tok::string: {
        std::string s = advance().text;
        while (cur().kind == Tok::string) s += advance().text;  // 'a' 'b' is 'ab'
        return std::make_unique<LiteralNode>(t.offset, Value::string(std::move(s)));
      }
      case Tok::integer: advance(); return std::make_unique<LiteralNode>(t.offset, Value::integer(t.i));
      case Tok::floating: advance(); return std::make_unique<LiteralNode>(t.offset, Value::number(t.f));
      case Tok::op:
        if (t.text == "(") {
          advance();
          auto e = tuple(true, true);
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          advance();
          auto n = std::make_unique<ListNode>(t.offset, false);
          while (!is_op("]")) {
            if (!n->items.empty()) expect_op(",");
            if (is_op("]")) break;
            n->items.push_back(expression(true));
          }
          advance();
          return n;
        }
        if (t.text == "{") {
          advance();
          auto n = std::make_unique<DictNode>(t.offset);
          while (!is_op("}")) {
            if (!n->items.empty()) expect_op(",");
            if (is_op("}")) break;
            auto k = expression(true);
            expect_op(":");
            n->items.emplace_back(std::move(k), expression(true));
          }
          advance();
          return n;
        }
        break;
      default: break;
    }
    error(t.offset, "expected an expression, found ", describe(t));
  }

  NodePtr postfix(NodePtr n) {
    while (true) {
      if (is_op(".")) {
        const size_t off = advance().offset;
        if (cur().kind == Tok::name) {
          n = std::make_unique<GetAttrNode>(off, std::move(n), advance().text);
        } else if (cur().kind == Tok::integer) {
          const Token& k = advance();
          n = std::make_unique<GetItemNode>(off, std::move(n), std::make_unique<LiteralNode>(k.offset, Value::integer(k.i)));
        } else {
          error(cur().offset, "expected an attribute name after '.', found ", describe(cur()));
        }
      } else if (is_op("[")) {
        n = subscript(std::move(n));
      } else if (is_op("(")) {
        const size_t off = n->offset;  // errors of a call point at the callee
        auto c = std::make_unique<CallNode>(off, std::move(n));
        c->args = call_args();
        n = std::move(c);
      } else {
        return n;
      }
    }
  }

  NodePtr subscript(NodePtr obj) {
    const size_t off = advance().offset;  // '['
    NodePtr start;
    if (!is_op(":")) start = expression(true);
    if (is_op(":")) {
      auto s = std::make_unique<SliceNode>(off, std::move(obj));
      s->start = std::move(start);
      advance();
      if (!is_op("]") && !is_op(":")) s->stop = expression(true);
      if (is_op(":")) {
        advance();
        if (!is_op("]")) s->step = expression(true);
      }
      expect_op("]");
      return s;
    }
    if (is_op(",")) {  // obj[a, b]: a tuple key
      auto t = std::make_unique<ListNode>(start->offset, true);
      t->items.push_back(std::move(start));
      while (is_op(",")) {
        advance();
        if (is_op("]")) break;
        t->items.push_back(expression(true));
      }
      start = std::move(t);
    }
    expect_op("]");
    return std::make_unique<GetItemNode>(off, std::move(obj), std::move(start));
  }

  ArgList call_args() {
    expect_op("(");
    ArgList a;
    while (!is_op(")")) {
      if (!a.positional.empty() || !a.keywords.empty()) expect_op(",");
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) error(cur().offset, "argument unpacking with '*' is not supported");
      if (cur().kind == Tok::name && peek().kind == Tok::op && peek().text == "=") {
        std::string k = advance().text;
        advance();
        a.keywords.emplace_back(std::move(k), expression(true));
      } else {
        if (!a.keywords.empty()) error(cur().offset, "positional argument follows keyword argument");
        a.positional.push_back(expression(true));
      }
    }
    advance();
    return a;
  }

  // Unknown filters and tests are errors when the template is loaded, as in Jinja2.
  void check_filter(const FilterNode& f) const {
    if (!find_filter(f.name)) error(f.offset, "unknown filter '", f.name, "'");
  }

  NodePtr filter_expr(NodePtr n) {
    while (true) {
      if (is_op("|")) {
        advance();
        const size_t off = cur().offset;
        auto f = std::make_unique<FilterNode>(off, std::move(n), expect_name("a filter name"));
        check_filter(*f);
        if (is_op("(")) f->args = call_args();
        n = std::move(f);
      } else if (is_name("is")) {
        advance();
        const bool negated = is_name("not");
        if (negated) advance();
        const size_t off = cur().offset;
        auto t = std::make_unique<TestNode>(off, std::move(n), expect_name("a test name"));
        if (!find_test(t->name)) error(off, "unknown test '", t->name, "'");
        t->negated = negated;
        const Token& c = cur();
        if (is_op("(")) {
          t->args = call_args();
        } else if ((c.kind == Tok::name || c.kind == Tok::string || c.kind == Tok::integer || c.kind == Tok::floating ||
                    is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
          if (is_name("is")) error(c.offset, "tests cannot be chained with 'is'");
          t->args.positional.push_back(postfix(primary()));  // `x is divisibleby 3`
        }
        n = std::move(t);
      } else if (is_op("(")) {
        auto c = std::make_unique<CallNode>(n->offset, std::move(n));
        c->args = call_args();
        n = std::move(c);
      } else {
        return n;
      }
    }
  }

  static constexpr int kMaxDepth = 200;
  Program& prog_;
  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<MacroNode*> macros_;
};

}  // namespace

std::unique_ptr<Program> parse(Source source) {
  auto prog = std::make_unique<Program>(std::move(source));
  Parser(*prog, tokenize(prog->source)).run();
  return prog;
}

}  // namespace tandem::jinja
