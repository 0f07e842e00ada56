// The core mixers' scratch is one set of slots per Model, shared by its layers: what a prefill
// allocates beyond the weights and the sequence state does not grow with the number of MoE and
// attention layers, a pass through layers of different widths sizes each slot once, and a steady
// decode loop allocates nothing. Memory is counted by a backend that wraps the CPU one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <utility>

#include "synth_checkpoint.h"
#include "synth_model.h"
#include "counting_backend.h"
#include "tandem/model.h"
#include "tests/conformance/model_util.h"

namespace tandem::test {
namespace {

struct Loaded {
  std::shared_ptr<CountingBackend> be;
  std::unique_ptr<Model> model;
};

Loaded load(const ModelDesc& d) {
  Loaded l;
  l.be = std::make_shared<CountingBackend>(registry().backend("cpu"));
  LoadOptions o;
  o.device = "cpu";
  o.backend = l.be;
  auto ck = std::make_unique<synth::SynthCheckpoint>(synth::make_plan(d, synth::Mix::Bf16), 3,
                                                     "synth:" + d.pattern() + "/bf16");
  l.model = Model::load(std::move(ck), "synth bf16", o, registry());
  return l;
}

// The tiny shape's Mamba layer, then `pairs` × (MoE, attention), every MoE layer alike.
ModelDesc stacked(int pairs) {
  ModelDesc d = synth::model_shape("tiny", /*uniform=*/true);
  const LayerDesc mamba = *synth::first_layer(d, LayerKind::Mamba), moe = *synth::first_layer(d, LayerKind::MoE),
                  attn = *synth::first_layer(d, LayerKind::Attention);
  d.layers = {mamba};
  for (int i = 0; i < pairs; ++i) d.layers.insert(d.layers.end(), {moe, attn});
  return d;
}

std::vector<int32_t> random_tokens(std::mt19937_64& g, int n, int vocab) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(int32_t(g() % uint64_t(vocab)));
  return t;
}

// Bytes a prefill of `n` tokens allocates beyond what was live before it (the sequence's state
// included), as the high-water mark of live bytes.
size_t prefill_scratch(Loaded& l, Sequence& seq, int n) {
  Counts& c = *l.be->counts;
  const size_t before = c.live;
  c.peak = c.live;
  std::mt19937_64 g(7);
  std::vector<float> logits;
  l.model->forward(seq, random_tokens(g, n, l.model->desc().vocab), ForwardMode::Prefill, logits, false);
  l.model->commit(seq, n);
  return c.peak - before;
}

TEST(Scratch, PrefillScratchDoesNotGrowWithLayers) {
  constexpr int kTokens = 48, kContext = 64;
  size_t first = 0;
  for (int pairs : {1, 2, 4}) {
    Loaded l = load(stacked(pairs));
    auto seq = l.model->new_sequence(kContext);
    const size_t scratch = prefill_scratch(l, *seq, kTokens);
    std::printf("[measure] %d MoE + %d attention layers: %zu bytes of scratch for %d tokens\n", pairs, pairs,
                scratch, kTokens);
    if (pairs == 1) first = scratch;
    else EXPECT_EQ(scratch, first) << pairs << " MoE + attention pairs";
  }
  EXPECT_GT(first, 0u);
}

TEST(Scratch, LayersOfDifferentWidthsSizeEachSlotOnce) {
  // The tiny shape's MoE layers have (E, w) = (8, 256), (12, 512), (16, 256): the widest layer comes
  // second, so a slot grown layer by layer would be released and grown again within the pass.
  Loaded l = load(synth::model_shape("tiny"));
  auto seq = l.model->new_sequence(64);
  const int64_t releases = l.be->counts->releases;
  prefill_scratch(l, *seq, 40);
  EXPECT_EQ(l.be->counts->releases, releases);
}

TEST(Scratch, DecodeAllocatesNothing) {
  Loaded l = load(synth::model_shape("tiny"));
  auto seq = l.model->new_sequence(64);
  prefill_scratch(l, *seq, 16);
  const Counts c = *l.be->counts;
  std::vector<float> logits;
  std::mt19937_64 g(9);
  for (int step = 0; step < 8; ++step) {
    l.model->forward(*seq, random_tokens(g, 1, l.model->desc().vocab), ForwardMode::Verify, logits, false);
    l.model->commit(*seq, 1);
  }
  EXPECT_EQ(l.be->counts->allocs, c.allocs);
  EXPECT_EQ(l.be->counts->releases, c.releases);
  EXPECT_EQ(l.be->counts->live, c.live);
}

TEST(Scratch, BackendGivenMustMatchTheDevice) {
  LoadOptions o;
  o.device = "cuda";
  o.backend = std::make_shared<CountingBackend>(registry().backend("cpu"));
  auto ck = std::make_unique<synth::SynthCheckpoint>(synth::make_plan(stacked(1), synth::Mix::Bf16), 3, "synth");
  try {
    Model::load(std::move(ck), "synth bf16", o, registry());
    FAIL() << "a cpu backend loaded a model for cuda";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("runs on 'cpu'"), std::string::npos) << e.what();
  }
}

// Per-expert weight sets copy rows with memcpy: they need a backend that declares host memory
// (Backend::is_host), whatever its device is called.
TEST(Scratch, PerExpertSetsNeedAHostBackend) {
  ModelDesc d = stacked(1);
  d.layers = {*synth::first_layer(d, LayerKind::MoE)};
  auto be = std::make_shared<CountingBackend>(registry().backend("cpu"));
  be->host = false;
  LoadOptions o;
  o.device = "cpu";
  o.backend = be;
  auto ck = std::make_unique<synth::SynthCheckpoint>(synth::make_plan(d, synth::Mix::Bf16), 3, "synth");
  try {
    Model::load(std::move(ck), "synth bf16", o, registry());
    FAIL() << "per-expert sets loaded on a backend without host memory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expert set: per-expert weights run on host memory only, and backend 'cpu' "
                                         "is not host-addressable"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tandem::test
