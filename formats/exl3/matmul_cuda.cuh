// EXL3 matmul on the GPU, on raw device pointers: y = (H_n·(H_k·(x ⊙ suh))·Ŵ) ⊙ svh + bias in the
// engine's convention y[rows, out] = x[rows, in] · Wᵀ (spec/formats.md § 5.3), and the expert gather.
// Owner: callers own every pointer and the workspace. Thread: one caller per stream. Sync: each
// launch is queued on `stream` and returns; nothing synchronizes.
// Paths: rows ≤ 16 run the decode GEMV (kernels_cuda.cuh), batch-invariant: row r's bits never
// depend on the row count or the other rows. It is one launch (input rotation, GEMV, split sum and
// output rotation fused) where the block's rotated input fits in shared memory, else two. Above 16
// rows (prefill; gathers above 512 rows) the input is split into fp16 hi + lo and one tensor-core
// GEMM decodes Ŵ in its main loop (prefill_cuda.cuh); smaller gathers run the one-row GEMV per row.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace tandem::exl3::kcuda {

// One tensor (n_experts = 1) or E stacked experts of one shape, K and codebook.
struct DeviceWeights {
  const uint32_t* trellis = nullptr;  // [E][k/16][n/16][8K] words, as stored
  int K = 0, cb = 0;                  // bits per weight 1..8; codebook (decode_cuda.cuh kCb*)
  int64_t k = 0, n = 0;               // padded in × out
  int64_t in_features = 0, out_features = 0;
  const float* suh = nullptr;         // [E][k]
  const float* svh = nullptr;         // [E][n]
  const float* bias = nullptr;        // [E][out_features] or null
  int n_experts = 1;
  int epilogue = 0;                   // what is stored (weights.h Epilogue): value, relu(value)², y + value
};

// The GEMV of matmuls of ≤ 16 rows, from TANDEM_EXL3_GEMV (matmul_cuda.cu; an unknown value fails).
enum class GemvMode { kInt8, kFp16, kFp32 };
GemvMode gemv_mode();

// The prefill GEMMs (more than 16 rows; gathers of more than 512), from TANDEM_EXL3_PREFILL (another
// value fails naming it): "row" (kRowScale, the default) is the fused decode-and-multiply kernel with
// one activation scale a row, so its products sum on the tensor cores over all of k in one accumulator
// set (126 registers, two stages: two blocks an SM), checked against the CPU; "block" (kBlockScale) is
// the fused kernel with a scale per 128-block (193 registers, one block an SM); "old" (kOld) the old
// decode + GEMM + output rotation, with kBlockScale's bits. set_prefill_impl overrides it for the
// process (tests and benchmarks; not while a call is queued between its workspace query and its launch).
enum class PrefillImpl { kRowScale, kBlockScale, kOld };
PrefillImpl prefill_impl();
void set_prefill_impl(PrefillImpl impl);

// Partial sums per weight shape (never per row count): the GEMV's split of the k tiles.
int gemv_splits(int64_t k, int64_t n, bool gather);

// Scratch of a call: `workspace` bytes (any contents; may be null when 0) and `counters` unsigned
// split-arrival counters, which must be zero on entry and are zero again when the call's kernels
// finish (so one zeroed buffer serves every later call on the same stream).
size_t matmul_workspace_bytes(const DeviceWeights& w, int64_t rows);
size_t matmul_counters(const DeviceWeights& w, int64_t rows);
// y[rows, out_features] = x[rows, in_features] · Wᵀ.
void launch_matmul(const DeviceWeights& w, const float* x, int64_t rows, float* y, void* workspace,
                   unsigned* counters, cudaStream_t stream);

size_t gather_workspace_bytes(const DeviceWeights& w, int64_t rows, int per_x);
size_t gather_counters(const DeviceWeights& w, int64_t rows, int per_x);
// y[r] = W[ids[r]] · x[r / per_x] for r < rows (ids on the device); an id outside [0, E) leaves its
// row NaN.
void launch_gather_matmul(const DeviceWeights& w, const float* x, const int32_t* ids, int per_x, int64_t rows,
                          float* y, void* workspace, unsigned* counters, cudaStream_t stream);

}  // namespace tandem::exl3::kcuda
