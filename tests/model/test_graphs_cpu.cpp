// Graphs on a backend that cannot record them (the CPU): off from the load on, as the backend
// declares; switched on anyway, verify passes fall back to running op by op, say why once, and give
// the logits of a model with graphs switched off.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "synth_checkpoint.h"
#include "synth_model.h"
#include "tandem/model.h"
#include "tandem/registry.h"
#include "test_util.h"

namespace tandem::test {
namespace {

TEST(GraphsCpu, FallBackToOpByOp) {
  PluginRegistry reg;
  reg.load_directory(plugin_dir());
  auto ck = std::make_unique<synth::SynthCheckpoint>(synth::make_plan(synth::model_shape("tiny"), synth::Mix::Bf16),
                                                     3, "synth:tiny/bf16");
  LoadOptions o;
  o.device = "cpu";
  auto m = Model::load(std::move(ck), "synth bf16", o, reg);
  // The CPU backend declares at load that it cannot record (Backend::graphs_off_reason()).
  EXPECT_FALSE(m->graph_stats().enabled);
  EXPECT_NE(m->graph_stats().off_reason.find("cannot record"), std::string::npos) << m->graph_stats().off_reason;
  // Switched on anyway, a verify pass asks the backend to record, which refuses: op by op from then on.
  m->set_graphs(true);
  EXPECT_TRUE(m->graph_stats().enabled);

  const int V = m->desc().vocab;
  auto a = m->new_sequence(64), b = m->new_sequence(64);
  std::vector<float> la, lb;
  std::mt19937_64 g(5);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 6; ++i) prompt.push_back(int32_t(g() % uint64_t(V)));
  for (Sequence* s : {a.get(), b.get()}) {
    m->forward(*s, prompt, ForwardMode::Prefill, la, false);
    m->commit(*s, int(prompt.size()));
  }
  // Both sequences take the same tokens with graphs on: each shape's first pass runs op by op, the
  // second asks the backend to record and falls back; the logits agree throughout.
  for (int step = 0; step < 4; ++step) {
    const std::vector<int32_t> t = {int32_t(g() % uint64_t(V)), int32_t(g() % uint64_t(V))};
    m->forward(*a, t, ForwardMode::Verify, la, true);
    m->forward(*b, t, ForwardMode::Verify, lb, true);
    ASSERT_EQ(la.size(), lb.size());
    EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)), 0) << "step " << step;
    m->commit(*a, 1);
    m->commit(*b, 1);
  }
  const GraphStats& st = m->graph_stats();
  EXPECT_FALSE(st.enabled);
  EXPECT_NE(st.off_reason.find("cannot record"), std::string::npos) << st.off_reason;
  EXPECT_EQ(st.captured, 0);
  EXPECT_EQ(st.replayed, 0);
}

}  // namespace
}  // namespace tandem::test
