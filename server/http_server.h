// `tandem serve`: the OpenAI-compatible HTTP server (spec/server.md). One io_context on one thread
// serves every connection; the model loads on a background thread after the socket listens
// (/health answers 503 until then); one engine thread (slots.h) drives the model.
// Owner: HttpServer owns its threads, the loaded model and the scheduler. Thread: construct, start,
// wait and destroy on one thread; drain() and the accessors from any thread. Sync: internal.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "metrics.h"
#include "tandem/slot_scheduler.h"
#include "tandem/profile.h"

namespace tandem {
class PluginRegistry;
class TextCodec;
}

namespace tandem::server {

struct ServerOptions {
  std::string host = "127.0.0.1";           // an address or a host name ("localhost")
  uint16_t port = 8000;                     // 0 = any free port (tests)
  std::vector<std::string> api_keys;        // empty = no key needed
  std::string metrics_key;                  // empty = /metrics is public
  std::string served_model_name;            // "" = the model folder's name
  std::vector<std::string> aliases;
  size_t max_body_bytes = size_t(32) << 20;
  int default_max_tokens = 256;
  double drain_timeout_s = 60;
  double sse_ping_interval_s = 5;
  bool strict_fields = false;
  int64_t reasoning_budget = -1;            // default for requests that set none; -1 = unlimited
  std::string reasoning_budget_message;     // injected before the close text when a budget is spent
  std::string reasoning_effort;             // default thinking mode for requests that choose none ("" = the template's)
  bool handle_signals = false;              // SIGINT/SIGTERM drain (the CLI; tests call drain())
  std::function<void(double)> on_progress;  // load progress (the CLI's progress bar), besides /health
  SchedulerOptions scheduler;
  SamplingParams sampling;                  // request defaults
};

struct LoadedModel {
  std::shared_ptr<PluginRegistry> registry;  // first, so it is destroyed last
  std::unique_ptr<Model> model;
  std::shared_ptr<const TextCodec> codec;
  std::string path;
};
// Loads a model; calls `progress` with the fraction loaded (0 … 1) as it goes.
using ModelLoader = std::function<LoadedModel(const std::function<void(double)>& progress)>;

// Loads the profile's model with `registry`'s plugins, and its text codec from the same checkpoint's
// side files (or the profile's overrides): the checkpoint is opened once.
LoadedModel load_profile_model(const Profile& profile, std::shared_ptr<PluginRegistry> registry,
                               const std::function<void(double)>& progress);
// load_profile_model with the default plugins.
ModelLoader profile_loader(const Profile& profile);

class HttpServer {
 public:
  HttpServer(ServerOptions options, ModelLoader loader);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Resolves the host (an address or a name), binds and listens (errors name host:port), then starts
  // the io thread and the model load.
  void start();
  uint16_t port() const;
  // Let running requests finish for up to drain_timeout_s while every new request (still accepted)
  // gets 503 draining with Retry-After; then cancel the rest and stop. What SIGTERM/SIGINT do.
  void drain();
  // Blocks until the server stopped: 0 after a drain, 1 when the model failed to load.
  int wait();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::server
