// The DFlash backbone of the LiLiCorr drafter (spec/lilicorr.md § 1): fc + hidden_norm turn the
// concatenated target taps of each committed position into a context row; Qwen3-style layers (q/k
// norms, RoPE, GQA, SwiGLU) run a bidirectional block [anchor, mask × (B − 1)] that attends to the
// cached context K/V and to itself. CPU reference in fp32.
// Owner: BackboneWeights are shared read-only by every drafter of one checkpoint; a ContextCache
// belongs to one sequence. Thread: the engine thread. Sync: none (host memory).
#pragma once
#include <cstdint>
#include <vector>

#include "host_ops.h"

namespace tandem::lilicorr {

struct BackboneConfig {
  int64_t hidden = 0;        // H, = the target's width
  int layers = 0, heads = 0, kv_heads = 0, head_dim = 0;
  int64_t intermediate = 0;
  float eps = 1e-6f;
  double rope_theta = 1e6;
  // rope_scaling yarn (yarn.h): the frequency table [head_dim/2] and the cos/sin scale; empty: plain
  // RoPE from rope_theta.
  std::vector<float> rope_inv_freq;
  float rope_scale = 1.0f;
  int block = 16;            // B
  int32_t mask_token = 0;
  std::vector<int> target_layers;  // target layer ids whose outputs are concatenated
  float embedding_scale = 1.0f, output_multiplier = 1.0f, softcap = 0.0f;  // softcap 0 = none
};

struct BackboneLayer {
  std::vector<float> input_norm, post_norm, q_norm, k_norm;
  Linear q, k, v, o, gate, up, down;
};

struct BackboneWeights {
  BackboneConfig c;
  Linear fc;  // [H, n·H], no bias
  std::vector<float> hidden_norm, norm;
  std::vector<BackboneLayer> layers;
};

// The context K/V of one sequence: committed positions only, after k_norm and RoPE.
struct ContextCache {
  int64_t rows = 0;
  std::vector<std::vector<float>> k, v;  // per layer, [rows, kv_heads·head_dim]
  std::vector<float> last_row;           // hidden_norm(fc(·)) of the last position (the anchor row)
  void clear() {
    rows = 0;
    k.clear();
    v.clear();
    last_row.clear();
  }
};

// The context rows hidden_norm(fc(feats)) of n positions from their concatenated taps feats [n, taps·H]
// into out [n, H] (what every layer's K/V and the head's anchor read).
void context_rows(const BackboneWeights& w, const float* feats, int64_t n, std::vector<float>& out);

// Appends n positions (rows … rows + n − 1) from their concatenated taps feats [n, taps·H].
void append_context(const BackboneWeights& w, const float* feats, int64_t n, ContextCache& cache);

// Runs the block whose embedded rows are x [B, H] (target embeddings · scale) at positions
// cache.rows … cache.rows + B − 1 and writes norm(x) of rows 1 … B − 1 into out [B − 1, H].
void run_block(const BackboneWeights& w, const ContextCache& cache, std::vector<float> x, std::vector<float>& out);

}  // namespace tandem::lilicorr
