// Loading LiLiCorr checkpoints (plugins/spec-lilicorr/checkpoint.*): the export and serving names give
// the same bits, geometry comes from the tensors and disagreements with config.json are one-line
// errors naming both, unknown quantizations and dtypes are refused by name; the context cache equals recomputing.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "backbone.h"
#include "checkpoint.h"
#include "drafter.h"
#include "formats/safetensors/safetensors_checkpoint.h"
#include "formats/safetensors/safetensors_file_writer.h"
#include "synth.h"
#include "test_util.h"

using namespace tandem;
using namespace tandem::lilicorr;

namespace {

ModelDesc target_shape(int hidden = 64, int vocab = 256, int layers = 8) {
  ModelDesc d;
  d.hidden = hidden;
  d.vocab = vocab;
  d.layers.resize(size_t(layers));
  return d;
}

std::string synth(const test::TempDir& dir, const std::string& name, bool serving, bool bf16, bool head = true) {
  SynthGeometry g = synth_geometry("tiny", target_shape());
  g.serving_names = serving;
  g.bf16 = bf16;
  g.with_head = head;
  const std::string path = dir.file(name);
  write_synthetic(path, g, 7);
  return path;
}

void edit_config(const std::string& dir, const std::string& from, const std::string& to) {
  std::string s = test::read_file(dir + "/config.json");
  const size_t at = s.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  s.replace(at, from.size(), to);
  std::ofstream(dir + "/config.json") << s;
}

bool has_tensor(const std::string& dir, const std::string& name) {
  return safetensors::open_checkpoint(dir)->find(name) != nullptr;
}

// Scores of the head on fixed random inputs (bits compared).
HeadScores scores_of(const HeadWeights& w) {
  const int S = w.c.slots(), K = w.c.topk;
  const int64_t H = w.c.model_hidden;
  auto emb = test::random_vec(size_t(S * K * H), 1), pass = test::random_vec(size_t(S * H), 2),
       anchor = test::random_vec(size_t(H), 3);
  std::vector<float> logp;
  for (int s = 0; s < S; ++s)
    for (int k = 0; k < K; ++k) logp.push_back(-0.3f - 0.4f * float(k) - 0.1f * float(s));
  HeadScores out;
  score(w, S, emb.data(), logp.data(), pass.data(), anchor.data(), true, out);
  return out;
}

TEST(LilicorrLoader, ExportAndServingNamesLoadTheSameBits) {
  test::TempDir dir("lilicorr");
  for (bool bf16 : {false, true}) {
    const std::string e = synth(dir, bf16 ? "e16" : "e32", false, bf16), s = synth(dir, bf16 ? "s16" : "s32", true, bf16);
    // The two files really use the two schemes (spec/lilicorr.md § 2 table).
    EXPECT_TRUE(has_tensor(e, "lilicorr.feature_mlp.0.weight"));
    EXPECT_TRUE(has_tensor(e, "lilicorr.layers.1.mlp.2.bias"));
    EXPECT_TRUE(has_tensor(s, "lilicorr.feature_norm.weight"));
    EXPECT_TRUE(has_tensor(s, "lilicorr.feature_mlp.down_proj.weight"));
    EXPECT_TRUE(has_tensor(s, "lilicorr.layers.1.mlp.down_proj.bias"));
    EXPECT_FALSE(has_tensor(s, "lilicorr.feature_mlp.0.weight"));
    const TensorMap a = read_tensors(e), b = read_tensors(s);
    ASSERT_EQ(a.size(), b.size());
    for (const auto& kv : a) {
      auto it = b.find(kv.first);
      ASSERT_NE(it, b.end()) << kv.first;
      EXPECT_EQ(kv.second.shape, it->second.shape) << kv.first;
      EXPECT_EQ(kv.second.data, it->second.data) << kv.first;
    }
    auto wa = load_drafter(e), wb = load_drafter(s);
    ASSERT_TRUE(wa->head && wb->head);
    EXPECT_EQ(wa->head->c.topk, 8);
    EXPECT_EQ(wa->head->c.hidden, 32);
    EXPECT_EQ(wa->head->c.mlp, 64);
    EXPECT_FALSE(wa->head->token_proj.empty()) << "Hh 32 != H 64: token_proj exists";
    const HeadScores x = scores_of(*wa->head), y = scores_of(*wb->head);
    EXPECT_EQ(x.start, y.start);
    EXPECT_EQ(x.pairs, y.pairs);
    EXPECT_EQ(wa->backbone.fc.w, wb->backbone.fc.w);
  }
}

TEST(LilicorrLoader, WithoutHeadTensorsTheBackboneDrafts) {
  test::TempDir dir("lilicorr");
  auto w = load_drafter(synth(dir, "plain", false, true, false));
  EXPECT_FALSE(w->head.has_value());
  EXPECT_EQ(w->backbone.c.layers, 5);
  EXPECT_EQ(w->backbone.c.block, 8);
  EXPECT_EQ(w->backbone.c.target_layers, (std::vector<int>{0, 1, 3, 4, 6, 7}));
}

TEST(LilicorrLoader, ConfigAndTensorDisagreementsNameBoth) {
  test::TempDir dir("lilicorr");
  {
    const std::string p = synth(dir, "topk", false, true);
    edit_config(p, "\"lilicorr_candidate_topk\": 8", "\"lilicorr_candidate_topk\": 4");
    test::expect_error([&] { load_drafter(p); }, {"lilicorr_candidate_topk", "is 4", "lilicorr.rank_embedding", "gives 8"});
  }
  {
    const std::string p = synth(dir, "width", false, true);
    edit_config(p, "\"lilicorr_hidden_size\": 32", "\"lilicorr_hidden_size\": 0");
    test::expect_error([&] { load_drafter(p); }, {"lilicorr_hidden_size", "lilicorr.pass_hidden_proj.weight"});
  }
  {
    const std::string p = synth(dir, "layers", false, true);
    edit_config(p, "\"num_hidden_layers\": 5", "\"num_hidden_layers\": 6");
    test::expect_error([&] { load_drafter(p); }, {"num_hidden_layers", "is 6", "5 layers"});
  }
  {
    const std::string p = synth(dir, "kv", false, true);
    edit_config(p, "\"num_key_value_heads\": 2", "\"num_key_value_heads\": 4");
    test::expect_error([&] { load_drafter(p); }, {"num_key_value_heads", "layers.0.self_attn.k_proj.weight"});
  }
  {
    const std::string p = synth(dir, "taps", false, true);
    edit_config(p, "\"target_layer_ids\": [0, 1, 3, 4, 6, 7]", "\"target_layer_ids\": [0, 1, 3]");
    test::expect_error([&] { load_drafter(p); }, {"target_layer_ids", "fc.weight"});
  }
  {
    const std::string p = synth(dir, "keys", false, true);
    edit_config(p, "\"lilicorr_factor_dim\": 16,", "");
    test::expect_error([&] { load_drafter(p); }, {"lilicorr.* tensors are present", "lilicorr_* keys"});
  }
  {
    const std::string p = synth(dir, "rope", false, true);
    edit_config(p, "\"block_size\": 8,", "\"block_size\": 8, \"rope_scaling\": {\"rope_type\": \"yarn\"},");
    test::expect_error([&] { load_drafter(p); },
                       {"config.json", "rope_scaling.original_max_position_embeddings", "required for yarn"});
  }
  {
    const std::string p = synth(dir, "longrope", false, true);
    edit_config(p, "\"block_size\": 8,", "\"block_size\": 8, \"rope_scaling\": {\"rope_type\": \"longrope\"},");
    test::expect_error([&] { load_drafter(p); }, {"config.json", "rope_scaling", "longrope", "not supported"});
  }
  {
    const std::string p = synth(dir, "causal", false, true);
    edit_config(p, "\"causal\": false", "\"causal\": true");
    test::expect_error([&] { load_drafter(p); }, {"config.json", "causal", "bidirectional"});
  }
}

TEST(LilicorrLoader, QuantizedModulesAreRefusedByName) {
  test::TempDir dir("lilicorr");
  {
    const std::string p = synth(dir, "qc", false, true);
    edit_config(p, "\"block_size\": 8,", "\"block_size\": 8, \"quantization_config\": {\"quant_algo\": \"NVFP4\"},");
    test::expect_error([&] { load_drafter(p); }, {"config.json", "quantization_config", "quant_method", "ModelOpt"});
  }
  {
    const std::string p = synth(dir, "u8", false, true);
    safetensors::SafetensorsWriter w;
    auto f = w.create(p + "/extra.safetensors", {{"layers.0.mlp.up_proj.weight_packed", "U8", {4, 8}}}, FileInfo{});
    std::vector<uint8_t> bytes(32, 0x11);
    f->write(bytes.data(), bytes.size());
    f->close();
    test::expect_error([&] { load_drafter(p); },
                       {"extra.safetensors", "layers.0.mlp.up_proj.weight_packed", "U8", "not supported"});
  }
  {
    const std::string p = synth(dir, "extra", false, true);
    safetensors::SafetensorsWriter w;
    auto f = w.create(p + "/extra.safetensors", {{"conv.weight", "F32", {2}}}, FileInfo{});
    float v[2] = {1, 2};
    f->write(v, sizeof v);
    f->close();
    test::expect_error([&] { load_drafter(p); }, {"conv.weight", "not part of the DFlash/LiLiCorr layout"});
  }
}

// Bolt's geometry: the card's six taps of an 88-layer target and about 1.1 B parameters.
TEST(LilicorrSynth, BoltGeometryHasTheCardsTapsAndSize) {
  const SynthGeometry g = synth_geometry("bolt", target_shape(4096, 131072, 88));
  EXPECT_EQ(g.backbone.target_layers, (std::vector<int>{1, 18, 35, 51, 68, 85}));
  EXPECT_EQ(g.backbone.block, 8);
  EXPECT_EQ(g.backbone.mask_token, 990);
  const double params = double(synth_parameters(g));
  EXPECT_GT(params, 1.0e9);
  EXPECT_LT(params, 1.2e9);
  test::expect_error([] { synth_geometry("huge", target_shape()); }, {"geometry 'huge'", "tiny, bolt"});
}

TEST(LilicorrLoader, FactoryRequiresItsPath) {
  LiliFactory f;
  SpeculatorSettings s("p.yaml", "draft.lilicorr", {});
  test::expect_error([&] { f.create(SpeculatorContext{}, s); }, {"p.yaml", "draft.lilicorr.path", "required"});
  SpeculatorSettings bad("p.yaml", "draft.lilicorr", {{"path", "/x"}, {"pth", "/y"}});
  test::expect_error([&] { f.create(SpeculatorContext{}, bad); }, {"draft.lilicorr.pth"});
  SpeculatorSettings graphs("p.yaml", "draft.lilicorr", {{"path", "/x"}, {"graphs", "yes"}});
  test::expect_error([&] { f.create(SpeculatorContext{}, graphs); }, {"draft.lilicorr.graphs", "true or false", "yes"});
}

// A context row's K/V depends only on its features and position: projecting the rows in parts gives
// the bits of projecting them at once, and the block reads the same numbers either way.
TEST(LilicorrBackbone, ContextCacheInPartsEqualsAllAtOnce) {
  test::TempDir dir("lilicorr");
  auto w = load_drafter(synth(dir, "cache", false, false));
  const BackboneWeights& bw = w->backbone;
  const int64_t n = 9, width = bw.c.hidden * int64_t(bw.c.target_layers.size());
  const auto feats = test::random_vec(size_t(n * width), 5);
  ContextCache all, parts;
  append_context(bw, feats.data(), n, all);
  int64_t at = 0;
  for (int64_t step : {3, 1, 5}) {
    append_context(bw, feats.data() + at * width, step, parts);
    at += step;
  }
  ASSERT_EQ(all.rows, n);
  ASSERT_EQ(parts.rows, n);
  EXPECT_EQ(all.k, parts.k);
  EXPECT_EQ(all.v, parts.v);
  EXPECT_EQ(all.last_row, parts.last_row);
  const auto x = test::random_vec(size_t(bw.c.block * bw.c.hidden), 6);
  std::vector<float> a, b;
  run_block(bw, all, x, a);
  run_block(bw, parts, x, b);
  EXPECT_EQ(a, b);
  ASSERT_EQ(a.size(), size_t((bw.c.block - 1) * bw.c.hidden));
  // The block attends to the context: another context gives other rows.
  ContextCache fewer;
  append_context(bw, feats.data(), 4, fewer);
  std::vector<float> c;
  run_block(bw, fewer, x, c);
  EXPECT_NE(a, c);
}

}  // namespace
