// The lookup drafter: proposes the tokens that followed the most recent earlier occurrence of the
// longest suffix of the sequence (prompt and output of this request only; spec/speculation.md §3).
// Owner: one LookupDrafter per sequence. Thread: the engine thread. Sync: none (host only).
#pragma once
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "tandem/speculator.h"

namespace tandem::lookup {

struct LookupParams {
  int n_min = 2;            // shortest suffix match that may propose (1-token matches are noise on prose)
  int n_max = 16;           // longest match looked for; longer ones count as n_max
  int max_draft = 31;       // tokens per proposal
  int min_matches = 1;      // earlier occurrences that must match the chosen length
  int max_candidates = 64;  // earlier occurrences of the last n_min tokens examined, most recent first
};

// Reads draft.lookup.{n_min, n_max, max_draft, min_matches, max_candidates}; errors name the key.
LookupParams read_params(SpeculatorSettings& settings);

class LookupDrafter : public Speculator {
 public:
  explicit LookupDrafter(const LookupParams& params);
  void begin(const int32_t* prompt, size_t n) override;
  void observe(const int32_t* tokens, size_t n) override;
  void propose(int max_n, Draft& out) override;
  // Buckets of the match length behind a proposal: 2–3, 4–7, 8–15, 16+.
  int buckets() const override { return 4; }
  bool cheap() const override { return true; }

  int last_match() const { return last_match_; }  // match length of the last proposal (0 = none)

 private:
  void append(int32_t token);
  uint64_t key(size_t end) const;  // hash of the n_min tokens ending at history index `end`

  LookupParams p_;
  std::vector<int32_t> h_;  // the request's tokens so far
  std::unordered_map<uint64_t, std::vector<int32_t>> ends_;  // n_min-gram → where it ended, ascending
  int last_match_ = 0;
};

class LookupFactory : public SpeculatorFactory {
 public:
  std::unique_ptr<Speculator> create(const SpeculatorContext& context, SpeculatorSettings& settings) override;
};

}  // namespace tandem::lookup
