// Tests formats/gguf/gguf_format.* and plugin.cpp: probing paths and groups, GgufTensor's matmul /
// get_rows / dequantize against float64 references, sidecar scales, errors at load, and the whole
// model end to end: the HF fixture converted to GGUF (F32, F16, BF16) must give transformers' logits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "formats/gguf/gguf_checkpoint.h"
#include "formats/gguf/gguf_format.h"
#include "gguf_test_util.h"
#include "tandem/model.h"
#include "tandem/npy.h"
#include "tandem/registry.h"
#include "tandem/writer.h"

namespace tandem::gguf {
namespace {

using test::DeviceOnlyBackend;
using test::expect_error;
using test::set_placeholder_vocabulary;
using test::TinyModel;

TensorGroup group_of(const Checkpoint& c, const std::string& prefix) {
  TensorGroup g;
  g.prefix = prefix;
  for (const RawTensor& t : c.tensors())
    if (t.name == prefix || t.name.rfind(prefix + ".", 0) == 0) g.members.push_back(&t);
  return g;
}

// Independent decoding of the dense element types (spec/formats.md § 3.1).
double ref_element(const std::string& dtype, const uint8_t* p) {
  if (dtype == "F32") {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  const unsigned h = unsigned(p[0]) | unsigned(p[1]) << 8;
  if (dtype == "BF16") {
    uint32_t u = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  const int exp = (h >> 10) & 31, man = h & 1023;  // F16, finite values only
  const double mag = exp == 0 ? std::ldexp(man, -24) : std::ldexp(1024 + man, exp - 25);
  return h & 0x8000 ? -mag : mag;
}

std::vector<double> ref_values(const RawTensor& t) {
  const size_t size = t.dtype == "F32" ? 4 : 2;
  std::vector<double> v(t.nbytes / size);
  for (size_t i = 0; i < v.size(); ++i) v[i] = ref_element(t.dtype, t.data + i * size);
  return v;
}

TEST(GgufFormat, ProbePathAndOpen) {
  test::TempDir dir;
  TinyModel m;
  m.build();
  write_gguf(dir.file("model.weights"), m.metadata, m.tensors);
  test::write_bytes(dir.file("x.safetensors"), {8, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ', ' ', ' ', ' ', ' '});
  GgufFormat fmt;
  EXPECT_EQ(fmt.probe_path(dir.file("model.weights")), 100);
  EXPECT_EQ(fmt.probe_path(dir.file("x.safetensors")), 0);
  EXPECT_EQ(fmt.probe_path(dir.file("later.gguf")), 100);
  EXPECT_EQ(fmt.probe_path(dir.path()), 0);
  auto c = fmt.open(dir.file("model.weights"));
  EXPECT_EQ(parse_model_config(c->config_json(), "synth").pattern(), "MEM*E-");
}

TEST(GgufFormat, ProbeGroup) {
  TinyModel m;
  m.build();
  m.tensors.push_back(WriteTensor{"blk.0.ssm_in.input_scale", 0, {1}, std::vector<uint8_t>(4)});
  m.tensors.push_back(WriteTensor{"rope_freqs", 2, {32}, std::vector<uint8_t>(18)});  // Q4_0: no kernel
  GgufCheckpoint c(GgufFile::from_bytes(m.bytes(), "p.gguf"));
  GgufFormat fmt;
  EXPECT_EQ(fmt.probe_group(group_of(c, "backbone.layers.0.mixer.in_proj")), 20);
  EXPECT_EQ(fmt.probe_group(group_of(c, "backbone.layers.0.mixer.A")), 20);
  EXPECT_EQ(fmt.probe_group(group_of(c, "rope_freqs")), 0);
  EXPECT_EQ(fmt.probe_group(group_of(c, "absent")), 0);

  // Dense tensors of another container stay with that container's format; ggml types never occur there.
  std::vector<float> heap(8, 1.0f);
  RawTensor foreign{"w.weight", "F32", {2, 4}, reinterpret_cast<const uint8_t*>(heap.data()), 32, "x.safetensors"};
  TensorGroup g{"w", {&foreign}};
  EXPECT_EQ(fmt.probe_group(g), 5);
  foreign.dtype = "U8";
  EXPECT_EQ(fmt.probe_group(g), 0);
}

class GgufDenseMatmul : public ::testing::TestWithParam<int> {};

TEST_P(GgufDenseMatmul, MatchesFloat64AndIsBatchInvariant) {
  const int type = GetParam();
  const int64_t out = 37, in = 70, n = 9;
  std::vector<float> w = tandem::test::random_vec(size_t(out * in), 11, -1, 1);
  WriteTensor wt = type == 0 ? make_f32("output.weight", {in, out}, w)
                   : type == 1 ? make_f16("output.weight", {in, out}, w)
                               : make_bf16("output.weight", {in, out}, w);
  TinyModel m;
  m.build();
  for (auto& t : m.tensors)
    if (t.name == "output.weight") t = wt;
  GgufCheckpoint c(GgufFile::from_bytes(m.bytes(), "mm.gguf"));
  DeviceOnlyBackend cpu("cpu");
  GgufFormat fmt;
  const TensorGroup g = group_of(c, "lm_head");
  auto q = fmt.load(g, cpu);
  ASSERT_EQ(q->shape(), (std::vector<int64_t>{out, in}));
  EXPECT_EQ(q->type_name(), std::string(ggml_type_info(type)->name));
  EXPECT_EQ(q->bytes(), wt.data.size());
  const std::vector<double> ref = ref_values(*g.member("weight"));

  std::vector<float> x = tandem::test::random_vec(size_t(n * in), 12, -1, 1), y(size_t(n * out), NAN);
  q->matmul(Tensor::f32(x.data(), n, in), Tensor::f32(y.data(), n, out));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t r = 0; r < out; ++r) {
      double s = 0, mag = 0;
      for (int64_t k = 0; k < in; ++k) {
        s += ref[size_t(r * in + k)] * x[size_t(i * in + k)];
        mag += std::fabs(ref[size_t(r * in + k)] * x[size_t(i * in + k)]);
      }
      ASSERT_NEAR(y[size_t(i * out + r)], s, 2e-6 * mag + 1e-30) << i << "," << r;
    }
  for (int64_t i = 0; i < n; ++i) {  // one row at a time: the same bits
    std::vector<float> yi(size_t(out), NAN);
    q->matmul(Tensor::f32(x.data() + i * in, 1, in), Tensor::f32(yi.data(), 1, out));
    for (int64_t r = 0; r < out; ++r) ASSERT_EQ(yi[size_t(r)], y[size_t(i * out + r)]);
  }

  std::vector<float> deq(size_t(out * in), NAN);
  q->dequantize(deq.data());
  for (size_t e = 0; e < deq.size(); ++e) ASSERT_EQ(double(deq[e]), ref[e]);
  const int32_t ids[] = {36, 0, 5};
  std::vector<float> rows(size_t(3 * in), NAN);
  q->get_rows(ids, 3, Tensor::f32(rows.data(), 3, in));
  for (int i = 0; i < 3; ++i)
    for (int64_t k = 0; k < in; ++k) ASSERT_EQ(double(rows[size_t(i * in + k)]), ref[size_t(ids[i] * in + k)]);
  const int32_t bad[] = {37};
  expect_error([&] { q->get_rows(bad, 1, Tensor::f32(rows.data(), 1, in)); }, {"lm_head.weight", "id 37"});
}

INSTANTIATE_TEST_SUITE_P(Types, GgufDenseMatmul, ::testing::Values(0, 1, 30));

TEST(GgufFormat, ExpertViewsAndScalesMultiply) {
  using T = TinyModel;
  TinyModel m;
  m.build();
  m.tensors.push_back(make_f32("blk.1.ffn_up_exps.scale", {T::E}, {0.5f, -2.0f, 4.0f, 1.0f}));
  GgufCheckpoint c(GgufFile::from_bytes(m.bytes(), "scale.gguf"));
  DeviceOnlyBackend cpu("cpu");
  GgufFormat fmt;
  const WriteTensor& up = m.tensor("blk.1.ffn_up_exps.weight");
  std::vector<float> x = tandem::test::random_vec(size_t(2 * T::H), 3, -1, 1);
  for (int j = 0; j < T::E; ++j) {
    const float scale = j == 0 ? 0.5f : j == 1 ? -2.0f : j == 2 ? 4.0f : 1.0f;
    auto q = fmt.load(group_of(c, "backbone.layers.1.mixer.experts." + std::to_string(j) + ".up_proj"), cpu);
    ASSERT_EQ(q->shape(), (std::vector<int64_t>{T::W, T::H}));
    std::vector<float> y(size_t(2 * T::W)), deq(size_t(T::W * T::H));
    q->matmul(Tensor::f32(x.data(), 2, T::H), Tensor::f32(y.data(), 2, T::W));
    q->dequantize(deq.data());
    for (int i = 0; i < 2; ++i)
      for (int o = 0; o < T::W; ++o) {
        double s = 0;
        for (int k = 0; k < T::H; ++k) {
          float w;
          std::memcpy(&w, up.data.data() + 4 * size_t(k + T::H * (o + T::W * j)), 4);
          s += double(w) * x[size_t(i * T::H + k)];
          if (i == 0) ASSERT_EQ(deq[size_t(o * T::H + k)], w * scale);
        }
        ASSERT_NEAR(y[size_t(i * T::W + o)], s * scale, 1e-5);
      }
  }
}

// TANDEM_GGUF_ACTIVATIONS=llama (read when a tensor loads): the matmul rounds each activation row to
// the type's llama.cpp format and multiplies with dot_act, row by row (batch invariance); unset or
// "f32" keeps fp32 activations; another value is a load error naming the variable.
TEST(GgufFormat, LlamaActivationsMode) {
  const int64_t out = 37, in = 64, n = 9;
  std::vector<uint8_t> q8(size_t(out * in / 32 * 34));
  for (size_t b = 0; b < q8.size(); ++b) q8[b] = uint8_t(b * 2654435761u >> 13);
  for (size_t b = 0; b < q8.size(); b += 34) q8[b] = 0x00, q8[b + 1] = uint8_t(0x20 + b % 7);  // d in [2^-7, 2^-5)
  TinyModel m;
  m.build();
  for (auto& t : m.tensors)
    if (t.name == "output.weight") t = WriteTensor{"output.weight", 8, {in, out}, q8};
  GgufCheckpoint c(GgufFile::from_bytes(m.bytes(), "act.gguf"));
  DeviceOnlyBackend cpu("cpu");
  GgufFormat fmt;
  const QuantType& t = *find_type("Q8_0");
  std::vector<float> x = tandem::test::random_vec(size_t(n * in), 31, -2, 2);
  auto run = [&](const char* mode, int64_t rows, float* xs) {
    if (mode) setenv("TANDEM_GGUF_ACTIVATIONS", mode, 1);
    auto q = fmt.load(group_of(c, "lm_head"), cpu);
    unsetenv("TANDEM_GGUF_ACTIVATIONS");
    std::vector<float> y(size_t(rows * out), NAN);
    q->matmul(Tensor::f32(xs, rows, in), Tensor::f32(y.data(), rows, out));
    return y;
  };
  const std::vector<float> y_llama = run("llama", n, x.data()), y_default = run(nullptr, n, x.data());
  EXPECT_EQ(run("f32", n, x.data()), y_default);
  std::vector<uint8_t> xa(size_t(act_row_bytes(t.act, in)));
  bool differs = false;
  for (int64_t i = 0; i < n; ++i) {
    quantize_activations(t.act, x.data() + i * in, xa.data(), in);
    const std::vector<float> yi = run("llama", 1, x.data() + i * in);
    for (int64_t r = 0; r < out; ++r) {
      const uint8_t* w = q8.data() + r * (in / 32 * 34);
      ASSERT_EQ(y_llama[size_t(i * out + r)], t.dot_act(w, xa.data(), in)) << i << "," << r;
      ASSERT_EQ(yi[size_t(r)], y_llama[size_t(i * out + r)]) << i << "," << r;
      ASSERT_EQ(y_default[size_t(i * out + r)], t.dot(w, x.data() + i * in, in)) << i << "," << r;
      differs |= y_llama[size_t(i * out + r)] != y_default[size_t(i * out + r)];
    }
  }
  EXPECT_TRUE(differs);
  setenv("TANDEM_GGUF_ACTIVATIONS", "q8", 1);
  expect_error([&] { fmt.load(group_of(c, "lm_head"), cpu); }, {"TANDEM_GGUF_ACTIVATIONS", "'q8'", "'llama'"});
  unsetenv("TANDEM_GGUF_ACTIVATIONS");
}

TEST(GgufFormat, LoadErrors) {
  TinyModel m;
  m.build();
  m.tensors.push_back(WriteTensor{"blk.0.ssm_in.scale", 1, {1}, std::vector<uint8_t>(2)});  // F16: not a scale
  m.tensors.push_back(WriteTensor{"blk.5.ffn_up.weight", 2, {32, 20}, std::vector<uint8_t>(18 * 20)});
  for (auto it = m.tensors.begin(); it != m.tensors.end(); ++it)
    if (it->name == "blk.5.ffn_up.weight" && it->type == 0) {
      m.tensors.erase(it);
      break;
    }
  GgufCheckpoint c(GgufFile::from_bytes(m.bytes(), "err.gguf"));
  GgufFormat fmt;
  DeviceOnlyBackend cpu("cpu"), cuda("cuda");
  expect_error([&] { fmt.load(group_of(c, "lm_head"), cuda); }, {"device 'cuda'", "lm_head"});
  expect_error([&] { fmt.load(group_of(c, "backbone.layers.5.mixer.up_proj"), cpu); },
               {"backbone.layers.5.mixer.up_proj.weight", "Q4_0"});
  expect_error([&] { fmt.load(group_of(c, "backbone.layers.0.mixer.in_proj"), cpu); },
               {"backbone.layers.0.mixer.in_proj.scale", "one F32 scale", "F16"});
  // The unsupported tensor is still listed for inspect.
  EXPECT_NE(c.dump().find("blk.5.ffn_up.weight  Q4_0  [32, 20]"), std::string::npos);
}

// ---- end to end: the HF fixture as GGUF ----

// Writes the fixture's weights as a GGUF file the way llama.cpp's converter lays them out
// (spec/nemotron_h.md § 10.3): ggml names, ne reversed, A = −exp(A_log), conv {K, C}, the gated-norm
// weight {d_in/G, G}, experts stacked {in, out, E}. Matrices use `matrix_type`; vectors stay F32.
// `mtp` appends a junk MTP block that the loader must ignore.
void write_fixture_as_gguf(const std::string& fixture, const std::string& out, int matrix_type, bool mtp) {
  std::ifstream cf(fixture + "/config.json");
  const std::string config((std::istreambuf_iterator<char>(cf)), {});
  const ModelDesc d = parse_model_config(config, "fixture");
  auto hf = test::host_plugins().format("safetensors")->open(fixture);
  auto values = [&](const std::string& name) {
    const RawTensor* t = hf->find(name);
    if (!t) throw std::runtime_error("fixture lacks " + name);
    std::vector<double> v = ref_values(*t);
    return std::vector<float>(v.begin(), v.end());
  };
  std::vector<WriteTensor> ts;
  auto matrix = [&](const std::string& hf_name, const std::string& ggml, std::vector<int64_t> ne, std::vector<float> v) {
    ts.push_back(matrix_type == 0 ? make_f32(ggml, ne, v) : matrix_type == 1 ? make_f16(ggml, ne, v) : make_bf16(ggml, ne, v));
    (void)hf_name;
  };
  auto linear = [&](const std::string& hf_name, const std::string& ggml) {
    const RawTensor* t = hf->find(hf_name);
    ASSERT_NE(t, nullptr) << hf_name;
    matrix(hf_name, ggml, {t->shape[1], t->shape[0]}, values(hf_name));
  };
  auto vec = [&](const std::string& hf_name, const std::string& ggml, std::vector<int64_t> ne) {
    ts.push_back(make_f32(ggml, ne, values(hf_name)));
  };

  const int H = d.hidden, n = int(d.layers.size()), nb = n + (mtp ? 1 : 0);
  linear("backbone.embeddings.weight", "token_embd.weight");
  vec("backbone.norm_f.weight", "output_norm.weight", {H});
  linear("lm_head.weight", "output.weight");
  std::vector<int32_t> ff, kv;
  const LayerDesc* attn = nullptr;
  const LayerDesc* moe = nullptr;
  const LayerDesc* mamba = nullptr;
  for (int i = 0; i < n; ++i) {
    const LayerDesc& l = d.layers[size_t(i)];
    const std::string p = "backbone.layers." + std::to_string(i) + ".", b = "blk." + std::to_string(i) + ".";
    vec(p + "norm.weight", b + "attn_norm.weight", {H});
    ff.push_back(l.kind == LayerKind::MoE ? l.moe.width : l.kind == LayerKind::MLP ? l.mlp.width : 0);
    kv.push_back(l.kind == LayerKind::Attention ? l.attn.n_kv_heads : 0);
    const std::string x = p + "mixer.";
    if (l.kind == LayerKind::Mamba) {
      mamba = &l;
      const MambaDesc& md = l.mamba;
      linear(x + "in_proj.weight", b + "ssm_in.weight");
      vec(x + "conv1d.weight", b + "ssm_conv1d.weight", {md.conv_kernel, md.conv_dim()});
      vec(x + "conv1d.bias", b + "ssm_conv1d.bias", {md.conv_dim()});
      vec(x + "dt_bias", b + "ssm_dt.bias", {md.n_heads});
      std::vector<float> a = values(x + "A_log");
      for (float& v : a) v = -std::exp(v);
      ts.push_back(make_f32(b + "ssm_a", {1, md.n_heads}, a));
      vec(x + "D", b + "ssm_d", {1, md.n_heads});
      vec(x + "norm.weight", b + "ssm_norm.weight", {md.d_inner() / md.n_groups, md.n_groups});
      linear(x + "out_proj.weight", b + "ssm_out.weight");
    } else if (l.kind == LayerKind::Attention) {
      attn = &l;
      linear(x + "q_proj.weight", b + "attn_q.weight");
      linear(x + "k_proj.weight", b + "attn_k.weight");
      linear(x + "v_proj.weight", b + "attn_v.weight");
      linear(x + "o_proj.weight", b + "attn_output.weight");
    } else if (l.kind == LayerKind::MoE) {
      moe = &l;
      const MoEDesc& me = l.moe;
      vec(x + "gate.weight", b + "ffn_gate_inp.weight", {H, me.n_experts});  // the converter keeps routers F32
      vec(x + "gate.e_score_correction_bias", b + "exp_probs_b.bias", {me.n_experts});
      const int in = me.latent ? me.latent : H;
      if (me.latent) {
        linear(x + "fc1_latent_proj.weight", b + "ffn_latent_down.weight");
        linear(x + "fc2_latent_proj.weight", b + "ffn_latent_up.weight");
      }
      std::vector<float> up, down;
      for (int j = 0; j < me.n_experts; ++j) {
        const std::string e = x + "experts." + std::to_string(j) + ".";
        for (float v : values(e + "up_proj.weight")) up.push_back(v);
        for (float v : values(e + "down_proj.weight")) down.push_back(v);
      }
      matrix("", b + "ffn_up_exps.weight", {in, me.width, me.n_experts}, up);
      matrix("", b + "ffn_down_exps.weight", {me.width, in, me.n_experts}, down);
      linear(x + "shared_experts.up_proj.weight", b + "ffn_up_shexp.weight");
      linear(x + "shared_experts.down_proj.weight", b + "ffn_down_shexp.weight");
    } else {
      linear(x + "up_proj.weight", b + "ffn_up.weight");
      linear(x + "down_proj.weight", b + "ffn_down.weight");
    }
  }
  ASSERT_TRUE(attn && moe && mamba);
  if (mtp) {  // junk that would break the model if it were read as layer n
    const std::string b = "blk." + std::to_string(n) + ".";
    ts.push_back(make_f32(b + "attn_norm.weight", {H}, std::vector<float>(size_t(H), 1e6f)));
    ts.push_back(make_f32(b + "nextn.eh_proj.weight", {2 * H, H}, std::vector<float>(size_t(2 * H * H), 1e6f)));
    ts.push_back(make_f32(b + "ffn_gate_inp.weight", {H, 3}, std::vector<float>(size_t(3 * H), 1e6f)));
    ff.push_back(7);
    kv.push_back(0);
  }

  const std::string a = "nemotron_h_moe.";
  Metadata md;
  md.set("general.architecture", Value::str("nemotron_h_moe"));
  md.set(a + "block_count", Value::u32(uint32_t(nb)));
  if (mtp) md.set(a + "nextn_predict_layers", Value::u32(1));
  md.set(a + "context_length", Value::u32(1u << 20));
  md.set(a + "embedding_length", Value::u32(uint32_t(H)));
  md.set(a + "feed_forward_length", Value::i32s(ff));
  md.set(a + "attention.head_count", Value::u32(uint32_t(attn->attn.n_heads)));
  md.set(a + "attention.head_count_kv", Value::i32s(kv));
  md.set(a + "attention.key_length", Value::u32(uint32_t(attn->attn.head_dim)));
  md.set(a + "attention.value_length", Value::u32(uint32_t(attn->attn.head_dim)));
  md.set(a + "attention.layer_norm_rms_epsilon", Value::f32(d.eps));
  md.set(a + "attention.layer_norm_epsilon", Value::f32(d.eps));  // llama.cpp requires it too
  md.set(a + "ssm.conv_kernel", Value::u32(uint32_t(mamba->mamba.conv_kernel)));
  md.set(a + "ssm.inner_size", Value::u32(uint32_t(mamba->mamba.d_inner())));
  md.set(a + "ssm.state_size", Value::u32(uint32_t(mamba->mamba.state_size)));
  md.set(a + "ssm.time_step_rank", Value::u32(uint32_t(mamba->mamba.n_heads)));
  md.set(a + "ssm.group_count", Value::u32(uint32_t(mamba->mamba.n_groups)));
  md.set(a + "expert_count", Value::u32(uint32_t(moe->moe.n_experts)));
  md.set(a + "expert_used_count", Value::u32(uint32_t(moe->moe.top_k)));
  md.set(a + "expert_feed_forward_length", Value::u32(uint32_t(moe->moe.width)));
  md.set(a + "expert_shared_feed_forward_length", Value::u32(uint32_t(moe->moe.shared_width)));
  md.set(a + "expert_weights_scale", Value::f32(moe->moe.scaling));
  md.set(a + "expert_weights_norm", Value::boolean(moe->moe.norm_topk_prob));
  md.set(a + "expert_group_count", Value::u32(uint32_t(moe->moe.n_group)));
  md.set(a + "expert_group_used_count", Value::u32(uint32_t(moe->moe.topk_group)));
  md.set(a + "moe_latent_size", Value::u32(uint32_t(moe->moe.latent)));
  set_placeholder_vocabulary(md, d.vocab);  // so that llama.cpp can open the same file
  write_gguf(out, md, ts);
}

TEST(GgufPlugin, RegistersAFormatAndAWriter) {
  PluginRegistry& reg = test::host_plugins();
  std::vector<tandem_kind> kinds;
  for (const ProviderInfo& p : reg.providers())
    if (p.plugin == "gguf") {
      kinds.push_back(p.kind);
      EXPECT_EQ(p.name, "gguf");
      EXPECT_EQ(p.device, "");
    }
  EXPECT_EQ(kinds, (std::vector<tandem_kind>{TANDEM_KIND_FORMAT, TANDEM_KIND_WRITER}));
  EXPECT_EQ(reg.writer("gguf")->extension(), ".gguf");
  EXPECT_EQ(reg.format("gguf")->probe_path("x.gguf"), 100);
}

class GgufEndToEnd : public ::testing::TestWithParam<std::tuple<const char*, int>> {};

TEST_P(GgufEndToEnd, LogitsMatchTransformers) {
  const auto [model, matrix_type] = GetParam();
  const std::string fixture = tandem::test::data_path(std::string("hf/") + model);
  test::TempDir dir;
  const std::string path = dir.file("model.gguf");
  write_fixture_as_gguf(fixture, path, matrix_type, matrix_type == 0);
  if (HasFatalFailure()) return;

  LoadOptions o;
  o.path = path;
  auto m = Model::load(o, test::host_plugins());
  EXPECT_EQ(m->format_name(), "gguf");
  const int V = m->desc().vocab;
  auto tokens = ::tandem::test::read_ids(fixture + "/prompt_7.txt");
  NpyArray ref = read_npy(fixture + "/logits_7.npy");
  ASSERT_EQ(ref.shape, (std::vector<int64_t>{int64_t(tokens.size()), V}));
  auto seq = m->new_sequence(64);
  std::vector<float> ours;
  m->forward(*seq, tokens, ForwardMode::Prefill, ours, true);
  ASSERT_EQ(ours.size(), ref.data.size());
  double maxref = 0, maxdiff = 0;
  for (size_t i = 0; i < ours.size(); ++i) {
    maxref = std::max(maxref, double(std::fabs(ref.data[i])));
    maxdiff = std::max(maxdiff, double(std::fabs(ours[i] - ref.data[i])));
  }
  EXPECT_LE(maxdiff, 1e-3 * maxref) << model << " type " << matrix_type;
  std::printf("%s %s: max |diff| %.3g, max |logit| %.3g\n", model, ggml_type_info(matrix_type)->name, maxdiff, maxref);
  for (size_t t = 0; t < tokens.size(); ++t) {
    auto arg = [&](const float* v) { return std::max_element(v, v + V) - v; };
    EXPECT_EQ(arg(&ours[t * size_t(V)]), arg(&ref.data[t * size_t(V)])) << "position " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GgufEndToEnd,
                         ::testing::Values(std::tuple{"latent", 0}, std::tuple{"latent", 1},
                                           std::tuple{"latent", 30}, std::tuple{"nolatent", 0}),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param)) + "_" +
                                  ggml_type_info(std::get<1>(info.param))->name;
                         });

}  // namespace
}  // namespace tandem::gguf
