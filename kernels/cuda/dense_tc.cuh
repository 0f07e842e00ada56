// The tensor-core kernels of dense BF16/F16 weights (dense_tc.cu), private to dense.cu, which
// dispatches to them unless TANDEM_CUDA_DENSE_SIMT=1.
// Owner: callers own every pointer. Thread: one caller per stream. Sync: a launch is queued on
// `stream` and returns (capturable: no allocation, no host synchronization); a configuration error
// throws tandem::Error.
//
// The order contract (batch invariance): for output y[r, o] the k axis is cut into chunks of
// kChunk = 256 elements (the last one shorter) and each chunk into k16 steps; a chunk's partial is
// one mma.sync.m16n8k16 chain from zero over its steps in k order, at each step the weight tile
// times hi(x), then times mid(x), then times lo(x) (x = hi + mid + lo, see below); y is the fp32 sum
// 0 + c0 + c1 + … of the chunk partials, left to right. Every kernel here (the GEMV of 1…16 rows with
// either x path and every GEMM tiling; tandem/cuda/util.h selects among them) computes exactly
// that, and an mma output depends only on its weight row, its x column and its accumulator, so a
// row's bits are a function of (its x row, W, m, k) — never of n, of the other rows, or of the row's
// position in a tile. Inside a step, lane l (g = l/4, t = l%4) feeds the
// fragment positions 2t, 2t+1 with k = 4t, 4t+1 and 2t+8, 2t+9 with k = 4t+2, 4t+3 (one 8-byte
// weight load per row); every kernel uses that same k permutation.
//
// Accuracy: BF16 weights take x = hi + mid + lo with hi = bf16(x), mid = bf16(x − hi), lo =
// bf16(x − hi − mid) (three 8-bit terms carry all 24 bits of an fp32 x; two left ~1e-5 of the logits,
// past the conformance tolerance of 5e-6). F16 weights take the same split in fp16 after scaling
// each (row, chunk) of x by the power of two that puts its largest magnitude in [2^14, 2^15)
// (pow2_scale<14>), the chunk's partial scaled back exactly before it is added: no |x| overflows fp16
// and small ones keep their bits. The scale is a function of the row's own chunk, so it keeps the
// invariance.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "tandem/cuda/util.cuh"

namespace tandem::cuda::dense_tc {

constexpr int kChunk = 256;

// True when the tensor-core kernels take a weight: BF16 or F16, k a positive multiple of 8, w
// 16-byte aligned (every row then is). A function of the weight alone, never of x or n.
bool eligible(WType t, const void* w, int64_t k);

// y[n, m] = x[n, k] · W[m, k]ᵀ for an eligible weight; x needs no alignment.
void matmul(WType t, const void* w, int64_t m, int64_t k, const float* x, int64_t n, float* y, cudaStream_t stream);

// The grouped expert gather (the default; TANDEM_CUDA_DENSE_GROUPED=0 turns it off, another value than 0
// or 1 fails naming it): y[r] = W[ids[r]] · x[r / per_x] for gathers of at least kGroupedMinItems items over at
// most kGroupedMaxExperts eligible stacked [m, k] experts, the items sorted by expert on the device
// (tandem/cuda/gather_plan.cuh) and one 128 × 128 tensor-core GEMM launch over every expert's tiles:
// each row has its expert's matmul bits (the order contract above). An id outside [0, E) gives a NaN
// row. Below the threshold (decode, verify) the SIMT gather keeps its bits.
constexpr int64_t kGroupedMinItems = kGroupedGatherMinItems;  // tandem/cuda/util.h
constexpr int kGroupedMaxExperts = kGroupedGatherMaxExperts;
bool grouped_gather_enabled();
void gather(WType t, const void* w, int n_experts, int64_t m, int64_t k, const float* x, const int32_t* ids, int per_x,
            int64_t rows, float* y, cudaStream_t stream);

}  // namespace tandem::cuda::dense_tc
