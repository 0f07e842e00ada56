// Prometheus text rendering of the server's metrics.
#include "metrics.h"

#include <cstdio>

namespace tandem::server {

namespace {

// Latency buckets in seconds: 1 ms to 10 min, roughly ×2.5 apart (vLLM uses similar spans).
std::vector<double> latency_buckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320, 640};
}

std::string num(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}

// Label values escape backslash, quote and newline (text format 0.0.4).
std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '\\' || c == '"') o += '\\', o += c;
    else if (c == '\n') o += "\\n";
    else o += c;
  }
  return o;
}

void head(std::string& out, const std::string& name, const char* type, const char* help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

}  // namespace

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  std::string sep = labels.empty() ? "" : ",";
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    out += name + "_bucket{" + labels + sep + "le=\"" + num(bounds_[i]) + "\"} " + std::to_string(cum) + "\n";
  }
  out += name + "_bucket{" + labels + sep + "le=\"+Inf\"} " + std::to_string(count_) + "\n";
  std::string l = labels.empty() ? "" : "{" + labels + "}";
  out += name + "_sum" + l + " " + num(sum_) + "\n";
  out += name + "_count" + l + " " + std::to_string(count_) + "\n";
}

Metrics::Metrics(std::string model_name)
    : model_name_(std::move(model_name)),
      ttft_(latency_buckets()),
      itl_(latency_buckets()),
      e2e_(latency_buckets()),
      queue_(latency_buckets()),
      prefill_(latency_buckets()),
      decode_(latency_buckets()) {
  // Every documented reason shows up as 0 from the start so dashboards see the series.
  for (const char* r : {"stop", "length", "tool_calls", "abort", "error"}) finished_[r] = 0;
  for (const char* r : {"queue_full", "loading", "draining"}) refused_[r] = 0;
  for (const char* p : {"queued", "prefill", "decode"}) cancelled_[p] = 0;
}

void Metrics::set_model_name(std::string name) {
  std::lock_guard lk(mu_);
  model_name_ = std::move(name);
}

void Metrics::set_engine_info(const std::map<std::string, std::string>& labels) {
  std::lock_guard lk(mu_);
  engine_info_ = labels;
}

void Metrics::http_response(int status) {
  std::lock_guard lk(mu_);
  ++http_[status];
}

void Metrics::refused(const std::string& reason) {
  std::lock_guard lk(mu_);
  ++refused_[reason];
}

void Metrics::finished(const std::string& reason) {
  if (reason != "abort" && reason != "error") return;  // request_finished() counts the rest
  std::lock_guard lk(mu_);
  ++finished_[reason];
}

void Metrics::request_finished(const std::string& reason) {
  std::lock_guard lk(mu_);
  ++finished_[reason];
}

void Metrics::cancelled(const char* phase) {
  std::lock_guard lk(mu_);
  ++cancelled_[phase];
}

void Metrics::tokens(int64_t prompt, int64_t generated) {
  std::lock_guard lk(mu_);
  prompt_tokens_ += uint64_t(prompt);
  generation_tokens_ += uint64_t(generated);
}

void Metrics::prefix_cache(int64_t prompt, int64_t reused) {
  std::lock_guard lk(mu_);
  prefix_queries_ += uint64_t(prompt);
  prefix_hits_ += uint64_t(reused);
  ++prefix_requests_;
  if (reused > 0) ++prefix_hit_requests_;
}

void Metrics::time_to_first_token(double s) {
  std::lock_guard lk(mu_);
  ttft_.observe(s);
}

void Metrics::inter_token_latency(double s) {
  std::lock_guard lk(mu_);
  itl_.observe(s);
}

void Metrics::request_latencies(double e2e, double queue, double prefill, double decode) {
  std::lock_guard lk(mu_);
  e2e_.observe(e2e);
  queue_.observe(queue);
  prefill_.observe(prefill);
  decode_.observe(decode);
}

void Metrics::set_drafting(const std::vector<std::string>& drafters, const std::vector<double>& verify_costs) {
  std::lock_guard lk(mu_);
  spec_ = DraftMetrics{};
  for (const auto& n : drafters) spec_.drafters.push_back({n});
  verify_costs_ = verify_costs;
}

void Metrics::set_verify_costs(const std::vector<double>& verify_costs) {
  std::lock_guard lk(mu_);
  verify_costs_ = verify_costs;
}

void Metrics::drafted(const DraftMetrics& request) {
  std::lock_guard lk(mu_);
  spec_.add(request);
  ++spec_requests_;
}

// Speculative decoding with vLLM's names (vllm/v1/spec_decode/metrics.py): positions are 0-based
// as there; `k` is the number of drafts a step verified, k = 0 (a plain step) under drafter "none".
void Metrics::render_spec(std::string& o, const std::string& m) const {
  auto line = [&](const std::string& name, const std::string& labels, double v) {
    o += name + "{" + m + labels + "} " + num(v) + "\n";
  };
  auto drafter = [](const std::string& n) { return ",drafter=\"" + escape(n) + "\""; };
  const auto& ds = spec_.drafters;
  auto per_drafter = [&](const char* name, const char* help, auto value) {
    head(o, name, "counter", help);
    if (ds.empty()) line(name, drafter("none"), 0);
    for (const auto& d : ds) line(name, drafter(d.name), double(value(d)));
  };
  per_drafter("tandem:spec_decode_num_drafts_total", "Verify steps that checked this drafter's chain.",
              [](const DraftMetrics::PerDrafter& d) { return d.drafts; });
  per_drafter("tandem:spec_chain_extensions_total",
              "Verify steps whose chain (another drafter's) this drafter's agreeing proposal extended.",
              [](const DraftMetrics::PerDrafter& d) { return d.extensions; });
  per_drafter("tandem:spec_decode_num_draft_tokens_total", "Draft tokens verified.",
              [](const DraftMetrics::PerDrafter& d) { return d.drafted_tokens; });
  per_drafter("tandem:spec_decode_num_accepted_tokens_total", "Draft tokens accepted.",
              [](const DraftMetrics::PerDrafter& d) { return d.accepted_tokens; });
  auto per_pos = [&](const char* name, const char* help, bool accepted) {
    head(o, name, "counter", help);
    for (const auto& d : ds) {
      const auto& v = accepted ? d.accepted_at : d.tried_at;
      for (size_t j = 0; j < v.size(); ++j) line(name, drafter(d.name) + ",position=\"" + std::to_string(j) + "\"", double(v[j]));
    }
  };
  per_pos("tandem:spec_decode_num_accepted_tokens_per_pos_total", "Draft tokens accepted, by position in the chain (0-based).", true);
  // Reached: the drafts before it were all accepted, so its own verdict was taken (p_j = accepted / reached).
  per_pos("tandem:spec_decode_num_reached_tokens_per_pos_total",
          "Draft tokens whose verdict was taken (every earlier draft accepted), by position (0-based).", false);
  // Every proposal, verified or only retro-scored, against the committed text: a drafter that
  // StairCut seldom picks still shows how often it would have been right. Positions are 1-based here,
  // as in `tandem bench` and the trace (alpha_j = accepted / reached).
  auto scored = [&](const char* name, const char* help, std::vector<int64_t> DraftMetrics::PerDrafter::*v) {
    head(o, name, "counter", help);
    for (const auto& d : ds)
      for (size_t j = 0; j < (d.*v).size(); ++j)
        line(name, drafter(d.name) + ",position=\"" + std::to_string(j + 1) + "\"", double((d.*v)[j]));
  };
  scored("tandem:draft_proposed_total", "Tokens proposed at this position (1-based), verified or not.",
         &DraftMetrics::PerDrafter::proposed_at);
  scored("tandem:draft_reached_total",
         "Proposed tokens judged against the committed text (every earlier one matched), by position (1-based).",
         &DraftMetrics::PerDrafter::reached_at);
  scored("tandem:draft_accepted_total", "Judged tokens equal to the committed token, by position (1-based).",
         &DraftMetrics::PerDrafter::matched_at);

  head(o, "tandem:spec_decode_num_requests_total", "counter", "Requests decoded with drafting.");
  line("tandem:spec_decode_num_requests_total", "", double(spec_requests_));
  head(o, "tandem:spec_decode_num_steps_total", "counter", "Verify passes of drafted requests after their first token.");
  line("tandem:spec_decode_num_steps_total", "", double(spec_.steps));
  head(o, "tandem:spec_plain_steps_total", "counter", "Steps of drafted requests that verified no draft (StairCut chose k = 0).");
  line("tandem:spec_plain_steps_total", "", double(spec_.plain_steps));
  head(o, "tandem:spec_chosen_k_total", "counter", "Steps by the number of drafts verified (k); sums to the steps.");
  line("tandem:spec_chosen_k_total", drafter("none") + ",k=\"0\"", double(spec_.plain_steps));
  for (const auto& d : ds)
    for (size_t k = 1; k < d.k_histogram.size(); ++k)
      line("tandem:spec_chosen_k_total", drafter(d.name) + ",k=\"" + std::to_string(k) + "\"", double(d.k_histogram[k]));

  head(o, "tandem:spec_verify_seconds", "gauge", "StairCut's verify cost T_v(m) for m rows (measured at start-up, then online).");
  for (size_t r = 0; r < verify_costs_.size(); ++r)
    line("tandem:spec_verify_seconds", ",rows=\"" + std::to_string(r + 1) + "\"", verify_costs_[r]);
  head(o, "tandem:spec_draft_seconds", "gauge", "Mean host time of one proposal, by drafter.");
  for (const auto& d : ds) line("tandem:spec_draft_seconds", drafter(d.name), d.proposals ? d.propose_seconds / double(d.proposals) : 0.0);
}

std::string Metrics::render(const EngineGauges& g) const {
  std::lock_guard lk(mu_);
  const std::string m = "model_name=\"" + escape(model_name_) + "\"";
  std::string o;
  auto gauge = [&](const std::string& name, const char* help, double v) {
    head(o, name, "gauge", help);
    o += name + "{" + m + "} " + num(v) + "\n";
  };
  auto counter = [&](const std::string& name, const char* help, uint64_t v) {
    head(o, name, "counter", help);
    o += name + "{" + m + "} " + std::to_string(v) + "\n";
  };
  auto int_gauge = [&](const std::string& name, const char* help, int64_t v) {
    head(o, name, "gauge", help);
    o += name + "{" + m + "} " + std::to_string(v) + "\n";
  };
  auto labelled = [&](const std::string& name, const char* help, const char* key,
                      const std::map<std::string, uint64_t>& values) {
    head(o, name, "counter", help);
    for (const auto& [k, v] : values)
      o += name + "{" + m + "," + key + "=\"" + escape(k) + "\"} " + std::to_string(v) + "\n";
  };

  gauge("tandem:num_requests_running", "Requests holding a slot.", g.running);
  gauge("tandem:num_requests_waiting", "Requests queued for a slot.", g.waiting);
  gauge("tandem:num_slots", "Configured slots.", g.slots);
  counter("tandem:prompt_tokens_total", "Prompt tokens prefilled.", prompt_tokens_);
  counter("tandem:generation_tokens_total", "Tokens generated.", generation_tokens_);
  // vLLM's pair counts tokens (queried, restored); tandem adds requests and what the cache holds.
  counter("tandem:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.", prefix_queries_);
  counter("tandem:prefix_cache_hits_total", "Prompt tokens restored from prefix checkpoints (not prefilled).",
          prefix_hits_);
  counter("tandem:prefix_cache_requests_total", "Requests that looked up the prefix cache.", prefix_requests_);
  counter("tandem:prefix_cache_hit_requests_total", "Requests that resumed from a prefix checkpoint.",
          prefix_hit_requests_);
  int_gauge("tandem:prefix_cache_bytes", "Bytes held by prefix checkpoints.", g.prefix_cache_bytes);
  int_gauge("tandem:prefix_cache_entries", "Prefix checkpoints held.", g.prefix_cache_entries);
  int_gauge("tandem:sequence_bytes", "Bytes held by the busy slots' sequences (KV and Mamba state).", g.sequence_bytes);
  labelled("tandem:request_success_total", "Finished generation requests by finish reason.", "finished_reason",
           finished_);
  labelled("tandem:requests_cancelled_total",
           "Requests cancelled (client gone or server stopping) by where they were: queued, prefill, decode.", "phase",
           cancelled_);
  labelled("tandem:requests_refused_total", "Requests refused before they were queued.", "reason", refused_);

  head(o, "tandem:http_requests_total", "counter", "HTTP responses by status code.");
  for (const auto& [status, v] : http_)
    o += "tandem:http_requests_total{" + m + ",status=\"" + std::to_string(status) + "\"} " + std::to_string(v) + "\n";

  auto hist = [&](const std::string& name, const char* help, const Histogram& h) {
    head(o, name, "histogram", help);
    h.render(o, name, m);
  };
  hist("tandem:time_to_first_token_seconds", "Time from arrival to the first generated token.", ttft_);
  hist("tandem:inter_token_latency_seconds", "Time between consecutive generated tokens.", itl_);
  hist("tandem:e2e_request_latency_seconds", "Time from arrival to the last token.", e2e_);
  hist("tandem:request_queue_time_seconds", "Time spent waiting for a slot.", queue_);
  hist("tandem:request_prefill_time_seconds", "Time spent prefilling the prompt.", prefill_);
  hist("tandem:request_decode_time_seconds", "Time from the first to the last generated token.", decode_);

  render_spec(o, m);

  head(o, "tandem:engine_info", "gauge", "Build and model facts; the value is always 1.");
  o += "tandem:engine_info{" + m;
  for (const auto& [k, v] : engine_info_) o += "," + k + "=\"" + escape(v) + "\"";
  o += "} 1\n";
  return o;
}

}  // namespace tandem::server
