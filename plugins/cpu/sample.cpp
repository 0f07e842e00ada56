// Token sampling on the host: greedy, or temperature / top-k / top-p / min-p in vLLM's order with
// one inverse-CDF draw, so that a seed gives the same text on every backend that follows this order.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "check.h"
#include "kernels.h"

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

  // Softmax of logits / T in fp64. -inf is a mask and gets probability 0; NaN and +inf are errors.
  const double t = p.temperature;
  double m = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i) {
    check(!std::isnan(logits[i]) && logits[i] != INFINITY, "sample: logit ", i, " is ", logits[i]);
    m = std::max(m, double(logits[i]) / t);
  }
  check(m != -INFINITY, "sample: every logit is -inf");
  std::vector<double> prob(size_t(vocab), 0.0);
  double total = 0.0;
  for (int64_t i = 0; i < vocab; ++i) total += prob[i] = std::exp(double(logits[i]) / t - m);
  for (auto& x : prob) x /= total;

  // Draw order: probability descending, id ascending. Tokens of probability 0 can never be drawn.
  std::vector<int32_t> order;
  order.reserve(size_t(vocab));
  for (int64_t i = 0; i < vocab; ++i)
    if (prob[i] > 0.0) order.push_back(int32_t(i));
  auto before = [&](int32_t a, int32_t b) { return prob[a] > prob[b] || (prob[a] == prob[b] && a < b); };
  size_t keep = order.size();
  if (p.top_k > 0 && size_t(p.top_k) < keep) {
    keep = size_t(p.top_k);
    std::partial_sort(order.begin(), order.begin() + keep, order.end(), before);
  } else {
    std::sort(order.begin(), order.end(), before);
  }
  double mass = 0.0;
  for (size_t i = 0; i < keep; ++i) mass += prob[order[i]];

  // top_p over the top-k renormalized mass: the shortest prefix whose mass reaches top_p.
  if (p.top_p < 1.0f) {
    const double target = double(p.top_p) * mass;
    double cum = 0.0;
    size_t n = 0;
    while (n < keep) {
      cum += prob[order[n++]];
      if (cum >= target) break;
    }
    keep = n;
  }
  // min_p is relative to the top probability, so renormalizing before it changes nothing.
  if (p.min_p > 0.0f) {
    const double floor = double(p.min_p) * prob[order[0]];
    size_t n = 1;
    while (n < keep && prob[order[n]] >= floor) ++n;
    keep = n;
  }

  Candidates c;
  c.ids.assign(order.begin(), order.begin() + keep);
  c.probs.resize(keep);
  mass = 0.0;
  for (size_t i = 0; i < keep; ++i) mass += prob[order[i]];
  for (size_t i = 0; i < keep; ++i) c.probs[i] = prob[order[i]] / mass;
  return c;
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
