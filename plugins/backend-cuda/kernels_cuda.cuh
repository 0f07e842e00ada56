// The CUDA kernels behind CudaBackend, as launch_<op>(..., cudaStream_t) functions on raw device
// pointers, so that tests and other CUDA modules can queue them without a backend object.
// Owner: callers own every pointer (device memory). Thread: one caller per stream.
// Sync: each launch is queued on `stream` and returns; a configuration error throws tandem::Error.
// Contracts are those of the same-named Backend methods (tandem/backend.h); only attention and
// top_k_logprobs take a workspace (attention_workspace_bytes, top_k_workspace_bytes).
// Each output row is computed by the same blocks with the same reduction trees whatever the number
// of rows, so results are batch invariant bit for bit.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "tandem/backend.h"

namespace tandem::cuda {

// x, y [rows, cols] (may alias); w [cols].
void launch_rms_norm(const float* x, const float* w, float eps, int64_t rows, int64_t cols, float* y,
                     cudaStream_t stream);
// y, z, out [rows, cols] (out may alias y or z); w [cols]; groups divides cols.
void launch_gated_rms_norm(const float* y, const float* z, const float* w, int groups, float eps, int64_t rows,
                           int64_t cols, float* out, cudaStream_t stream);
void launch_add(const float* a, const float* b, int64_t n, float* out, cudaStream_t stream);
// x += b, then y = rms_norm(x): one launch where the rows are whole float4s, else add then norm (the
// same bits either way). x, b, y [rows, cols], y distinct from x and b; w [cols].
void launch_add_rms_norm(float* x, const float* b, const float* w, float eps, int64_t rows, int64_t cols, float* y,
                         cudaStream_t stream);
void launch_relu2(float* x, int64_t n, cudaStream_t stream);
// out[t] = Σ_j w[t·k + j]·expert_out[t·k + j], j ascending, as separate multiply and add (the CPU's
// rounding, so the two backends agree bit for bit).
void launch_moe_combine(const float* expert_out, const float* weights, int k, int64_t rows, int64_t cols,
                        float* out, cudaStream_t stream);
// Attention of n query rows at positions pos0.. over caches that already hold rows 0 .. pos0+n−1.
// q, out [n, nq·hd]; caches [capacity, nkv·hd]. hd ≤ kMaxHeadDim. With pos0_device (an int64 in
// device memory) the decode and verify passes (n ≤ kAttentionSplitRows) read the position there when
// they run and pos0 is not used; they split each row's keys into kAttentionSplits ranges (fixed: a
// recorded pass replays at any position). Longer passes (prefill, never recorded: the model records
// passes of at most Model::graph_max_tokens rows) read pos0, which must then equal *pos0_device.
// Every pass needs a workspace of attention_workspace_bytes(n, pos0, nq, nkv, hd) (0 for a prefill
// pass with hd > 128, which runs the SIMT kernel; it may be null then).
constexpr int kMaxHeadDim = 512;
constexpr int kAttentionSplitRows = 64;
constexpr int kAttentionSplits = 128;
size_t attention_workspace_bytes(int64_t n, int64_t pos0, int nq, int nkv, int hd);
// Sets the split and flash kernels' attributes (shared memory past 48 KB) on the current device,
// once; the first launch calls it too. The backend calls it when created, outside any recording.
void prepare_attention();
void launch_attention(const float* q, const float* k_cache, const float* v_cache, int64_t n, int64_t pos0,
                      int nq, int nkv, int hd, float* out, void* workspace, size_t workspace_bytes,
                      cudaStream_t stream, const int64_t* pos0_device = nullptr);
// The flash kernel behind launch_attention's passes of n > kAttentionSplitRows rows (tensor cores,
// fp16 hi + lo; attention_prefill_cuda.cu), callable for any n so that tests can check it on short
// passes too. Same contract as launch_attention at the host's pos0, with a workspace of
// attention_prefill_workspace_bytes(pos0 + n, nkv, hd) (the keys converted to fp16 hi + lo tiles);
// false (nothing queued) when hd > 128, which it does not instantiate. prepare_attention_prefill sets
// its shared-memory attributes, once.
size_t attention_prefill_workspace_bytes(int64_t keys, int nkv, int hd);
bool launch_attention_prefill(const float* q, const float* k_cache, const float* v_cache, int64_t n, int64_t pos0,
                              int nq, int nkv, int hd, float* out, void* workspace, size_t workspace_bytes,
                              cudaStream_t stream);
void prepare_attention_prefill();
// Rows k, v [n, kw] into the caches at rows *pos0_device .. *pos0_device + n − 1.
void launch_kv_append(const float* k, const float* v, int64_t n, int64_t kw, const int64_t* pos0_device,
                      float* k_cache, float* v_cache, cudaStream_t stream);
// logits [rows, E]; bias [E] or null; ids/weights [rows, top_k]. Parameters already validated.
void launch_moe_route(const float* logits, const float* bias, const RouteParams& p, int64_t rows, int32_t* ids,
                      float* weights, cudaStream_t stream);

// Drafter ops (drafter_ops_cuda.cu). x [rows, heads·hd] in place, row r at position pos0 + r, or at
// *pos0_device + r when pos0_device is not null (read by the kernel: a recorded launch serves any position).
void launch_rope(float* x, int64_t rows, int heads, int hd, int64_t pos0, double theta, cudaStream_t stream,
                 const int64_t* pos0_device = nullptr);
// rope with a frequency table inv_freq [hd/2] (device memory) and a cos/sin scale (the same kernel);
// pos0_device as launch_rope's.
void launch_rope_table(float* x, int64_t rows, int heads, int hd, int64_t pos0, const int64_t* pos0_device,
                       const float* inv_freq, float scale, cudaStream_t stream);
// q, out [n, nq·hd]; k, v [≥ rows, nkv·hd]; hd ≤ kMaxHeadDim. With pos0_device, the key rows are
// *pos0_device + n, read by the kernel (`rows` is then unused).
void launch_attention_full(const float* q, const float* k, const float* v, int64_t n, int64_t rows, int nq, int nkv,
                           int hd, float* out, cudaStream_t stream, const int64_t* pos0_device = nullptr);
void launch_silu_mul(const float* g, const float* u, int64_t n, float* out, cudaStream_t stream);
void launch_scale_softcap(float* x, int64_t n, float s, float cap, cudaStream_t stream);
// logits [rows, vocab] with vocab ≤ kTopKMaxVocab; ids, logp [rows, k]; 1 ≤ k ≤ Backend::kMaxTopK (top_k_cuda.cu).
// Two launches: per chunk of a row, then one merge per row; the workspace holds the chunks' partials.
constexpr int64_t kTopKMaxVocab = INT32_MAX - 4096;
size_t top_k_workspace_bytes(int64_t rows, int64_t vocab, int k);
void launch_top_k_logprobs(const float* logits, int64_t rows, int64_t vocab, int k, int32_t* ids, float* logp,
                           void* workspace, size_t workspace_bytes, cudaStream_t stream);

// The LiLiCorr head's ops (head_ops_cuda.cu; attention_bias in drafter_ops_cuda.cu); arguments validated by the backend (tandem/op_checks.h).
// x, out [rows, cols]; a, b [rows / group, cols] or null.
void launch_mul_add_rows(const float* x, const float* a, const float* b, int64_t rows, int64_t cols, int64_t group,
                         float* out, cudaStream_t stream);
// q, k, v, out [n, heads·hd]; bias [heads·n, n]; hd ≤ kMaxHeadDim.
void launch_attention_bias(const float* q, const float* k, const float* v, const float* bias, int64_t n, int heads,
                           int hd, float* out, cudaStream_t stream);
// qkv [n, 3·heads·hd] (q|k|v per row), qkv_bias [3·heads·hd] or null; bias [heads·n, n]; out [n, heads·hd].
void launch_attention_bias_qkv(const float* qkv, const float* qkv_bias, const float* bias, int64_t n, int heads, int hd,
                               float* out, cudaStream_t stream);
// x, out [rows, cols]; d [rows, cols], a [rows / ga, cols], b [rows / gb, cols], each or null.
void launch_add_rows(const float* x, const float* d, const float* a, int64_t ga, const float* b, int64_t gb, bool silu,
                     int64_t rows, int64_t cols, float* out, cudaStream_t stream);
void launch_normalize_rows(float* x, int64_t rows, int64_t cols, float eps, cudaStream_t stream);
// a [groups·ka, F], b [groups·kb, F], out [groups, ka·kb].
void launch_group_dots(const float* a, const float* b, int64_t groups, int64_t ka, int64_t kb, int64_t F, float scale,
                       float* out, cudaStream_t stream);

}  // namespace tandem::cuda
