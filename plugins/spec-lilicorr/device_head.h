// The LiLiCorr head (head.h) on the target's backend: its linears loaded once by the target's own weight
// formats (Model::load_weight, BF16 where the checkpoint's values are BF16), the lattice run as Backend
// ops (rms_norm, attention_bias, silu_mul, mul_add_rows, normalize_rows, group_dots) and matmuls, so
// one code path serves a CPU and a CUDA target. Only the start/pair scores come back to the host, for
// the greedy walk; the five features per node are built on the host from the candidates'
// log-probabilities (which the drafter downloads anyway) and uploaded. head.cpp stays the fp32 host
// reference that tests compare against.
// Owner: DeviceHeadWeights belong to one (checkpoint, target) pair and are shared read-only by the
// drafters made for it; a DeviceHead (its scratch) belongs to one drafter. Thread: the engine thread.
// Sync: score() queues the lattice, then downloads the scores (that download synchronizes); run() only
// queues work (a drafter may record it as a CUDA graph).
#pragma once
#include <memory>
#include <vector>

#include "device_backbone.h"
#include "head.h"

namespace tandem::lilicorr {

struct DeviceHeadLayer {
  std::unique_ptr<Buffer> attn_norm, mlp_norm;
  DeviceLinear q, k, v, out_proj, up, down;  // q|k|v: in_proj split by rows
};

struct DeviceHeadWeights {
  HeadConfig c;
  DeviceLinear token_proj;  // w null when Hh == H (identity)
  DeviceLinear pass_hidden_proj, context_proj, feature_up, feature_down;
  std::vector<float> feature_norm_w, feature_norm_b;  // host: the features are built there
  std::unique_ptr<Buffer> node_embedding;  // [S·K, Hh]: slot_embedding[s] + rank_embedding[k]
  std::unique_ptr<Buffer> attention_bias;  // [heads·S·K, S·K]: relative_slot_bias + same_slot_bias
  std::vector<DeviceHeadLayer> layers;
  std::unique_ptr<Buffer> output_norm, anchor_norm;
  // factor_input_proj [Hh, 3Hh] split by columns: W_y (with the bias), W_α, W_{y⊙α}.
  DeviceLinear factor_y, factor_a, factor_ya;
  DeviceLinear out_head, in_head, anchor_out_head;
  WeightSource src;
};

// Loads `w` onto the target's backend with the target's formats.
std::shared_ptr<const DeviceHeadWeights> load_device_head(const HeadWeights& w, Model& target);

// Rows per matmul call of the head by default: the lattice's S·K rows go through the target's formats in
// chunks of this many, which keeps CUDA's dense BF16 weights on their GEMV path (≤ 16 rows) rather than
// the tiled kernel, whose 1024-wide outputs fill only 16 blocks (docs/decisions.md: the estimate).
constexpr int64_t kHeadMatmulRows = 16;

class DeviceHead {
 public:
  // matmul_rows: rows per matmul call (0 = all rows in one call).
  DeviceHead(Backend& backend, std::shared_ptr<const DeviceHeadWeights> w, int64_t matmul_rows = kHeadMatmulRows);
  // Scores the full lattice (all S slots) like score() in head.h: emb [S·K, H] (candidates' target
  // embeddings, slot-major), pass [S, H] and anchor [1, H] in device memory, logp [S·K] on the host.
  // out gets the downloaded start [K] and pairs [(S − 1)·K·K].
  // The same as features(logp), run(…), fetch(out).
  void score(const Tensor& emb, const float* logp, const Tensor& pass, const Tensor& anchor, bool anchor_valid,
             HeadScores& out);
  // The three parts of score(), for a drafter that records run() in a graph (drafter.cpp): the nodes'
  // features built on the host from logp and uploaded (queued, never recorded); the lattice and its
  // scores, recordable (fixed addresses: emb, pass and anchor must keep theirs between replays, and
  // nothing read from the host); the scores' download (it synchronizes).
  void features(const float* logp);
  void run(const Tensor& emb, const Tensor& pass, const Tensor& anchor, bool anchor_valid);
  void fetch(HeadScores& out);

 private:
  Tensor buf(const std::unique_ptr<Buffer>& b, int64_t rows, int64_t cols) const;
  // y = x·Wᵀ + b, in calls of matmul_rows_ rows.
  void linear(const DeviceLinear& L, const Tensor& x, const Tensor& y);

  Backend& be_;
  std::shared_ptr<const DeviceHeadWeights> w_;
  int64_t matmul_rows_;
  std::vector<float> feat_;  // host [S·K, 5]
  std::unique_ptr<Buffer> feat_dev_, x_, h_, d_, q_, k_, v_, att_, u_, ones_, t_, alpha_, ga_, o_, in_, ao_, scores_;
};

}  // namespace tandem::lilicorr
