// Prefix checkpoints behind `tandem serve` (tiny fixture model, prefill chunks of 8): a repeated
// prompt resumes from its end checkpoint, a growing conversation prefills only what follows the
// previous prompt's last chunk boundary, every answer equals a cold run's (a server with the cache
// off, the same chunks), and /metrics and usage count the hits, the tokens reused and the bytes held.
#include <gtest/gtest.h>

#include "server_fixture.h"
#include "test_util.h"

namespace tandem::test {
namespace {

constexpr int kChunk = 8;
const std::string kLabel = "{model_name=\"latent\"}";

struct Answer {
  std::vector<int32_t> tokens;
  int64_t cached = -1, prompt_n = -1, cache_n = -1;
};

Answer complete(uint16_t port, const std::vector<int32_t>& prompt, int max_tokens) {
  auto r = http_request(port, "POST", "/v1/completions", completion_body(prompt, max_tokens), auth());
  EXPECT_EQ(r.status, 200) << r.body;
  auto d = parse_json(r.body);
  Answer a;
  a.tokens = int_array(d["choices"][0]["tokens"]);
  a.cached = d["usage"]["prompt_tokens_details"]["cached_tokens"].GetInt64();
  a.prompt_n = d["timings"]["prompt_n"].GetInt64();
  a.cache_n = d["timings"]["cache_n"].GetInt64();
  return a;
}

double metric_of(uint16_t port, const std::string& name) {
  return metric(http_request(port, "GET", "/metrics").body, "tandem:" + name + kLabel);
}

// One slot, prefill chunks of kChunk, a prefix cache of `bytes` (0 = off); ready to serve.
std::unique_ptr<server::HttpServer> start(int64_t bytes) {
  auto o = tiny_options(1);
  o.scheduler.prefill_chunk = kChunk;
  o.scheduler.prefix_cache.bytes = bytes;
  auto s = start_server(o);
  wait_ready(s->port());
  return s;
}

// The reference: the same server with the prefix cache off.
std::vector<int32_t> cold_tokens(const std::vector<int32_t>& prompt, int max_tokens) {
  static std::unique_ptr<server::HttpServer> srv = start(0);
  const Answer a = complete(srv->port(), prompt, max_tokens);
  EXPECT_EQ(a.cached, 0);
  EXPECT_EQ(a.prompt_n, int64_t(prompt.size()));
  return a.tokens;
}

std::vector<int32_t> prompt_of(size_t n, int32_t salt) {
  std::vector<int32_t> p = fixture_prompt();
  while (p.size() < n) p.push_back(int32_t((p.size() * 37 + size_t(salt)) % 200 + 20));
  p.resize(n);
  return p;
}

TEST(HttpPrefix, RepeatedPromptReusesItsPrefix) {
  auto srv = start(kDefaultPrefixCacheBytes);
  const uint16_t port = srv->port();
  const auto prompt = prompt_of(43, 1);
  const auto want = cold_tokens(prompt, 12);

  const Answer cold = complete(port, prompt, 12);
  EXPECT_EQ(cold.tokens, want);
  EXPECT_EQ(cold.cached, 0);
  EXPECT_EQ(cold.prompt_n, 43);
  EXPECT_EQ(metric_of(port, "prefix_cache_hit_requests_total"), 0);
  EXPECT_GT(metric_of(port, "prefix_cache_bytes"), 0);
  EXPECT_EQ(metric_of(port, "prefix_cache_entries"), 6);  // 8, 16, …, 40 and the end (43)

  const Answer again = complete(port, prompt, 12);
  EXPECT_EQ(again.tokens, want);
  EXPECT_EQ(again.cached, 43);
  EXPECT_EQ(again.prompt_n, 0);
  EXPECT_EQ(again.cache_n, 43);
  EXPECT_EQ(metric_of(port, "prefix_cache_requests_total"), 2);
  EXPECT_EQ(metric_of(port, "prefix_cache_hit_requests_total"), 1);
  EXPECT_EQ(metric_of(port, "prefix_cache_queries_total"), 86);
  EXPECT_EQ(metric_of(port, "prefix_cache_hits_total"), 43);
  // usage.prompt_tokens and prompt_tokens_total still count the whole prompt.
  EXPECT_EQ(metric_of(port, "prompt_tokens_total"), 86);

  // The prompt extended: from the last chunk boundary of the old one (40).
  auto longer = prompt;
  for (int32_t t : {50, 51, 52, 53, 54, 55, 56}) longer.push_back(t);
  const Answer ext = complete(port, longer, 10);
  EXPECT_EQ(ext.tokens, cold_tokens(longer, 10));
  EXPECT_EQ(ext.cached, 40);
  EXPECT_EQ(ext.prompt_n, int64_t(longer.size()) - 40);
  EXPECT_EQ(metric_of(port, "prefix_cache_hits_total"), 83);
}

TEST(HttpPrefix, ConversationReadsOnlyNewTokens) {
  auto srv = start(kDefaultPrefixCacheBytes);
  const uint16_t port = srv->port();
  std::vector<int32_t> prompt = prompt_of(20, 2);
  size_t previous = 0;
  for (int turn = 0; turn < 10; ++turn) {
    const Answer a = complete(port, prompt, 6);
    EXPECT_EQ(a.tokens, cold_tokens(prompt, 6)) << "turn " << turn;
    const int64_t restored = int64_t(previous / kChunk * kChunk);
    EXPECT_EQ(a.cached, restored) << "turn " << turn;
    EXPECT_EQ(a.prompt_n, int64_t(prompt.size()) - restored) << "turn " << turn;
    previous = prompt.size();
    prompt.insert(prompt.end(), a.tokens.begin(), a.tokens.end());
    for (int i = 0; i < 5 + turn % 4; ++i) prompt.push_back(int32_t(30 + (turn * 7 + i) % 150));
  }
  EXPECT_EQ(metric_of(port, "prefix_cache_hit_requests_total"), 9);
}

TEST(HttpPrefix, OffKeepsNothing) {
  auto srv = start(0);
  const uint16_t port = srv->port();
  const auto prompt = prompt_of(30, 3);
  complete(port, prompt, 4);
  const Answer again = complete(port, prompt, 4);
  EXPECT_EQ(again.cached, 0);
  EXPECT_EQ(again.prompt_n, 30);
  EXPECT_EQ(metric_of(port, "prefix_cache_bytes"), 0);
  EXPECT_EQ(metric_of(port, "prefix_cache_requests_total"), 0);
}

}  // namespace
}  // namespace tandem::test
