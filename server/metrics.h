// Prometheus counters, gauges and histograms for `tandem serve`, rendered as text format 0.0.4 with
// vLLM's metric names under the prefix `tandem:` (spec/server.md §5).
// Owner: the server owns one Metrics. Thread: any thread may record; render() from any thread.
// Sync: one mutex guards everything (recording is a few adds per token, far below a model step).
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "tandem/slot_scheduler.h"

namespace tandem::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void observe(double v);
  // Appends `name_bucket{…le=…}`, `name_sum`, `name_count` lines; `labels` is `k="v",…` or "".
  void render(std::string& out, const std::string& name, const std::string& labels) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; the last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

class Metrics : public SchedulerEvents {
 public:
  explicit Metrics(std::string model_name);
  void set_model_name(std::string name);
  void set_engine_info(const std::map<std::string, std::string>& labels);

  void http_response(int status);
  void refused(const std::string& reason) override;                 // queue_full, loading, draining
  // The scheduler's end of a request: counts only abort and error, the ends the HTTP layer may
  // never see (the client left). stop and length are counted by request_finished() instead, once
  // the route knows the reason the client gets (a stop that ended a tool call is tool_calls).
  void finished(const std::string& reason) override;
  void request_finished(const std::string& reason);                 // stop, length, tool_calls
  void cancelled(const char* phase) override;                       // queued, prefill, decode
  void tokens(int64_t prompt, int64_t generated) override;
  void prefix_cache(int64_t prompt, int64_t reused) override;
  void time_to_first_token(double s) override;
  void inter_token_latency(double s) override;
  void request_latencies(double e2e, double queue, double prefill, double decode) override;
  // Speculative decoding: the drafters in use and StairCut's measured T_v(m) (seconds, [m − 1]);
  // without a call the spec_* series show drafter="none" at 0.
  void set_drafting(const std::vector<std::string>& drafters, const std::vector<double>& verify_costs) override;
  void set_verify_costs(const std::vector<double>& verify_costs) override;
  void drafted(const DraftMetrics& request) override;  // one finished drafted request

  std::string render(const EngineGauges& g) const;

 private:
  void render_spec(std::string& out, const std::string& model_label) const;  // under mu_

  mutable std::mutex mu_;
  std::string model_name_;
  std::map<std::string, std::string> engine_info_;
  std::map<int, uint64_t> http_;
  std::map<std::string, uint64_t> refused_, finished_, cancelled_;
  uint64_t prompt_tokens_ = 0, generation_tokens_ = 0;
  uint64_t prefix_queries_ = 0, prefix_hits_ = 0, prefix_requests_ = 0, prefix_hit_requests_ = 0;
  DraftMetrics spec_;                  // summed over drafted requests
  uint64_t spec_requests_ = 0;
  std::vector<double> verify_costs_;
  Histogram ttft_, itl_, e2e_, queue_, prefill_, decode_;
};

}  // namespace tandem::server
