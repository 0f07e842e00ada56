// Settings of `tandem serve`: the server's defaults, then the profile's `server:` section, then the
// environment (TANDEM_API_KEY) and the command-line flags, each winning over the one before.
#include "serve_command.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <spdlog/spdlog.h>

#include "cli.h"
#include "http_server.h"
#include "tandem/text/chat_output.h"
#include "tandem/error.h"

namespace tandem::cli {

namespace {

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

// One key a line; blank lines and `#` comments skipped.
std::vector<std::string> read_key_file(const std::string& path) {
  std::ifstream f(path);
  check(f.good(), "api key file '", path, "' cannot be read");
  std::vector<std::string> keys;
  std::string line;
  while (std::getline(f, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
    size_t b = line.find_first_not_of(" \t");
    if (b == std::string::npos || line[b] == '#') continue;
    keys.push_back(line.substr(b));
  }
  check(!keys.empty(), "api key file '", path, "' holds no keys");
  return keys;
}

}  // namespace

const CommandSpec& serve_spec() {
  static const CommandSpec spec{
      "serve",
      "OpenAI-compatible HTTP server (default 127.0.0.1:8000); SIGTERM/SIGINT drain, then exit 0. Flags win over "
      "the profile's server: and draft: sections.",
      with_model_flags({
          {"host", "ADDR|NAME", "address or host name to listen on (default 127.0.0.1; localhost is loopback)"},
          {"port", "N", "TCP port (default 8000; 0 picks a free one)"},
          {"api-key", "K[,K...]", "keys clients must send (Bearer or x-api-key); replaces TANDEM_API_KEY"},
          {"api-key-file", "FILE", "more keys, one a line (# comments)"},
          {"metrics-key", "K", "key /metrics needs (default: public)"},
          {"served-model-name", "NAME", "the model id in /v1/models (default: the model folder's name)"},
          {"alias", "NAME[,NAME...]", "more ids the model answers to"},
          {"slots", "N", "requests generated at once (default 1)"},
          {"max-queue", "N", "requests waiting for a slot before 503 queue_full (default 8)"},
          {"queue-timeout", "S", "seconds a request may wait for a slot before 429 (default 240)"},
          {"max-body-bytes", "N", "largest request body; larger ones get 413 (default 32 MiB)"},
          {"default-max-tokens", "N", "max_tokens of a request that sets none"},
          {"prefill-chunk", "N", "prompt tokens per prefill step"},
          {"prefix-cache-bytes", "N", "bytes of prefix checkpoints to keep (default 2 GiB; 0: off)"},
          {"prefix-cache-every", "N", "tokens between prefix checkpoints, a multiple of --prefill-chunk (default: each chunk)"},

          {"step-tokens", "N", "tokens per engine step: decode rows, then whole prefill chunks (0 = one chunk)"},
          {"batch-rows", "N", "rows of the decoding slots' passes per forward (1-16)"},
          {"drain-timeout", "S", "seconds running requests may take after SIGTERM (default 60)"},
          {"sse-ping-interval", "S", "keep-alive comment on a silent stream every S seconds (default 5; 0: off)"},
          {"strict-fields", "", "refuse request fields tandem ignores (400) instead of accepting them"},
          {"reasoning-budget", "N", "reasoning tokens before the think block is closed (-1: unlimited)"},
          {"reasoning-budget-message", "TEXT", "text injected before the close when the budget is spent"},
          {"reasoning-effort", "none|low|medium|high", "default thinking mode of chat requests"},
          {"draft", "NAME[,NAME...]|none", "speculative decoding with these drafters"},
          {"draft-k", "K", "verify K drafts every step instead of letting StairCut pick"},
      }),
      "",
      "Environment: TANDEM_API_KEY=K[,K...] (replaced by --api-key)."};
  return spec;
}

int cmd_serve(const std::vector<std::string>& argv) {
  cli::Args a(argv, serve_spec());
  Profile p = cli::resolve_profile(a);
  const ServerProfile& ps = p.server;

  server::ServerOptions o;
  o.host = a.str("host", ps.host.value_or(o.host));
  long long port = a.integer("port", ps.port.value_or(o.port));
  check(port >= 0 && port <= 65535, "tandem serve: --port must be in [0, 65535], found ", port);
  o.port = uint16_t(port);
  // Keys: the profile's, replaced by TANDEM_API_KEY, replaced by --api-key; key files add to them.
  o.api_keys = ps.api_keys.value_or(std::vector<std::string>{});
  if (const char* env = std::getenv("TANDEM_API_KEY"); env && *env) o.api_keys = split_list(env);
  if (a.has("api-key")) o.api_keys = split_list(a.str("api-key"));
  if (std::string file = a.str("api-key-file", ps.api_key_file.value_or("")); !file.empty()) {
    auto more = read_key_file(file);
    o.api_keys.insert(o.api_keys.end(), more.begin(), more.end());
  }
  o.metrics_key = a.str("metrics-key", ps.metrics_key.value_or(""));
  o.served_model_name = a.str("served-model-name", ps.served_model_name.value_or(""));
  o.aliases = a.has("alias") ? split_list(a.str("alias")) : ps.aliases.value_or(std::vector<std::string>{});
  o.scheduler.slots = int(a.integer("slots", ps.slots.value_or(1)));
  o.scheduler.max_queue = int(a.integer("max-queue", ps.max_queue.value_or(8)));
  o.scheduler.queue_timeout_s = a.number("queue-timeout", ps.queue_timeout.value_or(240));
  o.scheduler.prefill_chunk = int(a.integer("prefill-chunk", ps.prefill_chunk.value_or(kDefaultPrefillChunk)));
  o.scheduler.prefix_cache.bytes = a.integer("prefix-cache-bytes", ps.prefix_cache_bytes.value_or(kDefaultPrefixCacheBytes));
  o.scheduler.prefix_cache.every = a.integer("prefix-cache-every", ps.prefix_cache_every.value_or(0));

  o.scheduler.step_tokens = int(a.integer("step-tokens", ps.step_tokens.value_or(0)));
  o.scheduler.batch_rows = int(a.integer("batch-rows", ps.batch_rows.value_or(Model::batch_max_rows)));
  o.scheduler.context = p.context;
  // Drafting: the profile's `draft:` section; --draft none serves the same profile plain.
  o.scheduler.draft = cli::draft_options(a, p.draft, "serve");
  long long body = a.integer("max-body-bytes", ps.max_body_bytes.value_or((long long)o.max_body_bytes));
  o.max_body_bytes = size_t(body);
  o.default_max_tokens = int(a.integer("default-max-tokens", ps.default_max_tokens.value_or(p.max_tokens)));
  o.drain_timeout_s = a.number("drain-timeout", ps.drain_timeout.value_or(o.drain_timeout_s));
  o.sse_ping_interval_s = a.number("sse-ping-interval", ps.sse_ping_interval.value_or(o.sse_ping_interval_s));
  o.strict_fields = a.flag("strict-fields") || ps.strict_fields.value_or(false);
  o.reasoning_budget = a.integer("reasoning-budget", ps.reasoning_budget.value_or(-1));
  o.reasoning_budget_message = a.str("reasoning-budget-message", ps.reasoning_budget_message.value_or(""));
  o.reasoning_effort = a.str("reasoning-effort", ps.reasoning_effort.value_or(""));
  o.sampling = p.sampling;
  o.handle_signals = true;
  o.on_progress = cli::progress_printer("loading weights");
  check(o.scheduler.slots >= 1, "tandem serve: --slots must be at least 1, found ", o.scheduler.slots);
  check(o.scheduler.max_queue >= 0, "tandem serve: --max-queue must be non-negative, found ", o.scheduler.max_queue);
  check(o.scheduler.prefill_chunk >= 1, "tandem serve: --prefill-chunk must be at least 1");
  check(o.scheduler.prefix_cache.bytes >= 0, "tandem serve: --prefix-cache-bytes must be non-negative, found ",
        o.scheduler.prefix_cache.bytes);
  check(o.scheduler.prefix_cache.every >= 0 && o.scheduler.prefix_cache.every % o.scheduler.prefill_chunk == 0,
        "tandem serve: --prefix-cache-every must be 0 or a multiple of --prefill-chunk (", o.scheduler.prefill_chunk,
        "), found ", o.scheduler.prefix_cache.every);

  check(o.scheduler.step_tokens == 0 || o.scheduler.step_tokens >= o.scheduler.prefill_chunk,
        "tandem serve: --step-tokens must be 0 or at least --prefill-chunk (", o.scheduler.prefill_chunk, "), found ",
        o.scheduler.step_tokens);
  check(o.scheduler.batch_rows >= 1 && o.scheduler.batch_rows <= Model::batch_max_rows,
        "tandem serve: --batch-rows must be in [1, ", Model::batch_max_rows, "], found ", o.scheduler.batch_rows);
  check(body >= 1024, "tandem serve: --max-body-bytes must be at least 1024, found ", body);
  check(o.default_max_tokens >= 1, "tandem serve: --default-max-tokens must be at least 1");
  check(o.drain_timeout_s >= 0 && o.scheduler.queue_timeout_s >= 0 && o.sse_ping_interval_s >= 0,
        "tandem serve: --drain-timeout, --queue-timeout and --sse-ping-interval must be non-negative");
  check(o.reasoning_budget >= -1, "tandem serve: --reasoning-budget must be -1 (unlimited) or more, found ",
        o.reasoning_budget);
  if (!o.reasoning_effort.empty()) {
    try {
      thinking_mode_from_effort(o.reasoning_effort);
    } catch (const Error& e) {
      fail("tandem serve: --reasoning-effort: ", e.what());
    }
  }

  server::HttpServer server(o, server::profile_loader(p));
  server.start();
  spdlog::info("listening on http://{}:{} (model loading in the background; /health answers 503 until ready)",
               o.host, server.port());
  int rc = server.wait();
  if (rc == 0) spdlog::info("stopped");
  return rc;
}

}  // namespace tandem::cli
