// Quantized and yarn drafters (plugins/spec-lilicorr quant.*, yarn.*, docs/lilicorr.md § Checkpoints):
// ModelOpt NVFP4 drafters (tandem synth quant=nvfp4) load, run on the target's NVFP4 kernels and match the
// same weights dequantized to BF16; the MLX nvfp4 layout gives the ModelOpt bits; MLX mxfp4 loads
// (dequantized); exclude patterns are honoured; every malformed input is a one-line error naming it;
// yarn frequencies against numbers computed by hand; an own embedding table embeds the block; drafted
// greedy text equals plain greedy text with an NVFP4 drafter (drafts proposed and verified).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "checkpoint.h"
#include "drafter.h"
#include "formats/safetensors/safetensors_checkpoint.h"
#include "formats/safetensors/safetensors_file_writer.h"
#include "gpu_required.h"
#include "on_target.h"
#include "lili_by_hand.h"
#include "quant.h"
#include "synth.h"
#include "tandem/drafting.h"
#include "tandem/generate.h"
#include "tandem/parallel.h"
#include "test_util.h"
#include "tests/conformance/model_util.h"
#include "tests/schedulers/slots/drafters.h"
#include "yarn.h"

using namespace tandem;
using namespace tandem::lilicorr;

namespace {

namespace fs = std::filesystem;


// The tests with a target: on TANDEM_LILICORR_DEVICE (built again for "cuda" as
// test_spec_lilicorr_quant_cuda: the NVFP4 linears on the CUDA NVFP4 module; skips without a GPU).
class LilicorrQuantOnTarget : public test::OnLilicorrDevice {};

std::unique_ptr<Model> load_target() { return test::load_lilicorr_target(); }

ModelDesc fixture_shape() {  // tests/fixtures/hf/latent: width 64, vocabulary 256, 8 layers
  ModelDesc d;
  d.hidden = 64;
  d.vocab = 256;
  d.layers.resize(8);
  return d;
}

std::string synth(const test::TempDir& dir, const std::string& name, std::map<std::string, std::string> set,
                  const ModelDesc& target = fixture_shape(), uint64_t seed = 5) {
  LiliFactory f;
  set.emplace("geometry", "tiny");
  SpeculatorSettings s("", "draft.lilicorr", set);
  const std::string path = dir.file(name);
  f.synthesize(path, target, s, seed);
  return path;
}

void replace_in(const std::string& file, const std::string& from, const std::string& to) {
  std::string s = test::read_file(file);
  const size_t at = s.find(from);
  ASSERT_NE(at, std::string::npos) << from << " in " << file;
  s.replace(at, from.size(), to);
  std::ofstream(file) << s;
}

// A tensor of a rewritten file.
struct Out {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// Rewrites dir/model.safetensors through `edit`, which sees every tensor and may change, drop (return
// false) or append to `extra`.
void rewrite(const std::string& dir, const std::function<bool(Out&, std::vector<Out>& extra)>& edit) {
  std::vector<Out> all;
  {
    auto ck = safetensors::open_checkpoint(dir);
    for (const RawTensor& r : ck->tensors()) {
      Out o{r.name, r.dtype, r.shape, std::vector<uint8_t>(r.data, r.data + r.nbytes)};
      std::vector<Out> extra;
      if (edit(o, extra)) all.push_back(std::move(o));
      for (Out& e : extra) all.push_back(std::move(e));
    }
  }
  std::vector<TensorSpec> specs;
  for (const Out& o : all) specs.push_back({o.name, o.dtype, o.shape});
  const std::string tmp = dir + "/model.safetensors.tmp";
  safetensors::SafetensorsWriter w;
  auto f = w.create(tmp, specs, FileInfo{});
  for (const Out& o : all) f->write(o.bytes.data(), o.bytes.size());
  f->close();
  fs::rename(tmp, dir + "/model.safetensors");
}

// The NVFP4 folder `src` as a dense BF16 drafter `dst`: the same config without quantization, every
// tensor's values (NVFP4 ones dequantized) rounded to BF16.
std::string dequantized_bf16(const test::TempDir& dir, const std::string& name, const std::string& src) {
  const std::string dst = synth(dir, name, {});  // config.json of the same geometry, no quantization
  const TensorMap t = read_tensors(src);
  std::vector<TensorSpec> specs;
  for (const auto& [n, v] : t) specs.push_back({n, "BF16", v.shape});
  safetensors::SafetensorsWriter w;
  auto f = w.create(dst + "/model.safetensors", specs, FileInfo{});
  for (const auto& [n, v] : t) {
    std::vector<uint16_t> h(v.data.size());
    for (size_t i = 0; i < h.size(); ++i) h[i] = f32_to_bf16(v.data[i]);
    f->write(h.data(), h.size() * 2);
  }
  f->close();
  return dst;
}

// A drafter for `m` with `path`, fed a prompt of n tokens and one proposal made.
struct Proposal {
  std::unique_ptr<Speculator> sp;
  LiliDrafter* lili = nullptr;
  Draft draft;
};
Proposal propose_after_prompt(Model& m, LiliFactory& f, test::Grab& grab, const std::string& path, size_t n = 19) {
  Proposal p;
  SpeculatorSettings s("", "draft.lilicorr", {{"path", path}});
  p.sp = f.create(grab.ctx, s);
  p.lili = static_cast<LiliDrafter*>(p.sp.get());
  m.set_taps(p.lili->hidden_layers());
  auto ids = test::read_ids(test::data_path("hf/latent/prompt_200.txt"));
  const std::vector<int32_t> prompt(ids.begin(), ids.begin() + long(n));
  auto seq = m.new_sequence(64);
  std::vector<float> logits;
  m.forward(*seq, prompt, ForwardMode::Prefill, logits, false);
  m.commit(*seq, int(prompt.size()));
  test::feed_prompt(*p.lili, m, prompt, logits);
  p.lili->propose(31, p.draft);
  return p;
}

float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float d = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

bool linear_is_nvfp4(const Linear& l) { return l.nvfp4 != nullptr; }

TEST_F(LilicorrQuantOnTarget, ModeloptNvfp4LoadsAndMatchesTheDequantizedBf16Drafter) {
  test::TempDir dir("lilicorr");
  const std::string q = synth(dir, "nvfp4", {{"quant", "nvfp4"}});
  ASSERT_TRUE(fs::exists(q + "/hf_quant_config.json"));
  const auto w = load_drafter(q);
  EXPECT_TRUE(linear_is_nvfp4(w->backbone.fc));
  for (const BackboneLayer& L : w->backbone.layers)
    for (const Linear* l : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down}) EXPECT_TRUE(linear_is_nvfp4(*l));
  ASSERT_TRUE(w->head.has_value());
  EXPECT_FALSE(linear_is_nvfp4(w->head->pass_hidden_proj)) << "lilicorr.* is excluded";
  // The config.json form alone reads the same.
  fs::remove(q + "/hf_quant_config.json");
  const auto w2 = load_drafter(q);
  EXPECT_EQ(w2->backbone.layers[2].up.w, w->backbone.layers[2].up.w);

  auto m = load_target();
  auto grab = std::make_shared<test::Grab>();
  Drafting d(*m, {{"grab", grab}}, test::fixed_costs());
  LiliFactory f;
  const std::string b = dequantized_bf16(dir, "bf16", q);
  Proposal pq = propose_after_prompt(*m, f, *grab, q);
  Proposal pb = propose_after_prompt(*m, f, *grab, b);
  ASSERT_EQ(pq.draft.tokens.size(), size_t(7));
  // The NVFP4 kernels multiply the exact dequantized values; the BF16 drafter rounds them to BF16
  // (relative 2^-9 per weight): rows after the final norm (magnitude ~1) agree within 5e-2, the
  // candidates' log-probabilities within 5e-2.
  const float rows = max_diff(pq.lili->backbone_rows(), pb.lili->backbone_rows());
  const float logp = max_diff(pq.lili->last_logp(), pb.lili->last_logp());
  std::printf("NVFP4 vs dequantized BF16 drafter: backbone rows max |d| %.3g, log-probabilities %.3g\n", rows, logp);
  EXPECT_LT(rows, 5e-2f);
  EXPECT_LT(logp, 5e-2f);
  EXPECT_GT(rows, 0.0f) << "the NVFP4 drafter ran its own kernels";
}

// Without the nvfp4 format plugin no format takes the NVFP4 groups: each linear is dequantized to BF16
// (a warning line per tensor), which is the dequantized BF16 drafter bit for bit.
TEST(LilicorrQuant, WithoutAnNvfp4FormatTheLinearsAreDequantizedToBf16) {
  PluginRegistry reg;
  for (const auto& e : fs::directory_iterator(test::plugin_dir()))
    if (e.path().filename().string().find("nvfp4") == std::string::npos) reg.load_file(e.path().string());
  LoadOptions o;
  o.path = test::data_path("hf/latent");
  o.device = "cpu";
  auto m = Model::load(o, reg);
  set_thread_count(1);
  test::TempDir dir("lilicorr");
  const std::string q = synth(dir, "nvfp4", {{"quant", "nvfp4"}});
  const std::string b = dequantized_bf16(dir, "bf16", q);
  auto grab = std::make_shared<test::Grab>();
  Drafting d(*m, {{"grab", grab}}, test::fixed_costs());
  LiliFactory f;
  Proposal pq = propose_after_prompt(*m, f, *grab, q);
  Proposal pb = propose_after_prompt(*m, f, *grab, b);
  const auto rq = pq.lili->backbone_rows(), rb = pb.lili->backbone_rows();
  EXPECT_EQ(0, std::memcmp(rq.data(), rb.data(), rq.size() * 4));
  EXPECT_EQ(pq.lili->last_block(), pb.lili->last_block());
}

TEST_F(LilicorrQuantOnTarget, MlxNvfp4IsBitIdenticalToModeloptNvfp4) {
  test::TempDir dir("lilicorr");
  const std::string a = synth(dir, "modelopt", {{"quant", "nvfp4"}});
  const std::string x = synth(dir, "mlx", {{"quant", "mlx-nvfp4"}});
  const TensorMap ta = read_tensors(a), tx = read_tensors(x);
  ASSERT_EQ(ta.size(), tx.size());
  int nv = 0;
  for (const auto& [n, v] : ta) {
    auto it = tx.find(n);
    ASSERT_NE(it, tx.end()) << n;
    EXPECT_EQ(v.shape, it->second.shape) << n;
    EXPECT_EQ(0, std::memcmp(v.data.data(), it->second.data.data(), v.data.size() * 4)) << n;
    ASSERT_EQ(bool(v.nvfp4), bool(it->second.nvfp4)) << n;
    if (!v.nvfp4) continue;
    ++nv;
    EXPECT_EQ(v.nvfp4->q, it->second.nvfp4->q) << n;
    EXPECT_EQ(v.nvfp4->scales, it->second.nvfp4->scales) << n;
    EXPECT_EQ(0, std::memcmp(&v.nvfp4->scale2, &it->second.nvfp4->scale2, 4)) << n;
  }
  EXPECT_EQ(nv, 1 + 5 * 7) << "fc and 7 linears in each of 5 layers";
  auto m = load_target();
  auto grab = std::make_shared<test::Grab>();
  Drafting d(*m, {{"grab", grab}}, test::fixed_costs());
  LiliFactory f;
  Proposal pa = propose_after_prompt(*m, f, *grab, a);
  Proposal px = propose_after_prompt(*m, f, *grab, x);
  const auto ra = pa.lili->backbone_rows(), rx = px.lili->backbone_rows();
  EXPECT_EQ(0, std::memcmp(ra.data(), rx.data(), ra.size() * 4)) << "backbone rows bit for bit";
  EXPECT_EQ(pa.lili->last_block(), px.lili->last_block());
  EXPECT_EQ(pa.lili->last_scores().pairs, px.lili->last_scores().pairs);
}

// An MLX mxfp4 module: e2m1 elements times 2^(s − 127) per 32, written here by hand.
TEST(LilicorrQuant, MlxMxfp4LoadsDequantized) {
  test::TempDir dir("lilicorr");
  const std::string p = synth(dir, "mx", {{"dtype", "f32"}});
  const std::string mod = "layers.1.mlp.down_proj";  // [64, 128]
  std::vector<float> want;
  rewrite(p, [&](Out& o, std::vector<Out>& extra) {
    if (o.name != mod + ".weight") return true;
    const int64_t N = o.shape[0], K = o.shape[1];
    Out wq{mod + ".weight", "U32", {N, K / 8}, std::vector<uint8_t>(size_t(N * K / 2))};
    Out sc{mod + ".scales", "U8", {N, K / 32}, std::vector<uint8_t>(size_t(N * K / 32))};
    const float mag[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    want.resize(size_t(N * K));
    for (int64_t i = 0; i < N * K; ++i) {
      const uint8_t code = uint8_t((i * 7 + i / 5) % 16);
      wq.bytes[size_t(i / 2)] |= uint8_t(i % 2 ? code << 4 : code);
      const uint8_t s = uint8_t(120 + (i / 32) % 9);  // 2^-7 … 2^1
      sc.bytes[size_t(i / 32)] = s;
      want[size_t(i)] = (code & 8 ? -1.0f : 1.0f) * mag[code & 7] * std::ldexp(1.0f, int(s) - 127);
    }
    extra.push_back(std::move(wq));
    extra.push_back(std::move(sc));
    return false;
  });
  replace_in(p + "/config.json", "\"block_size\": 8,", "\"block_size\": 8, \"quantization\": {\"group_size\": 32, \"bits\": 4, \"mode\": \"mxfp4\"},");
  const auto w = load_drafter(p);
  EXPECT_EQ(w->backbone.layers[1].down.w, want);
  EXPECT_FALSE(w->backbone.layers[1].down.nvfp4);
  // A NaN scale and a wrong group size are errors naming the tensor and the key.
  replace_in(p + "/config.json", "\"group_size\": 32", "\"group_size\": 16");
  test::expect_error([&] { load_drafter(p); }, {"layers.1.mlp.down_proj.scales", "group_size 32", "quantization"});
}

TEST(LilicorrQuant, ExcludePatternsAreHonoured) {
  test::TempDir dir("lilicorr");
  const std::string p = synth(dir, "ex", {{"quant", "nvfp4"}, {"exclude", "*self_attn*|layers.4.mlp.down_proj"}});
  EXPECT_NE(test::read_file(p + "/hf_quant_config.json").find("*self_attn*"), std::string::npos);
  const auto w = load_drafter(p);
  for (size_t l = 0; l < w->backbone.layers.size(); ++l) {
    const BackboneLayer& L = w->backbone.layers[l];
    for (const Linear* x : {&L.q, &L.k, &L.v, &L.o}) EXPECT_FALSE(linear_is_nvfp4(*x)) << "layer " << l;
    EXPECT_TRUE(linear_is_nvfp4(L.gate) && linear_is_nvfp4(L.up));
    EXPECT_EQ(linear_is_nvfp4(L.down), l != 4) << "layer " << l;
  }
  // A pattern that names a module stored NVFP4 is refused, naming the module and the pattern.
  replace_in(p + "/hf_quant_config.json", "\"*self_attn*\"", "\"*self_attn*\", \"layers.0.mlp\"");
  test::expect_error([&] { load_drafter(p); }, {"hf_quant_config.json", "layers.0.mlp", "stored as NVFP4"});
  // A malformed exclude list.
  replace_in(p + "/hf_quant_config.json", "\"exclude_modules\": [", "\"exclude_modules\": \"oops\", \"x\": [");
  test::expect_error([&] { load_drafter(p); }, {"hf_quant_config.json", "exclude_modules", "not a list"});
}

TEST(LilicorrQuant, MalformedInputsAreErrorsNamingThem) {
  test::TempDir dir("lilicorr");
  const std::string mod = "layers.0.mlp.up_proj";
  {
    const std::string p = synth(dir, "noscale", {{"quant", "nvfp4"}});
    rewrite(p, [&](Out& o, std::vector<Out>&) { return o.name != mod + ".weight_scale"; });
    test::expect_error([&] { load_drafter(p); }, {mod + ".weight_scale", "missing", "group_size 16"});
  }
  {
    const std::string p = synth(dir, "noscale2", {{"quant", "nvfp4"}});
    rewrite(p, [&](Out& o, std::vector<Out>&) { return o.name != mod + ".weight_scale_2"; });
    test::expect_error([&] { load_drafter(p); }, {mod + ".weight_scale_2", "missing", "quant_algo NVFP4"});
  }
  {
    const std::string p = synth(dir, "shape", {{"quant", "nvfp4"}});
    rewrite(p, [&](Out& o, std::vector<Out>&) {
      if (o.name == mod + ".weight_scale") o.shape = {o.shape[1], o.shape[0]};
      return true;
    });
    test::expect_error([&] { load_drafter(p); }, {mod + ".weight_scale", "expected F8_E4M3 [128, 4]", "group_size 16"});
  }
  {
    const std::string p = synth(dir, "negative", {{"quant", "nvfp4"}});
    rewrite(p, [&](Out& o, std::vector<Out>&) {
      if (o.name == mod + ".weight_scale") o.bytes[3] = 0xB8;
      return true;
    });
    test::expect_error([&] { load_drafter(p); }, {mod + ".weight_scale", "negative"});
  }
  {
    const std::string p = synth(dir, "algo", {{"quant", "nvfp4"}});
    replace_in(p + "/hf_quant_config.json", "\"NVFP4\"", "\"INT4_AWQ\"");
    test::expect_error([&] { load_drafter(p); }, {"hf_quant_config.json", "quant_algo", "INT4_AWQ"});
  }
  {
    const std::string p = synth(dir, "fp8", {{"quant", "nvfp4"}});
    replace_in(p + "/hf_quant_config.json", "\"NVFP4\"", "\"FP8\"");
    test::expect_error([&] { load_drafter(p); }, {"hf_quant_config.json", "quant_algo FP8", "NVFP4 only"});
  }
  {
    const std::string p = synth(dir, "group", {{"quant", "nvfp4"}});
    replace_in(p + "/hf_quant_config.json", "\"group_size\": 16", "\"group_size\": 32");
    test::expect_error([&] { load_drafter(p); }, {"hf_quant_config.json", "group_size is 32"});
  }
  {
    const std::string p = synth(dir, "noconfig", {{"quant", "nvfp4"}});
    fs::remove(p + "/hf_quant_config.json");
    replace_in(p + "/config.json", "\"quant_method\": \"modelopt\"", "\"quant_method\": \"gptq\"");
    test::expect_error([&] { load_drafter(p); }, {"config.json", "quantization_config", "gptq"});
  }
  {
    const std::string p = synth(dir, "mlxmode", {{"quant", "mlx-nvfp4"}});
    replace_in(p + "/config.json", "\"mode\": \"nvfp4\"", "\"mode\": \"affine\"");
    test::expect_error([&] { load_drafter(p); }, {"scales", "mode 'affine'", "quantization"});
  }
  {
    const std::string p = synth(dir, "stray", {{"dtype", "f32"}});
    rewrite(p, [&](Out& o, std::vector<Out>& extra) {
      if (o.name == mod + ".weight") extra.push_back({mod + ".weight_scale_2", "F32", {}, std::vector<uint8_t>(4, 0)});
      return true;
    });
    test::expect_error([&] { load_drafter(p); }, {mod + ".weight_scale_2", "no quantized weight"});
  }
}

// rope_scaling yarn: reference values computed independently in Python with plain math (double) from
// HF transformers' _compute_yarn_parameters formula (transformers 5, truncate true):
//   dim 16, θ 1e4, factor 4, original 64 (beta 32/1): low 0, high 3, attention factor 1 + 0.1·ln 4;
//   dim 16, θ 1e4, factor 8, original 32, beta_fast 16, beta_slow 2, mscale 1, mscale_all_dim 0.5:
//   low 0, high 1, attention factor (1 + 0.1·ln 8)/(1 + 0.05·ln 8).
TEST(LilicorrQuant, YarnFrequenciesMatchHandComputedValues) {
  YarnParams y;
  y.factor = 4, y.original_max_position_embeddings = 64;
  RopeTable t = yarn_table(y, 16, 1e4);
  const double want1[8] = {1, 0.237170825, 0.05, 0.00790569415, 0.0025, 0.000790569415, 0.00025, 7.90569415e-05};
  ASSERT_EQ(t.inv_freq.size(), 8u);
  for (int j = 0; j < 8; ++j) EXPECT_NEAR(t.inv_freq[size_t(j)], want1[j], 1e-6 * want1[j]) << j;
  EXPECT_NEAR(t.scale, 1.138629436111989, 1e-6);
  YarnParams z;
  z.factor = 8, z.original_max_position_embeddings = 32, z.beta_fast = 16, z.beta_slow = 2, z.mscale = 1.0,
  z.mscale_all_dim = 0.5;
  t = yarn_table(z, 16, 1e4);
  const double want2[8] = {1, 0.0395284708, 0.0125, 0.00395284708, 0.00125, 0.000395284708, 0.000125, 3.95284708e-05};
  for (int j = 0; j < 8; ++j) EXPECT_NEAR(t.inv_freq[size_t(j)], want2[j], 1e-6 * want2[j]) << j;
  EXPECT_NEAR(t.scale, 1.094179988101349, 1e-6);
  z.attention_factor = 0.75;
  EXPECT_FLOAT_EQ(yarn_table(z, 16, 1e4).scale, 0.75f);

  // In a checkpoint: the config's rope_scaling gives the backbone that table.
  test::TempDir dir("lilicorr");
  const std::string p = synth(dir, "yarn", {});
  replace_in(p + "/config.json", "\"block_size\": 8,",
             "\"block_size\": 8, \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0, "
             "\"original_max_position_embeddings\": 64},");
  const auto w = load_drafter(p);
  EXPECT_EQ(w->backbone.c.rope_inv_freq, yarn_table(y, 16, 1e4).inv_freq);
  replace_in(p + "/config.json", "\"factor\": 4.0", "\"factor\": \"big\"");
  test::expect_error([&] { load_drafter(p); }, {"config.json", "rope_scaling.factor", "must be a number"});
}

// A yarn drafter on the CPU target: the device step (Backend::rope_table) equals the host reference's
// rows, and drafted greedy text equals plain.
TEST_F(LilicorrQuantOnTarget, AYarnDrafterRunsOnTheTarget) {
  test::TempDir dir("lilicorr");
  const std::string p = synth(dir, "yarn", {});
  replace_in(p + "/config.json", "\"block_size\": 8,",
             "\"block_size\": 8, \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 8.0, "
             "\"original_max_position_embeddings\": 16, \"mscale\": 1.0, \"mscale_all_dim\": 0.5},");
  const std::string plain = synth(dir, "plain", {});
  auto m = load_target();
  auto grab = std::make_shared<test::Grab>();
  Drafting d(*m, {{"grab", grab}}, test::fixed_costs());
  LiliFactory f;
  Proposal py = propose_after_prompt(*m, f, *grab, p);
  Proposal pp = propose_after_prompt(*m, f, *grab, plain);
  EXPECT_GT(max_diff(py.lili->backbone_rows(), pp.lili->backbone_rows()), 1e-3f) << "yarn changes the rows";
  // Lossless drafting with it.
  DraftOptions o = test::fixed_costs(7);
  o.settings["lilicorr"] = SpeculatorSettings("", "draft.lilicorr", {{"path", p}});
  Drafting dy(*m, {{"lilicorr", std::make_shared<LiliFactory>()}}, o);
  const auto text = test::read_ids(test::data_path("hf/latent/prompt_200.txt"));
  const std::vector<int32_t> prompt(text.begin(), text.begin() + 23);
  DraftMetrics dm;
  EXPECT_EQ(dy.generate(prompt, test::run_options(40), {}, &dm).tokens,
            generate(*m, prompt, test::run_options(40)).tokens);
  ASSERT_FALSE(dm.drafters.empty());
  EXPECT_GT(dm.drafters[0].drafted_tokens, 0) << dm.summary();
}

TEST_F(LilicorrQuantOnTarget, AnOwnEmbeddingTableEmbedsTheBlock) {
  test::TempDir dir("lilicorr");
  const std::string own = synth(dir, "own", {{"embed", "true"}});
  const std::string none = synth(dir, "none", {});
  const auto w = load_drafter(own);
  ASSERT_FALSE(w->embed.empty());
  EXPECT_EQ(w->embed.out, 256);
  auto m = load_target();
  auto grab = std::make_shared<test::Grab>();
  Drafting d(*m, {{"grab", grab}}, test::fixed_costs());
  LiliFactory f;
  Proposal po = propose_after_prompt(*m, f, *grab, own);
  Proposal pn = propose_after_prompt(*m, f, *grab, none);  // the same weights (seed), the target's table
  EXPECT_GT(max_diff(po.lili->backbone_rows(), pn.lili->backbone_rows()), 1e-3f) << "the own table was used";
  // A table of another vocabulary is an error naming both shapes.
  ModelDesc other = fixture_shape();
  other.vocab = 512;
  const std::string bad = synth(dir, "bad", {{"embed", "true"}}, other);
  replace_in(bad + "/config.json", "\"vocab_size\": 512", "\"vocab_size\": 256");
  replace_in(bad + "/config.json", "\"mask_token_id\": 511", "\"mask_token_id\": 255");
  test::expect_error([&] { load_drafter(bad); }, {"vocab_size", "embed_tokens.weight", "512"});
  replace_in(bad + "/config.json", "\"vocab_size\": 256", "\"vocab_size\": 512");
  SpeculatorSettings s("", "draft.lilicorr", {{"path", bad}});
  test::expect_error([&] { f.create(grab->ctx, s); }, {"embed_tokens.weight", "[512, 64]", "[256, 64]"});
}

// Drafted greedy text equals plain greedy text with an NVFP4 drafter (ModelOpt and MLX layouts, with an
// own table), and drafts were proposed and verified.
TEST_F(LilicorrQuantOnTarget, DraftedGreedyEqualsPlainWithAnNvfp4Drafter) {
  auto m = load_target();
  test::TempDir dir("lilicorr");
  const auto text = test::read_ids(test::data_path("hf/latent/prompt_200.txt"));
  for (const auto& set : std::vector<std::map<std::string, std::string>>{
           {{"quant", "nvfp4"}}, {{"quant", "mlx-nvfp4"}, {"embed", "true"}}, {{"quant", "nvfp4"}, {"head", "false"}}}) {
    const std::string path = synth(dir, "d" + std::to_string(set.size()) + set.begin()->second, set);
    DraftOptions o = test::fixed_costs(7);
    o.settings["lilicorr"] = SpeculatorSettings("", "draft.lilicorr", {{"path", path}});
    Drafting d(*m, {{"lilicorr", std::make_shared<LiliFactory>()}}, o);
    for (size_t n : {5, 23}) {
      const std::vector<int32_t> p(text.begin(), text.begin() + long(n));
      const auto plain = generate(*m, p, test::run_options(40)).tokens;
      DraftMetrics dm;
      EXPECT_EQ(d.generate(p, test::run_options(40), {}, &dm).tokens, plain) << path << ", prompt " << n;
      ASSERT_FALSE(dm.drafters.empty());
      EXPECT_GT(dm.drafters[0].proposals, 0) << dm.summary();
      EXPECT_GT(dm.drafters[0].drafted_tokens, 0) << dm.summary();
    }
  }
}

}  // namespace
