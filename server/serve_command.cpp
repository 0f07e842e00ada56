// Flag parsing for `tandem serve`. Server settings come from flags (and TANDEM_API_KEY) only until
// the profile grows a server section.
#include "serve_command.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <spdlog/spdlog.h>

#include "cli.h"
#include "http_server.h"
#include "tandem/error.h"

namespace tandem::server {

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
  check(f.good(), "--api-key-file '", path, "' cannot be read");
  std::vector<std::string> keys;
  std::string line;
  while (std::getline(f, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
    size_t b = line.find_first_not_of(" \t");
    if (b == std::string::npos || line[b] == '#') continue;
    keys.push_back(line.substr(b));
  }
  check(!keys.empty(), "--api-key-file '", path, "' holds no keys");
  return keys;
}

}  // namespace

int cmd_serve(const std::vector<std::string>& argv) {
  auto opts = cli::kModelOptions;
  opts.insert({"host", "port", "api-key", "api-key-file", "metrics-key", "served-model-name", "alias", "slots",
               "max-queue", "queue-timeout", "max-body-bytes", "default-max-tokens", "prefill-chunk", "drain-timeout",
               "sse-ping-interval"});
  cli::Args a(argv, opts, {"strict-fields", "verbose"}, "serve");
  Profile p = cli::resolve_profile(a);

  ServerOptions o;
  o.host = a.str("host", o.host);
  long long port = a.integer("port", o.port);
  check(port >= 0 && port <= 65535, "tandem serve: --port must be in [0, 65535], found ", port);
  o.port = uint16_t(port);
  if (const char* env = std::getenv("TANDEM_API_KEY"); env && *env) o.api_keys = split_list(env);
  if (a.has("api-key")) o.api_keys = split_list(a.str("api-key"));
  if (a.has("api-key-file")) {
    auto more = read_key_file(a.str("api-key-file"));
    o.api_keys.insert(o.api_keys.end(), more.begin(), more.end());
  }
  o.metrics_key = a.str("metrics-key");
  o.served_model_name = a.str("served-model-name");
  o.aliases = split_list(a.str("alias"));
  o.scheduler.slots = int(a.integer("slots", 1));
  o.scheduler.max_queue = int(a.integer("max-queue", 8));
  o.scheduler.queue_timeout_s = a.number("queue-timeout", 240);
  o.scheduler.prefill_chunk = int(a.integer("prefill-chunk", 512));
  o.scheduler.context = p.context;
  long long body = a.integer("max-body-bytes", (long long)o.max_body_bytes);
  o.max_body_bytes = size_t(body);
  o.default_max_tokens = int(a.integer("default-max-tokens", p.max_tokens));
  o.drain_timeout_s = a.number("drain-timeout", o.drain_timeout_s);
  o.sse_ping_interval_s = a.number("sse-ping-interval", o.sse_ping_interval_s);
  o.strict_fields = a.flag("strict-fields");
  o.sampling = p.sampling;
  o.handle_signals = true;
  check(o.scheduler.slots >= 1, "tandem serve: --slots must be at least 1, found ", o.scheduler.slots);
  check(o.scheduler.max_queue >= 0, "tandem serve: --max-queue must be non-negative, found ", o.scheduler.max_queue);
  check(o.scheduler.prefill_chunk >= 1, "tandem serve: --prefill-chunk must be at least 1");
  check(body >= 1024, "tandem serve: --max-body-bytes must be at least 1024, found ", body);
  check(o.default_max_tokens >= 1, "tandem serve: --default-max-tokens must be at least 1");
  check(o.drain_timeout_s >= 0 && o.scheduler.queue_timeout_s >= 0 && o.sse_ping_interval_s >= 0,
        "tandem serve: --drain-timeout, --queue-timeout and --sse-ping-interval must be non-negative");

  HttpServer server(o, profile_loader(p));
  server.start();
  spdlog::info("listening on http://{}:{} (model loading in the background; /health answers 503 until ready)",
               o.host, server.port());
  int rc = server.wait();
  if (rc == 0) spdlog::info("stopped");
  return rc;
}

}  // namespace tandem::server
