// Detached memory (Backend::alloc_detached): the default is alloc(); prefix checkpoints take their
// storage from it, so freeing a snapshot leaves the memory epoch (recorded graphs stay), while a
// sequence's state is ordinary memory whose release still moves it. Counted by a backend that wraps
// the CPU one; the CUDA side is in cuda/test_graphs_cuda.cpp and backend-cuda/test_cuda_graph.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>

#include "counting_backend.h"
#include "device_only_backend.h"
#include "synth_checkpoint.h"
#include "synth_model.h"
#include "tandem/model.h"
#include "tests/conformance/model_util.h"

namespace tandem::test {
namespace {

// Only alloc() answers, handing out the CPU backend's buffers and remembering the sizes asked for.
class AllocOnly final : public DeviceOnlyBackend {
 public:
  AllocOnly() : DeviceOnlyBackend("alloc-only") {}
  std::shared_ptr<Backend> cpu = registry().backend("cpu");
  std::vector<size_t> asked;
  std::unique_ptr<Buffer> alloc(size_t bytes) override {
    asked.push_back(bytes);
    return cpu->alloc(bytes);
  }
};

TEST(DetachedMemory, DefaultIsAnOrdinaryAllocation) {
  AllocOnly be;
  auto a = be.alloc_detached(4096);
  auto b = be.alloc_detached(100);
  ASSERT_EQ(be.asked, (std::vector<size_t>{4096, 100}));
  ASSERT_TRUE(a && b);
  EXPECT_GE(a->bytes(), 4096u);
  EXPECT_GE(b->bytes(), 100u);
  EXPECT_NE(a->data(), b->data());
  // Zeroed like any buffer of the backend.
  const auto* p = static_cast<const unsigned char*>(a->data());
  for (size_t i = 0; i < 4096; ++i) ASSERT_EQ(p[i], 0) << "byte " << i;
  EXPECT_EQ(be.memory_epoch(), 0u);  // the default epoch never moves
}

std::vector<int32_t> random_tokens(std::mt19937_64& g, int n, int vocab) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(int32_t(g() % uint64_t(vocab)));
  return t;
}

TEST(DetachedMemory, SnapshotsAreDetachedAndSequencesAreNot) {
  auto be = std::make_shared<CountingBackend>(registry().backend("cpu"));
  LoadOptions o;
  o.device = "cpu";
  o.backend = be;
  const ModelDesc d = synth::model_shape("tiny");
  auto m = Model::load(std::make_unique<synth::SynthCheckpoint>(synth::make_plan(d, synth::Mix::Bf16), 5, "synth:tiny"),
                       "synth bf16", o, registry());
  const int V = m->desc().vocab;
  Counts& c = *be->counts;
  std::mt19937_64 g(3);
  auto seq = m->new_sequence(256);
  std::vector<float> logits, again;
  m->forward(*seq, random_tokens(g, 24, V), ForwardMode::Prefill, logits, false);
  m->commit(*seq, 24);

  // Every buffer a snapshot takes is detached (the tiny shape has attention layers: there are some).
  const int64_t allocs = c.allocs, detached = c.detached;
  auto snap = m->snapshot(*seq);
  EXPECT_GT(c.allocs - allocs, 0);
  EXPECT_EQ(c.allocs - allocs, c.detached - detached);

  // Restored into a fresh sequence, it decodes as the original does, bit for bit.
  auto copy = m->new_sequence(256);
  m->restore(*snap, *copy);
  const std::vector<int32_t> next = random_tokens(g, 1, V);
  m->forward(*seq, next, ForwardMode::Verify, logits, false);
  m->forward(*copy, next, ForwardMode::Verify, again, false);
  ASSERT_EQ(logits.size(), again.size());
  EXPECT_EQ(std::memcmp(logits.data(), again.data(), logits.size() * sizeof(float)), 0);
  m->commit(*seq, 1);
  m->commit(*copy, 1);

  // Freeing the snapshot leaves the epoch; freeing a sequence (ordinary memory) moves it.
  const int64_t releases = c.releases;
  const uint64_t before_free = be->memory_epoch();
  snap.reset();
  EXPECT_GT(c.releases, releases);
  EXPECT_EQ(be->memory_epoch(), before_free);
  copy.reset();
  EXPECT_GT(be->memory_epoch(), before_free);
}

}  // namespace
}  // namespace tandem::test
