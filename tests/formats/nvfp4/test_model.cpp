// End to end: the tiny nemotron_h of nvfp4_model_util.h in ModelOpt layout loads through the plugin
// registry and gives the logits of its dense twin (F32 weights from the reference dequantization,
// not the plugin's decoder). Once with config.json's quantization_config (MIXED_PRECISION, sharded by
// an index), once with the legacy hf_quant_config.json (uniform NVFP4, one file).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "nvfp4_model_util.h"
#include "tandem/model.h"
#include "tandem/registry.h"
#include "test_util.h"
#include "tests/conformance/model_util.h"

using namespace tandem;
using namespace tandem::nvfp4::test;

namespace {

using ::tandem::test::registry;

std::vector<float> run(Model& m, const std::vector<int32_t>& prompt, const std::vector<int32_t>& cont) {
  auto seq = m.new_sequence(64);
  std::vector<float> all, step;
  m.forward(*seq, prompt, ForwardMode::Prefill, all, true);
  m.commit(*seq, int(prompt.size()));
  for (int32_t t : cont) {  // one-token verify passes (plain decode)
    m.forward(*seq, {t}, ForwardMode::Verify, step, false);
    m.commit(*seq, 1);
    all.insert(all.end(), step.begin(), step.end());
  }
  m.forward(*seq, cont, ForwardMode::Verify, step, true);  // a multi-token verify over the same tokens
  all.insert(all.end(), step.begin(), step.end());
  return all;
}

// Writes the pair, loads both, compares logits.
void check_model(bool mixed) {
  tandem::test::TempDir dir("tandem-nvfp4-model");
  write_model_pair(dir.file("q"), dir.file("dense"), mixed);

  LoadOptions o;
  o.path = dir.file("q");
  auto q = Model::load(o, registry());
  o.path = dir.file("dense");
  auto d = Model::load(o, registry());
  EXPECT_EQ(q->format_name(), "nvfp4");
  EXPECT_EQ(d->format_name(), "safetensors");
  EXPECT_EQ(q->desc().pattern(), "M*E-");
  EXPECT_LT(q->weight_bytes(), d->weight_bytes());

  const std::vector<int32_t> prompt = {1, 17, 250, 3, 299, 42, 42, 128, 7}, cont = {64, 5, 211};
  std::vector<float> lq = run(*q, prompt, cont), ld = run(*d, prompt, cont);
  ASSERT_EQ(lq.size(), ld.size());
  ASSERT_EQ(lq.size(), (prompt.size() + 2 * cont.size()) * size_t(kVocab));
  double peak = 0, sq = 0;
  for (float v : ld) {
    ASSERT_TRUE(std::isfinite(v));
    peak = std::max(peak, double(std::abs(v)));
    sq += double(v) * v;
  }
  EXPECT_GT(std::sqrt(sq / double(ld.size())), 0.1) << "logits nearly zero: the test would prove little";
  const double diff = tandem::test::max_abs_diff(lq, ld);
  EXPECT_LT(diff, 1e-4 * peak) << "max |Δ| " << diff << " of peak " << peak;
  std::printf("nvfp4 (%s) vs dense reference: max |Δlogit| %.3g, peak |logit| %.3g\n",
              mixed ? "mixed, config.json, sharded" : "NVFP4, hf_quant_config.json", diff, peak);
}

}  // namespace

TEST(Nvfp4Model, MixedPrecisionShardedGivesTheLogitsOfItsReferenceDequantization) { check_model(true); }
TEST(Nvfp4Model, LegacyConfigUniformNvfp4GivesTheLogitsOfItsReferenceDequantization) { check_model(false); }
