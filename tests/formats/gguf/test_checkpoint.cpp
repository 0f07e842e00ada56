// Tests formats/gguf/gguf_checkpoint.*, gguf_config.* and gguf_tokenizer.*: metadata → config.json
// (checked through the core's own parser), HF names and shapes, per-expert views of stacked experts,
// sidecar scales, tokenizer side files, the dump, and errors for missing or inconsistent metadata.
#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include "formats/gguf/gguf_checkpoint.h"
#include "gguf_test_util.h"
#include "tandem/model_config.h"

namespace tandem::gguf {
namespace {

using test::expect_error;
using test::TinyModel;

std::unique_ptr<GgufCheckpoint> open_tiny(const TinyModel& m, const std::string& name = "tiny.gguf") {
  return std::make_unique<GgufCheckpoint>(GgufFile::from_bytes(m.bytes(), name));
}

TinyModel tiny(void (*tweak)(TinyModel&) = nullptr) {
  TinyModel m;
  if (tweak) tweak(m);
  m.build();
  return m;
}

float f32_at(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, 4);
  return f;
}

float written(const WriteTensor& t, size_t i) { return f32_at(t.data.data() + 4 * i); }

TEST(GgufConfig, TinyMoeModel) {
  TinyModel m = tiny();
  auto ckpt = open_tiny(m);
  ModelDesc d = parse_model_config(ckpt->config_json(), "synth");
  EXPECT_EQ(d.model_type, "nemotron_h");
  EXPECT_EQ(d.pattern(), "MEM*E-");  // the appended MTP block is not a layer
  EXPECT_EQ(d.vocab, TinyModel::V);
  EXPECT_EQ(d.hidden, TinyModel::H);
  EXPECT_FLOAT_EQ(d.eps, 1e-5f);
  EXPECT_FALSE(d.tie_embeddings);
  EXPECT_EQ(d.max_positions, 4096);
  EXPECT_EQ(d.eos_ids, (std::vector<int>{2, 11}));  // eos + the "<|im_end|>" token

  const MambaDesc& mb = d.layers[0].mamba;
  EXPECT_EQ(mb.n_heads, TinyModel::NH);
  EXPECT_EQ(mb.head_dim, TinyModel::P);
  EXPECT_EQ(mb.n_groups, TinyModel::G);
  EXPECT_EQ(mb.state_size, TinyModel::N);
  EXPECT_EQ(mb.conv_kernel, TinyModel::K);
  EXPECT_TRUE(mb.conv_bias);
  const AttentionDesc& at = d.layers[3].attn;
  EXPECT_EQ(at.n_heads, TinyModel::NQ);
  EXPECT_EQ(at.n_kv_heads, TinyModel::NKV);
  EXPECT_EQ(at.head_dim, TinyModel::HD);
  const MoEDesc& moe = d.layers[1].moe;
  EXPECT_EQ(moe.n_experts, TinyModel::E);
  EXPECT_EQ(moe.top_k, TinyModel::TOPK);
  EXPECT_EQ(moe.width, TinyModel::W);
  EXPECT_EQ(moe.shared_width, TinyModel::SH);
  EXPECT_EQ(moe.latent, 0);
  EXPECT_FLOAT_EQ(moe.scaling, 2.5f);
  EXPECT_TRUE(moe.norm_topk_prob);
  EXPECT_EQ(moe.n_group, 1);
  EXPECT_EQ(moe.topk_group, 1);
  EXPECT_EQ(d.layers[5].mlp.width, TinyModel::MLP);
  EXPECT_EQ(ckpt->architecture().n_blocks, 7);
}

TEST(GgufConfig, LatentDenseArchAndTiedEmbeddings) {
  TinyModel m = tiny([](TinyModel& t) {
    t.latent = true;
    t.tie = true;
    t.mtp = false;
  });
  ModelDesc d = parse_model_config(open_tiny(m)->config_json(), "synth");
  EXPECT_EQ(d.layers[1].moe.latent, TinyModel::L);
  EXPECT_EQ(d.layers[4].moe.latent, TinyModel::L);
  EXPECT_TRUE(d.tie_embeddings);

  // Keys renamed to the dense architecture read the same (layer kinds come from tensors).
  Metadata dense;
  for (const auto& [k, v] : m.metadata.entries()) {
    std::string key = k.rfind("nemotron_h_moe.", 0) == 0 ? "nemotron_h." + k.substr(15) : k;
    dense.set(key, key == "general.architecture" ? Value::str("nemotron_h") : v);
  }
  GgufCheckpoint c(GgufFile::from_bytes(serialize_gguf(dense, m.tensors), "dense.gguf"));
  EXPECT_EQ(parse_model_config(c.config_json(), "synth").pattern(), "MEM*E-");
  EXPECT_EQ(c.architecture().name, "nemotron_h");
}

TEST(GgufConfig, PerLayerArrays) {
  // Arrays whose MoE entries agree still give one top-level config.
  TinyModel same = tiny([](TinyModel& t) { t.per_layer_arrays = true; });
  ModelDesc d = parse_model_config(open_tiny(same)->config_json(), "synth");
  EXPECT_EQ(d.model_type, "nemotron_h");
  EXPECT_EQ(d.layers[4].moe.n_experts, TinyModel::E);

  // Bolt-style per-layer expert counts, widths and top-k: a Puzzle config with one block per layer.
  TinyModel varied = tiny([](TinyModel& t) {
    t.per_layer_arrays = true;
    t.vary_experts = true;
    t.latent = true;
  });
  auto ckpt = open_tiny(varied);
  d = parse_model_config(ckpt->config_json(), "synth");
  EXPECT_EQ(d.model_type, "nemotron_h_puzzle");
  EXPECT_EQ(d.pattern(), "MEM*E-");
  EXPECT_EQ(d.layers[1].moe.n_experts, 4);
  EXPECT_EQ(d.layers[1].moe.top_k, 2);
  EXPECT_EQ(d.layers[1].moe.width, 8);
  EXPECT_EQ(d.layers[4].moe.n_experts, 6);
  EXPECT_EQ(d.layers[4].moe.top_k, 3);
  EXPECT_EQ(d.layers[4].moe.width, 16);
  for (int i : {1, 4}) {
    EXPECT_EQ(d.layers[size_t(i)].moe.latent, TinyModel::L);
    EXPECT_EQ(d.layers[size_t(i)].moe.shared_width, TinyModel::SH);
    EXPECT_FLOAT_EQ(d.layers[size_t(i)].moe.scaling, 2.5f);
  }
  EXPECT_EQ(d.layers[0].mamba.n_heads, TinyModel::NH);
  EXPECT_EQ(d.layers[3].attn.n_kv_heads, TinyModel::NKV);
  EXPECT_EQ(d.layers[5].mlp.width, TinyModel::MLP);
  // Layer 4's experts: 6 views of [w 16, L 8].
  ASSERT_NE(ckpt->find("backbone.layers.4.mixer.experts.5.up_proj.weight"), nullptr);
  EXPECT_EQ(ckpt->find("backbone.layers.4.mixer.experts.5.up_proj.weight")->shape, (std::vector<int64_t>{16, 8}));
  EXPECT_EQ(ckpt->find("backbone.layers.1.mixer.experts.4.up_proj.weight"), nullptr);
}

TEST(GgufConfig, ExpertCountFromTheRouterWhenMetadataLacksIt) {
  TinyModel m = tiny([](TinyModel& t) {
    t.per_layer_arrays = true;
    t.vary_experts = true;
  });
  Metadata md;
  for (const auto& [k, v] : m.metadata.entries())
    if (k != "nemotron_h_moe.expert_count") md.set(k, v);
  GgufCheckpoint c(GgufFile::from_bytes(serialize_gguf(md, m.tensors), "noe.gguf"));
  ModelDesc d = parse_model_config(c.config_json(), "synth");
  EXPECT_EQ(d.layers[1].moe.n_experts, 4);
  EXPECT_EQ(d.layers[4].moe.n_experts, 6);
}

TEST(GgufCheckpoint, HfNamesAndShapes) {
  using T = TinyModel;
  TinyModel m = tiny();
  auto ckpt = open_tiny(m);
  const std::vector<std::pair<std::string, std::vector<int64_t>>> expected = {
      {"backbone.embeddings.weight", {T::V, T::H}},
      {"backbone.norm_f.weight", {T::H}},
      {"lm_head.weight", {T::V, T::H}},
      {"backbone.layers.0.norm.weight", {T::H}},
      {"backbone.layers.0.mixer.in_proj.weight", {T::IN_PROJ, T::H}},
      {"backbone.layers.0.mixer.conv1d.weight", {T::CONV, T::K}},
      {"backbone.layers.0.mixer.conv1d.bias", {T::CONV}},
      {"backbone.layers.0.mixer.dt_bias", {T::NH}},
      {"backbone.layers.0.mixer.A", {T::NH}},
      {"backbone.layers.0.mixer.D", {T::NH}},
      {"backbone.layers.0.mixer.norm.weight", {T::DIN}},
      {"backbone.layers.0.mixer.out_proj.weight", {T::H, T::DIN}},
      {"backbone.layers.3.mixer.q_proj.weight", {T::NQ * T::HD, T::H}},
      {"backbone.layers.3.mixer.k_proj.weight", {T::NKV * T::HD, T::H}},
      {"backbone.layers.3.mixer.v_proj.weight", {T::NKV * T::HD, T::H}},
      {"backbone.layers.3.mixer.o_proj.weight", {T::H, T::NQ * T::HD}},
      {"backbone.layers.1.mixer.gate.weight", {T::E, T::H}},
      {"backbone.layers.1.mixer.gate.e_score_correction_bias", {T::E}},
      {"backbone.layers.1.mixer.experts.0.up_proj.weight", {T::W, T::H}},
      {"backbone.layers.1.mixer.experts.3.down_proj.weight", {T::H, T::W}},
      {"backbone.layers.1.mixer.shared_experts.up_proj.weight", {T::SH, T::H}},
      {"backbone.layers.1.mixer.shared_experts.down_proj.weight", {T::H, T::SH}},
      {"backbone.layers.5.mixer.up_proj.weight", {T::MLP, T::H}},
      {"backbone.layers.5.mixer.down_proj.weight", {T::H, T::MLP}},
  };
  for (const auto& [name, shape] : expected) {
    const RawTensor* t = ckpt->find(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->shape, shape) << name;
    EXPECT_EQ(t->dtype, "F32") << name;
    EXPECT_EQ(t->file, "tiny.gguf");
    EXPECT_EQ(t->nbytes, size_t(4 * std::max<int64_t>(1, shape[0]) * (shape.size() > 1 ? shape[1] : 1))) << name;
  }
  // Every tensor outside the MTP block appears once; stacked experts become one view per expert.
  size_t ggml_trunk = 0;
  for (const auto& t : m.tensors) ggml_trunk += t.name.rfind("blk.6.", 0) == 0 ? 0 : 1;
  EXPECT_EQ(ckpt->tensors().size(), ggml_trunk + 2 * 2 * (T::E - 1));
  for (const RawTensor& t : ckpt->tensors()) {
    EXPECT_EQ(t.name.find("layers.6."), std::string::npos) << t.name;
    EXPECT_EQ(ckpt->find(t.name), &t);
  }
  // Whole tensors keep their bytes; the gated-norm weight {d_in/G, G} flattens in memory order.
  const RawTensor* norm = ckpt->find("backbone.layers.0.mixer.norm.weight");
  EXPECT_EQ(std::vector<uint8_t>(norm->data, norm->data + norm->nbytes), m.tensor("blk.0.ssm_norm.weight").data);
}

TEST(GgufCheckpoint, ExpertViewsPointAtTheirSlice) {
  using T = TinyModel;
  TinyModel m = tiny();
  auto ckpt = open_tiny(m);
  const WriteTensor& up = m.tensor("blk.4.ffn_up_exps.weight");  // ne {H, W, E}
  const WriteTensor& down = m.tensor("blk.4.ffn_down_exps.weight");  // ne {W, H, E}
  for (int j = 0; j < T::E; ++j) {
    const RawTensor* u = ckpt->find("backbone.layers.4.mixer.experts." + std::to_string(j) + ".up_proj.weight");
    const RawTensor* d = ckpt->find("backbone.layers.4.mixer.experts." + std::to_string(j) + ".down_proj.weight");
    ASSERT_TRUE(u && d);
    ASSERT_EQ(u->nbytes, size_t(4 * T::H * T::W));
    // PyTorch [out, in] element (o, i) is ggml element (i, o, j).
    for (int o = 0; o < T::W; ++o)
      for (int i = 0; i < T::H; ++i)
        ASSERT_EQ(f32_at(u->data + 4 * size_t(o * T::H + i)), written(up, size_t(i + T::H * (o + T::W * j))));
    for (int o = 0; o < T::H; ++o)
      for (int i = 0; i < T::W; ++i)
        ASSERT_EQ(f32_at(d->data + 4 * size_t(o * T::W + i)), written(down, size_t(i + T::W * (o + T::H * j))));
  }
}

TEST(GgufCheckpoint, FusedQkvAndSidecarScales) {
  using T = TinyModel;
  TinyModel m = tiny();
  // Replace layer 3's q/k/v with one fused {H, (NQ + 2 NKV)·HD} tensor holding 0, 1, 2, … row-major.
  std::vector<WriteTensor> tensors;
  for (auto& t : m.tensors)
    if (t.name != "blk.3.attn_q.weight" && t.name != "blk.3.attn_k.weight" && t.name != "blk.3.attn_v.weight")
      tensors.push_back(t);
  const int rows = (T::NQ + 2 * T::NKV) * T::HD;
  std::vector<float> qkv(size_t(rows * T::H));
  for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = float(i);
  tensors.push_back(make_f32("blk.3.attn_qkv.weight", {T::H, rows}, qkv));
  // NVFP4-style sidecars: one per expert for stacked experts, one for a plain weight.
  tensors.push_back(make_f32("blk.1.ffn_up_exps.scale", {T::E}, {0.5f, 1.5f, 2.5f, 3.5f}));
  tensors.push_back(make_f32("blk.1.ffn_down_exps.input_scale", {1}, {7.0f}));
  tensors.push_back(make_f32("blk.0.ssm_in.scale", {1}, {0.25f}));
  GgufCheckpoint c(GgufFile::from_bytes(serialize_gguf(m.metadata, tensors), "fused.gguf"));

  const char* parts[] = {"q_proj", "k_proj", "v_proj"};
  const int64_t part_rows[] = {T::NQ * T::HD, T::NKV * T::HD, T::NKV * T::HD};
  int64_t r0 = 0;
  for (int p = 0; p < 3; ++p) {
    const RawTensor* t = c.find(std::string("backbone.layers.3.mixer.") + parts[p] + ".weight");
    ASSERT_NE(t, nullptr) << parts[p];
    EXPECT_EQ(t->shape, (std::vector<int64_t>{part_rows[p], T::H}));
    EXPECT_EQ(f32_at(t->data), float(r0 * T::H));
    EXPECT_EQ(f32_at(t->data + t->nbytes - 4), float((r0 + part_rows[p]) * T::H - 1));
    r0 += part_rows[p];
  }
  for (int j = 0; j < T::E; ++j) {
    const RawTensor* s = c.find("backbone.layers.1.mixer.experts." + std::to_string(j) + ".up_proj.scale");
    ASSERT_NE(s, nullptr);
    EXPECT_TRUE(s->shape.empty());
    EXPECT_EQ(s->dtype, "F32");
    EXPECT_EQ(f32_at(s->data), 0.5f + float(j));
    const RawTensor* in = c.find("backbone.layers.1.mixer.experts." + std::to_string(j) + ".down_proj.input_scale");
    ASSERT_NE(in, nullptr);
    EXPECT_EQ(f32_at(in->data), 7.0f);
  }
  const RawTensor* s = c.find("backbone.layers.0.mixer.in_proj.scale");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(f32_at(s->data), 0.25f);

  tensors.push_back(make_f32("blk.4.ffn_up_exps.scale", {3}, {1, 2, 3}));
  expect_error([&] { GgufCheckpoint(GgufFile::from_bytes(serialize_gguf(m.metadata, tensors), "bad.gguf")); },
               {"bad.gguf", "blk.4.ffn_up_exps.scale", "1 or 4 values"});
}

TEST(GgufCheckpoint, TokenizerSideFiles) {
  auto ckpt = open_tiny(tiny());
  std::optional<std::string> tok = ckpt->side_file("tokenizer.json");
  ASSERT_TRUE(tok.has_value());
  rapidjson::Document d;
  d.Parse(tok->c_str(), tok->size());
  ASSERT_FALSE(d.HasParseError());
  EXPECT_STREQ(d["model"]["type"].GetString(), "BPE");
  EXPECT_EQ(d["model"]["vocab"].MemberCount(), unsigned(TinyModel::V));
  EXPECT_EQ(d["model"]["vocab"]["</s>"].GetInt(), 2);
  EXPECT_EQ(d["model"]["vocab"]["<|im_end|>"].GetInt(), 11);
  EXPECT_STREQ(d["model"]["unk_token"].GetString(), "<unk>");
  ASSERT_EQ(d["model"]["merges"].Size(), 2u);
  EXPECT_STREQ(d["model"]["merges"][1].GetString(), "ta 3");
  EXPECT_STREQ(d["pre_tokenizer"]["type"].GetString(), "ggml");
  EXPECT_STREQ(d["pre_tokenizer"]["name"].GetString(), "pixtral");
  EXPECT_STREQ(d["decoder"]["type"].GetString(), "ByteLevel");
  std::vector<std::tuple<int, std::string, bool>> added;
  for (const auto& a : d["added_tokens"].GetArray())
    added.emplace_back(a["id"].GetInt(), a["content"].GetString(), a["special"].GetBool());
  EXPECT_EQ(added, (std::vector<std::tuple<int, std::string, bool>>{
                       {0, "<unk>", true}, {1, "<s>", true}, {2, "</s>", true}, {11, "<|im_end|>", true},
                       {12, "<tool>", false}}));

  std::optional<std::string> cfg = ckpt->side_file("tokenizer_config.json");
  ASSERT_TRUE(cfg.has_value());
  d.Parse(cfg->c_str(), cfg->size());
  ASSERT_FALSE(d.HasParseError());
  EXPECT_STREQ(d["chat_template"].GetString(), "{% for m in messages %}{{ m.content }}\n{% endfor %}");
  EXPECT_STREQ(d["bos_token"].GetString(), "<s>");
  EXPECT_STREQ(d["eos_token"].GetString(), "</s>");
  EXPECT_FALSE(d["add_bos_token"].GetBool());
  EXPECT_FALSE(d.HasMember("pad_token"));
  EXPECT_EQ(ckpt->side_file("generation_config.json"), std::nullopt);

  auto bare = open_tiny(tiny([](TinyModel& t) { t.with_tokenizer = false; }));
  EXPECT_EQ(bare->side_file("tokenizer.json"), std::nullopt);
  EXPECT_EQ(bare->side_file("tokenizer_config.json"), std::nullopt);
  EXPECT_EQ(parse_model_config(bare->config_json(), "synth").eos_ids, std::vector<int>{});

  TinyModel spm = tiny();
  spm.metadata.set("tokenizer.ggml.model", Value::str("llama"));
  expect_error([&] { open_tiny(spm, "spm.gguf")->side_file("tokenizer.json"); },
               {"spm.gguf", "tokenizer.ggml.model", "'llama'", "gpt2"});
}

TEST(GgufCheckpoint, DumpListsMetadataAndTensors) {
  TinyModel m = tiny();
  m.tensors.push_back(WriteTensor{"rope_freqs.weight", 2, {32}, std::vector<uint8_t>(18, 0)});  // Q4_0: no kernel
  GgufCheckpoint c(GgufFile::from_bytes(m.bytes(), "dump.gguf"));
  const std::string s = c.dump();
  EXPECT_NE(s.find("GGUF v3 file 'dump.gguf'"), std::string::npos) << s;
  EXPECT_NE(s.find("pattern MEM*E-, 1 MTP block"), std::string::npos) << s;
  EXPECT_NE(s.find("general.architecture: STRING = \"nemotron_h_moe\"\n"), std::string::npos) << s;
  EXPECT_NE(s.find("nemotron_h_moe.feed_forward_length: [INT32 × 7] = [0, 8, 0, 0, 8, 20, 8]\n"), std::string::npos);
  EXPECT_NE(s.find("tokenizer.ggml.tokens: [STRING × 32] = [\"<unk>\", \"<s>\", \"</s>\", \"td3\", \"te4\", \"tf5\", "
                   "\"tg6\", \"th7\", … 24 more]\n"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("tokenizer.chat_template: STRING = \"{% for m in messages %}{{ m.content }}?{% endfor %}\"\n"),
            std::string::npos);
  EXPECT_NE(s.find("expert_weights_scale: FLOAT32 = 2.5\n"), std::string::npos);
  const GgufFile& f = c.file();
  const TensorInfo* up = f.find("blk.1.ffn_up_exps.weight");
  EXPECT_NE(s.find("  blk.1.ffn_up_exps.weight  F32  [16, 8, 4]  " + std::to_string(up->offset) + "  2048\n"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("  rope_freqs.weight  Q4_0  [32]  "), std::string::npos);
  EXPECT_EQ(c.find("rope_freqs.weight")->dtype, "Q4_0");  // unknown names keep their ggml name
  size_t lines = 0;
  for (char ch : s) lines += ch == '\n';
  EXPECT_EQ(lines, 3 + m.metadata.entries().size() + 1 + m.tensors.size());
}

TEST(GgufCheckpoint, MetadataErrors) {
  auto without = [](const std::string& key) {
    TinyModel m = tiny();
    Metadata md;
    for (const auto& [k, v] : m.metadata.entries())
      if (k != key) md.set(k, v);
    return GgufFile::from_bytes(serialize_gguf(md, m.tensors), "broken.gguf");
  };
  for (const char* key : {"nemotron_h_moe.embedding_length", "nemotron_h_moe.block_count",
                          "nemotron_h_moe.feed_forward_length", "nemotron_h_moe.attention.head_count_kv",
                          "nemotron_h_moe.attention.head_count", "nemotron_h_moe.ssm.inner_size",
                          "nemotron_h_moe.expert_used_count", "general.architecture"})
    expect_error([&] { GgufCheckpoint c(without(key)); }, {"broken.gguf", std::string("'") + key + "'"});

  auto with = [](const std::string& key, Value v) {
    TinyModel m = tiny();
    m.metadata.set(key, std::move(v));
    return GgufFile::from_bytes(m.bytes(), "broken.gguf");
  };
  expect_error([&] { GgufCheckpoint c(with("general.architecture", Value::str("llama"))); },
               {"broken.gguf", "'general.architecture'", "'llama'", "nemotron_h or nemotron_h_moe"});
  expect_error([&] { GgufCheckpoint c(with("nemotron_h_moe.feed_forward_length", Value::i32s({0, 8}))); },
               {"'nemotron_h_moe.feed_forward_length'", "one value per layer (7)", "array of 2"});
  expect_error([&] { GgufCheckpoint c(with("nemotron_h_moe.embedding_length", Value::str("16"))); },
               {"'nemotron_h_moe.embedding_length'", "unsigned 32-bit", "STRING"});
  expect_error([&] { GgufCheckpoint c(with("nemotron_h_moe.ssm.time_step_rank", Value::u32(3))); },
               {"'nemotron_h_moe.ssm.inner_size'", "multiple of", "3"});
  expect_error([&] { GgufCheckpoint c(with("nemotron_h_moe.nextn_predict_layers", Value::u32(7))); },
               {"'nemotron_h_moe.nextn_predict_layers'"});
  expect_error([&] { GgufCheckpoint c(with("nemotron_h_moe.attention.value_length", Value::u32(8))); },
               {"'nemotron_h_moe.attention.value_length'"});

  TinyModel m = tiny();
  std::vector<WriteTensor> no_embd;
  for (auto& t : m.tensors)
    if (t.name != "token_embd.weight") no_embd.push_back(t);
  expect_error([&] { GgufCheckpoint c(GgufFile::from_bytes(serialize_gguf(m.metadata, no_embd), "broken.gguf")); },
               {"broken.gguf", "missing tensor 'token_embd.weight'"});
}

TEST(GgufCheckpoint, OpenAndProbeFiles) {
  test::TempDir dir;
  TinyModel m = tiny();
  write_gguf(dir.file("m.gguf"), m.metadata, m.tensors);
  write_gguf(dir.file("model.bin"), m.metadata, m.tensors);
  test::write_bytes(dir.file("other.bin"), {'G', 'G', 'U'});
  auto c = open_checkpoint(dir.file("model.bin"));
  EXPECT_EQ(c->path(), dir.file("model.bin"));
  EXPECT_EQ(c->find("lm_head.weight")->file, dir.file("model.bin"));
  EXPECT_EQ(probe_checkpoint(dir.file("m.gguf")), 100);
  EXPECT_EQ(probe_checkpoint(dir.file("model.bin")), 100);  // by magic
  EXPECT_EQ(probe_checkpoint(dir.file("other.bin")), 0);
  EXPECT_EQ(probe_checkpoint(dir.file("absent.bin")), 0);
  EXPECT_EQ(probe_checkpoint(dir.path()), 0);
}

}  // namespace
}  // namespace tandem::gguf
