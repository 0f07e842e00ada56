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
  GenerateOptions g = test::run_options(96);
  GenerateResult plain;
};

Plain& fixture() {
  static Plain f = [] {
    Plain p;
    p.model = test::load_model(test::data_path("hf/latent"));
    for (int i = 0; i < 12; ++i) p.prompt.push_back(int32_t((i * 37 + 5) % p.model->desc().vocab));
    p.plain = generate(*p.model, p.prompt, p.g);
    return p;
  }();
  return f;
}

DraftMetrics drafted(const std::string& names, DraftOptions o) {
  Plain& f = fixture();
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
