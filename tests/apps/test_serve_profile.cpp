// The profile's `server:` section and model-file overrides: every key read, one-line errors naming
// key and file, and every profile shipped in configs/ parses (the model files need not exist here).
#include <gtest/gtest.h>

#include <filesystem>

#include "tandem/error.h"
#include "tandem/profile.h"
#include "test_util.h"

using namespace tandem;

namespace {

std::string error_of(const std::string& yaml) {
  try {
    parse_profile(yaml, "/cfg/p.yaml");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(ServeProfile, ReadsEveryServerKey) {
  Profile p = parse_profile(R"(
model: m
chat_template: templates/chat.jinja
tokenizer: /abs/tokenizer.json
server:
  host: 0.0.0.0
  port: 8123
  api_key: [k1, k2]
  api_key_file: keys.txt
  metrics_key: mk
  served_model_name: bolt
  aliases: nemotron
  slots: 3
  max_queue: 4
  queue_timeout: 30
  max_body_bytes: 1048576
  default_max_tokens: 2048
  prefill_chunk: 1024
  prefix_cache_bytes: 1073741824
  prefix_cache_every: 4096
  drain_timeout: 10.5
  sse_ping_interval: 2
  strict_fields: true
  reasoning_budget: 512
  reasoning_budget_message: "Time to answer."
  reasoning_effort: medium
)", "/cfg/p.yaml");
  EXPECT_EQ(p.chat_template, "/cfg/templates/chat.jinja");
  EXPECT_EQ(p.tokenizer, "/abs/tokenizer.json");
  const ServerProfile& s = p.server;
  EXPECT_EQ(*s.host, "0.0.0.0");
  EXPECT_EQ(*s.port, 8123);
  EXPECT_EQ(*s.api_keys, (std::vector<std::string>{"k1", "k2"}));
  EXPECT_EQ(*s.api_key_file, "/cfg/keys.txt");
  EXPECT_EQ(*s.metrics_key, "mk");
  EXPECT_EQ(*s.served_model_name, "bolt");
  EXPECT_EQ(*s.aliases, (std::vector<std::string>{"nemotron"}));
  EXPECT_EQ(*s.slots, 3);
  EXPECT_EQ(*s.max_queue, 4);
  EXPECT_DOUBLE_EQ(*s.queue_timeout, 30);
  EXPECT_EQ(*s.max_body_bytes, 1048576);
  EXPECT_EQ(*s.default_max_tokens, 2048);
  EXPECT_EQ(*s.prefill_chunk, 1024);
  EXPECT_EQ(*s.prefix_cache_bytes, 1073741824);
  EXPECT_EQ(*s.prefix_cache_every, 4096);
  EXPECT_DOUBLE_EQ(*s.drain_timeout, 10.5);
  EXPECT_DOUBLE_EQ(*s.sse_ping_interval, 2);
  EXPECT_TRUE(*s.strict_fields);
  EXPECT_EQ(*s.reasoning_budget, 512);
  EXPECT_EQ(*s.reasoning_budget_message, "Time to answer.");
  EXPECT_EQ(*s.reasoning_effort, "medium");
  // Unset keys stay unset, so the server's defaults and the flags decide.
  EXPECT_FALSE(parse_profile("model: m\nserver: {port: 1}\n", "/cfg/p.yaml").server.slots.has_value());
  EXPECT_EQ(*parse_profile("model: m\nserver: {batch_rows: 8}\n", "/cfg/p.yaml").server.batch_rows, 8);
  EXPECT_EQ(*parse_profile("model: m\nserver: {prefill_chunk: 256, step_tokens: 1024}\n", "/cfg/p.yaml").server.step_tokens,
            1024);
}

TEST(ServeProfile, ErrorsNameKeyAndFile) {
  struct Case {
    const char* yaml;
    const char* needle;
  } cases[] = {
      {"model: m\nserver: {prot: 1}\n", "/cfg/p.yaml: unknown key 'server.prot'"},
      {"model: m\nserver: {port: high}\n", "/cfg/p.yaml: key 'server.port' must be an integer, found 'high'"},
      {"model: m\nserver: {port: 70000}\n", "key 'server.port' must be in [0, 65535]"},
      {"model: m\nserver: {slots: 0}\n", "key 'server.slots' must be at least 1"},
      {"model: m\nserver: {batch_rows: 17}\n", "key 'server.batch_rows' must be in [1, 16], found 17"},
      {"model: m\nserver: {batch_rows: 0}\n", "key 'server.batch_rows' must be in [1, 16], found 0"},
      {"model: m\nserver: {api_key: {a: b}}\n", "key 'server.api_key' must be a string or a list of strings"},
      {"model: m\nserver: {aliases: [[a]]}\n", "key 'server.aliases' must be a string or a list of strings"},
      {"model: m\nserver: {strict_fields: maybe}\n", "key 'server.strict_fields' must be true or false"},
      {"model: m\nserver: {drain_timeout: -1}\n", "key 'server.drain_timeout' must be non-negative"},
      {"model: m\nserver: {reasoning_effort: extreme}\n", "key 'server.reasoning_effort' must be one of"},
      {"model: m\nserver: {prefix_cache_bytes: -1}\n", "key 'server.prefix_cache_bytes' must be at least 0, found -1"},
      {"model: m\nserver: {prefix_cache_bytes: lots}\n", "key 'server.prefix_cache_bytes' must be an integer number of bytes"},
      {"model: m\nserver: {prefill_chunk: 512, prefix_cache_every: 700}\n",
       "key 'server.prefix_cache_every' must be a multiple of server.prefill_chunk (512), found 700"},
      {"model: m\nserver: {prefill_chunk: 512, step_tokens: 100}\n",
       "/cfg/p.yaml: key 'server.step_tokens' must be 0 or at least server.prefill_chunk (512), found 100"},
      {"model: m\nserver: {step_tokens: -1}\n", "key 'server.step_tokens' must be at least 0, found -1"},
      {"model: m\nserver: {step_tokens: many}\n", "key 'server.step_tokens' must be an integer number of tokens"},
      {"model: m\nserver: 5\n", "'server' must be a mapping"},
      {"model: m\nchat_template: [a]\n", "key 'chat_template' must be a path to a Jinja chat template"},
  };
  for (const auto& c : cases) {
    std::string e = error_of(c.yaml);
    EXPECT_NE(e.find(c.needle), std::string::npos) << c.yaml << "\n" << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

TEST(ServeProfile, EveryShippedProfileParses) {
  namespace fs = std::filesystem;
  int n = 0;
  for (const auto& f : fs::directory_iterator(fs::path(TANDEM_SOURCE_DIR) / "configs")) {
    if (f.path().extension() != ".yaml") continue;
    SCOPED_TRACE(f.path().string());
    Profile p;
    EXPECT_NO_THROW(p = load_profile(f.path().string()));
    EXPECT_FALSE(p.load.path.empty());
    ++n;
  }
  EXPECT_GE(n, 8);
}
