// Lossless drafting: greedy drafted output equals plain output token for token, with the lookup
// drafter, a random drafter (rejected everywhere), an oracle (the plain continuation, whole or
// corrupted) and all of them together under StairCut, on both fixture models. Built twice: for the
// CPU, and with TANDEM_LOSSLESS_DEVICE="cuda" as test_speculate_cuda (skips without a CUDA backend;
// fails instead under TANDEM_REQUIRE_GPU=1).
#include <gtest/gtest.h>

#include <map>

#include "drafters.h"
#include "gpu_required.h"
#include "tandem/generate.h"
#include "tandem/parallel.h"
#include "tandem/drafting.h"
#include "tests/conformance/model_util.h"

using namespace tandem;

namespace {

#ifndef TANDEM_LOSSLESS_DEVICE
#define TANDEM_LOSSLESS_DEVICE "cpu"
#endif

constexpr int kTokens = 256;
constexpr int kPromptsPerModel = 25;

struct Case {
  std::vector<int32_t> prompt;
  std::vector<int32_t> plain;      // greedy plain output, kTokens long
  std::vector<int32_t> plain_eos;  // the same run stopped at the first EOS
};

// Prompts: slices of the fixture prompt (some longer than one 16-token SSD chunk), short patterns
// repeated (lookup drafts get accepted) and passages followed by their own beginning (copying).
std::vector<std::vector<int32_t>> make_prompts(const std::vector<int32_t>& ids) {
  std::vector<std::vector<int32_t>> out;
  const int lens[] = {5, 9, 16, 17, 23, 31, 40, 48, 57, 64};
  for (int i = 0; i < 10; ++i) out.emplace_back(ids.begin() + 13 * i, ids.begin() + 13 * i + lens[i]);
  for (int i = 0; i < 8; ++i) {
    const int period = 3 + i, reps = 2 + (i % 4) * 2;
    std::vector<int32_t> p;
    for (int r = 0; r < reps; ++r) p.insert(p.end(), ids.begin() + 7 * i, ids.begin() + 7 * i + period);
    out.push_back(p);
  }
  for (int i = 0; i < kPromptsPerModel - 18; ++i) {
    const int len = 18 + 4 * i;
    std::vector<int32_t> p(ids.begin() + 11 * i, ids.begin() + 11 * i + len);
    p.insert(p.end(), ids.begin() + 11 * i, ids.begin() + 11 * i + len / 2);
    out.push_back(p);
  }
  return out;
}

struct Fixture {
  std::unique_ptr<Model> model;
  std::vector<Case> cases;
};

Fixture& fixture(const std::string& name) {
  static std::map<std::string, Fixture> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  Fixture f;
  const std::string dir = test::data_path("hf/" + name);
  LoadOptions o;
  o.path = dir;
  o.device = TANDEM_LOSSLESS_DEVICE;
  f.model = Model::load(o, test::registry());
  set_thread_count(1);  // a 64-wide model: worker hand-offs cost more than they save
  for (auto& p : make_prompts(test::read_ids(dir + "/prompt_200.txt"))) {
    Case c{p, {}, {}};
    c.plain = generate(*f.model, p, test::run_options(kTokens)).tokens;
    c.plain_eos = generate(*f.model, p, test::run_options(kTokens, true)).tokens;
    f.cases.push_back(std::move(c));
  }
  return cache.emplace(name, std::move(f)).first->second;
}

std::string first_difference(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return "first difference at " + std::to_string(i) + " of " + std::to_string(a.size()) + "/" +
         std::to_string(b.size()) + " tokens";
}

// Runs every case of `model` through `d` (the oracle's truth set per case: the prompt and the plain
// output, or with `truth_past_eos` the whole kTokens-long plain run, EOS and what follows it); returns
// the session's metrics, and each request's in `per_request` (optional).
DraftMetrics run_all(const std::string& model, Drafting& d, const std::shared_ptr<std::vector<int32_t>>& truth,
                     size_t every = 1, bool stop_at_eos = false, std::vector<DraftMetrics>* per_request = nullptr,
                     bool truth_past_eos = false) {
  Fixture& f = fixture(model);
  for (size_t i = 0; i < f.cases.size(); i += every) {
    const Case& c = f.cases[i];
    const auto& want = stop_at_eos ? c.plain_eos : c.plain;
    if (truth) {
      const auto& t = truth_past_eos ? c.plain : want;
      *truth = c.prompt;
      truth->insert(truth->end(), t.begin(), t.end());
    }
    DraftMetrics dm;
    auto got = d.generate(c.prompt, test::run_options(kTokens, stop_at_eos), {}, &dm).tokens;
    EXPECT_EQ(got, want) << model << " prompt " << i << ": " << first_difference(got, want);
    if (per_request) per_request->push_back(dm);
  }
  return d.metrics();
}

// One line for the test log: what was drafted and accepted.
void print_acceptance(const std::string& what, const DraftMetrics& dm) {
  std::printf("[ accept ] %s: %lld of %lld draft tokens accepted (%.1f %%) over %lld drafted steps\n", what.c_str(),
              (long long)dm.accepted_tokens, (long long)dm.drafted_tokens, 100.0 * dm.acceptance(), (long long)dm.drafts);
}

class Lossless : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (std::string(TANDEM_LOSSLESS_DEVICE) == "cpu") return;
    std::string cause;
    try {
      test::registry().backend(TANDEM_LOSSLESS_DEVICE);
      return;
    } catch (const std::exception& e) {
      cause = std::string("no ") + TANDEM_LOSSLESS_DEVICE + " backend here: " + e.what();
    }
    for (const auto& s : test::registry().skipped()) cause += "; skipped module: " + s;
    TANDEM_GPU_UNAVAILABLE(cause);
  }
};

TEST_P(Lossless, CasesCoverChunksRepeatsAndEos) {
  Fixture& f = fixture(GetParam());
  size_t longer_than_chunk = 0, eos = 0;
  for (const auto& c : f.cases) {
    EXPECT_EQ(c.plain.size(), size_t(kTokens));
    longer_than_chunk += c.prompt.size() > 16;
    eos += c.plain_eos.size() < c.plain.size();
  }
  EXPECT_EQ(f.cases.size(), size_t(kPromptsPerModel));
  EXPECT_GE(longer_than_chunk, size_t(kPromptsPerModel / 2));
  EXPECT_GE(eos, size_t(2)) << "some runs should stop at EOS inside the window";
}

TEST_P(Lossless, LookupUnderStairCut) {
  Model& m = *fixture(GetParam()).model;
  Drafting d(m, {{"lookup", test::registry().speculator("lookup")}}, test::fixed_costs());
  DraftMetrics dm = run_all(GetParam(), d, nullptr);
  EXPECT_GT(dm.accepted_tokens, 0) << dm.summary();
  EXPECT_GT(dm.drafts, 0);
  std::printf("%s lookup: %s", GetParam(), dm.summary().c_str());
  print_acceptance(std::string(GetParam()) + " lookup", dm);
}

TEST_P(Lossless, RandomDrafterRejectedEverywhere) {
  Model& m = *fixture(GetParam()).model;
  const int64_t V = m.desc().vocab;
  Drafting d(m, {{"random", test::factory_of<test::RandomDrafter>(4, V, uint64_t(7))}}, test::fixed_costs(4));
  DraftMetrics dm = run_all(GetParam(), d, nullptr);
  EXPECT_GT(dm.drafted_tokens, 0);
  EXPECT_LT(dm.acceptance(), 0.05) << dm.summary();
}

TEST_P(Lossless, OracleUnderStairCut) {
  Model& m = *fixture(GetParam()).model;
  auto truth = std::make_shared<std::vector<int32_t>>();
  Drafting d(m, {{"oracle", test::factory_of<test::OracleDrafter>(truth, 0.0, m.desc().vocab, uint64_t(1))}},
             test::fixed_costs());
  DraftMetrics dm = run_all(GetParam(), d, truth);
  EXPECT_EQ(dm.accepted_tokens, dm.drafted_tokens) << dm.summary();
  EXPECT_GT(dm.tokens_per_step(), 8.0) << dm.summary();
}

// Spec §4.8: the oracle corrupted at random positions, for every forced k = 1..7 and 31.
TEST_P(Lossless, CorruptedOracleAtEveryForcedK) {
  Model& m = *fixture(GetParam()).model;
  auto truth = std::make_shared<std::vector<int32_t>>();
  for (int k : {1, 2, 3, 4, 5, 6, 7, 31}) {
    Drafting d(m, {{"oracle", test::factory_of<test::OracleDrafter>(truth, 0.15, m.desc().vocab, uint64_t(k))}},
               test::fixed_costs(k));
    DraftMetrics dm = run_all(GetParam(), d, truth, 5);
    EXPECT_GT(dm.accepted_tokens, 0) << "k " << k;
    EXPECT_LT(dm.accepted_tokens, dm.drafted_tokens) << "k " << k;
    // Every step verifies k drafts, except near the end of a run (the remaining budget cuts it).
    EXPECT_GE(dm.k_histogram[size_t(k)], dm.drafts * 3 / 4) << "k " << k << ": " << dm.summary();
  }
}

// EOS inside an accepted run stops the output exactly where plain decoding stops. Under StairCut
// (lookup and a 10 %-corrupted oracle) every run that stops at EOS drafted and had drafts accepted;
// then an exact oracle that proposes past EOS (the plain run goes on after it) at a forced k = 8:
// the loop must stop at an accepted EOS although the drafts after it are the target's own choices.
TEST_P(Lossless, StopsAtEosLikePlain) {
  Model& m = *fixture(GetParam()).model;
  const Fixture& f = fixture(GetParam());
  auto truth = std::make_shared<std::vector<int32_t>>();
  Drafting d(m,
             {{"lookup", test::registry().speculator("lookup")},
              {"oracle", test::factory_of<test::OracleDrafter>(truth, 0.1, m.desc().vocab, uint64_t(9))}},
             test::fixed_costs());
  std::vector<DraftMetrics> per;
  DraftMetrics all = run_all(GetParam(), d, truth, 1, true, &per);
  ASSERT_EQ(per.size(), f.cases.size());
  int eos_runs = 0;
  for (size_t i = 0; i < per.size(); ++i) {
    if (f.cases[i].plain_eos.size() == f.cases[i].plain.size()) continue;
    ++eos_runs;
    EXPECT_GT(per[i].drafts, 0) << "prompt " << i << " stops at EOS without drafting";
    EXPECT_GT(per[i].accepted_tokens, 0) << "prompt " << i << ": " << per[i].summary();
  }
  EXPECT_GE(eos_runs, 2);
  print_acceptance(std::string(GetParam()) + " EOS runs, lookup + oracle", all);

  auto past = std::make_shared<std::vector<int32_t>>();
  Drafting exact(m, {{"oracle", test::factory_of<test::OracleDrafter>(past, 0.0, m.desc().vocab, uint64_t(1))}},
                 test::fixed_costs(8));
  per.clear();
  DraftMetrics ex = run_all(GetParam(), exact, past, 1, true, &per, true);
  int eos_in_chain = 0;
  for (size_t i = 0; i < per.size(); ++i) {
    if (f.cases[i].plain_eos.size() == f.cases[i].plain.size()) continue;
    EXPECT_GT(per[i].accepted_tokens, 0) << "prompt " << i;
    // Every draft is the plain run's token: the only ones not taken are those after an accepted EOS.
    eos_in_chain += per[i].accepted_tokens < per[i].drafted_tokens;
  }
  EXPECT_GE(eos_in_chain, 1) << "no run met EOS inside a verified chain: " << ex.summary();
  print_acceptance(std::string(GetParam()) + " EOS runs, exact oracle past EOS", ex);
  std::printf("[ accept ] %s: %d of %d EOS runs stopped inside a verified chain\n", GetParam(), eos_in_chain, eos_runs);
}

// Several drafters propose each step; StairCut picks one chain and its cut.
TEST_P(Lossless, CombinedDraftersUnderStairCut) {
  Model& m = *fixture(GetParam()).model;
  const int64_t V = m.desc().vocab;
  auto truth = std::make_shared<std::vector<int32_t>>();
  Drafting d(m,
             {{"lookup", test::registry().speculator("lookup")},
              {"random", test::factory_of<test::RandomDrafter>(8, V, uint64_t(3))},
              {"oracle", test::factory_of<test::OracleDrafter>(truth, 0.5, V, uint64_t(5), false)}},
             test::fixed_costs());
  DraftMetrics dm = run_all(GetParam(), d, truth);
  int chosen = 0;
  for (const auto& pd : dm.drafters) {
    chosen += pd.drafts > 0;
    if (pd.name != "random") EXPECT_GT(pd.accepted_tokens, 0) << pd.name << ": " << dm.summary();
  }
  EXPECT_GE(chosen, 2) << dm.summary();
  EXPECT_GT(dm.accepted_tokens, 0) << dm.summary();
  EXPECT_LT(dm.accepted_tokens, dm.drafted_tokens) << "the random drafter and the corrupted oracle must miss";
  std::printf("%s combined: %s", GetParam(), dm.summary().c_str());
  print_acceptance(std::string(GetParam()) + " combined", dm);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Lossless, ::testing::Values("latent", "nolatent"));

}  // namespace
