// Model::forward_batch: verify passes of several sequences in one forward. Four sequences at
// different positions (prompts of different lengths) take mixed 1-row and k-row passes with partial
// commits; every sequence's logits and tap rows must have the bits of the same passes run one
// sequence at a time with forward(). Built twice: for the CPU, and with TANDEM_BATCH_DEVICE="cuda"
// as test_batch_cuda (label gpu; skips without a CUDA device, fails under TANDEM_REQUIRE_GPU=1).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>

#include "synth_checkpoint.h"
#include "synth_model.h"
#include "tandem/model.h"
#include "tandem/registry.h"
#include "test_util.h"
#include "tests/conformance/model_util.h"

#ifndef TANDEM_BATCH_DEVICE
#define TANDEM_BATCH_DEVICE "cpu"
#else
#include "cuda_probe.h"
#endif

namespace tandem::test {
namespace {

// The tiny synthetic shape (7 layers MEM*EME: Mamba2, MoE and attention; H 512, vocab 2048).
Model& model(synth::Mix mix) {
  static std::map<synth::Mix, std::unique_ptr<Model>> cache;
  auto& m = cache[mix];
  if (!m) {
    auto ck = std::make_unique<synth::SynthCheckpoint>(synth::make_plan(synth::model_shape("tiny"), mix), 11,
                                                       std::string("synth:tiny/") + synth::mix_name(mix));
    LoadOptions o;
    o.device = TANDEM_BATCH_DEVICE;
    o.threads = 2;
    m = Model::load(std::move(ck), std::string("synth ") + synth::mix_name(mix), o, registry());
  }
  return *m;
}

std::vector<float> download(Backend& be, const Tensor& t) {
  std::vector<float> v(size_t(t.numel()));
  be.download(v.data(), t.data, t.nbytes());
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class Batch : public ::testing::TestWithParam<synth::Mix> {
 protected:
  void SetUp() override {
#ifdef TANDEM_BATCH_DEVICE_CUDA
    TANDEM_SKIP_WITHOUT_CUDA();
#endif
  }
};

// Solo and batched twins of four sequences, stepped together for 10 steps.
TEST_P(Batch, LogitsAndTapsEqualSoloPasses) {
  Model& m = model(GetParam());
  const int V = m.desc().vocab;
  m.set_taps({0, 3, 6});
  std::mt19937_64 g(17);
  auto tok = [&] { return int32_t(g() % uint64_t(V)); };
  const int prompts[] = {3, 7, 12, 20};
  std::vector<std::unique_ptr<Sequence>> solo, batch;
  std::vector<float> l;
  for (int len : prompts) {
    std::vector<int32_t> p;
    for (int i = 0; i < len; ++i) p.push_back(tok());
    for (auto* v : {&solo, &batch}) {
      v->push_back(m.new_sequence(128));
      m.forward(*v->back(), p, ForwardMode::Prefill, l, false);
      m.commit(*v->back(), len);
    }
  }
  for (int step = 0; step < 10; ++step) {
    // Which sequences take part (all of them on even steps, a changing subset on odd ones), with
    // 1 … 4 rows each: at most 16 rows.
    std::vector<size_t> who;
    for (size_t b = 0; b < solo.size(); ++b)
      if (step % 2 == 0 || (g() & 1)) who.push_back(b);
    if (who.empty()) who.push_back(size_t(step) % solo.size());
    std::vector<std::vector<int32_t>> tokens;
    std::vector<bool> all;
    for (size_t i = 0; i < who.size(); ++i) {
      const int k = 1 + int(g() % 4);
      tokens.emplace_back();
      for (int j = 0; j < k; ++j) tokens.back().push_back(tok());
      all.push_back(k > 1 || (g() & 1));
    }
    // Solo: one forward per sequence, its logits and its tap rows.
    std::vector<std::vector<float>> want(who.size());
    std::vector<std::vector<std::vector<float>>> want_taps(who.size());
    for (size_t i = 0; i < who.size(); ++i) {
      m.forward(*solo[who[i]], tokens[i], ForwardMode::Verify, want[i], all[i]);
      for (size_t j = 0; j < m.taps().size(); ++j) want_taps[i].push_back(download(m.backend(), m.tap(j)));
    }
    // Batched: one forward for all of them, the logits poisoned first.
    std::vector<std::vector<float>> got(who.size(), std::vector<float>(size_t(V), std::nanf("")));
    std::vector<Model::BatchPass> passes;
    for (size_t i = 0; i < who.size(); ++i) passes.push_back({batch[who[i]].get(), tokens[i], all[i], &got[i]});
    const int64_t before = m.passes();
    m.forward_batch(passes);
    EXPECT_EQ(m.passes() - before, 1) << "step " << step;
    int64_t row = 0;
    for (size_t i = 0; i < who.size(); ++i) {
      EXPECT_TRUE(same_bits(want[i], got[i])) << "step " << step << ": sequence " << who[i] << " ("
                                              << tokens[i].size() << " rows at position " << batch[who[i]]->pos
                                              << ", all positions " << all[i] << ") differs from its solo pass";
      const int64_t n = int64_t(tokens[i].size());
      for (size_t j = 0; j < m.taps().size(); ++j)
        EXPECT_TRUE(same_bits(want_taps[i][j], download(m.backend(), m.tap(j).slice_rows(row, n))))
            << "step " << step << ": tap of layer " << m.taps()[j] << ", sequence " << who[i];
      row += n;
    }
    // A partial commit, the same on both twins (now and then none of the pass).
    for (size_t i = 0; i < who.size(); ++i) {
      const int k = int(tokens[i].size());
      const int a = g() % 5 == 0 ? 0 : 1 + int(g() % uint64_t(k));
      m.commit(*solo[who[i]], a);
      m.commit(*batch[who[i]], a);
      ASSERT_EQ(solo[who[i]]->pos, batch[who[i]]->pos);
    }
  }
  // The states agree after the steps: one more plain step each must give the same logits.
  for (size_t b = 0; b < solo.size(); ++b) {
    std::vector<float> a, c;
    const std::vector<int32_t> t = {tok()};
    m.forward(*solo[b], t, ForwardMode::Verify, a, false);
    m.forward(*batch[b], t, ForwardMode::Verify, c, false);
    EXPECT_TRUE(same_bits(a, c)) << "sequence " << b << " after the batched steps";
    m.commit(*solo[b], 1);
    m.commit(*batch[b], 1);
  }
  m.set_taps({});
}

// The same batch shape step after step (as a server's busy slots decode): on a backend that records
// graphs the batch is recorded on its second step and replayed after, and every step's logits keep
// the solo passes' bits through the replays and the commits between them.
TEST_P(Batch, SteadyShapesReplayBitIdentical) {
  Model& m = model(GetParam());
  const int V = m.desc().vocab;
  std::mt19937_64 g(29);
  auto tok = [&] { return int32_t(g() % uint64_t(V)); };
  std::vector<std::unique_ptr<Sequence>> solo, batch;
  std::vector<float> l;
  for (int len : {4, 9, 2}) {
    std::vector<int32_t> p;
    for (int i = 0; i < len; ++i) p.push_back(tok());
    for (auto* v : {&solo, &batch}) {
      v->push_back(m.new_sequence(96));
      m.forward(*v->back(), p, ForwardMode::Prefill, l, false);
      m.commit(*v->back(), len);
    }
  }
  const GraphStats before = m.graph_stats();
  const int rows_of[] = {1, 3, 2};  // a plain slot and two drafted ones
  constexpr int kSteps = 8;
  for (int step = 0; step < kSteps; ++step) {
    std::vector<std::vector<int32_t>> tokens(solo.size());
    std::vector<std::vector<float>> want(solo.size()), got(solo.size());
    std::vector<Model::BatchPass> passes;
    for (size_t b = 0; b < solo.size(); ++b) {
      for (int j = 0; j < rows_of[b]; ++j) tokens[b].push_back(tok());
      m.forward(*solo[b], tokens[b], ForwardMode::Verify, want[b], rows_of[b] > 1);
      got[b].assign(want[b].size(), std::nanf(""));
      passes.push_back({batch[b].get(), tokens[b], rows_of[b] > 1, &got[b]});
    }
    m.forward_batch(passes);
    for (size_t b = 0; b < solo.size(); ++b) {
      EXPECT_TRUE(same_bits(want[b], got[b])) << "step " << step << ", sequence " << b;
      const int a = 1 + int(g() % uint64_t(rows_of[b]));
      m.commit(*solo[b], a);
      m.commit(*batch[b], a);
    }
  }
  const GraphStats& after = m.graph_stats();
  if (after.enabled) {
    // Solo passes replay their own graphs too; the batch adds one recording and kSteps − 2 replays.
    EXPECT_GE(after.captured - before.captured, 1 + int64_t(solo.size()));
    EXPECT_GE(after.replayed - before.replayed, int64_t(kSteps - 2) * int64_t(1 + solo.size()));
  }
}

TEST_P(Batch, BadBatchesAreOneLineErrors) {
  Model& m = model(GetParam());
  auto a = m.new_sequence(64), b = m.new_sequence(64);
  std::vector<float> la, lb;
  auto message = [&](const std::vector<Model::BatchPass>& p) {
    try {
      m.forward_batch(p);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({}).find("no passes"), std::string::npos);
  EXPECT_NE(message({{a.get(), {1}, false, &la}, {a.get(), {2}, false, &lb}}).find("pass 1: the sequence of pass 0"),
            std::string::npos);
  EXPECT_NE(message({{a.get(), {1}, false, &la}, {b.get(), {}, false, &lb}}).find("pass 1: no tokens"),
            std::string::npos);
  EXPECT_NE(message({{a.get(), std::vector<int32_t>(9, 1), true, &la}, {b.get(), std::vector<int32_t>(8, 1), true, &lb}})
                .find("17 rows in 2 passes, at most 16"),
            std::string::npos);
  EXPECT_NE(message({{a.get(), {1}, false, &la}, {b.get(), {m.desc().vocab}, false, &lb}}).find("pass 1: token id"),
            std::string::npos);
  EXPECT_FALSE(a->pending || b->pending) << "a refused batch leaves the sequences as they were";
}

INSTANTIATE_TEST_SUITE_P(Mixes, Batch, ::testing::Values(synth::Mix::Bf16, synth::Mix::GgufIq2),
                         [](const auto& info) { return std::string(info.param == synth::Mix::Bf16 ? "bf16" : "gguf_iq2"); });

}  // namespace
}  // namespace tandem::test
