// The LiLiCorr head (spec/lilicorr.md § 2): a candidate-lattice reranker over the DFlash backbone's
// draft rows. Per slot s the top-K candidates of the target's LM head become lattice nodes; a small
// transformer mixes them; start and pair scores, conditioned on the anchor row, pick one candidate per
// slot by a greedy walk. CPU reference in fp32.
// Owner: a HeadWeights is shared (read-only) by every drafter of one checkpoint. Thread: any caller,
// one at a time per HeadScratch. Sync: none (host memory).
#pragma once
#include <cstdint>
#include <vector>

#include "host_ops.h"

namespace tandem::lilicorr {

struct HeadConfig {
  int64_t model_hidden = 0;  // H: the backbone's (= the target's) width
  int64_t hidden = 0;        // Hh
  int layers = 0, heads = 0;
  int64_t mlp = 0;           // M = int(Hh · mlp_ratio)
  int block = 0;             // B: slots S = B − 1
  int topk = 0;              // K
  int64_t factor = 0;        // F
  float rms_eps = 1e-5f, vector_eps = 1e-4f, logit_scale = 1.0f;
  int slots() const { return block - 1; }
};

struct HeadLayer {
  std::vector<float> attn_norm, mlp_norm;
  Linear in_proj, out_proj, up, down;
};

struct HeadWeights {
  HeadConfig c;
  Linear token_proj;  // empty when Hh == H (identity)
  Linear pass_hidden_proj, context_proj;
  std::vector<float> feature_norm_w, feature_norm_b;  // LayerNorm(5)
  Linear feature_up, feature_down;
  std::vector<float> slot_embedding;  // [S, Hh]
  std::vector<float> rank_embedding;  // [K, Hh]
  std::vector<float> relative_slot_bias;  // [heads, 2B − 1]
  std::vector<float> same_slot_bias;      // [heads]
  std::vector<HeadLayer> layers;
  std::vector<float> output_norm, anchor_norm;
  Linear factor_input_proj, out_head, in_head, anchor_out_head;
};

// What score() gives: start [K], pairs [(S − 1), K, K] (pairs[s][k][k′]: candidate k of slot s, then
// k′ of slot s + 1), already times logit_scale.
struct HeadScores {
  std::vector<float> start, pairs;
};

// The nodes' features LayerNorm([ℓ, e^ℓ, ℓ − max_k ℓ, k/(K − 1), [k = 0]]) (weights norm_w, norm_b [5])
// for `slots` slots of logp [slots·K] into feat [slots·K, 5] (host fp32; the device head uploads them).
void lattice_features(int slots, int topk, const float* logp, const std::vector<float>& norm_w,
                      const std::vector<float>& norm_b, float* feat);

// Scores the lattice of `slots` slots (1 … S; the first `slots` of the trained ones):
// emb [slots·K, H] (target embeddings of the candidates, slot-major), logp [slots·K] (their
// vocabulary-normalised log-probabilities, descending per slot), pass [slots, H] (the backbone's
// normed draft rows), anchor [H] (hidden_norm(fc(features)) of the row that predicted the anchor
// token); `anchor_valid` false multiplies context_proj(anchor) by 0 (no such row).
void score(const HeadWeights& w, int slots, const float* emb, const float* logp, const float* pass,
           const float* anchor, bool anchor_valid, HeadScores& out);

// The greedy walk: k₁ = argmax start, k_{s+1} = argmax pairs[s][k_s, :] (lowest index on ties).
std::vector<int> greedy_path(const HeadScores& s, int slots, int topk);

}  // namespace tandem::lilicorr
