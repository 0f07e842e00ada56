// Sampled drafting keeps the target's distribution: the speculative-sampling rule on synthetic
// distributions, the core's sampling distribution against the CPU sampler, seeded equality with
// deterministic drafters, and a G-test of the first three tokens drafted vs the exact distribution.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "drafters.h"
#include "tandem/sampler.h"
#include "tandem/generate.h"
#include "tandem/parallel.h"
#include "tandem/drafting.h"
#include "tests/conformance/model_util.h"

using namespace tandem;

namespace {

// Critical value of chi-square with `df` degrees of freedom at α = 0.001 (Wilson–Hilferty; within
// 0.5 % of the exact quantile for df ≥ 10).
double chi2_critical_0001(int df) {
  const double z = 3.090232, a = 2.0 / (9.0 * df);
  return df * std::pow(1 - a + z * std::sqrt(a), 3);
}

// G-test of observed counts against expected probabilities; cells expected below 5 are pooled.
// Returns {G, critical value at α = 0.001}.
std::pair<double, double> g_test(const std::map<std::vector<int32_t>, int>& observed,
                                 const std::map<std::vector<int32_t>, double>& expected, int n) {
  double g = 0, pooled_e = 0;
  int pooled_o = 0, cells = 0;
  for (const auto& [key, p] : expected) {
    auto it = observed.find(key);
    int o = it == observed.end() ? 0 : it->second;
    if (p * n < 5) {
      pooled_e += p * n, pooled_o += o;
      continue;
    }
    ++cells;
    if (o > 0) g += 2 * o * std::log(o / (p * n));
  }
  for (const auto& [key, o] : observed)
    EXPECT_TRUE(expected.count(key)) << "a sequence of probability 0 was drawn";
  if (pooled_e > 0) {
    ++cells;
    if (pooled_o > 0) g += 2 * pooled_o * std::log(pooled_o / pooled_e);
  }
  return {g, chi2_critical_0001(cells - 1)};
}

TEST(SpeculativeSampling, DistributionEqualsTheCpuSampler) {
  std::mt19937_64 g(11);
  std::uniform_real_distribution<float> u(-6, 6);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> logits(300);
    for (auto& x : logits) x = u(g);
    logits[trial % 300] = -INFINITY;  // a masked token
    if (trial % 7 == 0) logits[5] = logits[6] = logits[7];  // ties
    SamplingParams p;
    p.temperature = 0.3f + float(trial % 5) * 0.4f;
    p.top_k = trial % 3 == 0 ? 0 : 1 + trial % 50;
    p.top_p = trial % 4 == 0 ? 1.0f : 0.5f + 0.1f * float(trial % 5);
    p.min_p = trial % 6 == 0 ? 0.0f : 0.01f * float(trial % 9);
    TokenDist d = sampling_distribution(logits.data(), 300, p);
    auto c = sampling_candidates(logits.data(), 300, p);
    ASSERT_EQ(d.ids, c.ids) << "trial " << trial;
    ASSERT_EQ(d.probs, c.probs) << "trial " << trial;  // bit for bit
  }
}

// Each case: p, q, draft drawn from q; the emitted token must be distributed as p.
// The logprobs a response reports: log_softmax in fp64 against a long-double reference, the top
// list in order (ties by id), the taken token's double shared with its entry, and the errors.
TEST(TokenLogprobs, LogSoftmaxOfTheRawLogits) {
  Rng rng(11);
  std::vector<float> l(300);
  for (auto& x : l) x = float(rng.uniform() * 40 - 20);
  l[7] = l[9] = 25.0f;  // a tie at the top: the lower id first
  long double hi = 25.0L, sum = 0;
  for (float x : l) sum += std::exp((long double)x - hi);
  const long double lse = hi + std::log(sum);
  for (int32_t tok : {0, 7, 123, 299}) {
    TokenLogprobs r = token_logprobs(l.data(), int64_t(l.size()), tok, 5);
    EXPECT_EQ(r.token, tok);
    EXPECT_NEAR(r.logprob, double((long double)l[size_t(tok)] - lse), 1e-12);
    ASSERT_EQ(r.top.size(), 5u);
    EXPECT_EQ(r.top[0].first, 7);
    EXPECT_EQ(r.top[1].first, 9);
    EXPECT_EQ(r.top[0].second, r.top[1].second);
    for (size_t j = 1; j < r.top.size(); ++j) EXPECT_GE(r.top[j - 1].second, r.top[j].second);
    double below = r.top.back().second;
    for (size_t t = 0; t < l.size(); ++t)
      if (std::none_of(r.top.begin(), r.top.end(), [&](auto& e) { return e.first == int32_t(t); }))
        EXPECT_LE(double(l[t]) - double(lse), below + 1e-12);
    if (tok == 7) EXPECT_EQ(r.logprob, r.top[0].second);
  }
  EXPECT_TRUE(token_logprobs(l.data(), 300, 3, 0).top.empty());
  EXPECT_EQ(token_logprobs(l.data(), 4, 3, 20).top.size(), 4u);
  EXPECT_THROW(token_logprobs(l.data(), 300, 300, 1), std::exception);
  l[5] = std::nanf("");
  EXPECT_THROW(token_logprobs(l.data(), 300, 1, 1), std::exception);
}

TEST(SpeculativeSampling, AcceptRuleEmitsExactlyP) {
  struct Case {
    TokenDist p, q;
  };
  const std::vector<Case> cases = {
      {{{0, 1, 2, 3}, {0.4, 0.3, 0.2, 0.1}}, {{0, 1, 2, 3}, {0.1, 0.2, 0.3, 0.4}}},  // reversed
      {{{0, 1, 2}, {0.5, 0.3, 0.2}}, {{3, 4}, {0.5, 0.5}}},                            // disjoint: always rejected
      {{{0, 1, 2}, {0.6, 0.3, 0.1}}, {{0, 1, 2}, {0.6, 0.3, 0.1}}},                    // equal: always accepted
      {{{2, 0, 1}, {0.7, 0.2, 0.1}}, {{0, 5, 2}, {0.5, 0.3, 0.2}}},                    // partial overlap
  };
  const int n = 60000;
  for (size_t c = 0; c < cases.size(); ++c) {
    const auto& [p, q] = cases[c];
    Rng rng(100 + c);
    std::mt19937_64 g(c);
    std::map<std::vector<int32_t>, int> seen;
    int accepted = 0;
    for (int i = 0; i < n; ++i) {
      double x = std::uniform_real_distribution<double>(0, 1)(g), cum = 0;
      size_t j = 0;
      while (j + 1 < q.ids.size() && x >= (cum += q.probs[j])) ++j;
      bool ok;
      int32_t t = speculative_accept(p, q, q.ids[j], rng, ok);
      ++seen[{t}];
      accepted += ok;
    }
    std::map<std::vector<int32_t>, double> want;
    double overlap = 0;
    for (size_t i = 0; i < p.ids.size(); ++i) {
      want[{p.ids[i]}] = p.probs[i];
      overlap += std::min(p.probs[i], q.prob(p.ids[i]));
    }
    auto [gstat, crit] = g_test(seen, want, n);
    EXPECT_LT(gstat, crit) << "case " << c;
    // P(accept) = Σ min(p, q); 5 standard deviations.
    EXPECT_NEAR(double(accepted) / n, overlap, 5 * std::sqrt(overlap * (1 - overlap) / n) + 1e-9) << "case " << c;
  }
}

TEST(SpeculativeSampling, DraftOutsideItsOwnQIsAnError) {
  Rng rng(1);
  bool ok;
  EXPECT_THROW(speculative_accept({{0}, {1.0}}, {{1}, {1.0}}, 0, rng, ok), Error);
}

struct Target {
  std::unique_ptr<Model> model;
  std::vector<int32_t> prompt;
};

Target& latent() {
  static Target t = [] {
    const std::string dir = test::data_path("hf/latent");
    Target t{test::load_model(dir), {}};
    set_thread_count(1);  // a 64-wide model: worker hand-offs cost more than they save
    auto ids = test::read_ids(dir + "/prompt_200.txt");
    t.prompt.assign(ids.begin() + 3, ids.begin() + 23);  // longer than one 16-token chunk
    return t;
  }();
  return t;
}

// With deterministic drafters (q one-hot), acceptance is "draw x ~ p, keep the draft iff x equals
// it", one draw per emitted token as plain decoding makes: a seed gives the plain tokens exactly.
TEST(SpeculativeSampling, SeededOneHotDraftingEqualsPlainSampling) {
  Target& t = latent();
  Model& m = *t.model;
  auto truth = std::make_shared<std::vector<int32_t>>();
  Drafting d(m,
             {{"lookup", test::registry().speculator("lookup")},
              {"random", test::factory_of<test::RandomDrafter>(3, m.desc().vocab, uint64_t(2))},
              {"oracle", test::factory_of<test::OracleDrafter>(truth, 0.2, m.desc().vocab, uint64_t(4))}},
             test::fixed_costs(-1));
  for (uint64_t seed = 0; seed < 24; ++seed) {
    GenerateOptions o;
    o.max_tokens = 64;
    o.context = 256;
    o.stop_at_eos = false;
    o.sampling.temperature = seed % 3 == 0 ? 1.0f : 0.8f;
    o.sampling.top_p = seed % 2 ? 0.95f : 1.0f;
    o.sampling.top_k = seed % 4 == 1 ? 20 : 0;
    o.sampling.seed = seed;
    auto plain = generate(m, t.prompt, o).tokens;
    *truth = t.prompt;
    truth->insert(truth->end(), plain.begin(), plain.end());
    EXPECT_EQ(d.generate(t.prompt, o).tokens, plain) << "seed " << seed;
  }
  EXPECT_GT(d.metrics().accepted_tokens, 100) << d.metrics().summary();
  EXPECT_LT(d.metrics().accepted_tokens, d.metrics().drafted_tokens) << d.metrics().summary();
}

// The exact joint distribution of the first three tokens (top_k 4 at temperature 1), computed
// through the same forward path plain decoding takes, against sampled runs: plain (a check of the
// test itself) and drafted by a drafter that samples from its own q (accepts, rejections and
// residual draws all happen).
TEST(SpeculativeSampling, DraftedSamplingHasThePlainDistribution) {
  Target& t = latent();
  Model& m = *t.model;
  const int64_t V = m.desc().vocab;
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.top_k = 4;

  std::map<std::vector<int32_t>, TokenDist> next;  // generated prefix → distribution of the next token
  std::map<std::vector<int32_t>, double> joint;
  std::vector<float> logits;
  {
    auto seq = m.new_sequence(64);
    m.forward(*seq, t.prompt, ForwardMode::Prefill, logits, false);
    m.commit(*seq, int(t.prompt.size()));
    next[{}] = sampling_distribution(logits.data(), V, sp);
  }
  for (size_t i = 0; i < next[{}].ids.size(); ++i) {
    int32_t a = next[{}].ids[i];
    auto seq = m.new_sequence(64);
    m.forward(*seq, t.prompt, ForwardMode::Prefill, logits, false);
    m.commit(*seq, int(t.prompt.size()));
    m.forward(*seq, {a}, ForwardMode::Verify, logits, false);
    m.commit(*seq, 1);
    TokenDist pb = next[{a}] = sampling_distribution(logits.data(), V, sp);
    for (size_t j = 0; j < pb.ids.size(); ++j) {
      int32_t b = pb.ids[j];
      m.forward(*seq, {b}, ForwardMode::Verify, logits, false);  // not committed: the next b replaces it
      TokenDist pc = next[{a, b}] = sampling_distribution(logits.data(), V, sp);
      for (size_t k = 0; k < pc.ids.size(); ++k)
        joint[{a, b, pc.ids[k]}] = next[{}].probs[i] * pb.probs[j] * pc.probs[k];
    }
  }
  ASSERT_EQ(joint.size(), 64u);

  // q: the target's own top 4 reweighted and reordered, plus two tokens p never draws.
  const size_t P = t.prompt.size();
  auto q_of = [&next, P](const std::vector<int32_t>& h, TokenDist& q) {
    auto it = next.find(std::vector<int32_t>(h.begin() + long(P), h.end()));
    if (it == next.end()) return false;
    const TokenDist& p = it->second;
    q.ids = {p.ids[3], p.ids[1], p.ids[0], p.ids[2]};
    q.probs = {0.3, 0.25, 0.15, 0.1};
    for (int32_t extra = 0; q.ids.size() < 6; ++extra)
      if (p.prob(extra) == 0) q.ids.push_back(extra), q.probs.push_back(0.1);
    return true;
  };
  auto seeds = std::make_shared<uint64_t>(0);
  auto factory = std::make_shared<test::FnFactory>(
      [q_of, seeds]() { return std::make_unique<test::SamplingDrafter>(q_of, 2, 1000 + (*seeds)++); });
  Drafting d(m, {{"sampler", factory}}, test::fixed_costs(2));

  GenerateOptions o;
  o.max_tokens = 4;  // the fourth token leaves room for two drafts; only the first three are counted
  o.context = 64;
  o.stop_at_eos = false;
  o.sampling = sp;
  const int n = 6000;
  std::map<std::vector<int32_t>, int> plain, drafted;
  for (int i = 0; i < n; ++i) {
    o.sampling.seed = uint64_t(i);
    auto a = generate(m, t.prompt, o).tokens, b = d.generate(t.prompt, o).tokens;
    ++plain[{a.begin(), a.begin() + 3}];
    ++drafted[{b.begin(), b.begin() + 3}];
  }
  auto [gp, cp] = g_test(plain, joint, n);
  auto [gd, cd] = g_test(drafted, joint, n);
  EXPECT_LT(gp, cp) << "plain sampling against the exact distribution";
  EXPECT_LT(gd, cd) << "drafted sampling against the exact distribution";
  const DraftMetrics& dm = d.metrics();
  EXPECT_GT(dm.accepted_tokens, dm.drafted_tokens / 5) << dm.summary();
  EXPECT_LT(dm.accepted_tokens, dm.drafted_tokens * 4 / 5) << dm.summary();
  EXPECT_GT(dm.accepted_at.size() > 1 ? dm.accepted_at[1] : 0, 100) << "second drafts accepted too: " << dm.summary();
  std::printf("G plain %.1f, drafted %.1f (critical %.1f at alpha 0.001); %s", gp, gd, cd, dm.summary().c_str());
}

}  // namespace
