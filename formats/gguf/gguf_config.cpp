// GGUF metadata → Nemotron-H layer descriptions → HF config.json text.
#include "gguf_config.h"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <map>
#include <variant>

#include "tandem/error.h"

namespace tandem::gguf {
namespace {

class Keys {
 public:
  Keys(const GgufFile& f, std::string arch) : f_(f), m_(f.metadata()), arch_(std::move(arch)) {}
  std::string key(const std::string& k) const { return arch_ + "." + k; }
  template <class T>
  std::optional<T> get(const std::string& k) const { return m_.get<T>(key(k)); }
  template <class T>
  T require(const std::string& k) const { return m_.require<T>(key(k)); }
  std::optional<std::vector<uint32_t>> per_layer(const std::string& k, size_t n) const {
    return m_.get_per_layer<uint32_t>(key(k), n);
  }
  std::vector<uint32_t> require_per_layer(const std::string& k, size_t n) const {
    auto v = per_layer(k, n);
    check(v.has_value(), m_.where(), ": missing required key '", key(k), "' (one value per layer, or a scalar)");
    return *v;
  }
  const TensorInfo* tensor(int layer, const std::string& name) const {
    return f_.find("blk." + std::to_string(layer) + "." + name);
  }
  const std::string& where() const { return m_.where(); }

 private:
  const GgufFile& f_;
  const Metadata& m_;
  std::string arch_;
};

int positive(int64_t v, const Keys& k, const std::string& what) {
  check(v > 0 && v < (int64_t(1) << 31), k.where(), ": ", what, " must be a positive integer, found ", v);
  return int(v);
}

// The out dimension (ne[1]) of a 2-D or 3-D tensor, for sizes that metadata may leave out.
int64_t rows_of(const TensorInfo* t) { return t && t->ne.size() >= 2 ? t->ne[1] : 0; }

void read_mamba(MambaDesc& m, const Keys& k, int layer) {
  const int64_t d_in = k.require<uint32_t>("ssm.inner_size");
  m.n_heads = positive(k.require<uint32_t>("ssm.time_step_rank"), k, "key '" + k.key("ssm.time_step_rank") + "'");
  check(d_in % m.n_heads == 0, k.where(), ": key '", k.key("ssm.inner_size"), "' (", d_in,
        ") must be a multiple of '", k.key("ssm.time_step_rank"), "' (", m.n_heads, ")");
  m.head_dim = positive(d_in / m.n_heads, k, "key '" + k.key("ssm.inner_size") + "'");
  m.n_groups = positive(k.require<uint32_t>("ssm.group_count"), k, "key '" + k.key("ssm.group_count") + "'");
  m.state_size = positive(k.require<uint32_t>("ssm.state_size"), k, "key '" + k.key("ssm.state_size") + "'");
  m.conv_kernel = positive(k.require<uint32_t>("ssm.conv_kernel"), k, "key '" + k.key("ssm.conv_kernel") + "'");
  m.conv_bias = k.tensor(layer, "ssm_conv1d.bias") != nullptr;
}

struct MoeKeys {
  std::optional<std::vector<uint32_t>> n_experts, top_k, width, shared, latent;
  float scaling = 1.0f;
  bool norm = false;
  int n_group = 1, topk_group = 1;
};

MoeKeys read_moe_keys(const Keys& k, size_t n) {
  MoeKeys m;
  m.n_experts = k.per_layer("expert_count", n);
  m.top_k = k.require_per_layer("expert_used_count", n);
  m.width = k.per_layer("expert_feed_forward_length", n);
  m.shared = k.per_layer("expert_shared_feed_forward_length", n);
  m.latent = k.per_layer("moe_latent_size", n);
  float s = k.get<float>("expert_weights_scale").value_or(0.0f);
  m.scaling = s == 0.0f ? 1.0f : s;  // llama.cpp applies the scale only when it is neither 0 nor 1
  m.norm = k.get<bool>("expert_weights_norm").value_or(false);
  m.n_group = std::max<int>(1, int(k.get<uint32_t>("expert_group_count").value_or(1)));
  m.topk_group = std::max<int>(1, int(k.get<uint32_t>("expert_group_used_count").value_or(1)));
  return m;
}

void read_moe(MoEDesc& d, const MoeKeys& m, const Keys& k, int layer, uint32_t ff) {
  const std::string gate = "blk." + std::to_string(layer) + ".ffn_gate_inp.weight";
  int64_t e = m.n_experts ? (*m.n_experts)[size_t(layer)] : 0;
  if (e == 0) e = rows_of(k.tensor(layer, "ffn_gate_inp.weight"));  // Bolt: E per layer from the router
  d.n_experts = positive(e, k, "the expert count of layer " + std::to_string(layer) + " ('" +
                                   k.key("expert_count") + "' or tensor '" + gate + "')");
  d.top_k = positive((*m.top_k)[size_t(layer)], k, "key '" + k.key("expert_used_count") + "' at layer " +
                                                       std::to_string(layer));
  int64_t w = m.width ? (*m.width)[size_t(layer)] : 0;
  d.width = positive(w ? w : int64_t(ff), k, "the expert width of layer " + std::to_string(layer));
  int64_t sh = m.shared ? (*m.shared)[size_t(layer)] : rows_of(k.tensor(layer, "ffn_up_shexp.weight"));
  d.shared_width = int(sh);
  d.n_shared = 1;
  d.latent = m.latent ? int((*m.latent)[size_t(layer)]) : 0;
  d.scaling = m.scaling;
  d.norm_topk_prob = m.norm;
  d.n_group = m.n_group;
  d.topk_group = m.topk_group;
}

// eos + eot + the token "<|im_end|>" (Nemotron's HF eos is [2, 11]; GGUF holds one eos id).
std::vector<int> eos_ids(const Metadata& m) {
  std::vector<int> ids;
  auto add = [&](int64_t id) {
    if (id >= 0 && id < (int64_t(1) << 31) && std::find(ids.begin(), ids.end(), int(id)) == ids.end())
      ids.push_back(int(id));
  };
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"})
    if (auto v = m.get<uint32_t>(key)) add(*v);
  if (const Value* tokens = m.find("tokenizer.ggml.tokens"); tokens && tokens->elem == ValueType::STRING)
    for (size_t i = 0; i < tokens->strings.size(); ++i)
      if (tokens->strings[i] == "<|im_end|>") add(int64_t(i));
  return ids;
}

// ---- config.json ----

using Field = std::variant<int64_t, double, bool>;
using Fields = std::vector<std::pair<std::string, Field>>;

Fields fields_of(const LayerDesc& l) {
  switch (l.kind) {
    case LayerKind::Mamba: {
      const MambaDesc& m = l.mamba;
      return {{"mamba_num_heads", int64_t(m.n_heads)}, {"mamba_head_dim", int64_t(m.head_dim)},
              {"n_groups", int64_t(m.n_groups)},       {"ssm_state_size", int64_t(m.state_size)},
              {"conv_kernel", int64_t(m.conv_kernel)}, {"use_conv_bias", m.conv_bias}};
    }
    case LayerKind::Attention: {
      const AttentionDesc& a = l.attn;
      return {{"num_attention_heads", int64_t(a.n_heads)}, {"num_key_value_heads", int64_t(a.n_kv_heads)},
              {"head_dim", int64_t(a.head_dim)}};
    }
    case LayerKind::MoE: {
      const MoEDesc& m = l.moe;
      return {{"n_routed_experts", int64_t(m.n_experts)},
              {"num_experts_per_tok", int64_t(m.top_k)},
              {"moe_intermediate_size", int64_t(m.width)},
              {"n_shared_experts", int64_t(m.n_shared)},
              {"moe_shared_expert_intermediate_size", int64_t(m.shared_width)},
              {"moe_latent_size", int64_t(m.latent)},
              {"routed_scaling_factor", double(m.scaling)},
              {"norm_topk_prob", m.norm_topk_prob},
              {"n_group", int64_t(m.n_group)},
              {"topk_group", int64_t(m.topk_group)}};
    }
    case LayerKind::MLP: return {{"intermediate_size", int64_t(l.mlp.width)}};
  }
  return {};
}

using JsonWriter = rapidjson::Writer<rapidjson::StringBuffer>;

void write_fields(JsonWriter& w, const Fields& fs) {
  for (const auto& [name, v] : fs) {
    w.Key(name.c_str());
    if (auto* i = std::get_if<int64_t>(&v)) w.Int64(*i);
    else if (auto* d = std::get_if<double>(&v)) w.Double(*d);
    else w.Bool(std::get<bool>(v));
  }
}

}  // namespace

Architecture read_architecture(const GgufFile& file) {
  const Metadata& meta = file.metadata();
  Architecture a;
  a.name = meta.require<std::string>("general.architecture");
  check(a.name == "nemotron_h" || a.name == "nemotron_h_moe", meta.where(), ": key 'general.architecture' is '",
        printable(a.name), "', expected nemotron_h or nemotron_h_moe");
  Keys k(file, a.name);
  const int64_t n_blocks = k.require<uint32_t>("block_count");
  const int64_t nextn = k.get<uint32_t>("nextn_predict_layers").value_or(0);
  check(n_blocks > 0 && n_blocks <= 100000, meta.where(), ": key '", k.key("block_count"),
        "' must be in 1..100000, found ", n_blocks);
  check(nextn < n_blocks, meta.where(), ": key '", k.key("nextn_predict_layers"), "' (", nextn,
        ") leaves no trunk layers of ", n_blocks);
  a.n_blocks = int(n_blocks);
  const size_t nb = size_t(n_blocks);
  const int n = int(n_blocks - nextn);

  ModelDesc& d = a.model;
  d.model_type = "nemotron_h";
  d.hidden = positive(k.require<uint32_t>("embedding_length"), k, "key '" + k.key("embedding_length") + "'");
  const TensorInfo* embd = file.find("token_embd.weight");
  check(embd != nullptr, meta.where(), ": missing tensor 'token_embd.weight' (the vocabulary size comes from it)");
  check(embd->ne.size() == 2, meta.where(), ": tensor 'token_embd.weight': expected 2 dimensions {hidden, vocab}, found ",
        shape_str(embd->ne));
  d.vocab = positive(embd->ne[1], k, "tensor 'token_embd.weight' ne[1] (the vocabulary size)");
  std::optional<float> eps = k.get<float>("attention.layer_norm_rms_epsilon");
  if (!eps) eps = k.get<float>("attention.layer_norm_epsilon");
  check(eps.has_value(), meta.where(), ": missing required key '", k.key("attention.layer_norm_rms_epsilon"), "' (or '",
        k.key("attention.layer_norm_epsilon"), "')");
  d.eps = *eps;
  d.tie_embeddings = file.find("output.weight") == nullptr;
  if (auto ctx = k.get<uint32_t>("context_length")) d.max_positions = *ctx;
  d.eos_ids = eos_ids(meta);

  const std::vector<uint32_t> ff = k.require_per_layer("feed_forward_length", nb);
  const std::vector<uint32_t> kv = k.require_per_layer("attention.head_count_kv", nb);
  const std::optional<std::vector<uint32_t>> heads = k.per_layer("attention.head_count", nb);
  std::optional<MoeKeys> moe;
  for (int i = 0; i < n; ++i) {
    const size_t li = size_t(i);
    LayerDesc l;
    if (kv[li] == 0 && ff[li] == 0) {
      l.kind = LayerKind::Mamba;
      read_mamba(l.mamba, k, i);
    } else if (ff[li] == 0) {
      l.kind = LayerKind::Attention;
      check(heads.has_value(), meta.where(), ": missing required key '", k.key("attention.head_count"),
            "' (layer ", i, " is an attention layer)");
      AttentionDesc& at = l.attn;
      at.n_heads = positive((*heads)[li], k, "key '" + k.key("attention.head_count") + "' at layer " + std::to_string(i));
      at.n_kv_heads = int(kv[li]);
      const int64_t hd = k.get<uint32_t>("attention.key_length").value_or(uint32_t(d.hidden / at.n_heads));
      at.head_dim = positive(hd, k, "key '" + k.key("attention.key_length") + "'");
      if (auto vl = k.get<uint32_t>("attention.value_length"))
        check(int64_t(*vl) == hd, meta.where(), ": key '", k.key("attention.value_length"), "' (", *vl,
              ") differs from '", k.key("attention.key_length"), "' (", hd, "); tandem needs equal K and V head sizes");
    } else if (k.tensor(i, "ffn_gate_inp.weight")) {
      l.kind = LayerKind::MoE;
      if (!moe) moe = read_moe_keys(k, nb);
      read_moe(l.moe, *moe, k, i, ff[li]);
    } else {
      l.kind = LayerKind::MLP;
      l.mlp.width = int(ff[li]);
    }
    d.layers.push_back(l);
  }

  // One config for every layer of a kind, or per-layer blocks when they differ.
  std::map<LayerKind, Fields> first;
  for (const LayerDesc& l : d.layers) {
    Fields f = fields_of(l);
    auto [it, fresh] = first.emplace(l.kind, f);
    if (!fresh && it->second != f) a.mixed = true;
  }
  if (a.mixed) d.model_type = "nemotron_h_puzzle";
  return a;
}

std::string hf_config_json(const Architecture& a) {
  const ModelDesc& d = a.model;
  rapidjson::StringBuffer buf;
  JsonWriter w(buf);
  w.StartObject();
  w.Key("model_type");
  w.String(a.mixed ? "nemotron_h_puzzle" : "nemotron_h");
  w.Key("architectures");
  w.StartArray();
  w.String("NemotronHForCausalLM");
  w.EndArray();
  w.Key("gguf_architecture");
  w.String(a.name.c_str());
  w.Key("vocab_size");
  w.Int(d.vocab);
  w.Key("hidden_size");
  w.Int(d.hidden);
  w.Key("num_hidden_layers");
  w.Int(int(d.layers.size()));
  w.Key("layer_norm_epsilon");
  w.Double(double(d.eps));
  w.Key("tie_word_embeddings");
  w.Bool(d.tie_embeddings);
  if (d.max_positions > 0) {
    w.Key("max_position_embeddings");
    w.Int64(d.max_positions);
  }
  if (!d.eos_ids.empty()) {
    w.Key("eos_token_id");
    w.StartArray();
    for (int id : d.eos_ids) w.Int(id);
    w.EndArray();
  }
  if (a.mixed) {
    w.Key("block_configs");
    w.StartArray();
    for (const LayerDesc& l : d.layers) {
      w.StartObject();
      w.Key("block_type");
      w.String(layer_kind_name(l.kind));  // the block_type names parse_model_config reads
      write_fields(w, fields_of(l));
      w.EndObject();
    }
    w.EndArray();
  } else {
    w.Key("hybrid_override_pattern");
    w.String(d.pattern().c_str());
    std::map<LayerKind, bool> done;
    for (const LayerDesc& l : d.layers)
      if (!done[l.kind]) {
        done[l.kind] = true;
        write_fields(w, fields_of(l));
      }
  }
  w.EndObject();
  return buf.GetString();
}

}  // namespace tandem::gguf
