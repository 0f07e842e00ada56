// Synthetic LiLiCorr checkpoints (synth.h): the tensor list of the export layout, random values, the
// config.json the exporter writes.
#include "synth.h"

#include <cmath>
#include <filesystem>
#include <fstream>

#include "checkpoint.h"
#include "formats/safetensors/safetensors_file_writer.h"
#include "tandem/backend.h"
#include "tandem/error.h"

namespace tandem::lilicorr {
namespace {

enum class Fill { Norm, Weight, Bias, Embedding };
struct Spec {
  std::string name;  // export name
  std::vector<int64_t> shape;
  Fill fill;
};

std::vector<Spec> tensor_list(const SynthGeometry& g) {
  const BackboneConfig& b = g.backbone;
  const int64_t H = b.hidden, qd = int64_t(b.heads) * b.head_dim, kd = int64_t(b.kv_heads) * b.head_dim;
  std::vector<Spec> t;
  auto linear = [&](const std::string& p, int64_t out, int64_t in, bool bias) {
    t.push_back({p + ".weight", {out, in}, Fill::Weight});
    if (bias) t.push_back({p + ".bias", {out}, Fill::Bias});
  };
  linear("fc", H, H * int64_t(b.target_layers.size()), false);
  t.push_back({"hidden_norm.weight", {H}, Fill::Norm});
  t.push_back({"norm.weight", {H}, Fill::Norm});
  for (int l = 0; l < b.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    t.push_back({p + "input_layernorm.weight", {H}, Fill::Norm});
    t.push_back({p + "post_attention_layernorm.weight", {H}, Fill::Norm});
    linear(p + "self_attn.q_proj", qd, H, false);
    linear(p + "self_attn.k_proj", kd, H, false);
    linear(p + "self_attn.v_proj", kd, H, false);
    linear(p + "self_attn.o_proj", H, qd, false);
    t.push_back({p + "self_attn.q_norm.weight", {b.head_dim}, Fill::Norm});
    t.push_back({p + "self_attn.k_norm.weight", {b.head_dim}, Fill::Norm});
    linear(p + "mlp.gate_proj", b.intermediate, H, false);
    linear(p + "mlp.up_proj", b.intermediate, H, false);
    linear(p + "mlp.down_proj", H, b.intermediate, false);
  }
  if (!g.with_head) return t;
  const HeadConfig& c = g.head;
  const int64_t Hh = c.hidden, S = c.block - 1, K = c.topk, F = c.factor;
  const std::string p = "lilicorr.";
  if (Hh != H) linear(p + "token_proj", Hh, H, true);
  linear(p + "pass_hidden_proj", Hh, H, true);
  linear(p + "context_proj", Hh, H, true);
  t.push_back({p + "feature_mlp.0.weight", {5}, Fill::Norm});
  t.push_back({p + "feature_mlp.0.bias", {5}, Fill::Bias});
  linear(p + "feature_mlp.1", Hh, 5, true);
  linear(p + "feature_mlp.3", Hh, Hh, true);
  t.push_back({p + "slot_embedding", {1, 1, S, 1, Hh}, Fill::Embedding});
  t.push_back({p + "rank_embedding", {1, 1, 1, K, Hh}, Fill::Embedding});
  t.push_back({p + "relative_slot_bias", {c.heads, 2 * int64_t(c.block) - 1}, Fill::Embedding});
  t.push_back({p + "same_slot_bias", {c.heads}, Fill::Embedding});
  for (int j = 0; j < c.layers; ++j) {
    const std::string q = p + "layers." + std::to_string(j) + ".";
    t.push_back({q + "attn_norm.weight", {Hh}, Fill::Norm});
    t.push_back({q + "attn.in_proj_weight", {3 * Hh, Hh}, Fill::Weight});
    t.push_back({q + "attn.in_proj_bias", {3 * Hh}, Fill::Bias});
    linear(q + "attn.out_proj", Hh, Hh, true);
    t.push_back({q + "mlp_norm.weight", {Hh}, Fill::Norm});
    linear(q + "mlp.0", c.mlp, Hh, true);
    linear(q + "mlp.2", Hh, c.mlp, true);
  }
  t.push_back({p + "output_norm.weight", {Hh}, Fill::Norm});
  t.push_back({p + "anchor_norm.weight", {Hh}, Fill::Norm});
  linear(p + "factor_input_proj", Hh, 3 * Hh, true);
  linear(p + "out_head", F, Hh, true);
  linear(p + "in_head", F, Hh, true);
  linear(p + "anchor_out_head", F, Hh, true);
  return t;
}

std::vector<int> spread_taps(int target_layers) {
  std::vector<int> out;
  const int n = std::min(6, target_layers);
  if (target_layers >= 24) {  // Bolt's rule: round(1 + i·(L − 4)/5)
    for (int i = 0; i < 6; ++i) out.push_back(int(std::lround(1.0 + i * (target_layers - 4) / 5.0)));
    return out;
  }
  for (int i = 0; i < n; ++i) out.push_back(n == 1 ? 0 : int(std::lround(double(i) * (target_layers - 1) / (n - 1))));
  return out;
}

std::string config_json(const SynthGeometry& g) {
  const BackboneConfig& b = g.backbone;
  const HeadConfig& c = g.head;
  std::string taps;
  for (int l : b.target_layers) taps += (taps.empty() ? "" : ", ") + std::to_string(l);
  char buf[4096];
  std::snprintf(buf, sizeof buf,
                "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"qwen3\",\n  \"hidden_size\": %lld,\n"
                "  \"num_hidden_layers\": %d,\n  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": %d,\n"
                "  \"head_dim\": %d,\n  \"intermediate_size\": %lld,\n  \"rms_norm_eps\": %g,\n  \"rope_theta\": %g,\n"
                "  \"vocab_size\": %lld,\n  \"block_size\": %d,\n  \"num_target_layers\": %d,\n"
                "  \"torch_dtype\": \"%s\",\n  \"dflash_config\": {\n    \"mask_token_id\": %d,\n"
                "    \"target_layer_ids\": [%s],\n    \"causal\": false",
                g.with_head ? "LiLiCorrDraftModel" : "DFlashDraftModel", (long long)b.hidden, b.layers, b.heads,
                b.kv_heads, b.head_dim, (long long)b.intermediate, double(b.eps), b.rope_theta, (long long)g.vocab,
                b.block, int(b.target_layers.empty() ? 0 : b.target_layers.back() + 1),
                g.bf16 ? "bfloat16" : "float32", b.mask_token, taps.c_str());
  std::string s = buf;
  if (g.with_head) {
    std::snprintf(buf, sizeof buf,
                  ",\n    \"projector_type\": \"lilicorr\",\n    \"lilicorr_enabled\": true,\n"
                  "    \"lilicorr_candidate_topk\": %d,\n    \"lilicorr_hidden_size\": %lld,\n"
                  "    \"lilicorr_num_layers\": %d,\n    \"lilicorr_num_heads\": %d,\n    \"lilicorr_mlp_ratio\": %g,\n"
                  "    \"lilicorr_factor_dim\": %lld,\n    \"lilicorr_vector_eps\": %g,\n    \"lilicorr_logit_scale\": %g",
                  c.topk, (long long)c.hidden, c.layers, c.heads, g.mlp_ratio, (long long)c.factor,
                  double(c.vector_eps), double(c.logit_scale));
    s += buf;
  }
  return s + "\n  }\n}\n";
}

}  // namespace

SynthGeometry synth_geometry(const std::string& name, const ModelDesc& target) {
  SynthGeometry g;
  BackboneConfig& b = g.backbone;
  HeadConfig& c = g.head;
  b.hidden = target.hidden;
  g.vocab = target.vocab;
  b.block = 8;
  b.target_layers = spread_taps(int(target.layers.size()));
  c.block = b.block;
  c.model_hidden = b.hidden;
  c.vector_eps = 1e-4f;
  c.logit_scale = 8.0f;
  c.topk = 8;
  if (name == "tiny") {
    b.layers = 5, b.heads = 4, b.kv_heads = 2, b.head_dim = 16, b.intermediate = 128, b.rope_theta = 1e4;
    c.hidden = 32, c.layers = 2, c.heads = 4, c.factor = 16, g.mlp_ratio = 2.0;
  } else if (name == "bolt") {
    b.layers = 5, b.heads = 32, b.kv_heads = 8, b.head_dim = 128, b.intermediate = 12288, b.rope_theta = 1e6;
    c.hidden = 1024, c.layers = 2, c.heads = 8, c.factor = 256, g.mlp_ratio = 4.0;
  } else {
    fail("lilicorr synthesis: geometry '", name, "' is not one of tiny, bolt");
  }
  b.eps = 1e-6f;
  c.rms_eps = b.eps;
  c.mlp = int64_t(double(c.hidden) * g.mlp_ratio);
  b.mask_token = int32_t(std::min<int64_t>(990, g.vocab - 1));
  return g;
}

int64_t synth_parameters(const SynthGeometry& g) {
  int64_t n = 0;
  for (const Spec& s : tensor_list(g)) {
    int64_t e = 1;
    for (int64_t d : s.shape) e *= d;
    n += e;
  }
  return n;
}

void write_synthetic(const std::string& dir, const SynthGeometry& g, uint64_t seed) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  check(!ec, "lilicorr synthesis: cannot create folder '", dir, "': ", ec.message());
  {
    std::ofstream f(fs::path(dir) / "config.json");
    f << config_json(g);
    check(bool(f), "lilicorr synthesis: cannot write '", dir, "/config.json'");
  }
  const std::vector<Spec> list = tensor_list(g);
  std::vector<TensorSpec> specs;
  for (const Spec& s : list) {
    const std::string name =
        g.serving_names && s.name.rfind("lilicorr.", 0) == 0 ? "lilicorr." + serving_name(s.name.substr(9)) : s.name;
    specs.push_back({name, g.bf16 ? "BF16" : "F32", s.shape});
  }
  safetensors::SafetensorsWriter writer;
  auto file = writer.create((fs::path(dir) / "model.safetensors").string(), specs, FileInfo{});
  std::vector<float> v;
  std::vector<uint16_t> h;
  for (const Spec& s : list) {
    uint64_t key = 0xcbf29ce484222325ull;  // FNV-1a of the export name: the same bits under either naming
    for (unsigned char ch : s.name) key = (key ^ ch) * 0x100000001b3ull;
    Rng rng(seed ^ key);
    int64_t n = 1;
    for (int64_t d : s.shape) n *= d;
    const double in = s.shape.size() == 2 ? double(s.shape[1]) : 1.0;
    const double a = s.fill == Fill::Norm ? 0.1
                     : s.fill == Fill::Bias ? 0.02
                     : s.fill == Fill::Embedding ? 0.2
                                                 : std::sqrt(3.0 / in);  // unit-variance outputs
    v.resize(size_t(n));
    for (float& x : v) x = float((s.fill == Fill::Norm ? 1.0 : 0.0) + a * (2.0 * rng.uniform() - 1.0));
    if (g.bf16) {
      h.resize(v.size());
      for (size_t i = 0; i < v.size(); ++i) h[i] = f32_to_bf16(v[i]);
      file->write(h.data(), h.size() * 2);
    } else {
      file->write(v.data(), v.size() * 4);
    }
  }
  file->close();
}

}  // namespace tandem::lilicorr
