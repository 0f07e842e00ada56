// tools/synth: the shapes' counts against spec/nemotron_h.md § 13, the GGUF that `tandem synth` writes
// for tiny (names, types and keys as the mix specifies, read back with the GGUF reader), the in-memory
// checkpoint against that file, and tiny models in both mixes loading and running on the CPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

#include "formats/gguf/gguf_checkpoint.h"
#include "formats/gguf/gguf_file.h"
#include "formats/gguf/quant.h"
#include "synth_checkpoint.h"
#include "synth_model.h"
#include "synth_plan.h"
#include "synth_write.h"
#include "tandem/model.h"
#include "tandem/registry.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace tandem;
using namespace tandem::synth;

namespace {

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> n{0};
    path_ = fs::temp_directory_path() / ("tandem-synth-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

PluginRegistry& registry() {
  static PluginRegistry reg;
  static bool loaded = false;
  if (!loaded) reg.load_directory(test::plugin_dir()), loaded = true;
  return reg;
}

// Runs a prompt and one decode step; every logit finite and not all alike.
void expect_runs(Model& m) {
  const int V = m.desc().vocab;
  auto seq = m.new_sequence(64);
  std::vector<float> logits;
  const std::vector<int32_t> prompt = {1, 1200, 1300, 57, 2000, 11, 1500};
  m.forward(*seq, prompt, ForwardMode::Prefill, logits, true);
  ASSERT_EQ(logits.size(), prompt.size() * size_t(V));
  m.commit(*seq, int(prompt.size()));
  std::vector<float> step;
  m.forward(*seq, {42}, ForwardMode::Verify, step, false);
  ASSERT_EQ(step.size(), size_t(V));
  logits.insert(logits.end(), step.begin(), step.end());
  double sum = 0, sq = 0;
  for (float v : logits) {
    ASSERT_TRUE(std::isfinite(v));
    sum += v, sq += double(v) * v;
  }
  const double mean = sum / double(logits.size()), sd = std::sqrt(sq / double(logits.size()) - mean * mean);
  EXPECT_GT(sd, 1e-3) << "logits are (nearly) constant";
  EXPECT_LT(sd, 1e3) << "activations blew up";
}

std::vector<int64_t> ne_of(const gguf::TensorInfo& t) { return t.ne; }

}  // namespace

TEST(SynthShapes, BoltTableAndTotalsMatchTheSpec) {
  const ModelDesc d = model_shape("bolt");
  ASSERT_EQ(d.layers.size(), 88u);
  int64_t sum_e = 0, sum_w = 0, sum_ew = 0;
  int moe = 0;
  for (const LayerDesc& l : d.layers)
    if (l.kind == LayerKind::MoE) {
      ++moe;
      sum_e += l.moe.n_experts, sum_w += l.moe.width, sum_ew += int64_t(l.moe.n_experts) * l.moe.width;
      EXPECT_EQ(l.moe.top_k, 9);
      EXPECT_EQ(l.moe.width % 256, 0);
    }
  EXPECT_EQ(moe, 40);
  EXPECT_EQ(sum_e, 13824);
  EXPECT_EQ(sum_w, 91392);
  EXPECT_EQ(sum_ew, 32264192);
  EXPECT_EQ(d.layers[1].moe.n_experts, 240);   // m = 0
  EXPECT_EQ(d.layers[45].moe.width, 2560);     // m = 20
  EXPECT_EQ(d.layers[87].moe.n_experts, 256);  // m = 39

  // Counted from the plan's weights and tensors, not written anywhere.
  const Plan p = make_plan(d, Mix::GgufIq2);
  EXPECT_EQ(p.totals.params, 73975611904);
  EXPECT_EQ(p.totals.routed, 66077065216);
  EXPECT_EQ(p.totals.active, 9046213120);
  EXPECT_EQ(p.totals.decode_bytes, 4821477952u);  // § 13.4 (b)
}

TEST(SynthShapes, OtherShapes) {
  const Plan nano = make_plan(model_shape("nano"), Mix::Bf16);
  EXPECT_EQ(nano.desc.pattern().size(), 52u);
  EXPECT_NEAR(double(nano.totals.params) * 1e-9, 31.58, 0.005);
  EXPECT_NEAR(double(nano.totals.active) * 1e-9, 3.23, 0.005);
  EXPECT_EQ(nano.totals.bytes, size_t(nano.totals.params) * 2 + 23 * 128 * 2);  // BF16, F32 correction biases
  const Plan super = make_plan(model_shape("super"), Mix::GgufIq2);
  EXPECT_EQ(super.desc.pattern().size(), 88u);
  EXPECT_NEAR(double(super.totals.params) * 1e-9, 120.669, 0.0005);
  EXPECT_NEAR(double(super.totals.active) * 1e-9, 12.23, 0.005);
  const ModelDesc uniform = model_shape("bolt", true);
  for (const LayerDesc& l : uniform.layers)
    if (l.kind == LayerKind::MoE) EXPECT_TRUE(l.moe.n_experts == 346 && l.moe.width == 2304);
  EXPECT_TRUE(moe_uniform(uniform));
  EXPECT_FALSE(moe_uniform(model_shape("bolt")));
  EXPECT_THROW(model_shape("huge"), Error);
  EXPECT_THROW(parse_mix("q4"), Error);
}

TEST(SynthShapes, ConfigJsonReadsBack) {
  for (bool uniform : {false, true}) {
    const ModelDesc d = model_shape("bolt", uniform);
    const ModelDesc back = parse_model_config(config_json(d), "synth");
    EXPECT_EQ(back.model_type, uniform ? "nemotron_h" : "nemotron_h_puzzle");
    ASSERT_EQ(back.pattern(), d.pattern());
    for (size_t i = 0; i < d.layers.size(); ++i) {
      const LayerDesc &x = back.layers[i], &y = d.layers[i];
      if (y.kind == LayerKind::MoE)
        EXPECT_TRUE(x.moe.n_experts == y.moe.n_experts && x.moe.width == y.moe.width && x.moe.top_k == y.moe.top_k &&
                    x.moe.latent == y.moe.latent && x.moe.shared_width == y.moe.shared_width &&
                    x.moe.scaling == y.moe.scaling)
            << "layer " << i;
      if (y.kind == LayerKind::Mamba)
        EXPECT_TRUE(x.mamba.n_heads == y.mamba.n_heads && x.mamba.head_dim == y.mamba.head_dim &&
                    x.mamba.n_groups == y.mamba.n_groups && x.mamba.state_size == y.mamba.state_size)
            << "layer " << i;
      if (y.kind == LayerKind::Attention)
        EXPECT_TRUE(x.attn.n_heads == y.attn.n_heads && x.attn.n_kv_heads == y.attn.n_kv_heads &&
                    x.attn.head_dim == y.attn.head_dim)
            << "layer " << i;
    }
  }
}

// The 2-bit mix of spec/formats.md § 4.1, for tiny: every name, type and shape, written out here.
TEST(SynthGguf, TinyFileHasTheMixTypesNamesAndKeys) {
  TempDir dir;
  const Plan plan = make_plan(model_shape("tiny"), Mix::GgufIq2);
  write_gguf(plan, dir.file("tiny.gguf"), 7);
  auto f = gguf::GgufFile::open(dir.file("tiny.gguf"));

  using Ne = std::vector<int64_t>;
  std::map<std::string, std::pair<std::string, Ne>> want = {
      {"token_embd.weight", {"Q8_0", {512, 2048}}},
      {"output_norm.weight", {"F32", {512}}},
      {"output.weight", {"Q8_0", {512, 2048}}},
  };
  const char* pattern = "MEM*EME";
  const int experts[] = {8, 12, 16}, widths[] = {256, 512, 256};
  int m = 0;
  for (int i = 0; pattern[i]; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    want[b + "attn_norm.weight"] = {"F32", {512}};
    if (pattern[i] == 'M') {
      want[b + "ssm_in.weight"] = {"NVFP4", {512, 1160}};
      want[b + "ssm_in.scale"] = {"F32", {1}};
      want[b + "ssm_conv1d.weight"] = {"F32", {4, 640}};
      want[b + "ssm_conv1d.bias"] = {"F32", {640}};
      want[b + "ssm_dt.bias"] = {"F32", {8}};
      want[b + "ssm_a"] = {"F32", {1, 8}};
      want[b + "ssm_d"] = {"F32", {1, 8}};
      want[b + "ssm_norm.weight"] = {"F32", {256, 2}};
      want[b + "ssm_out.weight"] = {"NVFP4", {512, 512}};
      want[b + "ssm_out.scale"] = {"F32", {1}};
    } else if (pattern[i] == '*') {
      want[b + "attn_q.weight"] = {"Q8_0", {512, 512}};
      want[b + "attn_k.weight"] = {"Q8_0", {512, 128}};
      want[b + "attn_v.weight"] = {"Q8_0", {512, 128}};
      want[b + "attn_output.weight"] = {"Q8_0", {512, 512}};
    } else {
      const int64_t e = experts[m], w = widths[m];
      ++m;
      want[b + "ffn_gate_inp.weight"] = {"F32", {512, e}};
      want[b + "exp_probs_b.bias"] = {"F32", {e}};
      want[b + "ffn_latent_down.weight"] = {"Q8_0", {512, 256}};
      want[b + "ffn_latent_up.weight"] = {"Q8_0", {256, 512}};
      want[b + "ffn_up_exps.weight"] = {"IQ2_XXS", {256, w, e}};
      want[b + "ffn_down_exps.weight"] = {"IQ2_XXS", {w, 256, e}};
      want[b + "ffn_up_shexp.weight"] = {"IQ2_XXS", {512, 512}};
      want[b + "ffn_down_shexp.weight"] = {"IQ2_XXS", {512, 512}};
    }
  }
  std::map<std::string, std::pair<std::string, Ne>> got;
  for (const gguf::TensorInfo& t : f->tensors()) got[t.name] = {t.type->name, ne_of(t)};
  EXPECT_EQ(got, want);

  const std::string a = "nemotron_h_moe.";
  std::set<std::string> keys;
  for (const auto& [k, v] : f->metadata().entries()) keys.insert(k);
  std::set<std::string> want_keys = {"general.architecture", "general.name", "general.file_type",
                                     "general.quantization_version", "general.alignment"};
  for (const char* k : {"vocab_size", "context_length", "embedding_length", "block_count", "feed_forward_length",
                        "attention.head_count", "attention.head_count_kv", "attention.key_length",
                        "attention.value_length", "attention.layer_norm_rms_epsilon", "attention.layer_norm_epsilon",
                        "ssm.conv_kernel", "ssm.inner_size", "ssm.state_size", "ssm.time_step_rank", "ssm.group_count",
                        "expert_count", "expert_used_count", "expert_feed_forward_length",
                        "expert_shared_feed_forward_length", "expert_shared_count", "expert_weights_norm",
                        "expert_weights_scale", "expert_group_count", "expert_group_used_count", "moe_latent_size"})
    want_keys.insert(a + k);
  for (const char* k : {"model", "pre", "tokens", "token_type", "merges", "bos_token_id", "eos_token_id",
                        "unknown_token_id", "padding_token_id", "add_bos_token"})
    want_keys.insert(std::string("tokenizer.ggml.") + k);
  EXPECT_EQ(keys, want_keys);

  const gguf::Metadata& md = f->metadata();
  EXPECT_EQ(md.require<std::string>("general.architecture"), "nemotron_h_moe");
  EXPECT_EQ(md.require<uint32_t>(a + "block_count"), 7u);
  EXPECT_EQ(md.require<uint32_t>(a + "ssm.time_step_rank"), 8u);  // Mamba heads
  EXPECT_EQ(md.require<uint32_t>(a + "moe_latent_size"), 256u);
  // Per-layer expert counts and widths as arrays (0 off the MoE layers), in the converter's INT32.
  const std::vector<int32_t> e_want = {0, 8, 0, 0, 12, 0, 16}, w_want = {0, 256, 0, 0, 512, 0, 256},
                             kv_want = {0, 0, 0, 2, 0, 0, 0};
  EXPECT_EQ(md.find(a + "expert_count")->elem, gguf::ValueType::I32);
  EXPECT_EQ(*md.get_array<int32_t>(a + "expert_count"), e_want);
  EXPECT_EQ(*md.get_array<int32_t>(a + "expert_feed_forward_length"), w_want);
  EXPECT_EQ(*md.get_array<int32_t>(a + "feed_forward_length"), w_want);
  EXPECT_EQ(*md.get_array<int32_t>(a + "attention.head_count_kv"), kv_want);
  EXPECT_EQ(md.find("tokenizer.ggml.tokens")->size(), 2048u);

  // --uniform: scalar keys, as llama.cpp's loader reads them.
  write_gguf(make_plan(model_shape("tiny", true), Mix::GgufIq2), dir.file("uniform.gguf"), 7);
  auto u = gguf::GgufFile::open(dir.file("uniform.gguf"));
  EXPECT_FALSE(u->metadata().find(a + "expert_count")->is_array());
  EXPECT_EQ(u->metadata().require<uint32_t>(a + "expert_count"), 12u);
  EXPECT_EQ(u->metadata().require<uint32_t>(a + "expert_feed_forward_length"), 256u);
}

// The in-memory checkpoint shows the loader what the GGUF reader shows it for the written file.
TEST(SynthGguf, InMemoryCheckpointMatchesTheFile) {
  TempDir dir;
  const Plan plan = make_plan(model_shape("tiny"), Mix::GgufIq2);
  write_gguf(plan, dir.file("tiny.gguf"), 3);
  auto file = gguf::open_checkpoint(dir.file("tiny.gguf"));
  SynthCheckpoint mem(plan, 3, "synth:tiny/gguf-iq2");
  std::map<std::string, std::tuple<std::string, std::vector<int64_t>, size_t>> a, b;
  for (const RawTensor& t : file->tensors()) a[t.name] = {t.dtype, t.shape, t.nbytes};
  for (const RawTensor& t : mem.tensors()) b[t.name] = {t.dtype, t.shape, t.nbytes};
  EXPECT_EQ(a, b);
  const ModelDesc da = parse_model_config(file->config_json(), "file"), db = parse_model_config(mem.config_json(), "mem");
  EXPECT_EQ(da.model_type, db.model_type);
  EXPECT_EQ(da.pattern(), db.pattern());
  EXPECT_EQ(da.eos_ids, db.eos_ids);
  for (size_t i = 0; i < da.layers.size(); ++i) {
    const MoEDesc &x = da.layers[i].moe, &y = db.layers[i].moe;
    EXPECT_TRUE(x.n_experts == y.n_experts && x.width == y.width && x.top_k == y.top_k && x.latent == y.latent &&
                x.shared_width == y.shared_width && x.scaling == y.scaling && x.norm_topk_prob == y.norm_topk_prob)
        << "layer " << i;
  }
  EXPECT_LT(mem.host_bytes(), plan.totals.bytes + (size_t(64) << 20));
}

TEST(SynthRun, TinyGgufFromFileAndFromMemory) {
  TempDir dir;
  const Plan plan = make_plan(model_shape("tiny"), Mix::GgufIq2);
  write_gguf(plan, dir.file("tiny.gguf"), 1);
  LoadOptions o;
  o.path = dir.file("tiny.gguf");
  auto from_file = Model::load(o, registry());
  expect_runs(*from_file);
  auto from_memory = Model::load(std::make_unique<SynthCheckpoint>(plan, 1, "synth:tiny/gguf-iq2"), "synth", LoadOptions{},
                                 registry());
  expect_runs(*from_memory);
  // The model counts what its loaded tensors read; NVFP4's 4-byte scales ride along uncounted.
  size_t scales = 0;
  for (const StoredTensor& t : plan.tensors) scales += t.scale ? t.nbytes : 0;
  EXPECT_EQ(from_file->decode_bytes() + scales, plan.totals.decode_bytes);
  EXPECT_EQ(from_memory->decode_bytes(), from_file->decode_bytes());
}

// gguf-TYPE, for every ladder type: the linears take the type where their rows hold whole blocks
// (else Q8_0), the file loads and runs on the CPU, the in-memory checkpoint has the file's tensors,
// and the synthesized weights have the initializer's scale around zero (Q4_K/Q5_K's dmin centres them).
TEST(SynthRun, EveryGgufLadderTypeWritesLoadsAndRuns) {
  TempDir dir;
  for (int i = 0; i < kGgufMixTypeCount; ++i) {
    const std::string type = kGgufMixTypes[i];
    std::string name = "gguf-" + type;
    for (char& ch : name) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    const MixSpec mix = parse_mix(name);
    ASSERT_EQ(mix.mix, Mix::GgufType) << name;
    ASSERT_EQ(mix.gguf_type, type);
    const Plan plan = make_plan(model_shape("tiny"), mix);
    EXPECT_EQ(plan.mix_label, name);
    int of_type = 0;
    for (const StoredTensor& t : plan.tensors) {
      const Weight& w = plan.weights[size_t(t.weight)];
      if (w.role == Role::Embedding || w.role == Role::Head) EXPECT_EQ(t.dtype, "Q8_0") << name << " " << t.name;
      if (t.dtype == type) ++of_type;
      if ((w.role == Role::Routed || w.role == Role::MambaProj) && !t.scale)
        EXPECT_TRUE(t.dtype == type || t.dtype == "Q8_0") << name << " " << t.name << " " << t.dtype;
    }
    EXPECT_GT(of_type, 10) << name;
    const std::string path = dir.file(name + ".gguf");
    write_gguf(plan, path, 5);
    LoadOptions o;
    o.path = path;
    auto m = Model::load(o, registry());
    expect_runs(*m);
    // One routed tensor of the type, dequantized: mean near zero against its rms and rms near its std.
    auto file = gguf::open_checkpoint(path);
    for (const RawTensor& t : file->tensors()) {
      if (t.dtype != type || t.name.find("experts") == std::string::npos) continue;
      const gguf::QuantType* qt = gguf::find_type(type);
      ASSERT_NE(qt, nullptr);
      const int64_t n = std::min<int64_t>(int64_t(t.nbytes / size_t(qt->block_bytes)), 512) * qt->block_elems;
      std::vector<float> v(static_cast<size_t>(n));
      qt->dequantize(t.data, v.data(), n);
      double sum = 0, sq = 0;
      for (float x : v) sum += x, sq += double(x) * x;
      const double mean = sum / double(n), rms = std::sqrt(sq / double(n));
      EXPECT_LT(std::abs(mean), 0.2 * rms) << name << " " << t.name;
      const double want = 1.0 / std::sqrt(double(t.shape.back()));  // unit gain: std 1/√fan_in
      if (type != "NVFP4") EXPECT_NEAR(rms, want, 0.5 * want) << name << " " << t.name;  // NVFP4: times its .scale
      break;
    }
  }
  EXPECT_THROW(parse_mix("gguf-q3_k"), Error);
  EXPECT_THROW(parse_mix("gguf-"), Error);
  EXPECT_EQ(parse_mix("GGUF-Q4_K").gguf_type, "Q4_K");
}

TEST(SynthRun, TinyBf16FolderFromFileAndFromMemory) {
  TempDir dir;
  const Plan plan = make_plan(model_shape("tiny"), Mix::Bf16);
  write_hf_folder(plan, dir.file("tiny"), 2, size_t(4) << 20);  // small shards: several files and an index
  EXPECT_TRUE(fs::exists(dir.file("tiny/config.json")));
  EXPECT_TRUE(fs::exists(dir.file("tiny/model.safetensors.index.json")));
  int shards = 0;
  for (const auto& e : fs::directory_iterator(dir.file("tiny"))) shards += e.path().extension() == ".safetensors";
  EXPECT_GT(shards, 2);
  LoadOptions o;
  o.path = dir.file("tiny");
  auto from_file = Model::load(o, registry());
  EXPECT_EQ(from_file->desc().model_type, "nemotron_h_puzzle");
  expect_runs(*from_file);
  EXPECT_EQ(from_file->decode_bytes(), plan.totals.decode_bytes);
  EXPECT_EQ(from_file->weight_bytes(), plan.totals.bytes);
  // The decode bytes by part: one embedding row, each layer, the head; they add up to the total.
  const ModelDesc& d = from_file->desc();
  const DecodeParts& parts = from_file->decode_parts();
  ASSERT_EQ(parts.layers.size(), d.layers.size());
  EXPECT_EQ(parts.embedding, size_t(d.hidden) * 2);  // a bf16 row
  size_t sum = parts.embedding + parts.head;
  for (size_t b : parts.layers) {
    EXPECT_GT(b, 0u);
    sum += b;
  }
  EXPECT_EQ(sum, from_file->decode_bytes());
  EXPECT_GE(parts.head, size_t(d.vocab) * size_t(d.hidden) * 2);  // the whole LM head, bf16 or wider
  // The state a decode step moves, per layer kind.
  for (size_t i = 0; i < d.layers.size(); ++i) {
    const LayerDesc& l = d.layers[i];
    size_t want = 0;
    if (l.kind == LayerKind::Mamba) want = 2 * size_t(l.mamba.n_heads * l.mamba.head_dim * l.mamba.state_size) * 4;
    if (l.kind == LayerKind::Attention) want = 10 * 2 * size_t(l.attn.n_kv_heads * l.attn.head_dim) * 4;
    EXPECT_EQ(from_file->decode_state_bytes(i, 9), want) << "layer " << i;
  }
  EXPECT_THROW(from_file->decode_state_bytes(d.layers.size(), 0), Error);
  auto from_memory =
      Model::load(std::make_unique<SynthCheckpoint>(plan, 2, "synth:tiny/bf16"), "synth", LoadOptions{}, registry());
  expect_runs(*from_memory);
  EXPECT_EQ(from_memory->decode_bytes(), plan.totals.decode_bytes);
}

namespace {

// Rules of spec/formats.md § 6.1, written here rather than taken from the reader or the synth code.
float e2m1_value(uint8_t nibble) {
  const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  return nibble & 8 ? -mag[nibble & 7] : mag[nibble & 7];
}
float e4m3_value(uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  const float v = e == 0 ? std::ldexp(float(m), -9) : std::ldexp(1.0f + float(m) / 8.0f, e - 7);
  return b & 0x80 ? -v : v;
}
float f32_at(const RawTensor& t) {
  EXPECT_EQ(t.dtype, "F32") << t.name;
  EXPECT_EQ(t.nbytes, 4u) << t.name;
  float v;
  std::memcpy(&v, t.data, 4);
  return v;
}

// Logits of a prompt and one decode step.
std::vector<float> logits_of(Model& m) {
  auto seq = m.new_sequence(64);
  std::vector<float> logits, step;
  const std::vector<int32_t> prompt = {1, 1200, 1300, 57, 2000, 11, 1500};
  m.forward(*seq, prompt, ForwardMode::Prefill, logits, true);
  m.commit(*seq, int(prompt.size()));
  m.forward(*seq, {42}, ForwardMode::Verify, step, false);
  logits.insert(logits.end(), step.begin(), step.end());
  return logits;
}

}  // namespace

// The nvfp4 mix (spec/formats.md § 6.1–6.3): a folder the nvfp4 plugin opens and runs, every module
// in the form the mix names, the decoded weights of the initializer's std, and an in-memory form that
// loads to the same logits as its bytes written out.
TEST(SynthRun, TinyNvfp4FolderLoadsWithTheNvfp4Plugin) {
  TempDir dir;
  const Plan plan = make_plan(model_shape("tiny"), Mix::Nvfp4);
  write_hf_folder(plan, dir.file("tiny"), 4, size_t(4) << 20);
  LoadOptions o;
  o.path = dir.file("tiny");
  std::string format;
  auto ckpt = open_checkpoint(o, registry(), &format);
  EXPECT_EQ(format, "nvfp4");

  // Forms by module, and each weight's decoded std against the initializer's 1/√in.
  std::map<std::string, int> forms;  // "NVFP4 routed", …
  size_t stored_bytes = 0;
  for (const RawTensor& t : ckpt->tensors()) {
    stored_bytes += t.nbytes;
    const std::string& n = t.name;
    if (n.size() < 7 || n.compare(n.size() - 7, 7, ".weight") != 0) continue;
    const std::string base = n.substr(0, n.size() - 7);
    const std::string kind = n.find(".experts.") != std::string::npos        ? "routed"
                             : n.find("shared_experts") != std::string::npos ? "shared"
                             : n.find("in_proj") != std::string::npos || n.find("out_proj") != std::string::npos ? "mamba"
                             : n.find("_proj") != std::string::npos          ? "attention/latent"
                                                                             : "other";
    if (t.dtype != "U8" && t.dtype != "F8_E4M3") {
      ++forms[t.dtype + " " + kind];
      continue;
    }
    ++forms[(t.dtype == "U8" ? "NVFP4 " : "FP8 ") + kind];
    ASSERT_NE(ckpt->find(base + ".input_scale"), nullptr) << base;
    const RawTensor* s = ckpt->find(base + ".weight_scale");
    ASSERT_NE(s, nullptr) << base;
    const int64_t out = t.shape[0], in = t.dtype == "U8" ? t.shape[1] * 2 : t.shape[1];
    double sum = 0, sq = 0;
    if (t.dtype == "U8") {
      ASSERT_EQ(s->dtype, "F8_E4M3");
      ASSERT_EQ(s->shape, (std::vector<int64_t>{out, in / 16}));
      const RawTensor* s2 = ckpt->find(base + ".weight_scale_2");
      ASSERT_NE(s2, nullptr) << base;
      const float g = f32_at(*s2);
      for (int64_t r = 0; r < out; ++r)
        for (int64_t k = 0; k < in; ++k) {
          const uint8_t byte = t.data[r * (in / 2) + k / 2];
          const uint8_t bs = s->data[r * (in / 16) + k / 16];
          ASSERT_TRUE((bs & 0x7F) != 0x7F && !(bs & 0x80)) << base << ": block scale 0x" << std::hex << int(bs);
          const double v = e2m1_value(k % 2 ? byte >> 4 : byte & 15) * e4m3_value(bs) * g;
          sum += v, sq += v * v;
        }
    } else {
      const float g = f32_at(*s);
      for (int64_t i = 0; i < out * in; ++i) {
        ASSERT_NE(t.data[i] & 0x7F, 0x7F) << base << ": a NaN code at " << i;
        const double v = e4m3_value(t.data[i]) * g;
        sum += v, sq += v * v;
      }
    }
    const double n_el = double(out * in), mean = sum / n_el, sd = std::sqrt(sq / n_el - mean * mean);
    const double want = 1.0 / std::sqrt(double(in));
    EXPECT_NEAR(sd / want, 1.0, 0.03) << base << ": std " << sd << ", initializer's " << want;
    EXPECT_LT(std::fabs(mean), 0.05 * want) << base;
  }
  // tiny (MEM*EME): 3 MoE layers of 8, 12, 16 experts (up, down), one shared expert and two latent
  // projections each; 3 Mamba layers (in, out); one attention layer (q, k, v, o).
  EXPECT_EQ(forms["NVFP4 routed"], 2 * (8 + 12 + 16));
  EXPECT_EQ(forms["NVFP4 shared"], 2 * 3);
  EXPECT_EQ(forms["FP8 mamba"], 2 * 3);
  EXPECT_EQ(forms["FP8 attention/latent"], 4 + 2 * 3);
  EXPECT_EQ(forms["BF16 other"], 2 + 8 + 3 * 2 + 3);  // embedding, lm_head, norms, Mamba norm and conv1d, routers
  for (const auto& [k, n] : forms)
    EXPECT_TRUE(k == "NVFP4 routed" || k == "NVFP4 shared" || k == "FP8 mamba" || k == "FP8 attention/latent" ||
                k == "BF16 other")
        << k << " ×" << n;
  EXPECT_EQ(stored_bytes, plan.totals.bytes);  // the dry run's count is what is written

  auto from_file = Model::load(o, registry());
  EXPECT_EQ(from_file->format_name(), "nvfp4");
  expect_runs(*from_file);
  // The model counts each linear's codes and scales (FP8's weight_scale too); weight_scale_2 and
  // input_scale ride along uncounted.
  size_t scalars = 0;
  for (const StoredTensor& t : plan.tensors) {
    const Weight& w = plan.weights[size_t(t.weight)];
    const bool uncounted = t.modelopt_part == StoredTensor::kNvfp4GlobalScale || t.modelopt_part == StoredTensor::kInputScale;
    if (uncounted && (w.role != Role::Routed || t.expert < plan.desc.layers[size_t(w.layer)].moe.top_k))
      scalars += t.nbytes;
  }
  EXPECT_EQ(from_file->decode_bytes() + scalars, plan.totals.decode_bytes);

  // In memory: the same names, dtypes and shapes as the file; written out as one safetensors file
  // with its config.json, it loads through the nvfp4 plugin (its config checks included) to the same
  // logits, bit for bit.
  auto mem = std::make_unique<SynthCheckpoint>(plan, 4, "synth:tiny/nvfp4");
  std::map<std::string, std::tuple<std::string, std::vector<int64_t>, size_t>> a, b;
  for (const RawTensor& t : ckpt->tensors()) a[t.name] = {t.dtype, t.shape, t.nbytes};
  for (const RawTensor& t : mem->tensors()) b[t.name] = {t.dtype, t.shape, t.nbytes};
  EXPECT_EQ(a, b);
  fs::create_directories(dir.file("mem"));
  std::vector<TensorSpec> layout;
  for (const RawTensor& t : mem->tensors()) layout.push_back({t.name, t.dtype, t.shape});
  auto f = plan.writer->create(dir.file("mem/model.safetensors"), layout);
  for (const RawTensor& t : mem->tensors()) f->write(t.data, t.nbytes);
  f->close();
  std::ofstream(dir.file("mem/config.json")) << mem->config_json() << "\n";
  LoadOptions mo;
  mo.path = dir.file("mem");
  auto mem_file = Model::load(mo, registry());
  EXPECT_EQ(mem_file->format_name(), "nvfp4");
  auto from_memory = Model::load(std::move(mem), "synth nvfp4", LoadOptions{}, registry());
  expect_runs(*from_memory);
  EXPECT_EQ(from_memory->decode_bytes(), from_file->decode_bytes());
  const std::vector<float> lm = logits_of(*from_memory), lf = logits_of(*mem_file);
  ASSERT_EQ(lm.size(), lf.size());
  size_t differ = 0;
  for (size_t i = 0; i < lm.size(); ++i) differ += std::memcmp(&lm[i], &lf[i], 4) != 0;
  EXPECT_EQ(differ, 0u) << "of " << lm.size() << " logits";
}

// The nvfp4 mix holds the same weights as bf16 (its counts are of parameters, not bytes), every
// shape plans (NVFP4 rows whole 64-blocks, so the CUDA repack takes them), and its bytes per
// weight are the mix's: 4.5 bits for NVFP4 codes and block scales, 8 for FP8.
TEST(SynthShapes, Nvfp4PlansEveryShape) {
  for (const char* shape : {"tiny", "nano", "bolt", "super"}) {
    const Plan q = make_plan(model_shape(shape), Mix::Nvfp4), d = make_plan(model_shape(shape), Mix::Bf16);
    EXPECT_EQ(q.totals.params, d.totals.params) << shape;
    EXPECT_EQ(q.totals.active, d.totals.active) << shape;
    EXPECT_EQ(q.totals.routed, d.totals.routed) << shape;
    size_t bytes = 0;
    for (const StoredTensor& t : q.tensors) {
      bytes += t.nbytes;
      const Weight& w = q.weights[size_t(t.weight)];
      const int64_t per = w.numel() / std::max(w.n_experts, 1);
      if (t.modelopt_part == StoredTensor::kNvfp4Weight) {
        EXPECT_EQ(w.fan_in % 64, 0) << t.name;
        EXPECT_EQ(t.nbytes * 2, size_t(per)) << t.name;
      }
      if (t.modelopt_part == StoredTensor::kNvfp4BlockScale) EXPECT_EQ(t.nbytes * 16, size_t(per)) << t.name;
      if (t.modelopt_part == StoredTensor::kFp8Weight) EXPECT_EQ(t.nbytes, size_t(per)) << t.name;
      if (t.modelopt_scalar()) EXPECT_EQ(t.nbytes, 4u) << t.name;
    }
    EXPECT_EQ(bytes, q.totals.bytes) << shape;
    // Mostly 4.5-bit experts (tiny's BF16 embedding and head outweigh them).
    if (std::string(shape) != "tiny") EXPECT_LT(q.totals.bytes, d.totals.bytes / 3) << shape;
  }
  EXPECT_EQ(parse_mix("nvfp4").mix, Mix::Nvfp4);
  EXPECT_STREQ(mix_name(Mix::Nvfp4), "nvfp4");
}
