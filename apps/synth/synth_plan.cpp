// Weights of a Nemotron-H model in HF and GGUF form (spec/nemotron_h.md § 9.2, § 10.3), the tensors
// of a weight mix, and their counts.
#include "synth_plan.h"

#include <algorithm>
#include <cctype>
#include <iterator>
#include <cmath>
#include <mutex>
#include <tuple>

#include "tandem/error.h"
#include "tandem/registry.h"

namespace tandem::synth {
namespace {

// The 2-bit mix's type for a weight, with llama-quantize's fallbacks for rows a block type cannot hold.
// `base`: gguf-TYPE's type (empty for gguf-iq2).
std::string gguf_type(Role role, int64_t row_len, const Writer& writer, const std::string& base) {
  auto fits = [&](const char* t) {
    const auto l = writer.type_layout(t);
    check(l.has_value(), "synth: the ", writer.extension(), " writer does not know type ", t);
    return row_len % l->block_elems == 0;
  };
  auto first_fit = [&](std::initializer_list<const char*> types) {
    for (const char* t : types)
      if (fits(t)) return std::string(t);
    return std::string("F16");
  };
  // A linear past the embedding and head: the 2-bit mix's types, or gguf-TYPE's one (then Q8_0).
  auto linear = [&](std::initializer_list<const char*> iq2) {
    return base.empty() ? first_fit(iq2) : first_fit({base.c_str(), "Q8_0"});
  };
  switch (role) {
    case Role::Routed:
    case Role::Shared: return linear({"IQ2_XXS", "IQ4_NL", "Q8_0"});
    case Role::MambaProj: return linear({"NVFP4", "Q8_0"});
    case Role::Attention:
    case Role::Latent:
    case Role::Mlp: return linear({"Q8_0"});
    case Role::Embedding:
    case Role::Head: return first_fit({"Q8_0"});
    case Role::Norm:
    case Role::MambaVector:
    case Role::Router:
    case Role::RouterBias: return "F32";
  }
  return "F32";
}

// Pools of random rows are made in this order of their types (the ggml ids' order), so that the
// in-memory checkpoint's bytes stay what they were when pools were keyed by ggml id.
int type_order(const std::string& dtype) {
  static const char* const kOrder[] = {"F32",   "F16",  "Q8_0",   "IQ2_XXS", "I16",   "IQ4_NL", "I32",
                                      "BF16",  "NVFP4", "U8",     "F8_E4M3", "Q4_K",  "Q5_K",   "Q6_K",
                                      "IQ4_XS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_M"};
  for (int i = 0; i < int(std::size(kOrder)); ++i)
    if (dtype == kOrder[i]) return i;
  return int(std::size(kOrder));
}

class Planner {
 public:
  explicit Planner(const ModelDesc& d) : d_(d) {}

  std::vector<Weight> weights() {
    const int64_t H = d_.hidden, V = d_.vocab;
    add(Role::Embedding, Init::Embedding, -1, "backbone.embeddings.weight", {V, H}, "token_embd.weight");
    for (size_t i = 0; i < d_.layers.size(); ++i) layer(int(i));
    add(Role::Norm, Init::Ones, -1, "backbone.norm_f.weight", {H}, "output_norm.weight");
    if (!d_.tie_embeddings) add(Role::Head, Init::Linear, -1, "lm_head.weight", {V, H}, "output.weight");
    return std::move(w_);
  }

 private:
  // A weight whose GGUF ne is its HF shape reversed and whose reader view is its HF name and shape.
  Weight& add(Role role, Init init, int layer, std::string hf, std::vector<int64_t> shape, std::string gguf) {
    Weight w;
    w.role = role, w.init = init, w.layer = layer;
    w.hf_name = w.view_name = std::move(hf);
    w.hf_shape = w.view_shape = shape;
    w.gguf_name = std::move(gguf);
    w.ne.assign(shape.rbegin(), shape.rend());
    w.fan_in = w.ne[0];
    w.stddev = init == Init::Linear ? 1.0 / std::sqrt(double(w.fan_in)) : init == Init::Embedding ? 1.0 : 0.0;
    w_.push_back(std::move(w));
    return w_.back();
  }

  void layer(int i) {
    const LayerDesc& l = d_.layers[size_t(i)];
    const int64_t H = d_.hidden;
    const std::string p = "backbone.layers." + std::to_string(i) + ".", m = p + "mixer.",
                      g = "blk." + std::to_string(i) + ".";
    add(Role::Norm, Init::Ones, i, p + "norm.weight", {H}, g + "attn_norm.weight");
    switch (l.kind) {
      case LayerKind::Mamba: {
        const MambaDesc& s = l.mamba;
        const int64_t d_in = s.d_inner(), C = s.conv_dim(), K = s.conv_kernel, nh = s.n_heads;
        add(Role::MambaProj, Init::Linear, i, m + "in_proj.weight", {s.in_proj_rows(), H}, g + "ssm_in.weight");
        Weight& conv = add(Role::MambaVector, Init::Conv, i, m + "conv1d.weight", {C, 1, K}, g + "ssm_conv1d.weight");
        conv.ne = {K, C}, conv.fan_in = K, conv.view_shape = {C, K};
        conv.stddev = 1.0 / std::sqrt(3.0 * double(K));  // uniform ±1/√K
        if (s.conv_bias) {
          Weight& b = add(Role::MambaVector, Init::Conv, i, m + "conv1d.bias", {C}, g + "ssm_conv1d.bias");
          b.stddev = conv.stddev;
        }
        add(Role::MambaVector, Init::DtBias, i, m + "dt_bias", {nh}, g + "ssm_dt.bias");
        Weight& a = add(Role::MambaVector, Init::ALog, i, m + "A_log", {nh}, g + "ssm_a");
        a.ne = {1, nh}, a.fan_in = 1, a.view_name = m + "A";
        Weight& dd = add(Role::MambaVector, Init::Ones, i, m + "D", {nh}, g + "ssm_d");
        dd.ne = {1, nh}, dd.fan_in = 1;
        Weight& n = add(Role::MambaVector, Init::Ones, i, m + "norm.weight", {d_in}, g + "ssm_norm.weight");
        n.ne = {d_in / s.n_groups, s.n_groups}, n.fan_in = n.ne[0];
        add(Role::MambaProj, Init::Linear, i, m + "out_proj.weight", {H, d_in}, g + "ssm_out.weight");
        break;
      }
      case LayerKind::Attention: {
        const AttentionDesc& a = l.attn;
        const int64_t q = int64_t(a.n_heads) * a.head_dim, kv = int64_t(a.n_kv_heads) * a.head_dim;
        add(Role::Attention, Init::Linear, i, m + "q_proj.weight", {q, H}, g + "attn_q.weight");
        add(Role::Attention, Init::Linear, i, m + "k_proj.weight", {kv, H}, g + "attn_k.weight");
        add(Role::Attention, Init::Linear, i, m + "v_proj.weight", {kv, H}, g + "attn_v.weight");
        add(Role::Attention, Init::Linear, i, m + "o_proj.weight", {H, q}, g + "attn_output.weight");
        break;
      }
      case LayerKind::MoE: {
        const MoEDesc& e = l.moe;
        add(Role::Router, Init::Linear, i, m + "gate.weight", {e.n_experts, H}, g + "ffn_gate_inp.weight");
        add(Role::RouterBias, Init::Zeros, i, m + "gate.e_score_correction_bias", {e.n_experts}, g + "exp_probs_b.bias");
        int64_t in = H;
        if (e.latent > 0) {
          in = e.latent;
          add(Role::Latent, Init::Linear, i, m + "fc1_latent_proj.weight", {in, H}, g + "ffn_latent_down.weight");
          add(Role::Latent, Init::Linear, i, m + "fc2_latent_proj.weight", {H, in}, g + "ffn_latent_up.weight");
        }
        for (auto [name, gguf, out, cols] : {std::tuple{"up_proj", "ffn_up_exps.weight", int64_t(e.width), in},
                                             std::tuple{"down_proj", "ffn_down_exps.weight", in, int64_t(e.width)}}) {
          Weight& x = add(Role::Routed, Init::Linear, i, m + "experts.{e}." + name + ".weight", {out, cols}, g + gguf);
          x.n_experts = e.n_experts;
          x.ne.push_back(e.n_experts);
        }
        if (e.shared_width > 0) {
          const int64_t sh = e.shared_width;
          add(Role::Shared, Init::Linear, i, m + "shared_experts.up_proj.weight", {sh, H}, g + "ffn_up_shexp.weight");
          add(Role::Shared, Init::Linear, i, m + "shared_experts.down_proj.weight", {H, sh}, g + "ffn_down_shexp.weight");
        }
        break;
      }
      case LayerKind::MLP: {
        const int64_t w = l.mlp.width;
        add(Role::Mlp, Init::Linear, i, m + "up_proj.weight", {w, H}, g + "ffn_up.weight");
        add(Role::Mlp, Init::Linear, i, m + "down_proj.weight", {H, w}, g + "ffn_down.weight");
        break;
      }
    }
  }

  const ModelDesc& d_;
  std::vector<Weight> w_;
};

StoredTensor stored(std::string name, const std::string& dtype, std::vector<int64_t> shape, int64_t row_len, int weight,
                    const Writer& writer) {
  const std::optional<TypeLayout> t = writer.type_layout(dtype);
  check(t.has_value(), "synth: tensor '", name, "': the ", writer.extension(), " writer cannot store type ", dtype);
  StoredTensor s;
  s.name = std::move(name);
  s.dtype = dtype;
  s.type_order = type_order(dtype);
  s.block_elems = t->block_elems;
  s.shape = std::move(shape);
  int64_t numel = 1;
  for (int64_t d : s.shape) numel *= d;
  check(row_len > 0 && row_len % t->block_elems == 0, "synth: tensor '", s.name, "': rows of ", row_len,
        " elements are not whole ", dtype, " blocks of ", t->block_elems);
  s.row_len = row_len;
  s.rows = numel / row_len;
  s.row_bytes = size_t(row_len / t->block_elems) * t->block_bytes;
  s.nbytes = size_t(s.rows) * s.row_bytes;
  s.weight = weight;
  return s;
}

// exl3-2: the bits of a linear, or 0 for a tensor that stays unquantized (spec/formats.md § 5.10).
int exl3_bits(Role role) {
  switch (role) {
    case Role::Routed: return 2;
    case Role::Head: return 6;
    case Role::MambaProj:
    case Role::Attention:
    case Role::Latent:
    case Role::Shared:
    case Role::Mlp: return 4;
    default: return 0;
  }
}

// The tensors of one EXL3 linear `name` ("….weight"): trellis [k/16, n/16, 16K] int16 with k = in and
// n = out padded to multiples of 128, suh [k] and svh [n] fp16, and the mul1 marker.
std::vector<StoredTensor> exl3_tensors(const Weight& w, const std::string& name, int weight, const Writer& writer) {
  const std::string base = name.substr(0, name.size() - std::string(".weight").size());
  const int K = exl3_bits(w.role);
  auto pad = [](int64_t d) { return (d + 127) / 128 * 128; };
  const int64_t n = pad(w.hf_shape[0]), k = pad(w.hf_shape[1]);
  std::vector<StoredTensor> out;
  auto part = [&](std::string suffix, const std::string& dtype, std::vector<int64_t> shape, int64_t row_len, int kind) {
    out.push_back(stored(base + suffix, dtype, std::move(shape), row_len, weight, writer));
    out.back().exl3_part = kind;
  };
  part(".trellis", "I16", {k / 16, n / 16, 16 * int64_t(K)}, 16 * int64_t(K), StoredTensor::kExl3Trellis);
  part(".suh", "F16", {k}, k, StoredTensor::kExl3Suh);
  part(".svh", "F16", {n}, n, StoredTensor::kExl3Svh);
  part(".mul1", "I32", {}, 1, StoredTensor::kExl3Mul1);
  return out;
}

// nvfp4: how a linear is stored (spec/formats.md § 6.3 item 4), or "" for one that stays dense.
std::string modelopt_storage(const Weight& w) {
  switch (w.role) {
    case Role::Routed:
    case Role::Shared: return w.fan_in % 64 == 0 ? "NVFP4" : "FP8";
    case Role::MambaProj:
    case Role::Attention:
    case Role::Latent:
    case Role::Mlp: return "FP8";
    default: return "";
  }
}

// The tensors of one ModelOpt linear `name` ("….weight") of [out, in] (§ 6.2): NVFP4 is weight U8
// [out, in/2], weight_scale F8_E4M3 [out, in/16], weight_scale_2 and input_scale F32 scalars; FP8 is
// weight F8_E4M3 [out, in], weight_scale and input_scale F32 scalars.
std::vector<StoredTensor> modelopt_tensors(const Weight& w, const std::string& name, int weight, const Writer& writer) {
  const std::string base = name.substr(0, name.size() - std::string(".weight").size());
  const int64_t out_dim = w.hf_shape[0], in = w.hf_shape[1];
  std::vector<StoredTensor> out;
  auto part = [&](std::string suffix, const std::string& dtype, std::vector<int64_t> shape, int64_t row_len, int kind) {
    out.push_back(stored(base + suffix, dtype, std::move(shape), row_len, weight, writer));
    out.back().modelopt_part = kind;
  };
  if (modelopt_storage(w) == "NVFP4") {
    part(".weight", "U8", {out_dim, in / 2}, in / 2, StoredTensor::kNvfp4Weight);
    part(".weight_scale", "F8_E4M3", {out_dim, in / 16}, in / 16, StoredTensor::kNvfp4BlockScale);
    part(".weight_scale_2", "F32", {}, 1, StoredTensor::kNvfp4GlobalScale);
  } else {
    part(".weight", "F8_E4M3", {out_dim, in}, in, StoredTensor::kFp8Weight);
    part(".weight_scale", "F32", {}, 1, StoredTensor::kFp8Scale);
  }
  part(".input_scale", "F32", {}, 1, StoredTensor::kInputScale);
  return out;
}

}  // namespace

double nvfp4_code_rms() { return std::sqrt(68.5 / 8.0); }  // (0 + .25 + 1 + 2.25 + 4 + 9 + 16 + 36) / 8
float nvfp4_weight_scale_2(double stddev) { return float(stddev / (nvfp4_code_rms() * kNvfp4BlockScale)); }
float fp8_weight_scale(double stddev) { return float(std::sqrt(3.0) * stddev / 448.0); }

const char* const kGgufMixTypes[] = {"Q8_0",   "Q6_K",   "Q5_K",  "Q4_K",    "IQ4_XS", "IQ4_NL", "IQ3_S",
                                     "IQ3_XXS", "IQ2_S", "IQ2_XS", "IQ2_XXS", "IQ1_M", "NVFP4"};
const int kGgufMixTypeCount = int(std::size(kGgufMixTypes));

namespace {
std::string lower(std::string s) {
  for (char& ch : s) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}
}  // namespace

std::string mix_label(const MixSpec& m) { return m.mix == Mix::GgufType ? "gguf-" + lower(m.gguf_type) : mix_name(m.mix); }

MixSpec parse_mix(const std::string& name) {
  const std::string low = lower(name);
  MixSpec m;
  if (low == "gguf-iq2") return m.mix = Mix::GgufIq2, m;
  if (low == "bf16") return m.mix = Mix::Bf16, m;
  if (low == "exl3-2") return m.mix = Mix::Exl3_2, m;
  if (low == "nvfp4") return m.mix = Mix::Nvfp4, m;
  std::string types;
  for (const char* t : kGgufMixTypes) {
    const std::string tl = lower(t);
    if (low == "gguf-" + tl) return m.mix = Mix::GgufType, m.gguf_type = t, m;
    types += (types.empty() ? "" : ", ") + tl;
  }
  fail("synth: unknown mix '", name, "' (expected gguf-iq2, bf16, exl3-2, nvfp4 or gguf-TYPE with TYPE one of ", types, ")");
}

const char* mix_name(Mix mix) {
  switch (mix) {
    case Mix::GgufIq2: return "gguf-iq2";
    case Mix::Bf16: return "bf16";
    case Mix::Exl3_2: return "exl3-2";
    case Mix::Nvfp4: return "nvfp4";
    case Mix::GgufType: return "gguf-type";
  }
  return "?";
}
bool is_gguf(Mix mix) { return mix == Mix::GgufIq2 || mix == Mix::GgufType; }
const char* mix_writer(Mix mix) { return is_gguf(mix) ? "gguf" : "safetensors"; }

std::shared_ptr<const Writer> find_writer(const std::string& name, PluginRegistry* registry) {
  static std::mutex mu;
  static std::unique_ptr<PluginRegistry> defaults;
  std::lock_guard<std::mutex> lock(mu);
  if (!registry && !defaults) {
    auto r = std::make_unique<PluginRegistry>();
    r->load_default();
    defaults = std::move(r);
  }
  PluginRegistry* reg = registry ? registry : defaults.get();
  const auto names = reg->names(TANDEM_KIND_WRITER);
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    fail("synth: no loaded plugin provides the '", name, "' writer (writers: ", list.empty() ? "none" : list, ")");
  }
  return reg->writer(name);
}

int64_t Weight::numel() const {
  int64_t n = 1;
  for (int64_t d : hf_shape) n *= d;
  return n * (n_experts > 0 ? n_experts : 1);
}

std::string Weight::expert_name(const std::string& pattern, int e) const {
  const size_t at = pattern.find("{e}");
  return at == std::string::npos ? pattern : pattern.substr(0, at) + std::to_string(e) + pattern.substr(at + 3);
}

Plan make_plan(const ModelDesc& desc, Mix mix, PluginRegistry* registry) {
  check(mix != Mix::GgufType, "synth: a gguf-TYPE mix needs its type (make_plan with a MixSpec)");
  MixSpec m;
  m.mix = mix;
  return make_plan(desc, m, registry);
}

Plan make_plan(const ModelDesc& desc, const MixSpec& spec, PluginRegistry* registry) {
  const Mix mix = spec.mix;
  check((mix == Mix::GgufType) == !spec.gguf_type.empty(), "synth: mix '", mix_label(spec),
        "': a block type goes with gguf-TYPE mixes only");
  Plan p;
  p.desc = desc;
  p.mix = mix;
  p.gguf_type = spec.gguf_type;
  p.mix_label = mix_label(spec);
  p.writer = find_writer(mix_writer(mix), registry);
  const Writer& writer = *p.writer;
  p.weights = Planner(desc).weights();
  for (size_t wi = 0; wi < p.weights.size(); ++wi) {
    const Weight& w = p.weights[wi];
    if (is_gguf(mix)) {
      const std::string type = gguf_type(w.role, w.fan_in, writer, p.gguf_type);
      p.tensors.push_back(stored(w.gguf_name, type, w.ne, w.fan_in, int(wi), writer));
      if (writer.companion_scale(type, 1.0)) {  // NVFP4: a per-tensor F32 `.scale` beside the blocks
        const std::string base = w.gguf_name.substr(0, w.gguf_name.size() - std::string(".weight").size());
        p.tensors.push_back(stored(base + ".scale", "F32", {1}, 1, int(wi), writer));
        p.tensors.back().scale = true;
        p.tensors.back().scale_of = type;
      }
    } else if (mix == Mix::Exl3_2 && exl3_bits(w.role) > 0) {
      for (int e = 0; e < std::max(w.n_experts, 1); ++e)
        for (StoredTensor& s : exl3_tensors(w, w.expert_name(w.hf_name, e), int(wi), writer)) {
          if (w.n_experts > 0) s.expert = e;
          p.tensors.push_back(std::move(s));
        }
    } else if (mix == Mix::Nvfp4 && !modelopt_storage(w).empty()) {
      for (int e = 0; e < std::max(w.n_experts, 1); ++e)
        for (StoredTensor& s : modelopt_tensors(w, w.expert_name(w.hf_name, e), int(wi), writer)) {
          if (w.n_experts > 0) s.expert = e;
          p.tensors.push_back(std::move(s));
        }
    } else {
      const std::string type = w.role == Role::RouterBias ? "F32" : "BF16";
      for (int e = 0; e < std::max(w.n_experts, 1); ++e) {
        p.tensors.push_back(stored(w.expert_name(w.hf_name, e), type, w.hf_shape, w.hf_shape.back(), int(wi), writer));
        if (w.n_experts > 0) p.tensors.back().expert = e;
      }
    }
  }

  Totals& t = p.totals;
  for (const Weight& w : p.weights) {
    t.params += w.numel();
    if (w.role == Role::Routed) {
      t.routed += w.numel();
      t.active += w.numel() / w.n_experts * desc.layers[size_t(w.layer)].moe.top_k;
    } else if (w.role != Role::Embedding) {
      t.active += w.numel();
    }
  }
  for (const StoredTensor& s : p.tensors) {
    const Weight& w = p.weights[size_t(s.weight)];
    t.bytes += s.nbytes;
    if (s.scale || (w.role != Role::Routed && w.role != Role::Embedding)) {
      t.decode_bytes += s.nbytes;
    } else if (w.role == Role::Routed) {
      // One stacked tensor of E experts (GGUF), or one tensor per expert (safetensors).
      const int k = desc.layers[size_t(w.layer)].moe.top_k;
      t.decode_bytes += s.expert < 0 ? s.nbytes / size_t(w.n_experts) * size_t(k) : 0;
      if (s.expert >= 0 && s.expert < k) t.decode_bytes += s.nbytes;
    } else {  // the embedding: one row, or all of it when it is the lm_head too
      t.decode_bytes += desc.tie_embeddings ? s.nbytes + s.row_bytes : s.row_bytes;
    }
  }
  return p;
}

}  // namespace tandem::synth
