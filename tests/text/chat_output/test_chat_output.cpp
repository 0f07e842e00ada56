// ChatOutputParser: reasoning/content/tool-call separation on whole strings, and the same strings
// fed in many chunkings (1–3-byte pieces) — the deltas must rebuild the whole-string message.
#include <cctype>
#include <functional>
#include <random>

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include "tandem/text/chat_output.h"

namespace tandem {
namespace {

ChatOutputOptions opts(bool thinking) {
  ChatOutputOptions o;
  o.starts_in_reasoning = thinking;
  o.id_seed = 42;
  o.tools = {
      {"get_weather",
       R"({"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"},
           "units":{"enum":["c","f"]},"detail":{"type":["integer","null"]}},"required":["city"]})"},
      {"search",
       R"({"type":"object","properties":{"query":{"type":"string"},"filter":{"type":"object"},
           "exact":{"type":"boolean"},"limit":{"anyOf":[{"type":"number"},{"type":"string"}]},
           "tags":{"type":"array","items":{"type":"string"}}}})"},
      {"noop", ""},
  };
  return o;
}

// The message a client rebuilds from the stream.
struct Rebuilt {
  std::string reasoning, content;
  std::vector<ToolCall> calls;
};

void add_deltas(Rebuilt& r, const std::vector<ChatDelta>& ds) {
  for (const ChatDelta& d : ds) {
    switch (d.kind) {
      case ChatDelta::Kind::reasoning: r.reasoning += d.text; break;
      case ChatDelta::Kind::content: r.content += d.text; break;
      case ChatDelta::Kind::tool_call:
        if (!d.tool_name.empty()) {
          ASSERT_EQ(size_t(d.tool_index), r.calls.size()) << "a call's first delta opens the next index";
          ASSERT_TRUE(d.text.empty()) << "the first delta carries arguments \"\"";
          r.calls.push_back({d.tool_id, d.tool_name, ""});
        } else {
          ASSERT_GE(d.tool_index, 0);
          ASSERT_LT(size_t(d.tool_index), r.calls.size());
          r.calls[size_t(d.tool_index)].arguments += d.text;
        }
        break;
    }
  }
}

void expect_same(const Rebuilt& r, const ChatMessage& m, const std::string& what) {
  EXPECT_EQ(r.reasoning, m.reasoning) << what;
  EXPECT_EQ(r.content, m.content) << what;
  ASSERT_EQ(r.calls.size(), m.tool_calls.size()) << what;
  for (size_t i = 0; i < r.calls.size(); ++i) {
    EXPECT_EQ(r.calls[i].id, m.tool_calls[i].id) << what;
    EXPECT_EQ(r.calls[i].name, m.tool_calls[i].name) << what;
    EXPECT_EQ(r.calls[i].arguments, m.tool_calls[i].arguments) << what;
  }
}

// Feeds `text` in pieces of the given sizes; returns the rebuilt message and the finish reason.
std::pair<Rebuilt, std::string> stream(const std::string& text, const std::vector<size_t>& sizes,
                                       const ChatOutputOptions& o, FinishCause cause) {
  ChatOutputParser p(o);
  Rebuilt r;
  size_t at = 0;
  for (size_t n : sizes) {
    add_deltas(r, p.feed(std::string_view(text).substr(at, n)));
    at += n;
  }
  std::vector<ChatDelta> tail;
  std::string reason = p.finish(cause, &tail);
  add_deltas(r, tail);
  expect_same(r, p.message(), "rebuilt vs parser.message()");
  return {r, reason};
}

// Whole-string result; then every split into two pieces, fixed 1/2/3-byte chunkings at every
// phase, all 1–3-byte chunkings of short texts, and random 1–3-byte chunkings of long ones.
ChatMessage check_all_splits(const std::string& text, const ChatOutputOptions& o,
                             FinishCause cause = FinishCause::stop, std::string* reason_out = nullptr) {
  std::string reason;
  ChatMessage whole = ChatOutputParser::parse(text, o, cause, &reason);
  if (reason_out) *reason_out = reason;
  for (const ToolCall& c : whole.tool_calls) {
    rapidjson::Document d;
    d.Parse(c.arguments.c_str());
    EXPECT_TRUE(!d.HasParseError() && d.IsObject()) << "arguments not a JSON object: " << c.arguments;
    EXPECT_EQ(c.id.size(), 29u);
    EXPECT_EQ(c.id.rfind("call_", 0), 0u);
  }
  auto run = [&](const std::vector<size_t>& sizes, const std::string& what) {
    auto [r, rs] = stream(text, sizes, o, cause);
    expect_same(r, whole, what + " of: " + text);
    EXPECT_EQ(rs, reason) << what;
  };
  for (size_t cut = 0; cut <= text.size(); ++cut) run({cut, text.size() - cut}, "split at " + std::to_string(cut));
  for (size_t k = 1; k <= 3; ++k)
    for (size_t phase = 1; phase <= k; ++phase) {
      std::vector<size_t> sizes = {phase};
      for (size_t at = phase; at < text.size(); at += k) sizes.push_back(k);
      run(sizes, "chunks of " + std::to_string(k));
    }
  if (text.size() <= 14) {
    std::vector<size_t> sizes;
    std::function<void(size_t)> all = [&](size_t left) {
      if (left == 0) return run(sizes, "composition");
      for (size_t k = 1; k <= 3 && k <= left; ++k) {
        sizes.push_back(k);
        all(left - k);
        sizes.pop_back();
      }
    };
    all(text.size());
  } else {
    std::mt19937 rng(uint32_t(text.size()));
    for (int t = 0; t < 300; ++t) {
      std::vector<size_t> sizes;
      for (size_t left = text.size(); left;) {
        size_t k = std::min<size_t>(left, 1 + rng() % 3);
        sizes.push_back(k);
        left -= k;
      }
      run(sizes, "random chunks");
    }
  }
  return whole;
}

TEST(ChatOutput, ThinkingThenAnswer) {
  std::string reason;
  ChatMessage m = check_all_splits("Two plus two.\nIt is 4.\n</think>\nThe answer is 4.", opts(true),
                                   FinishCause::stop, &reason);
  EXPECT_EQ(m.reasoning, "Two plus two.\nIt is 4.");
  EXPECT_EQ(m.content, "The answer is 4.");
  EXPECT_TRUE(m.had_reasoning);
  EXPECT_TRUE(m.tool_calls.empty());
  EXPECT_EQ(reason, "stop");
}

TEST(ChatOutput, ThinkingOffIsAllContentAndKeepsNonTags) {
  ChatMessage m = check_all_splits("a < b, <b>bold</b> and <tool <think> a<t", opts(false));
  EXPECT_EQ(m.content, "a < b, <b>bold</b> and <tool <think> a<t");
  EXPECT_EQ(m.reasoning, "");
  EXPECT_FALSE(m.had_reasoning);
}

TEST(ChatOutput, ModelWrittenThinkBlock) {
  ChatMessage m = check_all_splits("\n<think>\nhmm\n</think>\n\nHi there", opts(false));
  EXPECT_EQ(m.reasoning, "hmm");
  EXPECT_EQ(m.content, "Hi there");
  EXPECT_TRUE(m.had_reasoning);
}

TEST(ChatOutput, EndingInsideReasoningIsLength) {
  std::string reason;
  ChatMessage m = check_all_splits("still thinking </thi", opts(true), FinishCause::stop, &reason);
  EXPECT_EQ(m.reasoning, "still thinking </thi");
  EXPECT_EQ(m.content, "");
  EXPECT_EQ(reason, "length");
}

TEST(ChatOutput, ToolCallAfterReasoning) {
  std::string text =
      "I need the weather.\n</think>\n<tool_call>\n<function=get_weather>\n<parameter=city>\nTokyo\n</parameter>\n"
      "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n";
  std::string reason;
  ChatMessage m = check_all_splits(text, opts(true), FinishCause::stop, &reason);
  EXPECT_EQ(m.reasoning, "I need the weather.");
  EXPECT_EQ(m.content, "");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].name, "get_weather");
  EXPECT_EQ(m.tool_calls[0].arguments, R"({"city":"Tokyo","days":3})");
  EXPECT_EQ(reason, "tool_calls");
}

TEST(ChatOutput, ToolCallEndsReasoning) {
  ChatMessage m = check_all_splits(
      "thinking\n<tool_call>\n<function=noop>\n</function>\n</tool_call>", opts(true));
  EXPECT_EQ(m.reasoning, "thinking");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].arguments, "{}");
}

TEST(ChatOutput, TwoCallsWithContentBefore) {
  std::string text =
      "Let me check both.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nTokyo\n</parameter>\n</function>\n"
      "</tool_call>\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOsaka\n</parameter>\n</function>\n"
      "</tool_call>\n";
  std::string reason;
  ChatMessage m = check_all_splits(text, opts(false), FinishCause::stop, &reason);
  EXPECT_EQ(m.content, "Let me check both.");
  ASSERT_EQ(m.tool_calls.size(), 2u);
  EXPECT_EQ(m.tool_calls[0].arguments, R"({"city":"Tokyo"})");
  EXPECT_EQ(m.tool_calls[1].arguments, R"({"city":"Osaka"})");
  EXPECT_NE(m.tool_calls[0].id, m.tool_calls[1].id);
  EXPECT_EQ(reason, "tool_calls");
}

TEST(ChatOutput, ParameterValuesFollowTheSchemaType) {
  std::string text =
      "<tool_call>\n<function=search>\n"
      "<parameter=query>\nline one\n\"quoted\" \\ and\ttab\nline three\n</parameter>\n"
      "<parameter=filter>\n{\"a\": [1, 2]}\n</parameter>\n"
      "<parameter=exact>\nTrue\n</parameter>\n"
      "<parameter=limit>\n12.5\n</parameter>\n"
      "<parameter=tags>\nnot json\n</parameter>\n"
      "<parameter=unknown>\n7\n</parameter>\n"
      "</function>\n</tool_call>";
  ChatMessage m = check_all_splits(text, opts(false));
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].arguments,
            R"({"query":"line one\n\"quoted\" \\ and\ttab\nline three","filter":{"a": [1, 2]},"exact":true,)"
            R"("limit":12.5,"tags":"not json","unknown":"7"})");
}

TEST(ChatOutput, TypedValuesFallBackToStrings) {
  std::string text =
      "<tool_call>\n<function=get_weather>\n<parameter=city>\n42\n</parameter>\n<parameter=days>\nthree\n</parameter>\n"
      "<parameter=units>\nc\n</parameter>\n<parameter=detail>\nNone\n</parameter>\n</function>\n</tool_call>";
  ChatMessage m = check_all_splits(text, opts(false));
  ASSERT_EQ(m.tool_calls.size(), 1u);
  // a string-typed "42" stays a string; "three" is no integer; enum of strings is a string; None → null
  EXPECT_EQ(m.tool_calls[0].arguments, R"({"city":"42","days":"three","units":"c","detail":null})");
}

TEST(ChatOutput, UnknownFunctionAndBrokenTagsAreContent) {
  const std::string unknown = "<tool_call>\n<function=launch>\n<parameter=x>\n1\n</parameter>\n</function>\n</tool_call>";
  ChatMessage m = check_all_splits("Ok. " + unknown, opts(false));
  EXPECT_TRUE(m.tool_calls.empty());
  EXPECT_EQ(m.content, "Ok. " + unknown);

  m = check_all_splits("<tool_call>\nnot a call</tool_call> done", opts(false));
  EXPECT_TRUE(m.tool_calls.empty());
  EXPECT_EQ(m.content, "<tool_call>\nnot a call</tool_call> done");

  m = check_all_splits("x <tool_call>\n<function=get_weather", opts(false));
  EXPECT_TRUE(m.tool_calls.empty());
  EXPECT_EQ(m.content, "x <tool_call>\n<function=get_weather");

  m = check_all_splits("<function=get weather>\nhi", opts(false));
  EXPECT_TRUE(m.tool_calls.empty());
  EXPECT_EQ(m.content, "<function=get weather>\nhi");

  m = check_all_splits("<tool_call>\n{\"name\": \"launch\", \"arguments\": {}}\n</tool_call>", opts(false));
  EXPECT_TRUE(m.tool_calls.empty());
  EXPECT_EQ(m.content, "<tool_call>\n{\"name\": \"launch\", \"arguments\": {}}\n</tool_call>");
}

TEST(ChatOutput, StrayTextInsideACallEndsIt) {
  std::string text = "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\noops</function>";
  ChatMessage m = check_all_splits(text, opts(false));
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].arguments, R"({"city":"Rome"})");
  EXPECT_EQ(m.content, "oops</function>");

  m = check_all_splits("<tool_call>\n<function=get_weather>\n<parameter=ci\nty>x", opts(false));
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].arguments, "{}");
  EXPECT_EQ(m.content, "<parameter=ci\nty>x");
}

TEST(ChatOutput, LenientForms) {
  // no <tool_call> wrapper; </function> closing a value that lacks </parameter>
  ChatMessage m = check_all_splits(
      "<function=get_weather>\n<parameter=city>\nOsaka\n</function>\n<function=noop>\n</function>", opts(false));
  ASSERT_EQ(m.tool_calls.size(), 2u);
  EXPECT_EQ(m.tool_calls[0].arguments, R"({"city":"Osaka"})");
  EXPECT_EQ(m.tool_calls[1].arguments, "{}");
  EXPECT_EQ(m.content, "");

  // a JSON body
  m = check_all_splits(
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n</tool_call>",
      opts(false));
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].name, "get_weather");
  EXPECT_EQ(m.tool_calls[0].arguments, R"({"city":"Paris","days":2})");
}

TEST(ChatOutput, CutOffCallIsClosedAndLength) {
  std::string reason;
  ChatMessage m = check_all_splits("<tool_call>\n<function=get_weather>\n<parameter=city>\nTok", opts(false),
                                   FinishCause::length, &reason);
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].arguments, R"({"city":"Tok"})");
  EXPECT_EQ(reason, "length");

  m = check_all_splits("<tool_call>\n<function=get_weather>\n<parameter=days>\n1", opts(false));
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].arguments, R"({"days":1})");
}

TEST(ChatOutput, StreamingHoldsBackOnlyWhatMayBeATag) {
  ChatOutputParser p(opts(false));
  Rebuilt r;
  add_deltas(r, p.feed("Hello <tool_c"));
  EXPECT_EQ(r.content, "Hello");  // the space may precede a call; "<tool_c" may be one
  add_deltas(r, p.feed("at> friend"));
  EXPECT_EQ(r.content, "Hello <tool_cat> friend");

  ChatOutputParser q(opts(true));
  Rebuilt s;
  add_deltas(s, q.feed("a\n"));
  EXPECT_EQ(s.reasoning, "a");  // the '\n' may belong to "\n</think>"
  add_deltas(s, q.feed("b</"));
  EXPECT_EQ(s.reasoning, "a\nb");
  EXPECT_TRUE(q.in_reasoning());
  add_deltas(s, q.feed("think>"));
  EXPECT_FALSE(q.in_reasoning());
}

TEST(ChatOutput, ToolDeltasNameFirstStringsStreamTypedValuesWhole) {
  ChatOutputParser p(opts(false));
  std::vector<ChatDelta> d = p.feed("<tool_call>\n<function=get_weather>\n");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].kind, ChatDelta::Kind::tool_call);
  EXPECT_EQ(d[0].tool_name, "get_weather");
  EXPECT_EQ(d[0].tool_index, 0);
  EXPECT_EQ(d[0].text, "");
  EXPECT_FALSE(d[0].tool_id.empty());

  d = p.feed("<parameter=city>\nNew Yo");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].text, "{\"city\":\"New Yo");  // string values stream as they come
  EXPECT_TRUE(d[0].tool_name.empty());

  d = p.feed("rk\n</parameter>\n<parameter=days>\n1");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].text, "rk\"");  // the typed value is held until complete
  d = p.feed("0\n</parameter>\n</function>\n</tool_call>");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].text, ",\"days\":10}");
  EXPECT_EQ(p.tool_calls_closed(), 1u);
  EXPECT_EQ(p.finish(FinishCause::stop), "tool_calls");
}

TEST(ChatOutput, CallIdsDependOnSeedAndIndexOnly) {
  std::string text = "<function=noop>\n</function><function=noop>\n</function>";
  ChatMessage a = ChatOutputParser::parse(text, opts(false));
  ChatMessage b = ChatOutputParser::parse(text, opts(false));
  ChatOutputOptions o = opts(false);
  o.id_seed = 43;
  ChatMessage c = ChatOutputParser::parse(text, o);
  ASSERT_EQ(a.tool_calls.size(), 2u);
  EXPECT_EQ(a.tool_calls[0].id, b.tool_calls[0].id);
  EXPECT_NE(a.tool_calls[0].id, a.tool_calls[1].id);
  EXPECT_NE(a.tool_calls[0].id, c.tool_calls[0].id);
  for (char ch : a.tool_calls[0].id.substr(5)) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(ch)));
}

TEST(ChatOutput, BadToolSchemaIsAnErrorNamingTheTool) {
  ChatOutputOptions o;
  o.tools = {{"broken", "[1, 2"}};
  try {
    ChatOutputParser p(o);
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("broken"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem
