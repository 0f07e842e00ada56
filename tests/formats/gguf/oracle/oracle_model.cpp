// Builds the oracle tests' tiny models. Two choices keep llama.cpp's own rounding from hiding or
// faking a difference:
// - Routing is decided by the token alone, with wide margins. The first E residual dimensions hold a
//   routing code written by the embedding (two experts well above the rest), every projection that
//   writes the residual has zero rows there, and each router reads those dimensions (a per-layer
//   permutation) plus a faint random part. llama.cpp quantizes activations before its dot products
//   (Q8_K / Q8_0 / F16 / BF16, spec/formats.md § 3.16), so a near tie in top-k would otherwise flip
//   an expert in one engine only, a discrete jump that is not a kernel difference.
// - Weights have fan-in-scaled magnitudes, so activations stay near unit scale through the layers.
// Block types without a float encoder here (K, IQ, NVFP4) are random bytes with their fp16 (or
// UE4M3 and per-tensor) scales set to give the wanted RMS; any bytes are valid blocks.
#include "oracle_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <stdexcept>

#include "formats/gguf/quant.h"
#include "tandem/tensor.h"
#include "tests/formats/gguf/gguf_test_util.h"

namespace tandem::gguf::oracle {
namespace {

using D = Dims;
constexpr float kRelu2Rms = 1.2247449f;  // sqrt(E[relu(x)^4]) for x ~ N(0, 1): keeps down-projections unit scale

void put_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }
uint16_t get_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

float bf16_round(float v) { return bf16_to_f32(f32_to_bf16(v)); }

// Q8_0 from floats: d = amax/127 stored as fp16, q = round(x/d) (spec/formats.md § 3.2).
std::vector<uint8_t> quantize_q8_0(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() / 32 * 34);
  for (size_t b = 0; b < v.size() / 32; ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[b * 32 + j]));
    const float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
    uint8_t* blk = out.data() + b * 34;
    put_u16(blk, f32_to_f16(d));
    for (int j = 0; j < 32; ++j) blk[2 + j] = uint8_t(int8_t(std::lround(std::clamp(v[b * 32 + j] * id, -127.f, 127.f))));
  }
  return out;
}

bool float_type(int type) { return type == 0 || type == 1 || type == 30 || type == 8; }

// One embedding row for `exact` models (see OracleSpec::exact): integers k, |k| ≤ 127, the routing
// code in the first R entries, a ±127 in every 32-element block and Σk² = 2^20, so that the row
// times 2^-6 has a mean square of exactly 1 over 256 elements.
std::vector<int> exact_row(std::mt19937_64& g, int route_dims) {
  constexpr int n = Dims::H, target = 1 << 20;
  static_assert(Dims::H == 256, "the mean square of k·2^-6 is 1 only for 256 elements");
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g); };
  std::vector<int> k(n, 0);
  std::vector<bool> fixed(n, false);
  std::vector<int> order(static_cast<size_t>(route_dims));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), g);
  for (int j = 0; j < route_dims; ++j) {
    const int d = order[size_t(j)];
    k[d] = j == 0 ? 127 : j == 1 ? 90 : -uni(30, 127);
    fixed[d] = true;
  }
  for (int b = 1; b < n / 32; ++b) {
    const int p = 32 * b + uni(0, 31);
    k[p] = uni(0, 1) ? 127 : -127;
    fixed[p] = true;
  }
  std::vector<int> free;
  for (int i = 0; i < n; ++i)
    if (!fixed[i]) {
      k[i] = uni(-100, 100);
      free.push_back(i);
    }
  auto deficit = [&] {
    int s = 0;
    for (int v : k) s += v * v;
    return target - s;
  };
  while (deficit() < 0) k[size_t(free[size_t(uni(0, int(free.size()) - 1))])] /= 2;
  for (int d = deficit(); d > 2000; d = deficit()) {  // grow random entries towards the target
    int& v = k[size_t(free[size_t(uni(0, int(free.size()) - 1))])];
    const int mag = std::min(126, int(std::sqrt(double(v) * v + d)));
    v = v < 0 ? -mag : mag;
  }
  // Close the rest exactly: two free entries (a, b) with a² + b² = their old squares + the deficit.
  const int d = deficit();
  for (size_t i = 0; i < free.size(); ++i)
    for (size_t j = i + 1; j < free.size(); ++j) {
      int& x = k[size_t(free[i])];
      int& y = k[size_t(free[j])];
      const int s = x * x + y * y + d;
      for (int a = 0; a <= 126; ++a) {
        const int b2 = s - a * a;
        if (b2 < 0) break;
        const int b = int(std::lround(std::sqrt(double(b2))));
        if (b * b == b2 && b <= 126) {
          x = x < 0 ? -a : a;
          y = y < 0 ? -b : b;
          if (deficit() != 0) throw std::logic_error("exact_row: sum of squares");
          return k;
        }
      }
    }
  throw std::runtime_error("exact_row: no exact completion found");
}

class Builder {
 public:
  Builder(const OracleSpec& spec, OracleModel& m) : spec_(spec), m_(m), rng_(spec.seed * 0x9E3779B97F4A7C15ull + 7) {}

  float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng_); }
  std::vector<float> uniforms(size_t n, float lo, float hi) {
    std::vector<float> v(n);
    for (float& x : v) x = bf16_round(uniform(lo, hi));
    return v;
  }
  std::vector<float> gaussians(size_t n, float rms) {
    std::normal_distribution<float> nd(0.0f, rms);
    std::vector<float> v(n);
    for (float& x : v) x = bf16_round(nd(rng_));
    return v;
  }
  std::mt19937_64& rng() { return rng_; }

  // An F32 vector (GGUF ne `ne`, HF shape `hf_shape`).
  void vec(const std::string& gguf, const std::string& hf, std::vector<int64_t> ne, std::vector<int64_t> hf_shape,
           const std::vector<float>& gguf_values, const std::vector<float>& hf_values) {
    m_.tensors.push_back(make_f32(gguf, ne, gguf_values));
    if (spec_.uniform_type >= 0) m_.hf.push_back(safetensors::make_f32(hf, hf_shape, hf_values));
  }
  void vec(const std::string& gguf, const std::string& hf, std::vector<int64_t> ne, std::vector<int64_t> hf_shape,
           const std::vector<float>& v) {
    vec(gguf, hf, std::move(ne), std::move(hf_shape), v, v);
  }
  void vec(const std::string& gguf, const std::string& hf, std::vector<int64_t> ne, const std::vector<float>& v) {
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    vec(gguf, hf, ne, {n}, v, v);
  }

  // A matrix [out, in] (PyTorch order), or n_exp of them stacked as llama.cpp's {in, out, n_exp}.
  // Rows [0, zero_rows) are zero. `values` (optional) gives the float weights; else they are drawn.
  void matrix(const std::string& gguf, const std::vector<std::string>& hf, int64_t out, int64_t in, int64_t n_exp,
              int type, float rms, int zero_rows, std::vector<float> values = {}) {
    const std::vector<int64_t> ne = n_exp > 1 ? std::vector<int64_t>{in, out, n_exp} : std::vector<int64_t>{in, out};
    const size_t n = size_t(out * in * n_exp);
    if (spec_.uniform_type >= 0) type = spec_.uniform_type;
    if (float_type(type)) {
      if (values.empty()) values = gaussians(n, rms);
      for (int64_t e = 0; e < n_exp; ++e)
        std::fill_n(values.begin() + e * out * in, zero_rows * in, 0.0f);
      if (type == 0) m_.tensors.push_back(make_f32(gguf, ne, values));
      else if (type == 1) m_.tensors.push_back(make_f16(gguf, ne, values));
      else if (type == 30) m_.tensors.push_back(make_bf16(gguf, ne, values));
      else m_.tensors.push_back(WriteTensor{gguf, 8, ne, quantize_q8_0(values)});
      if (spec_.uniform_type >= 0)
        for (int64_t e = 0; e < n_exp; ++e)
          m_.hf.push_back(safetensors::make_bf16(
              hf[size_t(e)], {out, in},
              std::vector<float>(values.begin() + e * out * in, values.begin() + (e + 1) * out * in)));
      return;
    }
    std::vector<float> scales;
    std::vector<uint8_t> bytes = random_blocks(type, out * n_exp, in, out, rms, zero_rows, scales);
    m_.tensors.push_back(WriteTensor{gguf, type, ne, std::move(bytes)});
    if (!scales.empty()) {
      const std::string base = gguf.substr(0, gguf.size() - std::string(".weight").size());
      m_.tensors.push_back(make_f32(base + ".scale", {int64_t(scales.size())}, scales));
    }
  }

 private:
  // Random blocks for `rows` rows of `cols` elements (groups of `group_rows` rows share a per-tensor
  // NVFP4 scale: one per expert). Fills `scales` for NVFP4 only.
  std::vector<uint8_t> random_blocks(int type, int64_t rows, int64_t cols, int64_t group_rows, float rms,
                                     int zero_rows, std::vector<float>& scales) {
    const QuantType* qt = find_type(type);
    if (!qt) throw std::runtime_error("oracle model: no kernel for ggml type " + std::to_string(type));
    const int64_t row_bytes = cols / qt->block_elems * qt->block_bytes, n_blocks = rows * cols / qt->block_elems;
    std::vector<uint8_t> bytes(size_t(rows * row_bytes));
    std::uniform_int_distribution<int> byte(0, 255);
    for (uint8_t& b : bytes) b = uint8_t(byte(rng_));

    // Scale fields: d (fp16) at `d_at`; Q4_K/Q5_K also dmin, set to centre each sub-block's values.
    int d_at = 0, dmin_at = -1;
    float dmin_ratio = 0;
    if (type == 12) dmin_at = 2, dmin_ratio = 7.5f;   // mean of q (0..15)
    if (type == 13) dmin_at = 2, dmin_ratio = 15.5f;  // mean of q (0..31)
    if (type == 14) d_at = 208;                       // Q6_K keeps d last
    std::vector<float> jitter(static_cast<size_t>(n_blocks));
    for (float& j : jitter) j = uniform(0.5f, 1.5f);
    auto set_d = [&](int64_t b, float d) {
      uint8_t* blk = bytes.data() + b * qt->block_bytes;
      if (type == 29) {  // IQ1_M: d is spread over the top nibbles of the four u16 scales
        const uint16_t h = f32_to_f16(d);
        for (int k = 0; k < 4; ++k) {
          uint8_t* sc = blk + 48 + 2 * k;
          put_u16(sc, uint16_t((get_u16(sc) & 0x0FFF) | (((h >> (4 * k)) & 0xF) << 12)));
        }
      } else if (type == 40) {  // NVFP4: UE4M3 sub-block scales in [1, 1.875] (exponent 7); the magnitude goes in .scale
        for (int s = 0; s < 4; ++s) blk[s] = uint8_t((7 << 3) | (blk[s] & 7));
      } else {
        put_u16(blk + d_at, f32_to_f16(d));
        if (dmin_at >= 0) put_u16(blk + dmin_at, f32_to_f16(d * dmin_ratio));
      }
    };
    for (int64_t b = 0; b < n_blocks; ++b) set_d(b, jitter[size_t(b)]);

    std::vector<float> row(static_cast<size_t>(cols));
    auto measure = [&] {
      double ss = 0;
      for (int64_t r = 0; r < rows; ++r) {
        qt->dequantize(bytes.data() + r * row_bytes, row.data(), cols);
        for (float v : row) ss += double(v) * v;
      }
      return std::sqrt(ss / double(rows * cols));
    };
    const double unit = measure();
    if (type == 40) {
      for (int64_t g = 0; g < rows / group_rows; ++g) scales.push_back(float(rms / unit) * uniform(0.7f, 1.4f));
    } else {
      for (int64_t b = 0; b < n_blocks; ++b) set_d(b, float(jitter[size_t(b)] * rms / unit));
    }
    for (int64_t r = 0; r < rows; ++r)
      if (r % group_rows < zero_rows) std::fill_n(bytes.begin() + r * row_bytes, row_bytes, uint8_t(0));
    return bytes;
  }

  const OracleSpec& spec_;
  OracleModel& m_;
  std::mt19937_64 rng_;
};

std::string hf_config(const OracleSpec& s) {
  std::string c = "{\n";
  auto kv = [&](const std::string& k, const std::string& v) { c += "  \"" + k + "\": " + v + ",\n"; };
  auto i = [](int v) { return std::to_string(v); };
  kv("architectures", "[\"NemotronHForCausalLM\"]");
  kv("model_type", "\"nemotron_h\"");
  kv("vocab_size", i(D::V));
  kv("hidden_size", i(D::H));
  kv("hybrid_override_pattern", "\"" + s.pattern + "\"");
  kv("num_hidden_layers", i(int(s.pattern.size())));
  kv("layer_norm_epsilon", s.exact ? "0" : "1e-05");
  kv("tie_word_embeddings", "false");
  kv("mamba_num_heads", i(D::NH));
  kv("mamba_head_dim", i(D::P));
  kv("n_groups", i(D::G));
  kv("ssm_state_size", i(D::N));
  kv("conv_kernel", i(D::K));
  kv("use_conv_bias", "true");
  kv("mamba_proj_bias", "false");
  kv("num_attention_heads", i(D::NQ));
  kv("num_key_value_heads", i(D::NKV));
  kv("head_dim", i(D::HD));
  kv("n_routed_experts", i(D::E));
  kv("num_experts_per_tok", i(D::TOPK));
  kv("moe_intermediate_size", i(D::W));
  kv("n_shared_experts", "1");
  kv("moe_shared_expert_intermediate_size", i(D::SH));
  if (s.latent) kv("moe_latent_size", i(D::L));
  kv("routed_scaling_factor", "2.5");
  kv("n_group", "1");
  kv("topk_group", "1");
  kv("norm_topk_prob", "true");
  kv("bos_token_id", "1");
  c += "  \"eos_token_id\": 2\n}\n";
  return c;
}

void add_metadata(const OracleSpec& s, Metadata& md) {
  const std::string a = "nemotron_h_moe.";
  const int n = int(s.pattern.size());
  md.set("general.architecture", Value::str("nemotron_h_moe"));
  md.set("general.name", Value::str("tandem-oracle-" + s.name));
  md.set("general.quantization_version", Value::u32(2));
  md.set(a + "block_count", Value::u32(uint32_t(n)));
  md.set(a + "context_length", Value::u32(4096));
  md.set(a + "embedding_length", Value::u32(D::H));
  std::vector<int32_t> ff, kv;
  for (char c : s.pattern) {
    ff.push_back(c == 'E' ? D::W : 0);
    kv.push_back(c == '*' ? D::NKV : 0);
  }
  md.set(a + "feed_forward_length", Value::i32s(ff));
  md.set(a + "attention.head_count", Value::u32(D::NQ));
  md.set(a + "attention.head_count_kv", Value::i32s(kv));
  md.set(a + "attention.key_length", Value::u32(D::HD));
  md.set(a + "attention.value_length", Value::u32(D::HD));
  const float eps = s.exact ? 0.0f : 1e-5f;  // exact models: 1/sqrt(mean square + eps) must be exactly 1
  md.set(a + "attention.layer_norm_rms_epsilon", Value::f32(eps));
  md.set(a + "attention.layer_norm_epsilon", Value::f32(eps));  // llama.cpp requires it (MTP norm)
  md.set(a + "ssm.conv_kernel", Value::u32(D::K));
  md.set(a + "ssm.inner_size", Value::u32(D::DIN));
  md.set(a + "ssm.state_size", Value::u32(D::N));
  md.set(a + "ssm.time_step_rank", Value::u32(D::NH));
  md.set(a + "ssm.group_count", Value::u32(D::G));
  md.set(a + "expert_count", Value::u32(D::E));
  md.set(a + "expert_used_count", Value::u32(D::TOPK));
  md.set(a + "expert_feed_forward_length", Value::u32(D::W));
  md.set(a + "expert_shared_feed_forward_length", Value::u32(D::SH));
  md.set(a + "expert_shared_count", Value::u32(1));
  md.set(a + "expert_weights_scale", Value::f32(2.5f));
  md.set(a + "expert_weights_norm", Value::boolean(true));
  md.set(a + "expert_group_count", Value::u32(1));
  md.set(a + "expert_group_used_count", Value::u32(1));
  if (s.latent) md.set(a + "moe_latent_size", Value::u32(D::L));
  test::set_placeholder_vocabulary(md, D::V);
  md.set("tokenizer.ggml.add_bos_token", Value::boolean(false));
}

}  // namespace

OracleModel build_oracle_model(const OracleSpec& s) {
  OracleModel m;
  m.spec = s;
  add_metadata(s, m.metadata);
  if (s.uniform_type >= 0) m.hf_config = hf_config(s);
  Builder b(s, m);
  const int R = D::ROUTE_DIMS;
  const float fan = 1.0f / std::sqrt(float(D::H));  // every fan-in here is 256

  // Embedding: routing code in the first R dimensions (two chosen experts at 3 and 2, the rest in
  // [-2, -0.5]: a top-2 margin of at least 2.5; exact models: 1.98 and 1.41, the rest in
  // [-1.98, -0.47]), unit-scale values elsewhere.
  std::vector<float> emb = b.gaussians(size_t(D::V) * D::H, 1.0f);
  for (int t = 0; t < D::V && s.exact; ++t) {
    const std::vector<int> k = exact_row(b.rng(), R);
    for (int i = 0; i < D::H; ++i) emb[size_t(t) * D::H + size_t(i)] = std::ldexp(float(k[size_t(i)]), -6);
  }
  for (int t = 0; t < D::V && !s.exact; ++t) {
    std::vector<int> order(static_cast<size_t>(R));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), b.rng());
    for (int j = 0; j < R; ++j)
      emb[size_t(t) * D::H + size_t(order[size_t(j)])] = j == 0 ? 3.0f : j == 1 ? 2.0f : bf16_round(b.uniform(-2.0f, -0.5f));
  }
  // The type of a non-expert matrix: F32 unless the model is `mixed` (then `mixed_type`) or uniform.
  auto dense = [&](int mixed_type) { return s.uniform_type >= 0 ? s.uniform_type : s.mixed ? mixed_type : 0; };
  b.matrix("token_embd.weight", {"backbone.embeddings.weight"}, D::V, D::H, 1, dense(8), 1.0f, 0, emb);
  b.vec("output_norm.weight", "backbone.norm_f.weight", {D::H}, b.uniforms(D::H, 0.8f, 1.2f));
  b.matrix("output.weight", {"lm_head.weight"}, D::V, D::H, 1, dense(8), 2.5f * fan, 0);

  for (size_t i = 0; i < s.pattern.size(); ++i) {
    const std::string g = "blk." + std::to_string(i) + ".", h = "backbone.layers." + std::to_string(i) + ".",
                      x = h + "mixer.";
    const bool exact_layer = s.exact && i == 0;
    if (exact_layer && s.pattern[0] != 'E' && s.pattern[0] != 'M')
      throw std::runtime_error("oracle model: an exact model starts with E or M");
    b.vec(g + "attn_norm.weight", h + "norm.weight", {D::H},
          exact_layer ? std::vector<float>(D::H, 1.0f) : b.uniforms(D::H, 0.8f, 1.2f));
    const char c = s.pattern[i];
    if (c == 'M') {
      const int proj = exact_layer ? s.expert_type : s.nvfp4_mamba ? 40 : dense(1);
      b.matrix(g + "ssm_in.weight", {x + "in_proj.weight"}, D::IN_PROJ, D::H, 1, proj, fan, 0);
      b.vec(g + "ssm_conv1d.weight", x + "conv1d.weight", {D::K, D::CONV}, {D::CONV, 1, D::K},
            b.uniforms(size_t(D::CONV) * D::K, -0.5f, 0.5f));
      b.vec(g + "ssm_conv1d.bias", x + "conv1d.bias", {D::CONV}, b.uniforms(D::CONV, -0.1f, 0.1f));
      b.vec(g + "ssm_dt.bias", x + "dt_bias", {D::NH}, b.uniforms(D::NH, -4.0f, -2.0f));
      std::vector<float> a_log = b.uniforms(D::NH, 0.0f, 2.5f), a(a_log.size());
      for (size_t k = 0; k < a.size(); ++k) a[k] = -std::exp(a_log[k]);
      b.vec(g + "ssm_a", x + "A_log", {1, D::NH}, {D::NH}, a, a_log);
      b.vec(g + "ssm_d", x + "D", {1, D::NH}, {D::NH}, b.uniforms(D::NH, 0.5f, 1.5f));
      b.vec(g + "ssm_norm.weight", x + "norm.weight", {D::DIN / D::G, D::G}, {D::DIN}, b.uniforms(D::DIN, 0.8f, 1.2f));
      b.matrix(g + "ssm_out.weight", {x + "out_proj.weight"}, D::H, D::DIN, 1, s.nvfp4_mamba ? 40 : dense(30), fan, R);
    } else if (c == '*') {
      b.matrix(g + "attn_q.weight", {x + "q_proj.weight"}, D::NQ * D::HD, D::H, 1, dense(8), fan, 0);
      b.matrix(g + "attn_k.weight", {x + "k_proj.weight"}, D::NKV * D::HD, D::H, 1, dense(8), fan, 0);
      b.matrix(g + "attn_v.weight", {x + "v_proj.weight"}, D::NKV * D::HD, D::H, 1, dense(8), fan, 0);
      b.matrix(g + "attn_output.weight", {x + "o_proj.weight"}, D::H, D::NQ * D::HD, 1, dense(8), fan, R);
    } else if (c == 'E') {
      // Router: expert j reads routing dimension perm[j], plus a faint dense part.
      std::vector<int> perm(static_cast<size_t>(R));
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), b.rng());
      std::vector<float> gate = b.gaussians(size_t(D::E) * D::H, 0.01f * fan);
      for (int j = 0; j < D::E; ++j) gate[size_t(j) * D::H + size_t(perm[size_t(j)])] = 1.5f;
      b.vec(g + "ffn_gate_inp.weight", x + "gate.weight", {D::H, D::E}, {D::E, D::H}, gate);
      b.vec(g + "exp_probs_b.bias", x + "gate.e_score_correction_bias", {D::E}, b.uniforms(D::E, -0.05f, 0.05f));
      const int in = s.latent ? D::L : D::H;
      if (s.latent) {
        std::vector<float> blocks_perm;  // exact: a permutation of whole 32-blocks, shuffled inside each
        if (exact_layer) {
          static_assert(Dims::L == Dims::H, "the exact latent projection is a permutation");
          blocks_perm.assign(size_t(D::L) * D::H, 0.0f);
          std::vector<int> blocks(D::H / 32), lanes(32);
          std::iota(blocks.begin(), blocks.end(), 0);
          std::shuffle(blocks.begin(), blocks.end(), b.rng());
          for (int ob = 0; ob < D::H / 32; ++ob) {
            std::iota(lanes.begin(), lanes.end(), 0);
            std::shuffle(lanes.begin(), lanes.end(), b.rng());
            for (int l = 0; l < 32; ++l) blocks_perm[size_t(32 * ob + l) * D::H + size_t(32 * blocks[size_t(ob)] + lanes[size_t(l)])] = 1.0f;
          }
        }
        b.matrix(g + "ffn_latent_down.weight", {x + "fc1_latent_proj.weight"}, D::L, D::H, 1, dense(8), fan, 0, blocks_perm);
        b.matrix(g + "ffn_latent_up.weight", {x + "fc2_latent_proj.weight"}, D::H, D::L, 1, dense(8), fan, R);
      }
      std::vector<std::string> up, down;
      for (int j = 0; j < D::E; ++j) {
        up.push_back(x + "experts." + std::to_string(j) + ".up_proj.weight");
        down.push_back(x + "experts." + std::to_string(j) + ".down_proj.weight");
      }
      b.matrix(g + "ffn_up_exps.weight", up, D::W, in, D::E, s.exact && !exact_layer ? 0 : s.expert_type, fan, 0);
      b.matrix(g + "ffn_down_exps.weight", down, in, D::W, D::E, s.exact ? 0 : s.expert_type, fan / kRelu2Rms,
               s.latent ? 0 : R);
      b.matrix(g + "ffn_up_shexp.weight", {x + "shared_experts.up_proj.weight"}, D::SH, D::H, 1,
               dense(1), fan, 0);
      b.matrix(g + "ffn_down_shexp.weight", {x + "shared_experts.down_proj.weight"}, D::H, D::SH, 1,
               dense(30), fan / kRelu2Rms, R);
    } else {
      throw std::runtime_error(std::string("oracle model: layer kind '") + c + "' is not built here");
    }
  }
  return m;
}

int corrupt_tested(OracleModel& m) {
  int changed = 0;
  for (WriteTensor& t : m.tensors) {
    const bool tested = m.spec.exact ? t.name == "blk.0.ffn_up_exps.weight" || t.name == "blk.0.ssm_in.weight"
                                     : t.name.find(".ffn_up_exps.weight") != std::string::npos;
    if (!tested) continue;
    const GgmlTypeInfo* info = ggml_type_info(t.type);
    const int64_t row_bytes = t.ne[0] / info->block_elems * info->block_bytes;
    // A high quant bit of the first block; for F16/BF16/F32 the lowest exponent bit of one element
    // (×2 or ×4), which keeps the value finite.
    const int64_t at = 20 + (info->block_bytes == 4 ? 3 : info->block_bytes == 2 ? 1 : 0);
    const uint8_t mask = t.type == 1 ? 0x04 : t.type == 0 || t.type == 30 ? 0x01 : 0x40;
    const int64_t per_matrix = t.ne.size() == 3 ? t.ne[1] : int64_t(t.data.size()) / row_bytes;
    for (int64_t e = 0; e < (t.ne.size() == 3 ? t.ne[2] : 1); ++e)
      for (int64_t r = 0; r < 8; ++r) t.data[size_t((e * per_matrix + r) * row_bytes + at)] ^= mask;
    ++changed;
  }
  return changed;
}

void write_hf_folder(const OracleModel& m, const std::string& dir) {
  if (m.hf.empty()) throw std::runtime_error("oracle model '" + m.spec.name + "' has no HF weights (not uniform)");
  std::ofstream(dir + "/config.json") << m.hf_config;
  safetensors::write_file(dir + "/model.safetensors", m.hf);
}

std::vector<std::vector<int32_t>> oracle_prompts(const std::vector<int>& lengths, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_int_distribution<int32_t> id(3, D::V - 1);
  std::vector<std::vector<int32_t>> out;
  for (int n : lengths) {
    std::vector<int32_t> p(static_cast<size_t>(n));
    for (int32_t& t : p) t = id(g);
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace tandem::gguf::oracle
