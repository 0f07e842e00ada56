// Prefix checkpoints (schedulers/slots prefix_cache.h) through the generation loop on the tiny
// synthetic model: a repeated prompt and a growing conversation resume from the longest stored
// prefix, read only the rest, and produce the logits bits and tokens of cold runs; the LRU store
// keeps its byte budget and verifies the tokens of every hit.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "synth_checkpoint.h"
#include "synth_model.h"
#include "tandem/generation.h"
#include "tandem/prefix_cache.h"
#include "test_util.h"
#include "tests/conformance/model_util.h"

namespace tandem::test {
namespace {

Model& model() {
  static std::unique_ptr<Model> m = [] {
    auto ck = std::make_unique<synth::SynthCheckpoint>(synth::make_plan(synth::model_shape("tiny"), synth::Mix::Bf16),
                                                       5, "synth:tiny/bf16");
    LoadOptions o;
    o.device = "cpu";
    return Model::load(std::move(ck), "synth bf16", o, registry());
  }();
  return *m;
}

constexpr int kChunk = 8;

std::vector<int32_t> random_tokens(size_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(g() % uint64_t(model().desc().vocab));
  return t;
}

// One request run to `max_tokens` greedy tokens (a little temperature on odd seeds, so the sampler's
// draws are covered too), with every position's logits.
struct Outcome {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
  size_t restored = 0;
};

Outcome run(const std::vector<int32_t>& prompt, int max_tokens, PrefixCache* cache, uint64_t seed = 0) {
  SamplingParams sp;
  sp.seed = seed;
  sp.temperature = seed % 2 ? 0.8f : 0.0f;
  Generation gen(model(), nullptr, prompt, 512, kChunk, sp, cache);
  Outcome r;
  StepHooks hooks;
  const int V = model().desc().vocab;
  hooks.process = [&](float* row) { r.logits.emplace_back(row, row + V); };
  hooks.emit = [&](int32_t t) {
    r.tokens.push_back(t);
    return int(r.tokens.size()) < max_tokens;
  };
  while (gen.step(max_tokens - int(r.tokens.size()), hooks)) {
  }
  r.restored = gen.restored();
  EXPECT_EQ(gen.prefilled(), prompt.size());
  return r;
}

void expect_same(const Outcome& cold, const Outcome& warm, const std::string& what) {
  EXPECT_EQ(cold.tokens, warm.tokens) << what;
  ASSERT_EQ(cold.logits.size(), warm.logits.size()) << what;
  for (size_t i = 0; i < cold.logits.size(); ++i)
    EXPECT_EQ(std::memcmp(cold.logits[i].data(), warm.logits[i].data(), cold.logits[i].size() * sizeof(float)), 0)
        << what << ": logits of token " << i << " differ";
}

PrefixCacheOptions budget(int64_t bytes, int64_t every = 0) { return PrefixCacheOptions{bytes, every}; }

TEST(PrefixCache, RepeatedPromptResumesAndMatchesColdRun) {
  PrefixCache cache(model(), budget(int64_t(1) << 30), kChunk);
  const auto prompt = random_tokens(45, 1);
  for (uint64_t seed : {0u, 3u}) {
    const Outcome cold = run(prompt, 10, nullptr, seed);
    PrefixCache fresh(model(), budget(int64_t(1) << 30), kChunk);
    const Outcome first = run(prompt, 10, &fresh, seed);
    EXPECT_EQ(first.restored, 0u);
    // Checkpoints at 8, 16, …, 40 and at the prompt's end (45, with its logits).
    EXPECT_EQ(fresh.entries(), 6);
    expect_same(cold, first, "first run, seed " + std::to_string(seed));
    // The same prompt again: the end checkpoint, no prefill pass at all.
    const Outcome again = run(prompt, 10, &fresh, seed);
    EXPECT_EQ(again.restored, prompt.size());
    expect_same(cold, again, "repeated prompt, seed " + std::to_string(seed));
    EXPECT_EQ(fresh.entries(), 6);  // nothing new to store
  }
  // A longer prompt with that prefix: the last grid checkpoint (40), never the off-grid end (45).
  run(prompt, 2, &cache);
  auto longer = prompt;
  for (int32_t t : random_tokens(14, 2)) longer.push_back(t);
  const Outcome warm = run(longer, 6, &cache);
  EXPECT_EQ(warm.restored, 40u);
  expect_same(run(longer, 6, nullptr), warm, "extended prompt");
  // A prompt that differs inside the first block finds nothing.
  auto changed = prompt;
  changed[3] = (changed[3] + 1) % model().desc().vocab;
  EXPECT_EQ(cache.find(changed).snapshot, nullptr);
  EXPECT_EQ(run(changed, 3, &cache).restored, 0u);
}

TEST(PrefixCache, ConversationReadsOnlyTheNewTokens) {
  // Ten turns, each appending the reply and a new user message of 5 … 16 tokens. Each turn restores
  // the previous prompt's last grid checkpoint, so it prefills only what follows it: the new tokens
  // plus fewer than one chunk of the old prompt; the text equals a cold run's every turn.
  PrefixCache cache(model(), budget(int64_t(1) << 30), kChunk);
  std::mt19937_64 g(9);
  std::vector<int32_t> prompt = random_tokens(30, 10);
  size_t previous = 0;
  int64_t read = 0, total = 0;
  for (int turn = 0; turn < 10; ++turn) {
    const Outcome warm = run(prompt, 6, &cache);
    const size_t expect_restored = previous / kChunk * kChunk;
    EXPECT_EQ(warm.restored, expect_restored) << "turn " << turn;
    const size_t prefilled = prompt.size() - warm.restored;
    EXPECT_EQ(prefilled, prompt.size() - expect_restored) << "turn " << turn;
    if (turn > 0) EXPECT_LT(prefilled, prompt.size() - previous + kChunk) << "turn " << turn;
    expect_same(run(prompt, 6, nullptr), warm, "turn " + std::to_string(turn));
    read += int64_t(prefilled), total += int64_t(prompt.size());
    previous = prompt.size();
    prompt.insert(prompt.end(), warm.tokens.begin(), warm.tokens.end());
    for (int32_t t : random_tokens(5 + g() % 12, 20 + uint64_t(turn))) prompt.push_back(t);
  }
  EXPECT_LT(read, total / 3) << "the turns read " << read << " of " << total << " prompt tokens";
}

TEST(PrefixCache, EvictsLeastRecentlyUsedWithinBudget) {
  Model& m = model();
  const auto prompt = random_tokens(40, 4);
  auto seq = m.new_sequence(64);
  std::vector<float> logits;
  auto prefill_to = [&](size_t to) {
    m.forward_commit(*seq, std::vector<int32_t>(prompt.begin() + seq->pos, prompt.begin() + long(to)),
                     ForwardMode::Prefill, logits, false);
  };
  prefill_to(8);
  const int64_t one = int64_t(m.snapshot(*seq)->bytes());
  // Room for two checkpoints near 8 … 24 tokens (K/V grows with the position), not three.
  PrefixCache cache(m, budget(2 * one + one / 2), kChunk);
  cache.offer(*seq, prompt, logits);
  prefill_to(16);
  cache.offer(*seq, prompt, logits);
  EXPECT_EQ(cache.entries(), 2);
  prefill_to(24);
  cache.offer(*seq, prompt, logits);
  EXPECT_EQ(cache.entries(), 2);
  EXPECT_EQ(cache.evictions(), 1);
  EXPECT_LE(cache.bytes(), cache.budget());
  // 8 went first; the longest prefix of a 30-token prompt is now 24.
  const std::vector<int32_t> p30(prompt.begin(), prompt.begin() + 30), p20(prompt.begin(), prompt.begin() + 20);
  EXPECT_EQ(cache.find(p30).tokens, 24);
  EXPECT_EQ(cache.find(std::vector<int32_t>(prompt.begin(), prompt.begin() + 12)).snapshot, nullptr);
  // Using 16 makes 24 the least recently used: the next checkpoint evicts it.
  EXPECT_EQ(cache.find(p20).tokens, 16);
  prefill_to(32);
  cache.offer(*seq, prompt, logits);
  EXPECT_EQ(cache.entries(), 2);
  EXPECT_EQ(cache.find(p30).tokens, 16);
  EXPECT_EQ(cache.find(prompt).tokens, 32);
  // Off the grid and not the prompt's end: not stored.
  prefill_to(35);
  cache.offer(*seq, prompt, logits);
  EXPECT_EQ(cache.entries(), 2);
  // A budget below one checkpoint keeps nothing.
  PrefixCache tiny(m, budget(one / 2), kChunk);
  tiny.offer(*seq, prompt, logits);
  EXPECT_EQ(tiny.entries(), 0);
  EXPECT_EQ(tiny.bytes(), 0);
}

TEST(PrefixCache, CheckpointsEveryNTokens) {
  PrefixCache cache(model(), budget(int64_t(1) << 30, 3 * kChunk), kChunk);
  const auto prompt = random_tokens(53, 6);
  run(prompt, 1, &cache);
  EXPECT_EQ(cache.entries(), 3);  // 24, 48 and the end (53)
  auto longer = prompt;
  longer.push_back(1);
  EXPECT_EQ(cache.find(longer).tokens, 48);
}

// prefill() reads a prompt on the chunk grid as a Generation does: the same last-row logits bits, the
// whole prompt committed; a negative chunk is refused.
TEST(Prefill, ChunkedAsTheGenerationReadsIt) {
  const std::vector<int32_t> prompt = random_tokens(3 * kChunk + 5, 41);
  const Outcome gen = run(prompt, 1, nullptr);
  auto seq = model().new_sequence(512);
  std::vector<float> logits;
  prefill(model(), *seq, prompt, kChunk, logits);
  EXPECT_EQ(seq->pos, int64_t(prompt.size()));
  ASSERT_EQ(gen.logits.size(), 1u);
  ASSERT_EQ(logits.size(), gen.logits[0].size());
  EXPECT_EQ(std::memcmp(logits.data(), gen.logits[0].data(), logits.size() * sizeof(float)), 0);
  expect_error([&] { prefill(model(), *model().new_sequence(512), prompt, -1, logits); },
               {"prefill", "must not be negative", "-1"});
}

TEST(PrefixCache, Errors) {
  expect_error([] { PrefixCache c(model(), budget(100, 12), kChunk); }, {"every 12", "multiple of the prefill chunk (8)"});
  expect_error([] { PrefixCache c(model(), budget(-1), kChunk); }, {"budget", "negative", "-1"});
  PrefixCache cache(model(), budget(1 << 20), kChunk);
  expect_error([&] { Generation g(model(), nullptr, {1, 2, 3}, 64, 16, SamplingParams{}, &cache); },
               {"grid of 8 tokens", "prefill chunk is 16"});
}

}  // namespace
}  // namespace tandem::test
