// The Jinja interpreter through tandem::ChatTemplate: errors (one line naming name:line:column and what
// went wrong), whitespace control corners, and Python semantics that chat templates rely on.
// The broad feature table lives in the fixtures (jinja_cases.json, checked against Jinja2).
#include <gtest/gtest.h>

#include <string>

#include "tandem/text/chat_template.h"
#include "tandem/error.h"

namespace {

std::string render(const std::string& tpl, const std::string& vars = "{}") {
  return tandem::ChatTemplate(tpl, "t").render(vars);
}

// The message of the tandem::Error that building or rendering raises ("" if none).
std::string error_of(const std::string& tpl, const std::string& vars = "{}") {
  try {
    tandem::ChatTemplate(tpl, "t").render(vars);
  } catch (const tandem::Error& e) {
    return e.what();
  }
  return "";
}

void expect_error(const std::string& tpl, const std::string& where, const std::string& what,
                  const std::string& vars = "{}") {
  const std::string msg = error_of(tpl, vars);
  SCOPED_TRACE(tpl);
  EXPECT_EQ(msg.rfind(where, 0), 0u) << "message: " << msg;
  EXPECT_NE(msg.find(what), std::string::npos) << "message: " << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "not one line: " << msg;
  EXPECT_EQ(msg.find('\r'), std::string::npos) << "not one line: " << msg;
}

TEST(Jinja, SyntaxErrorsNameLineAndColumn) {
  expect_error("Hello\n{% if x %}\n  {{ x +  }}\n{% endif %}", "t:3:11: ", "expected an expression, found '}}'");
  expect_error("{% if x %}abc", "t:1:14: ", "'if' opened at t:1:1 is not closed with 'endif'");
  expect_error("{% for x in xs %}{% endif %}", "t:1:18: ", "unexpected 'endif'");
  expect_error("ab {{ x ", "t:1:4: ", "tag is not closed with '}}'");
  expect_error("{# never closed", "t:1:1: ", "comment is not closed");
  expect_error("{{ 'abc }}", "t:1:4: ", "string literal is not closed");
  expect_error("{% include 'other.jinja' %}", "t:1:1: ", "unknown or unsupported tag 'include'");
  expect_error("{% break %}", "t:1:1: ", "'break' outside a for loop");
  expect_error("{{ x ? 1 }}", "t:1:6: ", "unexpected character '?'");
  expect_error("{{ (1, 2] }}", "t:1:9: ", "unexpected ']'");
}

// Found by fuzzing the chat template (tests/fuzz/fuzz_chat_template, docs/fuzzing.md): a template comes
// with the model file, and each of these hung the render or exhausted memory, or threw a std::
// exception past the interpreter. Each is now a one-line error at the node.
TEST(Jinja, HostileTemplatesFailInsteadOfHangingOrExhaustingMemory) {
  expect_error("{{ 'x' * 10000000000 }}", "t:1:8: ", "would make a string past the limit of 33554432 bytes");
  expect_error("{{ [1, 2] * 10000000000 }}", "t:1:11: ", "would make a list past the limit of 1048576 items");
  expect_error("{{ 'a' | indent(10000000000) }}", "t:1:10: ", "filter 'indent' would make a string of 10000000000 bytes");
  expect_error("{{ [1] | tojson(indent=100000000000) }}", "t:1:10: ", "filter 'tojson' would make a string");
  expect_error("{{ ([1] * 100000) | join('x' * 100000) }}", "t:1:21: ", "filter 'join' would make a string");
  expect_error("{{ ('{0}' * 100000).format('x' * 1000) }}", "t:1:", "str.format() would make a string");
  expect_error("{{ 'ab' | replace('', 'x' * 30000000) }}", "t:1:11: ", "filter 'replace' would make a string");
  expect_error("{{ 'ab'.replace('', 'x' * 30000000) }}", "t:1:", "would make a string");
  expect_error("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", "t:1:", "the output would make a string");
  // Work without size: nested loops, and a list rebuilt on every iteration (quadratic copying).
  expect_error("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}", "t:1:",
               "the template did more work than a render may");
  expect_error("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = ns.l + [i] %}{% endfor %}",
               "t:1:", "the template did more work than a render may");
  // Indices that std::stoul / std::stoll would throw on.
  expect_error("{{ '{99999999999999999999999}'.format(1) }}", "t:1:", "replacement index 99999999999999999999999 out of range");
  EXPECT_EQ(render("{{ [{'a': 1}] | map(attribute='99999999999999999999999') | list }}"), "[Undefined]");
  // The limits leave real work alone: a long conversation renders.
  std::string messages;
  for (int i = 0; i < 2000; ++i)
    messages += std::string(i ? "," : "") + R"({"role": "user", "content": ")" + std::string(500, 'a' + i % 26) + R"("})";
  const std::string out = render(
      "{% for m in messages %}<|{{ m.role }}|>{{ m.content | trim }}{% endfor %}",
      R"({"messages": [)" + messages + "]}");
  EXPECT_EQ(out.size(), 2000u * (8 + 500));
}

TEST(Jinja, UnknownFiltersAndTestsFailWhenLoaded) {
  expect_error("line\n{{ x | nosuch }}", "t:2:8: ", "unknown filter 'nosuch'");
  expect_error("{% if x is frobbed %}{% endif %}", "t:1:12: ", "unknown test 'frobbed'");
  expect_error("{% filter nosuch %}x{% endfilter %}", "t:1:11: ", "unknown filter 'nosuch'");
  // A test or filter named by a string is looked up when it runs; the name's control characters
  // (here a line break, found by fuzz_chat_template; the template's \r\n reads as one) must not break
  // the message's line.
  expect_error("{{ messages | selectattr('role', 'bad\r\nname') | list }}", "t:1:", "unknown test 'bad?name'",
               R"({"messages": [{"role": "user"}]})");
  expect_error("{{ messages | map('no\nsuch') | list }}", "t:1:", "unknown filter 'no?such'",
               R"({"messages": [{"role": "user"}]})");
}

TEST(Jinja, RuntimeErrorsNameTheNode) {
  expect_error("{%- if messages[0].role != 'user' %}\n  {{- raise_exception('Conversations must start with a user turn') }}\n{%- endif %}",
               "t:2:7: ", "raise_exception(): Conversations must start with a user turn",
               R"({"messages": [{"role": "system"}]})");
  expect_error("{{ foo.bar }}", "t:1:7: ", "'foo' is undefined (getting attribute 'bar')");
  expect_error("{{ 1 + 'a' }}", "t:1:6: ", "unsupported operand type(s) for +: 'int' and 'str'");
  expect_error("{{ 'a' + nothing }}", "t:1:8: ", "'nothing' is undefined");
  expect_error("{{ 1 < 'a' }}", "t:1:4: ", "'<' not supported between instances of 'int' and 'str'");
  expect_error("{{ 'x' | items }}", "t:1:10: ", "can only get item pairs from a mapping");
  expect_error("{% set xs = [] %}{% set _ = xs.append(1) %}", "t:1:31: ", "list.append() is not allowed");
  expect_error("{% for a, b in [[1]] %}{% endfor %}", "t:1:1: ", "not enough values to unpack (expected 2, got 1)");
  expect_error("{% for x in 5 %}{% endfor %}", "t:1:1: ", "'int' object is not iterable");
  expect_error("{% set n = 1 %}{% set n.x = 2 %}", "t:1:16: ", "not a namespace()");
  expect_error("{{ 1 // 0 }}", "t:1:6: ", "integer division or modulo by zero");
  expect_error("{{ {'a': 1} | tojson(indent=[]) }}", "t:1:15: ", "indent must be an integer or a string");
  expect_error("{{ x | tojson }}", "t:1:8: ", "Object of type Undefined is not JSON serializable");
  expect_error("{{ 'a'.split('') }}", "t:1:7: ", "str.split(): empty separator");
  expect_error("{{ '{}{0}'.format(1) }}", "t:1:11: ", "cannot mix automatic ({}) and manual ({0}) field numbering");
  expect_error("{{ nosuch() }}", "t:1:4: ", "'nosuch' is undefined");
  expect_error("{{ 'x'.upper(1) }}", "t:1:7: ", "str.upper() takes at most 0 argument(s), got 1");
}

TEST(Jinja, ErrorInsideAMacroPointsIntoItsBody) {
  expect_error("{% macro m(x) %}\n  {{ x.y.z }}\n{% endmacro %}{{ m({}) }}", "t:2:9: ",
               "'dict object' has no attribute 'y' (getting attribute 'z')");
}

TEST(Jinja, DeepNestingAndRunawayRecursionAreErrors) {
  expect_error("{{ " + std::string(500, '(') + "1" + std::string(500, ')') + " }}", "t:1:", "nested deeper than 200 levels");
  expect_error("{{ " + std::string(500, '-') + "1 }}", "t:1:", "nested deeper than 200 levels");
  std::string nots;
  for (int i = 0; i < 300; ++i) nots += "not ";
  expect_error("{{ " + nots + "x }}", "t:1:", "nested deeper than 200 levels");
  std::string blocks;
  for (int i = 0; i < 300; ++i) blocks += "{% if true %}";
  expect_error(blocks, "t:1:", "nested deeper than 200 levels");
  expect_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "t:1:20: ", "macro 'f' recursed deeper than 256 calls");
  expect_error("{{ raise_exception('two\nlines') }}", "t:1:4: ", "raise_exception(): two\\nlines");
}

TEST(Jinja, MacroArgumentErrors) {
  expect_error("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", "t:1:34: ", "macro 'm' takes 1 argument(s), got 2");
  expect_error("{% macro m(a) %}{% endmacro %}{{ m(b=1) }}", "t:1:34: ", "macro 'm' has no parameter 'b'");
}

TEST(Jinja, WhitespaceControlCorners) {
  // lstrip_blocks removes only spaces and tabs that start a line; trim_blocks one newline after %}.
  EXPECT_EQ(render("a\n    {% if true %}\n    b\n    {% endif %}\nc"), "a\n    b\nc");
  EXPECT_EQ(render("x  {% if true %}y{% endif %}"), "x  y");                   // not at line start
  EXPECT_EQ(render("{{ 'v' }}\n{{ 'w' }}\n"), "v\nw");                         // no trim after }}
  EXPECT_EQ(render("{% if true %}\n\nz{% endif %}"), "\nz");                   // only one newline goes
  EXPECT_EQ(render("a\r\n{% if true %}\r\nb\r\n{% endif %}\r\n"), "a\nb\n");   // CRLF normalized
  EXPECT_EQ(render("a {{- ' b ' -}} \n c"), "a b c");
  EXPECT_EQ(render("{%- if true -%}  \n  x  \n  {%- endif %}"), "x");
  EXPECT_EQ(render("  {%+ if true %}x{% endif %}"), "  x");
  EXPECT_EQ(render("{% if true +%}\nx{% endif %}"), "\nx");
  EXPECT_EQ(render("a\n\t{# note #}\nb"), "a\nb");
  EXPECT_EQ(render("{% generation %}\nkept{% endgeneration %}"), "kept");
  EXPECT_EQ(render("{{ {'a': {'b': 1}} }}"), "{'a': {'b': 1}}");  // '}}' inside braces is not the tag end
}

TEST(Jinja, PythonSemanticsOfValuesFromJson) {
  const std::string vars =
      R"({"i": 2, "f": 2.0, "g": 0.5, "t": true, "n": null, "s": "x", "l": [1, "a", null, false], "o": {"k": [true]}})";
  EXPECT_EQ(render("{{ i }}|{{ f }}|{{ g }}|{{ t }}|{{ n }}|{{ s }}|{{ l }}|{{ o }}", vars),
            "2|2.0|0.5|True|None|x|[1, 'a', None, False]|{'k': [True]}");
  EXPECT_EQ(render("{{ i | tojson }}|{{ f | tojson }}|{{ l | tojson }}|{{ o | tojson }}", vars),
            R"(2|2.0|[1, "a", null, false]|{"k": [true]})");
  EXPECT_EQ(render("{{ i == f }}|{{ t == 1 }}|{{ n is none }}|{{ o.k[0] is true }}", vars), "True|True|True|True");
  EXPECT_EQ(render(R"({{ s | string }}{{ "it's" }}{{ ["it's", 'say "x"', 'both \' "'] }})", vars),
            R"(xit's["it's", 'say "x"', 'both \' "'])");
}

TEST(Jinja, DictAttributesPreferMethodsSubscriptsPreferKeys) {
  const std::string vars = R"({"d": {"items": "key-value", "x": 1}})";
  EXPECT_EQ(render("{{ d['items'] }}|{{ d.items() | length }}|{{ d.x }}|{{ d.get('x') }}", vars), "key-value|2|1|1");
}

TEST(Jinja, NamespaceCarriesStateOutOfLoops) {
  EXPECT_EQ(render("{% set ns = namespace(last=-1, seen=[]) %}{% for m in ms %}{% if m == 'u' %}"
                   "{% set ns.last = loop.index0 %}{% endif %}{% endfor %}{{ ns.last }}",
                   R"({"ms": ["u", "a", "u", "a"]})"),
            "2");
}

TEST(Jinja, LargeInputsRenderLinearly) {
  std::string vars = R"({"messages": [)";
  for (int i = 0; i < 2000; ++i) vars += std::string(i ? "," : "") + R"({"role": "user", "content": "message )" + std::to_string(i) + R"("})";
  vars += "]}";
  const std::string out = render("{% for m in messages %}{{ m.role }}:{{ m.content }}\n{% endfor %}", vars);
  EXPECT_EQ(out.size(), 2000u * std::string("user:message \n").size() + 6890u);  // 6890 digits in 0..1999
}

}  // namespace
