// Host kernels of the Mamba2 mixer (spec/nemotron_h.md § 3): causal conv, Δ, the single-step
// recurrence shared by verify and replay, and the chunked SSD scan used by prefill.
// Owner: callers own every buffer. Thread: any; kernels split work with tandem::parallel_for.
// Sync: none (host memory, returns when done).
#pragma once
#include <cmath>
#include <cstdint>

#include "tandem/model_config.h"

namespace tandem::mamba2 {

// The fixed scalar functions of the mixer. Verify, replay and prefill all call these, so a value
// computed twice is computed with the same bits.
inline float silu(float v) { return v / (1.0f + std::exp(-v)); }
// Threshold form of mamba_ssm, ggml and torch: x if x > 20, else log1p(exp x).
inline float softplus(float v) { return v > 20.0f ? v : std::log1p(std::exp(v)); }

// Sizes of one mixer, derived once from MambaDesc.
struct Dims {
  int nh = 0, P = 0, G = 0, N = 0, K = 0, Q = 0;  // Q = chunk length
  int64_t d_in = 0, conv_dim = 0, rows = 0;        // rows = in_proj rows
  int heads_per_group() const { return nh / G; }
  static Dims from(const MambaDesc& d);
};

// One recurrence step of head h (§ 3.5), the only place the SSM state advances token by token.
// s_out may alias s_in. s [P, N]; x [P]; b [N].
inline void step_state(const float* s_in, float* s_out, const float* x, const float* b, float dt,
                       float a, int P, int N) {
  const float da = std::exp(dt * a);
  for (int p = 0; p < P; ++p) {
    const float dx = dt * x[p];
    const float* si = s_in + int64_t(p) * N;
    float* so = s_out + int64_t(p) * N;
    for (int n = 0; n < N; ++n) so[n] = da * si[n] + dx * b[n];
  }
}

// y[p] = Σ_n s[p,n]·c[n] + d·x[p], summed in n order.
inline void step_output(const float* s, const float* x, const float* c, float d, float* y, int P, int N) {
  for (int p = 0; p < P; ++p) {
    const float* sp = s + int64_t(p) * N;
    float acc = 0.0f;
    for (int n = 0; n < N; ++n) acc += sp[n] * c[n];
    y[p] = acc + d * x[p];
  }
}

// Causal depthwise conv over n positions of C channels, then silu (§ 3.2).
// window [C, K−1]: the last K−1 pre-conv inputs before position 0 (oldest first).
// u: pre-conv inputs, row t at u + t·u_stride. w [C, K]; bias [C] or null. out: row t at
// out + t·out_stride. Each output is Σ_j w[c,j]·u[t−K+1+j] in j order, then + bias, then silu.
void conv_silu(const float* window, const float* u, int64_t u_stride, int n, const float* w,
               const float* bias, int64_t C, int K, float* out, int64_t out_stride);

// The conv window after taking the first `taken` positions of u: the last K−1 rows of
// [window ; u_0 … u_{taken−1}], as [C, K−1]. out must not alias window.
void shift_window(const float* window, const float* u, int64_t u_stride, int taken, int64_t C, int K,
                  float* out);

// Scan inputs of a pass of n positions. xbc rows hold x | B | C after the conv (stride xbc_stride);
// dt [n, nh] holds Δ after softplus.
struct ScanInput {
  const float* xbc = nullptr;
  int64_t xbc_stride = 0;
  const float* dt = nullptr;
  int n = 0;
};

// Verify: the step recurrence, position by position, from s_in into s_out ([nh, P, N]; s_out may
// alias s_in). y [n, d_in] gets Σ S·C + D·x per position.
void scan_steps(const Dims& dm, const ScanInput& in, const float* a, const float* d, const float* s_in,
                float* s_out, float* y);

// Replay: the same state steps without outputs, in place on s [nh, P, N].
void replay_steps(const Dims& dm, const ScanInput& in, const float* a, float* s);

// Prefill: chunked SSD (§ 3.6) with chunk length dm.Q and a ragged last chunk. Starts from s_in and
// leaves the final state in s_out (must not alias s_in). y [n, d_in] includes D·x. Chunks start at
// the pass's first token, so prefill passes split at multiples of Q give the bits of one pass.
void scan_chunked(const Dims& dm, const ScanInput& in, const float* a, const float* d, const float* s_in,
                  float* s_out, float* y);

}  // namespace tandem::mamba2
