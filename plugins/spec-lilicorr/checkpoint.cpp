// Loading a LiLiCorr / DFlash drafter checkpoint (checkpoint.h): config, tensors, names, geometry.
#include "checkpoint.h"

#include <rapidjson/document.h>
#include <rapidjson/error/en.h>

#include <cmath>
#include <cstring>
#include <set>
#include <spdlog/spdlog.h>

#include "formats/nvfp4/nvfp4_checkpoint.h"
#include "formats/safetensors/safetensors_checkpoint.h"
#include "tandem/error.h"
#include "tandem/json_depth.h"
#include "yarn.h"

namespace tandem::lilicorr {
namespace {

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

void replace_once(std::string& s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  if (at != std::string::npos) s.replace(at, from.size(), to);
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// config.json, looked up in dflash_config first and then at the top level (as `_draft_value` does).
class ConfigReader {
 public:
  ConfigReader(const std::string& json, const std::string& source) : source_(source) {
    check(json_depth(json) <= 64, source, ": JSON nested too deeply");
    doc_.Parse(json.c_str(), json.size());
    check(!doc_.HasParseError(), source, ": invalid JSON at offset ", doc_.GetErrorOffset(), ": ",
          rapidjson::GetParseError_En(doc_.GetParseError()));
    check(doc_.IsObject(), source, ": expected a JSON object");
    if (doc_.HasMember("dflash_config")) {
      check(doc_["dflash_config"].IsObject(), source, ": key 'dflash_config' must be an object");
      draft_ = &doc_["dflash_config"];
    }
  }
  const rapidjson::Value* find(const char* key, std::string* where = nullptr) const {
    if (draft_ && draft_->HasMember(key) && !(*draft_)[key].IsNull()) {
      if (where) *where = std::string("dflash_config.") + key;
      return &(*draft_)[key];
    }
    if (doc_.HasMember(key) && !doc_[key].IsNull()) {
      if (where) *where = key;
      return &doc_[key];
    }
    return nullptr;
  }
  bool has(const char* key) const { return find(key) != nullptr; }
  // The value of `key`, or nullptr when it is absent and `optional`; absent and required is an error.
  const rapidjson::Value* value(const char* key, bool optional, std::string& where) const {
    const rapidjson::Value* v = find(key, &where);
    check(v || optional, source_, ": key '", key, "' is required (in dflash_config or at the top level)");
    return v;
  }
  double number(const char* key, std::optional<double> fallback = std::nullopt) const {
    std::string where;
    const rapidjson::Value* v = value(key, fallback.has_value(), where);
    if (!v) return *fallback;
    check(v->IsNumber(), source_, ": key '", where, "' must be a number");
    return v->GetDouble();
  }
  int64_t integer(const char* key, std::optional<int64_t> fallback = std::nullopt) const {
    std::string where;
    const rapidjson::Value* v = value(key, fallback.has_value(), where);
    if (!v) return *fallback;
    check(v->IsInt64(), source_, ": key '", where, "' must be an integer");
    return v->GetInt64();
  }
  bool flag(const char* key, bool fallback) const {
    std::string where;
    const rapidjson::Value* v = find(key, &where);
    if (!v) return fallback;
    check(v->IsBool(), source_, ": key '", where, "' must be true or false");
    return v->GetBool();
  }
  std::string text(const char* key) const {
    std::string where;
    const rapidjson::Value* v = find(key, &where);
    if (!v) return "";
    check(v->IsString(), source_, ": key '", where, "' must be a string");
    return v->GetString();
  }
  const rapidjson::Document& doc() const { return doc_; }
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  rapidjson::Document doc_;
  const rapidjson::Value* draft_ = nullptr;
};

// Takes tensors out of the map, checking shapes; what remains at the end was not used.
class Taker {
 public:
  Taker(TensorMap& t, std::string source) : t_(t), source_(std::move(source)) {}
  bool has(const std::string& n) const { return t_.count(n) != 0; }
  const HostTensor& peek(const std::string& n) const {
    auto it = t_.find(n);
    check(it != t_.end(), source_, ": tensor '", n, "' is missing");
    return it->second;
  }
  std::vector<float> take(const std::string& n, const std::vector<int64_t>& shape) {
    auto it = t_.find(n);
    check(it != t_.end(), source_, ": tensor '", n, "' is missing (expected ", shape_str(shape), ")");
    check(it->second.shape == shape, source_, ": tensor '", n, "' is ", shape_str(it->second.shape), ", expected ",
          shape_str(shape));
    std::vector<float> d = std::move(it->second.data);
    t_.erase(it);
    return d;
  }
  // A tensor whose stored shape may carry extra 1-sized dimensions (TRT squeezes 5-D embeddings).
  std::vector<float> take_squeezed(const std::string& n, const std::vector<int64_t>& shape) {
    auto it = t_.find(n);
    check(it != t_.end(), source_, ": tensor '", n, "' is missing (expected ", shape_str(shape), ")");
    std::vector<int64_t> a, b;
    for (int64_t d : it->second.shape)
      if (d != 1) a.push_back(d);
    for (int64_t d : shape)
      if (d != 1) b.push_back(d);
    check(a == b, source_, ": tensor '", n, "' is ", shape_str(it->second.shape), ", expected ", shape_str(shape));
    std::vector<float> d = std::move(it->second.data);
    t_.erase(it);
    return d;
  }
  Linear linear(const std::string& prefix, int64_t out, int64_t in, bool bias) {
    return linear_named(prefix + ".weight", prefix + ".bias", out, in, bias);
  }
  // A linear whose weight and bias are named apart (nn.MultiheadAttention's in_proj_weight / _bias).
  Linear linear_named(const std::string& weight, const std::string& bias_name, int64_t out, int64_t in, bool bias) {
    Linear l;
    l.out = out, l.in = in;
    if (auto it = t_.find(weight); it != t_.end()) l.nvfp4 = it->second.nvfp4;
    l.w = take(weight, {out, in});
    if (bias) l.b = take(bias_name, {out});
    return l;
  }
  // Geometry checks: a config value against what a tensor holds.
  void agree(const char* key, double config, const std::string& tensor, double found) const {
    check(config == found, source_, ": config.json key '", key, "' is ", config, ", but tensor '", tensor, "' ",
          shape_str(peek(tensor).shape), " gives ", found);
  }
  const std::string& source() const { return source_; }

 private:
  TensorMap& t_;
  std::string source_;
};

int count_layers(const TensorMap& t, const std::string& prefix) {
  std::set<int> ids;
  for (const auto& kv : t)
    if (starts_with(kv.first, prefix)) {
      const std::string rest = kv.first.substr(prefix.size());
      const size_t dot = rest.find('.');
      if (dot != std::string::npos && dot > 0 && rest.find_first_not_of("0123456789") == dot)
        ids.insert(std::stoi(rest.substr(0, dot)));
    }
  return ids.empty() ? 0 : *ids.rbegin() + 1;
}

// rope_scaling (or transformers 5's rope_parameters): default, or yarn (yarn.h) as a frequency table.
void read_rope_scaling(const ConfigReader& r, BackboneConfig& b) {
  std::string key = "rope_scaling";
  const rapidjson::Value* rs = r.find("rope_scaling", &key);
  if (!rs) rs = r.find("rope_parameters", &key);
  if (!rs) return;
  const std::string& source = r.source();
  check(rs->IsObject(), source, ": key '", key, "' must be an object");
  auto num = [&](const char* k) -> std::optional<double> {
    if (!rs->HasMember(k) || (*rs)[k].IsNull()) return std::nullopt;
    check((*rs)[k].IsNumber(), source, ": key '", key, ".", k, "' must be a number");
    return (*rs)[k].GetDouble();
  };
  if (auto t = num("rope_theta")) b.rope_theta = *t;
  std::string type;
  for (const char* k : {"rope_type", "type"})
    if (rs->HasMember(k) && (*rs)[k].IsString()) type = (*rs)[k].GetString();
  if (type.empty() || type == "default") return;
  check(type == "yarn", source, ": key '", key, "' of type '", printable(type),
        "' is not supported (default or yarn RoPE)");
  YarnParams y;
  std::optional<double> orig = num("original_max_position_embeddings");
  if (!orig) {
    const rapidjson::Value* m = r.find("max_position_embeddings");
    if (m && m->IsNumber()) orig = m->GetDouble();
  }
  check(orig && *orig > 0, source, ": key '", key, ".original_max_position_embeddings' is required for yarn ",
        "(a positive number; or max_position_embeddings)");
  y.original_max_position_embeddings = *orig;
  std::optional<double> factor = num("factor");
  if (!factor) {
    const rapidjson::Value* m = r.find("max_position_embeddings");
    if (m && m->IsNumber()) factor = m->GetDouble() / *orig;
  }
  check(factor && *factor > 0, source, ": key '", key, ".factor' is required for yarn (a positive number)");
  y.factor = *factor;
  y.beta_fast = num("beta_fast").value_or(0.0);
  y.beta_slow = num("beta_slow").value_or(0.0);
  y.attention_factor = num("attention_factor");
  y.mscale = num("mscale");
  y.mscale_all_dim = num("mscale_all_dim");
  if (rs->HasMember("truncate")) {
    check((*rs)["truncate"].IsBool(), source, ": key '", key, ".truncate' must be true or false");
    y.truncate = (*rs)["truncate"].GetBool();
  }
  check(y.beta_fast >= 0 && y.beta_slow >= 0, source, ": key '", key, "': beta_fast and beta_slow must be >= 0");
  const RopeTable t = yarn_table(y, b.head_dim, b.rope_theta);
  for (float f : t.inv_freq)
    check(std::isfinite(f) && f > 0, source, ": key '", key, "' gives a frequency of ", f, " (factor ", y.factor, ")");
  check(std::isfinite(t.scale) && t.scale > 0, source, ": key '", key, "' gives an attention factor of ", t.scale);
  b.rope_inv_freq = t.inv_freq;
  b.rope_scale = t.scale;
}

}  // namespace

std::string serving_name(const std::string& head_name) {
  std::string n = head_name;
  if (starts_with(n, "feature_mlp.0.")) n.replace(0, 14, "feature_norm.");
  else if (starts_with(n, "feature_mlp.1.")) n.replace(0, 14, "feature_mlp.up_proj.");
  else if (starts_with(n, "feature_mlp.3.")) n.replace(0, 14, "feature_mlp.down_proj.");
  replace_once(n, ".mlp.0.", ".mlp.up_proj.");
  replace_once(n, ".mlp.2.", ".mlp.down_proj.");
  return n;
}

TensorMap read_tensors(const std::string& dir) {
  auto ck = safetensors::open_checkpoint(dir);
  const DrafterQuant q = read_quant(dir, ck->config_json());
  if (q.modelopt) {
    try {
      nvfp4::check_against_config(*ck, *q.modelopt);
    } catch (const Error& e) {
      fail("lilicorr: ", e.what());
    }
  }
  TensorMap out;
  std::map<std::string, std::string> from;  // normalised name → stored name
  int64_t mxfp4 = 0, nv = 0;
  std::string first_mx;
  for (ReadTensor& r : read_quantized(ck->tensors(), q)) {
    std::string name = starts_with(r.stored, "model.") ? r.stored.substr(6) : r.stored;
    if (starts_with(name, "lilicorr.")) name = "lilicorr." + serving_name(name.substr(9));
    auto [it, fresh] = from.emplace(name, r.stored);
    check(fresh, dir, ": tensors '", it->second, "' and '", r.stored, "' are both '", name, "' once renamed");
    if (r.mxfp4 && mxfp4++ == 0) first_mx = r.stored;
    nv += r.nvfp4 ? 1 : 0;
    out.emplace(name, HostTensor{std::move(r.shape), std::move(r.data), std::move(r.nvfp4)});
  }
  if (nv) spdlog::info("lilicorr: {}: {} NVFP4 modules (quantization per {})", dir, nv, q.file);
  if (mxfp4)
    spdlog::warn("lilicorr: {}: {} mxfp4 modules ('{}' first) dequantized to BF16: no weight format runs MXFP4", dir,
                 mxfp4, first_mx);
  return out;
}

DrafterConfig parse_config(const std::string& json, const std::string& source) {
  ConfigReader r(json, source);
  DrafterConfig c;
  BackboneConfig& b = c.backbone;
  b.hidden = r.integer("hidden_size");
  b.layers = int(r.integer("num_hidden_layers"));
  b.heads = int(r.integer("num_attention_heads"));
  b.kv_heads = int(r.integer("num_key_value_heads", b.heads));
  check(b.hidden > 0 && b.layers >= 1 && b.heads >= 1 && b.kv_heads >= 1 && b.heads % b.kv_heads == 0, source,
        ": need hidden_size > 0, num_hidden_layers >= 1 and num_attention_heads a multiple of num_key_value_heads");
  b.head_dim = int(r.integer("head_dim", b.hidden / b.heads));
  check(b.head_dim > 0 && b.head_dim % 2 == 0, source, ": key 'head_dim' must be even and positive, found ", b.head_dim);
  b.intermediate = r.integer("intermediate_size");
  b.eps = float(r.number("rms_norm_eps", 1e-6));
  b.rope_theta = r.number("rope_theta", 1e6);
  b.block = int(r.integer("block_size", 16));
  check(b.block >= 2 && b.block <= 64, source, ": key 'block_size' must be in [2, 64], found ", b.block);
  b.mask_token = int32_t(r.integer("mask_token_id"));
  b.embedding_scale = float(r.number("input_embedding_scale", 1.0));
  b.output_multiplier = float(r.number("output_multiplier", 1.0));
  b.softcap = float(r.number("final_logit_softcapping", 0.0));
  c.vocab = r.integer("vocab_size", 0);
  check(b.mask_token >= 0 && (c.vocab == 0 || b.mask_token < c.vocab), source, ": key 'mask_token_id' is ",
        b.mask_token, ", outside the vocabulary of ", c.vocab);
  const rapidjson::Value* ids = r.find("target_layer_ids");
  check(ids && ids->IsArray() && !ids->Empty(), source, ": key 'dflash_config.target_layer_ids' must be a non-empty list");
  for (const auto& v : ids->GetArray()) {
    check(v.IsInt() && v.GetInt() >= 0, source, ": key 'target_layer_ids' must hold layer numbers >= 0");
    b.target_layers.push_back(v.GetInt());
  }
  // What this reference does not run: refused by name rather than run wrong.
  check(!r.flag("causal", false) && !r.flag("is_causal", false), source,
        ": a causal drafter (causal / is_causal true) is not supported: LiLiCorr blocks are bidirectional");
  read_rope_scaling(r, b);
  if (const rapidjson::Value* lt = r.find("layer_types"); lt && lt->IsArray())
    for (const auto& v : lt->GetArray())
      check(v.IsString() && std::string(v.GetString()) == "full_attention", source,
            ": key 'layer_types': only full_attention layers are supported (sliding windows not yet)");
  for (const char* k : {"conv_kernel_size", "conv_group_size"})
    check(r.integer(k, 0) == 0, source, ": key '", k, "' (grouped convolutions) is not supported yet");

  HeadSettings& h = c.head;
  std::string arch;
  if (r.doc().HasMember("architectures") && r.doc()["architectures"].IsArray())
    for (const auto& v : r.doc()["architectures"].GetArray())
      if (v.IsString() && std::string(v.GetString()) == "LiLiCorrDraftModel") arch = "LiLiCorrDraftModel";
  h.declared = r.flag("lilicorr_enabled", false) || r.text("projector_type") == "lilicorr" || !arch.empty();
  const char* keys[] = {"lilicorr_candidate_topk", "lilicorr_hidden_size", "lilicorr_num_layers",
                        "lilicorr_num_heads", "lilicorr_mlp_ratio", "lilicorr_factor_dim",
                        "lilicorr_vector_eps", "lilicorr_logit_scale"};
  h.complete = true;
  for (const char* k : keys) h.complete = h.complete && r.has(k);
  if (h.complete) {
    h.topk = int(r.integer("lilicorr_candidate_topk"));
    h.hidden = r.integer("lilicorr_hidden_size");
    h.layers = int(r.integer("lilicorr_num_layers"));
    h.heads = int(r.integer("lilicorr_num_heads"));
    h.mlp_ratio = r.number("lilicorr_mlp_ratio");
    h.factor = r.integer("lilicorr_factor_dim");
    h.vector_eps = r.number("lilicorr_vector_eps");
    h.logit_scale = r.number("lilicorr_logit_scale");
    check(h.topk >= 1 && h.hidden >= 0 && h.layers >= 1 && h.heads >= 1 && h.mlp_ratio > 0 && h.factor >= 1 &&
              h.vector_eps > 0 && h.vector_eps < 0.5 && h.logit_scale > 0,
          source, ": the lilicorr_* keys must be positive (lilicorr_hidden_size may be 0, lilicorr_vector_eps < 0.5)");
  }
  return c;
}

HeadWeights build_head(const HeadSettings& s, int block, float rms_eps, int64_t model_hidden, TensorMap& tensors,
                       const std::string& source) {
  Taker t(tensors, source);
  HeadWeights w;
  HeadConfig& c = w.c;
  c.model_hidden = model_hidden;
  c.block = block;
  c.rms_eps = rms_eps;
  c.vector_eps = float(s.vector_eps);
  c.logit_scale = float(s.logit_scale);
  const std::string p = "lilicorr.";
  // Geometry from the tensors, each compared with its config key.
  c.hidden = t.peek(p + "pass_hidden_proj.weight").shape.at(0);
  t.agree("lilicorr_hidden_size", double(s.hidden ? s.hidden : model_hidden), p + "pass_hidden_proj.weight",
          double(c.hidden));
  const int64_t Hh = c.hidden;
  c.topk = int(numel(t.peek(p + "rank_embedding").shape) / Hh);
  t.agree("lilicorr_candidate_topk", s.topk, p + "rank_embedding", c.topk);
  t.agree("block_size", block - 1, p + "slot_embedding", double(numel(t.peek(p + "slot_embedding").shape) / Hh));
  c.heads = int(numel(t.peek(p + "same_slot_bias").shape));
  t.agree("lilicorr_num_heads", s.heads, p + "same_slot_bias", c.heads);
  check(Hh % c.heads == 0, source, ": lilicorr head width ", Hh, " is not a multiple of its ", c.heads, " heads");
  c.layers = count_layers(tensors, p + "layers.");
  check(c.layers == s.layers, source, ": config.json key 'lilicorr_num_layers' is ", s.layers, ", but the tensors hold ",
        c.layers, " layers (lilicorr.layers.*)");
  c.mlp = t.peek(p + "layers.0.mlp.up_proj.weight").shape.at(0);
  t.agree("lilicorr_mlp_ratio", double(int64_t(double(Hh) * s.mlp_ratio)), p + "layers.0.mlp.up_proj.weight",
          double(c.mlp));
  c.factor = t.peek(p + "out_head.weight").shape.at(0);
  t.agree("lilicorr_factor_dim", double(s.factor), p + "out_head.weight", double(c.factor));
  const int64_t H = model_hidden, S = block - 1, K = c.topk, F = c.factor;

  if (Hh != H) w.token_proj = t.linear(p + "token_proj", Hh, H, true);
  else check(!t.has(p + "token_proj.weight"), source, ": tensor 'lilicorr.token_proj.weight' present, but the head is ",
             "as wide as the backbone (", H, ")");
  w.pass_hidden_proj = t.linear(p + "pass_hidden_proj", Hh, H, true);
  w.context_proj = t.linear(p + "context_proj", Hh, H, true);
  w.feature_norm_w = t.take(p + "feature_norm.weight", {5});
  w.feature_norm_b = t.take(p + "feature_norm.bias", {5});
  w.feature_up = t.linear(p + "feature_mlp.up_proj", Hh, 5, true);
  w.feature_down = t.linear(p + "feature_mlp.down_proj", Hh, Hh, true);
  w.slot_embedding = t.take_squeezed(p + "slot_embedding", {1, 1, S, 1, Hh});
  w.rank_embedding = t.take_squeezed(p + "rank_embedding", {1, 1, 1, K, Hh});
  w.relative_slot_bias = t.take(p + "relative_slot_bias", {c.heads, 2 * int64_t(block) - 1});
  w.same_slot_bias = t.take(p + "same_slot_bias", {c.heads});
  for (int j = 0; j < c.layers; ++j) {
    const std::string q = p + "layers." + std::to_string(j) + ".";
    HeadLayer L;
    L.attn_norm = t.take(q + "attn_norm.weight", {Hh});
    L.mlp_norm = t.take(q + "mlp_norm.weight", {Hh});
    L.in_proj = t.linear_named(q + "attn.in_proj_weight", q + "attn.in_proj_bias", 3 * Hh, Hh, true);
    L.out_proj = t.linear(q + "attn.out_proj", Hh, Hh, true);
    L.up = t.linear(q + "mlp.up_proj", c.mlp, Hh, true);
    L.down = t.linear(q + "mlp.down_proj", Hh, c.mlp, true);
    w.layers.push_back(std::move(L));
  }
  w.output_norm = t.take(p + "output_norm.weight", {Hh});
  w.anchor_norm = t.take(p + "anchor_norm.weight", {Hh});
  w.factor_input_proj = t.linear(p + "factor_input_proj", Hh, 3 * Hh, true);
  w.out_head = t.linear(p + "out_head", F, Hh, true);
  w.in_head = t.linear(p + "in_head", F, Hh, true);
  w.anchor_out_head = t.linear(p + "anchor_out_head", F, Hh, true);
  return w;
}

DrafterWeights build_weights(const DrafterConfig& config, TensorMap tensors, const std::string& source) {
  DrafterWeights out;
  out.path = source;
  BackboneWeights& w = out.backbone;
  w.c = config.backbone;
  BackboneConfig& c = w.c;
  Taker t(tensors, source);
  const int64_t H = c.hidden, n = int64_t(c.target_layers.size());
  t.agree("hidden_size", double(H), "fc.weight", double(t.peek("fc.weight").shape.at(0)));
  t.agree("target_layer_ids (count × hidden_size)", double(n * H), "fc.weight",
          double(t.peek("fc.weight").shape.at(1)));
  w.fc = t.linear("fc", H, n * H, false);
  w.hidden_norm = t.take("hidden_norm.weight", {H});
  w.norm = t.take("norm.weight", {H});
  const int found = count_layers(tensors, "layers.");
  check(found == c.layers, source, ": config.json key 'num_hidden_layers' is ", c.layers, ", but the tensors hold ",
        found, " layers (layers.*)");
  const std::string a = "layers.0.self_attn.";
  t.agree("head_dim", c.head_dim, a + "q_norm.weight", double(numel(t.peek(a + "q_norm.weight").shape)));
  t.agree("num_attention_heads × head_dim", double(c.heads) * c.head_dim, a + "q_proj.weight",
          double(t.peek(a + "q_proj.weight").shape.at(0)));
  t.agree("num_key_value_heads × head_dim", double(c.kv_heads) * c.head_dim, a + "k_proj.weight",
          double(t.peek(a + "k_proj.weight").shape.at(0)));
  t.agree("intermediate_size", double(c.intermediate), "layers.0.mlp.gate_proj.weight",
          double(t.peek("layers.0.mlp.gate_proj.weight").shape.at(0)));
  const bool bias = t.has(a + "q_proj.bias");
  const int64_t qd = int64_t(c.heads) * c.head_dim, kd = int64_t(c.kv_heads) * c.head_dim;
  for (int l = 0; l < c.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    BackboneLayer L;
    L.input_norm = t.take(p + "input_layernorm.weight", {H});
    L.post_norm = t.take(p + "post_attention_layernorm.weight", {H});
    L.q_norm = t.take(p + "self_attn.q_norm.weight", {c.head_dim});
    L.k_norm = t.take(p + "self_attn.k_norm.weight", {c.head_dim});
    L.q = t.linear(p + "self_attn.q_proj", qd, H, bias);
    L.k = t.linear(p + "self_attn.k_proj", kd, H, bias);
    L.v = t.linear(p + "self_attn.v_proj", kd, H, bias);
    L.o = t.linear(p + "self_attn.o_proj", H, qd, bias);
    L.gate = t.linear(p + "mlp.gate_proj", c.intermediate, H, false);
    L.up = t.linear(p + "mlp.up_proj", c.intermediate, H, false);
    L.down = t.linear(p + "mlp.down_proj", H, c.intermediate, false);
    w.layers.push_back(std::move(L));
  }
  bool head = false;
  for (const auto& kv : tensors) head = head || starts_with(kv.first, "lilicorr.");
  if (head) {
    check(config.head.complete, source, ": lilicorr.* tensors are present, but config.json lacks lilicorr_* keys ",
          "(candidate_topk, hidden_size, num_layers, num_heads, mlp_ratio, factor_dim, vector_eps, logit_scale)");
    out.head = build_head(config.head, c.block, c.eps, H, tensors, source);
  }
  if (t.has("embed_tokens.weight")) {
    // An own table: it embeds the block's rows; the candidates use the target's (as SGLang, vLLM).
    const std::vector<int64_t> shape = t.peek("embed_tokens.weight").shape;
    check(shape.size() == 2 && shape[0] > 0 && shape[1] == H, source, ": tensor 'embed_tokens.weight' is ",
          shape_str(shape), ", expected [vocab, ", H, "] (hidden_size)");
    if (config.vocab) t.agree("vocab_size", double(config.vocab), "embed_tokens.weight", double(shape[0]));
    out.embed = t.linear("embed_tokens", shape[0], H, false);
  }
  if (!tensors.empty())
    fail(source, ": tensor '", tensors.begin()->first, "' ", shape_str(tensors.begin()->second.shape),
         " is not part of the DFlash/LiLiCorr layout (", tensors.size(), " unused)");
  return out;
}

std::shared_ptr<const DrafterWeights> load_drafter(const std::string& dir) {
  auto ck = safetensors::open_checkpoint(dir);
  const DrafterConfig config = parse_config(ck->config_json(), dir + "/config.json");
  ck.reset();
  auto w = std::make_shared<DrafterWeights>(build_weights(config, read_tensors(dir), dir));
  if (!w->head) {
    if (config.head.declared)
      spdlog::warn("lilicorr: {} declares a LiLiCorr head but holds no lilicorr.* tensors: the backbone's per-slot "
                   "argmax drafts",
                   dir);
    else
      spdlog::info("lilicorr: {} has no LiLiCorr head: the DFlash backbone's per-slot argmax drafts", dir);
  }
  return w;
}

}  // namespace tandem::lilicorr
