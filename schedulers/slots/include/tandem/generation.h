// One request's generation, driven a step at a time: the prompt in prefill chunks, then one plain
// or drafted step after another, each emitting tokens through the caller's hooks. This is the one
// decoding loop: tandem::generate and Drafting::generate run it to the end, `tandem serve`'s slots
// (SlotScheduler) step it between requests, and `tandem bench` measures it.
// Owner: borrows the Model and the Drafting (null = plain decoding), which must outlive it; owns the
// Sequence, the sampler's Rng and the drafted state. Thread: the thread that drives the Model.
// Sync: each step waits for its logits (Model::forward).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "tandem/drafting.h"
#include "tandem/generate.h"
#include "tandem/prefix_cache.h"

namespace tandem {

// A prompt read once for several requests (the n choices of one request): the sequence state after
// the whole prompt and the logits of its last position, as the model made them (before any
// request's rules edit them).
struct PromptState {
  std::unique_ptr<SequenceSnapshot> snapshot;  // null until the prompt was read
  std::vector<float> logits;                   // [vocab]
};

class TANDEM_API Generation {
 public:
  // The Sequence holds `context` tokens; prefill passes take `prefill_chunk` tokens (0 = the whole
  // prompt in one pass). A Drafting serves one Generation at a time (StairCut keeps per-request state).
  // With a PrefixCache (borrowed; its chunk must be prefill_chunk) the first step resumes from the
  // longest stored prefix of the prompt and each prefill pass offers a checkpoint; the tokens and
  // logits are those of a run without it. Drafters that read the prompt's hidden states get the
  // whole prompt prefilled (they are handed every row).
  Generation(Model& model, Drafting* drafting, std::vector<int32_t> prompt, int64_t context, int prefill_chunk,
             const SamplingParams& sampling, PrefixCache* prefix_cache = nullptr);
  ~Generation();
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  // One forward pass: a prefill chunk (the last one also picks the first token, unless max_tokens
  // is 0), or a decode/verify pass emitting 1 … max_tokens tokens. Tokens are picked by the hooks'
  // rules (forced, process, then a draw) and handed to hooks.emit in order. Returns false once the
  // request ended: hooks.emit returned false, or the prefill finished with max_tokens = 0.
  bool step(int max_tokens, const StepHooks& hooks);
  // step() of a decode or verify pass split around the model's forward, so that a caller runs the
  // passes of several Generations in one Model::forward_batch (SlotScheduler): plan() fills `pass`
  // with this sequence's tokens (1 row, or a drafted step's anchor and drafts) and its logits buffer;
  // once the forward ran, finish() commits and emits as step() does (`tap_row0`: the pass's first row
  // in the model's taps). Between the two nothing else may run on this Generation. The tokens are
  // those step() would emit (the same logits bits, the same draws). Needs decoding().
  bool decoding() const { return !ended_ && !prefilling(); }
  void plan(int max_tokens, Model::BatchPass& pass);
  bool finish(const StepHooks& hooks, int64_t tap_row0);

  // Before the first step. keep_prompt(): once the whole prompt is in the sequence (prefilled or
  // restored), *out (borrowed until then) gets its snapshot and last logits, before the first token
  // is picked. start_from(): the sequence starts from `state` (another Generation's kept prompt, the
  // same tokens) and the first step picks from its logits without a pass: the tokens are those of a
  // prefill, bit for bit. False (nothing changed) when a drafter needs the prompt's hidden states.
  void keep_prompt(PromptState* out);
  bool start_from(const PromptState& state);
  bool shared() const { return shared_; }  // the prompt came from start_from()

  bool prefilling() const { return prefilled_ < prompt_.size(); }
  size_t prefilled() const { return prefilled_; }  // prompt tokens in the sequence, restored ones included
  size_t restored() const { return restored_; }    // of those, restored from a prefix checkpoint
  // Passes that emitted tokens (the last prefill chunk and every decode or verify pass).
  int64_t steps() const { return steps_; }
  // Tokens committed to the sequence so far.
  int64_t position() const { return seq_->pos; }
  size_t sequence_bytes() const { return seq_->bytes(); }  // the Sequence's layer states
  // This request's drafting numbers; null when plain, or before the first token.
  const DraftMetrics* draft_metrics() const;

 private:
  Model& model_;
  Drafting* drafting_;
  std::vector<int32_t> prompt_;
  int64_t context_;
  size_t chunk_;
  SamplingParams sampling_;
  Rng rng_;
  std::unique_ptr<Sequence> seq_;
  std::unique_ptr<DraftedRequest> drafted_;  // from the first prefill chunk (it runs them); before seq_
  std::vector<float> logits_;
  PrefixCache* cache_;
  size_t prefilled_ = 0, restored_ = 0;
  bool looked_up_ = false;  // the prefix cache was asked (first step)
  int64_t steps_ = 0;
  int32_t last_ = 0;
  bool ended_ = false;
  bool planned_ = false;  // plan() ran, finish() did not yet
  PromptState* keep_ = nullptr;  // keep_prompt()'s target, until the prompt is in
  bool shared_ = false;
  bool pick_first_ = false;  // start_from() ran: the first step picks from its logits

  void make_drafted();  // the DraftedRequest, before the prompt runs
  void kept(size_t row_at);  // the prompt is in: fill keep_prompt()'s target

  // Picks and emits the token of the row of logits_ at row_at (a plain step's row; after an echoed
  // prefill the last of its rows).
  bool pick(const StepHooks& hooks, size_t row_at);
};

// Runs a Generation to the end with generate()'s stopping rules (EOS, max_tokens, on_token).
GenerateResult run_generation(Model& model, Drafting* drafting, const std::vector<int32_t>& prompt,
                              const GenerateOptions& options, const std::function<bool(int32_t)>& on_token,
                              DraftMetrics* metrics);

}  // namespace tandem
