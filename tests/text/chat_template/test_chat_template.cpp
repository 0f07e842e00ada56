// tandem::ChatTemplate's API: input normalization (tool-call arguments, text parts), default variables,
// the strftime_now clock, reads_variable, file loading, input errors, and concurrent renders.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "tandem/text/chat_template.h"
#include "tandem/error.h"
#include "test_util.h"

namespace {

const char* kArgsTemplate =
    "{% for m in messages %}{% for c in m.tool_calls %}{% set f = c.function if c.function is defined else c %}"
    "{{ f.name }}:{% if f.arguments is mapping %}{% for k, v in f.arguments | items %}{{ k }}={{ v | tojson }};"
    "{% endfor %}{% else %}raw {{ f.arguments }}{% endif %}{{ '\\n' }}{% endfor %}{% endfor %}";

std::string error_of(const tandem::ChatTemplate& t, const std::string& vars,
                     const tandem::ChatRenderOptions& o = {}) {
  try {
    t.render(vars, o);
  } catch (const tandem::Error& e) {
    return e.what();
  }
  return "";
}

TEST(ChatTemplate, ToolArgumentStringsAreParsedIntoObjects) {
  const tandem::ChatTemplate t(kArgsTemplate, "args");
  const std::string vars = R"({"messages": [{"role": "assistant", "tool_calls": [
      {"id": "1", "type": "function", "function": {"name": "f", "arguments": "{\"b\": 1, \"a\": [\"x\", 2.5], \"u\": \"\\u00e9\"}"}},
      {"id": "2", "type": "function", "function": {"name": "g", "arguments": {"k": null}}},
      {"id": "3", "type": "function", "function": {"name": "h", "arguments": "  "}},
      {"name": "flat", "arguments": "{\"z\": true}"}]}]})";
  EXPECT_EQ(t.render(vars), "f:b=1;a=[\"x\", 2.5];u=\"é\";\ng:k=null;\nh:\nflat:z=true;\n");
  tandem::ChatRenderOptions raw;
  raw.parse_tool_arguments = false;
  EXPECT_EQ(t.render(vars, raw).substr(0, 40), "f:raw {\"b\": 1, \"a\": [\"x\", 2.5], \"u\": \"\\u");
}

TEST(ChatTemplate, BadToolArgumentsNameTheMessageAndCall) {
  const tandem::ChatTemplate t(kArgsTemplate, "args");
  const std::string not_json =
      R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}]}]})";
  EXPECT_EQ(error_of(t, not_json).rfind("args: messages[1].tool_calls[0].function.arguments: not valid JSON (", 0), 0u)
      << error_of(t, not_json);
  const std::string array =
      R"({"messages": [{"role": "assistant", "tool_calls": [{}, {"function": {"name": "f", "arguments": "[1]"}}]}]})";
  EXPECT_EQ(error_of(t, array), "args: messages[0].tool_calls[1].function.arguments: expected a JSON object, found an array");
}

TEST(ChatTemplate, TextPartsAreJoinedUnlessTheyHoldOtherParts) {
  const tandem::ChatTemplate t("{% for m in messages %}[{{ m.content }}]{% endfor %}", "parts");
  const std::string vars = R"({"messages": [
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "user", "content": [{"type": "text", "text": "c"}, {"type": "image_url", "image_url": {"url": "u"}}]},
      {"role": "user", "content": []}]})";
  EXPECT_EQ(t.render(vars),
            "[a\nb][[{'type': 'text', 'text': 'c'}, {'type': 'image_url', 'image_url': {'url': 'u'}}]][[]]");
  tandem::ChatRenderOptions keep;
  keep.join_text_parts = false;
  EXPECT_EQ(t.render(vars, keep).substr(0, 45), "[[{'type': 'text', 'text': 'a'}, {'type': 'te");
}

TEST(ChatTemplate, DefaultStringsFillOnlyMissingVariables) {
  const tandem::ChatTemplate t("{{ bos_token }}x{{ eos_token }}", "tokens");
  tandem::ChatRenderOptions o;
  o.default_strings = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
  EXPECT_EQ(t.render(R"({"eos_token": "E"})", o), "<s>xE");
}

TEST(ChatTemplate, StrftimeNowUsesThePinnedClock) {
  const tandem::ChatTemplate t("{{ strftime_now('%Y-%m') }}", "clock");
  tandem::ChatRenderOptions o;
  o.now_unix = 1700000000;  // 2023-11-14 22:13 UTC: November in every time zone
  EXPECT_EQ(t.render("{}", o), "2023-11");
}

TEST(ChatTemplate, InputErrorsNameTheTemplate) {
  const tandem::ChatTemplate t("x", "tpl");
  EXPECT_EQ(error_of(t, "{\"messages\": [").rfind("tpl: variables: not valid JSON (", 0), 0u);
  EXPECT_EQ(error_of(t, "[1]"), "tpl: variables: expected a JSON object, found an array");
  EXPECT_EQ(error_of(t, "{\"s\": \"\xff\"}").rfind("tpl: variables: not valid JSON (Invalid encoding", 0), 0u);
}

TEST(ChatTemplate, LoadsFilesAndReportsVariablesRead) {
  const auto t = tandem::ChatTemplate::from_file(
      tandem::test::shared_data("chat_templates/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja"));
  EXPECT_EQ(t.name(), "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja");
  EXPECT_TRUE(t.reads_variable("enable_thinking"));
  EXPECT_TRUE(t.reads_variable("truncate_history_thinking"));
  EXPECT_TRUE(t.reads_variable("add_generation_prompt"));
  EXPECT_FALSE(t.reads_variable("medium_effort"));
  try {
    tandem::ChatTemplate::from_file("/nonexistent/t.jinja");
    FAIL() << "expected an error";
  } catch (const tandem::Error& e) {
    EXPECT_STREQ(e.what(), "chat template file '/nonexistent/t.jinja': cannot open");
  }
}

TEST(ChatTemplate, CopiesShareAndRendersRunConcurrently) {
  const auto t = tandem::ChatTemplate::from_file(
      tandem::test::shared_data("chat_templates/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja"));
  const std::string vars =
      R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}], "add_generation_prompt": true,
          "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "string"}}}}}]})";
  const std::string want = t.render(vars);
  const tandem::ChatTemplate copy = t;
  std::vector<std::string> got(4);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < got.size(); ++i)
    threads.emplace_back([&, i] {
      for (int k = 0; k < 50; ++k) got[i] = (i % 2 ? copy : t).render(vars);
    });
  for (auto& th : threads) th.join();
  for (const auto& g : got) EXPECT_EQ(g, want);
  EXPECT_NE(want.find("<|im_start|>assistant\n<think>\n"), std::string::npos);
}

}  // namespace
