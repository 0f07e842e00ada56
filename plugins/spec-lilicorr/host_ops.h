// Host fp32 building blocks of the LiLiCorr drafter's CPU reference: linear layers, norms, RoPE and
// small attention, each row computed alone (no reduction depends on how many rows come at once).
// Owner: callers own every buffer. Thread: the engine thread (the linears split rows×outputs over the
// shared pool). Sync: none (host memory only).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tandem::lilicorr {

struct Nvfp4Weight;  // quant.h

// y = x·Wᵀ + b: W [out, in] row-major, b empty or [out].
struct Linear {
  int64_t out = 0, in = 0;
  std::vector<float> w, b;
  // The stored form of a linear quantized to NVFP4 (w holds its exact dequantized values): what the
  // target's formats load; null for dense weights.
  std::shared_ptr<const Nvfp4Weight> nvfp4;
  bool empty() const { return w.empty(); }
  // y[n, out] from x[n, in] (y is resized).
  void apply(const float* x, int64_t n, std::vector<float>& y) const;
};

// In place over n rows of width d: x ← x·rsqrt(mean(x²) + eps)·w (no 1 + w).
void rms_norm(float* x, int64_t n, int64_t d, const std::vector<float>& w, float eps);
// LayerNorm over n rows of width d, with weight and bias.
void layer_norm(float* x, int64_t n, int64_t d, const std::vector<float>& w, const std::vector<float>& b, float eps);
inline float silu(float v) { return v / (1.0f + __builtin_expf(-v)); }
void silu(std::vector<float>& x);
// x ← x / max(‖x‖, eps) per row of width d.
void normalize_rows(float* x, int64_t n, int64_t d, float eps);
// Rotary embedding (rotate-half layout, the HF Qwen3 one) on `heads` heads of width hd at `pos`.
void rope(float* x, int heads, int hd, int64_t pos, double theta);
// The same with a frequency table inv_freq [hd/2] (yarn): angle float(pos)·inv_freq[j] in f32 (exact
// as double, rounded once), cos and sin in f32, each times `scale` (HF's attention_scaling).
void rope_table(float* x, int heads, int hd, int64_t pos, const float* inv_freq, float scale);

}  // namespace tandem::lilicorr
