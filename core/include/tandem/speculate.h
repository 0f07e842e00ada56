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

#include "tandem/engine.h"
#include "tandem/speculator.h"
#include "tandem/staircut.h"

namespace tandem {

class PluginRegistry;

struct DraftOptions {
  std::vector<std::string> drafters;                   // speculator names; empty = plain decoding
  std::map<std::string, SpeculatorSettings> settings;  // per drafter name (profile `draft.<name>`)
  StairCutOptions staircut;
  // T_v(m) in seconds, [m − 1]; empty = measured at start-up on this machine for these weights.
  std::vector<double> verify_costs;
  int64_t cost_context = 1024;  // committed tokens the start-up measurement verifies after
  int cost_reps = 5;            // repetitions per m (median)
};

// What drafting did, cumulative over the requests a session served (or for one request).
struct DraftMetrics {
  struct PerDrafter {
    std::string name;
    int64_t proposals = 0;        // non-empty propose() results (verified or only retro-scored)
    int64_t drafts = 0;           // steps that verified this drafter's chain
    int64_t drafted_tokens = 0;   // Σ k over those steps
    int64_t accepted_tokens = 0;  // of those, accepted
    double propose_seconds = 0;
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

  // Same contract as tandem::generate (engine.h): greedy output is identical to plain decoding token
  // for token; sampled output has the plain distribution (for deterministic drafters, with the same
  // seed, the same tokens). `metrics` (optional) receives this request's numbers.
  GenerateResult generate(const std::vector<int32_t>& prompt, const GenerateOptions& options,
                          const std::function<bool(int32_t)>& on_token = {}, DraftMetrics* metrics = nullptr);

  const DraftMetrics& metrics() const;  // since construction
  StairCut& staircut();
  const std::vector<std::string>& names() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// "lookup,lilicorr" → {"lookup", "lilicorr"}; "none" → {}. Empty or repeated names are errors.
TANDEM_API std::vector<std::string> parse_drafter_names(const std::string& list);

// T_v(m) for m = 1..max_rows: median wall time of forward(m rows) + acceptance-sized host work +
// commit, after `context` committed tokens, on this machine.
TANDEM_API std::vector<double> measure_verify_costs(Model& model, int max_rows, int64_t context, int reps);

// The distribution a sampled draw picks from (temperature > 0): softmax(logits / T) in fp64, then
// top_k, top_p and min_p in vLLM's order — the distribution the CPU backend's sample() draws from.
TANDEM_API TokenDist sampling_distribution(const float* logits, int64_t vocab, const SamplingParams& params);

// Speculative sampling of one position: accept `draft` (drawn from q) with probability
// min(1, p(draft) / q(draft)); otherwise draw from the residual max(0, p − q), normalized.
// Returns the emitted token and sets `accepted`. The output is distributed exactly as p.
TANDEM_API int32_t speculative_accept(const TokenDist& p, const TokenDist& q, int32_t draft, Rng& rng,
                                      bool& accepted);

}  // namespace tandem
