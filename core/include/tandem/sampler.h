// The sampling rules every decoding loop shares: the distribution a sampled draw picks from, and
// the speculative-sampling test that keeps drafted output distributed exactly as plain output.
// Owner: free functions and a value type. Thread: any. Sync: none.
#pragma once
#include <cstdint>
#include <vector>

#include "tandem/backend.h"

namespace tandem {

// A sparse probability distribution over token ids (probs sum to 1).
struct TokenDist {
  std::vector<int32_t> ids;
  std::vector<double> probs;
  TANDEM_API double prob(int32_t id) const;
};

// The distribution a sampled draw picks from (temperature > 0): softmax(logits / T) in fp64, then
// top_k, top_p and min_p in vLLM's order — the distribution the CPU backend's sample() draws from.
TANDEM_API TokenDist sampling_distribution(const float* logits, int64_t vocab, const SamplingParams& params);

// Speculative sampling of one position: accept `draft` (drawn from q) with probability
// min(1, p(draft) / q(draft)); otherwise draw from the residual max(0, p − q), normalized.
// Returns the emitted token and sets `accepted`. The output is distributed exactly as p.
TANDEM_API int32_t speculative_accept(const TokenDist& p, const TokenDist& q, int32_t draft, Rng& rng,
                                      bool& accepted);

}  // namespace tandem
