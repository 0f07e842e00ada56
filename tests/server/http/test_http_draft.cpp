// `tandem serve` with drafters (the lookup drafter under frozen GPU-shaped verify costs, so StairCut
// drafts on a CPU too): greedy completions, plain and streamed, equal tandem::generate; chat answers
// under JSON schemas, tool_choice and reasoning budgets equal the plain server's; /metrics counts
// what the requests did, consistently (accepted ≤ drafted, chosen k sums to the steps).
#include <gtest/gtest.h>

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <sstream>

#include "server_fixture.h"
#include "tests/schedulers/slots/drafters.h"

namespace tandem::test {
namespace {

DraftOptions lookup_draft() {
  DraftOptions o = fixed_costs();
  o.drafters = {"lookup"};
  return o;
}

struct Srv {
  std::unique_ptr<server::HttpServer> srv;
  uint16_t port = 0;
};

Srv& drafted_tiny() {
  static Srv s = [] {
    Srv x;
    auto o = tiny_options(2);
    o.scheduler.draft = lookup_draft();
    x.srv = start_server(o);
    x.port = x.srv->port();
    wait_ready(x.port);
    return x;
  }();
  return s;
}

Srv& chat_server(bool drafted) {
  auto make = [](bool d) {
    Srv x;
    auto o = tiny_options(1);
    o.served_model_name = "tiny-chat";
    o.scheduler.context = 2048;
    if (d) o.scheduler.draft = lookup_draft();
    x.srv = start_chat_server(o);
    x.port = x.srv->port();
    wait_ready(x.port);
    return x;
  };
  static Srv plain = make(false), with = make(true);
  return drafted ? with : plain;
}

// Prompts the lookup drafter finds matches in: short runs of ids, repeated; a copy; the fixture prompt.
std::vector<std::vector<int32_t>> prompts() {
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> p;
    for (int r = 0; r < 2 + i; ++r)
      for (int j = 0; j < 4 + i; ++j) p.push_back(int32_t((37 * (5 * i + j) + 11) % 256));
    out.push_back(p);
  }
  // A passage, its greedy continuation, then the passage again: the lookup proposes the continuation.
  std::vector<int32_t> copy = out[1];
  const auto more = reference_tokens(copy, 24);
  copy.insert(copy.end(), more.begin(), more.end());
  copy.insert(copy.end(), out[1].begin(), out[1].end());
  out.push_back(copy);
  out.push_back(fixture_prompt());
  return out;
}

// Σ of every series whose line starts with `prefix` (a metric name and the start of its labels).
double sum_metric(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  std::string line;
  double s = 0;
  while (std::getline(in, line))
    if (line.rfind(prefix, 0) == 0) s += std::stod(line.substr(line.rfind(' ') + 1));
  return s;
}

TEST(HttpDraft, GreedyCompletionsEqualGenerate) {
  auto& s = drafted_tiny();
  for (const auto& p : prompts()) {
    auto want = reference_tokens(p, 40);
    auto r = http_request(s.port, "POST", "/v1/completions", completion_body(p, 40), auth());
    ASSERT_EQ(r.status, 200) << r.body;
    auto d = parse_json(r.body);
    EXPECT_EQ(int_array(d["choices"][0]["tokens"]), want);
    EXPECT_EQ(d["usage"]["completion_tokens"].GetInt(), int(want.size()));
    const auto& t = d["timings"];
    EXPECT_LE(t["accepted_tokens"].GetInt64(), t["draft_tokens"].GetInt64());
    EXPECT_LE(t["steps"].GetInt64(), int64_t(want.size()));

    auto st = http_request(s.port, "POST", "/v1/completions", completion_body(p, 40, R"(,"stream":true)"), auth());
    ASSERT_EQ(st.status, 200) << st.body;
    std::vector<int32_t> got;
    for (const auto& e : sse_events(st.body))
      if (e != "[DONE]")
        for (int32_t x : int_array(parse_json(e)["choices"][0]["tokens"])) got.push_back(x);
    EXPECT_EQ(got, want);
  }
}

std::string chat(const std::string& text, const std::string& extra) {
  return R"({"messages":[{"role":"user","content":")" + text + R"("}],"temperature":0,"max_tokens":120)" + extra + "}";
}

const std::string kOff = R"(,"chat_template_kwargs":{"enable_thinking":false})";

TEST(HttpDraft, MetricsCountTheDraftsConsistently) {
  // The tiny chat model repeats itself enough for the lookup drafter; the latent fixture does not.
  auto& s = chat_server(true);
  const std::string m0 = http_request(s.port, "GET", "/metrics").body;
  const std::string req = "tandem:spec_decode_num_requests_total{model_name=\"tiny-chat\"}";
  const double before = metric(m0, req);
  for (const char* text : {"Say abc abc abc abc abc.", "Count: 1 2 3 1 2 3 1 2 3", "Hello!"})
    ASSERT_EQ(http_request(s.port, "POST", "/v1/chat/completions", chat(text, kOff), auth()).status, 200);
  const std::string m = http_request(s.port, "GET", "/metrics").body;
  const std::string model = "{model_name=\"tiny-chat\"", l = model + ",drafter=\"lookup\"";
  EXPECT_EQ(metric(m, req), before + 3);
  const double drafts = metric(m, "tandem:spec_decode_num_drafts_total" + l + "}");
  const double draft_tokens = metric(m, "tandem:spec_decode_num_draft_tokens_total" + l + "}");
  const double accepted = metric(m, "tandem:spec_decode_num_accepted_tokens_total" + l + "}");
  const double steps = metric(m, "tandem:spec_decode_num_steps_total" + model + "}");
  const double plain = metric(m, "tandem:spec_plain_steps_total" + model + "}");
  EXPECT_GT(drafts, 0) << m;
  EXPECT_GE(draft_tokens, drafts);
  EXPECT_LE(accepted, draft_tokens);
  EXPECT_EQ(drafts + plain, steps);
  EXPECT_EQ(sum_metric(m, "tandem:spec_chosen_k_total{"), steps);
  EXPECT_EQ(metric(m, "tandem:spec_chosen_k_total" + model + ",drafter=\"none\",k=\"0\"}"), plain);
  EXPECT_EQ(sum_metric(m, "tandem:spec_decode_num_accepted_tokens_per_pos_total" + l), accepted);
  const double reached = sum_metric(m, "tandem:spec_decode_num_reached_tokens_per_pos_total" + l);
  EXPECT_LE(reached, draft_tokens);
  EXPECT_GE(reached, accepted);
  EXPECT_GE(reached, drafts) << "every drafted step takes the first draft's verdict";
  // Acceptance at position j + 1 needs acceptance at j.
  EXPECT_GE(metric(m, "tandem:spec_decode_num_accepted_tokens_per_pos_total" + l + ",position=\"0\"}"),
            metric(m, "tandem:spec_decode_num_accepted_tokens_per_pos_total" + l + ",position=\"1\"}"));
  EXPECT_GT(metric(m, "tandem:spec_verify_seconds" + model + ",rows=\"1\"}"), 0) << m;
  EXPECT_NE(m.find("drafter=\"lookup\""), std::string::npos);
  EXPECT_NE(m.find("tandem:engine_info{model_name=\"tiny-chat\",drafter=\"lookup\""), std::string::npos) << m;

  auto slots = parse_json(http_request(s.port, "GET", "/slots", "", auth()).body);
  ASSERT_TRUE(slots.IsArray() && slots.Size() == 1);
  EXPECT_STREQ(slots[0]["drafter"].GetString(), "lookup");
  // A plain server keeps the series, at 0, under drafter "none".
  const std::string p = http_request(chat_server(false).port, "GET", "/metrics").body;
  EXPECT_EQ(metric(p, "tandem:spec_decode_num_drafts_total" + model + ",drafter=\"none\"}"), 0) << p;
}

// The first choice without the tool call ids (random per response).
std::string choice(rapidjson::Document d) {
  auto& m = d["choices"][0]["message"];
  if (m.HasMember("tool_calls") && m["tool_calls"].IsArray())
    for (auto& c : m["tool_calls"].GetArray()) c["id"].SetString("call");
  rapidjson::StringBuffer b;
  rapidjson::Writer<rapidjson::StringBuffer> w(b);
  d["choices"][0].Accept(w);
  return b.GetString();
}

// The same chat request to the plain and the drafted server: the same choice, byte for byte.
void expect_same_answer(const std::string& body) {
  auto a = http_request(chat_server(false).port, "POST", "/v1/chat/completions", body, auth());
  auto b = http_request(chat_server(true).port, "POST", "/v1/chat/completions", body, auth());
  ASSERT_EQ(a.status, 200) << a.body;
  ASSERT_EQ(b.status, 200) << b.body;
  EXPECT_EQ(choice(parse_json(b.body)), choice(parse_json(a.body))) << body;
}

TEST(HttpDraft, ChatAnswersEqualPlainUnderConstraintsAndBudgets) {
  const std::string off = kOff;
  expect_same_answer(chat("Say hello hello hello.", off));
  expect_same_answer(chat("Think, then answer.", R"(,"thinking_token_budget":6)"));
  expect_same_answer(chat("Give me JSON.", off + R"(,"response_format":{"type":"json_object"})"));
  expect_same_answer(chat("Weather?", R"(,"thinking_token_budget":4,"response_format":{"type":"json_schema","json_schema":{"name":"w","schema":{"type":"object","properties":{"unit":{"enum":["celsius","fahrenheit"]},"days":{"type":"integer"}},"required":["unit","days"]}}})"));
  const std::string tools =
      R"(,"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":8}},"required":["city"]}}}])";
  expect_same_answer(chat("Weather in Oslo?", off + tools + R"(,"tool_choice":"required")"));
  expect_same_answer(chat("Repeat: abc abc abc abc", off + R"(,"stop":["c a"],"frequency_penalty":0.5,"logit_bias":{"40":3})"));
  // The drafted server really drafted.
  const std::string m = http_request(chat_server(true).port, "GET", "/metrics").body;
  EXPECT_GT(metric(m, "tandem:spec_decode_num_requests_total{model_name=\"tiny-chat\"}"), 0) << m;
  EXPECT_GT(metric(m, "tandem:spec_decode_num_draft_tokens_total{model_name=\"tiny-chat\",drafter=\"lookup\"}"), 0) << m;
}

}  // namespace
}  // namespace tandem::test
