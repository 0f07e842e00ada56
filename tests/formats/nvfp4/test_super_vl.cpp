// Super VL's layout (docs/formats-nvfp4.md § Super VL): NVIDIA's vision-language wrapper (config
// under llm_config, text tensors under language_model., vision under vision_model. and mlp1.) with
// an MTP layer. The tiny one loads and gives the bits of the same model written as a plain text
// checkpoint; the full-size config parses to Super's layer table; the skipped parts are counted,
// logged once each and listed by `tandem inspect`; stray wrapper tensors and MTP modules that break
// the quant config are refused.
#include <gtest/gtest.h>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <fstream>
#include <sstream>

#include "formats/nvfp4/nvfp4_checkpoint.h"
#include "nvfp4_model_util.h"
#include "tandem/model.h"
#include "tandem/model_config.h"
#include "tandem/registry.h"
#include "test_util.h"
#include "tests/conformance/model_util.h"

using namespace tandem;
using namespace tandem::nvfp4;
using namespace tandem::nvfp4::test;
using tandem::test::expect_error;

namespace {

using ::tandem::test::registry;

// What open_modelopt logs at info level while it runs.
struct OpenResult {
  std::unique_ptr<Checkpoint> ckpt;
  std::string log;
};
OpenResult open_logged(const std::string& path) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  auto logger = spdlog::default_logger();
  const auto level = logger->level();
  logger->sinks().push_back(sink);
  logger->set_level(spdlog::level::info);
  OpenResult r;
  try {
    r.ckpt = open_modelopt(path);
  } catch (...) {
    logger->sinks().pop_back();
    logger->set_level(level);
    throw;
  }
  logger->flush();
  logger->sinks().pop_back();
  logger->set_level(level);
  r.log = out.str();
  return r;
}

size_t count_of(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) ++n;
  return n;
}

std::vector<float> logits(const std::string& path) {
  LoadOptions o;
  o.path = path;
  auto m = Model::load(o, registry());
  EXPECT_EQ(m->format_name(), "nvfp4");
  EXPECT_EQ(m->desc().pattern(), "M*E-");
  auto seq = m->new_sequence(32);
  std::vector<float> all, step;
  const std::vector<int32_t> prompt = {1, 17, 250, 3, 299, 42, 42, 128, 7};
  m->forward(*seq, prompt, ForwardMode::Prefill, all, true);
  m->commit(*seq, int(prompt.size()));
  for (int32_t t : {64, 5, 211}) {
    m->forward(*seq, {t}, ForwardMode::Verify, step, false);
    m->commit(*seq, 1);
    all.insert(all.end(), step.begin(), step.end());
  }
  return all;
}

}  // namespace

TEST(Nvfp4SuperVl, TinyWrapperWithMtpAndVisionGivesTheBitsOfThePlainTextCheckpoint) {
  tandem::test::TempDir dir("tandem-nvfp4-supervl");
  Layout vl;
  vl.wrapper = vl.mtp = vl.vision = true;
  write_quantized(dir.file("vl"), vl);
  Layout mtp_only;  // Super's text-only release form: mtp.* beside backbone.*
  mtp_only.mtp = true;
  write_quantized(dir.file("mtp"), mtp_only);
  write_quantized(dir.file("text"), Layout{});

  const OpenResult o = open_logged(dir.file("vl"));
  const auto* c = dynamic_cast<const ModeloptCheckpoint*>(o.ckpt.get());
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->text_prefix(), "language_model.");
  ASSERT_EQ(c->skipped().size(), 2u);
  EXPECT_EQ(c->skipped()[0].what, "MTP layer");
  EXPECT_EQ(c->skipped()[0].prefixes, std::vector<std::string>{"language_model.mtp."});
  EXPECT_EQ(c->skipped()[0].tensors, mtp_tensor_count(true));
  EXPECT_EQ(c->skipped()[1].what, "vision tower and projector");
  EXPECT_EQ(c->skipped()[1].prefixes, (std::vector<std::string>{"vision_model.", "mlp1."}));
  EXPECT_EQ(c->skipped()[1].tensors, vision_tensors().size());
  EXPECT_GT(c->skipped()[1].bytes, 0u);
  // One note per part, at info level, with the count.
  EXPECT_EQ(count_of(o.log, "MTP layer present: " + std::to_string(mtp_tensor_count(true)) +
                                " tensors skipped (not used yet)"), 1u)
      << o.log;
  EXPECT_EQ(count_of(o.log, "vision tower and projector present: " + std::to_string(vision_tensors().size()) +
                                " tensors skipped"), 1u)
      << o.log;
  EXPECT_EQ(count_of(o.log, "info"), 2u) << o.log;
  // The text model's tensors are the plain checkpoint's, by name, shape and bytes.
  const auto text = open_modelopt(dir.file("text"));
  ASSERT_EQ(c->tensors().size(), text->tensors().size());
  for (const RawTensor& t : text->tensors()) {
    const RawTensor* v = c->find(t.name);
    ASSERT_NE(v, nullptr) << t.name;
    EXPECT_EQ(v->shape, t.shape) << t.name;
    ASSERT_EQ(v->nbytes, t.nbytes) << t.name;
    EXPECT_EQ(std::memcmp(v->data, t.data, t.nbytes), 0) << t.name;
  }
  EXPECT_EQ(c->find("language_model.backbone.norm_f.weight"), nullptr);
  EXPECT_EQ(c->find("language_model.mtp.layers.0.enorm.weight"), nullptr);
  // `tandem inspect` prints dump(): the wrapper and each skipped part.
  const std::string dump = c->dump();
  EXPECT_NE(dump.find("vision-language wrapper: the text model is read from language_model.*"), std::string::npos) << dump;
  EXPECT_NE(dump.find("skipped: MTP layer (language_model.mtp.*): " + std::to_string(mtp_tensor_count(true)) + " tensors"),
            std::string::npos)
      << dump;
  EXPECT_NE(dump.find("skipped: vision tower and projector (vision_model.*, mlp1.*): " +
                      std::to_string(vision_tensors().size()) + " tensors"),
            std::string::npos)
      << dump;

  const OpenResult m = open_logged(dir.file("mtp"));
  const auto* mc = dynamic_cast<const ModeloptCheckpoint*>(m.ckpt.get());
  ASSERT_NE(mc, nullptr);
  EXPECT_EQ(mc->text_prefix(), "");
  ASSERT_EQ(mc->skipped().size(), 1u);
  EXPECT_EQ(mc->skipped()[0].prefixes, std::vector<std::string>{"mtp."});
  EXPECT_EQ(mc->skipped()[0].tensors, mtp_tensor_count(true));
  EXPECT_EQ(count_of(m.log, "MTP layer present"), 1u) << m.log;
  EXPECT_TRUE(dynamic_cast<const ModeloptCheckpoint&>(*text).skipped().empty());

  // The wrapper's config parses to the text model, MTP recorded.
  const ModelDesc d = parse_model_config(c->config_json(), "vl");
  EXPECT_EQ(d.pattern(), "M*E-");
  EXPECT_EQ(d.mtp_layers, 1);
  EXPECT_EQ(d.mtp_pattern, "*E");

  const std::vector<float> lt = logits(dir.file("text")), lv = logits(dir.file("vl")), lm = logits(dir.file("mtp"));
  ASSERT_EQ(lt.size(), size_t(12) * kVocab);
  double sq = 0;
  for (float v : lt) sq += double(v) * v;
  EXPECT_GT(std::sqrt(sq / double(lt.size())), 0.1) << "logits nearly zero: the test would prove little";
  ASSERT_EQ(lv.size(), lt.size());
  ASSERT_EQ(lm.size(), lt.size());
  EXPECT_EQ(std::memcmp(lv.data(), lt.data(), lt.size() * sizeof(float)), 0) << "max |Δ| " << tandem::test::max_abs_diff(lv, lt);
  EXPECT_EQ(std::memcmp(lm.data(), lt.data(), lt.size() * sizeof(float)), 0) << "max |Δ| " << tandem::test::max_abs_diff(lm, lt);
}

TEST(Nvfp4SuperVl, LegacyConfigWrapperLoadsToo) {
  tandem::test::TempDir dir("tandem-nvfp4-supervl");
  Layout vl;
  vl.mixed = false;  // hf_quant_config.json, uniform NVFP4, one file
  vl.wrapper = vl.mtp = vl.vision = true;
  write_quantized(dir.file("vl"), vl);
  Layout text;
  text.mixed = false;
  write_quantized(dir.file("text"), text);
  auto c = open_modelopt(dir.file("vl"));
  const auto& mc = dynamic_cast<const ModeloptCheckpoint&>(*c);
  ASSERT_EQ(mc.skipped().size(), 2u);
  EXPECT_EQ(mc.skipped()[0].tensors, mtp_tensor_count(false));
  const std::vector<float> lt = logits(dir.file("text")), lv = logits(dir.file("vl"));
  ASSERT_EQ(lv.size(), lt.size());
  EXPECT_EQ(std::memcmp(lv.data(), lt.data(), lt.size() * sizeof(float)), 0);
}

// Super VL at full size (spec/nemotron_h.md § 13.2): the config and a handful of tiny tensors (no
// weights of the real shapes), enough for the checkpoint to open and the layer table to be built.
TEST(Nvfp4SuperVl, FullSizeConfigParsesToSupersLayerTable) {
  const std::string pattern =
      "MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEM*EMEMEMEME";
  ASSERT_EQ(pattern.size(), 88u);
  const std::string text = R"({"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
    "vocab_size": 131072, "hidden_size": 4096, "num_hidden_layers": 88, "hybrid_override_pattern": ")" + pattern + R"(",
    "layer_norm_epsilon": 1e-05, "tie_word_embeddings": false, "eos_token_id": [2, 11], "max_position_embeddings": 1048576,
    "mamba_num_heads": 128, "mamba_head_dim": 64, "n_groups": 8, "ssm_state_size": 128, "conv_kernel": 4, "chunk_size": 128,
    "use_conv_bias": true, "mamba_proj_bias": false, "mamba_hidden_act": "silu",
    "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128, "attention_bias": false,
    "n_routed_experts": 512, "n_shared_experts": 1, "num_experts_per_tok": 22, "moe_intermediate_size": 2688,
    "moe_shared_expert_intermediate_size": 5376, "moe_latent_size": 1024, "routed_scaling_factor": 5.0,
    "n_group": 1, "topk_group": 1, "norm_topk_prob": true, "mlp_hidden_act": "relu2",
    "num_nextn_predict_layers": 1, "mtp_hybrid_override_pattern": "*E"})";
  const std::string qc = R"({"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION",
    "ignore": ["language_model.lm_head", "vision_model*", "mlp1*", "language_model.mtp*"],
    "quantized_layers": {"language_model.backbone.layers.1.mixer.experts.0.up_proj": {"quant_algo": "NVFP4", "group_size": 16},
                         "language_model.backbone.layers.0.mixer.in_proj": {"quant_algo": "FP8"}}})";
  tandem::test::TempDir dir("tandem-nvfp4-supervl");
  std::vector<st::WriteTensor> t;
  t.push_back(st::make_bf16("language_model.backbone.norm_f.weight", {4096}, std::vector<float>(4096, 1.0f)));
  t.push_back(st::make_bf16("language_model.mtp.layers.0.enorm.weight", {4096}, std::vector<float>(4096, 1.0f)));
  t.push_back(st::make_f32("language_model.mtp.layers.1.mixer.gate.e_score_correction_bias", {512}, std::vector<float>(512, 0.0f)));
  t.push_back(st::make_bf16("vision_model.radio_model.model.blocks.0.norm1.weight", {1280}, std::vector<float>(1280, 1.0f)));
  t.push_back(st::make_bf16("mlp1.0.weight", {5120}, std::vector<float>(5120, 1.0f)));
  write_folder(dir.file("super"), wrapper_config_json(text, qc), t, true);

  const OpenResult o = open_logged(dir.file("super"));
  const auto& c = dynamic_cast<const ModeloptCheckpoint&>(*o.ckpt);
  ASSERT_EQ(c.skipped().size(), 2u);
  EXPECT_EQ(c.skipped()[0].tensors, 2u);
  EXPECT_EQ(c.skipped()[1].tensors, 2u);
  EXPECT_EQ(count_of(o.log, "MTP layer present: 2 tensors skipped (not used yet)"), 1u) << o.log;
  EXPECT_EQ(c.tensors().size(), 1u);
  EXPECT_NE(c.find("backbone.norm_f.weight"), nullptr);

  const ModelDesc d = parse_model_config(c.config_json(), "super");
  EXPECT_EQ(d.model_type, "nemotron_h");
  EXPECT_EQ(d.vocab, 131072);
  EXPECT_EQ(d.hidden, 4096);
  ASSERT_EQ(d.layers.size(), 88u);
  EXPECT_EQ(d.pattern(), pattern);
  int counts[4] = {0, 0, 0, 0};
  for (const LayerDesc& l : d.layers) ++counts[int(l.kind)];
  EXPECT_EQ(counts[int(LayerKind::Mamba)], 40);
  EXPECT_EQ(counts[int(LayerKind::MoE)], 40);
  EXPECT_EQ(counts[int(LayerKind::Attention)], 8);
  EXPECT_EQ(counts[int(LayerKind::MLP)], 0);
  for (int i : {7, 16, 25, 36, 47, 58, 69, 78}) EXPECT_EQ(d.layers[size_t(i)].kind, LayerKind::Attention) << i;
  for (const LayerDesc& l : d.layers) {
    if (l.kind == LayerKind::MoE) {
      EXPECT_EQ(l.moe.n_experts, 512);
      EXPECT_EQ(l.moe.top_k, 22);
      EXPECT_EQ(l.moe.width, 2688);
      EXPECT_EQ(l.moe.latent, 1024);
      EXPECT_EQ(l.moe.n_shared, 1);
      EXPECT_EQ(l.moe.shared_width, 5376);
      EXPECT_FLOAT_EQ(l.moe.scaling, 5.0f);
      EXPECT_TRUE(l.moe.norm_topk_prob);
    } else if (l.kind == LayerKind::Mamba) {
      EXPECT_EQ(l.mamba.d_inner(), 8192);
      EXPECT_EQ(l.mamba.conv_dim(), 10240);
      EXPECT_EQ(l.mamba.in_proj_rows(), 18560);
    } else {
      EXPECT_EQ(l.attn.n_heads, 32);
      EXPECT_EQ(l.attn.n_kv_heads, 2);
      EXPECT_EQ(l.attn.head_dim, 128);
    }
  }
  EXPECT_EQ(d.mtp_layers, 1);
  EXPECT_EQ(d.mtp_pattern, "*E");
  EXPECT_EQ(d.max_positions, 1048576);
  EXPECT_EQ(d.eos_ids, (std::vector<int>{2, 11}));
}

TEST(Nvfp4SuperVl, RefusesStrayWrapperTensorsAndMtpModulesThatBreakTheConfig) {
  tandem::test::TempDir dir("tandem-nvfp4-supervl");
  // A tensor under no part of the wrapper.
  Layout stray;
  stray.mixed = false;
  stray.wrapper = stray.vision = true;
  stray.extra.push_back(st::make_bf16("audio_tower.proj.weight", {4}, {1, 2, 3, 4}));
  write_quantized(dir.file("stray"), stray);
  expect_error([&] { open_modelopt(dir.file("stray")); },
               {"nvfp4", "model.safetensors", "'audio_tower.proj.weight'", "outside the vision-language wrapper",
                "language_model.*", "vision_model.*"});

  // An MTP expert stored NVFP4 that quantized_layers does not list: held to the config like any module,
  // by its stored name, though the model never loads it.
  Layout vl;
  vl.wrapper = vl.mtp = vl.vision = true;
  write_quantized(dir.file("vl"), vl);
  const std::string cfg_path = dir.file("vl") + "/config.json";
  std::stringstream buf;
  buf << std::ifstream(cfg_path).rdbuf();
  std::string cfg = buf.str();
  const std::string entry = "\"language_model.mtp.layers.1.mixer.experts.0.up_proj\": {\"quant_algo\": \"NVFP4\", \"group_size\": 16}, ";
  const size_t at = cfg.find(entry);
  ASSERT_NE(at, std::string::npos);
  cfg.erase(at, entry.size());
  std::ofstream(cfg_path, std::ios::trunc) << cfg;
  expect_error([&] { open_modelopt(dir.file("vl")); },
               {"config.json", "'language_model.mtp.layers.1.mixer.experts.0.up_proj'", "NVFP4",
                "quantized_layers does not list it"});

  // A bad MTP pattern letter is named.
  expect_error([&] { parse_model_config(config_json("", false).insert(1, R"("mtp_hybrid_override_pattern": "*X", )"), "c"); },
               {"c (mtp)", "'X'"});
}
