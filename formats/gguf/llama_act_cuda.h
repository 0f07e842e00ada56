// The llama activation mode on CUDA (gguf_format.h, docs/gguf-oracle.md § Activation modes): each
// activation row rounded on the device to Q8_K exactly as activations_cpu.cpp does (the same q, d and
// bsums bits), and IQ2_XXS weights multiplied with it by __dp4a integer sub-block sums scaled in
// fp32 in the CPU's order (dot_act_q8k of iquants_cpu.cpp), so every output has the bits of the CPU's
// dot_act_iq2_xxs · scale for any n, in the GEMV and in the expert gather alike.
// Owner: callers own every pointer. Thread: one caller per stream. Sync: launches are queued on the
// given stream and return; a configuration error throws tandem::Error.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#ifdef __CUDACC__
#include "quant_cuda.cuh"
#endif

namespace tandem::gguf {

// The device layout of one Q8_K activation row of k elements (k % 256 == 0), nb = k / 256 blocks:
// int8 q[k], then float d[nb], then int16 bsums[k / 16], the row padded to 16 bytes. The values are
// those of ActQ8_K (kernels_cpu.h) block by block; only the arrangement differs (q 16-byte aligned).
#ifdef __CUDACC__
#define TANDEM_Q8K_HD __host__ __device__
#else
#define TANDEM_Q8K_HD
#endif
TANDEM_Q8K_HD inline int64_t cuda_q8k_row_bytes(int64_t k) { return (k + k / 256 * 4 + k / 16 * 2 + 15) / 16 * 16; }
TANDEM_Q8K_HD inline int64_t cuda_q8k_d_offset(int64_t k) { return k; }
TANDEM_Q8K_HD inline int64_t cuda_q8k_bsums_offset(int64_t k) { return k + k / 256 * 4; }

// x: n rows of k fp32 (device), out: n rows of cuda_q8k_row_bytes(k) (device).
void launch_quantize_q8k(const float* x, int64_t n, int64_t k, void* out, cudaStream_t s);
// The same on the current lane's stream (cuda::stream(); for host-only callers such as tests).
void launch_quantize_q8k(const float* x, int64_t n, int64_t k, void* out);

#ifdef __CUDACC__  // CudaMatmulArgs lives with device code (host-only tests use the rounding above)
// The IQ2_XXS × Q8_K product with a's geometry, grid (iq2xxs_grid on the device), scale, epilogue and,
// for the gather, ids / per_x / n_experts / expert_bytes / expert_scale, as for CudaQuantOps; a.x is
// ignored: the activations are xq, rows of cuda_q8k_row_bytes(a.k) made by launch_quantize_q8k. Any
// a.n (the matmul runs slabs of up to 16 rows, reading each weight row once per slab). An expert id
// out of range leaves its row NaN (as the fp32 gather does).
void launch_iq2_xxs_q8k(const CudaMatmulArgs& a, const void* xq, cudaStream_t s);
#endif

}  // namespace tandem::gguf
