// CUDA graphs of verify passes: one model, two sequences fed the same tokens, one run op by op
// (graphs switched off around its passes) and one from graphs. Every logit must have the same bits,
// through 64 decode steps, verify passes of 1..16 tokens with partial commits, and a long prefill on
// a third sequence in between (it regrows scratch, so recorded graphs must be dropped, not replayed);
// and freed prefix checkpoints (detached memory), which must not drop them.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>

#include "cuda_probe.h"
#include "tandem/cuda/util.h"
#include "synth_checkpoint.h"
#include "synth_model.h"
#include "tandem/model.h"
#include "tandem/registry.h"
#include "test_util.h"

namespace tandem::test {
namespace {

PluginRegistry& registry() {
  static PluginRegistry* r = [] {
    auto* reg = new PluginRegistry();
    reg->load_directory(plugin_dir());
    return reg;
  }();
  return *r;
}

// The tiny synthetic shape (7 layers MEM*EME, H 512, vocab 2048) in one weight mix, on "cuda".
Model& model(synth::Mix mix) {
  static std::map<synth::Mix, std::unique_ptr<Model>> cache;
  auto& m = cache[mix];
  if (!m) {
    auto ck = std::make_unique<synth::SynthCheckpoint>(synth::make_plan(synth::model_shape("tiny"), mix), 7,
                                                       std::string("synth:tiny/") + synth::mix_name(mix));
    LoadOptions o;
    o.device = "cuda";
    m = Model::load(std::move(ck), std::string("synth ") + synth::mix_name(mix), o, registry());
  }
  return *m;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

int argmax(const std::vector<float>& v, size_t row, int vocab) {
  const float* p = v.data() + row * size_t(vocab);
  int b = 0;
  for (int i = 1; i < vocab; ++i)
    if (p[i] > p[b]) b = i;
  return b;
}

// Two sequences of one model: `eager` runs with graphs off, `graph` with graphs on.
struct Twins {
  Model& m;
  std::unique_ptr<Sequence> eager, graph;
  std::vector<float> le, lg;

  Twins(Model& model, int64_t context) : m(model), eager(m.new_sequence(context)), graph(m.new_sequence(context)) {}

  // The same pass on both; false (with a message) when the logits differ or graphs gave up.
  ::testing::AssertionResult forward(const std::vector<int32_t>& t, ForwardMode mode, bool all) {
    m.set_graphs(false);
    m.forward(*eager, t, mode, le, all);
    m.set_graphs(true);
    m.forward(*graph, t, mode, lg, all);
    if (!m.graph_stats().enabled)
      return ::testing::AssertionFailure() << "graphs switched themselves off: " << m.graph_stats().off_reason;
    if (!same_bits(le, lg))
      return ::testing::AssertionFailure() << "logits differ (pass of " << t.size() << " tokens at position "
                                           << eager->pos << ")";
    return ::testing::AssertionSuccess();
  }
  void commit(int n) {
    m.commit(*eager, n);
    m.commit(*graph, n);
  }
};

std::vector<int32_t> random_tokens(std::mt19937_64& g, int n, int vocab) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(int32_t(g() % uint64_t(vocab)));
  return t;
}

class Graphs : public ::testing::TestWithParam<synth::Mix> {};

TEST_P(Graphs, DecodeReplaysBitIdentical) {
  TANDEM_SKIP_WITHOUT_CUDA();
  Model& m = model(GetParam());
  const int V = m.desc().vocab;
  Twins tw(m, 512);
  std::mt19937_64 g(11);
  ASSERT_TRUE(tw.forward(random_tokens(g, 12, V), ForwardMode::Prefill, false));
  tw.commit(12);
  const GraphStats before = m.graph_stats();
  for (int step = 0; step < 64; ++step) {
    const int32_t tok = argmax(tw.lg, 0, V);
    ASSERT_TRUE(tw.forward({tok}, ForwardMode::Verify, false)) << "step " << step;
    tw.commit(1);
  }
  const GraphStats& after = m.graph_stats();
  std::printf("[measure] graphs: %lld captured, %lld replayed, %lld eager\n", (long long)after.captured,
              (long long)after.replayed, (long long)after.eager);
  // The graph sequence ran its first step op by op, recorded the second and replayed the rest.
  EXPECT_GE(after.replayed - before.replayed, 62);
  EXPECT_GE(after.captured - before.captured, 1);
  // What `tandem bench` prints as launches per token: the decode graph's nodes, at least one kernel
  // per layer and one for the head.
  const auto it = after.launches.find(1);
  ASSERT_TRUE(it != after.launches.end());
  std::printf("[measure] decode graph: %lld kernels, %lld copies\n", (long long)it->second.kernels,
              (long long)it->second.copies);
  EXPECT_GT(it->second.kernels, int64_t(m.desc().layers.size()));
  EXPECT_GE(it->second.copies, 0);
}

TEST_P(Graphs, VerifyAndCommitCyclesReplayBitIdentical) {
  TANDEM_SKIP_WITHOUT_CUDA();
  Model& m = model(GetParam());
  const int V = m.desc().vocab;
  Twins tw(m, 2048);
  std::mt19937_64 g(12);
  ASSERT_TRUE(tw.forward(random_tokens(g, 20, V), ForwardMode::Prefill, false));
  tw.commit(20);
  const GraphStats before = m.graph_stats();
  // Every k = 1..16 three times or more (op by op, recorded, replayed), each with some of its
  // tokens accepted: none, all, or a part (Mamba replays the accepted steps, the KV rows stay).
  for (int c = 0; c < 80; ++c) {
    const int k = 1 + c % Model::graph_max_tokens;
    const bool all = c % 5 != 4;
    ASSERT_TRUE(tw.forward(random_tokens(g, k, V), ForwardMode::Verify, all)) << "cycle " << c << ", k " << k;
    const int accept = (c * 7 + 3) % (k + 1);
    tw.commit(accept);
    ASSERT_EQ(tw.eager->pos, tw.graph->pos);
  }
  // Plain decoding afterwards still agrees.
  for (int step = 0; step < 8; ++step) {
    ASSERT_TRUE(tw.forward({argmax(tw.lg, 0, V)}, ForwardMode::Verify, false)) << "decode step " << step;
    tw.commit(1);
  }
  EXPECT_GT(m.graph_stats().replayed - before.replayed, 40);
}

TEST_P(Graphs, RegrownScratchDropsRecordedGraphs) {
  TANDEM_SKIP_WITHOUT_CUDA();
  Model& m = model(GetParam());
  const int V = m.desc().vocab;
  Twins tw(m, 4096);
  std::mt19937_64 g(13);
  ASSERT_TRUE(tw.forward(random_tokens(g, 8, V), ForwardMode::Prefill, false));
  tw.commit(8);
  for (int step = 0; step < 4; ++step) {
    ASSERT_TRUE(tw.forward({argmax(tw.lg, 0, V)}, ForwardMode::Verify, false));
    tw.commit(1);
  }
  // A longer prefill than any before, on another sequence: the model's scratch is regrown (its old
  // blocks released), so the twins' graphs hold stale addresses and must be recorded again.
  static int64_t longest = 1500;
  longest += 100;
  auto other = m.new_sequence(longest + 16);
  std::vector<float> lo;
  m.set_graphs(true);
  m.forward(*other, random_tokens(g, int(longest), V), ForwardMode::Prefill, lo, true);
  m.commit(*other, int(longest));
  for (int step = 0; step < 6; ++step) {
    ASSERT_TRUE(tw.forward({argmax(tw.lg, 0, V)}, ForwardMode::Verify, false)) << "step " << step;
    tw.commit(1);
    // Interleaved decoding of the third sequence (its own graphs, the same shape).
    m.forward(*other, {argmax(lo, 0, V)}, ForwardMode::Verify, lo, false);
    m.commit(*other, 1);
  }
  other.reset();  // freeing a sequence moves the epoch too
  for (int step = 0; step < 4; ++step) {
    ASSERT_TRUE(tw.forward({argmax(tw.lg, 0, V)}, ForwardMode::Verify, false)) << "after free, step " << step;
    tw.commit(1);
  }
}

// Prefix checkpoints live in detached memory (Backend::alloc_detached): taking one, restoring it and
// freeing it leaves the recorded decode graph in place (the next step replays it, no new recording),
// while an ordinary buffer's release still drops it (the next step records again). Bits stay equal.
TEST_P(Graphs, FreedPrefixCheckpointKeepsTheDecodeGraph) {
  TANDEM_SKIP_WITHOUT_CUDA();
  Model& m = model(GetParam());
  const int V = m.desc().vocab;
  Twins tw(m, 512);
  std::mt19937_64 g(14);
  ASSERT_TRUE(tw.forward(random_tokens(g, 10, V), ForwardMode::Prefill, false));
  tw.commit(10);
  auto step = [&](const char* when) {
    ::testing::AssertionResult r = tw.forward({argmax(tw.lg, 0, V)}, ForwardMode::Verify, false);
    tw.commit(1);
    return r << " (" << when << ")";
  };
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(step("warm-up"));  // op by op, recorded, replayed

  for (int round = 0; round < 3; ++round) {
    const GraphStats before = m.graph_stats();
    const uint64_t epoch = m.backend().memory_epoch();
    auto snap = m.snapshot(*tw.graph);
    ASSERT_TRUE(step("after a snapshot"));
    m.restore(*snap, *tw.graph);  // back one token: the twins part, so the eager one follows
    m.restore(*snap, *tw.eager);
    snap.reset();
    EXPECT_EQ(m.backend().memory_epoch(), epoch) << "freeing a prefix checkpoint moved the memory epoch";
    ASSERT_TRUE(step("after a restore and a free"));
    const GraphStats& after = m.graph_stats();
    std::printf("[measure] round %d: graphs used (%lld recorded, %lld replayed)\n", round,
                (long long)(after.captured - before.captured), (long long)(after.replayed - before.replayed));
    EXPECT_EQ(after.captured, before.captured) << "a decode graph was recorded again (round " << round << ")";
    EXPECT_EQ(after.replayed - before.replayed, 2) << "round " << round;
  }

  const GraphStats before = m.graph_stats();
  m.backend().alloc(4096).reset();  // an ordinary buffer's release: recorded graphs may be stale
  ASSERT_TRUE(step("after an ordinary free"));
  EXPECT_EQ(m.graph_stats().captured - before.captured, 1) << "an ordinary free must drop the recorded graphs";
  ASSERT_TRUE(step("replayed again"));
  EXPECT_EQ(m.graph_stats().replayed - before.replayed, 2);
}

INSTANTIATE_TEST_SUITE_P(Mixes, Graphs, ::testing::Values(synth::Mix::GgufIq2, synth::Mix::Bf16),
                         [](const ::testing::TestParamInfo<synth::Mix>& i) {
                           return i.param == synth::Mix::GgufIq2 ? std::string("gguf_iq2") : std::string("bf16");
                         });

}  // namespace
}  // namespace tandem::test
