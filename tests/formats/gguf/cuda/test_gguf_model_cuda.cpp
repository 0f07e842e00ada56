// A tiny quantized Nemotron-H MoE model in GGUF (written with formats/gguf/gguf_writer.h) on device
// "cuda" against "cpu": the top-1 token at every position of a 40-token prefill and of 8 decode steps
// agrees, and on the GPU a verify pass of k+1 tokens is bit-identical to one-at-a-time decoding and
// the one-copy NVFP4 / Q8_0 matrices give the logits of the file-block ones (TANDEM_GGUF_ONE_COPY=0). The
// layers use the types of NVIDIA's 2-bit Bolt file (IQ2_XXS experts, NVFP4 Mamba projections with
// `.scale`, Q8_0 attention, embedding and head) and, elsewhere, most other block types.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

#include "cuda_probe.h"
#include "formats/gguf/gguf_writer.h"
#include "gguf_cuda_test_util.h"
#include "gguf_test_util.h"
#include "tandem/cuda/util.h"
#include "tandem/model.h"
#include "tandem/registry.h"

namespace tandem::gguf::test {
namespace {

// Shapes: every row length a whole number of 256-element blocks.
constexpr int H = 256, V = 384, NH = 8, P = 32, G = 2, N = 16, K = 4, DIN = NH * P;
constexpr int CONV = DIN + 2 * G * N, IN_PROJ = DIN + CONV + NH;
constexpr int NQ = 4, NKV = 2, HD = 64, E = 8, TOPK = 3, W = 256, SH = 256, MLP = 512;
constexpr const char* kPattern = "MEM*E-";

int type_id(const std::string& name) { return ggml_type_info(name)->id; }

// Random valid blocks whose values have about the given rms (the fp16 scales set from a first
// draw's measured rms); NVFP4 takes its magnitude from the `.scale` sidecar instead, returned in
// *sidecar.
WriteTensor quant(const std::string& name, const std::string& type, std::vector<int64_t> ne, uint64_t seed,
                  float rms, float* sidecar = nullptr) {
  const QuantType& t = *find_type(type);
  int64_t rows = 1;
  for (size_t i = 1; i < ne.size(); ++i) rows *= ne[i];
  auto measure = [&](const std::vector<uint8_t>& b) {
    std::vector<float> v(size_t(rows * ne[0]));
    t.dequantize(b.data(), v.data(), int64_t(v.size()));
    double s = 0;
    for (float f : v) s += double(f) * f;
    return float(std::sqrt(s / double(v.size())));
  };
  std::vector<uint8_t> bytes = random_weight(type, rows, ne[0], seed, 1.0f);
  const float got = measure(bytes);
  if (type == "NVFP4") {
    *sidecar = rms / got;
  } else {
    bytes = random_weight(type, rows, ne[0], seed, rms / got);
  }
  return WriteTensor{name, type_id(type), ne, bytes};
}

void write_model(const std::string& path) {
  const std::string a = "nemotron_h_moe.";
  Metadata md;
  md.set("general.architecture", Value::str("nemotron_h_moe"));
  md.set("general.name", Value::str("tiny-quantized"));
  md.set(a + "block_count", Value::u32(6));
  md.set(a + "context_length", Value::u32(4096));
  md.set(a + "embedding_length", Value::u32(H));
  std::vector<int32_t> ff, kv;
  for (int i = 0; i < 6; ++i) {
    const char c = kPattern[i];
    ff.push_back(c == 'E' ? W : c == '-' ? MLP : 0);
    kv.push_back(c == '*' ? NKV : 0);
  }
  md.set(a + "feed_forward_length", Value::i32s(ff));
  md.set(a + "attention.head_count", Value::u32(NQ));
  md.set(a + "attention.head_count_kv", Value::i32s(kv));
  md.set(a + "attention.key_length", Value::u32(HD));
  md.set(a + "attention.value_length", Value::u32(HD));
  md.set(a + "attention.layer_norm_rms_epsilon", Value::f32(1e-5f));
  md.set(a + "attention.layer_norm_epsilon", Value::f32(1e-5f));
  md.set(a + "ssm.conv_kernel", Value::u32(K));
  md.set(a + "ssm.inner_size", Value::u32(DIN));
  md.set(a + "ssm.state_size", Value::u32(N));
  md.set(a + "ssm.time_step_rank", Value::u32(NH));
  md.set(a + "ssm.group_count", Value::u32(G));
  md.set(a + "expert_count", Value::u32(E));
  md.set(a + "expert_used_count", Value::u32(TOPK));
  md.set(a + "expert_feed_forward_length", Value::u32(W));
  md.set(a + "expert_shared_feed_forward_length", Value::u32(SH));
  md.set(a + "expert_shared_count", Value::u32(1));
  md.set(a + "expert_weights_scale", Value::f32(2.5f));
  md.set(a + "expert_weights_norm", Value::boolean(true));
  md.set(a + "expert_group_count", Value::u32(1));
  md.set(a + "expert_group_used_count", Value::u32(1));

  std::vector<WriteTensor> ts;
  uint64_t seed = 100;
  auto f32 = [&](const std::string& name, std::vector<int64_t> ne, float lo, float hi) {
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    ts.push_back(make_f32(name, ne, tandem::test::random_vec(size_t(n), seed++, lo, hi)));
  };
  // A matrix of `type` with ne {in, out[, E]}, values of rms 1/√in; NVFP4 gets its `.scale`.
  auto mat = [&](const std::string& base, const std::string& type, std::vector<int64_t> ne) {
    float sidecar = 1.0f;
    ts.push_back(quant(base + ".weight", type, ne, seed++, 1.0f / std::sqrt(float(ne[0])), &sidecar));
    if (type == "NVFP4") {
      if (ne.size() == 3) {  // one per expert, around the measured value
        std::vector<float> s;
        for (int64_t e = 0; e < ne[2]; ++e) s.push_back(sidecar * (0.75f + 0.125f * float(e % 5)));
        ts.push_back(make_f32(base + ".scale", {ne[2]}, s));
      } else {
        ts.push_back(make_f32(base + ".scale", {1}, {sidecar}));
      }
    }
  };
  ts.push_back(quant("token_embd.weight", "Q8_0", {H, V}, seed++, 1.0f));
  f32("output_norm.weight", {H}, 0.9f, 1.1f);
  mat("output", "Q8_0", {H, V});
  for (int i = 0; i < 6; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    f32(b + "attn_norm.weight", {H}, 0.9f, 1.1f);
    switch (kPattern[i]) {
      case 'M': {
        const bool bolt = i == 0;
        mat(b + "ssm_in", bolt ? "NVFP4" : "IQ4_XS", {H, IN_PROJ});
        f32(b + "ssm_conv1d.weight", {K, CONV}, -0.5f, 0.5f);
        f32(b + "ssm_conv1d.bias", {CONV}, -0.1f, 0.1f);
        f32(b + "ssm_dt.bias", {NH}, -1.0f, 0.0f);
        f32(b + "ssm_a", {1, NH}, -2.0f, -0.5f);
        f32(b + "ssm_d", {1, NH}, 0.5f, 1.5f);
        f32(b + "ssm_norm.weight", {DIN / G, G}, 0.9f, 1.1f);
        mat(b + "ssm_out", bolt ? "NVFP4" : "Q5_K", {DIN, H});
        break;
      }
      case '*':
        mat(b + "attn_q", "Q8_0", {H, NQ * HD});
        mat(b + "attn_k", "IQ4_NL", {H, NKV * HD});
        mat(b + "attn_v", "Q8_0", {H, NKV * HD});
        mat(b + "attn_output", "Q8_0", {NQ * HD, H});
        break;
      case 'E': {
        const bool bolt = i == 1;
        f32(b + "ffn_gate_inp.weight", {H, E}, -0.1f, 0.1f);
        f32(b + "exp_probs_b.bias", {E}, -0.05f, 0.05f);
        mat(b + "ffn_up_exps", bolt ? "IQ2_XXS" : "NVFP4", {H, W, E});
        mat(b + "ffn_down_exps", bolt ? "IQ2_XXS" : "Q8_0", {W, H, E});
        mat(b + "ffn_up_shexp", bolt ? "IQ2_XXS" : "Q6_K", {H, SH});
        mat(b + "ffn_down_shexp", bolt ? "IQ2_XXS" : "IQ3_S", {SH, H});
        break;
      }
      default:
        mat(b + "ffn_up", "Q4_K", {H, MLP});
        mat(b + "ffn_down", "IQ2_XS", {MLP, H});
    }
  }
  write_gguf(path, md, ts);
}

PluginRegistry& registry() {
  static PluginRegistry* r = [] {
    auto* reg = new PluginRegistry();
    reg->load_directory(tandem::test::plugin_dir());
    return reg;
  }();
  return *r;
}

// The model file (written once per process), a fresh load of it, and a model per device.
const std::string& model_path() {
  static TempDir dir;
  static const std::string path = [] {
    const std::string p = dir.file("tiny-quantized.gguf");
    write_model(p);
    return p;
  }();
  return path;
}
std::unique_ptr<Model> load_model(const std::string& device) {
  LoadOptions o;
  o.path = model_path();
  o.device = device;
  return Model::load(o, registry());
}
Model& model(const std::string& device) {
  static std::map<std::string, std::unique_ptr<Model>> cache;
  auto& m = cache[device];
  if (!m) m = load_model(device);
  return *m;
}

std::vector<int32_t> tokens(int n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(int32_t(3 + g() % (V - 3)));
  return t;
}

int argmax(const float* v, int n) {
  int b = 0;
  for (int i = 1; i < n; ++i)
    if (v[i] > v[b]) b = i;
  return b;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The file itself is valid without a GPU: it loads and decodes on the CPU.
TEST(GgufCudaModel, TheTinyQuantizedModelRunsOnTheCpu) {
  Model& cpu = model("cpu");
  EXPECT_EQ(cpu.format_name(), "gguf");
  auto seq = cpu.new_sequence(64);
  std::vector<float> l;
  cpu.forward(*seq, tokens(5, 3), ForwardMode::Prefill, l, true);
  ASSERT_EQ(l.size(), size_t(5 * V));
  for (float v : l) ASSERT_TRUE(std::isfinite(v));
}

TEST(GgufCudaModel, TopTokenMatchesCpuAtEveryPosition) {
  TANDEM_SKIP_WITHOUT_CUDA();
  Model& gpu = model("cuda");
  Model& cpu = model("cpu");
  ASSERT_EQ(gpu.backend().device(), "cuda");
  ASSERT_EQ(gpu.format_name(), "gguf");
  auto prompt = tokens(40, 1);
  std::vector<float> g, c;
  auto gs = gpu.new_sequence(128), cs = cpu.new_sequence(128);
  gpu.forward(*gs, prompt, ForwardMode::Prefill, g, true);
  cpu.forward(*cs, prompt, ForwardMode::Prefill, c, true);
  ASSERT_EQ(g.size(), c.size());
  double maxdiff = 0, maxref = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    maxref = std::max(maxref, double(std::fabs(c[i])));
    maxdiff = std::isnan(g[i]) ? INFINITY : std::max(maxdiff, double(std::fabs(g[i] - c[i])));
  }
  for (size_t t = 0; t < prompt.size(); ++t)
    EXPECT_EQ(argmax(&g[t * V], V), argmax(&c[t * V], V)) << "prefill position " << t;
  EXPECT_LE(maxdiff, 1e-3 * maxref);
  gpu.commit(*gs, int(prompt.size()));
  cpu.commit(*cs, int(prompt.size()));
  // Greedy decoding from the CPU's choices, step by step on both devices.
  int32_t next = argmax(&c[(prompt.size() - 1) * V], V);
  for (int step = 0; step < 8; ++step) {
    gpu.forward(*gs, {next}, ForwardMode::Verify, g, false);
    cpu.forward(*cs, {next}, ForwardMode::Verify, c, false);
    gpu.commit(*gs, 1);
    cpu.commit(*cs, 1);
    EXPECT_EQ(argmax(g.data(), V), argmax(c.data(), V)) << "decode step " << step;
    for (size_t i = 0; i < c.size(); ++i) maxdiff = std::max(maxdiff, double(std::fabs(g[i] - c[i])));
    next = argmax(c.data(), V);
  }
  std::printf("[measure] quantized GGUF model gpu vs cpu: max |Δ logit| %.3g (%.2g of max |logit| %.3g)\n", maxdiff,
              maxdiff / maxref, maxref);
}

TEST(GgufCudaModel, VerifyPassEqualsOneAtATimeOnTheGpu) {
  TANDEM_SKIP_WITHOUT_CUDA();
  Model& m = model("cuda");
  const auto all = tokens(21 + 17, 2);
  const std::vector<int32_t> prompt(all.begin(), all.begin() + 21), cont(all.begin() + 21, all.end());
  auto prefilled = [&] {
    auto seq = m.new_sequence(128);
    std::vector<float> l;
    m.forward(*seq, prompt, ForwardMode::Prefill, l, false);  // 21 rows: the prefill slabs
    m.commit(*seq, int(prompt.size()));
    return seq;
  };
  auto plain = prefilled();
  std::vector<float> l;
  std::vector<std::vector<float>> step;
  for (int32_t t : cont) {
    m.forward(*plain, {t}, ForwardMode::Verify, l, false);
    m.commit(*plain, 1);
    step.push_back(l);
  }
  for (int k = 1; k <= 15; ++k) {
    auto seq = prefilled();
    std::vector<int32_t> block(cont.begin(), cont.begin() + k + 1);
    std::vector<float> rows;
    m.forward(*seq, block, ForwardMode::Verify, rows, true);
    for (int i = 0; i <= k; ++i) {
      std::vector<float> row(rows.begin() + long(i) * V, rows.begin() + long(i + 1) * V);
      EXPECT_TRUE(same_bits(row, step[size_t(i)])) << "k " << k << " position " << i;
    }
    const int n = (k * 7) % (k + 2);
    m.commit(*seq, n);
    m.forward(*seq, {cont[size_t(n)]}, ForwardMode::Verify, l, false);
    EXPECT_TRUE(same_bits(l, step[size_t(n)])) << "after commit(" << n << ") of " << k + 1;
  }
}

// One device copy of the dense NVFP4 and Q8_0 matrices (the Mamba projections, attention, the
// embedding's get_rows and the head) against the file's blocks beside the copy: a 40-token prefill
// (the GEMM) and 6 decode steps (the tc GEMV) give the same logits bit for bit.
TEST(GgufCudaModel, OneCopyGivesTheLogitsOfTheFileBlocks) {
  TANDEM_SKIP_WITHOUT_CUDA();
  std::unique_ptr<Model> blocks;
  {
    ScopedEnv off("TANDEM_GGUF_ONE_COPY", "0");
    blocks = load_model("cuda");
  }
  auto one = load_model("cuda");
  auto prompt = tokens(40, 5);
  auto sb = blocks->new_sequence(128), so = one->new_sequence(128);
  std::vector<float> lb, lo;
  blocks->forward(*sb, prompt, ForwardMode::Prefill, lb, true);
  one->forward(*so, prompt, ForwardMode::Prefill, lo, true);
  ASSERT_EQ(lb.size(), size_t(prompt.size()) * V);
  EXPECT_TRUE(same_bits(lo, lb)) << "prefill";
  for (float v : lo) ASSERT_TRUE(std::isfinite(v));
  blocks->commit(*sb, int(prompt.size()));
  one->commit(*so, int(prompt.size()));
  int32_t next = argmax(&lb[(prompt.size() - 1) * V], V);
  for (int step = 0; step < 6; ++step) {
    blocks->forward(*sb, {next}, ForwardMode::Verify, lb, false);
    one->forward(*so, {next}, ForwardMode::Verify, lo, false);
    blocks->commit(*sb, 1);
    one->commit(*so, 1);
    EXPECT_TRUE(same_bits(lo, lb)) << "decode step " << step;
    next = argmax(lb.data(), V);
  }
}

}  // namespace
}  // namespace tandem::gguf::test
