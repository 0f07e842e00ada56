// `tandem serve` with drafters (the lookup drafter under frozen GPU-shaped verify costs, so StairCut
// drafts on a CPU too): greedy completions, plain and streamed, equal tandem::generate; chat answers
// under JSON schemas, tool_choice and reasoning budgets equal the plain server's; /metrics counts
// what the requests did, consistently (accepted ≤ drafted, chosen k sums to the steps). Each test
// proves it drafted from its own requests' numbers (timings.draft_tokens / accepted_tokens, or the
// counters' change across its requests) and prints its acceptance.
#include <gtest/gtest.h>

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <sstream>

#include "server_fixture.h"
#include "tandem/generate.h"
#include "tests/conformance/model_util.h"
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

// Prompts whose greedy continuation (EOS ignored) repeats itself, so the lookup drafter's n-grams get
// accepted: the tiny random model falls into cycles after a few hundred tokens. Found by search over
// short repeated random patterns; the first one cycles within 500 tokens (~90 % of drafts accepted).
struct Cycling {
  std::vector<int32_t> prompt;
  int tokens;
};
std::vector<Cycling> cycling_prompts() {
  auto rep = [](std::vector<int32_t> base, int times) {
    std::vector<int32_t> p;
    for (int r = 0; r < times; ++r) p.insert(p.end(), base.begin(), base.end());
    return p;
  };
  return {{rep({110, 78, 163, 70, 177, 95, 212, 124}, 4), 500},
          {rep({159, 112, 116}, 3), 200},
          {rep({15}, 3), 200}};
}

// tandem::generate with EOS ignored, on the server's model (the reference for ignore_eos requests).
std::vector<int32_t> reference_ignoring_eos(const std::vector<int32_t>& prompt, int max_tokens) {
  static std::unique_ptr<Model> model = load_model(data_path("hf/latent"));
  GenerateOptions g;
  g.max_tokens = max_tokens;
  g.context = 1024;
  g.stop_at_eos = false;
  return generate(*model, prompt, g).tokens;
}

struct Drafted {
  int64_t draft = 0, accepted = 0;
  void add(const rapidjson::Value& timings) {
    draft += timings["draft_tokens"].GetInt64();
    accepted += timings["accepted_tokens"].GetInt64();
  }
  Drafted& operator+=(const Drafted& o) {
    draft += o.draft, accepted += o.accepted;
    return *this;
  }
  void print(const std::string& what) const {
    std::printf("[ accept ] %s: %lld of %lld draft tokens accepted (%.1f %%)\n", what.c_str(), (long long)accepted,
                (long long)draft, draft ? 100.0 * double(accepted) / double(draft) : 0.0);
  }
};

// The request's tokens equal `want`, plain and streamed; returns its timings' draft counts.
Drafted expect_completion(uint16_t port, const std::vector<int32_t>& p, const std::vector<int32_t>& want, int n,
                          const std::string& extra) {
  Drafted got;
  auto r = http_request(port, "POST", "/v1/completions", completion_body(p, n, extra), auth());
  EXPECT_EQ(r.status, 200) << r.body;
  if (r.status != 200) return got;
  auto d = parse_json(r.body);
  EXPECT_EQ(int_array(d["choices"][0]["tokens"]), want);
  EXPECT_EQ(d["usage"]["completion_tokens"].GetInt(), int(want.size()));
  const auto& t = d["timings"];
  got.add(t);
  EXPECT_LE(t["accepted_tokens"].GetInt64(), t["draft_tokens"].GetInt64());
  EXPECT_LE(t["steps"].GetInt64(), int64_t(want.size()));

  auto st = http_request(port, "POST", "/v1/completions", completion_body(p, n, extra + R"(,"stream":true)"), auth());
  EXPECT_EQ(st.status, 200) << st.body;
  std::vector<int32_t> streamed;
  for (const auto& e : sse_events(st.body))
    if (e != "[DONE]")
      for (int32_t x : int_array(parse_json(e)["choices"][0]["tokens"])) streamed.push_back(x);
  EXPECT_EQ(streamed, want);
  return got;
}

TEST(HttpDraft, GreedyCompletionsEqualGenerate) {
  auto& s = drafted_tiny();
  Drafted all;
  for (const auto& p : prompts()) all += expect_completion(s.port, p, reference_tokens(p, 40), 40, "");
  // Long runs that cycle: here the drafts must be proposed and accepted, request by request.
  for (const auto& c : cycling_prompts()) {
    Drafted d = expect_completion(s.port, c.prompt, reference_ignoring_eos(c.prompt, c.tokens), c.tokens,
                                  R"(,"ignore_eos":true)");
    EXPECT_GT(d.draft, 0) << c.prompt.size() << "-token cycling prompt: nothing drafted";
    EXPECT_GT(d.accepted, 0) << c.prompt.size() << "-token cycling prompt: nothing accepted";
    d.print("cycling prompt of " + std::to_string(c.prompt.size()) + " tokens, " + std::to_string(c.tokens) + " tokens");
    all += d;
  }
  all.print("GreedyCompletionsEqualGenerate, all requests");
}

std::string chat(const std::string& text, const std::string& extra) {
  return R"({"messages":[{"role":"user","content":")" + text + R"("}],"temperature":0,"max_tokens":120)" + extra + "}";
}

const std::string kOff = R"(,"chat_template_kwargs":{"enable_thinking":false})";

// The counters' change across this test's own requests: what they drafted, consistently, and the same
// totals as the requests' own timings.
TEST(HttpDraft, MetricsCountTheDraftsConsistently) {
  // The tiny chat model repeats itself enough for the lookup drafter; the latent fixture does not.
  auto& s = chat_server(true);
  const std::string m0 = http_request(s.port, "GET", "/metrics").body;
  Drafted timed;
  for (const char* text : {"Say abc abc abc abc abc.", "Count: 1 2 3 1 2 3 1 2 3", "Hello!", "Repeat: hello hello hello hello"}) {
    auto r = http_request(s.port, "POST", "/v1/chat/completions", chat(text, kOff), auth());
    ASSERT_EQ(r.status, 200) << r.body;
    timed.add(parse_json(r.body)["timings"]);
  }
  const std::string m = http_request(s.port, "GET", "/metrics").body;
  auto delta = [&](const std::string& series) { return std::max(0.0, metric(m, series)) - std::max(0.0, metric(m0, series)); };
  auto delta_sum = [&](const std::string& prefix) { return sum_metric(m, prefix) - sum_metric(m0, prefix); };
  const std::string req = "tandem:spec_decode_num_requests_total{model_name=\"tiny-chat\"}";
  const std::string model = "{model_name=\"tiny-chat\"", l = model + ",drafter=\"lookup\"";
  EXPECT_EQ(delta(req), 4);
  const double drafts = delta("tandem:spec_decode_num_drafts_total" + l + "}");
  const double draft_tokens = delta("tandem:spec_decode_num_draft_tokens_total" + l + "}");
  const double accepted = delta("tandem:spec_decode_num_accepted_tokens_total" + l + "}");
  const double steps = delta("tandem:spec_decode_num_steps_total" + model + "}");
  const double plain = delta("tandem:spec_plain_steps_total" + model + "}");
  EXPECT_GT(drafts, 0) << m;
  EXPECT_GT(accepted, 0) << "these requests had no draft accepted:\n" << m;
  EXPECT_GE(draft_tokens, drafts);
  EXPECT_LT(accepted, draft_tokens);
  EXPECT_EQ(draft_tokens, double(timed.draft)) << "the counters and the responses' timings disagree";
  EXPECT_EQ(accepted, double(timed.accepted)) << "the counters and the responses' timings disagree";
  EXPECT_EQ(drafts + plain, steps);
  EXPECT_EQ(delta_sum("tandem:spec_chosen_k_total{"), steps);
  EXPECT_EQ(delta("tandem:spec_chosen_k_total" + model + ",drafter=\"none\",k=\"0\"}"), plain);
  EXPECT_EQ(delta_sum("tandem:spec_decode_num_accepted_tokens_per_pos_total" + l), accepted);
  const double reached = delta_sum("tandem:spec_decode_num_reached_tokens_per_pos_total" + l);
  EXPECT_LE(reached, draft_tokens);
  EXPECT_GE(reached, accepted);
  EXPECT_GE(reached, drafts) << "every drafted step takes the first draft's verdict";
  // Acceptance at position j + 1 needs acceptance at j.
  EXPECT_GE(delta("tandem:spec_decode_num_accepted_tokens_per_pos_total" + l + ",position=\"0\"}"),
            delta("tandem:spec_decode_num_accepted_tokens_per_pos_total" + l + ",position=\"1\"}"));
  // Every proposal retro-scored against the committed text, by 1-based position: proposed ≥ reached ≥
  // matched; a verified draft was judged and an accepted one matched (greedy).
  const double proposed_all = delta_sum("tandem:draft_proposed_total" + l);
  const double reached_all = delta_sum("tandem:draft_reached_total" + l);
  const double matched_all = delta_sum("tandem:draft_accepted_total" + l);
  EXPECT_GE(proposed_all, reached_all);
  EXPECT_GE(reached_all, matched_all);
  EXPECT_GE(matched_all, accepted);
  EXPECT_GE(reached_all, reached);
  auto at = [&](const char* series, int j) { return delta(series + l + ",position=\"" + std::to_string(j) + "\"}"); };
  EXPECT_GE(at("tandem:draft_reached_total", 1), drafts) << m;
  EXPECT_LE(at("tandem:draft_reached_total", 2), at("tandem:draft_accepted_total", 1)) << m;
  EXPECT_GE(at("tandem:draft_proposed_total", 1), at("tandem:draft_proposed_total", 2)) << m;
  EXPECT_GT(metric(m, "tandem:spec_verify_seconds" + model + ",rows=\"1\"}"), 0) << m;
  EXPECT_NE(m.find("drafter=\"lookup\""), std::string::npos);
  EXPECT_NE(m.find("tandem:engine_info{model_name=\"tiny-chat\",drafter=\"lookup\""), std::string::npos) << m;
  timed.print("MetricsCountTheDraftsConsistently, 4 chat requests");

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

// The same chat request to the plain and the drafted server: the same choice, byte for byte. Returns
// what the drafted request drafted (its own timings).
Drafted expect_same_answer(const std::string& body) {
  auto a = http_request(chat_server(false).port, "POST", "/v1/chat/completions", body, auth());
  auto b = http_request(chat_server(true).port, "POST", "/v1/chat/completions", body, auth());
  Drafted d;
  EXPECT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(b.status, 200) << b.body;
  if (a.status != 200 || b.status != 200) return d;
  auto db = parse_json(b.body);
  d.add(db["timings"]);
  EXPECT_EQ(choice(std::move(db)), choice(parse_json(a.body))) << body;
  return d;
}

TEST(HttpDraft, ChatAnswersEqualPlainUnderConstraintsAndBudgets) {
  const std::string off = kOff;
  const std::string tools =
      R"(,"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":8}},"required":["city"]}}}])";
  struct Case {
    const char* what;
    std::string body;
    bool accepts;  // the frequency penalty steers the target off the repeats the lookup proposes
  };
  const Case cases[] = {
      {"plain", chat("Say hello hello hello.", off), true},
      {"thinking budget", chat("Repeat: hello hello hello hello", R"(,"thinking_token_budget":6)"), true},
      {"json_object", chat("Give me JSON.", off + R"(,"response_format":{"type":"json_object"})"), true},
      {"json_schema + budget",
       chat("Weather?", R"(,"thinking_token_budget":4,"response_format":{"type":"json_schema","json_schema":{"name":"w","schema":{"type":"object","properties":{"unit":{"enum":["celsius","fahrenheit"]},"days":{"type":"integer"}},"required":["unit","days"]}}})"),
       true},
      {"tool_choice required", chat("Weather in Oslo?", off + tools + R"(,"tool_choice":"required")"), true},
      {"stop, penalty, bias",
       chat("Repeat: abc abc abc abc", off + R"(,"stop":["c a"],"frequency_penalty":0.5,"logit_bias":{"40":3})"), false},
  };
  Drafted all;
  for (const Case& c : cases) {
    Drafted d = expect_same_answer(c.body);
    // Each answer came from a drafting run: drafts were verified, and (but for the penalty) accepted.
    EXPECT_GT(d.draft, 0) << c.what;
    if (c.accepts) EXPECT_GT(d.accepted, 0) << c.what;
    d.print(std::string("chat, ") + c.what);
    all += d;
  }
  all.print("ChatAnswersEqualPlainUnderConstraintsAndBudgets, all requests");
}

}  // namespace
}  // namespace tandem::test
