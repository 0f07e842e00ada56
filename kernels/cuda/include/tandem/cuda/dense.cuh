// CUDA kernels of dense BF16/F16/F32 weights, on raw device pointers (the safetensors format's
// tensors and GGUF's F32/F16/BF16 blocks).
// Owner: callers own every pointer. Thread: one caller per stream. Sync: each launch is queued on
// `stream` and returns; a configuration error throws tandem::Error. None needs workspace.
// Batch invariance: a row's output bits never depend on n or on the other rows. BF16/F16 weights
// with k % 8 == 0 (16-byte-aligned data) go to the tensor-core kernels for every n (dense_tc.cuh: the
// k order of every sum is a function of (m, k) alone, fp32 x split into hi + mid + lo of the weight's type,
// within ~1e-5 of the fp32 dot product). The rest (F32, other k, TANDEM_CUDA_DENSE_SIMT=1) take the
// SIMT kernels: for n ≤ kGemvMaxRows y[r, o] is one warp's dot product of x row r and weight row o
// with a fixed lane split and reduction tree, the same for every n; gather_matmul uses that dot for
// every row count. Above kGemvMaxRows (prefill) a tiled kernel sums each output in k order.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "tandem/cuda/util.cuh"

namespace tandem::cuda {

constexpr int kGemvMaxRows = 16;

// Bytes of one weight element.
inline size_t elem_bytes(WType t) { return t == WType::F32 ? 4 : 2; }

// y[n, m] = x[n, k] · W[m, k]ᵀ; W of element type t.
void launch_dense_matmul(WType t, const void* w, int64_t m, int64_t k, const float* x, int64_t n, float* y,
                         cudaStream_t stream);
// y[r] = W[ids[r]] · x[r / per_x]ᵀ for r < rows; W is E stacked [m, k] matrices; ids on the device.
// An id outside [0, E) leaves its row NaN.
void launch_dense_gather_matmul(WType t, const void* w, int n_experts, int64_t m, int64_t k, const float* x,
                                const int32_t* ids, int per_x, int64_t rows, float* y, cudaStream_t stream);
// out[i] = f32(W[ids[i]]) for i < n; ids on the host, already range-checked (passed by value, so a
// captured graph keeps them).
void launch_dense_get_rows(WType t, const void* w, int64_t k, const int32_t* ids_host, int n, float* out,
                           cudaStream_t stream);

}  // namespace tandem::cuda
