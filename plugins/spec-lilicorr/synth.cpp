// Synthetic LiLiCorr checkpoints (synth.h): the tensor list of the export layout, random values, the
// config.json the exporter writes.
#include "synth.h"

#include <cmath>
#include <filesystem>
#include <fstream>

#include "checkpoint.h"
#include "formats/nvfp4/encodings.h"
#include "formats/nvfp4/modelopt_config.h"
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
  if (g.embed) t.push_back({"embed_tokens.weight", {g.vocab, H}, Fill::Embedding});
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

// E4M3 code of v ≥ 0, rounded to nearest (ties to even), saturating at 448.
uint8_t e4m3_code(float v) {
  if (!(v > 0)) return 0;
  if (v >= 448.0f) return 0x7E;
  int e;
  std::frexp(v, &e);  // v = f·2^e, f in [0.5, 1)
  e -= 1;             // v = (1 + m)·2^e
  if (e < -6) {       // subnormal: m·2^−9
    const int m = int(std::nearbyint(std::ldexp(v, 9)));
    return uint8_t(m);  // m = 8 is 2^−6, code 0x08: the same bits
  }
  int m = int(std::nearbyint((std::ldexp(v, -e) - 1.0f) * 8.0f));
  if (m == 8) m = 0, ++e;
  if (e > 8 || (e == 8 && m == 7)) return 0x7E;
  return uint8_t(((e + 7) << 3) | m);
}

// E2M1 code of v, rounded to nearest (ties to the even code).
uint8_t e2m1_code(float v) {
  const float a = std::fabs(v);
  const uint8_t m = a <= 0.25f ? 0 : a < 0.75f ? 1 : a <= 1.25f ? 2 : a < 1.75f ? 3 : a <= 2.5f ? 4 : a < 3.5f ? 5
                    : a <= 5.0f ? 6 : 7;
  return uint8_t((v < 0 && m ? 8 : 0) | m);
}

// NVFP4 in ModelOpt's recipe: scale_2 = amax/(6·448) (f32), block scale E4M3(block amax/(6·scale_2)),
// elements E2M1(w/(scale·scale_2)). Returns scale_2; global = amax (MLX's global_scale for the same bits).
float quantize_nvfp4(const std::vector<float>& w, int64_t out, int64_t in, std::vector<uint8_t>& q,
                     std::vector<uint8_t>& scales, float& global) {
  float amax = 0;
  for (float v : w) amax = std::max(amax, std::fabs(v));
  if (amax == 0) amax = 1;
  global = amax;
  const float s2 = amax / 2688.0f;
  q.assign(size_t(out * in / 2), 0);
  scales.assign(size_t(out * in / 16), 0);
  for (int64_t r = 0; r < out; ++r)
    for (int64_t b = 0; b < in / 16; ++b) {
      const float* x = w.data() + r * in + b * 16;
      float bmax = 0;
      for (int j = 0; j < 16; ++j) bmax = std::max(bmax, std::fabs(x[j]));
      const uint8_t sc = e4m3_code(bmax / (6.0f * s2));
      scales[size_t(r * (in / 16) + b)] = sc;
      const float d = nvfp4::e4m3(sc) * s2;
      for (int j = 0; j < 16; ++j) {
        const uint8_t c = d > 0 ? e2m1_code(x[j] / d) : 0;
        const size_t k = size_t(r * in + b * 16 + j);
        q[k / 2] |= uint8_t(k % 2 ? c << 4 : c);
      }
    }
  return s2;
}

// The linear modules that are stored quantized (export names, without ".weight").
bool quantized_module(const SynthGeometry& g, const nvfp4::QuantConfig& ex, const std::string& weight) {
  if (g.quant == "none" || weight.size() < 7 || weight.compare(weight.size() - 7, 7, ".weight") != 0) return false;
  const std::string m = weight.substr(0, weight.size() - 7);
  const bool linear = m == "fc" || (m.rfind("layers.", 0) == 0 && (m.find("_proj") != std::string::npos));
  return linear && ex.excluded_by(m).empty();
}

std::string json_list(const std::vector<std::string>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", \"" : "\"") + v[i] + "\"";
  return s + "]";
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
  s += "\n  }";
  if (g.quant == "nvfp4") {
    s += ",\n  \"quantization_config\": {\"quant_method\": \"modelopt\", \"quant_algo\": \"NVFP4\", "
         "\"config_groups\": {\"group_0\": {\"weights\": {\"num_bits\": 4, \"group_size\": 16, \"type\": \"float\"}}}, "
         "\"ignore\": " + json_list(synth_exclude(g)) + "}";
  } else if (g.quant == "mlx-nvfp4") {
    // mlx-lm's form: the global mode, and `false` for every linear left dense.
    nvfp4::QuantConfig ex;
    ex.exclude = synth_exclude(g);
    std::string q = "{\"group_size\": 16, \"bits\": 4, \"mode\": \"nvfp4\"";
    for (const Spec& t : tensor_list(g))
      if (t.shape.size() == 2 && t.name.size() > 7 && t.name.compare(t.name.size() - 7, 7, ".weight") == 0 &&
          !quantized_module(g, ex, t.name))
        q += ", \"" + t.name.substr(0, t.name.size() - 7) + "\": false";
    q += "}";
    s += ",\n  \"quantization\": " + q + ",\n  \"quantization_config\": " + q;
  }
  return s + "\n}\n";
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

std::vector<std::string> synth_exclude(const SynthGeometry& g) {
  std::vector<std::string> v = g.exclude;
  v.push_back("lilicorr.*");
  v.push_back("*embed_tokens*");
  return v;
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
  check(g.quant == "none" || g.quant == "nvfp4" || g.quant == "mlx-nvfp4", "lilicorr synthesis: key 'quant' must be ",
        "none, nvfp4 or mlx-nvfp4, found '", g.quant, "'");
  if (g.quant == "nvfp4") {
    std::ofstream f(fs::path(dir) / "hf_quant_config.json");
    f << "{\n  \"producer\": {\"name\": \"tandem synth\"},\n  \"quantization\": {\"quant_algo\": \"NVFP4\", "
         "\"group_size\": 16, \"kv_cache_quant_algo\": null, \"exclude_modules\": "
      << json_list(synth_exclude(g)) << "}\n}\n";
    check(bool(f), "lilicorr synthesis: cannot write '", dir, "/hf_quant_config.json'");
  }
  nvfp4::QuantConfig ex;
  ex.exclude = synth_exclude(g);
  const std::vector<Spec> list = tensor_list(g);
  std::vector<TensorSpec> specs;
  for (const Spec& s : list) {
    const std::string name =
        g.serving_names && s.name.rfind("lilicorr.", 0) == 0 ? "lilicorr." + serving_name(s.name.substr(9)) : s.name;
    if (quantized_module(g, ex, s.name)) {
      check(s.shape[1] % 16 == 0, "lilicorr synthesis: '", s.name, "' has ", s.shape[1],
            " inputs, not a multiple of 16 (NVFP4)");
      const std::string m = name.substr(0, name.size() - 7);
      if (g.quant == "nvfp4") {
        specs.push_back({name, "U8", {s.shape[0], s.shape[1] / 2}});
        specs.push_back({m + ".weight_scale", "F8_E4M3", {s.shape[0], s.shape[1] / 16}});
        specs.push_back({m + ".weight_scale_2", "F32", {}});
        specs.push_back({m + ".input_scale", "F32", {}});
      } else {
        specs.push_back({name, "U32", {s.shape[0], s.shape[1] / 8}});
        specs.push_back({m + ".scales", "U8", {s.shape[0], s.shape[1] / 16}});
        specs.push_back({m + ".global_scale", "F32", {}});
      }
      continue;
    }
    specs.push_back({name, g.bf16 ? "BF16" : "F32", s.shape});
  }
  safetensors::SafetensorsWriter writer;
  auto file = writer.create((fs::path(dir) / "model.safetensors").string(), specs, FileInfo{});
  std::vector<float> v;
  std::vector<uint16_t> h;
  std::vector<uint8_t> q, sc;
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
    if (quantized_module(g, ex, s.name)) {
      float global = 0;
      const float s2 = quantize_nvfp4(v, s.shape[0], s.shape[1], q, sc, global);
      file->write(q.data(), q.size());
      file->write(sc.data(), sc.size());
      if (g.quant == "nvfp4") {
        const float input_scale = 1.0f / 2688.0f;
        file->write(&s2, 4);
        file->write(&input_scale, 4);
      } else {
        file->write(&global, 4);  // MLX: multiplier = global_scale / 2688, which is s2 in f32
      }
      continue;
    }
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
