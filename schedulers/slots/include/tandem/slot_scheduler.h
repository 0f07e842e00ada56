// The queue in front of N slots and the one engine thread that drives the Model. Each step admits
// queued jobs into free slots, runs the decoding slots' passes (one decode token, or with drafters a
// verify pass of 1..k+1 tokens) in one Model::forward_batch of at most batch_rows rows (more rows:
// several), then prefill chunks of the prefilling slots, oldest request first, as many whole chunks
// as the step's token budget (step_tokens) leaves after the decode rows and at least one, so the
// decoding slots keep streaming while a long prompt is read. The n choices of one request read
// their prompt once: the first prefills it, the others start from a copy of its state. A slot's
// tokens are those of its request run alone.
// Owner: the SlotScheduler owns its thread, its slots and their Sequences, and borrows the Model, the
// codec and the metrics, which must outlive it. A Job is shared (std::shared_ptr) by the HTTP side
// and the engine. Thread: submit/close/cancel_all/counts/slots from any thread; Job::take and
// Job::cancel from any thread; Job::wake is called on the engine thread. Sync: one scheduler mutex
// for the queue and the slot snapshots; one mutex per job for its output.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tandem/drafting.h"
#include "tandem/model.h"
#include "tandem/prefix_cache.h"
#include "tandem/request.h"
#include "tandem/sampler.h"
#include "tandem/text/chat_output.h"
#include "tandem/text/output_rules.h"

namespace tandem {

class PluginRegistry;
struct SharedPrompt;
class TextCodec;
class TextStream;
struct OutputVocab;

using Clock = std::chrono::steady_clock;

// What a job produced since the last take(), and how it ended once done.
struct JobOutput {
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<TokenLogprobs> logprobs;         // Job::logprobs ≥ 0: one per token of `tokens`
  std::vector<TokenLogprobs> prompt_logprobs;  // Job::prompt_logprobs: prompt tokens 1, 2, … as prefilled
  bool done = false;
  std::string finish_reason;       // stop, length, abort
  std::optional<RequestError> error;  // the request failed after it was queued
  Usage usage;
  Timings timings;
};

class Job {
 public:
  enum class Cancel { none, client_gone, server };

  // Inputs, fixed before Scheduler::submit().
  std::string request_id;
  std::vector<int32_t> prompt;
  int max_tokens = 1;               // 0: only the prompt runs (prompt_logprobs), finish_reason length
  RequestParams params;
  int logprobs = -1;                // each generated token's logprob and this many top alternatives; -1 = none
  bool prompt_logprobs = false;     // the same (Job::logprobs alternatives) for the prompt's tokens 1, 2, …
  bool want_text = false;          // decode text through the codec (needs a tokenizer)
  // Chat only (with want_text): what the engine enforces on the output (decode_control.h).
  bool chat = false;
  bool starts_in_reasoning = false;
  std::vector<ToolSpec> tools;
  OutputRules rules;
  std::function<void()> wake;      // called on the engine thread when output is ready; must not block

  void cancel(Cancel why);
  Cancel cancelled() const { return cancel_.load(); }
  JobOutput take();

 private:
  friend class SlotScheduler;
  void emit(const std::string& text, int32_t token, const TokenLogprobs* logprobs);
  void emit_prompt(TokenLogprobs logprobs);
  void finish(JobOutput last);
  void notify() {
    if (wake) wake();
  }

  std::mutex mu_;
  JobOutput out_;
  std::atomic<Cancel> cancel_{Cancel::none};
  Clock::time_point arrived_ = Clock::now();
  // The n choices of one request (engine thread once queued): the first (leads_) reads the prompt
  // into it, the others start from there. Dropped once the job no longer needs it.
  std::shared_ptr<SharedPrompt> shared_;
  bool leads_ = false;
};

// kDefaultPrefillChunk (tokens per prefill pass, serve's and generate's default) is in generate.h.

// Bytes of prefix checkpoints `tandem serve` keeps by default (server.prefix_cache_bytes): at Bolt's
// size a checkpoint at position p holds 0.17 GB of Mamba state and p·16 KB of K/V, so 2 GiB keeps the
// newest two or three checkpoints of a 32,768-token prompt, or many of shorter ones (docs/decisions.md).
constexpr int64_t kDefaultPrefixCacheBytes = int64_t(2) << 30;

// Gauges that the scheduler owns; read at render time.
struct EngineGauges {
  int running = 0;
  int waiting = 0;
  int slots = 0;
  int64_t prefix_cache_bytes = 0;    // held by prefix checkpoints
  int64_t sequence_bytes = 0;        // held by the busy slots' Sequences (0 when every slot is idle)
  int64_t prefix_cache_entries = 0;
};

// What the scheduler reports as requests run, on the engine thread (the server's Prometheus metrics
// implement it). Every method is optional; implementations must not block.
class SchedulerEvents {
 public:
  virtual ~SchedulerEvents() = default;
  virtual void refused(const std::string& reason) { (void)reason; }    // queue_timeout
  virtual void finished(const std::string& reason) { (void)reason; }   // stop, length, abort, error
  // A cancelled job (client gone or server stopping) ended in `phase`: queued, prefill or decode.
  virtual void cancelled(const char* phase) { (void)phase; }
  virtual void tokens(int64_t prompt, int64_t generated) { (void)prompt, (void)generated; }
  // With the prefix cache on, once per request that reached the model: its prompt tokens and how
  // many of them a checkpoint restored (0 = a miss).
  virtual void prefix_cache(int64_t prompt, int64_t reused) { (void)prompt, (void)reused; }
  virtual void time_to_first_token(double s) { (void)s; }
  virtual void inter_token_latency(double s) { (void)s; }
  virtual void request_latencies(double e2e, double queue, double prefill, double decode) {
    (void)e2e, (void)queue, (void)prefill, (void)decode;
  }
  // Speculative decoding: the drafters in use and StairCut's measured T_v(m) (seconds, [m − 1]).
  virtual void set_drafting(const std::vector<std::string>& drafters, const std::vector<double>& verify_costs) {
    (void)drafters, (void)verify_costs;
  }
  virtual void set_verify_costs(const std::vector<double>& verify_costs) { (void)verify_costs; }
  virtual void drafted(const DraftMetrics& request) { (void)request; }  // one finished drafted request
};

struct SchedulerOptions {
  int slots = 1;
  int max_queue = 8;
  int64_t context = 4096;          // tokens per slot
  int prefill_chunk = kDefaultPrefillChunk;  // tokens per prefill pass (the chunk grid; results depend on it)
  // Tokens one engine step runs (profile `server.step_tokens`): the decode rows, then whole prefill
  // chunks of the oldest prefilling requests while they fit, and at least one chunk per step so no
  // prompt starves. 0 = prefill_chunk (one chunk per step); otherwise at least prefill_chunk.
  int step_tokens = 0;
  // Prefix checkpoints shared by the slots (prefix_cache.h); bytes 0 = off.
  PrefixCacheOptions prefix_cache{kDefaultPrefixCacheBytes, 0};
  double queue_timeout_s = 0;      // 0 = wait forever
  // Drafters (profile `draft:`, `tandem serve --draft`); none = plain decoding. Each slot gets its
  // own Drafting (StairCut keeps per-request state); the verify costs are measured once.
  DraftOptions draft;
  // Rows of the decoding slots' passes that one forward takes (profile `batch_rows`; 1 … 16,
  // Model::batch_max_rows): slots whose passes do not fit run in further forwards of the step.
  int batch_rows = Model::batch_max_rows;
  // Tests: called on the engine thread after every prefill step (a chunk, or a choice that starts
  // from its request's shared prompt) and every batched decode forward.
  std::function<void()> after_step;
};

struct SlotInfo {
  int id = 0;
  const char* state = "idle";      // idle, prefill, decode
  int64_t n_past = 0;
  std::string request_id;
  std::string drafter;             // the slot's drafters, comma-separated; "" = plain
  int64_t bytes = 0;               // held by the slot's Sequence
};

class SlotScheduler {
 public:
  enum class Admission { accepted, queue_full, draining };

  // `registry` provides the drafters named in options.draft (needed only when there are some).
  SlotScheduler(Model& model, std::shared_ptr<const TextCodec> codec, SchedulerEvents& events, SchedulerOptions options,
                PluginRegistry* registry = nullptr);
  ~SlotScheduler();  // cancels every job and joins the engine thread
  SlotScheduler(const SlotScheduler&) = delete;
  SlotScheduler& operator=(const SlotScheduler&) = delete;

  Admission submit(std::shared_ptr<Job> job);
  // All of `jobs` or none (the n choices of one request): they queue in order.
  Admission submit(std::vector<std::shared_ptr<Job>> jobs);
  void close();       // refuse new jobs (draining); running and queued ones go on
  void cancel_all();  // end every queued and running job now (after the drain grace period)
  EngineGauges gauges() const;
  std::vector<SlotInfo> slots() const;
  const SchedulerOptions& options() const { return options_; }

 private:
  struct Slot;
  struct Turn;
  void run();
  void admit_locked(Clock::time_point now);
  bool ready(Slot& s);  // false when the slot's job ended (cancelled, or its request failed)
  void bind(Turn& t);   // the turn's step hooks
  void failed(Slot& s, const std::exception& e);
  void ended(Turn& t);  // after the slot's step: finish the job, or publish its progress
  void step(Slot& s);
  int64_t decode(const std::vector<Slot*>& slots);  // the rows run
  void prefill(std::vector<Slot*> slots, int64_t budget);
  int64_t next_pass(const Slot& s) const;  // prompt tokens s's next step reads (0: none)
  void release(Job& j);                     // j no longer needs its request's shared prompt
  void process(Slot& s, float* logits);
  const char* on_token(Slot& s, int32_t token, bool forced);  // the finish reason, or null to go on
  void finish(Slot& s, const std::string& reason, std::optional<RequestError> error = std::nullopt);
  void publish(const Slot& s);

  Model& model_;
  std::shared_ptr<const TextCodec> codec_;
  SchedulerEvents& events_;
  SchedulerOptions options_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::vector<SlotInfo> info_;     // snapshots of the slots, under mu_
  std::vector<std::shared_ptr<Job>> active_;  // the job of each slot (null when idle), under mu_
  int running_ = 0;                // under mu_
  bool closed_ = false, stop_ = false;

  std::vector<int32_t> end_ids_;               // model EOS ids and the tokenizer's end-of-generation ids
  std::unique_ptr<OutputVocab> output_vocab_;  // for chat constraints; null without a tokenizer
  std::string reasoning_close_;                // what a reasoning budget injects to close thinking
  std::unique_ptr<PrefixCache> prefix_cache_;  // null when off; engine thread (its counters: any)
  std::vector<std::unique_ptr<Slot>> slots_;  // engine thread only
  size_t next_ = 0;                            // round-robin start
  uint64_t admitted_ = 0;                      // admissions so far: each slot's job's age
  std::thread thread_;
};

}  // namespace tandem
