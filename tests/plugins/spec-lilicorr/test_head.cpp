// The LiLiCorr head against TensorRT-LLM's frozen Model-Optimizer reference (spec/lilicorr.md § 4):
// the inputs, parameter rule and expected start/pair scores are those of
// NVIDIA/TensorRT-LLM tests/unittest/_torch/speculative/hw_agnostic/test_lilicorr.py
// (test_head_matches_reference_scores, @8d62b3e), read there as data; the greedy walk by its rule.
#include <gtest/gtest.h>

#include <cmath>

#include "golden_head.h"

using namespace tandem;
using namespace tandem::lilicorr;

namespace {

using namespace tandem::lilicorr::golden;

TEST(LilicorrHead, GoldenVectorOfTheModelOptimizerReference) {
  const HeadWeights w = golden_head();
  ASSERT_EQ(w.c.hidden, 8);
  ASSERT_EQ(w.c.topk, 3);
  ASSERT_EQ(w.c.mlp, 16);
  ASSERT_FALSE(w.token_proj.empty());
  const GoldenInputs in = golden_inputs();
  HeadScores sc;
  score(w, 3, in.emb.data(), in.logp.data(), in.pass.data(), in.anchor.data(), true, sc);
  golden::expect_scores(sc, "host head");
  // The walk over these scores: argmax start = 0, then row 0 of pair 0 peaks at 1, row 1 of pair 1 at 0.
  EXPECT_EQ(greedy_path(sc, 3, 3), (std::vector<int>{0, 1, 0}));
}

TEST(LilicorrHead, AnInvalidAnchorChangesTheScores) {
  const HeadWeights w = golden_head();
  const GoldenInputs in = golden_inputs();
  HeadScores a, b;
  score(w, 3, in.emb.data(), in.logp.data(), in.pass.data(), in.anchor.data(), true, a);
  score(w, 3, in.emb.data(), in.logp.data(), in.pass.data(), in.anchor.data(), false, b);
  EXPECT_NE(a.start, b.start);
  // A prefix of the slots scores the same lattice minus its tail only through attention: it runs.
  HeadScores c;
  score(w, 2, in.emb.data(), in.logp.data(), in.pass.data(), in.anchor.data(), true, c);
  EXPECT_EQ(c.pairs.size(), size_t(9));
}

TEST(LilicorrHead, GreedyWalkFollowsTheChosenPredecessor) {
  HeadScores s;
  s.start = {1, 4};                              // → 1
  s.pairs = {8, 0, 2, 7,                         // pair 0, row 1 → 1
             4, 3, 6, 1};                        // pair 1, row 1 → 0
  EXPECT_EQ(greedy_path(s, 3, 2), (std::vector<int>{1, 1, 0}));
  s.start = {5, 1};                              // → 0
  s.pairs = {1, 9, 8, 0, 7, 2, 3, 8};            // row 0 → 1; then pair 1 row 1 → 1
  EXPECT_EQ(greedy_path(s, 3, 2), (std::vector<int>{0, 1, 1}));
  EXPECT_EQ(greedy_path(s, 1, 2), (std::vector<int>{0}));
}

}  // namespace
