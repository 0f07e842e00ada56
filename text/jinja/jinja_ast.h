// The syntax tree of a parsed template: expressions and statements, each with its source offset.
// Owner: a Program owns its nodes; immutable after parsing. Thread: any (read-only). Sync: none.
#pragma once
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "jinja_lexer.h"
#include "jinja_value.h"

namespace tandem::jinja {

enum class NodeType : uint8_t {
  // expressions
  literal, name, list, dict, getattr, getitem, slice, call, filter, test, unary, binary, compare, cond,
  // statements
  text, output, if_, for_, set, macro, filter_block, loop_control, block
};

struct Node {
  NodeType type;
  size_t offset;
  Node(NodeType t, size_t off) : type(t), offset(off) {}
  virtual ~Node() = default;
};
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct ArgList {
  std::vector<NodePtr> positional;
  std::vector<std::pair<std::string, NodePtr>> keywords;
};

struct LiteralNode : Node {
  Value value;
  LiteralNode(size_t off, Value v) : Node(NodeType::literal, off), value(std::move(v)) {}
};
struct NameNode : Node {
  std::string name;
  NameNode(size_t off, std::string n) : Node(NodeType::name, off), name(std::move(n)) {}
};
struct ListNode : Node {  // [a, b] or (a, b)
  std::vector<NodePtr> items;
  bool tuple;
  ListNode(size_t off, bool t) : Node(NodeType::list, off), tuple(t) {}
};
struct DictNode : Node {
  std::vector<std::pair<NodePtr, NodePtr>> items;
  explicit DictNode(size_t off) : Node(NodeType::dict, off) {}
};
struct GetAttrNode : Node {  // obj.attr: attribute (method) first, then key
  NodePtr object;
  std::string attr;
  GetAttrNode(size_t off, NodePtr o, std::string a) : Node(NodeType::getattr, off), object(std::move(o)), attr(std::move(a)) {}
};
struct GetItemNode : Node {  // obj[key]: key first, then attribute
  NodePtr object, key;
  GetItemNode(size_t off, NodePtr o, NodePtr k) : Node(NodeType::getitem, off), object(std::move(o)), key(std::move(k)) {}
};
struct SliceNode : Node {  // obj[start:stop:step], parts may be null
  NodePtr object, start, stop, step;
  SliceNode(size_t off, NodePtr o) : Node(NodeType::slice, off), object(std::move(o)) {}
};
struct CallNode : Node {
  NodePtr callee;
  ArgList args;
  CallNode(size_t off, NodePtr c) : Node(NodeType::call, off), callee(std::move(c)) {}
};
struct FilterNode : Node {  // operand | name(args); operand is null inside a filter block
  NodePtr operand;
  std::string name;
  ArgList args;
  FilterNode(size_t off, NodePtr o, std::string n) : Node(NodeType::filter, off), operand(std::move(o)), name(std::move(n)) {}
};
struct TestNode : Node {  // operand is [not] name(args)
  NodePtr operand;
  std::string name;
  ArgList args;
  bool negated = false;
  TestNode(size_t off, NodePtr o, std::string n) : Node(NodeType::test, off), operand(std::move(o)), name(std::move(n)) {}
};
struct UnaryNode : Node {  // op: "not", "-", "+"
  std::string op;
  NodePtr operand;
  UnaryNode(size_t off, std::string o, NodePtr x) : Node(NodeType::unary, off), op(std::move(o)), operand(std::move(x)) {}
};
struct BinaryNode : Node {  // op: + - * / // % ** ~ and or
  std::string op;
  NodePtr left, right;
  BinaryNode(size_t off, std::string o, NodePtr l, NodePtr r)
      : Node(NodeType::binary, off), op(std::move(o)), left(std::move(l)), right(std::move(r)) {}
};
struct CompareNode : Node {  // first op1 x1 op2 x2 ...; ops: == != < <= > >= in notin
  NodePtr first;
  std::vector<std::pair<std::string, NodePtr>> rest;
  CompareNode(size_t off, NodePtr f) : Node(NodeType::compare, off), first(std::move(f)) {}
};
struct CondNode : Node {  // then if test else otherwise; otherwise may be null (undefined)
  NodePtr test, then, otherwise;
  CondNode(size_t off, NodePtr t, NodePtr th) : Node(NodeType::cond, off), test(std::move(t)), then(std::move(th)) {}
};

struct TextNode : Node {
  std::string text;
  TextNode(size_t off, std::string t) : Node(NodeType::text, off), text(std::move(t)) {}
};
struct OutputNode : Node {
  NodePtr expr;
  OutputNode(size_t off, NodePtr e) : Node(NodeType::output, off), expr(std::move(e)) {}
};
struct IfNode : Node {
  std::vector<std::pair<NodePtr, Body>> branches;  // if / elif ...
  Body otherwise;
  explicit IfNode(size_t off) : Node(NodeType::if_, off) {}
};
// Assignment target of set/for: one name, several names (unpacking), or namespace.attr.
struct Target {
  std::vector<std::string> names;
  bool unpack = false;
  std::string attr;  // set ns.attr: names[0] is the namespace
};
struct ForNode : Node {
  Target target;
  NodePtr iter, filter;  // filter: `for x in xs if cond`, may be null
  Body body, otherwise;
  explicit ForNode(size_t off) : Node(NodeType::for_, off) {}
};
struct SetNode : Node {
  Target target;
  NodePtr value;  // null for a block set, whose text is the body
  Body body;
  explicit SetNode(size_t off) : Node(NodeType::set, off) {}
};
struct MacroNode : Node {
  std::string name;
  std::vector<std::pair<std::string, NodePtr>> params;  // default may be null
  Body body;
  bool uses_varargs = false, uses_kwargs = false;
  explicit MacroNode(size_t off) : Node(NodeType::macro, off) {}
};
struct FilterBlockNode : Node {
  std::vector<std::unique_ptr<FilterNode>> filters;  // applied in order to the body's text
  Body body;
  explicit FilterBlockNode(size_t off) : Node(NodeType::filter_block, off) {}
};
struct LoopControlNode : Node {
  bool is_break;
  LoopControlNode(size_t off, bool b) : Node(NodeType::loop_control, off), is_break(b) {}
};
struct BlockNode : Node {  // a body with no effect of its own: {% generation %}...{% endgeneration %}
  Body body;
  explicit BlockNode(size_t off) : Node(NodeType::block, off) {}
};

struct Program {
  Source source;
  Body body;
  std::set<std::string, std::less<>> names_read;  // every variable name an expression loads
  explicit Program(Source s) : source(std::move(s)) {}
};

// Parses a template; a syntax error is a tandem::Error naming "name:line:column".
std::unique_ptr<Program> parse(Source source);

}  // namespace tandem::jinja
