// The lilicorr drafter's device memory is detached (Backend::alloc_detached): its scratch and its
// context cache, regrown by doubling past the first 128 rows, come and go without moving the target
// backend's memory epoch, so a drafter's life never drops the target's recorded graphs. Counted by a
// backend wrapping the CPU one (tests/common/counting_backend.h).
#include <gtest/gtest.h>

#include "counting_backend.h"
#include "drafter.h"
#include "lili_by_hand.h"
#include "synth.h"
#include "tandem/drafting.h"
#include "tandem/parallel.h"
#include "tests/conformance/model_util.h"
#include "tests/schedulers/slots/drafters.h"

using namespace tandem;

namespace {

TEST(LilicorrDetached, ADrafterLifeLeavesTheMemoryEpoch) {
  auto be = std::make_shared<test::CountingBackend>(test::registry().backend("cpu"));
  LoadOptions o;
  o.path = test::data_path("hf/latent");
  o.device = "cpu";
  o.backend = be;
  auto m = Model::load(o, test::registry());
  set_thread_count(1);
  test::TempDir dir("lilicorr-detached");
  lilicorr::LiliFactory f;
  const std::string path = dir.file("lili");
  {
    SpeculatorSettings s("", "draft.lilicorr", {{"geometry", "tiny"}, {"head", "true"}});
    f.synthesize(path, m->desc(), s, 3);
  }
  auto grab = std::make_shared<test::Grab>();
  Drafting d(*m, {{"grab", grab}}, test::fixed_costs());
  const auto ids = test::read_ids(test::data_path("hf/latent/prompt_200.txt"));
  ASSERT_GE(ids.size(), size_t(200));
  const std::vector<int32_t> p(ids.begin(), ids.begin() + 200);
  test::Counts& c = *be->counts;

  // One life of a drafter: made, fed a 200-token prompt (the cache grows from 128 rows), one block
  // proposed, dropped. The first life loads the drafter's weights onto the target (kept by the
  // factory) and sets the taps; the second, made after the target's prefill, must allocate only
  // detached memory from its making to its end.
  std::vector<int> taps;
  for (int life = 0; life < 2; ++life) {
    auto seq = m->new_sequence(256);
    std::vector<float> logits;
    if (life == 1) {  // the taps the drafter reads, before the prefill fills them
      m->set_taps(taps);
      m->forward(*seq, p, ForwardMode::Prefill, logits, false);
      m->commit(*seq, int(p.size()));
    }
    const int64_t allocs = c.allocs, detached = c.detached;
    const uint64_t epoch = be->memory_epoch();
    SpeculatorSettings s("", "draft.lilicorr", {{"path", path}});
    auto sp = f.create(grab->ctx, s);
    auto& lili = static_cast<lilicorr::LiliDrafter&>(*sp);
    if (life == 0) {
      taps = lili.hidden_layers();
      m->set_taps(taps);
      m->forward(*seq, p, ForwardMode::Prefill, logits, false);
      m->commit(*seq, int(p.size()));
    }
    test::feed_prompt(lili, *m, p, logits);
    Draft draft;
    lili.propose(31, draft);
    EXPECT_FALSE(draft.tokens.empty());
    EXPECT_EQ(lili.context_rows(), int64_t(p.size()));
    sp.reset();
    if (life == 0) continue;
    EXPECT_GT(c.detached - detached, 8) << "the drafter's scratch and grown caches were not counted";
    EXPECT_EQ(c.allocs - allocs, c.detached - detached) << "the drafter allocated ordinary memory";
    EXPECT_EQ(be->memory_epoch(), epoch) << "the drafter's life moved the target's memory epoch";
  }
}

}  // namespace
