// Sampling: greedy, the top-k / top-p / min-p support against a float64 reference, draw frequencies,
// determinism and parameter errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "cpu_test.h"
#include "plugins/cpu/cpu_backend.h"
#include "tandem/sampler.h"
#include "test_util.h"

namespace tandem::test {
namespace {

// The spec's filter chain in float64, written independently: token -> renormalized probability.
std::map<int, double> ref_distribution(const std::vector<float>& logits, const SamplingParams& p) {
  const int v = int(logits.size());
  std::vector<double> z(v);
  for (int i = 0; i < v; ++i) z[i] = logits[i] / double(p.temperature);
  double m = *std::max_element(z.begin(), z.end()), sum = 0;
  std::vector<double> prob(v);
  for (int i = 0; i < v; ++i) sum += prob[i] = std::exp(z[i] - m);
  std::vector<int> order(v);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return prob[a] > prob[b]; });
  size_t keep = p.top_k > 0 ? std::min<size_t>(p.top_k, v) : v;
  double kept = 0;
  for (size_t i = 0; i < keep; ++i) kept += prob[order[i]];
  size_t n = 0;
  for (double cum = 0; n < keep;) {
    cum += prob[order[n++]] / kept;
    if (cum >= p.top_p) break;
  }
  keep = n;
  n = 0;
  while (n < keep && prob[order[n]] >= p.min_p * prob[order[0]]) ++n;
  keep = std::max<size_t>(n, 1);
  double mass = 0;
  for (size_t i = 0; i < keep; ++i) mass += prob[order[i]];
  std::map<int, double> out;
  for (size_t i = 0; i < keep; ++i) out[order[i]] = prob[order[i]] / mass;
  return out;
}

void expect_candidates(const std::vector<float>& logits, const SamplingParams& p) {
  auto want = ref_distribution(logits, p);
  auto got = sampling_candidates(logits.data(), int64_t(logits.size()), p);
  ASSERT_EQ(got.ids.size(), want.size()) << "T=" << p.temperature << " k=" << p.top_k
                                         << " p=" << p.top_p << " min_p=" << p.min_p;
  for (size_t i = 0; i < got.ids.size(); ++i) {
    ASSERT_TRUE(want.count(got.ids[i])) << "token " << got.ids[i] << " kept but not by the reference";
    EXPECT_NEAR(got.probs[i], want[got.ids[i]], 1e-12);
    if (i) EXPECT_GE(got.probs[i - 1], got.probs[i]);  // draw order: probability descending
  }
}

TEST(CpuSample, GreedyTakesTheLowestIdOnTiesAndDrawsNothing) {
  cpu::CpuBackend be;
  std::vector<float> logits = {1.f, 3.f, -INFINITY, 3.f, 2.f};
  Rng rng(5);
  SamplingParams p;
  EXPECT_EQ(be.sample(logits.data(), 5, p, rng), 1);
  EXPECT_EQ(rng.state, 5u);
}

TEST(CpuSample, TopKOneIsGreedy) {
  cpu::CpuBackend be;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    auto logits = random_vec(300, seed, -5.f, 5.f);
    SamplingParams greedy, k1;
    k1.temperature = 1.3f;
    k1.top_k = 1;
    Rng a(seed), b(seed);
    EXPECT_EQ(be.sample(logits.data(), 300, k1, b), be.sample(logits.data(), 300, greedy, a));
  }
}

TEST(CpuSample, SupportMatchesReference) {
  auto logits = random_vec(200, 50, -4.f, 4.f);
  for (float t : {0.5f, 1.0f, 2.0f})
    for (int k : {0, 1, 7, 60})
      for (float top_p : {1.0f, 0.9f, 0.5f, 0.05f})
        for (float min_p : {0.0f, 0.05f, 0.3f}) {
          SamplingParams p;
          p.temperature = t;
          p.top_k = k;
          p.top_p = top_p;
          p.min_p = min_p;
          expect_candidates(logits, p);
        }
  // The filters did restrict: top-k 7 keeps exactly the 7 largest logits.
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 7;
  auto got = sampling_candidates(logits.data(), 200, p);
  std::vector<int> order(200);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  EXPECT_EQ(std::vector<int>(got.ids.begin(), got.ids.end()), std::vector<int>(order.begin(), order.begin() + 7));
}

TEST(CpuSample, DrawsFollowTheFilteredDistribution) {
  cpu::CpuBackend be;
  std::vector<float> logits = {2.0f, 1.5f, 1.4f, 0.3f, -0.2f, 0.9f, -3.0f, 1.0f, 0.0f, -1.0f};
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_k = 8;
  p.top_p = 0.95f;
  p.min_p = 0.05f;
  auto want = ref_distribution(logits, p);
  ASSERT_LT(want.size(), 8u);  // the filters cut something
  const int draws = 6000;
  std::vector<int> count(logits.size());
  Rng rng(123);
  for (int i = 0; i < draws; ++i) ++count[be.sample(logits.data(), 10, p, rng)];
  for (int t = 0; t < 10; ++t) {
    double q = want.count(t) ? want[t] : 0.0;
    double sigma = std::sqrt(q * (1 - q) / draws);
    EXPECT_NEAR(double(count[t]) / draws, q, 5 * sigma + 1e-9) << "token " << t;
  }
}

TEST(CpuSample, SameSeedSameTokens) {
  cpu::CpuBackend be;
  auto logits = random_vec(1000, 9, -2.f, 2.f);
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.95f;
  auto draw = [&](uint64_t seed) {
    Rng rng(seed);
    std::vector<int32_t> out;
    for (int i = 0; i < 50; ++i) out.push_back(be.sample(logits.data(), 1000, p, rng));
    return out;
  };
  EXPECT_EQ(draw(7), draw(7));
  EXPECT_NE(draw(7), draw(8));
}

TEST(CpuSample, BadParamsNameTheField) {
  cpu::CpuBackend be;
  std::vector<float> logits = {0.f, 1.f};
  auto call = [&](SamplingParams p) {
    Rng rng(1);
    return error_of([&] { be.sample(logits.data(), 2, p, rng); });
  };
  SamplingParams p;
  p.temperature = -1.0f;
  EXPECT_EQ(call(p), "sampling: temperature must be >= 0, found -1");
  p.temperature = NAN;
  EXPECT_NE(call(p).find("sampling: temperature"), std::string::npos);
  p = SamplingParams{};
  p.top_k = -2;
  EXPECT_EQ(call(p), "sampling: top_k must be >= 0 (0 = off), found -2");
  p = SamplingParams{};
  p.top_p = 0.0f;
  EXPECT_EQ(call(p), "sampling: top_p must be in (0, 1], found 0");
  p.top_p = 1.5f;
  EXPECT_EQ(call(p), "sampling: top_p must be in (0, 1], found 1.5");
  p = SamplingParams{};
  p.min_p = 1.5f;
  EXPECT_EQ(call(p), "sampling: min_p must be in [0, 1], found 1.5");
  p = SamplingParams{};
  p.temperature = 1.0f;
  logits[1] = NAN;
  EXPECT_EQ(call(p), "sample: logit 1 is nan");
  logits = {-INFINITY, -INFINITY};
  EXPECT_EQ(call(p), "sample: every logit is -inf");
}

}  // namespace
}  // namespace tandem::test
