// What a first user of `tandem serve` meets: --host as a name, GET /v1/models/{id} (the SDK's
// models.retrieve), `Expect: 100-continue` (curl on bodies over 1 MB), the 503 that new requests get
// while a drain lets running ones finish, and /metrics counting tool_calls as the client sees them.
#include <gtest/gtest.h>

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "server_fixture.h"

namespace tandem::test {
namespace {

TEST(HttpServe, HostNameLocalhostBindsLoopback) {
  auto o = tiny_options(1);
  o.host = "localhost";
  auto srv = start_server(o);
  wait_ready(srv->port());  // http_request connects to 127.0.0.1
  auto r = http_request(srv->port(), "GET", "/health");
  EXPECT_EQ(r.status, 200) << r.body;
  srv->drain();
  EXPECT_EQ(srv->wait(), 0);

  // A name that does not resolve is an error naming it, before anything listens.
  auto bad = tiny_options(1);
  bad.host = "no-such-host.invalid";
  server::HttpServer s(bad, [](const std::function<void(double)>&) { return server::LoadedModel{}; });
  try {
    s.start();
    ADD_FAILURE() << "start() accepted --host no-such-host.invalid";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("--host 'no-such-host.invalid'"), std::string::npos) << e.what();
  }
}

TEST(HttpServe, ModelsRetrieveServedNameAndAliases) {
  auto o = tiny_options(1);
  o.served_model_name = "tiny";
  o.aliases = {"tiny-alias", "org/tiny"};
  auto srv = start_server(o);
  uint16_t port = srv->port();
  wait_ready(port);
  auto list = parse_json(http_request(port, "GET", "/v1/models", "", auth()).body);
  ASSERT_EQ(list["data"].Size(), 3u);
  const std::pair<std::string, int> cases[] = {{"tiny", 0}, {"tiny-alias", 1}, {"org/tiny", 2}, {"org%2Ftiny", 2}};
  for (const auto& [id, i] : cases) {
    for (const std::string prefix : {"/v1/models/", "/models/"}) {
      auto r = http_request(port, "GET", prefix + id, "", auth());
      ASSERT_EQ(r.status, 200) << prefix << id << ": " << r.body;
      auto m = parse_json(r.body);
      EXPECT_TRUE(m == list["data"][rapidjson::SizeType(i)]) << r.body;  // the list's own object
    }
  }
  // Unknown: OpenAI's 404 body (the SDK raises NotFoundError).
  auto r = http_request(port, "GET", "/v1/models/gpt-4o", "", auth());
  EXPECT_EQ(r.status, 404) << r.body;
  auto e = parse_json(r.body);
  EXPECT_STREQ(e["error"]["code"].GetString(), "model_not_found");
  EXPECT_STREQ(e["error"]["param"].GetString(), "model");
  EXPECT_STREQ(e["error"]["type"].GetString(), "not_found_error");
  EXPECT_NE(std::string(e["error"]["message"].GetString()).find("gpt-4o"), std::string::npos);
  // The key is needed as for the list, and only GET is allowed.
  EXPECT_EQ(http_request(port, "GET", "/v1/models/tiny").status, 401);
  auto post = http_request(port, "POST", "/v1/models/tiny", "{}", auth());
  EXPECT_EQ(post.status, 405);
  EXPECT_EQ(post.headers["allow"], "GET");
  srv->drain();
  EXPECT_EQ(srv->wait(), 0);
}

TEST(HttpServe, ExpectContinueGetsTheInterim100) {
  auto o = tiny_options(1);  // --max-body-bytes 64 KiB
  auto srv = start_server(o);
  uint16_t port = srv->port();
  wait_ready(port);
  auto r = request_expect_continue(port, "POST", "/v1/completions", completion_body(fixture_prompt(), 6), auth());
  ASSERT_EQ(r.interim.rfind("HTTP/1.1 100 Continue\r\n", 0), 0u) << "first response: '" << r.interim << "'";
  ASSERT_EQ(r.final.status, 200) << r.final.body;
  EXPECT_EQ(int_array(parse_json(r.final.body)["choices"][0]["tokens"]), reference_tokens(fixture_prompt(), 6));
  // Over the limit: the 413 is the first answer, and no 100 invites the body.
  std::string big = completion_body(fixture_prompt(), 6, ",\"user\":\"" + std::string(100000, 'x') + "\"");
  auto t = request_expect_continue(port, "POST", "/v1/completions", big, auth());
  EXPECT_EQ(t.interim.rfind("HTTP/1.1 413", 0), 0u) << t.interim;
  EXPECT_EQ(t.final.status, 413);
  EXPECT_NE(t.final.body.find("request_too_large"), std::string::npos) << t.final.body;
  srv->drain();
  EXPECT_EQ(srv->wait(), 0);
}

TEST(HttpServe, DrainAnswersNewRequests503WhileAStreamFinishes) {
  // The engine holds after its first step until released, so the stream is certainly running
  // while the new requests arrive.
  struct Gate {
    std::mutex mu;
    std::condition_variable cv;
    bool started = false, released = false;
  };
  auto gate = std::make_shared<Gate>();
  auto o = tiny_options(1);
  o.scheduler.after_step = [gate] {
    std::unique_lock lk(gate->mu);
    gate->started = true;
    gate->cv.notify_all();
    gate->cv.wait(lk, [&] { return gate->released; });
  };
  auto srv = start_server(o);
  uint16_t port = srv->port();
  wait_ready(port);
  auto release = [gate] {
    std::lock_guard lk(gate->mu);
    gate->released = true;
    gate->cv.notify_all();
  };
  HttpResult stream;
  std::thread client([&] {
    stream = http_request(port, "POST", "/v1/completions",
                          completion_body(fixture_prompt(), 24, R"(,"stream":true,"ignore_eos":true)"), auth());
  });
  // However the test ends (a refused connect throws), the engine goes on and the client is joined.
  struct Finally {
    std::function<void()> f;
    ~Finally() { f(); }
  } finally{[&] {
    release();
    if (client.joinable()) client.join();
  }};
  {
    std::unique_lock lk(gate->mu);
    gate->cv.wait(lk, [&] { return gate->started; });
  }
  srv->drain();  // what SIGTERM does (both post begin_drain to the io thread)
  // New connections are still accepted; /health turns 503 once the drain began.
  HttpResult h;
  for (int i = 0; i < 1000; ++i) {
    h = http_request(port, "GET", "/health");
    if (h.status == 503) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(h.status, 503) << h.body;
  EXPECT_EQ(h.body, R"({"status":"draining"})");
  EXPECT_EQ(h.headers["retry-after"], "30");
  for (const auto& [method, target] : std::vector<std::pair<std::string, std::string>>{
           {"POST", "/v1/completions"}, {"POST", "/v1/chat/completions"}, {"GET", "/v1/models"}}) {
    auto r = http_request(port, method, target, method == "POST" ? completion_body(fixture_prompt(), 4) : "", auth());
    EXPECT_EQ(r.status, 503) << target << ": " << r.body;
    EXPECT_EQ(r.headers["retry-after"], "30") << target;
    EXPECT_NE(r.body.find("\"draining\""), std::string::npos) << r.body;
  }
  finally.f();
  ASSERT_EQ(stream.status, 200) << stream.body;
  auto ev = sse_events(stream.body);
  ASSERT_FALSE(ev.empty());
  EXPECT_EQ(ev.back(), "[DONE]");
  std::vector<int32_t> tokens;
  for (size_t i = 0; i + 1 < ev.size(); ++i) {
    auto c = parse_json(ev[i]);
    if (c["choices"].Size() && c["choices"][0].HasMember("tokens")) {
      auto t = int_array(c["choices"][0]["tokens"]);
      tokens.insert(tokens.end(), t.begin(), t.end());
    }
  }
  EXPECT_EQ(tokens, reference_tokens(fixture_prompt(), 24));
  EXPECT_EQ(srv->wait(), 0);
}

TEST(HttpServe, MetricsCountToolCalls) {
  auto o = tiny_options(1);
  o.served_model_name = "tiny-chat";
  o.scheduler.context = 2048;
  auto srv = start_chat_server(o);
  uint16_t port = srv->port();
  wait_ready(port);
  const std::string body = R"({"messages":[{"role":"user","content":"Weather in Oslo?"}],"temperature":0,"max_tokens":300,)"
                           R"("chat_template_kwargs":{"enable_thinking":false},)"
                           R"("tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object",)"
                           R"("properties":{"city":{"type":"string","maxLength":8}},"required":["city"]}}}],)"
                           R"("tool_choice":{"type":"function","function":{"name":"get_weather"}})";
  auto r = http_request(port, "POST", "/v1/chat/completions", body + "}", auth());
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_STREQ(parse_json(r.body)["choices"][0]["finish_reason"].GetString(), "tool_calls") << r.body;
  auto st = http_request(port, "POST", "/v1/chat/completions", body + R"(,"stream":true})", auth());
  ASSERT_EQ(st.status, 200) << st.body;
  EXPECT_NE(st.body.find(R"("finish_reason":"tool_calls")"), std::string::npos) << st.body;
  // A plain answer still counts as what it ended with.
  auto plain = http_request(port, "POST", "/v1/chat/completions",
                            R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":3,"ignore_eos":true})", auth());
  ASSERT_EQ(plain.status, 200) << plain.body;
  auto m = http_request(port, "GET", "/metrics").body;
  auto reason = [&](const char* r) {
    return metric(m, std::string("tandem:request_success_total{model_name=\"tiny-chat\",finished_reason=\"") + r + "\"}");
  };
  EXPECT_EQ(reason("tool_calls"), 2) << m;
  EXPECT_EQ(reason("stop"), 0) << m;
  EXPECT_EQ(reason("length"), 1) << m;
  srv->drain();
  EXPECT_EQ(srv->wait(), 0);
}

}  // namespace
}  // namespace tandem::test
