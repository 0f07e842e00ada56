// The engine thread: admission from the FIFO queue, then per step the decoding slots' passes in one
// Model::forward_batch (generation.h: a plain step or a drafted verify pass) and prefill chunks of
// the oldest prefilling requests under the step's token budget, sampling with the
// request's penalties and biases, and the end of each job (stop, length, abort, error). The step
// hooks are the same per-token rules plain or drafted (forced tokens, penalties, bias, min_tokens,
// grammar masks), applied to each verified row in order: a draft survives only if it is the token
// the plain step would have picked, so constrained and budgeted requests draft too, with the plain
// output (greedy: the same tokens).
#include "tandem/slot_scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include <spdlog/spdlog.h>

#include "tandem/error.h"
#include "tandem/generation.h"
#include "tandem/registry.h"

#include "tandem/text/decode_control.h"
#include "tandem/text/text_codec.h"
#include "tandem/text/text_stream.h"

namespace tandem {

namespace {
double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }
RequestError shutting_down() {
  return RequestError{RequestError::Kind::shutting_down, "draining", "", "the server is shutting down"};
}
}  // namespace

void Job::cancel(Cancel why) {
  Cancel none = Cancel::none;
  cancel_.compare_exchange_strong(none, why);
}

JobOutput Job::take() {
  std::lock_guard lk(mu_);
  JobOutput o = std::move(out_);
  out_ = JobOutput{};
  out_.done = o.done;  // done stays visible to later takes
  return o;
}

void Job::emit(const std::string& text, int32_t token, const TokenLogprobs* logprobs) {
  {
    std::lock_guard lk(mu_);
    out_.text += text;
    out_.tokens.push_back(token);
    if (logprobs) out_.logprobs.push_back(*logprobs);
  }
  notify();
}

void Job::emit_prompt(TokenLogprobs logprobs) {
  std::lock_guard lk(mu_);
  out_.prompt_logprobs.push_back(std::move(logprobs));
}

void Job::finish(JobOutput last) {
  {
    std::lock_guard lk(mu_);
    out_.text += last.text;
    out_.done = true;
    out_.finish_reason = last.finish_reason;
    out_.error = std::move(last.error);
    out_.usage = last.usage;
    out_.timings = last.timings;
  }
  notify();
}

// The prompt of a request's n choices, read once (engine thread only): the leader's Generation keeps
// it, the other choices start from it. Freed when the last job holding it lets go.
struct SharedPrompt {
  PromptState state;       // state.snapshot is set once the leader read the prompt
  bool abandoned = false;  // the leader ended first: the others read the prompt themselves
};

struct SlotScheduler::Slot {
  int id = 0;
  uint64_t order = 0;  // admission order of the job: the oldest prefills first
  std::shared_ptr<Job> job;
  std::unique_ptr<Generation> gen;         // the running job's prefill and decoding
  std::unique_ptr<TextStream> text;
  std::unique_ptr<DecodeControl> control;  // chat jobs: reasoning budget and output constraints
  std::unique_ptr<Drafting> drafting;      // null without drafters
  int generated = 0;
  std::unordered_map<int32_t, int> counts;  // generated token → times, for the penalties
  std::vector<bool> in_prompt;              // for repetition_penalty only
  std::vector<float> row;                   // logprobs: the model's logits of the position being decoded
  Clock::time_point started, first_token, last_token;
};

SlotScheduler::SlotScheduler(Model& model, std::shared_ptr<const TextCodec> codec, SchedulerEvents& events,
                             SchedulerOptions options, PluginRegistry* registry)
    : model_(model), codec_(std::move(codec)), events_(events), options_(options) {
  check(options_.slots >= 1, "--slots must be at least 1, found ", options_.slots);
  check(options_.prefill_chunk >= 1, "--prefill-chunk must be at least 1, found ", options_.prefill_chunk);
  check(options_.step_tokens == 0 || options_.step_tokens >= options_.prefill_chunk,
        "step_tokens must be 0 (one prefill chunk a step) or at least the prefill chunk (", options_.prefill_chunk,
        "), found ", options_.step_tokens);
  check(options_.batch_rows >= 1 && options_.batch_rows <= Model::batch_max_rows, "batch_rows must be in [1, ",
        Model::batch_max_rows, "], found ", options_.batch_rows);
  if (options_.prefix_cache.bytes != 0)
    prefix_cache_ = std::make_unique<PrefixCache>(model_, options_.prefix_cache, options_.prefill_chunk);
  end_ids_.assign(model_.desc().eos_ids.begin(), model_.desc().eos_ids.end());
  for (int32_t id : codec_->end_ids())
    if (std::find(end_ids_.begin(), end_ids_.end(), id) == end_ids_.end()) end_ids_.push_back(id);
  if (codec_->missing_tokenizer().empty()) {
    output_vocab_ = std::make_unique<OutputVocab>(*codec_, model_.desc().vocab, end_ids_);
    reasoning_close_ = codec_->reasoning_close();
  }
  std::string drafter;
  for (const auto& n : options_.draft.drafters) drafter += (drafter.empty() ? "" : ",") + n;
  check(drafter.empty() || registry, "drafting: drafters '", drafter, "' were asked for but no plugin registry was given");
  DraftOptions draft = options_.draft;
  for (int i = 0; i < options_.slots; ++i) {
    slots_.push_back(std::make_unique<Slot>());
    Slot& s = *slots_.back();
    s.id = i;
    if (!drafter.empty()) {
      s.drafting = std::make_unique<Drafting>(model_, *registry, draft);
      // The first slot measured T_v(m) on this machine; the others start from its table.
      if (draft.verify_costs.empty()) draft.verify_costs = s.drafting->staircut().costs().table();
    }
    info_.push_back(SlotInfo{i, "idle", 0, "", drafter});
    active_.push_back(nullptr);
  }
  if (!drafter.empty()) events_.set_drafting(options_.draft.drafters, draft.verify_costs);
  thread_ = std::thread([this] { run(); });
}

SlotScheduler::~SlotScheduler() {
  {
    std::lock_guard lk(mu_);
    stop_ = closed_ = true;
  }
  cancel_all();
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

SlotScheduler::Admission SlotScheduler::submit(std::shared_ptr<Job> job) {
  return submit(std::vector<std::shared_ptr<Job>>{std::move(job)});
}

SlotScheduler::Admission SlotScheduler::submit(std::vector<std::shared_ptr<Job>> jobs) {
  {
    std::lock_guard lk(mu_);
    if (closed_) return Admission::draining;
    // Capacity is the slots plus the queue; a burst that free slots will take at once is not refused.
    if (int(queue_.size()) + running_ + int(jobs.size()) > int(slots_.size()) + options_.max_queue)
      return Admission::queue_full;
    // The choices of one request read their prompt once (not with echoed prompt logprobs: every
    // choice reports those rows, which only a prefill makes).
    bool share = jobs.size() > 1;
    for (const auto& j : jobs) share = share && j->prompt == jobs[0]->prompt && !j->prompt_logprobs;
    if (share) {
      auto sp = std::make_shared<SharedPrompt>();
      for (auto& j : jobs) j->shared_ = sp;
      jobs[0]->leads_ = true;
    }
    for (auto& j : jobs) queue_.push_back(std::move(j));
  }
  cv_.notify_all();
  return Admission::accepted;
}

void SlotScheduler::close() {
  std::lock_guard lk(mu_);
  closed_ = true;
}

void SlotScheduler::cancel_all() {
  {
    std::lock_guard lk(mu_);
    for (auto& j : queue_) j->cancel(Job::Cancel::server);
    for (auto& j : active_)
      if (j) j->cancel(Job::Cancel::server);
  }
  cv_.notify_all();
}

EngineGauges SlotScheduler::gauges() const {
  std::lock_guard lk(mu_);
  EngineGauges g{running_, int(queue_.size()), int(slots_.size())};
  for (const SlotInfo& i : info_) g.sequence_bytes += i.bytes;
  if (prefix_cache_) g.prefix_cache_bytes = prefix_cache_->bytes(), g.prefix_cache_entries = prefix_cache_->entries();
  return g;
}

std::vector<SlotInfo> SlotScheduler::slots() const {
  std::lock_guard lk(mu_);
  return info_;
}

void SlotScheduler::run() {
  for (;;) {
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !queue_.empty() || running_ > 0; });
      if (stop_ && queue_.empty() && running_ == 0) return;
      admit_locked(Clock::now());
    }
    // One step: the decoding slots' passes batched (starting one further each round, so no slot
    // always goes first), then prefill chunks in what the budget leaves.
    size_t n = slots_.size();
    std::vector<Slot*> decoding, prefilling;
    for (size_t k = 0; k < n; ++k) {
      Slot& s = *slots_[(next_ + k) % n];
      if (!s.job) continue;
      (s.gen && s.gen->decoding() ? decoding : prefilling).push_back(&s);
    }
    const int64_t rows = decoding.empty() ? 0 : decode(decoding);
    const int budget = options_.step_tokens ? options_.step_tokens : options_.prefill_chunk;
    if (!prefilling.empty()) prefill(std::move(prefilling), budget - rows);
    next_ = (next_ + 1) % n;
  }
}

void SlotScheduler::admit_locked(Clock::time_point now) {
  // Queued jobs whose client left, or that waited too long, end before they take a slot.
  for (auto it = queue_.begin(); it != queue_.end();) {
    Job& j = **it;
    std::optional<RequestError> err;
    if (j.cancelled() == Job::Cancel::server) {
      err = shutting_down();
    } else if (j.cancelled() == Job::Cancel::none && options_.queue_timeout_s > 0 &&
               seconds(j.arrived_, now) > options_.queue_timeout_s) {
      err = RequestError{RequestError::Kind::queue_timeout, "queue_timeout", "",
                         "waited longer than --queue-timeout for a slot"};
    } else if (j.cancelled() == Job::Cancel::none) {
      ++it;
      continue;
    }
    if (err && err->kind == RequestError::Kind::queue_timeout) {
      events_.refused("queue_timeout");
    } else {
      events_.cancelled("queued");
      events_.finished("abort");
    }
    JobOutput o;
    o.finish_reason = "abort";
    o.error = std::move(err);
    release(j);
    (*it)->finish(std::move(o));
    it = queue_.erase(it);
  }
  for (auto& sp : slots_) {
    if (queue_.empty()) break;
    Slot& s = *sp;
    if (s.job) continue;
    s.job = std::move(queue_.front());
    queue_.pop_front();
    const RequestParams& p = s.job->params;
    s.gen.reset();  // made by the slot's first step, where a bad request fails as a request
    s.text = s.job->want_text ? std::make_unique<TextStream>(*codec_, p.stop) : nullptr;
    s.control = s.job->chat && s.text && output_vocab_
                    ? std::make_unique<DecodeControl>(*output_vocab_, s.job->rules, s.job->tools,
                                                      s.job->starts_in_reasoning, reasoning_close_)
                    : nullptr;
    s.generated = 0;
    s.counts.clear();
    s.in_prompt.clear();
    if (p.repetition_penalty != 1.0f) {
      s.in_prompt.assign(size_t(model_.desc().vocab), false);
      for (int32_t t : s.job->prompt) s.in_prompt[size_t(t)] = true;
    }
    s.started = now;
    s.order = admitted_++;
    active_[size_t(s.id)] = s.job;
    info_[size_t(s.id)] = SlotInfo{s.id, "prefill", 0, s.job->request_id, info_[size_t(s.id)].drafter};
    ++running_;
  }
}

void SlotScheduler::publish(const Slot& s) {
  std::lock_guard lk(mu_);
  SlotInfo& i = info_[size_t(s.id)];
  i.state = !s.gen || s.gen->prefilling() ? "prefill" : "decode";
  i.n_past = s.gen ? s.gen->position() : 0;
  i.bytes = s.gen ? int64_t(s.gen->sequence_bytes()) : 0;
}

// One slot's step in flight: its hooks, what they saw, and its pass when it joins a batch.
struct SlotScheduler::Turn {
  Slot* slot = nullptr;
  const char* reason = nullptr;  // the finish reason once emit() said to stop
  bool forced = false;
  StepHooks hooks;
  Model::BatchPass pass;
  bool ok = true;  // false once the slot failed (it is finished already)
};

bool SlotScheduler::ready(Slot& s) {
  Job& j = *s.job;
  // Checked before every pass, so a cancelled job costs at most the pass that was running when the
  // flag was set: one prefill chunk or one decode step.
  if (j.cancelled() != Job::Cancel::none) {
    events_.cancelled(!s.gen || s.gen->prefilling() ? "prefill" : "decode");
    finish(s, "abort", j.cancelled() == Job::Cancel::server ? std::optional<RequestError>(shutting_down())
                                                             : std::nullopt);
    return false;
  }
  try {
    if (!s.gen) {
      s.gen = std::make_unique<Generation>(model_, s.drafting.get(), j.prompt, options_.context, options_.prefill_chunk,
                                           j.params.sampling, prefix_cache_.get());
      if (j.shared_ && j.leads_) {
        s.gen->keep_prompt(&j.shared_->state);
      } else if (j.shared_) {
        // prefill() steps a choice only once its leader read the prompt or gave up.
        if (j.shared_->state.snapshot) s.gen->start_from(j.shared_->state);  // false: it prefills itself
        release(j);
      }
      publish(s);  // its memory shows from the start
    }
  } catch (const std::exception& e) {
    failed(s, e);
    return false;
  }
  return true;
}

// The request's rules at every position, plain or drafted: the reasoning budget's close goes in at
// its real positions one token a step, then penalties, bias, min_tokens and grammar masks.
void SlotScheduler::bind(Turn& t) {
  Slot& s = *t.slot;
  t.hooks.forced = [&t, &s](int32_t& tok) { return t.forced = s.control && s.control->forced(tok); };
  t.hooks.process = [this, &s](float* row) { process(s, row); };
  t.hooks.emit = [this, &t, &s](int32_t tok) { return !(t.reason = on_token(s, tok, t.forced)); };
  Job& j = *s.job;
  const int64_t vocab = model_.desc().vocab;
  if (j.logprobs >= 0) t.hooks.observe = [&s, vocab](const float* row) { s.row.assign(row, row + vocab); };
  if (j.prompt_logprobs)
    t.hooks.prompt_row = [&j, vocab](size_t i, const float* row) {
      j.emit_prompt(token_logprobs(row, vocab, j.prompt[i + 1], std::max(j.logprobs, 0)));
    };
}

void SlotScheduler::failed(Slot& s, const std::exception& e) {
  spdlog::error("request {}: {}", s.job->request_id, e.what());
  finish(s, "error", RequestError{RequestError::Kind::internal, "internal_error", "",
                                  std::string("generation failed: ") + e.what()});
}

void SlotScheduler::ended(Turn& t) {
  // The job ends only after the pass: the Sequence must outlive the commit that closes it.
  if (t.reason) finish(*t.slot, t.reason);
  else if (t.slot->gen->prefilling()) publish(*t.slot);
  else release(*t.slot->job);  // a leader's prompt is in: the others hold it now
}

void SlotScheduler::release(Job& j) {
  if (!j.shared_) return;
  if (j.leads_ && !j.shared_->state.snapshot) j.shared_->abandoned = true;
  j.shared_.reset();
}

// Prompt tokens the slot's next step reads: a chunk of what is left, 0 for a choice that starts
// from its request's shared prompt (an upper bound: a prefix checkpoint may restore some).
int64_t SlotScheduler::next_pass(const Slot& s) const {
  const Job& j = *s.job;
  if (!s.gen && j.shared_ && !j.leads_ && j.shared_->state.snapshot) return 0;
  const size_t done = s.gen ? s.gen->prefilled() : 0;
  return int64_t(std::min(size_t(options_.prefill_chunk), j.prompt.size() - done));
}

// Whole chunks of the oldest prefilling requests first while they fit in `budget`, and at least one
// chunk per step, so a prompt never starves behind the decode rows. Chunks sit on the prefill_chunk
// grid whatever the budget (the chunked scan's results depend on where passes split), so a slot's
// prefill is that of its request run alone. Slots that do not run this step still end at once when
// cancelled.
void SlotScheduler::prefill(std::vector<Slot*> slots, int64_t budget) {
  std::sort(slots.begin(), slots.end(), [](const Slot* a, const Slot* b) { return a->order < b->order; });
  bool ran = false, full = false;
  for (Slot* s : slots) {
    const Job& j = *s->job;
    const bool waits = j.shared_ && !j.leads_ && !j.shared_->state.snapshot && !j.shared_->abandoned;
    while (s->job && !waits) {
      const int64_t n = next_pass(*s);
      if (n > 0 && (full = full || (ran && n > budget))) break;
      step(*s);
      if (options_.after_step) options_.after_step();
      ran = ran || n > 0;
      budget -= n;
      if (!s->job || !s->gen || !s->gen->prefilling()) break;
    }
    if (s->job && s->job->cancelled() != Job::Cancel::none && (!s->gen || s->gen->prefilling())) ready(*s);
  }
}

void SlotScheduler::step(Slot& s) {
  if (!ready(s)) return;
  Turn t;
  t.slot = &s;
  bind(t);
  try {
    // Only the prompt (max_tokens 0) ends with the prefill, before any token.
    if (!s.gen->step(s.job->max_tokens - s.generated, t.hooks) && !t.reason) t.reason = "length";
  } catch (const std::exception& e) {
    failed(s, e);
    return;
  }
  ended(t);
}

// The decoding slots' passes, in forwards of at most batch_rows rows (a slot's pass is never split):
// each slot plans its pass, one forward_batch runs the group, then each slot commits and emits.
int64_t SlotScheduler::decode(const std::vector<Slot*>& slots) {
  std::vector<std::unique_ptr<Turn>> turns;  // stable addresses: the hooks refer to them
  for (Slot* s : slots) {
    if (!ready(*s)) continue;
    auto t = std::make_unique<Turn>();
    t->slot = s;
    bind(*t);
    try {
      s->gen->plan(s->job->max_tokens - s->generated, t->pass);
    } catch (const std::exception& e) {
      failed(*s, e);
      continue;
    }
    turns.push_back(std::move(t));
  }
  int64_t total = 0;
  for (size_t first = 0; first < turns.size();) {
    size_t last = first;
    int64_t rows = 0;
    std::vector<Model::BatchPass> passes;
    while (last < turns.size() &&
           (passes.empty() || rows + int64_t(turns[last]->pass.tokens.size()) <= options_.batch_rows)) {
      rows += int64_t(turns[last]->pass.tokens.size());
      passes.push_back(turns[last++]->pass);
    }
    try {
      model_.forward_batch(passes);
    } catch (const std::exception& e) {
      for (size_t i = first; i < last; ++i) failed(*turns[i]->slot, e), turns[i]->ok = false;
    }
    int64_t row0 = 0;
    for (size_t i = first; i < last; ++i) {
      Turn& t = *turns[i];
      const int64_t tap_row0 = row0;
      row0 += int64_t(t.pass.tokens.size());
      if (!t.ok) continue;
      try {
        t.slot->gen->finish(t.hooks, tap_row0);
      } catch (const std::exception& e) {
        failed(*t.slot, e);
        continue;
      }
      ended(t);
    }
    if (options_.after_step) options_.after_step();
    total += rows;
    first = last;
  }
  return total;
}

void SlotScheduler::process(Slot& s, float* l) {
  const RequestParams& p = s.job->params;
  const int vocab = model_.desc().vocab;
  for (auto [id, bias] : p.logit_bias) l[id] += bias;
  if (p.repetition_penalty != 1.0f) {
    // vLLM's rule: every token seen in the prompt or the output, positive logits divided.
    for (int t = 0; t < vocab; ++t)
      if (s.in_prompt[size_t(t)] || s.counts.count(t)) l[t] = l[t] > 0 ? l[t] / p.repetition_penalty : l[t] * p.repetition_penalty;
  }
  if (p.presence_penalty != 0 || p.frequency_penalty != 0)
    for (auto [t, c] : s.counts) l[t] -= p.frequency_penalty * float(c) + p.presence_penalty;
  if (s.generated < p.min_tokens)
    for (int32_t e : end_ids_)
      if (e >= 0 && e < vocab) l[e] = -std::numeric_limits<float>::infinity();
  if (s.control) s.control->mask(l);
}

const char* SlotScheduler::on_token(Slot& s, int32_t tok, bool forced) {
  Job& j = *s.job;
  auto now = Clock::now();
  if (s.generated == 0) {
    s.first_token = now;
    events_.time_to_first_token(seconds(j.arrived_, now));
  } else {
    events_.inter_token_latency(seconds(s.last_token, now));
  }
  s.last_token = now;
  ++s.generated;
  ++s.counts[tok];
  bool at_eos = !j.params.ignore_eos && std::find(end_ids_.begin(), end_ids_.end(), tok) != end_ids_.end();
  // EOS is a generated token (usage counts it, `tokens` lists it, as tandem::generate does) but no text.
  std::string text = s.text && !at_eos ? s.text->push(tok) : std::string();
  std::optional<TokenLogprobs> lp;
  if (j.logprobs >= 0) lp = token_logprobs(s.row.data(), model_.desc().vocab, tok, j.logprobs);
  j.emit(text, tok, lp ? &*lp : nullptr);
  if (s.control) s.control->on_token(tok, forced);
  if (at_eos || (s.text && s.text->stopped()) || (s.control && s.control->done())) return "stop";
  if (s.generated >= j.max_tokens) return "length";
  publish(s);
  return nullptr;
}

void SlotScheduler::finish(Slot& s, const std::string& reason, std::optional<RequestError> error) {
  Job& j = *s.job;
  auto now = Clock::now();
  JobOutput o;
  o.finish_reason = reason;
  if (s.text && !error && reason != "abort" && !s.text->stopped()) o.text = s.text->flush();
  const int64_t prefilled = s.gen ? int64_t(s.gen->prefilled()) : 0;
  const int64_t restored = s.gen ? int64_t(s.gen->restored()) : 0;
  o.usage = {prefilled, int64_t(s.generated), s.control ? s.control->reasoning_tokens() : 0, restored};
  o.timings.prompt_n = prefilled - restored;
  o.timings.cache_n = restored;
  o.timings.predicted_n = s.generated;
  o.timings.steps = s.gen ? s.gen->steps() : 0;
  Clock::time_point prefill_end = s.generated ? s.first_token : now;
  o.timings.prompt_ms = seconds(s.started, prefill_end) * 1000.0;
  o.timings.predicted_ms = s.generated ? seconds(s.first_token, s.last_token) * 1000.0 : 0.0;
  o.error = std::move(error);

  events_.tokens(prefilled, s.generated);
  if (prefix_cache_ && s.gen && !s.gen->shared()) events_.prefix_cache(int64_t(j.prompt.size()), restored);
  events_.finished(reason);
  if (reason != "abort" && reason != "error")
    events_.request_latencies(seconds(j.arrived_, now), seconds(j.arrived_, s.started), seconds(s.started, prefill_end),
                               o.timings.predicted_ms / 1000.0);

  if (const DraftMetrics* dm = s.gen ? s.gen->draft_metrics() : nullptr) {
    o.timings.draft_tokens = dm->drafted_tokens;
    o.timings.accepted_tokens = dm->accepted_tokens;
    events_.drafted(*dm);
  }
  // A fresh Sequence per request (what outlives it is in the prefix cache), so the memory goes back
  // now. A drafted request's numbers join the slot's Drafting totals.
  s.gen.reset();
  release(j);
  if (s.drafting) events_.set_verify_costs(s.drafting->staircut().costs().table());
  std::shared_ptr<Job> job = std::move(s.job);
  s.text.reset();
  s.control.reset();
  {
    std::lock_guard lk(mu_);
    active_[size_t(s.id)] = nullptr;
    info_[size_t(s.id)] = SlotInfo{s.id, "idle", 0, "", info_[size_t(s.id)].drafter};
    --running_;
  }
  job->finish(std::move(o));
}

}  // namespace tandem
