// `tandem serve` in process on the tiny fixture model: health while loading, models, completions
// (plain and streamed; greedy ids equal tandem::generate), every error class with its status, the
// text path through a byte codec, and a client that leaves mid-request freeing its slot.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "server_fixture.h"

namespace tandem::test {
namespace {

using server::HttpServer;

// One server for the tests that do not need their own; slots paced by a 1 ms step so requests
// last long enough to be cut.
struct Shared {
  std::unique_ptr<HttpServer> srv;
  uint16_t port = 0;
};

Shared& shared() {
  static Shared s = [] {
    Shared x;
    auto o = tiny_options(2);
    o.scheduler.after_step = [] { std::this_thread::sleep_for(std::chrono::microseconds(1000)); };
    x.srv = start_server(o);
    x.port = x.srv->port();
    wait_ready(x.port);
    return x;
  }();
  return s;
}

void expect_error(const HttpResult& r, int status, const std::string& code, const std::string& param = "") {
  EXPECT_EQ(r.status, status) << r.body;
  auto d = parse_json(r.body);
  ASSERT_TRUE(d.IsObject() && d.HasMember("error")) << r.body;
  const auto& e = d["error"];
  ASSERT_TRUE(e["message"].IsString() && e["type"].IsString()) << r.body;
  EXPECT_TRUE(e.HasMember("param") && e.HasMember("code")) << r.body;
  if (!code.empty()) EXPECT_EQ(std::string(e["code"].IsString() ? e["code"].GetString() : "null"), code) << r.body;
  if (!param.empty()) EXPECT_EQ(std::string(e["param"].IsString() ? e["param"].GetString() : "null"), param) << r.body;
}

void wait_idle(uint16_t port) {
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  std::string m;
  while (std::chrono::steady_clock::now() < until) {
    m = http_request(port, "GET", "/metrics").body;
    if (metric(m, "tandem:num_requests_running{model_name=\"latent\"}") == 0 &&
        metric(m, "tandem:num_requests_waiting{model_name=\"latent\"}") == 0)
      return;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  FAIL() << "slots never went idle:\n" << m;
}

TEST(Http, HealthIs503WhileLoadingThen200) {
  std::promise<void> go;
  auto srv = start_server(tiny_options(1), nullptr, go.get_future().share());
  uint16_t port = srv->port();
  auto h = http_request(port, "GET", "/health");
  EXPECT_EQ(h.status, 503);
  EXPECT_EQ(h.headers["retry-after"], "5");
  EXPECT_NE(h.body.find("Loading model"), std::string::npos);
  // Every other route waits for the model too, with the standard error body.
  expect_error(http_request(port, "GET", "/v1/models", "", auth()), 503, "loading");
  go.set_value();
  wait_ready(port);
  EXPECT_EQ(http_request(port, "GET", "/health").body, R"({"status":"ok"})");
  srv->drain();
  EXPECT_EQ(srv->wait(), 0);
}

TEST(Http, ModelsListsTheServedModel) {
  auto& s = shared();
  auto r = http_request(s.port, "GET", "/v1/models", "", auth());
  ASSERT_EQ(r.status, 200) << r.body;
  auto d = parse_json(r.body);
  EXPECT_STREQ(d["object"].GetString(), "list");
  ASSERT_EQ(d["data"].Size(), 1u);
  EXPECT_STREQ(d["data"][0]["id"].GetString(), "latent");
  EXPECT_EQ(d["data"][0]["max_model_len"].GetInt(), 1024);
  EXPECT_EQ(http_request(s.port, "GET", "/models", "", auth()).status, 200);
  EXPECT_FALSE(r.headers["x-request-id"].empty());
  EXPECT_EQ(r.headers["server"].rfind("tandem/", 0), 0u);
}

TEST(Http, CompletionGreedyEqualsGenerate) {
  auto& s = shared();
  auto want = reference_tokens(fixture_prompt(), 24);
  auto r = http_request(s.port, "POST", "/v1/completions", completion_body(fixture_prompt(), 24), auth());
  ASSERT_EQ(r.status, 200) << r.body;
  auto d = parse_json(r.body);
  EXPECT_STREQ(d["object"].GetString(), "text_completion");
  EXPECT_EQ(std::string(d["id"].GetString()).rfind("cmpl-", 0), 0u);
  const auto& c = d["choices"][0];
  EXPECT_EQ(int_array(c["tokens"]), want);
  EXPECT_STREQ(c["finish_reason"].GetString(), want.size() == 24 ? "length" : "stop");
  EXPECT_EQ(d["usage"]["prompt_tokens"].GetInt(), int(fixture_prompt().size()));
  EXPECT_EQ(d["usage"]["completion_tokens"].GetInt(), int(want.size()));
  EXPECT_EQ(d["usage"]["total_tokens"].GetInt(), int(fixture_prompt().size() + want.size()));
}

TEST(Http, CompletionStreamedEqualsGenerate) {
  auto& s = shared();
  auto want = reference_tokens(fixture_prompt(), 20);
  auto r = http_request(s.port, "POST", "/v1/completions",
                        completion_body(fixture_prompt(), 20, R"(,"stream":true,"stream_options":{"include_usage":true})"),
                        auth());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers["content-type"], "text/event-stream");
  auto events = sse_events(r.body);
  ASSERT_GE(events.size(), 3u) << r.body;
  EXPECT_EQ(events.back(), "[DONE]");
  std::vector<int32_t> got;
  std::string finish;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    auto d = parse_json(events[i]);
    EXPECT_TRUE(d["usage"].IsNull()) << events[i];  // include_usage: null on every chunk but the last
    const auto& c = d["choices"][0];
    for (int32_t t : int_array(c["tokens"])) got.push_back(t);
    if (c["finish_reason"].IsString()) finish = c["finish_reason"].GetString();
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(finish, want.size() == 20 ? "length" : "stop");
  auto u = parse_json(events[events.size() - 2]);
  EXPECT_EQ(u["choices"].Size(), 0u);
  EXPECT_EQ(u["usage"]["completion_tokens"].GetInt(), int(want.size()));
  EXPECT_TRUE(u.HasMember("timings"));
}

TEST(Http, ErrorsHaveOpenAIShapeAndStatus) {
  auto& s = shared();
  const std::string ok = completion_body(fixture_prompt(), 4);
  expect_error(http_request(s.port, "POST", "/v1/completions", ok), 401, "invalid_api_key");
  expect_error(http_request(s.port, "POST", "/v1/completions", ok, {{"Authorization", "Bearer nope"}}), 401,
               "invalid_api_key");
  EXPECT_EQ(http_request(s.port, "POST", "/v1/completions", ok, {{"x-api-key", kKey}}).status, 200);
  EXPECT_EQ(http_request(s.port, "GET", "/health").status, 200);  // public
  expect_error(http_request(s.port, "POST", "/v1/completions", "{\"prompt\": [1,2", auth()), 400, "invalid_json");
  expect_error(http_request(s.port, "POST", "/v1/completions", "{\"prompt\": \"a\xff\xfe\"}", auth()), 400,
               "invalid_json");
  expect_error(http_request(s.port, "POST", "/v1/completions", R"({"prompt":[1,2],"temperature":"hot"})", auth()), 400,
               "invalid_type", "temperature");
  expect_error(http_request(s.port, "POST", "/v1/completions", R"({"prompt":[1,2],"top_p":0})", auth()), 400,
               "invalid_value", "top_p");
  expect_error(http_request(s.port, "POST", "/v1/completions", R"([1,2])", auth()), 400, "invalid_type");
  expect_error(http_request(s.port, "POST", "/v1/completions", R"({"prompt":[1,2],"max_tokens":0})", auth()), 400,
               "invalid_value", "max_tokens");
  expect_error(http_request(s.port, "POST", "/v1/completions", R"({"prompt":[1,999]})", auth()), 400, "invalid_value",
               "prompt");
  expect_error(http_request(s.port, "POST", "/v1/completions", R"({"prompt":[1,2],"n":0})", auth()), 400,
               "invalid_value", "n");
  expect_error(http_request(s.port, "POST", "/v1/completions", R"({"prompt":[1,2],"stream_options":{"include_usage":true}})",
                            auth()),
               400, "invalid_value", "stream_options");
  expect_error(http_request(s.port, "POST", "/v1/completions", R"({"prompt":[1,2],"model":"gpt-4"})", auth()), 404,
               "model_not_found", "model");
  expect_error(http_request(s.port, "POST", "/v1/embeddings", "{}", auth()), 404, "route_not_found");
  auto m = http_request(s.port, "GET", "/v1/completions", "", auth());
  expect_error(m, 405, "method_not_allowed");
  EXPECT_EQ(m.headers["allow"], "POST");
  std::vector<int32_t> long_prompt(1024, 5);
  expect_error(http_request(s.port, "POST", "/v1/completions", completion_body(long_prompt, 4), auth()), 400,
               "context_length_exceeded", "prompt");
  std::string big = "{\"prompt\":\"" + std::string(100 * 1024, 'x') + "\"}";
  expect_error(http_request(s.port, "POST", "/v1/completions", big, auth()), 413, "request_too_large");
  // No tokenizer beside the fixture model: text needs one, and says so without inviting retries.
  auto t = http_request(s.port, "POST", "/v1/completions", R"({"prompt":"hello"})", auth());
  expect_error(t, 501, "not_implemented");
  EXPECT_EQ(t.headers["x-should-retry"], "false");
  EXPECT_NE(t.body.find("tokenizer"), std::string::npos);
  expect_error(http_request(s.port, "POST", "/v1/chat/completions",
                            R"({"messages":[{"role":"user","content":"hi"}]})", auth()),
               501, "not_implemented");
  expect_error(http_request(s.port, "POST", "/v1/chat/completions", R"({"messages":[]})", auth()), 400,
               "invalid_value", "messages");
  expect_error(http_request(s.port, "POST", "/v1/chat/completions",
                            R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]})", auth()),
               400, "unsupported_content");
  expect_error(http_request(s.port, "POST", "/v1/chat/completions",
                            R"({"messages":[{"role":"user","content":"x"}],"functions":[]})", auth()),
               400, "unsupported_parameter", "functions");
  // The connection survives errors: a good request right after still works.
  EXPECT_EQ(http_request(s.port, "POST", "/v1/completions", ok, auth()).status, 200);
}

TEST(Http, ClientLeavingMidStreamFreesItsSlot) {
  auto& s = shared();
  wait_idle(s.port);
  std::string before = http_request(s.port, "GET", "/metrics").body;
  const std::string aborts = "tandem:request_success_total{model_name=\"latent\",finished_reason=\"abort\"}";
  double a0 = metric(before, aborts);
  // ~900 paced steps take ~1 s: it is cut long before it ends.
  auto got = read_then_disconnect(s.port, "/v1/completions",
                                  completion_body(fixture_prompt(), 900, R"(,"stream":true,"ignore_eos":true)"), auth(),
                                  3);
  EXPECT_NE(got.find("data: "), std::string::npos);
  wait_idle(s.port);
  // Idle because it was cut, not because it ran out its 900 tokens: it ended as an abort, short.
  const std::string after = http_request(s.port, "GET", "/metrics").body;
  EXPECT_EQ(metric(after, aborts), a0 + 1) << after;
  const std::string gen = "tandem:generation_tokens_total{model_name=\"latent\"}";
  EXPECT_LT(metric(after, gen) - metric(before, gen), 900) << "the stream ran to its end";
  // The same for a non-streamed request: the server watches the socket while it generates.
  send_then_disconnect(s.port, "/v1/completions", completion_body(fixture_prompt(), 900, R"(,"ignore_eos":true)"),
                       auth(), 100);
  wait_idle(s.port);
  EXPECT_EQ(metric(http_request(s.port, "GET", "/metrics").body, aborts), a0 + 2);
  auto slots = parse_json(http_request(s.port, "GET", "/slots", "", auth()).body);
  for (const auto& sl : slots.GetArray()) EXPECT_STREQ(sl["state"].GetString(), "idle");
  auto r = http_request(s.port, "POST", "/v1/completions", completion_body(fixture_prompt(), 8), auth());
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(int_array(parse_json(r.body)["choices"][0]["tokens"]), reference_tokens(fixture_prompt(), 8));
}

TEST(Http, TextPromptsStopStringsAndTokenizeThroughTheCodec) {
  auto srv = start_server(tiny_options(1), std::make_shared<ByteCodec>());
  uint16_t port = srv->port();
  wait_ready(port);
  auto tk = parse_json(http_request(port, "POST", "/tokenize", R"({"content":"hey"})", auth()).body);
  EXPECT_EQ(int_array(tk["tokens"]), (std::vector<int32_t>{'h', 'e', 'y'}));
  EXPECT_EQ(tk["count"].GetInt(), 3);
  auto dt = parse_json(http_request(port, "POST", "/detokenize", R"({"tokens":[104,105]})", auth()).body);
  EXPECT_STREQ(dt["content"].GetString(), "hi");

  const std::string prompt = "The quick brown fox";
  std::vector<int32_t> ids(prompt.begin(), prompt.end());
  auto want = reference_tokens(ids, 40);
  auto r = http_request(port, "POST", "/v1/completions",
                        R"({"prompt":"The quick brown fox","max_tokens":40,"return_tokens":true})", auth());
  ASSERT_EQ(r.status, 200) << r.body;
  auto d = parse_json(r.body);
  EXPECT_EQ(int_array(d["choices"][0]["tokens"]), want);
  // The first ASCII character generated after the first token becomes a stop string.
  size_t k = 1;
  while (k < want.size() && !(want[k] >= 0x20 && want[k] < 0x7f && want[k] != '"' && want[k] != '\\')) ++k;
  ASSERT_LT(k, want.size()) << "the latent fixture's greedy output for \"The quick brown fox\" has no printable ASCII "
                               "token after its first: pick another prompt for this test";
  size_t first = 0;
  while (want[first] != want[k]) ++first;
  std::string stop(1, char(want[k]));
  auto rs = http_request(port, "POST", "/v1/completions",
                         R"({"prompt":"The quick brown fox","max_tokens":40,"stop":")" + stop + R"("})", auth());
  ASSERT_EQ(rs.status, 200) << rs.body;
  auto ds = parse_json(rs.body);
  EXPECT_STREQ(ds["choices"][0]["finish_reason"].GetString(), "stop");
  EXPECT_EQ(ds["usage"]["completion_tokens"].GetInt(), int(first + 1));
  EXPECT_EQ(std::string(ds["choices"][0]["text"].GetString()).find(stop), std::string::npos);
  // Streamed text concatenates to the same, and is valid UTF-8 (the JSON parser checks) throughout.
  auto st = http_request(port, "POST", "/v1/completions",
                         R"({"prompt":"The quick brown fox","max_tokens":40,"stream":true})", auth());
  std::string joined;
  for (const auto& e : sse_events(st.body))
    if (e != "[DONE]") joined += parse_json(e)["choices"][0]["text"].GetString();
  EXPECT_EQ(joined, d["choices"][0]["text"].GetString());
  srv->drain();
  EXPECT_EQ(srv->wait(), 0);
}

}  // namespace
}  // namespace tandem::test
