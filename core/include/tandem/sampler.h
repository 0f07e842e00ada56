// The sampling rules every decoding loop shares: the distribution a sampled draw picks from, the
// draw itself on the host (every backend's sample() ends here once the logits are host memory), and
// the speculative-sampling test that keeps drafted output distributed exactly as plain output.
// Owner: free functions and a value type. Thread: any. Sync: none.
#pragma once
#include <cstdint>
#include <utility>
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
// top_k, top_p and min_p in vLLM's order — the distribution sample_host() draws from. The kept tokens
// are in draw order (probability descending, id ascending), their probabilities renormalized.
TANDEM_API TokenDist sampling_distribution(const float* logits, int64_t vocab, const SamplingParams& params);

// Throws naming the first bad field of p.
TANDEM_API void validate_sampling(const SamplingParams& p);
// sampling_distribution() after validate_sampling() and checks of vocab and the logits with the
// messages of sample_host() ("sample: logit 3 is nan").
TANDEM_API TokenDist sampling_candidates(const float* logits, int64_t vocab, const SamplingParams& p);
// One token from host logits [vocab]. temperature 0: argmax, lowest id on ties, no draw from rng.
// Otherwise one rng.uniform() draw, picked by inverse CDF over sampling_candidates(), so that a seed
// gives the same text on every backend.
TANDEM_API int32_t sample_host(const float* logits, int64_t vocab, const SamplingParams& p, Rng& rng);

// What a response reports for one position: the log-probability of the token taken there and of
// the `top` most likely ids.
struct TokenLogprobs {
  int32_t token = 0;
  double logprob = 0;
  std::vector<std::pair<int32_t, double>> top;  // logprob descending, id ascending
};

// log_softmax(logits) in fp64 over the whole vocabulary, of `token` and of the `top` (≥ 0) most
// likely ids. These are the model's raw logits: temperature, top-k/p, penalties, bias and grammar
// masks do not change them (OpenAI reports the model's distribution; vLLM's default
// "raw_logprobs"), so they are the log-softmax of `tandem logits` at that position. A token in the
// top list carries the same double as `logprob`. Throws on a NaN logit or a token outside [0, vocab).
TANDEM_API TokenLogprobs token_logprobs(const float* logits, int64_t vocab, int32_t token, int top);

// Speculative sampling of one position: accept `draft` (drawn from q) with probability
// min(1, p(draft) / q(draft)); otherwise draw from the residual max(0, p − q), normalized.
// Returns the emitted token and sets `accepted`. The output is distributed exactly as p.
TANDEM_API int32_t speculative_accept(const TokenDist& p, const TokenDist& q, int32_t draft, Rng& rng,
                                      bool& accepted);

}  // namespace tandem
