// Helpers for the GGUF container tests: temp folders, error checks, a device-only backend, the
// plugins and a placeholder vocabulary for end-to-end models, an independent byte builder for
// hand-made GGUF files (spec/formats.md § 2), and a tiny Nemotron-H MoE model written with the
// writer under test.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "device_only_backend.h"
#include "formats/gguf/gguf_metadata.h"
#include "formats/gguf/gguf_writer.h"
#include "tandem/backend.h"
#include "tandem/error.h"
#include "tandem/registry.h"
#include "test_util.h"

namespace tandem::gguf::test {

using tandem::test::TempDir;

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

using tandem::test::expect_error;

// GGUF bytes written field by field from the format description, independent of the writer.
class ByteBuilder {
 public:
  ByteBuilder& u8(uint64_t v) { return le(v, 1); }
  ByteBuilder& u16(uint64_t v) { return le(v, 2); }
  ByteBuilder& u32(uint64_t v) { return le(v, 4); }
  ByteBuilder& u64(uint64_t v) { return le(v, 8); }
  ByteBuilder& f32(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u32(u);
  }
  ByteBuilder& f64(double d) {
    uint64_t u;
    std::memcpy(&u, &d, 8);
    return u64(u);
  }
  ByteBuilder& str(const std::string& s) {
    u64(s.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
    return *this;
  }
  ByteBuilder& raw(const std::vector<uint8_t>& b) {
    bytes_.insert(bytes_.end(), b.begin(), b.end());
    return *this;
  }
  ByteBuilder& pad(size_t alignment) {
    while (bytes_.size() % alignment) bytes_.push_back(0);
    return *this;
  }
  // "GGUF", version, tensor count, KV count.
  ByteBuilder& header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    bytes_.insert(bytes_.end(), {'G', 'G', 'U', 'F'});
    return u32(version).u64(n_tensors).u64(n_kv);
  }
  // A tensor info: name, n_dims, ne…, type, offset.
  ByteBuilder& info(const std::string& name, const std::vector<uint64_t>& ne, uint32_t type, uint64_t offset) {
    str(name).u32(ne.size());
    for (uint64_t d : ne) u64(d);
    return u32(type).u64(offset);
  }
  size_t size() const { return bytes_.size(); }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  ByteBuilder& le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) bytes_.push_back(uint8_t(v >> (8 * i)));
    return *this;
  }
  std::vector<uint8_t> bytes_;
};

using tandem::test::DeviceOnlyBackend;

// The plugins the end-to-end tests run models with (cpu, mamba2, safetensors, gguf), loaded once.
inline PluginRegistry& host_plugins() {
  static PluginRegistry* r = [] {
    auto* reg = new PluginRegistry();
    for (const char* p : {"cpu", "mamba2", "safetensors", "gguf"})
      reg->load_file(tandem::test::plugin_dir() + "/libtandem-" + p + ".so");
    return reg;
  }();
  return *r;
}

// A placeholder "gpt2" vocabulary of n tokens (<unk>, <s>, </s>, tok3, …; BOS 1, EOS 2, no merges):
// enough for llama.cpp to open the file when the tests pass token ids, never text.
inline void set_placeholder_vocabulary(Metadata& md, int n) {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int i = 0; i < n; ++i) {
    tokens.push_back(i == 0 ? "<unk>" : i == 1 ? "<s>" : i == 2 ? "</s>" : "tok" + std::to_string(i));
    types.push_back(i < 3 ? 3 : 1);
  }
  md.set("tokenizer.ggml.model", Value::str("gpt2"));
  md.set("tokenizer.ggml.pre", Value::str("default"));
  md.set("tokenizer.ggml.tokens", Value::strs(tokens));
  md.set("tokenizer.ggml.token_type", Value::i32s(types));
  md.set("tokenizer.ggml.merges", Value::strs({}));
  md.set("tokenizer.ggml.bos_token_id", Value::u32(1));
  md.set("tokenizer.ggml.eos_token_id", Value::u32(2));
}

// A tiny nemotron_h_moe model, pattern "MEM*E-" plus one appended MTP block: H 16, V 32, Mamba
// nh 4 × P 4 (d_in 16), G 2, N 4, K 4; attention 4q/2kv × 4; MoE E 4, k 2, w 8, shared 12;
// MLP 20. Weights are F32 random values (seeded). The options vary what the tests need.
struct TinyModel {
  bool latent = false;          // MoE latent projections (L 8)
  bool per_layer_arrays = false;  // expert_count / expert_used_count / expert_feed_forward_length as arrays
  bool vary_experts = false;    // layer 4 gets E 6, k 3, w 16 (requires per_layer_arrays)
  bool with_tokenizer = true;
  bool mtp = true;              // an appended MTP block (index 6) that must be ignored
  bool tie = false;             // no output.weight
  Metadata metadata;
  std::vector<WriteTensor> tensors;

  static constexpr int H = 16, V = 32, NH = 4, P = 4, G = 2, N = 4, K = 4, DIN = NH * P;
  static constexpr int CONV = DIN + 2 * G * N, IN_PROJ = DIN + CONV + NH;
  static constexpr int NQ = 4, NKV = 2, HD = 4, E = 4, TOPK = 2, W = 8, SH = 12, L = 8, MLP = 20;
  static constexpr const char* kPattern = "MEM*E-";

  int experts(int layer) const { return vary_experts && layer == 4 ? 6 : E; }
  int top_k(int layer) const { return vary_experts && layer == 4 ? 3 : TOPK; }
  int width(int layer) const { return vary_experts && layer == 4 ? 16 : W; }

  void build(uint64_t seed = 1) {
    const std::string a = "nemotron_h_moe.";
    const int n_layers = 6, n_blocks = mtp ? 7 : 6;
    metadata.set("general.architecture", Value::str("nemotron_h_moe"));
    metadata.set("general.name", Value::str("tiny"));
    metadata.set(a + "block_count", Value::u32(n_blocks));
    metadata.set(a + "context_length", Value::u32(4096));
    metadata.set(a + "embedding_length", Value::u32(H));
    std::vector<int32_t> ff, kv, ecount, eused, ewidth;
    for (int i = 0; i < n_blocks; ++i) {
      char c = i < n_layers ? kPattern[i] : 'E';  // the MTP block: attention + MoE, flagged as MoE here
      ff.push_back(c == 'E' ? width(i) : c == '-' ? MLP : 0);
      kv.push_back(c == '*' ? NKV : 0);
      ecount.push_back(c == 'E' ? experts(i) : 0);
      eused.push_back(c == 'E' ? top_k(i) : 0);
      ewidth.push_back(c == 'E' ? width(i) : 0);
    }
    metadata.set(a + "feed_forward_length", Value::i32s(ff));
    metadata.set(a + "attention.head_count", Value::u32(NQ));
    metadata.set(a + "attention.head_count_kv", Value::i32s(kv));
    metadata.set(a + "attention.key_length", Value::u32(HD));
    metadata.set(a + "attention.value_length", Value::u32(HD));
    metadata.set(a + "attention.layer_norm_rms_epsilon", Value::f32(1e-5f));
    metadata.set(a + "attention.layer_norm_epsilon", Value::f32(1e-5f));
    metadata.set(a + "ssm.conv_kernel", Value::u32(K));
    metadata.set(a + "ssm.inner_size", Value::u32(DIN));
    metadata.set(a + "ssm.state_size", Value::u32(N));
    metadata.set(a + "ssm.time_step_rank", Value::u32(NH));
    metadata.set(a + "ssm.group_count", Value::u32(G));
    if (per_layer_arrays) {
      metadata.set(a + "expert_count", Value::i32s(ecount));
      metadata.set(a + "expert_used_count", Value::i32s(eused));
      metadata.set(a + "expert_feed_forward_length", Value::i32s(ewidth));
    } else {
      metadata.set(a + "expert_count", Value::u32(E));
      metadata.set(a + "expert_used_count", Value::u32(TOPK));
      metadata.set(a + "expert_feed_forward_length", Value::u32(W));
    }
    metadata.set(a + "expert_shared_feed_forward_length", Value::u32(SH));
    metadata.set(a + "expert_shared_count", Value::u32(1));
    metadata.set(a + "expert_weights_scale", Value::f32(2.5f));
    metadata.set(a + "expert_weights_norm", Value::boolean(true));
    metadata.set(a + "expert_group_count", Value::u32(1));
    metadata.set(a + "expert_group_used_count", Value::u32(1));
    if (latent) metadata.set(a + "moe_latent_size", Value::u32(L));
    if (mtp) metadata.set(a + "nextn_predict_layers", Value::u32(1));
    if (with_tokenizer) add_tokenizer();

    uint64_t s = seed;
    auto f32 = [&](const std::string& name, std::vector<int64_t> ne) {
      int64_t n = 1;
      for (int64_t d : ne) n *= d;
      tensors.push_back(make_f32(name, ne, tandem::test::random_vec(size_t(n), s++, -0.5f, 0.5f)));
    };
    f32("token_embd.weight", {H, V});
    f32("output_norm.weight", {H});
    if (!tie) f32("output.weight", {H, V});
    for (int i = 0; i < n_blocks; ++i) {
      const std::string b = "blk." + std::to_string(i) + ".";
      const char c = i < n_layers ? kPattern[i] : 'E';
      f32(b + "attn_norm.weight", {H});
      if (c == 'M') {
        f32(b + "ssm_in.weight", {H, IN_PROJ});
        f32(b + "ssm_conv1d.weight", {K, CONV});
        f32(b + "ssm_conv1d.bias", {CONV});
        f32(b + "ssm_dt.bias", {NH});
        f32(b + "ssm_a", {1, NH});
        f32(b + "ssm_d", {1, NH});
        f32(b + "ssm_norm.weight", {DIN / G, G});
        f32(b + "ssm_out.weight", {DIN, H});
      } else if (c == '*') {
        f32(b + "attn_q.weight", {H, NQ * HD});
        f32(b + "attn_k.weight", {H, NKV * HD});
        f32(b + "attn_v.weight", {H, NKV * HD});
        f32(b + "attn_output.weight", {NQ * HD, H});
      } else if (c == 'E') {
        const int e = experts(i), w = width(i), in = latent ? L : H;
        f32(b + "ffn_gate_inp.weight", {H, e});
        f32(b + "exp_probs_b.bias", {e});
        if (latent) {
          f32(b + "ffn_latent_down.weight", {H, L});
          f32(b + "ffn_latent_up.weight", {L, H});
        }
        f32(b + "ffn_up_exps.weight", {in, w, e});
        f32(b + "ffn_down_exps.weight", {w, in, e});
        f32(b + "ffn_up_shexp.weight", {H, SH});
        f32(b + "ffn_down_shexp.weight", {SH, H});
      } else {
        f32(b + "ffn_up.weight", {H, MLP});
        f32(b + "ffn_down.weight", {MLP, H});
      }
    }
  }

  void add_tokenizer() {
    std::vector<std::string> tokens;
    std::vector<int32_t> types;
    for (int i = 0; i < V; ++i) {
      tokens.push_back(i == 0 ? "<unk>" : i == 1 ? "<s>" : i == 2 ? "</s>" : i == 11 ? "<|im_end|>"
                       : i == 12 ? "<tool>" : std::string("t") + char('a' + i % 26) + std::to_string(i));
      types.push_back(i < 3 || i == 11 ? 3 : i == 12 ? 4 : 1);
    }
    metadata.set("tokenizer.ggml.model", Value::str("gpt2"));
    metadata.set("tokenizer.ggml.pre", Value::str("pixtral"));
    metadata.set("tokenizer.ggml.tokens", Value::strs(tokens));
    metadata.set("tokenizer.ggml.token_type", Value::i32s(types));
    metadata.set("tokenizer.ggml.merges", Value::strs({"t a", "ta 3"}));
    metadata.set("tokenizer.ggml.bos_token_id", Value::u32(1));
    metadata.set("tokenizer.ggml.eos_token_id", Value::u32(2));
    metadata.set("tokenizer.ggml.unknown_token_id", Value::u32(0));
    metadata.set("tokenizer.ggml.add_bos_token", Value::boolean(false));
    metadata.set("tokenizer.chat_template", Value::str("{% for m in messages %}{{ m.content }}\n{% endfor %}"));
  }

  std::vector<uint8_t> bytes() const { return serialize_gguf(metadata, tensors); }
  const WriteTensor& tensor(const std::string& name) const {
    for (const auto& t : tensors)
      if (t.name == name) return t;
    throw std::runtime_error("no tensor " + name);
  }
};

}  // namespace tandem::gguf::test
