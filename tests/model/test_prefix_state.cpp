// Model::snapshot / restore (prefix checkpoints) on the tiny synthetic model (Mamba2, attention and
// MoE layers): prefill A, snapshot, restore into another sequence, continue with B; every logit must
// have the bits of a cold run of A + B with the same passes, at chunk boundaries and off them, into
// fresh and into used sequences. On the CPU here, and with TANDEM_PREFIX_DEVICE="cuda" as
// test_prefix_state_cuda (label gpu; skips without a CUDA device unless TANDEM_REQUIRE_GPU=1).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "gpu_required.h"
#include "synth_checkpoint.h"
#include "synth_model.h"
#include "tandem/model.h"
#include "test_util.h"
#include "tests/conformance/model_util.h"

#ifndef TANDEM_PREFIX_DEVICE
#define TANDEM_PREFIX_DEVICE "cpu"
#endif

namespace tandem::test {
namespace {

std::unique_ptr<Model> load(synth::Mix mix) {
  auto ck = std::make_unique<synth::SynthCheckpoint>(synth::make_plan(synth::model_shape("tiny"), mix), 11,
                                                     std::string("synth:tiny/") + synth::mix_name(mix));
  LoadOptions o;
  o.device = TANDEM_PREFIX_DEVICE;
  return Model::load(std::move(ck), std::string("synth ") + synth::mix_name(mix), o, registry());
}

class PrefixState : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string(TANDEM_PREFIX_DEVICE) == "cpu") return;
    std::string cause;
    try {
      registry().backend(TANDEM_PREFIX_DEVICE);
    } catch (const std::exception& e) {
      cause = std::string("no ") + TANDEM_PREFIX_DEVICE + " backend here: " + e.what();
    }
    if (!cause.empty()) TANDEM_GPU_UNAVAILABLE(cause);
  }
  static Model& model() {
    static std::unique_ptr<Model> m = load(synth::Mix::Bf16);
    return *m;
  }
};

std::vector<int32_t> random_tokens(size_t n, int vocab, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(g() % uint64_t(vocab));
  return t;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Prefills tokens[from, to) in passes that end at multiples of `chunk` (and at `to`), as the slot
// scheduler does; returns the last pass's logits.
std::vector<float> prefill(Model& m, Sequence& s, const std::vector<int32_t>& tokens, size_t from, size_t to,
                           size_t chunk) {
  std::vector<float> logits;
  for (size_t p = from; p < to;) {
    const size_t end = std::min(to, (p / chunk + 1) * chunk);
    m.forward_commit(s, std::vector<int32_t>(tokens.begin() + long(p), tokens.begin() + long(end)),
                     ForwardMode::Prefill, logits, false);
    p = end;
  }
  return logits;
}

// The logits of `steps` greedy verify steps (plain decode) after the prompt, and of one verify pass of
// four tokens with a partial commit: what the restored conv window, SSM state and K/V rows feed.
std::vector<std::vector<float>> decode(Model& m, Sequence& s, std::vector<float> last, int steps) {
  std::vector<std::vector<float>> out{last};
  const int V = m.desc().vocab;
  for (int i = 0; i < steps; ++i) {
    int32_t best = int32_t(std::max_element(last.begin(), last.begin() + V) - last.begin());
    m.forward_commit(s, {best}, ForwardMode::Verify, last, false);
    out.push_back(last);
  }
  m.forward(s, {1, 2, 3, 4}, ForwardMode::Verify, last, true);
  m.commit(s, 2);
  out.push_back(last);
  m.forward(s, {5}, ForwardMode::Verify, last, false);
  m.commit(s, 1);
  out.push_back(last);
  return out;
}

void expect_same(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b,
                 const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(same_bits(a[i], b[i])) << what << ": logits of step " << i << " differ";
}

// Cold: A + B in one sequence, passes split at multiples of `chunk` and at |A|. Warm: A in one
// sequence, snapshot, restore into `target`, B from there with the same passes.
void check_split(Model& m, size_t a_len, size_t total, size_t chunk, Sequence& target, const std::string& what) {
  const auto tokens = random_tokens(total, m.desc().vocab, 100 + a_len);
  auto cold = m.new_sequence(256);
  prefill(m, *cold, tokens, 0, a_len, chunk);
  const auto cold_out = decode(m, *cold, prefill(m, *cold, tokens, a_len, total, chunk), 4);

  auto first = m.new_sequence(256);
  prefill(m, *first, tokens, 0, a_len, chunk);
  auto snap = m.snapshot(*first);
  EXPECT_EQ(snap->pos, int64_t(a_len));
  first.reset();  // the snapshot is a copy: it outlives its sequence
  m.restore(*snap, target);
  EXPECT_EQ(target.pos, int64_t(a_len));
  expect_same(cold_out, decode(m, target, prefill(m, target, tokens, a_len, total, chunk), 4), what);
}

TEST_F(PrefixState, RestoreAtChunkBoundaryIsBitExact) {
  Model& m = model();
  for (size_t a : {16u, 48u}) {
    auto fresh = m.new_sequence(256);
    check_split(m, a, 80, 16, *fresh, "boundary " + std::to_string(a));
  }
}

TEST_F(PrefixState, RestoreOffBoundaryIsBitExact) {
  // Off the chunk grid the cold run must split there too (what an end-of-prompt checkpoint serves:
  // the same prompt again); the restored conv window then holds a partial chunk's inputs.
  Model& m = model();
  for (size_t a : {1u, 13u, 37u}) {
    auto fresh = m.new_sequence(256);
    check_split(m, a, 70, 16, *fresh, "offset " + std::to_string(a));
  }
}

TEST_F(PrefixState, RestoreIntoUsedSequenceIsBitExact) {
  // A sequence that ran other, longer tokens (K/V rows past the checkpoint hold stale data, the
  // Mamba buffers were swapped by commits): restore must leave nothing of that run.
  Model& m = model();
  auto used = m.new_sequence(256);
  const auto other = random_tokens(90, m.desc().vocab, 7);
  decode(m, *used, prefill(m, *used, other, 0, other.size(), 16), 3);
  check_split(m, 32, 64, 16, *used, "used sequence");
}

TEST_F(PrefixState, SnapshotIsUnchangedByLaterPassesAndRestoresTwice) {
  Model& m = model();
  const auto tokens = random_tokens(48, m.desc().vocab, 3);
  auto s = m.new_sequence(256);
  prefill(m, *s, tokens, 0, 32, 16);
  auto snap = m.snapshot(*s);
  // The source sequence moves on: the snapshot must not follow it.
  const auto first = prefill(m, *s, tokens, 32, 48, 16);
  auto r1 = m.new_sequence(64), r2 = m.new_sequence(64);
  m.restore(*snap, *r1);
  m.restore(*snap, *r2);
  EXPECT_TRUE(same_bits(first, prefill(m, *r1, tokens, 32, 48, 16)));
  EXPECT_TRUE(same_bits(first, prefill(m, *r2, tokens, 32, 48, 16)));
  // A different prefix restored gives other logits (the comparison above can fail).
  auto other = m.new_sequence(64);
  const auto t2 = random_tokens(32, m.desc().vocab, 4);
  prefill(m, *other, t2, 0, 32, 16);
  auto wrong = m.snapshot(*other);
  auto r3 = m.new_sequence(64);
  m.restore(*wrong, *r3);
  EXPECT_FALSE(same_bits(first, prefill(m, *r3, tokens, 32, 48, 16)));
}

TEST_F(PrefixState, SnapshotHoldsOnlyCommittedRows) {
  Model& m = model();
  const auto tokens = random_tokens(32, m.desc().vocab, 5);
  auto s = m.new_sequence(1024);
  prefill(m, *s, tokens, 0, 16, 16);
  auto at16 = m.snapshot(*s);
  prefill(m, *s, tokens, 16, 32, 16);
  auto at32 = m.snapshot(*s);
  // The attention layer's K/V: 2 KV heads × 64 × f32 × (K and V) per token, so 16 more tokens add
  // 16 · 1 KiB; the Mamba2 states are the same size at any position.
  const ModelDesc& d = m.desc();
  int attn = 0;
  for (const auto& l : d.layers) attn += l.kind == LayerKind::Attention;
  ASSERT_GE(attn, 1);
  EXPECT_EQ(at32->bytes() - at16->bytes(), size_t(attn) * 16 * 2 * 2 * 64 * sizeof(float));
  EXPECT_LT(at32->bytes(), s->bytes());
}

TEST_F(PrefixState, Errors) {
  Model& m = model();
  const auto tokens = random_tokens(20, m.desc().vocab, 6);
  auto s = m.new_sequence(64);
  std::vector<float> logits;
  m.forward(*s, tokens, ForwardMode::Prefill, logits, false);
  expect_error([&] { m.snapshot(*s); }, {"snapshot", "not committed"});
  m.commit(*s, 20);
  auto snap = m.snapshot(*s);
  auto small = m.new_sequence(10);
  expect_error([&] { m.restore(*snap, *small); }, {"restore", "20 tokens", "context window of 10"});
  auto busy = m.new_sequence(64);
  m.forward(*busy, {1, 2}, ForwardMode::Verify, logits, true);
  expect_error([&] { m.restore(*snap, *busy); }, {"restore", "not committed"});
}

}  // namespace
}  // namespace tandem::test
