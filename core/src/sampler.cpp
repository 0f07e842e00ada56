// Sampling on the host: the target's sampling distribution, the draw from it (greedy, or temperature /
// top-k / top-p / min-p in vLLM's order with one inverse-CDF draw) and the speculative-sampling rule.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "tandem/error.h"
#include "tandem/sampler.h"

namespace tandem {

TokenDist sampling_distribution(const float* logits, int64_t vocab, const SamplingParams& sp) {
  check(sp.temperature > 0 && std::isfinite(sp.temperature), "sampling distribution: temperature must be > 0, found ",
        sp.temperature);
  check(vocab > 0 && logits != nullptr, "sampling distribution: no logits");
  const double t = sp.temperature;
  double top = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i) {
    if (std::isnan(logits[i]) || logits[i] == INFINITY) fail("sampling distribution: logit ", i, " is ", logits[i]);
    top = std::max(top, double(logits[i]) / t);
  }
  check(top != -INFINITY, "sampling distribution: every logit is -inf");
  std::vector<double> e(static_cast<size_t>(vocab));
  double z = 0.0;
  for (int64_t i = 0; i < vocab; ++i) z += e[size_t(i)] = std::exp(double(logits[i]) / t - top);
  for (double& x : e) x /= z;

  // Draw order: probability descending, id ascending; probability-0 tokens (masked) are never kept.
  TokenDist d;
  for (int64_t i = 0; i < vocab; ++i)
    if (e[size_t(i)] > 0.0) d.ids.push_back(int32_t(i));
  auto first = [&](int32_t a, int32_t b) { return e[size_t(a)] > e[size_t(b)] || (e[size_t(a)] == e[size_t(b)] && a < b); };
  size_t n = d.ids.size();
  if (sp.top_k > 0 && size_t(sp.top_k) < n) {
    n = size_t(sp.top_k);
    std::partial_sort(d.ids.begin(), d.ids.begin() + long(n), d.ids.end(), first);
  } else {
    std::sort(d.ids.begin(), d.ids.end(), first);
  }
  d.ids.resize(n);
  d.probs.resize(n);
  for (size_t i = 0; i < n; ++i) d.probs[i] = e[size_t(d.ids[i])];
  auto mass = [&](size_t upto) {
    double m = 0.0;
    for (size_t i = 0; i < upto; ++i) m += d.probs[i];
    return m;
  };
  if (sp.top_p < 1.0f) {  // the shortest prefix reaching top_p of the top-k mass
    const double goal = double(sp.top_p) * mass(n);
    double cum = 0.0;
    size_t keep = 0;
    while (keep < n && cum < goal) cum += d.probs[keep++];
    n = std::max<size_t>(keep, 1);
  }
  if (sp.min_p > 0.0f) {  // relative to the top probability
    size_t keep = 1;
    while (keep < n && d.probs[keep] >= double(sp.min_p) * d.probs[0]) ++keep;
    n = keep;
  }
  d.ids.resize(n);
  d.probs.resize(n);
  const double kept = mass(n);
  for (double& p : d.probs) p /= kept;
  return d;
}

int32_t speculative_accept(const TokenDist& p, const TokenDist& q, int32_t draft, Rng& rng, bool& accepted) {
  const double pd = p.prob(draft), qd = q.prob(draft);
  if (!(qd > 0)) fail("speculative sampling: draft token ", draft, " has probability ", qd, " under its drafter's q");
  accepted = rng.uniform() * qd < pd;  // u < p/q without dividing; always true when p ≥ q
  if (accepted) return draft;
  // Residual max(0, p − q) over p's support (where p is 0 the residual is 0 too).
  double total = 0.0;
  std::vector<double> r(p.ids.size());
  for (size_t i = 0; i < p.ids.size(); ++i) total += r[i] = std::max(0.0, p.probs[i] - q.prob(p.ids[i]));
  if (!(total > 0)) return p.ids.front();  // p ≤ q everywhere means p = q, and then no rejection happens
  const double u = rng.uniform() * total;
  double cum = 0.0;
  for (size_t i = 0; i < r.size(); ++i)
    if (r[i] > 0 && u < (cum += r[i])) return p.ids[i];
  for (size_t i = r.size(); i-- > 0;)  // u within rounding of the total: the last token with mass
    if (r[i] > 0) return p.ids[i];
  return p.ids.front();
}

void validate_sampling(const SamplingParams& p) {
  // Every comparison with NaN is false, so a NaN field fails its check.
  check(std::isfinite(p.temperature) && p.temperature >= 0.0f,
        "sampling: temperature must be >= 0, found ", p.temperature);
  check(p.top_k >= 0, "sampling: top_k must be >= 0 (0 = off), found ", p.top_k);
  check(p.top_p > 0.0f && p.top_p <= 1.0f, "sampling: top_p must be in (0, 1], found ", p.top_p);
  check(p.min_p >= 0.0f && p.min_p <= 1.0f, "sampling: min_p must be in [0, 1], found ", p.min_p);
}

namespace {

void check_sample_logits(const float* logits, int64_t vocab) {
  check(vocab > 0 && vocab <= INT32_MAX, "sample: vocab must be in [1, 2^31), found ", vocab);
  check(logits != nullptr, "sample: logits is null");
}

// Greedy decoding runs this over the whole vocabulary every step (131,072 logits on Bolt, ~0.1 ms of
// host time per token with one compare chain). Eight running maxima break the chain (the compiler
// vectorizes them), NaN is looked for alongside, and a second scan returns the first index holding
// the maximum: the same token as a strict left-to-right `>` scan.
int32_t argmax(const float* logits, int64_t vocab) {
  constexpr int kLanes = 8;
  float top[kLanes];
  for (float& t : top) t = -INFINITY;
  bool nan = false;
  int64_t i = 0;
  for (; i + kLanes <= vocab; i += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      const float v = logits[i + j];
      nan |= v != v;
      top[j] = v > top[j] ? v : top[j];
    }
  for (; i < vocab; ++i) {
    const float v = logits[i];
    nan |= v != v;
    top[0] = v > top[0] ? v : top[0];
  }
  if (nan) [[unlikely]] {
    for (i = 0; !std::isnan(logits[i]); ++i) {
    }
    fail("sample: logit ", i, " is nan");
  }
  float m = top[0];
  for (int j = 1; j < kLanes; ++j) m = top[j] > m ? top[j] : m;
  for (i = 0; i < vocab; ++i)
    if (logits[i] == m) return int32_t(i);
  return 0;  // unreachable: the maximum is one of the logits
}

}  // namespace

TokenDist sampling_candidates(const float* logits, int64_t vocab, const SamplingParams& p) {
  validate_sampling(p);
  check_sample_logits(logits, vocab);
  check(p.temperature > 0.0f, "sample: sampling_candidates needs temperature > 0");

  // sampling_distribution checks these too; checking first keeps sample_host's error messages.
  bool any = false;
  for (int64_t i = 0; i < vocab; ++i) {
    check(!std::isnan(logits[i]) && logits[i] != INFINITY, "sample: logit ", i, " is ", logits[i]);
    any |= logits[i] != -INFINITY;
  }
  check(any, "sample: every logit is -inf");
  return sampling_distribution(logits, vocab, p);
}

TokenLogprobs token_logprobs(const float* logits, int64_t vocab, int32_t token, int top) {
  check(vocab > 0 && logits != nullptr, "logprobs: no logits");
  check(token >= 0 && token < vocab, "logprobs: token ", token, " outside the vocabulary [0, ", vocab, ")");
  check(top >= 0, "logprobs: top must not be negative, found ", top);
  double hi = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i) {
    if (std::isnan(logits[i])) fail("logprobs: logit ", i, " is nan");
    hi = std::max(hi, double(logits[i]));
  }
  check(std::isfinite(hi), "logprobs: no finite logit");
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(double(logits[i]) - hi);
  const double lse = hi + std::log(sum);
  TokenLogprobs r;
  r.token = token;
  r.logprob = double(logits[token]) - lse;
  const size_t k = size_t(std::min<int64_t>(top, vocab));
  if (k == 0) return r;
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) ids[size_t(i)] = int32_t(i);
  auto before = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::partial_sort(ids.begin(), ids.begin() + long(k), ids.end(), before);
  for (size_t j = 0; j < k; ++j) r.top.emplace_back(ids[j], double(logits[ids[j]]) - lse);
  return r;
}

int32_t sample_host(const float* logits, int64_t vocab, const SamplingParams& p, Rng& rng) {
  validate_sampling(p);
  check_sample_logits(logits, vocab);
  if (p.temperature == 0.0f) return argmax(logits, vocab);
  TokenDist c = sampling_candidates(logits, vocab, p);
  const double u = rng.uniform();
  double cum = 0.0;
  for (size_t i = 0; i < c.ids.size(); ++i) {
    cum += c.probs[i];
    if (u < cum) return c.ids[i];
  }
  return c.ids.back();  // u within rounding of 1
}

}  // namespace tandem
