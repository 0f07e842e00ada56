// End to end: a tiny nemotron_h written as an EXL3 pack (every linear EXL3 with mixed K and
// codebooks, padded shapes, BF16 embedding and router) loads through the plugin registry and gives
// the logits of the same model written densely in F32 with the EXL3 reconstructions as weights.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "exl3_test_util.h"
#include "formats/exl3/exl3_cpu.h"
#include "formats/safetensors/safetensors_writer.h"
#include "tandem/model.h"
#include "tandem/registry.h"
#include "test_util.h"

using namespace tandem;
namespace st = tandem::safetensors;

namespace {

// Hidden 96, vocab 300 and Mamba in_proj 164 rows: none a multiple of 128, so every EXL3 linear pads.
constexpr int kHidden = 96, kVocab = 300;
constexpr int kHeads = 4, kHeadDim = 16, kGroups = 1, kState = 16, kConv = 4;
constexpr int kDin = kHeads * kHeadDim, kConvDim = kDin + 2 * kGroups * kState, kInProj = kDin + kConvDim + kHeads;
constexpr int kQHeads = 4, kKvHeads = 2, kAttnDim = 16;
constexpr int kExperts = 4, kTopK = 2, kWidth = 64, kShared = 96, kLatent = 48, kMlp = 80;

std::string config_json(bool exl3) {
  std::ostringstream c;
  c << R"({
  "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
  "vocab_size": )" << kVocab << R"(, "hidden_size": )" << kHidden << R"(, "num_hidden_layers": 4,
  "hybrid_override_pattern": "M*E-", "layer_norm_epsilon": 1e-05, "tie_word_embeddings": false,
  "bos_token_id": 1, "eos_token_id": 2,
  "mamba_num_heads": )" << kHeads << R"(, "mamba_head_dim": )" << kHeadDim << R"(, "n_groups": )" << kGroups
    << R"(, "ssm_state_size": )" << kState << R"(, "conv_kernel": )" << kConv << R"(, "chunk_size": 16,
  "use_conv_bias": true, "mamba_proj_bias": false, "mamba_hidden_act": "silu",
  "num_attention_heads": )" << kQHeads << R"(, "num_key_value_heads": )" << kKvHeads << R"(, "head_dim": )"
    << kAttnDim << R"(, "attention_bias": false,
  "n_routed_experts": )" << kExperts << R"(, "num_experts_per_tok": )" << kTopK << R"(, "moe_intermediate_size": )"
    << kWidth << R"(, "moe_shared_expert_intermediate_size": )" << kShared << R"(, "moe_latent_size": )" << kLatent
    << R"(, "routed_scaling_factor": 1.5, "n_group": 1, "topk_group": 1, "norm_topk_prob": true,
  "intermediate_size": )" << kMlp << R"(, "mlp_hidden_act": "relu2", "mlp_bias": false,
  "max_position_embeddings": 4096)";
  if (exl3)
    c << R"(,
  "quantization_config": {"quant_method": "exl3", "version": "0.0.16", "bits": 2.5, "head_bits": 6,
    "calibration": {"rows": 250, "cols": 2048}, "out_scales": "auto", "codebook": "mul1"})";
  c << "\n}\n";
  return c.str();
}

struct Linear {
  std::string name;
  int64_t out, in;
  int K, cb;
};

std::vector<Linear> linears() {
  const std::string m0 = "backbone.layers.0.mixer.", m1 = "backbone.layers.1.mixer.", m2 = "backbone.layers.2.mixer.",
                    m3 = "backbone.layers.3.mixer.";
  std::vector<Linear> l = {
      {m0 + "in_proj", kInProj, kHidden, 4, 0},
      {m0 + "out_proj", kHidden, kDin, 4, 1},
      {m1 + "q_proj", kQHeads * kAttnDim, kHidden, 4, 2},
      {m1 + "k_proj", kKvHeads * kAttnDim, kHidden, 4, 1},
      {m1 + "v_proj", kKvHeads * kAttnDim, kHidden, 4, 0},
      {m1 + "o_proj", kHidden, kQHeads * kAttnDim, 4, 2},
      {m2 + "fc1_latent_proj", kLatent, kHidden, 4, 2},
      {m2 + "fc2_latent_proj", kHidden, kLatent, 3, 2},
      {m2 + "shared_experts.up_proj", kShared, kHidden, 4, 0},
      {m2 + "shared_experts.down_proj", kHidden, kShared, 4, 1},
      {m3 + "up_proj", kMlp, kHidden, 5, 1},
      {m3 + "down_proj", kHidden, kMlp, 5, 2},
      {"lm_head", kVocab, kHidden, 6, 2},
  };
  for (int e = 0; e < kExperts; ++e) {
    // Routed experts at K=2 like the Bolt packs; one of them at K=3 in another codebook.
    const int K = e == 3 ? 3 : 2, cb = e == 3 ? 0 : 2;
    l.push_back({m2 + "experts." + std::to_string(e) + ".up_proj", kWidth, kLatent, K, cb});
    l.push_back({m2 + "experts." + std::to_string(e) + ".down_proj", kLatent, kWidth, K, cb});
  }
  return l;
}

int64_t pad128(int64_t v) { return (v + 127) / 128 * 128; }

st::WriteTensor raw(const std::string& name, const char* dtype, std::vector<int64_t> shape, const void* p, size_t n) {
  st::WriteTensor t{name, dtype, std::move(shape), std::vector<uint8_t>(n)};
  std::memcpy(t.data.data(), p, n);
  return t;
}

// The other tensors, identical in both checkpoints.
std::vector<st::WriteTensor> plain_tensors(uint64_t seed) {
  std::mt19937_64 g(seed);
  auto normal = [&](size_t n, double mean, double sd) {
    std::normal_distribution<double> d(mean, sd);
    std::vector<float> v(n);
    for (auto& x : v) x = float(d(g));
    return v;
  };
  auto uniform = [&](size_t n, double lo, double hi) {
    std::uniform_real_distribution<double> d(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = float(d(g));
    return v;
  };
  std::vector<st::WriteTensor> t;
  t.push_back(st::make_bf16("backbone.embeddings.weight", {kVocab, kHidden}, normal(size_t(kVocab) * kHidden, 0, 1)));
  t.push_back(st::make_f32("backbone.norm_f.weight", {kHidden}, normal(kHidden, 1, 0.1)));
  for (int i = 0; i < 4; ++i)
    t.push_back(st::make_bf16("backbone.layers." + std::to_string(i) + ".norm.weight", {kHidden}, normal(kHidden, 1, 0.1)));
  const std::string m0 = "backbone.layers.0.mixer.";
  t.push_back(st::make_bf16(m0 + "conv1d.weight", {kConvDim, 1, kConv}, normal(size_t(kConvDim) * kConv, 0, 0.5)));
  t.push_back(st::make_bf16(m0 + "conv1d.bias", {kConvDim}, normal(kConvDim, 0, 0.1)));
  std::vector<float> a = uniform(kHeads, 1.0, 16.0), dtb = uniform(kHeads, std::log(0.02), std::log(0.3));
  for (auto& x : a) x = std::log(x);
  for (auto& x : dtb) x = float(std::log(std::expm1(std::exp(double(x)))));
  t.push_back(st::make_f32(m0 + "A_log", {kHeads}, a));
  t.push_back(st::make_f32(m0 + "D", {kHeads}, normal(kHeads, 1, 0.5)));
  t.push_back(st::make_f32(m0 + "dt_bias", {kHeads}, dtb));
  t.push_back(st::make_bf16(m0 + "norm.weight", {kDin}, normal(kDin, 1, 0.1)));
  const std::string m2 = "backbone.layers.2.mixer.";
  t.push_back(st::make_bf16(m2 + "gate.weight", {kExperts, kHidden}, normal(size_t(kExperts) * kHidden, 0, 1 / std::sqrt(double(kHidden)))));
  t.push_back(st::make_f32(m2 + "gate.e_score_correction_bias", {kExperts}, normal(kExperts, 0, 0.05)));
  return t;
}

void write_folder(const std::string& dir, const std::string& config, const std::vector<st::WriteTensor>& tensors) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << config;
  st::write_file(dir + "/model.safetensors", tensors);
}

PluginRegistry& registry() {
  static PluginRegistry* r = [] {
    auto* reg = new PluginRegistry();
    reg->load_directory(test::plugin_dir());
    return reg;
  }();
  return *r;
}

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

}  // namespace

TEST(Exl3Model, PackGivesTheLogitsOfItsDenseReconstruction) {
  test::TempDir dir("tandem-exl3");
  std::vector<st::WriteTensor> pack = plain_tensors(5), dense = plain_tensors(5);
  uint64_t seed = 1000;
  int64_t exl3_bytes = 0, dense_bytes = 0;  // of the linears: trellis + suh + svh, and out·in·4
  for (const Linear& l : linears()) {
    exl3_test::RandomLinear lin(pad128(l.in), pad128(l.out), l.K, l.cb, ++seed, 1.0 / std::sqrt(double(l.in)));
    exl3_test::GroupBuilder b;
    lin.store(b, l.name);
    std::vector<float> w(size_t(l.out * l.in));
    exl3::Exl3Tensor(b.group(l.name, {l.out, l.in})).dequantize(w.data());
    dense.push_back(st::make_f32(l.name + ".weight", {l.out, l.in}, w));
    pack.push_back(raw(l.name + ".trellis", "I16", {lin.k / 16, lin.n / 16, 16 * l.K}, lin.trellis.data(), lin.trellis.size() * 2));
    pack.push_back(raw(l.name + ".suh", "F16", {lin.k}, lin.suh.data(), lin.suh.size() * 2));
    pack.push_back(raw(l.name + ".svh", "F16", {lin.n}, lin.svh.data(), lin.svh.size() * 2));
    const uint32_t marker = l.cb == 1 ? 0xCBAC1FEDu : 0x83DCD12Du;
    if (l.cb) pack.push_back(raw(l.name + (l.cb == 1 ? ".mcg" : ".mul1"), "I32", {}, &marker, 4));
    exl3_bytes += lin.k * lin.n * l.K / 8 + 2 * lin.k + 2 * lin.n;
    dense_bytes += l.out * l.in * 4;
  }
  write_folder(dir.file("exl3"), config_json(true), pack);
  write_folder(dir.file("dense"), config_json(false), dense);

  LoadOptions o;
  o.path = dir.file("exl3");
  auto q = Model::load(o, registry());
  o.path = dir.file("dense");
  auto d = Model::load(o, registry());
  EXPECT_EQ(q->desc().pattern(), "M*E-");
  EXPECT_EQ(q->desc().layers[2].moe.latent, kLatent);
  // Everything else is the same tensors in both, so the totals differ by the linears alone.
  EXPECT_EQ(int64_t(q->weight_bytes()) - int64_t(d->weight_bytes()), exl3_bytes - dense_bytes);

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
  const double diff = test::max_abs_diff(lq, ld);
  EXPECT_LT(diff, 1e-4 * peak) << "max |Δ| " << diff << " of peak " << peak;
  std::printf("exl3 vs dense reconstruction: max |Δlogit| %.3g, peak |logit| %.3g\n", diff, peak);
}
