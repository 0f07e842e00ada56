// The drafting session around the loop: metrics that add up, start-up cost measurement, drafters
// from the registry and from profiles, and one-line errors for unknown drafters and bad settings.
#include <gtest/gtest.h>

#include <cstdio>
#include <numeric>

#include "drafters.h"
#include "tandem/generate.h"
#include "tandem/parallel.h"
#include "tandem/profile.h"
#include "tandem/drafting.h"
#include "tests/conformance/model_util.h"

using namespace tandem;

namespace {

Model& nolatent() {
  static auto m = [] {
    auto m = test::load_model(test::data_path("hf/nolatent"));
    set_thread_count(1);  // a 64-wide model: worker hand-offs cost more than they save
    return m;
  }();
  return *m;
}

std::vector<int32_t> prompt() {
  auto ids = test::read_ids(test::data_path("hf/nolatent/prompt_200.txt"));
  std::vector<int32_t> p(ids.begin(), ids.begin() + 30);
  p.insert(p.end(), ids.begin(), ids.begin() + 20);  // a repeat, so the lookup finds matches
  return p;
}

template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << "one line expected: " << m;
    return m;
  }
  return "(no error)";
}

TEST(Drafting, MetricsAddUp) {
  Model& m = nolatent();
  auto truth = std::make_shared<std::vector<int32_t>>();
  DraftOptions o;
  o.verify_costs = {1e-3, 1.05e-3, 1.1e-3, 1.15e-3, 1.2e-3, 1.25e-3, 1.3e-3, 1.35e-3};
  o.staircut.cost_ewma = 0;
  o.staircut.guard_window = 0;
  Drafting d(m,
             {{"lookup", test::registry().speculator("lookup")},
              {"oracle", test::factory_of<test::OracleDrafter>(truth, 0.3, m.desc().vocab, uint64_t(3))}},
             o);
  auto plain = generate(m, prompt(), test::run_options(200)).tokens;
  *truth = prompt();
  truth->insert(truth->end(), plain.begin(), plain.end());
  DraftMetrics dm;
  auto got = d.generate(prompt(), test::run_options(200), {}, &dm).tokens;
  ASSERT_EQ(got, plain);

  EXPECT_EQ(dm.generated_tokens, 200);
  EXPECT_EQ(std::accumulate(dm.k_histogram.begin(), dm.k_histogram.end(), int64_t(0)), dm.steps);
  EXPECT_EQ(dm.k_histogram[0], dm.plain_steps);
  EXPECT_EQ(dm.steps, dm.plain_steps + dm.drafts);
  int64_t drafted = 0;
  for (size_t k = 0; k < dm.k_histogram.size(); ++k) drafted += int64_t(k) * dm.k_histogram[k];
  EXPECT_EQ(drafted, dm.drafted_tokens);
  // Every step commits its accepted drafts plus the target's own token; the prefill gives the first.
  EXPECT_EQ(dm.generated_tokens, 1 + dm.steps + dm.accepted_tokens);
  EXPECT_EQ(std::accumulate(dm.accepted_at.begin(), dm.accepted_at.end(), int64_t(0)), dm.accepted_tokens);
  for (size_t j = 0; j < dm.tried_at.size(); ++j) {
    EXPECT_LE(dm.accepted_at[j], dm.tried_at[j]);
    if (j) EXPECT_LE(dm.tried_at[j], dm.accepted_at[j - 1]) << "position " << j + 1 << " tried without its prefix";
  }
  ASSERT_EQ(dm.drafters.size(), 2u);
  EXPECT_EQ(dm.drafters[0].drafts + dm.drafters[1].drafts, dm.drafts);
  EXPECT_EQ(dm.drafters[0].accepted_tokens + dm.drafters[1].accepted_tokens, dm.accepted_tokens);
  EXPECT_GT(dm.drafters[0].proposals, 0);
  EXPECT_NEAR(dm.tokens_per_step(), double(199) / double(dm.steps), 1e-12);

  // The session's totals are the sum over requests.
  d.generate(prompt(), test::run_options(50));
  EXPECT_EQ(d.metrics().generated_tokens, 250);
  EXPECT_NE(dm.summary().find("acceptance by position"), std::string::npos);
}

// A drafter's stage times (Speculator::stages()) add up by stage name over requests; a stage seen in
// one request only is kept.
TEST(Drafting, StageTimesAddUpByName) {
  DraftMetrics a, b, total;
  a.drafters.push_back({});
  a.drafters[0].name = "lilicorr";
  a.drafters[0].stages = {{"catch-up", 2, 0.5, 7}, {"block", 2, 1.0, 0}};
  b.drafters.push_back({});
  b.drafters[0].name = "lilicorr";
  b.drafters[0].stages = {{"block", 3, 2.0, 0}, {"flush", 1, 0.25, 64}};
  total.add(a);
  total.add(b);
  ASSERT_EQ(total.drafters.size(), 1u);
  const auto& st = total.drafters[0].stages;
  ASSERT_EQ(st.size(), 3u);
  EXPECT_EQ(st[0].name, "catch-up");
  EXPECT_EQ(st[0].count, 2);
  EXPECT_EQ(st[0].items, 7);
  EXPECT_EQ(st[1].name, "block");
  EXPECT_EQ(st[1].count, 5);
  EXPECT_DOUBLE_EQ(st[1].seconds, 3.0);
  EXPECT_EQ(st[2].name, "flush");
  EXPECT_EQ(st[2].items, 64);
}

// The trace hook sees every verify pass: each drafter's proposal, the chain and k, and what was
// accepted; the committed lengths chain and the emitted tokens are the output. The retro-scored
// counters (every proposal, verified or not) agree with the trace and the verified counters.
TEST(Drafting, TraceAndRetroScoredCountersSeeEveryStep) {
  Model& m = nolatent();
  auto truth = std::make_shared<std::vector<int32_t>>();
  DraftOptions o = test::fixed_costs();
  Drafting d(m,
             {{"lookup", test::registry().speculator("lookup")},
              {"oracle", test::factory_of<test::OracleDrafter>(truth, 0.3, m.desc().vocab, uint64_t(5))}},
             o);
  auto plain = generate(m, prompt(), test::run_options(200)).tokens;
  *truth = prompt();
  truth->insert(truth->end(), plain.begin(), plain.end());
  std::vector<DraftStep> steps;
  d.set_trace([&](const DraftStep& s) { steps.push_back(s); });
  DraftMetrics dm;
  ASSERT_EQ(d.generate(prompt(), test::run_options(200), {}, &dm).tokens, plain);

  ASSERT_EQ(int64_t(steps.size()), dm.steps);
  const test::TraceCounts c = test::check_trace(steps, prompt().size(), plain, {"lookup", "oracle"});
  const auto& proposed = c.proposed;
  EXPECT_TRUE(steps.back().has_bonus);  // max_tokens caps k, so the last step ends on the target's token
  EXPECT_GT(c.partial, 0) << "no chain was partly rejected";
  EXPECT_GT(c.full, 0) << "no chain was accepted whole";
  EXPECT_GT(proposed[0], 0) << "lookup proposed nothing";
  EXPECT_GT(proposed[1], 0) << "the oracle proposed nothing";

  ASSERT_EQ(dm.drafters.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const auto& pd = dm.drafters[i];
    EXPECT_EQ(std::accumulate(pd.proposed_at.begin(), pd.proposed_at.end(), int64_t(0)), proposed[i]) << pd.name;
    for (size_t j = 0; j < pd.proposed_at.size(); ++j) {
      EXPECT_LE(pd.matched_at[j], pd.reached_at[j]);
      EXPECT_LE(pd.reached_at[j], pd.proposed_at[j]);
      if (j) EXPECT_LE(pd.reached_at[j], pd.matched_at[j - 1]) << pd.name << " position " << j + 1;
      // Greedy: a verified draft was judged, and an accepted one matched.
      EXPECT_LE(pd.tried_at[j], pd.reached_at[j]) << pd.name << " position " << j + 1;
      EXPECT_LE(pd.accepted_at[j], pd.matched_at[j]) << pd.name << " position " << j + 1;
    }
  }
  // The oracle corrupts 30 % of its tokens: position 1 matches about 70 % of the time.
  const auto& oracle = dm.drafters[1];
  ASSERT_GT(oracle.reached_at[0], 50);
  EXPECT_NEAR(double(oracle.matched_at[0]) / double(oracle.reached_at[0]), 0.7, 0.15) << dm.summary();
  EXPECT_NE(dm.position_table().find("drafter oracle proposed, matched/reached at j: 1:"), std::string::npos)
      << dm.position_table();
}

// A block drafter (the plain run's own tokens, 3 at most) and a long drafter that is right half the
// time: StairCut picks the block, and where the long drafter proposes the same 3 tokens (about 1 step
// in 8) the chain goes on with its continuation (StairCut::extend_k). The extended steps verify the
// long drafter's tokens past the block, accept some of them, count them as its own, and the text is
// the plain text.
class BlockOracle : public test::OracleDrafter {
 public:
  using OracleDrafter::OracleDrafter;
  void propose(int max_n, Draft& out) override { OracleDrafter::propose(std::min(max_n, 3), out); }
};

TEST(Drafting, AnAgreeingDrafterExtendsTheChain) {
  Model& m = nolatent();
  auto truth = std::make_shared<std::vector<int32_t>>();
  DraftOptions o = test::fixed_costs();
  Drafting d(m,
             {{"block", test::factory_of<BlockOracle>(truth, 0.0, m.desc().vocab, uint64_t(7))},
              {"long", test::factory_of<test::OracleDrafter>(truth, 0.5, m.desc().vocab, uint64_t(8))}},
             o);
  auto plain = generate(m, prompt(), test::run_options(300)).tokens;
  *truth = prompt();
  truth->insert(truth->end(), plain.begin(), plain.end());
  std::vector<DraftStep> steps;
  d.set_trace([&](const DraftStep& s) { steps.push_back(s); });
  DraftMetrics dm;
  ASSERT_EQ(d.generate(prompt(), test::run_options(300), {}, &dm).tokens, plain);

  const test::TraceCounts c = test::check_trace(steps, prompt().size(), plain, {"block", "long"});
  EXPECT_GT(c.extended, 0) << "no chain was extended\n" << dm.summary();
  EXPECT_GT(c.past_extension, 0) << "no extension draft was ever accepted";
  ASSERT_EQ(dm.drafters.size(), 2u);
  const auto &block = dm.drafters[0], &lng = dm.drafters[1];
  EXPECT_EQ(lng.extensions, c.extended);
  EXPECT_GT(block.drafts, lng.drafts) << "the block drafter should be the one StairCut picks";
  // Totals still add up: drafted and accepted tokens split between the chain's drafter and its
  // extender, per position too.
  EXPECT_EQ(block.drafted_tokens + lng.drafted_tokens, dm.drafted_tokens);
  EXPECT_EQ(block.accepted_tokens + lng.accepted_tokens, dm.accepted_tokens);
  for (size_t j = 0; j < dm.tried_at.size(); ++j) {
    auto at = [j](const std::vector<int64_t>& v) { return j < v.size() ? v[j] : int64_t(0); };
    EXPECT_EQ(at(block.tried_at) + at(lng.tried_at), dm.tried_at[j]) << "position " << j + 1;
    EXPECT_EQ(at(block.accepted_at) + at(lng.accepted_at), dm.accepted_at[j]) << "position " << j + 1;
  }
  // The block drafter never proposes past 3: positions 4 and on are the extension's.
  for (size_t j = 3; j < block.tried_at.size(); ++j) EXPECT_EQ(block.tried_at[j], 0) << "position " << j + 1;
  EXPECT_GT(dm.tried_at.size() > 3 ? dm.tried_at[3] : 0, 0) << "no draft past the block was verified";
  std::printf("[measure] extended %d of %lld steps; %d accepted past the block; acceptance %.1f %%\n", c.extended,
              (long long)dm.steps, c.past_extension, 100.0 * double(dm.accepted_tokens) / double(dm.drafted_tokens));
}

// Costs measured at start-up (no table given) size the picker, and it drafts by them: the oracle
// (the plain run's own tokens, 1 in 20 corrupted) pays wherever verifying 6 rows costs less than ~5
// plain steps (2.5-5x measured on two loaded cores), so its drafts are verified and most accepted.
TEST(Drafting, MeasuresVerifyCostsAtStartUp) {
  Model& m = nolatent();
  auto t = measure_verify_costs(m, 6, 64, 3);
  ASSERT_EQ(t.size(), 6u);
  for (double x : t) EXPECT_GT(x, 0);
  DraftOptions o;
  o.staircut.max_k = 5;
  o.cost_context = 64;
  o.cost_reps = 2;
  auto truth = std::make_shared<std::vector<int32_t>>(prompt());
  Drafting d(m,
             {{"lookup", test::registry().speculator("lookup")},
              {"oracle", test::factory_of<test::OracleDrafter>(truth, 0.05, m.desc().vocab, uint64_t(4))}},
             o);
  EXPECT_EQ(d.staircut().costs().max_rows(), 6);
  const auto plain = generate(m, prompt(), test::run_options(80)).tokens;
  truth->insert(truth->end(), plain.begin(), plain.end());
  DraftMetrics dm;
  EXPECT_EQ(d.generate(prompt(), test::run_options(80), {}, &dm).tokens, plain);
  EXPECT_GT(dm.drafts, 0) << dm.summary();
  EXPECT_GT(dm.accepted_tokens, 0) << dm.summary();
  EXPECT_LT(dm.accepted_tokens, dm.drafted_tokens) << dm.summary();
  std::printf("[ accept ] measured costs: %lld of %lld draft tokens accepted (%.1f %%); costs (ms):",
              (long long)dm.accepted_tokens, (long long)dm.drafted_tokens, 100.0 * dm.acceptance());
  for (double x : t) std::printf(" %.3f", x * 1e3);
  std::printf("\n");
}

TEST(Drafting, UnknownDrafterNamesWhatIsAvailable) {
  DraftOptions o;
  o.drafters = {"lookahead"};
  o.verify_costs = {1e-3, 1e-3};
  std::string e = error_of([&] { Drafting d(nolatent(), test::registry(), o); });
  EXPECT_NE(e.find("no speculator plugin provides 'lookahead'"), std::string::npos) << e;
  EXPECT_NE(e.find("available: lilicorr, lookup"), std::string::npos) << e;
}

TEST(Drafting, BadDrafterSettingsNameTheKey) {
  DraftOptions o;
  o.drafters = {"lookup"};
  o.verify_costs = {1e-3, 1e-3};
  o.settings["lookup"] = SpeculatorSettings("/cfg/p.yaml", "draft.lookup", {{"n_min", "0"}});
  std::string e = error_of([&] { Drafting d(nolatent(), test::registry(), o); });
  EXPECT_NE(e.find("/cfg/p.yaml: key 'draft.lookup.n_min' must be an integer in [1, 64], found '0'"), std::string::npos)
      << e;
  o.settings["lookup"] = SpeculatorSettings("/cfg/p.yaml", "draft.lookup", {{"max_drafts", "8"}});
  e = error_of([&] { Drafting d(nolatent(), test::registry(), o); });
  EXPECT_NE(e.find("/cfg/p.yaml: unknown key 'draft.lookup.max_drafts' (expected one of: "), std::string::npos) << e;
  EXPECT_NE(e.find("max_draft"), std::string::npos) << e;
  o.settings.clear();
  o.settings["oracle"] = {};
  e = error_of([&] { Drafting d(nolatent(), test::registry(), o); });
  EXPECT_NE(e.find("settings for 'oracle', which is not among the drafters in use"), std::string::npos) << e;
}

TEST(Drafting, DrafterListParsing) {
  EXPECT_EQ(parse_drafter_names("none"), std::vector<std::string>{});
  EXPECT_EQ(parse_drafter_names("lookup"), std::vector<std::string>{"lookup"});
  EXPECT_EQ(parse_drafter_names("lookup, lilicorr"), (std::vector<std::string>{"lookup", "lilicorr"}));
  EXPECT_NE(error_of([] { parse_drafter_names("lookup,,x"); }).find("empty name"), std::string::npos);
  EXPECT_NE(error_of([] { parse_drafter_names("a,a"); }).find("'a' is named twice"), std::string::npos);
  EXPECT_NE(error_of([] { parse_drafter_names("none,lookup"); }).find("'none' cannot be combined"), std::string::npos);
}

std::string profile_error(const std::string& draft) {
  return error_of([&] { parse_profile("model: x\n" + draft, "/cfg/p.yaml"); });
}

TEST(DraftProfile, ParsesTheDraftSection) {
  Profile p = parse_profile(R"(
model: x
draft:
  drafters: [lookup]
  lookup: {n_min: 3, n_max: 12, max_draft: 16, min_matches: 2}
  staircut: {margin: 0.02, margin_plain: 0.1, persist_steps: 3, probe_every: 8, probe_budget: 0.05, force_k: 4,
             max_k: 15,
             halve_after: 1000, cost_ewma: 0.2, guard_window: 32, guard_ratio: 0.9, guard_plain_steps: 16,
             verify_costs: [0.02, 0.021, 0.023], cost_context: 512, cost_reps: 3}
)", "/cfg/p.yaml");
  EXPECT_EQ(p.draft.drafters, std::vector<std::string>{"lookup"});
  EXPECT_EQ(p.draft.settings.at("lookup").values().at("n_max"), "12");
  EXPECT_DOUBLE_EQ(p.draft.staircut.margin, 0.02);
  EXPECT_EQ(p.draft.staircut.persist_steps, 3);
  EXPECT_EQ(p.draft.staircut.force_k, 4);
  EXPECT_DOUBLE_EQ(p.draft.staircut.probe_budget, 0.05);
  EXPECT_EQ(p.draft.staircut.max_k, 15);
  EXPECT_EQ(p.draft.staircut.guard_plain_steps, 16);
  EXPECT_EQ(p.draft.verify_costs.size(), 3u);
  EXPECT_EQ(p.draft.cost_context, 512);
  EXPECT_EQ(parse_profile("model: x\ndraft: {drafters: none}\n", "p.yaml").draft.drafters.size(), 0u);
  EXPECT_EQ(parse_profile("model: x\ndraft: {drafters: 'lookup,b'}\n", "p.yaml").draft.drafters.size(), 2u);
}

TEST(DraftProfile, BadValuesNameTheKeyAndFile) {
  EXPECT_NE(profile_error("draft: {drafters: [lookup], lokup: {n_min: 2}}").find(
                "/cfg/p.yaml: unknown key 'draft.lokup' (expected one of: drafters, lookup, staircut)"),
            std::string::npos);
  EXPECT_NE(profile_error("draft: {drafters: [lookup], staircut: {margn: 1}}").find("unknown key 'draft.staircut.margn'"),
            std::string::npos);
  EXPECT_NE(profile_error("draft: {staircut: {margin: -0.1}}").find("key 'draft.staircut.margin' must be in [0, 10]"),
            std::string::npos);
  EXPECT_NE(profile_error("draft: {staircut: {probe_budget: 2}}").find("key 'draft.staircut.probe_budget' must be in [0, 1]"),
            std::string::npos);
  EXPECT_NE(profile_error("draft: {staircut: {max_k: 0}}").find("key 'draft.staircut.max_k' must be in [1, 255]"),
            std::string::npos);
  EXPECT_NE(profile_error("draft: {staircut: {persist_steps: two}}").find("key 'draft.staircut.persist_steps' must be an integer"),
            std::string::npos);
  EXPECT_NE(profile_error("draft: {staircut: {verify_costs: [0.1, -1]}}").find("draft.staircut.verify_costs"),
            std::string::npos);
  EXPECT_NE(profile_error("draft: {staircut: {verify_costs: 0.1}}").find("must be a list of seconds"), std::string::npos);
  EXPECT_NE(profile_error("draft: {drafters: [lookup, lookup]}").find("key 'draft.drafters': drafter list"),
            std::string::npos);
  EXPECT_NE(profile_error("draft: {drafters: {a: 1}}").find("key 'draft.drafters' must be a list of drafter names"),
            std::string::npos);
  EXPECT_NE(profile_error("draft: {drafters: [lookup], lookup: {n_min: [1]}}").find(
                "key 'draft.lookup.n_min' must be a scalar"),
            std::string::npos);
  EXPECT_NE(profile_error("draft: [lookup]").find("'draft' must be a mapping"), std::string::npos);
}

// A drafter's own keys are checked when the drafters are created, with the profile's name.
TEST(DraftProfile, DrafterKeysAreCheckedAtStartUp) {
  Profile p = parse_profile("model: x\ndraft: {drafters: [lookup], lookup: {n_max: 1, n_min: 2}, "
                            "staircut: {verify_costs: [0.001, 0.001]}}\n",
                            "/cfg/p.yaml");
  std::string e = error_of([&] { Drafting d(nolatent(), test::registry(), p.draft); });
  EXPECT_NE(e.find("/cfg/p.yaml: key 'draft.lookup.n_max' must be an integer in [2, 256], found '1'"), std::string::npos)
      << e;
}

}  // namespace
