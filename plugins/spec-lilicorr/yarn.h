// YaRN RoPE scaling (rope_scaling {rope_type: yarn, …}) for the drafter's backbone: the frequency table
// and the attention scaling as HF transformers' `_compute_yarn_parameters` computes them (transformers 5:
// `factor` as written, `truncate` default true), in its f32 steps. Written here from that formula.
// Owner: value types. Thread: any. Sync: none.
#pragma once
#include <optional>
#include <vector>

namespace tandem::lilicorr {

struct YarnParams {
  double factor = 1.0;
  double original_max_position_embeddings = 0;
  double beta_fast = 32, beta_slow = 1;  // 0 or absent: 32 and 1 (HF's `or`)
  std::optional<double> attention_factor, mscale, mscale_all_dim;
  bool truncate = true;
};

struct RopeTable {
  std::vector<float> inv_freq;  // [dim/2]
  float scale = 1.0f;           // attention_scaling: cos and sin are multiplied by it
};

// 0.1·m·ln(s) + 1 for s > 1, else 1 (HF's get_mscale).
double yarn_get_mscale(double s, double m = 1.0);

// The table for rotary width `dim` (head_dim) and base `theta`:
//   pos_freq[j] = θ^(2j/dim) (f32), extrapolation 1/pos_freq, interpolation 1/(factor·pos_freq);
//   corr(r) = dim·ln(orig / (2π·r)) / (2 ln θ); low = corr(beta_fast), high = corr(beta_slow) (floor/ceil
//   when truncating), clamped to [0, dim − 1]; ramp[j] = clamp((j − low)/(high − low), 0, 1) (high += 0.001
//   when equal); inv_freq = interpolation·ramp + extrapolation·(1 − ramp);
//   scale = attention_factor, else get_mscale(factor, mscale)/get_mscale(factor, mscale_all_dim) when both
//   are non-zero, else get_mscale(factor).
RopeTable yarn_table(const YarnParams& p, int dim, double theta);

}  // namespace tandem::lilicorr
