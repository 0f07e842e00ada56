// A quantized LiLiCorr drafter in the drafting loop on the tiny fixture target (tests/fixtures/hf/latent):
// synthetic checkpoints with fc and the backbone's linears in NVFP4 (ModelOpt's layout, and MLX's nvfp4
// one, with an exclude pattern) draft greedy text equal to plain greedy text, and drafts were proposed
// and verified. The linears go through the target's NVFP4 format on the CPU (formats/nvfp4) or are
// dequantized with a warning; either way the verification keeps the text the target's.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>

#include "checkpoint.h"
#include "drafter.h"
#include "tandem/drafting.h"
#include "tandem/generate.h"
#include "tandem/parallel.h"
#include "tests/conformance/model_util.h"
#include "tests/schedulers/slots/drafters.h"

using namespace tandem;

namespace {

constexpr int kTokens = 48;

std::unique_ptr<Model> load_target() {
  LoadOptions o;
  o.path = test::data_path("hf/latent");
  o.device = "cpu";
  auto m = Model::load(o, test::registry());
  set_thread_count(1);
  return m;
}

std::string synthesize(const test::TempDir& dir, const ModelDesc& target, const std::string& name,
                       std::map<std::string, std::string> keys) {
  lilicorr::LiliFactory f;
  keys["geometry"] = "tiny";
  SpeculatorSettings s("", "draft.lilicorr", keys);
  const std::string path = dir.file(name);
  f.synthesize(path, target, s, 3);
  return path;
}

void expect_lossless(Model& m, const std::string& path, const std::string& what) {
  DraftOptions o = test::fixed_costs(7);  // verify every proposal at full width
  o.settings["lilicorr"] = SpeculatorSettings("", "draft.lilicorr", {{"path", path}});
  Drafting d(m, {{"lilicorr", std::make_shared<lilicorr::LiliFactory>()}}, o);
  const auto text = test::read_ids(test::data_path("hf/latent/prompt_200.txt"));
  for (size_t n : {size_t(5), size_t(23)}) {
    const std::vector<int32_t> p(text.begin(), text.begin() + long(n));
    const auto plain = generate(m, p, test::run_options(kTokens)).tokens;
    DraftMetrics dm;
    const auto got = d.generate(p, test::run_options(kTokens), {}, &dm).tokens;
    EXPECT_EQ(got, plain) << what << ", prompt of " << n;
    ASSERT_FALSE(dm.drafters.empty());
    const auto& lili = dm.drafters[0];
    EXPECT_EQ(lili.name, "lilicorr");
    EXPECT_GT(lili.proposals, 0) << dm.summary();
    EXPECT_GT(lili.drafted_tokens, 0) << dm.summary();
    std::printf("%s, prompt %zu: lilicorr proposed %lld times, %lld drafts verified, %lld accepted\n", what.c_str(), n,
                (long long)lili.proposals, (long long)lili.drafted_tokens, (long long)lili.accepted_tokens);
  }
}

}  // namespace

TEST(LilicorrQuantDrafting, Nvfp4DrafterDraftsLosslessly) {
  auto m = load_target();
  test::TempDir dir("lilicorr-qd");
  const std::string path = synthesize(dir, m->desc(), "nvfp4", {{"quant", "nvfp4"}});
  // The folder really is quantized: fc and a backbone linear come back with their NVFP4 form.
  const lilicorr::TensorMap t = lilicorr::read_tensors(path);
  ASSERT_TRUE(t.count("fc.weight") && t.count("layers.0.mlp.up_proj.weight"));
  EXPECT_TRUE(t.at("fc.weight").nvfp4);
  EXPECT_TRUE(t.at("layers.0.mlp.up_proj.weight").nvfp4);
  expect_lossless(*m, path, "lilicorr nvfp4");
}

TEST(LilicorrQuantDrafting, ExcludedModulesStayDenseAndDraftLosslessly) {
  auto m = load_target();
  test::TempDir dir("lilicorr-qd");
  const std::string path = synthesize(dir, m->desc(), "nvfp4-ex", {{"quant", "nvfp4"}, {"exclude", "fc|*.self_attn.*"}});
  const lilicorr::TensorMap t = lilicorr::read_tensors(path);
  EXPECT_FALSE(t.at("fc.weight").nvfp4);
  EXPECT_FALSE(t.at("layers.0.self_attn.q_proj.weight").nvfp4);
  EXPECT_TRUE(t.at("layers.0.mlp.up_proj.weight").nvfp4);
  expect_lossless(*m, path, "lilicorr nvfp4, fc and attention excluded");
}

TEST(LilicorrQuantDrafting, MlxNvfp4DrafterDraftsLosslessly) {
  auto m = load_target();
  test::TempDir dir("lilicorr-qd");
  const std::string path = synthesize(dir, m->desc(), "mlx", {{"quant", "mlx-nvfp4"}});
  const lilicorr::TensorMap t = lilicorr::read_tensors(path);
  EXPECT_TRUE(t.at("layers.0.mlp.up_proj.weight").nvfp4);
  expect_lossless(*m, path, "lilicorr mlx nvfp4");
}
