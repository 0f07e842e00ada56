// HF config.json → ModelDesc for nemotron_h and nemotron_h_puzzle (spec/nemotron_h.md § 9).
#include "tandem/model_config.h"

#include <optional>
#include <set>
#include <rapidjson/document.h>
#include <rapidjson/error/en.h>

#include "tandem/error.h"

namespace tandem {
namespace {

using Obj = rapidjson::Value;

class Fields {
 public:
  Fields(const Obj& o, std::string where) : o_(o), where_(std::move(where)) {}

  const Obj* get(std::initializer_list<const char*> names) const {
    for (const char* n : names) {
      auto it = o_.FindMember(n);
      if (it != o_.MemberEnd() && !it->value.IsNull()) return &it->value;
    }
    return nullptr;
  }
  std::string first(std::initializer_list<const char*> names) const { return *names.begin(); }

  int64_t integer(std::initializer_list<const char*> names, std::optional<int64_t> def = {}) const {
    const Obj* v = get(names);
    if (!v) {
      check(def.has_value(), where_, ": missing required field '", first(names), "'");
      return *def;
    }
    if (v->IsDouble() && v->GetDouble() == double(int64_t(v->GetDouble()))) return int64_t(v->GetDouble());
    check(v->IsInt64(), where_, ": field '", first(names), "' must be an integer, found ", type_of(*v));
    return v->GetInt64();
  }
  double number(std::initializer_list<const char*> names, std::optional<double> def = {}) const {
    const Obj* v = get(names);
    if (!v) {
      check(def.has_value(), where_, ": missing required field '", first(names), "'");
      return *def;
    }
    check(v->IsNumber(), where_, ": field '", first(names), "' must be a number, found ", type_of(*v));
    return v->GetDouble();
  }
  bool boolean(std::initializer_list<const char*> names, bool def) const {
    const Obj* v = get(names);
    if (!v) return def;
    check(v->IsBool(), where_, ": field '", first(names), "' must be true or false, found ", type_of(*v));
    return v->GetBool();
  }
  std::string string(std::initializer_list<const char*> names, std::optional<std::string> def = {}) const {
    const Obj* v = get(names);
    if (!v) {
      check(def.has_value(), where_, ": missing required field '", first(names), "'");
      return *def;
    }
    check(v->IsString(), where_, ": field '", first(names), "' must be a string, found ", type_of(*v));
    return v->GetString();
  }
  const std::string& where() const { return where_; }

  static const char* type_of(const Obj& v) {
    if (v.IsNull()) return "null";
    if (v.IsBool()) return "a boolean";
    if (v.IsNumber()) return "a number";
    if (v.IsString()) return "a string";
    if (v.IsArray()) return "an array";
    return "an object";
  }

 private:
  const Obj& o_;
  std::string where_;
};

int positive(int64_t v, const Fields& f, const char* name) {
  check(v > 0 && v < (int64_t(1) << 31), f.where(), ": field '", name, "' must be a positive integer, found ", v);
  return int(v);
}

// Fills the per-kind descriptions from a set of fields (the top level, or a Puzzle block over it).
void fill_mamba(MambaDesc& m, const Fields& f) {
  m.n_heads = positive(f.integer({"mamba_num_heads"}), f, "mamba_num_heads");
  m.head_dim = positive(f.integer({"mamba_head_dim"}), f, "mamba_head_dim");
  m.n_groups = positive(f.integer({"n_groups", "mamba_n_groups"}), f, "n_groups");
  m.state_size = positive(f.integer({"ssm_state_size"}), f, "ssm_state_size");
  m.conv_kernel = positive(f.integer({"conv_kernel", "mamba_d_conv"}, 4), f, "conv_kernel");
  m.chunk_size = positive(f.integer({"chunk_size", "mamba_chunk_size"}, 128), f, "chunk_size");
  m.conv_bias = f.boolean({"use_conv_bias", "mamba_conv_bias"}, true);
  m.proj_bias = f.boolean({"mamba_proj_bias", "use_bias"}, false);
  m.time_step_min = float(f.number({"time_step_min", "mamba_dt_min"}, 1e-3));
  check(m.n_heads % m.n_groups == 0, f.where(), ": mamba_num_heads (", m.n_heads,
        ") must be a multiple of n_groups (", m.n_groups, ")");
  check(!m.proj_bias, f.where(), ": mamba_proj_bias = true is not supported");
  std::string act = f.string({"mamba_hidden_act"}, "silu");
  check(act == "silu", f.where(), ": mamba_hidden_act '", act, "' is not supported (expected silu)");
}

void fill_attention(AttentionDesc& a, const Fields& f, int hidden) {
  a.n_heads = positive(f.integer({"num_attention_heads"}), f, "num_attention_heads");
  a.n_kv_heads = positive(f.integer({"num_key_value_heads"}, a.n_heads), f, "num_key_value_heads");
  a.head_dim = positive(f.integer({"head_dim", "attention_head_dim"}, hidden / a.n_heads), f, "head_dim");
  a.bias = f.boolean({"attention_bias"}, false);
  check(a.n_heads % a.n_kv_heads == 0, f.where(), ": num_attention_heads (", a.n_heads,
        ") must be a multiple of num_key_value_heads (", a.n_kv_heads, ")");
  check(!a.bias, f.where(), ": attention_bias = true is not supported");
  check(!f.get({"sliding_window"}), f.where(), ": attention 'sliding_window' is not supported");
}

void fill_moe(MoEDesc& m, const Fields& f) {
  m.n_experts = positive(f.integer({"n_routed_experts"}), f, "n_routed_experts");
  m.top_k = positive(f.integer({"num_experts_per_tok"}), f, "num_experts_per_tok");
  m.width = positive(f.integer({"moe_intermediate_size"}), f, "moe_intermediate_size");
  m.n_shared = int(f.integer({"n_shared_experts"}, 1));
  m.shared_width = int(f.integer({"moe_shared_expert_intermediate_size"}, 0)) * std::max(m.n_shared, 0);
  m.latent = int(f.integer({"moe_latent_size"}, 0));
  m.scaling = float(f.number({"routed_scaling_factor"}, 1.0));
  m.n_group = positive(f.integer({"n_group"}, 1), f, "n_group");
  m.topk_group = positive(f.integer({"topk_group"}, 1), f, "topk_group");
  m.norm_topk_prob = f.boolean({"norm_topk_prob"}, true);
  check(m.top_k <= m.n_experts, f.where(), ": num_experts_per_tok (", m.top_k, ") exceeds n_routed_experts (",
        m.n_experts, ")");
  check(m.n_experts % m.n_group == 0 && m.topk_group <= m.n_group, f.where(), ": n_group ", m.n_group,
        " / topk_group ", m.topk_group, " do not divide ", m.n_experts, " experts");
  check(m.latent >= 0 && m.shared_width >= 0, f.where(), ": negative moe_latent_size or shared width");
}

void fill_mlp(MLPDesc& m, const Fields& f) {
  m.width = positive(f.integer({"intermediate_size"}), f, "intermediate_size");
  m.bias = f.boolean({"mlp_bias"}, false);
  check(!m.bias, f.where(), ": mlp_bias = true is not supported");
  std::string act = f.string({"mlp_hidden_act"}, "relu2");
  check(act == "relu2", f.where(), ": mlp_hidden_act '", act, "' is not supported (expected relu2)");
}

LayerKind kind_of_letter(char c, const std::string& where) {
  switch (c) {
    case 'M': return LayerKind::Mamba;
    case '*': return LayerKind::Attention;
    case 'E': return LayerKind::MoE;
    case '-': return LayerKind::MLP;
  }
  fail(where, ": hybrid_override_pattern has unknown layer letter '", std::string(1, c),
       "' (expected M, *, E or -)");
}

LayerKind kind_of_name(const std::string& s, const std::string& where) {
  if (s == "mamba" || s == "linear_attention") return LayerKind::Mamba;
  if (s == "attention" || s == "full_attention") return LayerKind::Attention;
  if (s == "moe") return LayerKind::MoE;
  if (s == "mlp") return LayerKind::MLP;
  fail(where, ": unknown block type '", s, "' (expected mamba, attention, moe or mlp)");
}

void fill_layer(LayerDesc& l, const Fields& f, int hidden) {
  switch (l.kind) {
    case LayerKind::Mamba: fill_mamba(l.mamba, f); break;
    case LayerKind::Attention: fill_attention(l.attn, f, hidden); break;
    case LayerKind::MoE: fill_moe(l.moe, f); break;
    case LayerKind::MLP: fill_mlp(l.mlp, f); break;
  }
}

// A Puzzle block over the top-level config. Like the remote-code config (`blockwise_members`), a
// field that any block carries is dropped from the top level, so a block that omits it gets the
// default rather than another block's top-level value.
rapidjson::Document merged(const Obj& top, const Obj& block, const std::set<std::string>& blockwise) {
  rapidjson::Document d;
  d.SetObject();
  auto& a = d.GetAllocator();
  for (auto it = top.MemberBegin(); it != top.MemberEnd(); ++it)
    if (std::string(it->name.GetString()) != "block_configs" && !blockwise.count(it->name.GetString()))
      d.AddMember(Obj(it->name, a), Obj(it->value, a), a);
  for (auto it = block.MemberBegin(); it != block.MemberEnd(); ++it) {
    auto m = d.FindMember(it->name.GetString());
    if (m != d.MemberEnd()) m->value.CopyFrom(it->value, a);
    else d.AddMember(Obj(it->name, a), Obj(it->value, a), a);
  }
  return d;
}

}  // namespace

const char* layer_kind_name(LayerKind k) {
  switch (k) {
    case LayerKind::Mamba: return "mamba";
    case LayerKind::Attention: return "attention";
    case LayerKind::MoE: return "moe";
    case LayerKind::MLP: return "mlp";
  }
  return "?";
}

std::string ModelDesc::pattern() const {
  std::string s;
  for (const auto& l : layers)
    s += l.kind == LayerKind::Mamba ? 'M' : l.kind == LayerKind::Attention ? '*' : l.kind == LayerKind::MoE ? 'E' : '-';
  return s;
}

ModelDesc parse_model_config(const std::string& json_text, const std::string& source) {
  rapidjson::Document doc;
  doc.Parse(json_text.c_str(), json_text.size());
  if (doc.HasParseError())
    fail(source, ": invalid JSON at offset ", doc.GetErrorOffset(), ": ",
         rapidjson::GetParseError_En(doc.GetParseError()));
  check(doc.IsObject(), source, ": expected a JSON object");
  const Obj* root = &doc;
  // Vision-language wrappers keep the text model under llm_config (NVIDIA's VL and Omni configs) or,
  // in transformers' multimodal convention, text_config.
  for (const char* key : {"llm_config", "text_config"})
    if (auto it = doc.FindMember(key); root == &doc && it != doc.MemberEnd() && it->value.IsObject()) root = &it->value;
  Fields f(*root, source);

  ModelDesc m;
  m.model_type = f.string({"model_type"});
  check(m.model_type == "nemotron_h" || m.model_type == "nemotron_h_puzzle", source,
        ": model_type '", m.model_type, "' is not supported (expected nemotron_h or nemotron_h_puzzle)");
  m.vocab = positive(f.integer({"vocab_size"}), f, "vocab_size");
  m.hidden = positive(f.integer({"hidden_size"}), f, "hidden_size");
  m.eps = float(f.number({"layer_norm_epsilon", "norm_eps", "rms_norm_eps"}, 1e-5));
  m.tie_embeddings = f.boolean({"tie_word_embeddings"}, false);
  m.max_positions = f.integer({"max_position_embeddings"}, 262144);
  if (const Obj* e = f.get({"eos_token_id"})) {
    if (e->IsArray()) {
      for (const auto& v : e->GetArray()) {
        check(v.IsInt(), source, ": eos_token_id entries must be integers");
        m.eos_ids.push_back(v.GetInt());
      }
    } else {
      check(e->IsInt(), source, ": eos_token_id must be an integer or a list of integers");
      m.eos_ids.push_back(e->GetInt());
    }
  }

  if (const Obj* blocks = f.get({"block_configs"})) {
    check(blocks->IsArray() && !blocks->Empty(), source, ": block_configs must be a non-empty list");
    std::set<std::string> blockwise;
    for (const auto& b : blocks->GetArray())
      if (b.IsObject())
        for (auto it = b.MemberBegin(); it != b.MemberEnd(); ++it) blockwise.insert(it->name.GetString());
    int i = 0;
    for (const auto& b : blocks->GetArray()) {
      std::string where = source + ": block_configs[" + std::to_string(i) + "]";
      check(b.IsObject(), where, " must be an object");
      rapidjson::Document d = merged(*root, b, blockwise);
      Fields bf(d, where);
      LayerDesc l;
      l.kind = kind_of_name(bf.string({"block_type"}), where);
      fill_layer(l, bf, m.hidden);
      m.layers.push_back(l);
      ++i;
    }
  } else {
    std::vector<LayerKind> kinds;
    if (const Obj* p = f.get({"hybrid_override_pattern"})) {
      check(p->IsString(), source, ": hybrid_override_pattern must be a string");
      for (char c : std::string(p->GetString())) kinds.push_back(kind_of_letter(c, source));
    } else if (const Obj* p2 = f.get({"layers_block_type"})) {
      check(p2->IsArray(), source, ": layers_block_type must be a list");
      for (const auto& v : p2->GetArray()) {
        check(v.IsString(), source, ": layers_block_type entries must be strings");
        kinds.push_back(kind_of_name(v.GetString(), source));
      }
    } else {
      fail(source, ": missing required field 'hybrid_override_pattern' (or layers_block_type / block_configs)");
    }
    if (const Obj* n = f.get({"num_hidden_layers"})) {
      check(n->IsInt() && n->GetInt() == int(kinds.size()), source, ": num_hidden_layers (",
            n->IsInt() ? n->GetInt() : -1, ") does not match the pattern length ", kinds.size());
    }
    for (LayerKind k : kinds) {
      LayerDesc l;
      l.kind = k;
      fill_layer(l, f, m.hidden);
      m.layers.push_back(l);
    }
  }
  check(!m.layers.empty(), source, ": the model has no layers");

  const int64_t mtp = f.integer({"num_nextn_predict_layers"}, 0);
  check(mtp >= 0 && mtp < 1024, source, ": num_nextn_predict_layers must be a small non-negative integer, found ", mtp);
  m.mtp_layers = int(mtp);
  auto letter = [](LayerKind k) {
    return k == LayerKind::Mamba ? 'M' : k == LayerKind::Attention ? '*' : k == LayerKind::MoE ? 'E' : '-';
  };
  if (const Obj* p = f.get({"mtp_hybrid_override_pattern"})) {
    check(p->IsString(), source, ": mtp_hybrid_override_pattern must be a string");
    for (char c : std::string(p->GetString())) m.mtp_pattern += letter(kind_of_letter(c, source + " (mtp)"));
  } else if (const Obj* l = f.get({"mtp_layers_block_type"})) {
    check(l->IsArray(), source, ": mtp_layers_block_type must be a list");
    for (const auto& v : l->GetArray()) {
      check(v.IsString(), source, ": mtp_layers_block_type entries must be strings");
      m.mtp_pattern += letter(kind_of_name(v.GetString(), source + " (mtp)"));
    }
  } else if (const Obj* b = f.get({"mtp_block_configs"})) {
    check(b->IsArray(), source, ": mtp_block_configs must be a list");
    for (const auto& v : b->GetArray()) {
      check(v.IsObject(), source, ": mtp_block_configs entries must be objects");
      Fields bf(v, source + ": mtp_block_configs");
      m.mtp_pattern += letter(kind_of_name(bf.string({"block_type"}), source + " (mtp)"));
    }
  }
  return m;
}

}  // namespace tandem
