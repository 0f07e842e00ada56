// Batch invariance: a verify pass of k+1 tokens gives, at every position, the same bits as decoding
// those tokens one at a time; after commit(n) the next step matches a plain run exactly.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "model_util.h"
#include "tandem/error.h"

using namespace tandem;

namespace {

struct Fixture {
  std::unique_ptr<Model> model;
  std::vector<int32_t> prompt, cont;
};

Fixture& fixture(const std::string& name) {
  static std::map<std::string, Fixture> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  Fixture f;
  const std::string dir = test::data_path("hf/" + name);
  f.model = test::load_model(dir);
  auto ids = test::read_ids(dir + "/prompt_200.txt");
  f.prompt.assign(ids.begin(), ids.begin() + 37);  // spans 3 chunks of 16
  f.cont.assign(ids.begin() + 37, ids.begin() + 37 + 16);
  return cache.emplace(name, std::move(f)).first->second;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

class BatchInvariance : public ::testing::TestWithParam<const char*> {};

TEST_P(BatchInvariance, VerifyPassEqualsOneAtATime) {
  Fixture& f = fixture(GetParam());
  Model& m = *f.model;
  const size_t V = size_t(m.desc().vocab);

  // Plain decode: prefill, then one token per step.
  auto plain = m.new_sequence(128);
  std::vector<float> l;
  m.forward(*plain, f.prompt, ForwardMode::Prefill, l, false);
  m.commit(*plain, int(f.prompt.size()));
  std::vector<std::vector<float>> step_logits;
  for (int32_t t : f.cont) {
    m.forward(*plain, {t}, ForwardMode::Verify, l, false);
    m.commit(*plain, 1);
    step_logits.push_back(l);
  }

  for (int k = 1; k <= 15; ++k) {
    auto seq = m.new_sequence(128);
    m.forward(*seq, f.prompt, ForwardMode::Prefill, l, false);
    m.commit(*seq, int(f.prompt.size()));
    std::vector<int32_t> block(f.cont.begin(), f.cont.begin() + k + 1);
    std::vector<float> all;
    m.forward(*seq, block, ForwardMode::Verify, all, true);
    for (int i = 0; i <= k; ++i) {
      std::vector<float> row(all.begin() + long(i * V), all.begin() + long((i + 1) * V));
      EXPECT_TRUE(same_bits(row, step_logits[size_t(i)])) << "k " << k << " position " << i;
    }
    // Accept a prefix n (cycling through 0..k+1), then the next plain step must match exactly.
    int n = (k * 7) % (k + 2);
    m.commit(*seq, n);
    m.forward(*seq, {f.cont[size_t(n)]}, ForwardMode::Verify, l, false);
    EXPECT_TRUE(same_bits(l, step_logits[size_t(n)])) << "after commit(" << n << ") of " << k + 1;
  }
}

TEST_P(BatchInvariance, EveryCommitLengthContinuesExactly) {
  Fixture& f = fixture(GetParam());
  Model& m = *f.model;
  const int k = 7;
  auto plain = m.new_sequence(128);
  std::vector<float> l;
  m.forward(*plain, f.prompt, ForwardMode::Prefill, l, false);
  m.commit(*plain, int(f.prompt.size()));
  std::vector<std::vector<float>> step;
  for (int i = 0; i <= k + 1; ++i) {
    m.forward(*plain, {f.cont[size_t(i)]}, ForwardMode::Verify, l, false);
    m.commit(*plain, 1);
    step.push_back(l);
  }
  for (int n = 0; n <= k + 1; ++n) {
    auto seq = m.new_sequence(128);
    m.forward(*seq, f.prompt, ForwardMode::Prefill, l, false);
    m.commit(*seq, int(f.prompt.size()));
    std::vector<int32_t> block(f.cont.begin(), f.cont.begin() + k + 1);
    m.forward(*seq, block, ForwardMode::Verify, l, true);
    m.commit(*seq, n);
    EXPECT_EQ(seq->pos, int64_t(f.prompt.size()) + n);
    // Two more plain steps after the accepted prefix.
    for (int j = n; j < std::min(n + 2, k + 2); ++j) {
      m.forward(*seq, {f.cont[size_t(j)]}, ForwardMode::Verify, l, false);
      m.commit(*seq, 1);
      EXPECT_TRUE(same_bits(l, step[size_t(j)])) << "commit(" << n << "), then step " << j;
    }
  }
}

// forward_commit (the plain decode loop's call) is forward then commit: the same logits and state.
TEST_P(BatchInvariance, ForwardCommitEqualsForwardThenCommit) {
  Fixture& f = fixture(GetParam());
  Model& m = *f.model;
  auto a = m.new_sequence(128), b = m.new_sequence(128);
  std::vector<float> la, lb;
  m.forward(*a, f.prompt, ForwardMode::Prefill, la, false);
  m.commit(*a, int(f.prompt.size()));
  m.forward_commit(*b, f.prompt, ForwardMode::Prefill, lb, false);
  EXPECT_TRUE(same_bits(la, lb)) << "prefill";
  EXPECT_EQ(b->pos, a->pos);
  for (size_t i = 0; i < f.cont.size(); ++i) {
    m.forward(*a, {f.cont[i]}, ForwardMode::Verify, la, false);
    m.commit(*a, 1);
    m.forward_commit(*b, {f.cont[i]}, ForwardMode::Verify, lb, false);
    EXPECT_TRUE(same_bits(la, lb)) << "step " << i;
    EXPECT_EQ(b->pos, a->pos);
  }
  EXPECT_THROW(m.commit(*b, 1), Error) << "forward_commit leaves nothing pending";
}

INSTANTIATE_TEST_SUITE_P(Models, BatchInvariance, ::testing::Values("latent", "nolatent"));

TEST(Commit, RulesAreEnforced) {
  Fixture& f = fixture("latent");
  Model& m = *f.model;
  auto seq = m.new_sequence(64);
  std::vector<float> l;
  EXPECT_THROW(m.commit(*seq, 1), Error);  // nothing to commit
  m.forward(*seq, f.prompt, ForwardMode::Prefill, l, false);
  EXPECT_THROW(m.commit(*seq, 3), Error);  // a prefill is committed whole
  m.commit(*seq, int(f.prompt.size()));
  m.forward(*seq, {1, 2, 3}, ForwardMode::Verify, l, true);
  EXPECT_THROW(m.commit(*seq, 4), Error);
  EXPECT_THROW(m.forward(*seq, std::vector<int32_t>(40, 1), ForwardMode::Verify, l, true), Error);  // past capacity
  EXPECT_THROW(m.forward(*seq, {100000}, ForwardMode::Verify, l, true), Error);  // outside the vocabulary
}
