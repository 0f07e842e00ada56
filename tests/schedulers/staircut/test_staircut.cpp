// StairCut on synthetic acceptance and verify-cost curves: the analytic argmax of expected tokens
// per second, plain when drafting cannot pay, hysteresis, online adaptation, probes and the guard.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "tandem/error.h"
#include "tandem/staircut.h"

using namespace tandem;

namespace {

std::vector<double> costs(int rows, const std::function<double(int)>& t) {
  std::vector<double> v;
  for (int m = 1; m <= rows; ++m) v.push_back(t(m));
  return v;
}
// A GPU-like staircase: flat inside tiles of 8 rows, a step at each new tile.
double staircase(int m) { return 10e-3 * (1 + 0.01 * (m - 1) + 0.25 * ((m - 1) / 8)); }
double linear(int m) { return 10e-3 * m; }  // compute-bound: verifying m rows costs m plain steps

StairCutOptions quiet() {
  StairCutOptions o;
  o.cost_ewma = 0;
  o.guard_window = 0;
  return o;
}

// Sets every position of (drafter, bucket) to acceptance p(j) with `weight` trials.
void set_curve(StairCut& sc, int d, int b, const std::function<double(int)>& p, double weight = 1000) {
  for (int j = 1; j <= sc.options().max_k; ++j) sc.acceptance().set(d, b, j, p(j) * weight, (1 - p(j)) * weight);
}

// The test's own argmax of E(k) / T_v(k + 1) over k = 0..max_len (k = 0: 1 / T_v(1)).
int brute_force(const std::function<double(int)>& p, const std::vector<double>& t, int max_len, double* best = nullptr) {
  int arg = 0;
  double top = 1 / t[0], e = 1, run = 1;
  for (int k = 1; k <= max_len && k < int(t.size()); ++k) {
    e += run *= p(k);
    if (e / t[size_t(k)] > top) top = e / t[size_t(k)], arg = k;
  }
  if (best) *best = top;
  return arg;
}

TEST(StairCut, PicksTheAnalyticArgmax) {
  const std::vector<std::function<double(int)>> curves = {
      [](int) { return 0.9; },                                  // flat
      [](int j) { return 0.95 - 0.03 * j; },                    // decaying
      [](int j) { return j <= 6 ? 0.99 : 0.2; },                // a copy run that ends
      [](int) { return 0.6; },
  };
  const std::vector<std::vector<double>> tables = {costs(32, staircase), costs(32, [](int m) { return 1e-3 * (1 + 0.1 * (m - 1)); }),
                                                   costs(16, [](int m) { return 1e-3 * std::sqrt(double(m)); })};
  for (size_t c = 0; c < curves.size(); ++c)
    for (size_t t = 0; t < tables.size(); ++t)
      for (int len : {3, 7, 31}) {
        StairCut sc({1}, VerifyCosts(tables[t]), quiet());
        set_curve(sc, 0, 0, curves[c]);
        const int want = brute_force([&](int j) { return sc.acceptance().p(0, 0, j); }, tables[t], len);
        ASSERT_GT(want, 0) << "curve " << c << " table " << t;
        EXPECT_EQ(sc.best_k(0, 0, len), want) << "curve " << c << " table " << t << " len " << len;
        Pick pk;
        for (int step = 0; step < 3; ++step) pk = sc.pick({{0, len, 0}});
        EXPECT_EQ(pk.k, want) << "curve " << c << " table " << t << " len " << len;
        EXPECT_EQ(pk.drafter, 0);
        EXPECT_NEAR(pk.score, sc.score(0, 0, want), 1e-12);
      }
}

TEST(StairCut, StaysPlainWhenDraftingCannotPay) {
  // Verifying m rows costs m plain steps: even 95 % acceptance gives E(k) < k + 1.
  StairCut sc({1}, VerifyCosts(costs(32, linear)), quiet());
  set_curve(sc, 0, 0, [](int) { return 0.95; });
  for (int step = 0; step < 50; ++step) EXPECT_EQ(sc.pick({{0, 31, 0}}).k, 0);
  // Cheap verification but drafts that are almost never right.
  StairCut low({1}, VerifyCosts(costs(32, staircase)), quiet());
  set_curve(low, 0, 0, [](int) { return 0.02; });
  for (int step = 0; step < 50; ++step) EXPECT_EQ(low.pick({{0, 31, 0}}).k, 0);
  // No offer: plain.
  EXPECT_EQ(low.pick({}).k, 0);
  EXPECT_EQ(low.pick({{0, 0, 0}}).drafter, -1);
}

TEST(StairCut, EntersPlainPastTheMarginLeavesWhenPlainWinsForPersistSteps) {
  // T_v(2) = 1.1 T_v(1): one draft pays when 1 + p > 1.1 · (1 + h0) = 1.155.
  StairCut sc({1}, VerifyCosts({1e-3, 1.1e-3}), quiet());
  set_curve(sc, 0, 0, [](int) { return 0.14; });  // 1.14: better than plain, inside the margin
  for (int step = 0; step < 20; ++step) EXPECT_EQ(sc.pick({{0, 1, 0}}).k, 0);
  set_curve(sc, 0, 0, [](int) { return 0.30; });
  EXPECT_EQ(sc.pick({{0, 1, 0}}).k, 0) << "one step is not enough";
  EXPECT_EQ(sc.pick({{0, 1, 0}}).k, 1) << "persist_steps = 2";
  set_curve(sc, 0, 0, [](int) { return 0.12; });  // drafting wins by 1.8 %: inside the band, keep drafting
  for (int step = 0; step < 20; ++step) EXPECT_EQ(sc.pick({{0, 1, 0}}).k, 1);
  set_curve(sc, 0, 0, [](int) { return 0.07; });  // plain wins by 2.8 %: leaving needs no margin
  EXPECT_EQ(sc.pick({{0, 1, 0}}).k, 1) << "one step is not enough";
  EXPECT_EQ(sc.pick({{0, 1, 0}}).k, 0);
}

TEST(StairCut, HysteresisHoldsUnderTwoPercentNoise) {
  // With p = 0.8 and T_v(m) = 1 + 0.25 (m − 1), k = 3 and k = 4 score within 0.4 % of each other:
  // jittering acceptance by ±2 % flips the bare argmax often, the stairs almost never.
  auto flips = [](const StairCutOptions& o) {
    StairCut sc({1}, VerifyCosts(costs(32, [](int m) { return 1e-3 * (1 + 0.25 * (m - 1)); })), o);
    std::mt19937 g(5);
    std::uniform_real_distribution<double> jitter(-0.02, 0.02);
    int changes = 0, last = -1;
    for (int step = 0; step < 400; ++step) {
      const double p = 0.8 * (1 + jitter(g));
      set_curve(sc, 0, 0, [&](int) { return std::min(p, 1.0); });
      int k = sc.pick({{0, 31, 0}}).k;
      changes += last >= 0 && k != last;
      last = k;
    }
    return changes;
  };
  StairCutOptions eager = quiet();
  eager.margin = 0;
  eager.persist_steps = 1;
  const int raw = flips(eager), stairs = flips(quiet());
  EXPECT_GT(raw, 20);
  EXPECT_LE(stairs, 2) << "raw argmax changed " << raw << " times";
}

TEST(StairCut, MovesLevelsWhenAcceptanceChanges) {
  StairCut sc({1}, VerifyCosts(costs(32, staircase)), quiet());
  set_curve(sc, 0, 0, [](int) { return 0.97; });
  sc.pick({{0, 31, 0}});
  const int high = sc.pick({{0, 31, 0}}).k;
  EXPECT_GE(high, 16);
  set_curve(sc, 0, 0, [](int) { return 0.6; });
  const int low = sc.best_k(0, 0, 31);
  ASSERT_LT(low, high);
  EXPECT_EQ(sc.pick({{0, 31, 0}}).k, low) << "the per-step cut may shorten the level at once";
  EXPECT_EQ(sc.level(), high) << "... while the level waits";
  sc.pick({{0, 31, 0}});
  EXPECT_EQ(sc.level(), low);
  // A short proposal is cut to its length, and does not drag the level down.
  set_curve(sc, 0, 0, [](int) { return 0.97; });
  for (int step = 0; step < 5; ++step) EXPECT_EQ(sc.pick({{0, 2, 0}}).k, 2);
  EXPECT_EQ(sc.level(), low) << "proposal lengths are not preferences";
}

// Spec §5.7: a copy workload leaves plain within 4 steps from cold, learning from retro-scoring;
// when the drafts turn mostly wrong, it returns to plain.
TEST(StairCut, AdaptsOnlineFromRetroScoring) {
  // Verifying costs 50 % more per row (a CPU-like machine): drafting needs high acceptance.
  StairCut sc({1}, VerifyCosts(costs(32, [](int m) { return 1e-3 * (1 + 0.5 * (m - 1)); })), quiet());
  int first_draft = -1;
  for (int step = 0; step < 40; ++step) {  // cold (prior 0.5); every proposed token right
    Pick pk = sc.pick({{0, 31, 0}});
    if (pk.k > 0 && first_draft < 0) first_draft = step;
    for (int j = 1; j <= 31; ++j) sc.record_acceptance(0, 0, j, true);
  }
  ASSERT_GE(first_draft, 0);
  EXPECT_LT(first_draft, 4);
  EXPECT_GE(sc.level(), 3) << "chains once the copy run is learned";
  // Prose: each draft right with probability 0.3. Back to plain once the estimates drop.
  int plain_at = -1;
  std::mt19937 g(1);
  for (int step = 0; step < 1000 && plain_at < 0; ++step) {
    if (sc.pick({{0, 31, 0}}).k == 0) plain_at = step;
    for (int j = 1; j <= 31; ++j) {
      bool ok = g() % 10 < 3;
      sc.record_acceptance(0, 0, j, ok);
      if (!ok) break;
    }
  }
  EXPECT_GE(plain_at, 0) << "still drafting at level " << sc.level();
  EXPECT_LT(plain_at, 200);
}

// A drafter that is always right, retro-scored the way the drafting loop does it (a position is
// judged once the text reaches it), on the H200's Bolt verify curve (2026-11-30: a jump at m = 5
// and m = 17; k = 3 gives 2.6x, k = 15 3.35x). Positions past the verified ones are scored a few
// steps late; until then they must not count as coin flips, or the picker sits at k = 3 (it did for
// 36 steps with flat Beta(1, 1) priors, and again each time a new copy-run bucket opened).
TEST(StairCut, AnAlwaysRightDrafterClimbsPastTheStairsBeforeDeepPositionsAreScored) {
  const double r[32] = {1.000, 1.110, 1.323, 1.518, 2.039, 2.297, 2.551, 2.819, 3.086, 3.346, 3.597,
                        3.860, 4.033, 4.297, 4.541, 4.779, 6.394, 6.711, 6.793, 6.985, 7.203, 7.418,
                        7.821, 7.898, 8.103, 8.308, 8.527, 8.760, 8.969, 9.193, 9.424, 9.666};
  std::vector<double> t;
  for (double v : r) t.push_back(10.3e-3 * v);
  StairCutOptions o;  // defaults, online costs and guard included
  StairCut sc({3}, VerifyCosts(t), o);  // three copy-run bins, as the drafting loop keeps them
  struct Open {
    int bucket;
    long start, judged, len;
  };
  std::vector<Open> open;
  long text = 0, full_runs = 0;
  double seconds = 0;
  int first_deep = -1;
  for (int step = 0; step < 48; ++step) {
    const int bucket = full_runs == 0 ? 0 : full_runs <= 2 ? 1 : 2;
    open.push_back({bucket, text, 0, 31});
    const Pick pk = sc.pick({{0, 31, bucket}});
    if (pk.k >= 7 && first_deep < 0) first_deep = step;
    seconds += t[size_t(pk.k)];
    sc.record_step(pk.k + 1, t[size_t(pk.k)], 0, pk.k + 1);
    text += pk.k + 1;
    for (auto it = open.begin(); it != open.end();) {
      while (it->judged < it->len && it->start + it->judged < text) sc.record_acceptance(0, it->bucket, int(++it->judged), true);
      if (it->judged == it->len) ++full_runs, it = open.erase(it);
      else ++it;
    }
  }
  EXPECT_GE(first_deep, 0) << "never verified 7 or more drafts";
  EXPECT_LE(first_deep, 12);
  const double ratio = double(text) / seconds * t[0];
  EXPECT_GT(ratio, 3.0) << "tokens per second relative to plain";
}

TEST(StairCut, PicksAmongDraftersAndBuckets) {
  StairCut sc({2, 1}, VerifyCosts(costs(32, staircase)), quiet());
  set_curve(sc, 0, 0, [](int) { return 0.3; });
  set_curve(sc, 0, 1, [](int) { return 0.95; });
  set_curve(sc, 1, 0, [](int) { return 0.7; });
  sc.pick({{0, 20, 0}, {1, 20, 0}});
  Pick pk = sc.pick({{0, 20, 0}, {1, 20, 0}});
  EXPECT_EQ(pk.drafter, 1);
  pk = sc.pick({{0, 20, 1}, {1, 20, 0}});
  EXPECT_EQ(pk.drafter, 0) << "drafter 0's bucket 1 is the better chain";
  // Drafting time counts: a slow drafter loses to a free one of equal acceptance.
  StairCut t({1, 1}, VerifyCosts(costs(32, staircase)), StairCutOptions{});
  set_curve(t, 0, 0, [](int) { return 0.8; });
  set_curve(t, 1, 0, [](int) { return 0.8; });
  t.record_draft_time(0, 20e-3);
  t.record_draft_time(1, 1e-6);
  t.pick({{0, 20, 0}, {1, 20, 0}});
  EXPECT_EQ(t.pick({{0, 20, 0}, {1, 20, 0}}).drafter, 1);
}

TEST(StairCut, ForcedKIgnoresTheEstimates) {
  StairCutOptions o = quiet();
  o.force_k = 5;
  StairCut sc({1}, VerifyCosts(costs(32, linear)), o);
  set_curve(sc, 0, 0, [](int) { return 0.0; });
  EXPECT_EQ(sc.pick({{0, 31, 0}}).k, 5);
  EXPECT_EQ(sc.pick({{0, 3, 0}}).k, 3);
  EXPECT_EQ(sc.pick({}).k, 0);
  EXPECT_TRUE(sc.wants(0, 5));
}

TEST(StairCut, ProbesAnExpensiveDrafterWhilePlain) {
  StairCutOptions o = quiet();
  o.probe_every = 16;
  StairCut sc({1}, VerifyCosts(costs(32, linear)), o);  // drafting never pays
  int probes = 0;
  for (int step = 0; step < 160; ++step) {
    if (sc.wants(0, 7)) ++probes;
    EXPECT_EQ(sc.pick({}).k, 0);
  }
  EXPECT_EQ(probes, 9);  // at plain steps 16, 32, …, 144
  // With costs where it may pay, it is wanted on every step.
  StairCut cheap({1}, VerifyCosts(costs(32, staircase)), o);
  for (int step = 0; step < 10; ++step) EXPECT_TRUE(cheap.wants(0, 7));
}

TEST(StairCut, ProbesASlowDrafterWithinTheProbeBudget) {
  StairCutOptions o = quiet();
  o.probe_every = 16;
  o.probe_budget = 0.02;
  o.cost_ewma = 1;  // the last propose time is the estimate
  std::vector<double> t = costs(32, linear);
  StairCut sc({1}, VerifyCosts(t), o);  // drafting never pays
  EXPECT_EQ(sc.probe_interval(0), 16);  // not measured yet
  // A proposal costing 1.5 plain steps: 1.5 / 0.02 = 75 plain steps between probes.
  sc.record_draft_time(0, 1.5 * t[0]);
  EXPECT_EQ(sc.probe_interval(0), 75);
  int probes = 0, last = -1, gap = 0;
  for (int step = 0; step < 400; ++step) {
    if (sc.wants(0, 7)) {
      ++probes;
      if (last >= 0) gap = step - last;
      last = step;
      sc.record_draft_time(0, 1.5 * t[0]);
    }
    EXPECT_EQ(sc.pick({}).k, 0);
  }
  EXPECT_EQ(probes, 5);  // at plain steps 75, 150, …, 375: about 2 % of the time in proposals
  EXPECT_EQ(gap, 75);
  // A cheap drafter keeps probe_every; budget 0 switches the stretch off.
  sc.record_draft_time(0, 0.1 * t[0]);
  EXPECT_EQ(sc.probe_interval(0), 16);
  o.probe_budget = 0;
  StairCut off({1}, VerifyCosts(t), o);
  off.record_draft_time(0, 10 * t[0]);
  EXPECT_EQ(off.probe_interval(0), 16);
}

TEST(StairCut, GuardForcesPlainWhenDraftingIsSlowerThanMeasured) {
  StairCutOptions o;
  o.cost_ewma = 0;
  o.guard_window = 8;
  o.guard_plain_steps = 5;
  StairCut sc({1}, VerifyCosts(costs(32, staircase)), o);
  set_curve(sc, 0, 0, [](int) { return 0.9; });
  sc.pick({{0, 8, 0}});
  ASSERT_GT(sc.pick({{0, 8, 0}}).k, 0);
  // Eight drafted steps that each took 4 plain steps' time for 2 tokens: half plain's speed.
  for (int i = 0; i < 8; ++i) sc.record_step(9, 40e-3, 0, 2);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(sc.pick({{0, 8, 0}}).k, 0) << "forced plain step " << i;
  EXPECT_FALSE(sc.wants(0, 8) && sc.level() > 0);
  sc.pick({{0, 8, 0}});
  EXPECT_GT(sc.pick({{0, 8, 0}}).k, 0) << "re-probed after the plain stretch";
}

TEST(StairCut, OnlineCostsFollowTheMachine) {
  StairCutOptions o;
  o.cost_ewma = 0.5;
  StairCut sc({1}, VerifyCosts(costs(8, staircase)), o);
  const double before = sc.costs().at(4);
  for (int i = 0; i < 30; ++i) sc.record_step(4, 80e-3, 0, 1);
  EXPECT_NEAR(sc.costs().at(4), 80e-3, 1e-6);
  // The other rows keep the start-up shape at the new level.
  for (int m = 1; m <= 8; ++m) EXPECT_NEAR(sc.costs().at(m) / sc.costs().at(4), staircase(m) / staircase(4), 1e-9);
  EXPECT_NE(before, sc.costs().at(4));
}

TEST(StairCut, AStaleStartupTableDoesNotKeepAUselessDrafterOn) {
  // The table was measured at a long context (T_v(1) = 10 ms, T_v(2) = 11.1 ms); the running request
  // is at a short one, where a k = 1 step takes 9.5 ms. A drafter that is never right must be
  // dropped: with only T_v(2) following the machine, 1/T_v(1) stayed below 1/T_v(2).
  StairCutOptions o;
  o.cost_ewma = 0.1;
  o.guard_window = 0;
  StairCut sc({1}, VerifyCosts({10e-3, 11.1e-3, 12.2e-3}), o);
  int drafted = 0;
  for (int i = 0; i < 200; ++i) {
    const Pick p = sc.pick({{0, 1, 0}});  // one-token proposals, as the H200 run verified
    sc.record_acceptance(0, 0, 1, false);  // every proposal is retro-scored: the first token is wrong
    if (p.k > 0) {
      ++drafted;
      sc.record_step(2, 9.5e-3, 0, 1);
    } else {
      sc.record_step(1, 8.6e-3, 0, 1);
    }
  }
  EXPECT_LT(sc.costs().at(1), 9.5e-3);
  EXPECT_EQ(sc.pick({{0, 1, 0}}).k, 0);
  EXPECT_LT(drafted, 20);
}

TEST(VerifyCosts, FillsGapsAndNeverExtrapolates) {
  VerifyCosts c({1.0, 0, 0, 4.0, 5.0, 0, 0});
  ASSERT_EQ(c.max_rows(), 5);
  EXPECT_DOUBLE_EQ(c.at(2), 2.0);
  EXPECT_DOUBLE_EQ(c.at(3), 3.0);
  EXPECT_THROW(VerifyCosts({0, 1.0}), Error);
  EXPECT_THROW(VerifyCosts(std::vector<double>{}), Error);
}

TEST(AcceptanceStats, BetaCountsHalvePastTheLimit) {
  AcceptanceStats a({1}, 4, 100);
  EXPECT_DOUBLE_EQ(a.p(0, 0, 1), 0.5);
  for (int i = 0; i < 99; ++i) a.record(0, 0, 1, true);
  EXPECT_NEAR(a.p(0, 0, 1), 100.0 / 101.0, 1e-12);
  a.record(0, 0, 1, true);
  a.record(0, 0, 1, false);  // 101 trials: halve
  EXPECT_NEAR(a.p(0, 0, 1), (1 + 50.0) / (1 + 50.0 + 1 + 0.5), 1e-12);
  // Position 2 was never scored: its estimate is position 1's (not a coin flip).
  EXPECT_NEAR(a.p(0, 0, 2), a.p(0, 0, 1), 1e-12);
  EXPECT_NEAR(a.expected_tokens(0, 0, 2), 1 + a.p(0, 0, 1) + a.p(0, 0, 1) * a.p(0, 0, 1), 1e-12);
  a.record(0, 0, 9, true);  // past max_k: ignored
  EXPECT_THROW(a.p(0, 1, 1), Error);
}

}  // namespace
