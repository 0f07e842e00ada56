// CUDA kernels of the Mamba2 mixer (spec/nemotron_h.md § 3), the device twins of scan_cpu.h: Δ, the
// causal conv with its window, the single-step recurrence shared by verify and replay, and the
// chunked SSD scan of prefill. Layouts and contracts are those of scan_cpu.h.
// Owner: callers own every pointer (device memory). Thread: one caller per stream.
// Sync: each launch is queued on `stream` and returns; a configuration error throws tandem::Error.
// The step recurrence keeps one SSM row in registers and rounds every expression as written (the
// CUDA modules build without FMA contraction), so n steps in one launch leave the bits of n launches
// of one step: that is what makes verify batch invariant and commit(n) exact.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "scan_cpu.h"

namespace tandem::mamba2 {

// N ≤ kMaxState: one SSM row [N] lives in a warp's registers.
constexpr int kMaxState = 256;

// rows[t, c] += bias[c] for t < n, c < cols (row stride `cols`).
void launch_add_bias(float* rows, int64_t n, int64_t cols, const float* bias, cudaStream_t stream);
// dt[t, h] = softplus(proj[t·stride + col + h] + dt_bias[h]), then max(·, t_min) when clamp.
void launch_dt(const float* proj, int64_t stride, int64_t col, const float* dt_bias, int nh, int n, bool clamp,
               float t_min, float* dt, cudaStream_t stream);
// A double-buffered state: buf[*sel] is the committed copy and buf[1 − *sel] the spare, where sel is
// an int (0 or 1) in device memory that kernels read when they run. Work recorded in a graph then
// follows commits that swap the two without being recorded again.
struct StatePair {
  float* buf[2];
  const int* sel;
};

// Copies the conv kernel makes on the way, so that the mixer needs no separate copy: u_log (dense
// [n, C]) gets the pre-conv rows u; z_out (dense [n, z_cols], z_cols ≤ C) gets the z columns, which
// sit at z_src with u's row stride.
struct ConvSide {
  float* u_log = nullptr;
  const float* z_src = nullptr;
  int64_t z_cols = 0;
  float* z_out = nullptr;
};
// conv_silu / shift_window of scan_cpu.h.
void launch_conv_silu(const float* window, const float* u, int64_t u_stride, int n, const float* w, const float* bias,
                      int64_t C, int K, float* out, int64_t out_stride, cudaStream_t stream, const ConvSide& side = {});
// The same with the committed window of `windows`.
void launch_conv_silu(StatePair windows, const float* u, int64_t u_stride, int n, const float* w, const float* bias,
                      int64_t C, int K, float* out, int64_t out_stride, cudaStream_t stream, const ConvSide& side = {});
// With sel != nullptr, one thread also stores sel[0] = sel0 and sel[1] = sel1 (the selectors of a
// commit, known on the host; this kernel reads neither).
void launch_shift_window(const float* window, const float* u, int64_t u_stride, int taken, int64_t C, int K,
                         float* out, cudaStream_t stream, int* sel = nullptr, int sel0 = 0, int sel1 = 0);
// The same shift as one argument: the window after taking `taken` rows of u, into out; with
// sel != nullptr the selectors of a commit are stored too.
struct WindowShift {
  const float* window = nullptr;
  const float* u = nullptr;
  int64_t u_stride = 0;
  int taken = 0;
  int64_t C = 0;
  int K = 0;
  float* out = nullptr;
  int* sel = nullptr;
  int sel0 = 0, sel1 = 0;
};
// sel[0] = sel0, sel[1] = sel1.
void launch_set_selectors(int* sel, int sel0, int sel1, cudaStream_t stream);
// scan_steps: s_out may alias s_in; with y == nullptr nothing but the state is written (replay).
void launch_scan_steps(const Dims& dm, const ScanInput& in, const float* a, const float* d, const float* s_in,
                       float* s_out, float* y, cudaStream_t stream);
// A partial commit in one launch: the replay (scan_steps in place on s, no output) and `shift`.
void launch_replay_and_shift(const Dims& dm, const ScanInput& in, const float* a, float* s, const WindowShift& shift,
                             cudaStream_t stream);
// The same from the committed state of `states` into its spare.
void launch_scan_steps(const Dims& dm, const ScanInput& in, const float* a, const float* d, StatePair states,
                       float* y, cudaStream_t stream);
// One verify pass of n positions in one kernel (decode is the pass of 1): Δ, the causal conv + silu
// from the committed window, the step recurrence from the committed state into the spare, y, and the
// gated grouped RMSNorm of y into `out`, leaving the verify log commit() needs. Each quantity is the
// expression of the unfused kernels in the same order (launch_dt without clamp, launch_conv_silu,
// launch_scan_steps, then the backend's float4 gated norm: 256 threads per group row, each summing
// its float4s in order, then the block tree), so the bits are theirs and a row's bits do not depend
// on n. Blocks own (head, 32 state rows); the last block of a group to finish (counted in
// counters[g], which it resets to zero) normalizes that group's columns for all n rows.
struct VerifyPass {
  const float* proj = nullptr;  // in_proj rows [n, dm.rows]: z | x B C (pre-conv) | dt
  int n = 0;
  const float* conv_w = nullptr;  // [conv_dim, K]
  const float* conv_b = nullptr;  // [conv_dim] or null
  const float* dt_bias = nullptr;
  const float* a = nullptr;
  const float* d = nullptr;
  const float* norm_w = nullptr;  // [d_in]
  float eps = 0.0f;
  StatePair windows{};  // conv windows [conv_dim, K−1]; the committed one is read
  StatePair states{};   // SSM states [nh, P, N]; the committed one is read, the spare written
  float* u_log = nullptr;    // [n, conv_dim]: the pre-conv rows
  float* xbc_log = nullptr;  // [n, conv_dim]: x | B | C after conv + silu
  float* dt_log = nullptr;   // [n, nh]: Δ
  float* y = nullptr;        // [n, d_in] scratch: the scan output before the norm
  float* out = nullptr;      // [n, d_in]: the normed rows (out_proj's input); must not alias y
  unsigned* counters = nullptr;  // [G], zero before the first launch; every launch leaves them zero
};
void launch_verify_fused(const Dims& dm, const VerifyPass& v, cudaStream_t stream);
// The verify passes of several sequences (a forward_batch) in one launch: pass b runs on the blocks of
// blockIdx.z = b, each doing what launch_verify_fused does for that pass alone (the same bits), so a
// batch of B sequences costs one launch a layer instead of B. Each pass needs its own counters.
constexpr int kVerifyBatchMax = 16;
struct VerifyBatch {
  VerifyPass pass[kVerifyBatchMax];
  int count = 0;
};
void launch_verify_fused(const Dims& dm, const VerifyBatch& b, cudaStream_t stream);

// scan_chunked (s_out must not alias s_in) with `workspace` of scan_chunked_workspace_bytes(dm, n), on
// tensor cores in 3xTF32 (ssd_cuda.cu). Its chunks are ssd_chunk_len(dm.Q) tokens: the largest divisor
// of dm.Q that is ≤ kSsdChunk, so passes split at multiples of dm.Q still give the bits of one pass.
// The rounding differs from scan_chunked's (test_mamba2_ssd_cuda holds the two within 1e-4 of the largest value).
constexpr int kSsdChunk = 64;
int ssd_chunk_len(int model_chunk);
size_t scan_chunked_workspace_bytes(const Dims& dm, int n);
void launch_scan_chunked(const Dims& dm, const ScanInput& in, const float* a, const float* d, const float* s_in,
                         float* s_out, float* y, void* workspace, cudaStream_t stream);

}  // namespace tandem::mamba2
