// Streaming GGUF and HF-folder writers for synthetic models, and the GGUF metadata llama.cpp reads
// for nemotron_h_moe (spec/nemotron_h.md § 10.1, spec/formats.md § 2.3 and § 2.5).
#include "synth_write.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "formats/gguf/gguf_writer.h"
#include "formats/safetensors/safetensors_writer.h"
#include "synth_data.h"
#include "synth_model.h"
#include "tandem/error.h"
#include "tandem/text/tokenizer.h"

namespace tandem::synth {
namespace {

constexpr size_t kChunkBytes = size_t(64) << 20;
constexpr int kSpecialTokens = 1000;

class File {
 public:
  explicit File(const std::string& path) : path_(path), f_(std::fopen(path.c_str(), "wb")) {
    check(f_ != nullptr, "synth: cannot create '", path, "'");
    std::setvbuf(f_, nullptr, _IOFBF, size_t(1) << 20);
  }
  ~File() {
    if (f_) std::fclose(f_);
  }
  void write(const void* p, size_t n) {
    check(std::fwrite(p, 1, n, f_) == n, "synth: cannot write '", path_, "' (disk full?)");
  }
  void zeros(size_t n) {
    static const uint8_t z[256] = {};
    while (n) {
      const size_t k = std::min(n, sizeof z);
      write(z, k);
      n -= k;
    }
  }
  void close() {
    const int rc = std::fclose(f_);
    f_ = nullptr;
    check(rc == 0, "synth: cannot write '", path_, "' (disk full?)");
  }

 private:
  std::string path_;
  std::FILE* f_;
};

// Streams the rows of plan.tensors[i] into the file, a chunk at a time.
void write_tensor(const Plan& plan, size_t i, uint64_t seed, File& f, std::vector<uint8_t>& buf, size_t& done,
                  const Progress& progress) {
  const StoredTensor& t = plan.tensors[i];
  const int64_t chunk_rows = std::max<int64_t>(1, int64_t(kChunkBytes / std::max<size_t>(t.row_bytes, 1)));
  for (int64_t r0 = 0; r0 < t.rows; r0 += chunk_rows) {
    const int64_t r1 = std::min(t.rows, r0 + chunk_rows);
    buf.resize(size_t(r1 - r0) * t.row_bytes);
    generate_rows_parallel(plan, t, stream_id(seed, i), r0, r1, buf.data());
    f.write(buf.data(), buf.size());
    done += buf.size();
    if (progress) progress(done, plan.totals.bytes);
  }
}

std::vector<int32_t> per_layer(const ModelDesc& d, int (*f)(const LayerDesc&)) {
  std::vector<int32_t> v;
  for (const LayerDesc& l : d.layers) v.push_back(f(l));
  return v;
}

}  // namespace

gguf::Metadata gguf_metadata(const Plan& plan, const std::string& name) {
  using gguf::Value;
  const ModelDesc& d = plan.desc;
  const std::string a = "nemotron_h_moe";
  gguf::Metadata m;
  m.set("general.architecture", Value::str(a));
  m.set("general.name", Value::str(name));
  m.set("general.file_type", Value::u32(19));  // LLAMA_FTYPE_MOSTLY_IQ2_XXS
  m.set("general.quantization_version", Value::u32(2));
  m.set("general.alignment", Value::u32(32));
  m.set(a + ".vocab_size", Value::u32(uint32_t(d.vocab)));
  m.set(a + ".context_length", Value::u32(uint32_t(d.max_positions)));
  m.set(a + ".embedding_length", Value::u32(uint32_t(d.hidden)));
  m.set(a + ".block_count", Value::u32(uint32_t(d.layers.size())));
  m.set(a + ".feed_forward_length",
        Value::i32s(per_layer(d, [](const LayerDesc& l) { return l.kind == LayerKind::MoE ? l.moe.width : 0; })));
  if (const LayerDesc* at = first_layer(d, LayerKind::Attention)) {
    m.set(a + ".attention.head_count", Value::u32(uint32_t(at->attn.n_heads)));
    m.set(a + ".attention.key_length", Value::u32(uint32_t(at->attn.head_dim)));
    m.set(a + ".attention.value_length", Value::u32(uint32_t(at->attn.head_dim)));
  }
  m.set(a + ".attention.head_count_kv",
        Value::i32s(per_layer(d, [](const LayerDesc& l) { return l.kind == LayerKind::Attention ? l.attn.n_kv_heads : 0; })));
  m.set(a + ".attention.layer_norm_rms_epsilon", Value::f32(d.eps));
  m.set(a + ".attention.layer_norm_epsilon", Value::f32(d.eps));
  if (const LayerDesc* mb = first_layer(d, LayerKind::Mamba)) {
    const MambaDesc& s = mb->mamba;
    m.set(a + ".ssm.conv_kernel", Value::u32(uint32_t(s.conv_kernel)));
    m.set(a + ".ssm.inner_size", Value::u32(uint32_t(s.d_inner())));
    m.set(a + ".ssm.state_size", Value::u32(uint32_t(s.state_size)));
    m.set(a + ".ssm.time_step_rank", Value::u32(uint32_t(s.n_heads)));
    m.set(a + ".ssm.group_count", Value::u32(uint32_t(s.n_groups)));
  }
  if (const LayerDesc* e = first_layer(d, LayerKind::MoE)) {
    const MoEDesc& x = e->moe;
    // One expert count and width for all layers where llama.cpp's scalar keys can say so; per-layer
    // arrays (0 on other layers) for Bolt's varying ones.
    if (moe_uniform(d)) {
      m.set(a + ".expert_count", Value::u32(uint32_t(x.n_experts)));
      m.set(a + ".expert_feed_forward_length", Value::u32(uint32_t(x.width)));
    } else {
      m.set(a + ".expert_count",
            Value::i32s(per_layer(d, [](const LayerDesc& l) { return l.kind == LayerKind::MoE ? l.moe.n_experts : 0; })));
      m.set(a + ".expert_feed_forward_length", Value::i32s(per_layer(d, [](const LayerDesc& l) {
              return l.kind == LayerKind::MoE ? l.moe.width : 0;
            })));
    }
    m.set(a + ".expert_used_count", Value::u32(uint32_t(x.top_k)));
    m.set(a + ".expert_shared_feed_forward_length", Value::u32(uint32_t(x.shared_width)));
    m.set(a + ".expert_shared_count", Value::u32(uint32_t(x.n_shared)));
    m.set(a + ".expert_weights_norm", Value::boolean(x.norm_topk_prob));
    m.set(a + ".expert_weights_scale", Value::f32(x.scaling));
    m.set(a + ".expert_group_count", Value::u32(uint32_t(x.n_group)));
    m.set(a + ".expert_group_used_count", Value::u32(uint32_t(x.topk_group)));
    if (x.latent > 0) m.set(a + ".moe_latent_size", Value::u32(uint32_t(x.latent)));
  }

  check(d.vocab >= kSpecialTokens + 256, "synth: a vocabulary of ", d.vocab, " tokens is too small for ",
        kSpecialTokens, " special tokens and 256 bytes");
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int i = 0; i < d.vocab; ++i) {
    if (i < kSpecialTokens) {
      const char* named[] = {"<unk>", "<s>", "</s>"};
      std::string special = "<SPECIAL_";
      special += std::to_string(i);
      special += ">";
      tokens.push_back(i < 3 ? named[i] : i == 10 ? "<|im_start|>" : i == 11 ? "<|im_end|>" : special);
      types.push_back(i == 0 ? 2 : 3);  // UNKNOWN, CONTROL
    } else if (i < kSpecialTokens + 256) {
      tokens.push_back(byte_level_symbol(i - kSpecialTokens));
      types.push_back(1);  // NORMAL
    } else {
      tokens.push_back(std::to_string(i));
      tokens.back().insert(tokens.back().begin(), 'w');
      types.push_back(1);
    }
  }
  m.set("tokenizer.ggml.model", Value::str("gpt2"));
  m.set("tokenizer.ggml.pre", Value::str("pixtral"));
  m.set("tokenizer.ggml.tokens", Value::strs(std::move(tokens)));
  m.set("tokenizer.ggml.token_type", Value::i32s(types));
  m.set("tokenizer.ggml.merges", Value::strs({}));
  m.set("tokenizer.ggml.bos_token_id", Value::u32(1));
  m.set("tokenizer.ggml.eos_token_id", Value::u32(2));
  m.set("tokenizer.ggml.unknown_token_id", Value::u32(0));
  m.set("tokenizer.ggml.padding_token_id", Value::u32(0));
  m.set("tokenizer.ggml.add_bos_token", Value::boolean(false));
  return m;
}

std::string plan_config_json(const Plan& plan) {
  std::string cfg = config_json(plan.desc);
  if (plan.mix != Mix::Exl3_2) return cfg;
  // As exllamav3 writes it (spec/formats.md § 5.2); the loader infers format, K and codebook from the
  // tensors themselves.
  const size_t end = cfg.rfind('}');
  check(end != std::string::npos, "synth: config.json text has no closing brace");
  return cfg.substr(0, end) +
         ", \"quantization_config\": {\"quant_method\": \"exl3\", \"version\": \"0.0.0\", \"bits\": 2.0, "
         "\"head_bits\": 6, \"calibration\": {\"rows\": 0, \"cols\": 0}, \"out_scales\": \"never\", "
         "\"codebook\": \"mul1\"}}";
}

void write_gguf(const Plan& plan, const std::string& path, uint64_t seed, const Progress& progress) {
  check(plan.mix == Mix::GgufIq2, "synth: write_gguf needs the gguf-iq2 mix, found ", mix_name(plan.mix));
  std::vector<gguf::TensorLayout> layout;
  for (const StoredTensor& t : plan.tensors) layout.push_back({t.name, t.ggml_type, t.shape});
  const gguf::GgufHeader h =
      gguf::serialize_gguf_header(gguf_metadata(plan, "tandem synthetic model (random weights)"), layout);
  File f(path);
  f.write(h.bytes.data(), h.bytes.size());
  std::vector<uint8_t> buf;
  size_t done = 0;
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    write_tensor(plan, i, seed, f, buf, done, progress);
    const size_t n = plan.tensors[i].nbytes;
    f.zeros(size_t((n + h.alignment - 1) / h.alignment * h.alignment) - n);
  }
  f.close();
}

void write_hf_folder(const Plan& plan, const std::string& dir, uint64_t seed, size_t shard_bytes,
                     const Progress& progress) {
  check(plan.mix != Mix::GgufIq2, "synth: write_hf_folder needs an HF mix (bf16, exl3-2), found ", mix_name(plan.mix));
  std::filesystem::create_directories(dir);
  // Shards in tensor order, each up to shard_bytes.
  std::vector<std::vector<size_t>> shards(1);
  size_t bytes = 0;
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    if (bytes > 0 && bytes + plan.tensors[i].nbytes > shard_bytes) shards.emplace_back(), bytes = 0;
    shards.back().push_back(i);
    bytes += plan.tensors[i].nbytes;
  }
  std::vector<std::pair<std::string, std::string>> weight_map;
  std::vector<uint8_t> buf;
  size_t done = 0;
  for (size_t s = 0; s < shards.size(); ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
    std::vector<safetensors::TensorLayout> layout;
    for (size_t i : shards[s]) {
      const StoredTensor& t = plan.tensors[i];
      layout.push_back({t.name, t.dtype, t.shape});
      weight_map.emplace_back(t.name, name);
    }
    const std::string head = safetensors::serialize_header(layout);
    File f((std::filesystem::path(dir) / name).string());
    f.write(head.data(), head.size());
    for (size_t i : shards[s]) write_tensor(plan, i, seed, f, buf, done, progress);
    f.close();
  }
  safetensors::write_index((std::filesystem::path(dir) / "model.safetensors.index.json").string(), weight_map);
  std::ofstream cfg(std::filesystem::path(dir) / "config.json", std::ios::trunc);
  cfg << plan_config_json(plan) << "\n";
  cfg.close();
  check(bool(cfg), "synth: cannot write '", (std::filesystem::path(dir) / "config.json").string(), "'");
}

}  // namespace tandem::synth
