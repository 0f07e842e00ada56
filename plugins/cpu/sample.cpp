// Token sampling on the host: greedy, or temperature / top-k / top-p / min-p in vLLM's order with
// one inverse-CDF draw, so that a seed gives the same text on every backend that follows this order.
// The distribution itself is core's sampling_distribution (speculative verify draws from the same).
#include <cmath>
#include <utility>

#include "check.h"
#include "kernels.h"
#include "tandem/sampler.h"

namespace tandem::cpu {

void validate_sampling(const SamplingParams& p) {
  // Every comparison with NaN is false, so a NaN field fails its check.
  check(std::isfinite(p.temperature) && p.temperature >= 0.0f,
        "sampling: temperature must be >= 0, found ", p.temperature);
  check(p.top_k >= 0, "sampling: top_k must be >= 0 (0 = off), found ", p.top_k);
  check(p.top_p > 0.0f && p.top_p <= 1.0f, "sampling: top_p must be in (0, 1], found ", p.top_p);
  check(p.min_p >= 0.0f && p.min_p <= 1.0f, "sampling: min_p must be in [0, 1], found ", p.min_p);
}

namespace {

void check_logits(const float* logits, int64_t vocab) {
  check(vocab > 0 && vocab <= INT32_MAX, "sample: vocab must be in [1, 2^31), found ", vocab);
  check_ptr("sample", "logits", logits);
}

int32_t argmax(const float* logits, int64_t vocab) {
  int64_t best = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    check(!std::isnan(logits[i]), "sample: logit ", i, " is nan");
    if (logits[i] > logits[best]) best = i;
  }
  return int32_t(best);
}

}  // namespace

Candidates sampling_candidates(const float* logits, int64_t vocab, const SamplingParams& p) {
  validate_sampling(p);
  check_logits(logits, vocab);
  check(p.temperature > 0.0f, "sample: sampling_candidates needs temperature > 0");

  // sampling_distribution checks these too; checking first keeps this backend's error messages.
  bool any = false;
  for (int64_t i = 0; i < vocab; ++i) {
    check(!std::isnan(logits[i]) && logits[i] != INFINITY, "sample: logit ", i, " is ", logits[i]);
    any |= logits[i] != -INFINITY;
  }
  check(any, "sample: every logit is -inf");
  TokenDist d = sampling_distribution(logits, vocab, p);
  return {std::move(d.ids), std::move(d.probs)};
}

int32_t sample(const float* logits, int64_t vocab, const SamplingParams& p, Rng& rng) {
  validate_sampling(p);
  check_logits(logits, vocab);
  if (p.temperature == 0.0f) return argmax(logits, vocab);
  Candidates c = sampling_candidates(logits, vocab, p);
  const double u = rng.uniform();
  double cum = 0.0;
  for (size_t i = 0; i < c.ids.size(); ++i) {
    cum += c.probs[i];
    if (u < cum) return c.ids[i];
  }
  return c.ids.back();  // u within rounding of 1
}

}  // namespace tandem::cpu
