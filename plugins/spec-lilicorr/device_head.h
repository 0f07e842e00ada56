// The LiLiCorr head (head.h) on the target's backend: its linears loaded once by the target's own weight
// formats (Model::load_weight, BF16 where the checkpoint's values are BF16), the lattice run as Backend
// ops (rms_norm, attention_bias_qkv, add_rows, mul_add_rows, normalize_rows, group_dots) and matmuls, so
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

// The linears' biases are not added by the matmuls: each goes into the elementwise op after its linear
// (Backend::add_rows, attention_bias_qkv) or into a table built at load.
struct DeviceHeadLayer {
  std::unique_ptr<Buffer> attn_norm, mlp_norm;
  DeviceLinear qkv;  // in_proj [3Hh, Hh] as stored: one matmul, q|k|v per output row (its bias: attention_bias_qkv)
  DeviceLinear out_proj, up, down;
};

struct DeviceHeadWeights {
  HeadConfig c;
  DeviceLinear token_proj;  // w null when Hh == H (identity)
  DeviceLinear pass_hidden_proj, feature_down;  // without their biases (in node_embedding)
  DeviceLinear context_proj, feature_up;
  std::vector<float> feature_norm_w, feature_norm_b;  // host: the features are built there
  // [S·K, Hh]: slot_embedding[s] + rank_embedding[k] + the biases of token_proj, feature_mlp.down_proj and
  // pass_hidden_proj, so the node sum is one add_rows.
  std::unique_ptr<Buffer> node_embedding;
  std::unique_ptr<Buffer> attention_bias;  // [heads·S·K, S·K]: relative_slot_bias + same_slot_bias
  std::vector<DeviceHeadLayer> layers;
  std::unique_ptr<Buffer> output_norm, anchor_norm;
  // factor_input_proj [Hh, 3Hh] split by columns: W_y (with the bias), W_α, W_{y⊙α}.
  DeviceLinear factor_y, factor_a, factor_ya;
  // Without their biases: those are one table [2·S·K + 1, F] (out_head's for S·K rows, in_head's for S·K,
  // anchor_out_head's), matching the head's outputs o | i | ao, which lie in one buffer.
  DeviceLinear out_head, in_head, anchor_out_head;
  std::unique_ptr<Buffer> vector_bias;
  WeightSource src;
};

// Loads `w` onto the target's backend with the target's formats.
std::shared_ptr<const DeviceHeadWeights> load_device_head(const HeadWeights& w, Model& target);

// Rows per matmul call of the head by default: 0, all S·K rows in one call per linear. (16-row calls kept
// CUDA's dense BF16 weights on their GEMV path; at Bolt geometry one 56-row call measured faster even so,
// 1,025 vs 1,150 µs a head, and 17–64 rows are the dense tensor-core GEMM's case.)
constexpr int64_t kHeadMatmulRows = 0;

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
  // L's bias as a [1, cols] tensor (empty when it has none).
  Tensor bias(const DeviceLinear& L, int64_t cols) const;
  // y = x·Wᵀ without L's bias, in calls of matmul_rows_ rows.
  void matmul(const DeviceLinear& L, const Tensor& x, const Tensor& y);

  Backend& be_;
  std::shared_ptr<const DeviceHeadWeights> w_;
  int64_t matmul_rows_;
  std::vector<float> feat_;  // host [S·K, 5]
  // vec_: o [S·K, F] | i [S·K, F] | ao [1, F], normalized in one call.
  std::unique_ptr<Buffer> feat_dev_, x_, h_, d_, qkv_, att_, u_, t_, alpha_, ga_, vec_, scores_;
};

}  // namespace tandem::lilicorr
