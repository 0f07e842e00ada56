// A tiny nemotron_h_puzzle checkpoint with three MoE shapes, written to disk and run through
// Model::load, checked against a float64 reference written from spec/nemotron_h.md §2–§7, §9.3.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "formats/safetensors/safetensors_writer.h"
#include "tandem/model.h"
#include "tandem/registry.h"
#include "test_util.h"

namespace tandem::test {
namespace {

namespace fs = std::filesystem;
namespace st = tandem::safetensors;

// ---- the model ----

constexpr int kVocab = 128, kHidden = 48;
constexpr int kNh = 6, kP = 8, kG = 2, kN = 8, kK = 4, kChunk = 8;  // d_in 48, conv_dim 80
constexpr int kDin = kNh * kP, kConvDim = kDin + 2 * kG * kN, kInRows = kDin + kConvDim + kNh;
constexpr int kNq = 4, kNkv = 2, kHd = 12;
constexpr double kEps = 1e-5, kScaling = 2.5;

struct MoeShape {
  int E, k, w, SH, L;  // L = 0: no latent projections
};
struct Block {
  LayerKind kind;
  MoeShape moe{};
  int mlp_width = 0;
  const char* extra = "";  // JSON appended to the block dict
};

// Three MoE shapes that differ in expert count, top-k, width, shared width and latent size. The block
// of layer 8 spells the absent latent as null, layer 4 omits it.
const std::vector<Block> kBlocks = {
    {LayerKind::Mamba},
    {LayerKind::MoE, {8, 2, 16, 32, 24}, 0, R"(, "moe_latent_size": 24)"},
    {LayerKind::Attention},
    {LayerKind::Mamba},
    {LayerKind::MoE, {12, 4, 24, 20, 0}},
    {LayerKind::MLP, {}, 40},
    {LayerKind::Mamba},
    {LayerKind::Attention},
    {LayerKind::MoE, {5, 1, 40, 16, 0}, 0, R"(, "moe_latent_size": null)"},
    {LayerKind::Mamba},
};
constexpr const char* kPattern = "ME*ME-M*EM";

std::string config_json() {
  std::string blocks;
  for (const Block& b : kBlocks) {
    if (!blocks.empty()) blocks += ",\n    ";
    switch (b.kind) {
      case LayerKind::Mamba: blocks += R"({"block_type": "mamba")"; break;
      case LayerKind::Attention: blocks += R"({"block_type": "attention")"; break;
      case LayerKind::MLP: blocks += R"({"block_type": "mlp", "intermediate_size": )" + std::to_string(b.mlp_width); break;
      case LayerKind::MoE:
        blocks += R"({"block_type": "moe", "n_routed_experts": )" + std::to_string(b.moe.E) +
                  R"(, "num_experts_per_tok": )" + std::to_string(b.moe.k) + R"(, "moe_intermediate_size": )" +
                  std::to_string(b.moe.w) + R"(, "moe_shared_expert_intermediate_size": )" + std::to_string(b.moe.SH);
        break;
    }
    blocks += std::string(b.extra) + "}";
  }
  // Fields that any block carries are absent at the top level, as Puzzle configs ship them.
  return R"({
  "architectures": ["NemotronHPuzzleForCausalLM"],
  "model_type": "nemotron_h_puzzle",
  "vocab_size": 128, "hidden_size": 48, "num_hidden_layers": 10,
  "layer_norm_epsilon": 1e-05, "tie_word_embeddings": false, "eos_token_id": [2, 11],
  "mamba_num_heads": 6, "mamba_head_dim": 8, "n_groups": 2, "ssm_state_size": 8, "conv_kernel": 4,
  "chunk_size": 8, "use_conv_bias": true, "mamba_proj_bias": false, "mamba_hidden_act": "silu",
  "time_step_min": 0.001, "time_step_limit": [0.0, {"__float__": "Infinity"}],
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 12, "attention_bias": false,
  "n_shared_experts": 1, "routed_scaling_factor": 2.5, "n_group": 1, "topk_group": 1, "norm_topk_prob": true,
  "mlp_hidden_act": "relu2", "mlp_bias": false,
  "block_configs": [
    )" + blocks + R"(
  ]
}
)";
}

// ---- random weights, kept as the exact values the file holds ----

double bf16_at(const std::vector<uint8_t>& d, size_t i) {
  uint32_t bits = uint32_t(d[2 * i] | (d[2 * i + 1] << 8)) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
double f32_at(const std::vector<uint8_t>& d, size_t i) {
  float f;
  std::memcpy(&f, d.data() + 4 * i, 4);
  return f;
}

class Weights {
 public:
  explicit Weights(uint64_t seed) : rng_(seed) {}

  std::vector<float> normal(size_t n, double mean, double sd) {
    std::normal_distribution<double> d(mean, sd);
    std::vector<float> v(n);
    for (auto& x : v) x = float(d(rng_));
    return v;
  }
  std::vector<float> uniform(size_t n, double lo, double hi) {
    std::uniform_real_distribution<double> d(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = float(d(rng_));
    return v;
  }
  // A linear [out, in] with N(0, (gain/√in)²) entries.
  void linear(const std::string& name, int64_t out, int64_t in, double gain = 1.0) {
    add(name, {out, in}, normal(size_t(out * in), 0.0, gain / std::sqrt(double(in))));
  }
  void norm(const std::string& name, int64_t n) { add(name, {n}, normal(size_t(n), 1.0, 0.1)); }

  // Stores BF16 (or F32) and keeps what the file holds, decoded back from the written bytes.
  void add(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v, bool f32 = false) {
    st::WriteTensor t = f32 ? st::make_f32(name, shape, v) : st::make_bf16(name, shape, v);
    std::vector<double>& out = values_[name];
    out.resize(v.size());
    for (size_t i = 0; i < v.size(); ++i) out[i] = f32 ? f32_at(t.data, i) : bf16_at(t.data, i);
    tensors_.push_back(std::move(t));
  }
  const std::vector<double>& operator[](const std::string& name) const {
    auto it = values_.find(name);
    if (it == values_.end()) throw std::runtime_error("reference: no tensor '" + name + "'");
    return it->second;
  }
  const std::vector<st::WriteTensor>& tensors() const { return tensors_; }

 private:
  std::mt19937_64 rng_;
  std::vector<st::WriteTensor> tensors_;
  std::map<std::string, std::vector<double>> values_;
};

std::string layer_prefix(size_t i) { return "model.layers." + std::to_string(i) + "."; }

// Scales follow tests/fixtures/hf/README.md, which keeps every branch's RMS near 1.
void make_weights(Weights& w) {
  w.add("model.embeddings.weight", {kVocab, kHidden}, w.normal(size_t(kVocab) * kHidden, 0.0, 1.0));
  for (size_t i = 0; i < kBlocks.size(); ++i) {
    const Block& b = kBlocks[i];
    const std::string p = layer_prefix(i), m = p + "mixer.";
    w.norm(p + "norm.weight", kHidden);
    switch (b.kind) {
      case LayerKind::Mamba: {
        // in_proj rows z | xBC | dt; the dt rows get a smaller gain.
        std::vector<float> in = w.normal(size_t(kDin + kConvDim) * kHidden, 0.0, 1.0 / std::sqrt(double(kHidden)));
        std::vector<float> dt = w.normal(size_t(kNh) * kHidden, 0.0, 0.3 / std::sqrt(double(kHidden)));
        in.insert(in.end(), dt.begin(), dt.end());
        w.add(m + "in_proj.weight", {kInRows, kHidden}, in);
        w.add(m + "conv1d.weight", {kConvDim, 1, kK}, w.normal(size_t(kConvDim) * kK, 0.0, 0.5));
        w.add(m + "conv1d.bias", {kConvDim}, w.normal(kConvDim, 0.0, 0.1));
        std::vector<float> a = w.uniform(kNh, 1.0, 16.0), dtb = w.uniform(kNh, std::log(0.02), std::log(0.3));
        for (auto& x : a) x = std::log(x);
        for (auto& x : dtb) x = float(std::log(std::expm1(std::exp(double(x)))));  // softplus⁻¹(Δ0)
        w.add(m + "A_log", {kNh}, a);
        w.add(m + "D", {kNh}, w.normal(kNh, 1.0, 0.5));
        w.add(m + "dt_bias", {kNh}, dtb);
        w.norm(m + "norm.weight", kDin);
        w.linear(m + "out_proj.weight", kHidden, kDin, 0.7);
        break;
      }
      case LayerKind::Attention:
        w.linear(m + "q_proj.weight", kNq * kHd, kHidden, 1.5);
        w.linear(m + "k_proj.weight", kNkv * kHd, kHidden, 1.5);
        w.linear(m + "v_proj.weight", kNkv * kHd, kHidden);
        w.linear(m + "o_proj.weight", kHidden, kNq * kHd);
        break;
      case LayerKind::MoE: {
        const MoeShape& s = b.moe;
        w.linear(m + "gate.weight", s.E, kHidden);
        w.add(m + "gate.e_score_correction_bias", {s.E}, w.normal(size_t(s.E), 0.0, 0.1), /*f32=*/true);
        const int in = s.L ? s.L : kHidden;
        if (s.L) {
          w.linear(m + "fc1_latent_proj.weight", s.L, kHidden);
          w.linear(m + "fc2_latent_proj.weight", kHidden, s.L);
        }
        for (int j = 0; j < s.E; ++j) {
          const std::string e = m + "experts." + std::to_string(j) + ".";
          w.linear(e + "up_proj.weight", s.w, in);
          w.linear(e + "down_proj.weight", in, s.w, 0.5);
        }
        w.linear(m + "shared_experts.up_proj.weight", s.SH, kHidden);
        w.linear(m + "shared_experts.down_proj.weight", kHidden, s.SH, 0.5);
        break;
      }
      case LayerKind::MLP:
        w.linear(m + "up_proj.weight", b.mlp_width, kHidden);
        w.linear(m + "down_proj.weight", kHidden, b.mlp_width, 0.5);
        break;
    }
  }
  w.norm("model.norm_f.weight", kHidden);
  w.linear("lm_head.weight", kVocab, kHidden, 3.0);
}

// ---- float64 reference (spec §2–§7), whole sequence at once, no state carried between calls ----

using Rows = std::vector<std::vector<double>>;  // [T][cols]

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double silu(double x) { return x * sigmoid(x); }
double softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }
double relu2(double x) { return x > 0.0 ? x * x : 0.0; }

// y = W·x with W [out, in] row-major.
std::vector<double> matvec(const std::vector<double>& W, const std::vector<double>& x) {
  const size_t in = x.size(), out = W.size() / in;
  std::vector<double> y(out, 0.0);
  for (size_t o = 0; o < out; ++o)
    for (size_t i = 0; i < in; ++i) y[o] += W[o * in + i] * x[i];
  return y;
}
Rows linear(const std::vector<double>& W, const Rows& X) {
  Rows Y;
  for (const auto& x : X) Y.push_back(matvec(W, x));
  return Y;
}
std::vector<double> rms_norm(const std::vector<double>& x, const std::vector<double>& w) {
  double ms = 0;
  for (double v : x) ms += v * v;
  const double r = 1.0 / std::sqrt(ms / double(x.size()) + kEps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = w[i] * x[i] * r;
  return y;
}
// down·relu²(up·x)
std::vector<double> ffn(const std::vector<double>& up, const std::vector<double>& down, const std::vector<double>& x) {
  std::vector<double> h = matvec(up, x);
  for (double& v : h) v = relu2(v);
  return matvec(down, h);
}

// §3: in_proj split, causal conv + silu, Δ, sequential recurrence, gate then grouped norm, out_proj.
Rows ref_mamba(const Weights& W, const std::string& m, const Rows& Xn) {
  const size_t T = Xn.size();
  const Rows proj = linear(W[m + "in_proj.weight"], Xn);
  const auto &cw = W[m + "conv1d.weight"], &cb = W[m + "conv1d.bias"], &A_log = W[m + "A_log"], &D = W[m + "D"],
             &dt_bias = W[m + "dt_bias"], &nw = W[m + "norm.weight"];
  std::vector<double> S(size_t(kNh) * kP * kN, 0.0);
  Rows out;
  for (size_t t = 0; t < T; ++t) {
    std::vector<double> xbc(kConvDim);
    for (int c = 0; c < kConvDim; ++c) {
      double acc = cb[c];
      for (int j = 0; j < kK; ++j) {
        const int64_t s = int64_t(t) - (kK - 1) + j;
        if (s >= 0) acc += cw[size_t(c) * kK + j] * proj[size_t(s)][size_t(kDin + c)];
      }
      xbc[c] = silu(acc);
    }
    const double* x = xbc.data();
    const double* B = x + kDin;
    const double* C = B + kG * kN;
    std::vector<double> y(kDin), u(kDin);
    for (int h = 0; h < kNh; ++h) {
      const int g = h / (kNh / kG);
      const double dt = softplus(proj[t][size_t(kDin + kConvDim + h)] + dt_bias[h]);
      const double dA = std::exp(dt * -std::exp(A_log[h]));
      for (int p = 0; p < kP; ++p) {
        double acc = 0;
        for (int n = 0; n < kN; ++n) {
          double& s = S[(size_t(h) * kP + p) * kN + n];
          s = dA * s + dt * x[h * kP + p] * B[g * kN + n];
          acc += s * C[g * kN + n];
        }
        y[h * kP + p] = acc + D[h] * x[h * kP + p];
      }
    }
    for (int c = 0; c < kDin; ++c) u[c] = y[c] * silu(proj[t][size_t(c)]);
    const int gs = kDin / kG;
    for (int g = 0; g < kG; ++g) {
      double ms = 0;
      for (int c = g * gs; c < (g + 1) * gs; ++c) ms += u[c] * u[c];
      const double r = 1.0 / std::sqrt(ms / gs + kEps);
      for (int c = g * gs; c < (g + 1) * gs; ++c) u[c] = nw[c] * u[c] * r;
    }
    out.push_back(matvec(W[m + "out_proj.weight"], u));
  }
  return out;
}

// §4: causal GQA, no positional encoding, scale hd^−0.5.
Rows ref_attention(const Weights& W, const std::string& m, const Rows& Xn) {
  const Rows Q = linear(W[m + "q_proj.weight"], Xn), K = linear(W[m + "k_proj.weight"], Xn),
             V = linear(W[m + "v_proj.weight"], Xn);
  const double scale = 1.0 / std::sqrt(double(kHd));
  Rows out;
  for (size_t t = 0; t < Xn.size(); ++t) {
    std::vector<double> o(size_t(kNq) * kHd, 0.0);
    for (int h = 0; h < kNq; ++h) {
      const int kv = h / (kNq / kNkv);
      std::vector<double> sc(t + 1);
      double mx = -INFINITY;
      for (size_t s = 0; s <= t; ++s) {
        double d = 0;
        for (int i = 0; i < kHd; ++i) d += Q[t][size_t(h * kHd + i)] * K[s][size_t(kv * kHd + i)];
        sc[s] = d * scale;
        mx = std::max(mx, sc[s]);
      }
      double sum = 0;
      for (double& v : sc) sum += (v = std::exp(v - mx));
      for (size_t s = 0; s <= t; ++s)
        for (int i = 0; i < kHd; ++i) o[size_t(h * kHd + i)] += sc[s] / sum * V[s][size_t(kv * kHd + i)];
    }
    out.push_back(matvec(W[m + "o_proj.weight"], o));
  }
  return out;
}

// Routing facts gathered over every MoE evaluation, so that the test can tell a real mismatch from a
// near-tie and can show that the correction bias matters.
struct RouteStats {
  double min_margin = INFINITY;  // smallest gap between the k-th and (k+1)-th selection score
  int bias_changed = 0;          // token×layer cases where the bias changes the selected set
};

std::vector<int> top_k(const std::vector<double>& score, int k) {
  std::vector<int> idx(score.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return score[size_t(a)] > score[size_t(b)]; });
  idx.resize(size_t(k));
  return idx;
}

// §5: sigmoid router, selection by s + bias, weights from s normalized, times the scaling factor;
// latent fc1/fc2 around the routed experts; shared expert on the full-width input.
Rows ref_moe(const Weights& W, const std::string& m, const MoeShape& sh, const Rows& Xn, RouteStats& rs) {
  const auto& bias = W[m + "gate.e_score_correction_bias"];
  Rows out;
  for (const auto& h : Xn) {
    std::vector<double> s = matvec(W[m + "gate.weight"], h), sel(s.size());
    for (size_t e = 0; e < s.size(); ++e) sel[e] = (s[e] = sigmoid(s[e])) + bias[e];
    std::vector<int> idx = top_k(sel, sh.k);
    if (sh.k < sh.E) {
      std::vector<double> sorted = sel;
      std::sort(sorted.rbegin(), sorted.rend());
      rs.min_margin = std::min(rs.min_margin, sorted[size_t(sh.k - 1)] - sorted[size_t(sh.k)]);
      std::vector<int> a = idx, b = top_k(s, sh.k);
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      rs.bias_changed += a != b;
    }
    double sum = 0;
    for (int e : idx) sum += s[size_t(e)];
    const std::vector<double> u = sh.L ? matvec(W[m + "fc1_latent_proj.weight"], h) : h;
    std::vector<double> r(u.size(), 0.0);
    for (int e : idx) {
      const double wt = s[size_t(e)] / (sum + 1e-20) * kScaling;
      const std::string ep = m + "experts." + std::to_string(e) + ".";
      const std::vector<double> y = ffn(W[ep + "up_proj.weight"], W[ep + "down_proj.weight"], u);
      for (size_t c = 0; c < r.size(); ++c) r[c] += wt * y[c];
    }
    if (sh.L) r = matvec(W[m + "fc2_latent_proj.weight"], r);
    const std::vector<double> se = ffn(W[m + "shared_experts.up_proj.weight"], W[m + "shared_experts.down_proj.weight"], h);
    for (size_t c = 0; c < r.size(); ++c) r[c] += se[c];
    out.push_back(std::move(r));
  }
  return out;
}

// §2, §7: embedding → per layer x += mixer(RMSNorm(x)·w) → RMSNorm(x)·norm_f → lm_head.
Rows ref_logits(const Weights& W, const std::vector<int32_t>& tokens, RouteStats& rs) {
  const auto& emb = W["model.embeddings.weight"];
  Rows X;
  for (int32_t t : tokens) X.emplace_back(emb.begin() + int64_t(t) * kHidden, emb.begin() + int64_t(t + 1) * kHidden);
  for (size_t i = 0; i < kBlocks.size(); ++i) {
    const std::string p = layer_prefix(i), m = p + "mixer.";
    Rows Xn;
    for (const auto& x : X) Xn.push_back(rms_norm(x, W[p + "norm.weight"]));
    Rows Y;
    switch (kBlocks[i].kind) {
      case LayerKind::Mamba: Y = ref_mamba(W, m, Xn); break;
      case LayerKind::Attention: Y = ref_attention(W, m, Xn); break;
      case LayerKind::MoE: Y = ref_moe(W, m, kBlocks[i].moe, Xn, rs); break;
      case LayerKind::MLP:
        for (const auto& x : Xn) Y.push_back(ffn(W[m + "up_proj.weight"], W[m + "down_proj.weight"], x));
        break;
    }
    for (size_t t = 0; t < X.size(); ++t)
      for (int c = 0; c < kHidden; ++c) X[t][size_t(c)] += Y[t][size_t(c)];
  }
  Rows L;
  for (const auto& x : X) L.push_back(matvec(W["lm_head.weight"], rms_norm(x, W["model.norm_f.weight"])));
  return L;
}

// ---- comparison ----

// tandem's logits [rows, V] against reference rows first_row … first_row+rows−1:
// max |Δ| ≤ kLogitTol · max |logit| and the same argmax at every position except near-ties (top-2 gap
// of the reference below the tolerance), which are reported and skipped.
// Measured on the CPU (x86-64, AVX2): max |Δ| / max |logit| from 1.6e-7 to 6.8e-7 over the prefills
// and verify steps (float32 against float64). The bound is 4.4× the worst: room for another CPU's
// SIMD width and FMA, far below a real defect.
constexpr double kLogitTol = 3e-6;
void expect_logits_match(const std::vector<float>& got, const Rows& ref, size_t first_row, const std::string& what) {
  ASSERT_EQ(got.size() % kVocab, 0u) << what;
  const size_t rows = got.size() / kVocab;
  ASSERT_LE(first_row + rows, ref.size()) << what;
  double max_logit = 0, max_diff = 0;
  for (size_t r = 0; r < rows; ++r)
    for (int v = 0; v < kVocab; ++v) {
      max_logit = std::max(max_logit, std::abs(ref[first_row + r][size_t(v)]));
      max_diff = std::max(max_diff, std::abs(double(got[r * kVocab + size_t(v)]) - ref[first_row + r][size_t(v)]));
    }
  const double tol = kLogitTol * max_logit;
  EXPECT_LE(max_diff, tol) << what << ": max |Δlogit| " << max_diff << ", max |logit| " << max_logit;
  std::printf("[measure] %s: max |Δlogit| / max |logit| = %.3g (bound %.3g)\n", what.c_str(), max_diff / max_logit,
              kLogitTol);
  for (size_t r = 0; r < rows; ++r) {
    const auto& rr = ref[first_row + r];
    const size_t want = size_t(std::max_element(rr.begin(), rr.end()) - rr.begin());
    const size_t have = size_t(std::max_element(got.begin() + int64_t(r * kVocab), got.begin() + int64_t((r + 1) * kVocab)) -
                               (got.begin() + int64_t(r * kVocab)));
    std::vector<double> sorted = rr;
    std::sort(sorted.rbegin(), sorted.rend());
    if (sorted[0] - sorted[1] < tol) {
      std::printf("[ note ] %s: position %zu skipped for argmax (top-2 gap %.3g < tolerance %.3g)\n", what.c_str(),
                  first_row + r, sorted[0] - sorted[1], tol);
      continue;
    }
    EXPECT_EQ(have, want) << what << ": argmax differs at position " << first_row + r;
  }
}

// ---- the fixture: write once, load once, one reference per prompt ----

class PuzzleModel : public ::testing::Test {
 protected:
  // A failure here is recorded and reported by every test, instead of leaving them a null model.
  static void SetUpTestSuite() {
    try {
      build();
    } catch (const std::exception& e) {
      setup_error_ = e.what();
    }
  }
  void SetUp() override { ASSERT_TRUE(setup_error_.empty()) << "setting up the puzzle model: " << setup_error_; }

  static void build() {
    dir_ = fs::temp_directory_path() /
           ("tandem_puzzle_" + std::to_string(::getpid()) + "_" + std::to_string(std::random_device{}()));
    fs::create_directories(dir_);
    weights_ = std::make_unique<Weights>(20240917);
    make_weights(*weights_);
    st::write_file((dir_ / "model.safetensors").string(), weights_->tensors());
    std::ofstream(dir_ / "config.json") << config_json();

    registry_ = std::make_unique<PluginRegistry>();
    registry_->load_directory(plugin_dir());
    LoadOptions o;
    o.path = dir_.string();
    o.device = "cpu";
    model_ = Model::load(o, *registry_);

    prompts_.clear();
    refs_.clear();
    std::mt19937_64 g(7);
    for (int n : {1, 5, 40}) {
      std::vector<int32_t> p(static_cast<size_t>(n));
      for (auto& t : p) t = int32_t(g() % kVocab);
      refs_.push_back(ref_logits(*weights_, p, stats_));
      prompts_.push_back(std::move(p));
    }
  }
  static void TearDownTestSuite() {
    model_.reset();  // before the registry unloads the plugins
    registry_.reset();
    weights_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  static inline std::string setup_error_;
  static inline fs::path dir_;
  static inline std::unique_ptr<Weights> weights_;
  static inline std::unique_ptr<PluginRegistry> registry_;
  static inline std::unique_ptr<Model> model_;
  static inline std::vector<std::vector<int32_t>> prompts_;
  static inline std::vector<Rows> refs_;
  static inline RouteStats stats_;
};

TEST_F(PuzzleModel, DescHasEachBlocksOwnSizes) {
  const ModelDesc& d = model_->desc();
  EXPECT_EQ(model_->format_name(), "safetensors");
  EXPECT_EQ(d.model_type, "nemotron_h_puzzle");
  EXPECT_EQ(d.vocab, kVocab);
  EXPECT_EQ(d.hidden, kHidden);
  EXPECT_EQ(d.pattern(), kPattern);
  ASSERT_EQ(d.layers.size(), kBlocks.size());
  for (size_t i = 0; i < kBlocks.size(); ++i) {
    const LayerDesc& l = d.layers[i];
    const Block& b = kBlocks[i];
    SCOPED_TRACE("layer " + std::to_string(i));
    ASSERT_EQ(l.kind, b.kind);
    if (b.kind == LayerKind::MoE) {
      EXPECT_EQ(l.moe.n_experts, b.moe.E);
      EXPECT_EQ(l.moe.top_k, b.moe.k);
      EXPECT_EQ(l.moe.width, b.moe.w);
      EXPECT_EQ(l.moe.shared_width, b.moe.SH);
      EXPECT_EQ(l.moe.latent, b.moe.L);
      EXPECT_FLOAT_EQ(l.moe.scaling, float(kScaling));
      EXPECT_TRUE(l.moe.norm_topk_prob);
    } else if (b.kind == LayerKind::MLP) {
      EXPECT_EQ(l.mlp.width, b.mlp_width);
    } else if (b.kind == LayerKind::Mamba) {
      EXPECT_EQ(l.mamba.n_heads, kNh);
      EXPECT_EQ(l.mamba.head_dim, kP);
      EXPECT_EQ(l.mamba.n_groups, kG);
      EXPECT_EQ(l.mamba.state_size, kN);
      EXPECT_EQ(l.mamba.chunk_size, kChunk);
    } else {
      EXPECT_EQ(l.attn.n_heads, kNq);
      EXPECT_EQ(l.attn.n_kv_heads, kNkv);
      EXPECT_EQ(l.attn.head_dim, kHd);
    }
  }
}

// The reference itself: healthy logits, routing that the bias changes, and no routing near-tie that
// f32 could resolve differently from f64.
TEST_F(PuzzleModel, ReferenceIsInformative) {
  const Rows& r = refs_.back();
  double sum = 0, sq = 0;
  std::vector<size_t> argmaxes;
  for (const auto& row : r) {
    for (double v : row) sum += v, sq += v * v;
    argmaxes.push_back(size_t(std::max_element(row.begin(), row.end()) - row.begin()));
  }
  const double n = double(r.size() * kVocab), sd = std::sqrt(sq / n - (sum / n) * (sum / n));
  std::sort(argmaxes.begin(), argmaxes.end());
  const auto distinct = std::unique(argmaxes.begin(), argmaxes.end()) - argmaxes.begin();
  std::printf("[ info ] reference: logit sd %.3f, %td distinct argmax over 40 positions, bias changed %d "
              "routings, min routing margin %.3g\n", sd, distinct, stats_.bias_changed, stats_.min_margin);
  EXPECT_GT(sd, 1.0);
  EXPECT_LT(sd, 10.0);
  EXPECT_GE(distinct, 10);
  EXPECT_GT(stats_.bias_changed, 0);
  EXPECT_GT(stats_.min_margin, 1e-5) << "a routing near-tie: pick another seed";
}

TEST_F(PuzzleModel, PrefillMatchesReference) {
  for (size_t i = 0; i < prompts_.size(); ++i) {
    const std::string what = "prefill of " + std::to_string(prompts_[i].size());
    auto seq = model_->new_sequence(64);
    std::vector<float> logits;
    model_->forward(*seq, prompts_[i], ForwardMode::Prefill, logits, /*all_positions=*/true);
    ASSERT_EQ(logits.size(), prompts_[i].size() * kVocab) << what;
    expect_logits_match(logits, refs_[i], 0, what);

    // The last position alone is the same row.
    auto seq2 = model_->new_sequence(64);
    std::vector<float> last;
    model_->forward(*seq2, prompts_[i], ForwardMode::Prefill, last, /*all_positions=*/false);
    ASSERT_EQ(last.size(), size_t(kVocab)) << what;
    expect_logits_match(last, refs_[i], prompts_[i].size() - 1, what + " (last position only)");
  }
}

// Prefill 20, then 20 single-token verify steps, each committed: the state carried across the
// prefill/verify boundary (conv window, SSM state, KV cache) must continue the same sequence.
TEST_F(PuzzleModel, PrefillThenVerifyStepsMatchReference) {
  const std::vector<int32_t>& p = prompts_.back();
  const Rows& ref = refs_.back();
  auto seq = model_->new_sequence(64);
  std::vector<float> logits;
  model_->forward(*seq, {p.begin(), p.begin() + 20}, ForwardMode::Prefill, logits, true);
  expect_logits_match(logits, ref, 0, "prefill of 20");
  model_->commit(*seq, 20);
  for (size_t t = 20; t < p.size(); ++t) {
    model_->forward(*seq, {p[t]}, ForwardMode::Verify, logits, true);
    expect_logits_match(logits, ref, t, "verify step at position " + std::to_string(t));
    model_->commit(*seq, 1);
  }
  EXPECT_EQ(seq->pos, int64_t(p.size()));
}

}  // namespace
}  // namespace tandem::test
