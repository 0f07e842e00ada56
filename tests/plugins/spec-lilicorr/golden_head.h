// The LiLiCorr head's golden case (spec/lilicorr.md § 4): TensorRT-LLM's frozen Model-Optimizer
// reference of NVIDIA/TensorRT-LLM tests/unittest/_torch/speculative/hw_agnostic/test_lilicorr.py
// (test_head_matches_reference_scores, @8d62b3e), its inputs, parameter rule and expected scores read
// there as data. Shared by the host test (test_head.cpp) and the device test (test_drafting.cpp).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "checkpoint.h"
#include "head.h"

namespace tandem::lilicorr::golden {

// torch.linspace(lo, hi, n) in float32 (the first half counts from lo, the second from hi).
inline std::vector<float> linspace(float lo, float hi, int n) {
  std::vector<float> v(static_cast<size_t>(n));
  const float step = (hi - lo) / float(n - 1);
  for (int i = 0; i < n; ++i) v[size_t(i)] = i < n / 2 ? lo + step * float(i) : hi - step * float(n - 1 - i);
  return v;
}

// The test's parameter rule: 0.2·sin(0.17·arange(numel) + 0.013·Σ bytes(name)), float32.
inline HostTensor param(const std::string& name, std::vector<int64_t> shape) {
  HostTensor t;
  t.shape = std::move(shape);
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  int bytes = 0;
  for (unsigned char c : name) bytes += c;
  const float off = float(double(bytes) * 0.013);
  for (int64_t i = 0; i < n; ++i) t.data.push_back(std::sin(float(i) * 0.17f + off) * 0.2f);
  return t;
}

// HEAD_CONFIG: model_hidden 32, hidden 8, 2 layers, 2 heads, mlp_ratio 2, block 4, topk 3, factor 8.
inline HeadWeights golden_head() {
  const int64_t H = 32, Hh = 8, M = 16, S = 3, K = 3, F = 8, nh = 2, B = 4;
  TensorMap t;
  auto add = [&](const std::string& n, std::vector<int64_t> shape) { t["lilicorr." + n] = param(n, std::move(shape)); };
  auto linear = [&](const std::string& n, int64_t out, int64_t in) {
    add(n + ".weight", {out, in});
    add(n + ".bias", {out});
  };
  linear("token_proj", Hh, H);
  linear("pass_hidden_proj", Hh, H);
  add("feature_norm.weight", {5});
  add("feature_norm.bias", {5});
  linear("feature_mlp.up_proj", Hh, 5);
  linear("feature_mlp.down_proj", Hh, Hh);
  add("slot_embedding", {1, S, 1, Hh});  // TRT's 4-D layout
  add("rank_embedding", {1, 1, K, Hh});
  add("relative_slot_bias", {nh, 2 * B - 1});
  add("same_slot_bias", {nh});
  linear("context_proj", Hh, H);
  for (int j = 0; j < 2; ++j) {
    const std::string p = "layers." + std::to_string(j) + ".";
    add(p + "attn_norm.weight", {Hh});
    add(p + "attn.in_proj_weight", {3 * Hh, Hh});
    add(p + "attn.in_proj_bias", {3 * Hh});
    linear(p + "attn.out_proj", Hh, Hh);
    add(p + "mlp_norm.weight", {Hh});
    linear(p + "mlp.up_proj", M, Hh);
    linear(p + "mlp.down_proj", Hh, M);
  }
  add("output_norm.weight", {Hh});
  add("anchor_norm.weight", {Hh});
  linear("factor_input_proj", Hh, 3 * Hh);
  linear("out_head", F, Hh);
  linear("in_head", F, Hh);
  linear("anchor_out_head", F, Hh);
  HeadSettings s;
  s.topk = 3, s.hidden = Hh, s.layers = 2, s.heads = 2, s.mlp_ratio = 2, s.factor = F;
  s.vector_eps = 1e-4, s.logit_scale = 8, s.complete = true;
  HeadWeights w = build_head(s, int(B), 1e-5f, H, t, "golden");
  EXPECT_TRUE(t.empty()) << "every parameter is used";
  return w;
}

struct GoldenInputs {
  std::vector<float> emb, logp, pass, anchor;
};

inline GoldenInputs golden_inputs() {
  GoldenInputs in;
  const auto table = linspace(-1.2f, 1.3f, 512);  // [16, 32]
  const int ids[3][3] = {{2, 5, 9}, {6, 3, 1}, {4, 7, 8}};
  for (const auto& slot : ids)
    for (int id : slot) in.emb.insert(in.emb.end(), table.begin() + id * 32, table.begin() + (id + 1) * 32);
  in.logp = {-0.4f, -1.5f, -3.0f, -0.6f, -1.7f, -2.7f, -0.2f, -2.1f, -3.4f};
  in.pass = linspace(-0.7f, 0.9f, 96);
  in.anchor = linspace(-0.5f, 0.4f, 32);
  return in;
}

const std::vector<float> kStart = {-2.00565147f, -2.00631571f, -2.01010752f};
const std::vector<float> kPairs = {1.16437435f, 1.16812551f, 1.15701485f, 1.16656375f, 1.17030466f, 1.15921211f,
                                   1.17068172f, 1.17445230f, 1.16334319f, 1.14806044f, 1.14459574f, 1.12698877f,
                                   1.14481199f, 1.14134955f, 1.12373281f, 1.14475155f, 1.14125943f, 1.12357390f};

// The reference's tolerance (fp32, atol 2e-5; here also 2e-5 relative).
inline void expect_scores(const HeadScores& sc, const std::string& what) {
  ASSERT_EQ(sc.start.size(), kStart.size()) << what;
  ASSERT_EQ(sc.pairs.size(), kPairs.size()) << what;
  for (size_t i = 0; i < kStart.size(); ++i)
    EXPECT_NEAR(sc.start[i], kStart[i], 2e-5 + 2e-5 * std::fabs(kStart[i])) << what << ": start[" << i << "]";
  for (size_t i = 0; i < kPairs.size(); ++i)
    EXPECT_NEAR(sc.pairs[i], kPairs[i], 2e-5 + 2e-5 * std::fabs(kPairs[i]))
        << what << ": pairs[" << i / 9 << "][" << i / 3 % 3 << "][" << i % 3 << "]";
}

}  // namespace tandem::lilicorr::golden
