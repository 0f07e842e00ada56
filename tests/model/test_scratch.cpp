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
#include "tandem/model.h"
#include "tests/conformance/model_util.h"

namespace tandem::test {
namespace {

// What a CountingBackend's buffers hold, shared with them so a buffer may outlive its backend.
struct Counts {
  size_t live = 0, peak = 0;
  int64_t allocs = 0, releases = 0;
};

class CountedBuffer final : public Buffer {
 public:
  CountedBuffer(std::unique_ptr<Buffer> inner, std::shared_ptr<Counts> counts)
      : inner_(std::move(inner)), counts_(std::move(counts)) {
    counts_->live += inner_->bytes();
    counts_->peak = std::max(counts_->peak, counts_->live);
    ++counts_->allocs;
  }
  ~CountedBuffer() override {
    counts_->live -= inner_->bytes();
    ++counts_->releases;
  }
  void* data() override { return inner_->data(); }
  size_t bytes() const override { return inner_->bytes(); }

 private:
  std::unique_ptr<Buffer> inner_;
  std::shared_ptr<Counts> counts_;
};

// The CPU backend, with every buffer it hands out counted.
class CountingBackend final : public Backend {
 public:
  explicit CountingBackend(std::shared_ptr<Backend> inner) : in_(std::move(inner)) {}
  std::shared_ptr<Counts> counts = std::make_shared<Counts>();

  std::string device() const override { return in_->device(); }
  bool host = true;  // false: claims device memory (is_host), though the buffers stay the CPU's
  bool is_host() const override { return host && in_->is_host(); }
  void set_threads(int n) override { in_->set_threads(n); }
  std::unique_ptr<Buffer> alloc(size_t bytes) override {
    return std::make_unique<CountedBuffer>(in_->alloc(bytes), counts);
  }
  void upload(void* dst, const void* src, size_t bytes) override { in_->upload(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { in_->download(dst, src, bytes); }
  void synchronize() override { in_->synchronize(); }
  void rms_norm(const Tensor& x, const float* w, float eps, const Tensor& y) override { in_->rms_norm(x, w, eps, y); }
  void gated_rms_norm(const Tensor& y, const Tensor& z, const float* w, int groups, float eps,
                      const Tensor& out) override {
    in_->gated_rms_norm(y, z, w, groups, eps, out);
  }
  void add(const Tensor& a, const Tensor& b, const Tensor& out) override { in_->add(a, b, out); }
  void relu2(const Tensor& x) override { in_->relu2(x); }
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, float* kc, float* vc, int64_t capacity,
                 int64_t pos0, int nq, int nkv, int hd, const Tensor& out) override {
    in_->attention(q, k, v, kc, vc, capacity, pos0, nq, nkv, hd, out);
  }
  void attention_at(const Tensor& q, const Tensor& k, const Tensor& v, float* kc, float* vc, int64_t capacity,
                    int64_t pos0, const int64_t* pos0_device, int nq, int nkv, int hd, const Tensor& out) override {
    in_->attention_at(q, k, v, kc, vc, capacity, pos0, pos0_device, nq, nkv, hd, out);
  }
  void moe_route(const Tensor& logits, const float* bias, const RouteParams& p, int32_t* ids, float* w) override {
    in_->moe_route(logits, bias, p, ids, w);
  }
  void moe_combine(const Tensor& eo, const float* w, int k, const Tensor& out) override { in_->moe_combine(eo, w, k, out); }
  int32_t sample(const float* logits, int64_t vocab, const SamplingParams& p, Rng& rng) override {
    return in_->sample(logits, vocab, p, rng);
  }

 private:
  std::shared_ptr<Backend> in_;
};

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
