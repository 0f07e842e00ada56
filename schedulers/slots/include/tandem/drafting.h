// Drafted generation: each step the drafters propose, StairCut picks a chain and a cut k, the target
// verifies [anchor, d1..dk] in one forward pass, acceptance keeps a prefix plus the target's own
// token, and commit(n) keeps exactly the state n plain steps would have left.
// Owner: a Drafting session borrows the Model and owns its drafter factories, the StairCut estimates
// (pooled over the requests it serves) and the verify-cost table. Thread: one thread drives a
// session (the thread that drives the Model). Sync: each step waits for its logits (Model::forward).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tandem/draft_options.h"
#include "tandem/generate.h"
#include "tandem/speculator.h"
#include "tandem/staircut.h"

namespace tandem {

class PluginRegistry;

// What drafting did, cumulative over the requests a session served (or for one request).
struct DraftMetrics {
  struct PerDrafter {
    std::string name;
    int64_t proposals = 0;        // non-empty propose() results (verified or only retro-scored)
    int64_t drafts = 0;           // steps that verified this drafter's chain
    int64_t extensions = 0;       // steps whose chain (another drafter's) this one extended
    int64_t drafted_tokens = 0;   // Σ k over those steps (its own positions of extended chains)
    int64_t accepted_tokens = 0;  // of those, accepted
    double propose_seconds = 0;
    std::vector<int64_t> tried_at, accepted_at;  // as below, for this drafter's verified chains
    std::vector<int64_t> k_histogram;            // [k]: steps that verified k ≥ 1 of its drafts
    // Every proposal, verified or not, retro-scored against the committed text, by position j
    // ([j − 1]): tokens proposed there; of those, judged (every earlier one matched and the text
    // reached j); of those, equal to the committed token. α_j = matched_at / reached_at.
    std::vector<int64_t> proposed_at, reached_at, matched_at;
    std::vector<SpeculatorStage> stages;  // Speculator::stages(), summed by name (empty: not measured)
  };
  int64_t steps = 0;            // verify passes after the prefill (each commits ≥ 1 token)
  int64_t plain_steps = 0;      // steps with k = 0
  int64_t drafts = 0;           // steps with k ≥ 1
  int64_t drafted_tokens = 0;   // Σ k
  int64_t accepted_tokens = 0;
  int64_t generated_tokens = 0;
  std::vector<int64_t> tried_at;     // [j − 1]: verified drafts at position j
  std::vector<int64_t> accepted_at;  // [j − 1]: of those, accepted
  std::vector<int64_t> k_histogram;  // [k]: steps that verified k drafts
  std::vector<PerDrafter> drafters;

  double acceptance() const { return drafted_tokens ? double(accepted_tokens) / double(drafted_tokens) : 0.0; }
  // Generated tokens per target forward after the prefill.
  double tokens_per_step() const { return steps ? double(generated_tokens - 1) / double(steps) : 0.0; }
  void add(const DraftMetrics& other);
  // One line per fact, for stderr and logs.
  std::string summary() const;
  // Per drafter and position j: verified "accepted/tried" and retro-scored "matched/reached", one
  // row per drafter, for `tandem bench --draft` and summary().
  std::string position_table() const;
};

// One drafted step as it happened, for `tandem generate --trace-drafts` and for comparing a drafter
// step by step with another implementation.
struct DraftStep {
  int64_t committed = 0;  // tokens in the sequence before the step (the anchor is not among them yet)
  // Each drafter's proposal this step, in the session's drafter order (empty: not asked or none).
  std::vector<std::pair<std::string, std::vector<int32_t>>> proposals;
  std::string chain;                 // the drafter whose chain was verified; empty on a plain step
  std::string extended_by;           // the drafter that agreed with it and extended it (or empty)
  int k_chain = 0;                   // with extended_by: drafts of `chain` (the rest are its)
  int k = 0;                         // drafts verified
  int accepted = 0;                  // of those, accepted
  std::vector<int32_t> tokens;       // emitted: the accepted drafts, then the target's own token
  bool has_bonus = false;            // false only when the request ended on an accepted draft
  int32_t bonus() const { return has_bonus ? tokens.back() : -1; }
};

class TANDEM_API Drafting {
 public:
  using NamedFactory = std::pair<std::string, std::shared_ptr<SpeculatorFactory>>;

  // The drafters are looked up in `registry` for the model's device; each is created once here so
  // that bad settings fail at start-up. Verify costs are measured now unless options give them.
  Drafting(Model& model, PluginRegistry& registry, const DraftOptions& options);
  // Factories given directly (tests, embedders); options.drafters is ignored.
  Drafting(Model& model, std::vector<NamedFactory> factories, const DraftOptions& options);
  ~Drafting();

  // Same contract as tandem::generate (generate.h): greedy output is identical to plain decoding token
  // for token; sampled output has the plain distribution (for deterministic drafters, with the same
  // seed, the same tokens). `metrics` (optional) receives this request's numbers.
  GenerateResult generate(const std::vector<int32_t>& prompt, const GenerateOptions& options,
                          const std::function<bool(int32_t)>& on_token = {}, DraftMetrics* metrics = nullptr);

  const DraftMetrics& metrics() const;  // since construction
  // Optional: called after every verify pass of every request (null turns it off).
  void set_trace(std::function<void(const DraftStep&)> on_step);
  StairCut& staircut();
  const std::vector<std::string>& names() const;

 private:
  friend class DraftedRequest;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The drafted steps of one request, for tandem::Generation (generation.h), which prefills the prompt
// and reports each part (prefilled()), so drafters that read the target's hidden states see every
// prompt row; the caller picks the first token from the last part's logits and hands it to start();
// each step() then verifies one chain (or takes a plain step) and emits 1..k+1 tokens.
// Owner: borrows the Drafting, the Sequence and the Rng (all must outlive it); on destruction its
// metrics join the Drafting's totals. A Drafting serves one request at a time (StairCut keeps
// per-request state). Thread: the thread that drives the Model. Sync: each step waits for its logits.
class TANDEM_API DraftedRequest {
 public:
  // `seq`: the sequence the prompt will be prefilled into. The drafters begin() here.
  DraftedRequest(Drafting& drafting, Sequence& seq, const std::vector<int32_t>& prompt,
                 const SamplingParams& sampling, Rng& rng);
  ~DraftedRequest();
  DraftedRequest(const DraftedRequest&) = delete;
  DraftedRequest& operator=(const DraftedRequest&) = delete;

  // The caller ran and committed the next n prompt tokens at positions pos0 …: the drafters that read
  // hidden states receive those rows (the model's taps of that pass).
  void prefilled(int64_t pos0, size_t n);
  // The first n prompt tokens were restored from a prefix checkpoint, before any prefill: true, or
  // false (and nothing changes) when a drafter reads the prompt's hidden states, which no pass made.
  bool restored(size_t n);
  // `first`: the token picked from the prefill's logits (emitted by the caller, not yet fed), once the
  // whole prompt is prefilled.
  void start(int32_t first);
  bool started() const;
  // One verify pass emitting at most `max_tokens` (≥ 1) tokens. Returns false once hooks.emit did.
  bool step(int max_tokens, const StepHooks& hooks);
  // step() split around its verify pass (Generation::plan/finish): plan() proposes and picks the
  // chain, giving the pass's tokens (anchor and drafts) and whether it needs every position's logits;
  // the caller runs that pass on the request's sequence into the Sequence's logits it hands to
  // finish() through Model::BatchPass; finish() accepts, emits and commits. `tap_row0`: the first row
  // of this pass in the model's taps (0 when it ran alone).
  void plan(int max_tokens, std::vector<int32_t>& tokens, bool& all_positions);
  bool finish(std::vector<float>& logits, const StepHooks& hooks, int64_t tap_row0);
  // This request's numbers so far (generated_tokens counts `first`); they join the Drafting's totals
  // on destruction once started.
  const DraftMetrics& metrics() const;

 private:
  struct State;
  std::unique_ptr<State> st_;
};

// T_v(m) for m = 1..max_rows: median wall time of forward(m rows) + acceptance-sized host work +
// commit, after `context` committed tokens, on this machine.
TANDEM_API std::vector<double> measure_verify_costs(Model& model, int max_rows, int64_t context, int reps);

}  // namespace tandem
