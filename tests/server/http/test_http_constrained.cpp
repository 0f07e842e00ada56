// What decoding enforces, on the tiny chat model with its real tokenizer and the Nemotron 3 template:
// JSON mode and json_schema (the answer parses and validates), tool_choice required/named (a call
// with typed arguments, then the end), the reasoning budget (forced close at N reasoning tokens),
// thinking switches, and schemas the constraint cannot follow refused by name.
#include <gtest/gtest.h>

#include <set>

#include "server_fixture.h"

namespace tandem::test {
namespace {

struct Chat {
  std::unique_ptr<server::HttpServer> srv;
  uint16_t port = 0;
};

Chat& chat() {
  static Chat c = [] {
    Chat x;
    auto o = tiny_options(2);
    o.served_model_name = "tiny-chat";
    o.scheduler.context = 2048;
    o.default_max_tokens = 64;
    x.srv = start_chat_server(o);
    x.port = x.srv->port();
    wait_ready(x.port);
    return x;
  }();
  return c;
}

rapidjson::Document post_chat(const std::string& body) {
  auto r = http_request(chat().port, "POST", "/v1/chat/completions", body, auth());
  EXPECT_EQ(r.status, 200) << r.body;
  return parse_json(r.body);
}

std::string user(const std::string& text, const std::string& extra) {
  return R"({"messages":[{"role":"user","content":")" + text + R"("}],"temperature":0)" + extra + "}";
}

size_t utf8_chars(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

const std::string kOff = R"(,"chat_template_kwargs":{"enable_thinking":false})";

TEST(HttpConstrained, JsonObjectParses) {
  for (const std::string thinking : {kOff, std::string(R"(,"thinking_token_budget":6)")}) {
    auto d = post_chat(user("Give me JSON.", thinking + R"(,"max_tokens":1500,"response_format":{"type":"json_object"})"));
    const auto& c = d["choices"][0];
    ASSERT_STREQ(c["finish_reason"].GetString(), "stop") << "the object did not close within max_tokens";
    std::string content = c["message"]["content"].GetString();
    auto obj = parse_json(content);
    EXPECT_TRUE(obj.IsObject()) << content;
  }
}

TEST(HttpConstrained, JsonSchemaValidates) {
  const std::string schema = R"({"type":"object","properties":{
      "city":{"type":"string","maxLength":12},
      "unit":{"enum":["celsius","fahrenheit"]},
      "days":{"type":"integer","enum":[1,2,3]},
      "ok":{"type":"boolean"},
      "tags":{"type":"array","items":{"enum":["a","b"]},"maxItems":3}},
    "required":["city","unit","days","ok"],"additionalProperties":false})";
  for (int stream = 0; stream < 2; ++stream) {
    std::string body = user("Weather?", kOff + R"(,"max_tokens":400,"response_format":{"type":"json_schema","json_schema":{"name":"w","strict":true,"schema":)" +
                                            schema + "}}" + (stream ? R"(,"stream":true)" : ""));
    std::string content;
    if (stream) {
      auto r = http_request(chat().port, "POST", "/v1/chat/completions", body, auth());
      for (const auto& e : sse_events(r.body))
        if (e != "[DONE]") {
          auto c = parse_json(e);
          if (c["choices"].Size() && c["choices"][0]["delta"].HasMember("content"))
            content += c["choices"][0]["delta"]["content"].GetString();
        }
    } else {
      auto d = post_chat(body);
      ASSERT_STREQ(d["choices"][0]["finish_reason"].GetString(), "stop");
      content = d["choices"][0]["message"]["content"].GetString();
    }
    auto v = parse_json(content);
    ASSERT_TRUE(v.IsObject()) << content;
    ASSERT_TRUE(v.HasMember("city") && v["city"].IsString()) << content;
    EXPECT_LE(utf8_chars(v["city"].GetString()), 12u) << content;
    ASSERT_TRUE(v["unit"].IsString()) << content;
    EXPECT_TRUE(std::string(v["unit"].GetString()) == "celsius" || std::string(v["unit"].GetString()) == "fahrenheit");
    ASSERT_TRUE(v["days"].IsInt()) << content;
    EXPECT_TRUE(v["days"].GetInt() >= 1 && v["days"].GetInt() <= 3) << content;
    EXPECT_TRUE(v["ok"].IsBool()) << content;
    for (auto it = v.MemberBegin(); it != v.MemberEnd(); ++it)
      EXPECT_TRUE(std::set<std::string>({"city", "unit", "days", "ok", "tags"}).count(it->name.GetString())) << content;
  }
}

const std::string kTools = R"(,"tools":[
  {"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{
    "city":{"type":"string","maxLength":10},"days":{"type":"integer","enum":[1,2,3]},
    "unit":{"type":"string","enum":["celsius","fahrenheit"]},"detail":{"type":"boolean"}},
    "required":["city","days"]}}},
  {"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{
    "zone":{"type":"string","enum":["UTC","JST"]}},"required":["zone"]}}}])";

void expect_weather_call(const rapidjson::Value& call) {
  EXPECT_STREQ(call["function"]["name"].GetString(), "get_weather");
  auto args = parse_json(call["function"]["arguments"].GetString());
  ASSERT_TRUE(args.IsObject()) << call["function"]["arguments"].GetString();
  ASSERT_TRUE(args.HasMember("city") && args["city"].IsString());
  EXPECT_LE(utf8_chars(args["city"].GetString()), 10u) << call["function"]["arguments"].GetString();
  ASSERT_TRUE(args.HasMember("days") && args["days"].IsInt());  // typed: a JSON number, not "2"
  if (args.HasMember("unit")) EXPECT_TRUE(args["unit"].IsString());
  if (args.HasMember("detail")) EXPECT_TRUE(args["detail"].IsBool());
}

TEST(HttpConstrained, ToolChoiceNamedAndRequiredMakeACall) {
  auto d = post_chat(user("Weather in Tokyo?", kOff + kTools +
                                                   R"(,"max_tokens":300,"tool_choice":{"type":"function","function":{"name":"get_weather"}})"));
  const auto& c = d["choices"][0];
  ASSERT_STREQ(c["finish_reason"].GetString(), "tool_calls") << c["message"]["content"].GetString();
  ASSERT_EQ(c["message"]["tool_calls"].Size(), 1u);
  expect_weather_call(c["message"]["tool_calls"][0]);

  auto r = post_chat(user("What time is it?", kOff + kTools + R"(,"max_tokens":300,"tool_choice":"required")"));
  const auto& rc = r["choices"][0];
  ASSERT_STREQ(rc["finish_reason"].GetString(), "tool_calls");
  ASSERT_EQ(rc["message"]["tool_calls"].Size(), 1u);
  std::string name = rc["message"]["tool_calls"][0]["function"]["name"].GetString();
  EXPECT_TRUE(name == "get_weather" || name == "get_time") << name;

  // Thinking on: the call comes after the reasoning, which the budget closes after 5 tokens.
  auto t = post_chat(user("Weather?", kTools + R"(,"max_tokens":300,"thinking_token_budget":5,"tool_choice":{"type":"function","function":{"name":"get_weather"}})"));
  const auto& tc = t["choices"][0];
  ASSERT_STREQ(tc["finish_reason"].GetString(), "tool_calls");
  EXPECT_TRUE(tc["message"].HasMember("reasoning_content"));
  EXPECT_EQ(t["usage"]["completion_tokens_details"]["reasoning_tokens"].GetInt(), 5);
  expect_weather_call(tc["message"]["tool_calls"][0]);

  // none: no tools in the prompt, no call parsed.
  auto at = http_request(chat().port, "POST", "/apply-template", user("x", kOff + kTools + R"(,"tool_choice":"none")"), auth());
  EXPECT_EQ(parse_json(at.body)["prompt"].GetString(), std::string(parse_json(
      http_request(chat().port, "POST", "/apply-template", user("x", kOff), auth()).body)["prompt"].GetString()));
}

TEST(HttpConstrained, ReasoningBudgetClosesThinking) {
  for (int budget : {0, 7}) {
    auto d = post_chat(user("Think.", R"(,"max_tokens":40,"ignore_eos":true,"reasoning_budget_tokens":)" + std::to_string(budget)));
    const auto& m = d["choices"][0]["message"];
    EXPECT_EQ(d["usage"]["completion_tokens_details"]["reasoning_tokens"].GetInt(), budget);
    ASSERT_TRUE(m.HasMember("reasoning_content")) << budget;
    // The close sequence is "\n</think>\n": 3 tokens after the budget, all counted as generated.
    EXPECT_EQ(d["usage"]["completion_tokens"].GetInt(), 40);
    if (budget == 0) EXPECT_STREQ(m["reasoning_content"].GetString(), "");
    EXPECT_EQ(std::string(m["content"].IsString() ? m["content"].GetString() : "").find("</think>"), std::string::npos);
  }
  // Streamed: reasoning deltas come before content deltas.
  auto r = http_request(chat().port, "POST", "/v1/chat/completions",
                        user("Think.", R"(,"max_tokens":30,"ignore_eos":true,"thinking_token_budget":4,"stream":true)"), auth());
  bool seen_content = false, reasoning_after = false;
  for (const auto& e : sse_events(r.body)) {
    if (e == "[DONE]") continue;
    auto c = parse_json(e);
    const auto& delta = c["choices"][0]["delta"];
    if (delta.HasMember("content") && delta["content"].GetStringLength()) seen_content = true;
    if (delta.HasMember("reasoning_content") && seen_content) reasoning_after = true;
  }
  EXPECT_FALSE(reasoning_after);
}

TEST(HttpConstrained, ThinkingSwitchesAndDefaults) {
  auto off = post_chat(user("hi", R"(,"max_tokens":8,"reasoning_effort":"none")"));
  EXPECT_FALSE(off["choices"][0]["message"].HasMember("reasoning_content"));
  auto on = post_chat(user("hi", R"(,"max_tokens":8,"ignore_eos":true,"reasoning_effort":"high")"));
  EXPECT_TRUE(on["choices"][0]["message"].HasMember("reasoning_content"));
  // chat_template_kwargs win over reasoning_effort.
  auto kw = post_chat(user("hi", R"(,"max_tokens":8,"reasoning_effort":"high","chat_template_kwargs":{"enable_thinking":false})"));
  EXPECT_FALSE(kw["choices"][0]["message"].HasMember("reasoning_content"));
  // The Nano template has no medium_effort: /props says medium falls back to high.
  auto props = parse_json(http_request(chat().port, "GET", "/props", "", auth()).body);
  EXPECT_FALSE(props["thinking"]["medium_effort_supported"].GetBool());
}

TEST(HttpConstrained, UnenforceableSchemasAreRefusedByName) {
  auto r = http_request(chat().port, "POST", "/v1/chat/completions",
                        user("x", R"(,"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"string","pattern":"^a"}}})"),
                        auth());
  EXPECT_EQ(r.status, 400) << r.body;
  auto d = parse_json(r.body);
  EXPECT_STREQ(d["error"]["param"].GetString(), "response_format.json_schema.schema");
  EXPECT_NE(std::string(d["error"]["message"].GetString()).find("pattern"), std::string::npos) << r.body;
  auto t = http_request(chat().port, "POST", "/v1/chat/completions",
                        user("x", R"(,"tool_choice":"required","tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"n":{"type":"integer","minimum":3}}}}}])"),
                        auth());
  EXPECT_EQ(t.status, 400) << t.body;
  EXPECT_NE(t.body.find("minimum"), std::string::npos) << t.body;
  auto b = http_request(chat().port, "POST", "/v1/chat/completions", user("x", R"(,"tool_choice":"required")"), auth());
  EXPECT_EQ(b.status, 400) << b.body;
}

TEST(HttpConstrained, HealthReportsLoadProgress) {
  std::promise<void> go;
  auto srv = start_server(tiny_options(1), nullptr, go.get_future().share());
  auto h = parse_json(http_request(srv->port(), "GET", "/health").body);
  EXPECT_EQ(h["progress"].GetDouble(), 0.0);
  go.set_value();
  wait_ready(srv->port());
  srv->drain();
  EXPECT_EQ(srv->wait(), 0);
}

}  // namespace
}  // namespace tandem::test
