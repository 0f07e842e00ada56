// The shapes of spec/nemotron_h.md § 13 and their config.json.
#include "synth_model.h"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "tandem/error.h"

namespace tandem::synth {
namespace {

constexpr const char* kNanoPattern = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME";
constexpr const char* kSuperPattern =
    "MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEM*EMEMEMEME";

// Bolt-shape (§ 13.3): MoE ordinals [first, last] → (E, w).
struct BoltRange {
  int first, last, experts, width;
};
constexpr BoltRange kBolt[] = {
    {0, 2, 240, 1536},   {3, 5, 256, 1792},   {6, 8, 288, 2048},   {9, 11, 320, 2304},
    {12, 15, 352, 2560}, {16, 19, 400, 2560}, {20, 23, 432, 2560}, {24, 27, 448, 2304},
    {28, 30, 496, 2560}, {31, 33, 304, 2304}, {34, 36, 272, 2048}, {37, 39, 256, 2560},
};

struct Sizes {
  int vocab, hidden;
  const char* pattern;
  MambaDesc mamba;
  AttentionDesc attn;
  MoEDesc moe;
};

MambaDesc mamba(int nh, int p, int g, int n) {
  MambaDesc m;
  m.n_heads = nh, m.head_dim = p, m.n_groups = g, m.state_size = n, m.conv_kernel = 4;
  return m;
}
AttentionDesc attention(int nq, int nkv, int hd) {
  AttentionDesc a;
  a.n_heads = nq, a.n_kv_heads = nkv, a.head_dim = hd;
  return a;
}
MoEDesc moe(int e, int k, int w, int sh, int latent, float scaling) {
  MoEDesc m;
  m.n_experts = e, m.top_k = k, m.width = w, m.shared_width = sh, m.latent = latent, m.scaling = scaling;
  m.norm_topk_prob = true;
  return m;
}

ModelDesc build(const Sizes& s) {
  ModelDesc d;
  d.model_type = "nemotron_h";
  d.vocab = s.vocab;
  d.hidden = s.hidden;
  d.eps = 1e-5f;
  d.max_positions = 262144;
  d.eos_ids = {2, 11};
  for (const char* c = s.pattern; *c; ++c) {
    LayerDesc l;
    l.kind = *c == 'M' ? LayerKind::Mamba : *c == '*' ? LayerKind::Attention : LayerKind::MoE;
    l.mamba = s.mamba;
    l.attn = s.attn;
    l.moe = s.moe;
    d.layers.push_back(l);
  }
  return d;
}

// Sets the MoE layers' (E, w) from a per-ordinal function.
template <class F>
void per_moe_layer(ModelDesc& d, F f) {
  int m = 0;
  for (LayerDesc& l : d.layers)
    if (l.kind == LayerKind::MoE) f(m++, l.moe);
}

using JsonWriter = rapidjson::Writer<rapidjson::StringBuffer>;

void field(JsonWriter& w, const char* k, int64_t v) { w.Key(k), w.Int64(v); }
void field(JsonWriter& w, const char* k, double v) { w.Key(k), w.Double(v); }
void field(JsonWriter& w, const char* k, bool v) { w.Key(k), w.Bool(v); }
void field(JsonWriter& w, const char* k, const char* v) { w.Key(k), w.String(v); }

void moe_block_fields(JsonWriter& w, const MoEDesc& m) {
  field(w, "n_routed_experts", int64_t(m.n_experts));
  field(w, "num_experts_per_tok", int64_t(m.top_k));
  field(w, "moe_intermediate_size", int64_t(m.width));
  field(w, "moe_shared_expert_intermediate_size", int64_t(m.shared_width));
  w.Key("moe_latent_size");
  if (m.latent > 0) w.Int64(m.latent);
  else w.Null();
}

}  // namespace

const LayerDesc* first_layer(const ModelDesc& d, LayerKind kind) {
  for (const LayerDesc& l : d.layers)
    if (l.kind == kind) return &l;
  return nullptr;
}

const std::vector<std::string>& shape_names() {
  static const std::vector<std::string> names = {"tiny", "nano", "bolt", "super"};
  return names;
}

ModelDesc model_shape(const std::string& name, bool uniform) {
  if (name == "tiny") {
    // Every width a multiple of 256, so the 2-bit mix needs no fallback type.
    ModelDesc d = build({2048, 512, "MEM*EME", mamba(8, 64, 2, 32), attention(8, 2, 64), moe(12, 2, 256, 512, 256, 2.5f)});
    if (!uniform) {
      constexpr int kE[] = {8, 12, 16}, kW[] = {256, 512, 256};
      per_moe_layer(d, [&](int m, MoEDesc& e) { e.n_experts = kE[m], e.width = kW[m]; });
    }
    return d;
  }
  if (name == "nano")
    return build({131072, 2688, kNanoPattern, mamba(64, 64, 8, 128), attention(32, 2, 128),
                  moe(128, 6, 1856, 3712, 0, 2.5f)});
  if (name == "super")
    return build({131072, 4096, kSuperPattern, mamba(128, 64, 8, 128), attention(32, 2, 128),
                  moe(512, 22, 2688, 5376, 1024, 5.0f)});
  if (name == "bolt") {
    // Uniform: 346 experts of 2304 in every layer, about Bolt's ΣE (13,840) and Σ E·w (31.9 M).
    ModelDesc d = build({131072, 4096, kSuperPattern, mamba(128, 64, 8, 128), attention(32, 2, 128),
                         moe(346, 9, 2304, 5376, 1024, 5.0f)});
    if (!uniform)
      per_moe_layer(d, [](int m, MoEDesc& e) {
        for (const BoltRange& r : kBolt)
          if (m >= r.first && m <= r.last) e.n_experts = r.experts, e.width = r.width;
      });
    return d;
  }
  std::string names;
  for (const auto& n : shape_names()) names += (names.empty() ? "" : ", ") + n;
  fail("synth: unknown shape '", name, "' (expected one of ", names, ")");
}

bool moe_uniform(const ModelDesc& d) {
  const LayerDesc* first = first_layer(d, LayerKind::MoE);
  for (const LayerDesc& l : d.layers) {
    if (l.kind != LayerKind::MoE) continue;
    const MoEDesc &a = l.moe, &b = first->moe;
    if (a.n_experts != b.n_experts || a.width != b.width || a.top_k != b.top_k || a.shared_width != b.shared_width ||
        a.latent != b.latent)
      return false;
  }
  return true;
}

std::string config_json(const ModelDesc& d) {
  const bool puzzle = !moe_uniform(d);
  rapidjson::StringBuffer buf;
  JsonWriter w(buf);
  w.StartObject();
  field(w, "model_type", puzzle ? "nemotron_h_puzzle" : "nemotron_h");
  w.Key("architectures");
  w.StartArray();
  w.String(puzzle ? "NemotronHPuzzleForCausalLM" : "NemotronHForCausalLM");
  w.EndArray();
  field(w, "torch_dtype", "bfloat16");
  field(w, "vocab_size", int64_t(d.vocab));
  field(w, "hidden_size", int64_t(d.hidden));
  field(w, "num_hidden_layers", int64_t(d.layers.size()));
  field(w, "layer_norm_epsilon", double(d.eps));
  field(w, "tie_word_embeddings", d.tie_embeddings);
  field(w, "max_position_embeddings", d.max_positions);
  field(w, "bos_token_id", int64_t(1));
  field(w, "pad_token_id", int64_t(0));
  w.Key("eos_token_id");
  w.StartArray();
  for (int id : d.eos_ids) w.Int(id);
  w.EndArray();
  if (const LayerDesc* l = first_layer(d, LayerKind::Mamba)) {
    const MambaDesc& m = l->mamba;
    field(w, "mamba_num_heads", int64_t(m.n_heads));
    field(w, "mamba_head_dim", int64_t(m.head_dim));
    field(w, "n_groups", int64_t(m.n_groups));
    field(w, "ssm_state_size", int64_t(m.state_size));
    field(w, "conv_kernel", int64_t(m.conv_kernel));
    field(w, "chunk_size", int64_t(m.chunk_size));
    field(w, "use_conv_bias", m.conv_bias);
    field(w, "mamba_proj_bias", false);
    field(w, "mamba_hidden_act", "silu");
    field(w, "time_step_min", 0.001);
    field(w, "time_step_max", 0.1);
    field(w, "time_step_floor", 1e-4);
  }
  if (const LayerDesc* l = first_layer(d, LayerKind::Attention)) {
    field(w, "num_attention_heads", int64_t(l->attn.n_heads));
    field(w, "num_key_value_heads", int64_t(l->attn.n_kv_heads));
    field(w, "head_dim", int64_t(l->attn.head_dim));
    field(w, "attention_bias", false);
  }
  if (const LayerDesc* l = first_layer(d, LayerKind::MoE)) {
    const MoEDesc& m = l->moe;
    field(w, "mlp_hidden_act", "relu2");
    field(w, "n_shared_experts", int64_t(m.n_shared));
    field(w, "routed_scaling_factor", double(m.scaling));
    field(w, "n_group", int64_t(m.n_group));
    field(w, "topk_group", int64_t(m.topk_group));
    field(w, "norm_topk_prob", m.norm_topk_prob);
    if (!puzzle) moe_block_fields(w, m);
  }
  if (const LayerDesc* l = first_layer(d, LayerKind::MLP)) field(w, "intermediate_size", int64_t(l->mlp.width));
  if (puzzle) {
    w.Key("block_configs");
    w.StartArray();
    for (const LayerDesc& l : d.layers) {
      w.StartObject();
      field(w, "block_type", layer_kind_name(l.kind));
      if (l.kind == LayerKind::MoE) moe_block_fields(w, l.moe);
      w.EndObject();
    }
    w.EndArray();
  } else {
    field(w, "hybrid_override_pattern", d.pattern().c_str());
  }
  w.EndObject();
  return buf.GetString();
}

}  // namespace tandem::synth
