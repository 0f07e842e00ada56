// The one decoding loop (tandem::Generation) and generate(), which runs it plain to the end.
#include "tandem/generation.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "tandem/error.h"

namespace tandem {

Generation::Generation(Model& model, Drafting* drafting, std::vector<int32_t> prompt, int64_t context,
                       int prefill_chunk, const SamplingParams& sampling, PrefixCache* prefix_cache)
    : model_(model), drafting_(drafting), prompt_(std::move(prompt)), context_(context),
      chunk_(prefill_chunk > 0 ? size_t(prefill_chunk) : prompt_.size()), sampling_(sampling), rng_(sampling.seed),
      cache_(prefix_cache) {
  check(!prompt_.empty(), "generate: the prompt is empty");
  check(prefill_chunk >= 0, "generate: the prefill chunk must not be negative, found ", prefill_chunk);
  check(!cache_ || cache_->chunk() == prefill_chunk, "generate: the prefix cache's checkpoints sit on a grid of ",
        cache_ ? cache_->chunk() : 0, " tokens, the prefill chunk is ", prefill_chunk);
  // The state is allocated here, not in the first step: a prefill's time is its passes alone.
  seq_ = model_.new_sequence(context_);
}

Generation::~Generation() = default;

const DraftMetrics* Generation::draft_metrics() const {
  return drafted_ && drafted_->started() ? &drafted_->metrics() : nullptr;
}

void Generation::make_drafted() {
  if (prefilling() && drafting_ && !drafted_)
    drafted_ = std::make_unique<DraftedRequest>(*drafting_, *seq_, prompt_, sampling_, rng_);
}

void Generation::keep_prompt(PromptState* out) {
  check(steps_ == 0 && prefilled_ == 0, "generate: keep_prompt() after the first step");
  keep_ = out;
}

bool Generation::start_from(const PromptState& state) {
  check(steps_ == 0 && prefilled_ == 0 && !looked_up_, "generate: start_from() after the first step");
  check(state.snapshot && state.snapshot->pos == int64_t(prompt_.size()) &&
            state.logits.size() == size_t(model_.desc().vocab),
        "generate: start_from() needs the state after this prompt's ", prompt_.size(), " tokens, found ",
        state.snapshot ? state.snapshot->pos : 0, " tokens");
  make_drafted();
  if (drafted_ && !drafted_->restored(prompt_.size())) return false;
  model_.restore(*state.snapshot, *seq_);
  logits_ = state.logits;
  prefilled_ = restored_ = prompt_.size();
  looked_up_ = shared_ = pick_first_ = true;
  return true;
}

void Generation::kept(size_t row_at) {
  if (!keep_) return;
  const size_t V = size_t(model_.desc().vocab);
  keep_->snapshot = model_.snapshot(*seq_);
  keep_->logits.assign(logits_.begin() + long(row_at), logits_.begin() + long(row_at + V));
  keep_ = nullptr;
}

bool Generation::step(int max_tokens, const StepHooks& hooks) {
  check(!ended_, "generate: step() after the request ended");
  check(max_tokens >= 0, "generate: step() needs max_tokens ≥ 0, found ", max_tokens);
  if (drafted_ && drafted_->started()) {
    check(max_tokens >= 1, "generate: a decode step needs max_tokens ≥ 1");
    ++steps_;
    ended_ = !drafted_->step(max_tokens, hooks);
    return !ended_;
  }
  size_t row_at = 0;  // where the row to decode from starts in logits_
  // A drafted request is made before the prompt runs, so drafters reading hidden states see it.
  make_drafted();
  // The whole prompt came from a checkpoint that kept its logits, or from start_from().
  bool from_cache = std::exchange(pick_first_, false);
  // Echo with logprobs needs every prompt row's logits, which a checkpoint does not keep.
  if (cache_ && !looked_up_ && !hooks.prompt_row) {
    looked_up_ = true;
    const PrefixCache::Hit hit = cache_->find(prompt_);
    if (hit.snapshot && (!drafted_ || drafted_->restored(size_t(hit.tokens)))) {
      model_.restore(*hit.snapshot, *seq_);
      prefilled_ = restored_ = size_t(hit.tokens);
      if (hit.logits) logits_ = *hit.logits, from_cache = true;
    }
  }
  if (prefilling()) {
    const size_t n = std::min(chunk_, prompt_.size() - prefilled_);
    const int64_t pos0 = seq_->pos;
    const std::vector<int32_t> part(prompt_.begin() + long(prefilled_), prompt_.begin() + long(prefilled_ + n));
    const bool rows = bool(hooks.prompt_row);
    model_.forward_commit(*seq_, part, ForwardMode::Prefill, logits_, rows);
    if (drafted_) drafted_->prefilled(pos0, n);
    const size_t V = size_t(model_.desc().vocab);
    if (rows)
      for (size_t i = 0; i < n && prefilled_ + i + 1 < prompt_.size(); ++i)
        hooks.prompt_row(prefilled_ + i, logits_.data() + i * V);
    prefilled_ += n;
    if (cache_ && !rows) cache_->offer(*seq_, prompt_, logits_);
    if (prefilling()) return true;
    if (rows) row_at = (n - 1) * V;
    kept(row_at);
    if (max_tokens == 0) return !(ended_ = true);
  } else if (from_cache) {
    kept(0);
    if (max_tokens == 0) return !(ended_ = true);
  } else {
    check(max_tokens >= 1, "generate: a decode step needs max_tokens ≥ 1");
    model_.forward_commit(*seq_, {last_}, ForwardMode::Verify, logits_, false);
  }
  return pick(hooks, row_at);
}

void Generation::plan(int max_tokens, Model::BatchPass& pass) {
  check(decoding() && !planned_, "generate: plan() needs a decoding request without a planned pass");
  check(max_tokens >= 1, "generate: a decode step needs max_tokens ≥ 1");
  planned_ = true;
  pass.seq = seq_.get();
  pass.logits = &logits_;
  if (drafted_ && drafted_->started()) {
    drafted_->plan(max_tokens, pass.tokens, pass.all_positions);
  } else {
    pass.tokens.assign(1, last_);
    pass.all_positions = false;
  }
}

bool Generation::finish(const StepHooks& hooks, int64_t tap_row0) {
  check(planned_, "generate: finish() without plan()");
  planned_ = false;
  if (drafted_ && drafted_->started()) {
    ++steps_;
    ended_ = !drafted_->finish(logits_, hooks, tap_row0);
    return !ended_;
  }
  model_.commit(*seq_, 1);
  return pick(hooks, 0);
}

bool Generation::pick(const StepHooks& hooks, size_t row_at) {
  ++steps_;
  float* row = logits_.data() + row_at;
  int32_t tok = 0;
  if (hooks.observe) hooks.observe(row);
  if (!(hooks.forced && hooks.forced(tok))) {
    if (hooks.process) hooks.process(row);
    tok = model_.backend().sample(row, model_.desc().vocab, sampling_, rng_);
  }
  last_ = tok;
  const bool first = steps_ == 1;
  ended_ = !hooks.emit(tok);
  // After the prefill's token a drafted request decodes the rest through its DraftedRequest.
  if (first && drafted_ && !ended_) drafted_->start(tok);
  return !ended_;
}

GenerateResult run_generation(Model& model, Drafting* drafting, const std::vector<int32_t>& prompt,
                              const GenerateOptions& o, const std::function<bool(int32_t)>& on_token,
                              DraftMetrics* metrics) {
  check(!prompt.empty(), "generate: the prompt is empty");
  check(int64_t(prompt.size()) + o.max_tokens <= o.context, "generate: prompt (", prompt.size(), ") + max tokens (",
        o.max_tokens, ") exceed the context window of ", o.context);
  using Clock = std::chrono::steady_clock;
  const auto& eos = model.desc().eos_ids;
  GenerateResult r;
  Generation gen(model, drafting, prompt, o.context, o.prefill_chunk, o.sampling);
  const auto t0 = Clock::now();
  auto t1 = t0;
  StepHooks hooks;
  hooks.emit = [&](int32_t tok) {
    if (r.tokens.empty()) t1 = Clock::now();
    r.tokens.push_back(tok);
    if (on_token && !on_token(tok)) return false;
    if (o.stop_at_eos && std::find(eos.begin(), eos.end(), tok) != eos.end()) return !(r.stopped_at_eos = true);
    return int(r.tokens.size()) < o.max_tokens;
  };
  while (gen.step(std::max(0, o.max_tokens - int(r.tokens.size())), hooks)) {
  }
  const auto t2 = Clock::now();
  if (r.tokens.empty()) t1 = t2;
  r.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
  r.decode_seconds = std::chrono::duration<double>(t2 - t1).count();
  if (metrics) {
    *metrics = gen.draft_metrics() ? *gen.draft_metrics() : DraftMetrics{};
    if (!gen.draft_metrics()) metrics->generated_tokens = int64_t(r.tokens.size());
  }
  return r;
}

void prefill(Model& model, Sequence& seq, const std::vector<int32_t>& prompt, int chunk, std::vector<float>& logits) {
  check(chunk >= 0, "prefill: the chunk must not be negative, found ", chunk);
  const size_t c = chunk > 0 ? size_t(chunk) : prompt.size();
  for (size_t i = 0; i < prompt.size(); i += c) {
    const std::vector<int32_t> part(prompt.begin() + long(i), prompt.begin() + long(std::min(prompt.size(), i + c)));
    model.forward_commit(seq, part, ForwardMode::Prefill, logits, false);
  }
}

GenerateResult generate(Model& model, const std::vector<int32_t>& prompt, const GenerateOptions& o,
                        const std::function<bool(int32_t)>& on_token) {
  return run_generation(model, nullptr, prompt, o, on_token, nullptr);
}

}  // namespace tandem
