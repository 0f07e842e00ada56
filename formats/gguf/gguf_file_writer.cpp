// GgufWriter: the header from serialize_gguf_header, tensor bytes streamed with the alignment padding
// after each tensor; the model metadata llama.cpp reads for nemotron_h_moe (spec/nemotron_h.md § 10.1,
// spec/formats.md § 2.3 and § 2.5); random blocks scaled by each type's unit rms, measured once with
// the CPU dequantizer.
#include "gguf_file_writer.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>

#include "gguf_writer.h"
#include "quant.h"
#include "tandem/error.h"
#include "tandem/random_bytes.h"
#include "tandem/tensor.h"

namespace tandem::gguf {
namespace {

class File final : public TensorFile {
 public:
  File(const std::string& path, GgufHeader h) : path_(path), f_(std::fopen(path.c_str(), "wb")), h_(std::move(h)) {
    check(f_ != nullptr, "cannot create '", path, "': ", std::strerror(errno));
    std::setvbuf(f_, nullptr, _IOFBF, size_t(1) << 20);
    put(h_.bytes.data(), h_.bytes.size());
    advance();
  }
  ~File() override {
    if (f_) std::fclose(f_);
  }
  void write(const void* data, size_t n) override {
    const uint8_t* p = static_cast<const uint8_t*>(data);
    while (n) {
      check(next_ <= h_.nbytes.size(), "writing '", path_, "': more bytes than the header's tensors hold");
      const size_t k = size_t(std::min<uint64_t>(n, left_));
      put(p, k);
      p += k, n -= k, left_ -= k;
      if (left_ == 0) pad(), advance();
    }
  }
  void close() override {
    check(next_ > h_.nbytes.size(), "writing '", path_, "': tensor data missing");
    const int a = std::fflush(f_), b = ::fsync(fileno(f_)), c = std::fclose(f_);
    f_ = nullptr;
    if (a || b || c) fail("writing '", path_, "' failed: ", std::strerror(errno));
  }

 private:
  // The next tensor with bytes; empty tensors only pad (to nothing).
  void advance() {
    while (next_ < h_.nbytes.size() && h_.nbytes[next_] == 0) ++next_;
    left_ = next_ < h_.nbytes.size() ? h_.nbytes[next_] : 0;
    ++next_;
  }
  void pad() {
    static const uint8_t z[256] = {};
    const uint64_t n = h_.nbytes[next_ - 1];
    uint64_t k = (n + h_.alignment - 1) / h_.alignment * h_.alignment - n;
    while (k) {
      const size_t m = size_t(std::min<uint64_t>(k, sizeof z));
      put(z, m);
      k -= m;
    }
  }
  void put(const void* p, size_t n) {
    if (n && std::fwrite(p, 1, n, f_) != n) fail("writing '", path_, "' failed: ", std::strerror(errno));
  }
  std::string path_;
  std::FILE* f_;
  GgufHeader h_;
  size_t next_ = 0;   // one past the tensor being written
  uint64_t left_ = 0;
};

// NVFP4 block scales: UE4M3 codes near 1.0 (0x38), so rows vary without leaving the format's range.
constexpr uint8_t kFp4ScaleLo = 0x34, kFp4ScaleSpan = 9;
constexpr int kNvfp4 = 40;

// One block: random quants, then the scale fields. `d` is the fp16 super-scale. False: not a type
// with a generator.
bool random_block(int type, Rng& r, uint8_t* b, int block_bytes, float d) {
  switch (type) {
    case 8:   // Q8_0: d, qs[32]
    case 16:  // IQ2_XXS: d, qs (grid indices, signs and 4-bit sub-scales: every bit pattern is valid)
    case 17:  // IQ2_XS, IQ3_XXS, IQ3_S, IQ2_S, IQ4_XS: d first, then bits that are all valid
    case 18:
    case 21:
    case 22:
    case 23:
    case 20: {  // IQ4_NL: d, qs
      random_bytes(r, b, size_t(block_bytes));
      const uint16_t h = f32_to_f16(d);
      std::memcpy(b, &h, 2);
      return true;
    }
    case kNvfp4:  // four UE4M3 block scales, then nibbles; the tensor scale is the companion
      random_bytes(r, b, size_t(block_bytes));
      for (int s = 0; s < 4; ++s) b[s] = uint8_t(kFp4ScaleLo + r.next() % kFp4ScaleSpan);
      return true;
    case 12:    // Q4_K / Q5_K: d, dmin, 6-bit scales and mins, quants. w = d·sc·q − dmin·m with sc, m,
    case 13: {  // q uniform: dmin = q̄·d (7.5 or 15.5) centres the values on zero.
      random_bytes(r, b, size_t(block_bytes));
      const uint16_t h = f32_to_f16(d), hm = f32_to_f16(d * (type == 12 ? 7.5f : 15.5f));
      std::memcpy(b, &h, 2);
      std::memcpy(b + 2, &hm, 2);
      return true;
    }
    case 14: {  // Q6_K: ql, qh, int8 scales, d last
      random_bytes(r, b, size_t(block_bytes));
      const uint16_t h = f32_to_f16(d);
      std::memcpy(b + block_bytes - 2, &h, 2);
      return true;
    }
    case 29: {  // IQ1_M: the fp16 d spread over the top nibbles of the four u16 scale words at byte 48
      random_bytes(r, b, size_t(block_bytes));
      const uint16_t h = f32_to_f16(d);
      for (int i = 0; i < 4; ++i) {
        uint16_t sc;
        std::memcpy(&sc, b + 48 + 2 * i, 2);
        sc = uint16_t((sc & 0x0FFF) | (((h >> (4 * i)) & 0xF) << 12));
        std::memcpy(b + 48 + 2 * i, &sc, 2);
      }
      return true;
    }
    default: return false;
  }
}

// RMS of the type's values at d = 1 (NVFP4: at tensor scale 1), from the CPU dequantizer.
double unit_rms(int type) {
  static std::mutex mu;
  static std::map<int, double> cache;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(type); it != cache.end()) return it->second;
  const QuantType* q = find_type(type);
  check(q != nullptr, "gguf writer: ggml type ", type, " has no CPU dequantizer to calibrate it with");
  constexpr int kBlocks = 4096;
  std::vector<uint8_t> blocks(size_t(kBlocks) * size_t(q->block_bytes));
  Rng r(0x5eed);
  for (int i = 0; i < kBlocks; ++i)
    random_block(type, r, blocks.data() + size_t(i) * size_t(q->block_bytes), q->block_bytes, 1.0f);
  std::vector<float> v(size_t(kBlocks) * size_t(q->block_elems));
  q->dequantize(blocks.data(), v.data(), int64_t(v.size()));
  double ss = 0;
  for (float x : v) ss += double(x) * double(x);
  return cache[type] = std::sqrt(ss / double(v.size()));
}

std::vector<int32_t> per_layer(const ModelDesc& d, int (*f)(const LayerDesc&)) {
  std::vector<int32_t> v;
  for (const LayerDesc& l : d.layers) v.push_back(f(l));
  return v;
}

const LayerDesc* first_layer(const ModelDesc& d, LayerKind kind) {
  for (const LayerDesc& l : d.layers)
    if (l.kind == kind) return &l;
  return nullptr;
}

bool moe_uniform(const ModelDesc& d) {
  const LayerDesc* f = first_layer(d, LayerKind::MoE);
  for (const LayerDesc& l : d.layers)
    if (l.kind == LayerKind::MoE &&
        (l.moe.n_experts != f->moe.n_experts || l.moe.width != f->moe.width || l.moe.top_k != f->moe.top_k ||
         l.moe.shared_width != f->moe.shared_width || l.moe.latent != f->moe.latent))
      return false;
  return true;
}

}  // namespace

std::optional<TypeLayout> GgufWriter::type_layout(const std::string& dtype) const {
  const GgmlTypeInfo* t = ggml_type_info(dtype);
  if (!t) return std::nullopt;
  return TypeLayout{t->block_elems, size_t(t->block_bytes)};
}

Metadata model_metadata(const FileInfo& info) {
  Metadata m;
  const std::string a = "nemotron_h_moe";
  if (info.model) m.set("general.architecture", Value::str(a));
  if (!info.name.empty()) m.set("general.name", Value::str(info.name));
  if (info.model) {
    const ModelDesc& d = *info.model;
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
    m.set(a + ".attention.head_count_kv", Value::i32s(per_layer(d, [](const LayerDesc& l) {
            return l.kind == LayerKind::Attention ? l.attn.n_kv_heads : 0;
          })));
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
        m.set(a + ".expert_count", Value::i32s(per_layer(d, [](const LayerDesc& l) {
                return l.kind == LayerKind::MoE ? l.moe.n_experts : 0;
              })));
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
  }
  if (info.vocab) {
    const Vocabulary& v = *info.vocab;
    check(v.kinds.size() == v.tokens.size(), "gguf writer: the vocabulary has ", v.tokens.size(), " tokens but ",
          v.kinds.size(), " token kinds");
    std::vector<int32_t> types;
    for (Vocabulary::Kind k : v.kinds)
      types.push_back(k == Vocabulary::Kind::Unknown ? 2 : k == Vocabulary::Kind::Control ? 3 : 1);
    m.set("tokenizer.ggml.model", Value::str("gpt2"));
    m.set("tokenizer.ggml.pre", Value::str("pixtral"));
    m.set("tokenizer.ggml.tokens", Value::strs(v.tokens));
    m.set("tokenizer.ggml.token_type", Value::i32s(types));
    m.set("tokenizer.ggml.merges", Value::strs({}));
    m.set("tokenizer.ggml.bos_token_id", Value::u32(uint32_t(v.bos)));
    m.set("tokenizer.ggml.eos_token_id", Value::u32(uint32_t(v.eos)));
    m.set("tokenizer.ggml.unknown_token_id", Value::u32(uint32_t(v.unknown)));
    m.set("tokenizer.ggml.padding_token_id", Value::u32(uint32_t(v.padding)));
    m.set("tokenizer.ggml.add_bos_token", Value::boolean(v.add_bos));
  }
  return m;
}

std::unique_ptr<TensorFile> GgufWriter::create(const std::string& path, const std::vector<TensorSpec>& tensors,
                                               const FileInfo& info) const {
  std::vector<TensorLayout> layout;
  for (const TensorSpec& t : tensors) {
    const GgmlTypeInfo* g = ggml_type_info(t.dtype);
    check(g != nullptr, "gguf writer: tensor '", t.name, "' has unknown ggml type '", t.dtype, "'");
    layout.push_back({t.name, g->id, t.shape});
  }
  return std::make_unique<File>(path, serialize_gguf_header(model_metadata(info), layout));
}

bool GgufWriter::random_blocks(const std::string& dtype, double rms, Rng& rng, uint8_t* out, int64_t n_blocks) const {
  const GgmlTypeInfo* g = ggml_type_info(dtype);
  static constexpr int kIds[] = {8, 12, 13, 14, 16, 17, 18, 20, 21, 22, 23, 29, kNvfp4};
  if (!g || std::find(std::begin(kIds), std::end(kIds), g->id) == std::end(kIds)) return false;
  const float d = g->id == kNvfp4 ? 1.0f : float(rms / unit_rms(g->id));
  for (int64_t b = 0; b < n_blocks; ++b) random_block(g->id, rng, out + b * g->block_bytes, g->block_bytes, d);
  return true;
}

std::optional<float> GgufWriter::companion_scale(const std::string& dtype, double rms) const {
  if (dtype != "NVFP4") return std::nullopt;
  return float(rms / unit_rms(kNvfp4));
}

}  // namespace tandem::gguf
