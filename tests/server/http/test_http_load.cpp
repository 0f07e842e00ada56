// Bounded load on 127.0.0.1: 32 concurrent clients, some streaming, some leaving mid-request, some
// malformed. Every well-formed request is answered with the greedy ids of tandem::generate, no slot
// stays busy, the metrics agree with what was sent, and the drain ends the server with status 0.
// Then the same drain through the real binary and SIGTERM.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <thread>
#include <sys/wait.h>
#include <unistd.h>

#include "server_fixture.h"
#include "test_util.h"

namespace tandem::test {
namespace {

TEST(HttpLoad, ConcurrentClientsAllAnsweredMetricsConsistent) {
  auto o = tiny_options(4);
  o.scheduler.after_step = [] { std::this_thread::sleep_for(std::chrono::microseconds(200)); };
  auto srv = start_server(o);
  uint16_t port = srv->port();
  wait_ready(port);
  const std::string lbl = "{model_name=\"latent\"}";
  std::string m0 = http_request(port, "GET", "/metrics").body;

  constexpr int kClients = 32;
  enum Kind { plain, streamed, leaves, malformed };
  auto kind_of = [](int i) { return i % 8 == 3 ? leaves : i % 8 == 5 ? malformed : i % 2 ? streamed : plain; };
  std::vector<std::vector<int32_t>> prompts(kClients);
  std::vector<int> lengths(kClients);
  std::vector<std::vector<int32_t>> want(kClients);
  for (int i = 0; i < kClients; ++i) {
    prompts[i] = fixture_prompt();
    prompts[i].push_back(int32_t(10 + i));  // a different prompt per client
    lengths[i] = 8 + (i % 5) * 6;
    if (kind_of(i) == plain || kind_of(i) == streamed) want[i] = reference_tokens(prompts[i], lengths[i]);
  }
  std::vector<int> status(kClients, 0);
  std::vector<std::vector<int32_t>> got(kClients);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i)
    threads.emplace_back([&, i] {
      switch (kind_of(i)) {
        case plain:
        case streamed:
          got[i] = completion_tokens(port, prompts[i], lengths[i], kind_of(i) == streamed, status[i]);
          break;
        case leaves:
          read_then_disconnect(port, "/v1/completions",
                               completion_body(prompts[i], 800, R"(,"stream":true,"ignore_eos":true)"), auth(), 2);
          break;
        case malformed:
          status[i] = http_request(port, "POST", "/v1/completions", "{\"prompt\": [1, 2,", auth()).status;
          break;
      }
    });
  for (auto& t : threads) t.join();

  int ok = 0, bad = 0, left = 0;
  for (int i = 0; i < kClients; ++i) {
    switch (kind_of(i)) {
      case plain:
      case streamed:
        EXPECT_EQ(status[i], 200) << "client " << i;
        EXPECT_EQ(got[i], want[i]) << "client " << i;
        ++ok;
        break;
      case malformed:
        EXPECT_EQ(status[i], 400) << "client " << i;
        ++bad;
        break;
      case leaves: ++left; break;
    }
  }
  // The leavers' slots come back: nothing running, nothing waiting.
  std::string m1;
  for (int tries = 0; tries < 500; ++tries) {
    m1 = http_request(port, "GET", "/metrics").body;
    if (metric(m1, "tandem:num_requests_running" + lbl) == 0 && metric(m1, "tandem:num_requests_waiting" + lbl) == 0)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(metric(m1, "tandem:num_requests_running" + lbl), 0) << m1;
  EXPECT_EQ(metric(m1, "tandem:num_requests_waiting" + lbl), 0) << m1;
  auto delta = [&](const std::string& series) {
    return std::max(0.0, metric(m1, series)) - std::max(0.0, metric(m0, series));
  };
  auto reason = [](const char* r) {
    return std::string("tandem:request_success_total{model_name=\"latent\",finished_reason=\"") + r + "\"}";
  };
  EXPECT_EQ(delta("tandem:http_requests_total{model_name=\"latent\",status=\"400\"}"), bad);
  // 200s: the well-formed answers, the leavers' stream headers, and the metrics/health polls in between.
  EXPECT_GE(delta("tandem:http_requests_total{model_name=\"latent\",status=\"200\"}"), ok + left);
  EXPECT_EQ(delta(reason("stop")) + delta(reason("length")), ok);
  EXPECT_EQ(delta(reason("abort")), left);
  double generated = 0, prompt = 0;
  for (int i = 0; i < kClients; ++i)
    if (kind_of(i) == plain || kind_of(i) == streamed) generated += double(want[i].size()), prompt += double(prompts[i].size());
  EXPECT_GE(delta("tandem:generation_tokens_total" + lbl), generated);  // the leavers add theirs
  EXPECT_GE(delta("tandem:prompt_tokens_total" + lbl), prompt);
  EXPECT_EQ(delta("tandem:e2e_request_latency_seconds_count" + lbl), ok);

  srv->drain();
  EXPECT_EQ(srv->wait(), 0);
  // Drained and stopped: the port no longer answers.
  EXPECT_ANY_THROW(http_request(port, "GET", "/health"));
}

TEST(HttpLoad, DrainLetsARunningRequestFinish) {
  auto o = tiny_options(1);
  o.scheduler.after_step = [] { std::this_thread::sleep_for(std::chrono::microseconds(1000)); };
  auto srv = start_server(o);
  uint16_t port = srv->port();
  wait_ready(port);
  HttpResult r;
  std::thread client([&] {
    r = http_request(port, "POST", "/v1/completions",
                     completion_body(fixture_prompt(), 200, R"(,"ignore_eos":true)"), auth());
  });
  // Drain once the request is running (the timeout only keeps a broken server from hanging the test).
  const std::string running = "tandem:num_requests_running{model_name=\"latent\"}";
  std::string m;
  for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30); std::chrono::steady_clock::now() < until;
       std::this_thread::sleep_for(std::chrono::milliseconds(1))) {
    m = http_request(port, "GET", "/metrics").body;
    if (metric(m, running) == 1) break;
  }
  ASSERT_EQ(metric(m, running), 1) << "the request never started:\n" << m;
  srv->drain();
  EXPECT_EQ(srv->wait(), 0);
  client.join();
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(parse_json(r.body)["usage"]["completion_tokens"].GetInt(), 200);
}

TEST(HttpLoad, BinaryServesAndExitsZeroOnSigterm) {
  std::string bin = std::string(TANDEM_BINARY_DIR) + "/bin/tandem";
  std::string cfg = std::string(TANDEM_SOURCE_DIR) + "/configs/tiny-latent.yaml";
  int err[2];
  ASSERT_EQ(pipe(err), 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(err[1], 2);
    close(err[0]);
    execl(bin.c_str(), bin.c_str(), "serve", "--config", cfg.c_str(), "--port", "0", "--threads", "1", nullptr);
    _exit(127);
  }
  close(err[1]);
  // The port comes from the "listening on http://127.0.0.1:PORT" line.
  std::string log;
  uint16_t port = 0;
  std::array<char, 512> buf;
  while (!port) {
    ssize_t n = read(err[0], buf.data(), buf.size());
    if (n <= 0) break;
    log.append(buf.data(), size_t(n));
    if (auto p = log.find("http://127.0.0.1:"); p != std::string::npos) {
      auto e = log.find_first_not_of("0123456789", p + 17);
      if (e != std::string::npos) port = uint16_t(std::stoi(log.substr(p + 17, e - p - 17)));
    }
  }
  ASSERT_NE(port, 0) << log;
  wait_ready(port);
  auto r = http_request(port, "POST", "/v1/completions", completion_body(fixture_prompt(), 8));
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(int_array(parse_json(r.body)["choices"][0]["tokens"]), reference_tokens(fixture_prompt(), 8));
  kill(pid, SIGTERM);
  int st = 0;
  waitpid(pid, &st, 0);
  close(err[0]);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st << "\n" << log;
}

}  // namespace
}  // namespace tandem::test
