// A tiny nemotron_h in ModelOpt layout for the NVFP4 model tests (CPU and GPU): NVFP4 experts,
// attention and latents; FP8 Mamba in_proj, o_proj, shared up and MLP down; BF16 out_proj, router
// and lm_head excluded by wildcards; and its dense twin in F32 from the reference dequantization
// (nvfp4_test_util.h, not the plugin's decoder).
#pragma once
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "nvfp4_test_util.h"

namespace tandem::nvfp4::test {

// Every input width a multiple of 64 (the GGUF NVFP4 block), so the same model can run on the GPU.
constexpr int kHidden = 128, kVocab = 300;
constexpr int kHeads = 4, kHeadDim = 16, kGroups = 1, kState = 16, kConv = 4;
constexpr int kDin = kHeads * kHeadDim, kConvDim = kDin + 2 * kGroups * kState, kInProj = kDin + kConvDim + kHeads;
constexpr int kQHeads = 4, kKvHeads = 2, kAttnDim = 16;
constexpr int kExperts = 4, kTopK = 2, kWidth = 64, kShared = 128, kLatent = 64, kMlp = 128;

// The text model's config.json fields; `mtp` adds Super's MTP keys (one `*E` layer).
inline std::string config_json(const std::string& quantization_config, bool mtp = false) {
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
  if (mtp) c << R"(, "num_nextn_predict_layers": 1, "mtp_hybrid_override_pattern": "*E")";
  if (!quantization_config.empty()) c << ",\n  \"quantization_config\": " << quantization_config;
  c << "\n}\n";
  return c.str();
}

enum class Kind { NVFP4, FP8, BF16 };
struct Linear {
  std::string name;
  int64_t out, in;
  Kind kind;
};

inline std::vector<Linear> linears() {
  const std::string m0 = "backbone.layers.0.mixer.", m1 = "backbone.layers.1.mixer.", m2 = "backbone.layers.2.mixer.",
                    m3 = "backbone.layers.3.mixer.";
  std::vector<Linear> l = {
      {m0 + "in_proj", kInProj, kHidden, Kind::FP8},
      {m0 + "out_proj", kHidden, kDin, Kind::BF16},
      {m1 + "q_proj", kQHeads * kAttnDim, kHidden, Kind::NVFP4},
      {m1 + "k_proj", kKvHeads * kAttnDim, kHidden, Kind::NVFP4},
      {m1 + "v_proj", kKvHeads * kAttnDim, kHidden, Kind::NVFP4},
      {m1 + "o_proj", kHidden, kQHeads * kAttnDim, Kind::FP8},
      {m2 + "fc1_latent_proj", kLatent, kHidden, Kind::NVFP4},
      {m2 + "fc2_latent_proj", kHidden, kLatent, Kind::NVFP4},
      {m2 + "shared_experts.up_proj", kShared, kHidden, Kind::FP8},
      {m2 + "shared_experts.down_proj", kHidden, kShared, Kind::NVFP4},
      {m3 + "up_proj", kMlp, kHidden, Kind::NVFP4},
      {m3 + "down_proj", kHidden, kMlp, Kind::FP8},
      {"lm_head", kVocab, kHidden, Kind::BF16},
  };
  for (int e = 0; e < kExperts; ++e) {
    l.push_back({m2 + "experts." + std::to_string(e) + ".up_proj", kWidth, kLatent, Kind::NVFP4});
    l.push_back({m2 + "experts." + std::to_string(e) + ".down_proj", kLatent, kWidth, Kind::NVFP4});
  }
  return l;
}

// The other tensors, identical in both checkpoints.
inline std::vector<st::WriteTensor> plain_tensors(uint64_t seed) {
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

inline void write_folder(const std::string& dir, const std::string& config, const std::vector<st::WriteTensor>& tensors,
                  bool sharded) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << config;
  if (!sharded) return st::write_file(dir + "/model.safetensors", tensors);
  // Half the tensors in each shard, so linears' members straddle files.
  std::vector<st::WriteTensor> a, b;
  std::vector<std::pair<std::string, std::string>> map;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const bool first = i % 2 == 0;
    (first ? a : b).push_back(tensors[i]);
    map.push_back({tensors[i].name, first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors"});
  }
  st::write_file(dir + "/model-00001-of-00002.safetensors", a);
  st::write_file(dir + "/model-00002-of-00002.safetensors", b);
  st::write_index(dir + "/model.safetensors.index.json", map);
}

// How write_quantized lays the model out. The default is the plain text checkpoint.
struct Layout {
  bool mixed = true;     // config.json MIXED_PRECISION, sharded by an index; else hf_quant_config.json NVFP4, one file
  bool wrapper = false;  // NVIDIA's vision-language wrapper: config under llm_config, tensors under language_model.
  bool mtp = false;      // an MTP layer (`*E`, as Super's) under mtp.*, and the config's MTP keys
  bool vision = false;   // a few vision tower (vision_model.radio_model.*) and projector (mlp1.*) tensors, BF16
  std::vector<st::WriteTensor> extra;  // written as given (names as stored)
};

// The MTP layer's tensors (spec/nemotron_h.md § 9.2), in the forms the trunk's layers use: BF16
// fusion and norms, NVFP4 attention and experts, FP8 o_proj and shared up (NVFP4 in a uniform
// checkpoint). Their quantized_layers entries go to `layers`. Count: mtp_tensor_count().
inline void add_mtp(std::vector<st::WriteTensor>& t, const std::string& p, bool mixed, std::string& layers) {
  uint64_t seed = 900;
  auto vec = [&](const std::string& name, int64_t n) {
    t.push_back(st::make_bf16(p + name, {n}, random_weights(1, n, ++seed, 0.1)));
  };
  auto linear = [&](const std::string& name, int64_t out, int64_t in, Kind k) {
    if (!mixed && k == Kind::FP8) k = Kind::NVFP4;
    const std::vector<float> w = random_weights(out, in, ++seed, 1.0 / std::sqrt(double(in)));
    if (k == Kind::BF16) return t.push_back(st::make_bf16(p + name + ".weight", {out, in}, w));
    if (k == Kind::NVFP4) add_nvfp4(t, p + name, quantize_nvfp4(w, out, in));
    else add_fp8(t, p + name, quantize_fp8(w, out, in));
    layers += std::string(layers.empty() ? "" : ", ") + "\"" + p + name + "\": {\"quant_algo\": \"" +
              (k == Kind::NVFP4 ? "NVFP4\", \"group_size\": 16}" : "FP8\"}");
  };
  const std::string a = "mtp.layers.0.", e = "mtp.layers.1.";
  vec(a + "enorm.weight", kHidden), vec(a + "hnorm.weight", kHidden), vec(a + "norm.weight", kHidden);
  linear(a + "eh_proj", kHidden, 2 * kHidden, Kind::BF16);
  linear(a + "mixer.q_proj", kQHeads * kAttnDim, kHidden, Kind::NVFP4);
  linear(a + "mixer.k_proj", kKvHeads * kAttnDim, kHidden, Kind::NVFP4);
  linear(a + "mixer.v_proj", kKvHeads * kAttnDim, kHidden, Kind::NVFP4);
  linear(a + "mixer.o_proj", kHidden, kQHeads * kAttnDim, Kind::FP8);
  vec(e + "norm.weight", kHidden), vec(e + "final_layernorm.weight", kHidden);
  linear(e + "mixer.gate", kExperts, kHidden, Kind::BF16);
  t.push_back(st::make_f32(p + e + "mixer.gate.e_score_correction_bias", {kExperts}, random_weights(1, kExperts, ++seed, 0.05)));
  linear(e + "mixer.fc1_latent_proj", kLatent, kHidden, Kind::NVFP4);
  linear(e + "mixer.fc2_latent_proj", kHidden, kLatent, Kind::NVFP4);
  linear(e + "mixer.shared_experts.up_proj", kShared, kHidden, Kind::FP8);
  linear(e + "mixer.shared_experts.down_proj", kHidden, kShared, Kind::NVFP4);
  for (int x = 0; x < kExperts; ++x) {
    linear(e + "mixer.experts." + std::to_string(x) + ".up_proj", kWidth, kLatent, Kind::NVFP4);
    linear(e + "mixer.experts." + std::to_string(x) + ".down_proj", kLatent, kWidth, Kind::NVFP4);
  }
}
// 3 norms + eh_proj + 4 attention linears (3 NVFP4 × 4 tensors, o_proj FP8 3 or NVFP4 4) + 2 norms
// + gate + bias + latents (2 × 4) + shared (FP8 3 or NVFP4 4, NVFP4 4) + experts (2E × 4).
inline size_t mtp_tensor_count(bool mixed) {
  const size_t fp8 = mixed ? 3 : 4;
  return 3 + 1 + 12 + fp8 + 2 + 2 + 8 + fp8 + 4 + size_t(2 * kExperts) * 4;
}

// The RADIO tower and projector as vLLM's nano_nemotron_vl.py loads them (vision_model.radio_model.*,
// mlp1 = RMSNorm, Linear, ReLU², Linear), a few small BF16 tensors standing in for 1.7 GB.
inline std::vector<st::WriteTensor> vision_tensors() {
  constexpr int64_t kVit = 32, kProj = 64;
  std::vector<st::WriteTensor> t;
  uint64_t seed = 1300;
  auto bf16 = [&](const std::string& name, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    t.push_back(st::make_bf16(name, shape, random_weights(1, n, ++seed, 0.1)));
  };
  const std::string r = "vision_model.radio_model.model.";
  bf16(r + "patch_generator.embedder.weight", {kVit, 3 * 16 * 16});
  bf16(r + "blocks.0.norm1.weight", {kVit});
  bf16(r + "blocks.0.attn.qkv.weight", {3 * kVit, kVit});
  bf16(r + "blocks.0.attn.proj.weight", {kVit, kVit});
  bf16("mlp1.0.weight", {4 * kVit});
  bf16("mlp1.1.weight", {kProj, 4 * kVit});
  bf16("mlp1.3.weight", {kHidden, kProj});
  return t;
}

// The wrapper's config.json: the text config under llm_config, the vision config beside it, the
// quantization_config at the top (where vLLM reads it). The wrapper's architecture name is the one
// NVIDIA's Nano VL release uses; which name the Super VL release uses is not in the public sources
// read (docs/formats-nvfp4.md § Super VL), and tandem does not depend on it.
inline std::string wrapper_config_json(const std::string& text_config, const std::string& quantization_config) {
  std::string c = R"({"architectures": ["NemotronH_Nano_VL_V2"], "model_type": "NemotronH_Nano_VL_V2",
  "downsample_ratio": 0.5, "force_image_size": 512, "patch_size": 16, "projector_hidden_size": 64, "vit_hidden_size": 32,
  "vision_config": {"model_type": "radio", "args": {"model": "vit_huge_patch16_224"}, "patch_size": 16},
  "llm_config": )" + text_config;
  if (!quantization_config.empty()) c += ",\n  \"quantization_config\": " + quantization_config;
  return c + "\n}\n";
}

// Writes the quantized model to `q` in `layout`; returns its dense twin's tensors (F32 from the
// reference dequantization, plain text layout, no MTP or vision) when `dense` is set.
inline void write_quantized(const std::string& q, const Layout& layout, std::vector<st::WriteTensor>* dense = nullptr) {
  const std::string p = layout.wrapper ? "language_model." : "";
  std::vector<st::WriteTensor> pack = plain_tensors(5);
  if (dense) *dense = plain_tensors(5);
  for (auto& t : pack) t.name = p + t.name;
  std::string layers;
  uint64_t seed = 100;
  for (Linear l : linears()) {
    if (!layout.mixed && l.kind == Kind::FP8) l.kind = Kind::NVFP4;
    const std::vector<float> w = random_weights(l.out, l.in, ++seed, 1.0 / std::sqrt(double(l.in)));
    if (l.kind == Kind::BF16) {
      pack.push_back(st::make_bf16(p + l.name + ".weight", {l.out, l.in}, w));
      if (dense) dense->push_back(st::make_bf16(l.name + ".weight", {l.out, l.in}, w));
      continue;
    }
    std::vector<float> ref;
    if (l.kind == Kind::NVFP4) {
      const Nvfp4Linear nq = quantize_nvfp4(w, l.out, l.in);
      add_nvfp4(pack, p + l.name, nq);
      ref = nq.values();
    } else {
      const Fp8Linear fq = quantize_fp8(w, l.out, l.in);
      add_fp8(pack, p + l.name, fq);
      ref = fq.values();
    }
    if (dense) dense->push_back(st::make_f32(l.name + ".weight", {l.out, l.in}, ref));
    layers += std::string(layers.empty() ? "" : ", ") + "\"" + p + l.name + "\": {\"quant_algo\": \"" +
              (l.kind == Kind::NVFP4 ? "NVFP4\", \"group_size\": 16}" : "FP8\"}");
  }
  // A KV-cache scale as FP8-KV checkpoints carry: recorded, not used.
  const float kv = 0.5f;
  pack.push_back(bytes_tensor(p + "backbone.layers.1.mixer.k_proj.k_scale", "F32", {}, &kv, 4));
  if (layout.mtp) add_mtp(pack, p, layout.mixed, layers);
  if (layout.vision)
    for (auto& t : vision_tensors()) pack.push_back(std::move(t));
  for (const auto& t : layout.extra) pack.push_back(t);
  std::string excludes = "[\"" + p + "lm_head\", \"" + p + "*.mixer.out_proj\", \"" + p + "backbone.layers.*.mixer.gate\"";
  if (layout.vision) excludes += R"(, "vision_model*", "mlp1*")";
  excludes += "]";
  const std::string text = config_json("", layout.mtp);
  auto config = [&](const std::string& qc) { return layout.wrapper ? wrapper_config_json(text, qc) : config_json(qc, layout.mtp); };
  if (layout.mixed) {
    write_folder(q, config(R"({"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "ignore": )" + excludes +
                           R"(, "kv_cache_quant_algo": "FP8", "quantized_layers": {)" + layers + "}}"),
                 pack, true);
  } else {
    write_folder(q, config(""), pack, false);
    std::ofstream(q + "/hf_quant_config.json")
        << R"({"producer": {"name": "modelopt", "version": "0.29.0"}, "quantization": {"quant_algo": "NVFP4", "group_size": 16, "kv_cache_quant_algo": "FP8", "exclude_modules": )"
        << excludes << "}}";
  }
}

// Writes the quantized model to `q` and its dense twin to `dense`. `mixed`: config.json
// MIXED_PRECISION, sharded by an index; else hf_quant_config.json NVFP4 with every FP8 module stored
// NVFP4, one file.
inline void write_model_pair(const std::string& q, const std::string& dense_dir, bool mixed) {
  std::vector<st::WriteTensor> dense;
  Layout layout;
  layout.mixed = mixed;
  write_quantized(q, layout, &dense);
  write_folder(dense_dir, config_json(""), dense, false);
}

}  // namespace tandem::nvfp4::test
