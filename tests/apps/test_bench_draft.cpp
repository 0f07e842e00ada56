// The bench's test drafters (server/bench_draft.*) on the tiny HF fixture with GPU-shaped, frozen
// verify costs: the oracle is accepted everywhere and StairCut verifies long chains; the always-wrong
// drafter makes StairCut fall back to plain steps; and when verifying m rows costs m plain steps no
// drafter, however right, is worth a draft. Output equals plain output in every case.
#include <gtest/gtest.h>

#include "bench_draft.h"
#include "tandem/generate.h"
#include "tandem/error.h"
#include "tandem/registry.h"
#include "tests/conformance/model_util.h"
#include "tests/schedulers/slots/drafters.h"

using namespace tandem;

namespace {

struct Plain {
  std::unique_ptr<Model> model;
  std::vector<int32_t> prompt;
  GenerateOptions g;
  GenerateResult plain;
};

Plain make_plain(int tokens) {
  Plain p;
  p.model = test::load_model(test::data_path("hf/latent"));
  p.g = test::run_options(tokens);
  for (int i = 0; i < 12; ++i) p.prompt.push_back(int32_t((i * 37 + 5) % p.model->desc().vocab));
  p.plain = generate(*p.model, p.prompt, p.g);
  return p;
}

Plain& fixture() {
  static Plain f = make_plain(96);
  return f;
}

// A longer run, so that acceptance rates are measured over a few hundred proposals.
Plain& long_fixture() {
  static Plain f = make_plain(440);
  return f;
}

DraftMetrics drafted(const std::string& names, DraftOptions o, Plain& f = fixture()) {
  PluginRegistry reg;
  o.drafters = cli::parse_draft_sets(names).front();
  cli::DraftRun run = cli::bench_drafting(*f.model, reg, o, f.prompt, f.plain, f.g);  // checks equality
  EXPECT_EQ(run.tokens, int(f.plain.tokens.size()) - 1);
  const DraftMetrics& m = run.metrics;
  int64_t k_steps = 0;
  for (int64_t c : m.k_histogram) k_steps += c;
  EXPECT_EQ(k_steps, m.steps);
  EXPECT_EQ(m.k_histogram[0], m.plain_steps);
  EXPECT_LE(m.accepted_tokens, m.drafted_tokens);
  return m;
}

TEST(BenchDraft, OracleIsAcceptedEverywhereAndDraftsLongChains) {
  DraftMetrics m = drafted("oracle", test::fixed_costs());
  EXPECT_EQ(m.accepted_tokens, m.drafted_tokens);
  EXPECT_GT(m.drafted_tokens, 0);
  EXPECT_GT(m.tokens_per_step(), 4.0) << m.summary();
}

TEST(BenchDraft, WrongDrafterFallsBackToPlainSteps) {
  DraftMetrics m = drafted("wrong", test::fixed_costs());
  EXPECT_EQ(m.accepted_tokens, 0);
  // With no record yet p(1) starts at 0.5, which makes the first drafts worth a try; retro-scoring
  // of every (cheap) proposal drives p(1) down, and once one extra row is no longer paid for (here
  // p(1) < 5 %, ~20 misses) StairCut goes back to plain steps for good.
  EXPECT_LE(m.drafts, 30) << m.summary();
  EXPECT_GE(m.plain_steps, m.steps - 30) << m.summary();
}

TEST(BenchDraft, NoDraftWhenVerifyingCostsAsMuchAsPlainSteps) {
  // T_v(m) = m · T_v(1): even a perfect drafter cannot beat plain steps, so StairCut keeps them.
  DraftOptions o = test::fixed_costs();
  for (size_t m = 0; m < o.verify_costs.size(); ++m) o.verify_costs[m] = 1e-3 * double(m + 1);
  DraftMetrics m = drafted("oracle", o);
  EXPECT_EQ(m.drafts, 0) << m.summary();
  EXPECT_EQ(m.plain_steps, m.steps);
}

// oracle=P: each token right with probability P (seeded). Every step verifies 3 drafts, so chains
// are partly accepted; the output still equals plain, and position 1 is accepted about P of the time,
// both in the verified chains and in the retro-scored proposals.
TEST(BenchDraft, OracleAtPIsAcceptedAtAboutP) {
  for (double p : {0.3, 0.7}) {
    const std::string name = "oracle=" + std::to_string(p).substr(0, 3);
    DraftMetrics m = drafted(name, test::fixed_costs(3), long_fixture());
    ASSERT_EQ(m.drafters.size(), 1u);
    const auto& d = m.drafters[0];
    ASSERT_GE(d.tried_at.size(), 3u);
    ASSERT_GT(d.tried_at[0], 150) << name << ": too few verified first drafts to measure\n" << m.summary();
    const double verified = double(d.accepted_at[0]) / double(d.tried_at[0]);
    const double scored = double(d.matched_at[0]) / double(d.reached_at[0]);
    std::printf("%s: position 1 accepted %.3f (%lld tried), matched %.3f (%lld reached); overall %.3f\n", name.c_str(),
                verified, (long long)d.tried_at[0], scored, (long long)d.reached_at[0], m.acceptance());
    EXPECT_NEAR(verified, p, 0.15) << name << "\n" << m.summary();
    EXPECT_NEAR(scored, p, 0.15) << name << "\n" << m.summary();
    // Three drafts a step: 1, 2 or 3 of them accepted with probability p, p², p³.
    EXPECT_NEAR(m.acceptance(), (p + p * p + p * p * p) / 3, 0.1) << name << "\n" << m.summary();
    // Position 2 is judged only after a right first token: reached about P times as often.
    EXPECT_NEAR(double(d.reached_at[1]) / double(d.reached_at[0]), p, 0.15) << name << "\n" << m.summary();
  }
}

TEST(BenchDraft, OracleAtPNamesItsProbability) {
  EXPECT_TRUE(cli::is_test_drafter("oracle=0.5"));
  EXPECT_DOUBLE_EQ(cli::test_drafter_right("oracle=0.25"), 0.25);
  EXPECT_DOUBLE_EQ(cli::test_drafter_right("oracle"), 1.0);
  EXPECT_DOUBLE_EQ(cli::test_drafter_right("wrong"), 0.0);
  for (const char* bad : {"oracle=", "oracle=1.5", "oracle=x", "oracle=0.5x", "oracle=-0.1"}) {
    try {
      cli::test_drafter_right(bad);
      ADD_FAILURE() << bad << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("expected oracle=P"), std::string::npos) << e.what();
    }
  }
}

// The per-drafter, per-position table `tandem bench --draft` prints: the oracle matches at every
// position it reached, the wrong drafter at none.
TEST(BenchDraft, PositionTablePerDrafter) {
  DraftMetrics m = drafted("oracle,wrong", test::fixed_costs());
  ASSERT_EQ(m.drafters.size(), 2u);
  const auto& o = m.drafters[0];
  const auto& w = m.drafters[1];
  ASSERT_GT(o.reached_at[0], 0);
  ASSERT_GT(w.reached_at[0], 0);
  EXPECT_EQ(o.matched_at, o.reached_at);
  EXPECT_EQ(w.matched_at[0], 0);
  EXPECT_EQ(w.reached_at[0], w.proposed_at[0]) << "every wrong proposal is judged at position 1";
  const std::string t = m.position_table();
  const std::string oline = "drafter oracle proposed, matched/reached at j: 1:" + std::to_string(o.reached_at[0]) + "/" +
                            std::to_string(o.reached_at[0]) + " ";
  EXPECT_NE(t.find(oline), std::string::npos) << t;
  EXPECT_NE(t.find("drafter wrong proposed, matched/reached at j: 1:0/" + std::to_string(w.reached_at[0]) + "\n"),
            std::string::npos) << t;
  EXPECT_NE(t.find("drafter oracle verified, accepted/tried at j: 1:"), std::string::npos) << t;
}

TEST(BenchDraft, OracleWithWrongPicksTheOracle) {
  DraftMetrics m = drafted("wrong,oracle", test::fixed_costs());
  ASSERT_EQ(m.drafters.size(), 2u);
  EXPECT_LE(m.drafters[0].drafts, 3) << m.summary();
  EXPECT_GT(m.drafters[1].accepted_tokens, 0) << m.summary();
}

TEST(BenchDraft, MismatchFailsLoudly) {
  EXPECT_NO_THROW(cli::check_same_tokens({1, 2, 3}, {1, 2, 3}, "t"));
  try {
    cli::check_same_tokens({1, 2, 3}, {1, 5, 3}, "bench");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("generated token 1: plain 2, drafted 5"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cli::check_same_tokens({1, 2, 3}, {1, 2}, "bench"), Error);
}

TEST(BenchDraft, TestDraftersAreNotPlugins) {
  // Profiles and `tandem serve` look drafters up in the registry, where these never are.
  PluginRegistry reg;
  reg.load_directory(test::plugin_dir());
  EXPECT_TRUE(cli::is_test_drafter("oracle") && cli::is_test_drafter("wrong"));
  EXPECT_THROW(reg.speculator("oracle"), Error);
  EXPECT_THROW(reg.speculator("wrong"), Error);
  EXPECT_NO_THROW(reg.speculator("lookup"));
}

TEST(BenchDraft, DraftSets) {
  auto s = cli::parse_draft_sets("oracle:wrong:lookup,oracle");
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[2], (std::vector<std::string>{"lookup", "oracle"}));
  EXPECT_THROW(cli::parse_draft_sets("none"), Error);
  EXPECT_THROW(cli::parse_draft_sets("lookup,,oracle"), Error);
}

}  // namespace
