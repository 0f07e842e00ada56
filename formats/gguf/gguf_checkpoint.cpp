// GGUF checkpoint: ggml tensor names → HF names and PyTorch shapes (spec/nemotron_h.md § 10.3), and
// the inspect listing.
#include "gguf_checkpoint.h"

#include <cstdio>
#include <cstring>
#include <fstream>

#include "gguf_tokenizer.h"
#include "tandem/error.h"

namespace tandem::gguf {
namespace {

struct Rename {
  const char* ggml;
  const char* hf;
};

// Bases under blk.i.; their suffix (.weight, .bias, .scale, .input_scale) carries over.
constexpr Rename kLayerBases[] = {
    {"attn_norm", "norm"},
    {"ssm_in", "mixer.in_proj"},
    {"ssm_conv1d", "mixer.conv1d"},
    {"ssm_norm", "mixer.norm"},
    {"ssm_out", "mixer.out_proj"},
    {"attn_q", "mixer.q_proj"},
    {"attn_k", "mixer.k_proj"},
    {"attn_v", "mixer.v_proj"},
    {"attn_output", "mixer.o_proj"},
    {"ffn_up", "mixer.up_proj"},
    {"ffn_down", "mixer.down_proj"},
    {"ffn_gate_inp", "mixer.gate"},
    {"ffn_latent_down", "mixer.fc1_latent_proj"},
    {"ffn_latent_up", "mixer.fc2_latent_proj"},
    {"ffn_up_shexp", "mixer.shared_experts.up_proj"},
    {"ffn_down_shexp", "mixer.shared_experts.down_proj"},
};
// Whole names under blk.i. that HF stores as plain vectors.
constexpr Rename kLayerVectors[] = {
    {"ssm_dt.bias", "mixer.dt_bias"},
    {"ssm_a", "mixer.A"},  // already −exp(A_log); the mamba2 plugin accepts A
    {"ssm_d", "mixer.D"},
    {"exp_probs_b.bias", "mixer.gate.e_score_correction_bias"},
};
constexpr Rename kTopBases[] = {
    {"token_embd", "backbone.embeddings"},
    {"output_norm", "backbone.norm_f"},
    {"output", "lm_head"},
};
// Stacked experts {in, out, E}: one [out, in] view per expert.
constexpr Rename kExperts[] = {{"ffn_up_exps", "up_proj"}, {"ffn_down_exps", "down_proj"}};
constexpr const char* kSuffixes[] = {"weight", "bias", "scale", "input_scale"};

template <size_t N>
const char* lookup(const Rename (&table)[N], const std::string& ggml) {
  for (const auto& r : table)
    if (ggml == r.ggml) return r.hf;
  return nullptr;
}

// "blk.12.ssm_in.weight" → (12, "ssm_in.weight"); -1 for other names.
int layer_of(const std::string& name, std::string& rest) {
  if (name.compare(0, 4, "blk.") != 0) return -1;
  size_t i = 4;
  int64_t layer = 0;
  while (i < name.size() && i < 13 && name[i] >= '0' && name[i] <= '9') layer = layer * 10 + (name[i++] - '0');
  if (i == 4 || i >= name.size() || name[i] != '.') return -1;
  rest = name.substr(i + 1);
  return layer <= INT32_MAX ? int(layer) : -1;
}

// "ssm_in.weight" → ("ssm_in", "weight"); suffix "" when the name has none of kSuffixes.
void split_suffix(const std::string& name, std::string& base, std::string& suffix) {
  for (const char* s : kSuffixes) {
    const size_t n = std::strlen(s);
    if (name.size() > n + 1 && name.compare(name.size() - n, n, s) == 0 && name[name.size() - n - 1] == '.') {
      base = name.substr(0, name.size() - n - 1);
      suffix = s;
      return;
    }
  }
  base = name;
  suffix.clear();
}

std::vector<int64_t> reversed(const std::vector<int64_t>& ne) { return {ne.rbegin(), ne.rend()}; }

std::string value_text(const Value& v, size_t max_elems) {
  auto element = [&](size_t i) -> std::string {
    switch (v.elem) {
      case ValueType::STRING: {
        const std::string& s = v.strings[i];
        std::string q = "\"" + printable(s.size() > 80 ? s.substr(0, 80) : s) + (s.size() > 80 ? "…" : "") + "\"";
        return q;
      }
      case ValueType::F32: case ValueType::F64: {
        char b[32];
        std::snprintf(b, sizeof b, "%.9g", v.floats[i]);
        return b;
      }
      case ValueType::BOOL: return v.ints[i] ? "true" : "false";
      case ValueType::I8: case ValueType::I16: case ValueType::I32: case ValueType::I64:
        return std::to_string(int64_t(v.ints[i]));
      default: return std::to_string(v.ints[i]);
    }
  };
  if (!v.is_array()) return element(0);
  std::string s = "[";
  for (size_t i = 0; i < v.size() && i < max_elems; ++i) s += (i ? ", " : "") + element(i);
  if (v.size() > max_elems) s += ", … " + std::to_string(v.size() - max_elems) + " more";
  return s + "]";
}

}  // namespace

GgufCheckpoint::GgufCheckpoint(std::unique_ptr<GgufFile> file) : file_(std::move(file)) {
  // A vocabulary-only file (no tensors, any architecture) still opens, for its tokenizer; asking it
  // for a model config is what fails.
  if (file_->tensors().empty()) return;
  arch_ = read_architecture(*file_);
  config_ = hf_config_json(arch_);
  for (const TensorInfo& t : file_->tensors()) add_tensor(t);
}

std::string GgufCheckpoint::config_json() const {
  if (config_.empty()) return hf_config_json(read_architecture(*file_));
  return config_;
}

const RawTensor* GgufCheckpoint::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void GgufCheckpoint::add(RawTensor t, const std::string& ggml_name) {
  t.file = file_->path();
  auto [it, fresh] = index_.emplace(t.name, tensors_.size());
  check(fresh, "gguf: file '", file_->path(), "': tensor '", printable(ggml_name), "' maps to '", t.name,
        "', which another tensor already provides");
  tensors_.push_back(std::move(t));
}

void GgufCheckpoint::add_tensor(const TensorInfo& t) {
  const std::string at = "gguf: file '" + file_->path() + "': tensor '" + printable(t.name) + "': ";
  RawTensor r{"", t.type->name, reversed(t.ne), t.data, size_t(t.nbytes), ""};
  std::string rest, base, suffix;
  const int layer = layer_of(t.name, rest);
  const int n_layers = int(arch_.model.layers.size());
  if (layer < 0) {
    split_suffix(t.name, base, suffix);
    const char* hf = lookup(kTopBases, base);
    r.name = hf ? std::string(hf) + (suffix.empty() ? "" : "." + suffix) : t.name;
    return add(std::move(r), t.name);
  }
  if (layer >= n_layers) return;  // appended MTP blocks are not part of the trunk
  const std::string prefix = "backbone.layers." + std::to_string(layer) + ".";
  if (const char* hf = lookup(kLayerVectors, rest)) {
    r.name = prefix + hf;
    r.shape = {t.numel()};
    return add(std::move(r), t.name);
  }
  split_suffix(rest, base, suffix);
  const std::string dot_suffix = suffix.empty() ? "" : "." + suffix;

  if (const char* hf = lookup(kExperts, base)) {
    const std::string expert_prefix = prefix + "mixer.experts.";
    if (suffix == "weight") {
      check(t.ne.size() == 3 && t.ne[2] > 0, at, "expected stacked experts {in, out, n_experts}, found ne ",
            shape_str(t.ne));
      const size_t per = size_t(t.nbytes / uint64_t(t.ne[2]));
      for (int64_t j = 0; j < t.ne[2]; ++j)
        add(RawTensor{expert_prefix + std::to_string(j) + "." + hf + ".weight", t.type->name, {t.ne[1], t.ne[0]},
                      t.data + size_t(j) * per, per, ""},
            t.name);
      return;
    }
    if (suffix == "scale" || suffix == "input_scale") {
      // NVFP4 per-tensor scales: one per expert, or one shared by all.
      const TensorInfo* w = file_->find("blk." + std::to_string(layer) + "." + base + ".weight");
      check(w && w->ne.size() == 3, at, "a per-expert scale needs the stacked tensor '", base, ".weight' beside it");
      check(t.type->id == 0 && (t.numel() == 1 || t.numel() == w->ne[2]), at, "expected F32 with 1 or ", w->ne[2],
            " values (one per expert), found ", t.type->name, " ", shape_str(t.ne));
      for (int64_t j = 0; j < w->ne[2]; ++j)
        add(RawTensor{expert_prefix + std::to_string(j) + "." + hf + "." + suffix, "F32", {},
                      t.data + (t.numel() == 1 ? 0 : size_t(j) * 4), 4, ""},
            t.name);
      return;
    }
  }
  if (base == "attn_qkv") {
    // Fused q/k/v: three row ranges. Sidecar scales apply to all three.
    const LayerDesc& l = arch_.model.layers[size_t(layer)];
    check(l.kind == LayerKind::Attention, at, "fused attention weights in a ", layer_kind_name(l.kind), " layer");
    const int64_t q = int64_t(l.attn.n_heads) * l.attn.head_dim, kv = int64_t(l.attn.n_kv_heads) * l.attn.head_dim;
    static const char* kParts[] = {"q_proj", "k_proj", "v_proj"};
    if (suffix != "weight") {
      for (const char* p : kParts) add(RawTensor{prefix + "mixer." + p + dot_suffix, r.dtype, r.shape, r.data, r.nbytes, ""}, t.name);
      return;
    }
    check(t.ne.size() == 2 && t.ne[1] == q + 2 * kv, at, "expected ne {hidden, ", q + 2 * kv,
          "} for fused q/k/v of ", l.attn.n_heads, "+2×", l.attn.n_kv_heads, " heads of ", l.attn.head_dim,
          ", found ", shape_str(t.ne));
    const size_t row = size_t(t.nbytes / uint64_t(t.ne[1]));
    const int64_t rows[] = {q, kv, kv};
    int64_t r0 = 0;
    for (int p = 0; p < 3; ++p) {
      add(RawTensor{prefix + "mixer." + kParts[p] + ".weight", r.dtype, {rows[p], t.ne[0]}, t.data + size_t(r0) * row,
                    size_t(rows[p]) * row, ""},
          t.name);
      r0 += rows[p];
    }
    return;
  }
  if (const char* hf = lookup(kLayerBases, base)) {
    r.name = prefix + hf + dot_suffix;
    if (base == "ssm_norm" && suffix == "weight") r.shape = {t.numel()};  // {d_in/G, G} → [d_in]
    return add(std::move(r), t.name);
  }
  r.name = t.name;  // not a Nemotron-H tensor: keep the ggml name
  add(std::move(r), t.name);
}

std::optional<std::string> GgufCheckpoint::side_file(const std::string& name) const {
  if (name == "tokenizer.json") return tokenizer_json(file_->metadata());
  if (name == "tokenizer_config.json") return tokenizer_config_json(file_->metadata());
  return std::nullopt;
}

std::string GgufCheckpoint::dump() const {
  const GgufFile& f = *file_;
  std::string s = "GGUF v" + std::to_string(f.version()) + " file '" + f.path() + "': " +
                  std::to_string(f.metadata().entries().size()) + " metadata keys, " +
                  std::to_string(f.tensors().size()) + " tensors, alignment " + std::to_string(f.alignment()) +
                  ", data at offset " + std::to_string(f.data_offset()) + "\n";
  const int mtp = arch_.n_blocks - int(arch_.model.layers.size());
  s += "architecture " + arch_.name + ": " + std::to_string(arch_.model.layers.size()) + " layers, pattern " +
       arch_.model.pattern() + (mtp ? ", " + std::to_string(mtp) + " MTP block(s) (not loaded)" : "") + "\n";
  s += "metadata:\n";
  for (const auto& [key, v] : f.metadata().entries())
    s += "  " + printable(key) + ": " + v.type_name() + " = " + value_text(v, 8) + "\n";
  s += "tensors (ggml name, type, ne, offset in the data section, bytes):\n";
  for (const TensorInfo& t : f.tensors())
    s += "  " + printable(t.name) + "  " + t.type->name + "  " + shape_str(t.ne) + "  " + std::to_string(t.offset) +
         "  " + std::to_string(t.nbytes) + "\n";
  return s;
}

std::unique_ptr<GgufCheckpoint> open_checkpoint(const std::string& path) {
  return std::make_unique<GgufCheckpoint>(GgufFile::open(path));
}

int probe_checkpoint(const std::string& path) {
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".gguf") == 0) return 100;
  std::ifstream f(path, std::ios::binary);
  char magic[4] = {};
  if (!f.read(magic, 4)) return 0;
  return std::memcmp(magic, kMagic, 4) == 0 ? 100 : 0;
}

}  // namespace tandem::gguf
