// GGML block types on the GPU: the contract between the CUDA weight classes (gguf_format_cuda.cu)
// and the per-type kernels (kernels_cuda.cuh, instantiated once per type in generated files). The
// CUDA twin of quant.h: the weight classes never look inside blocks.
// Owner: callers own every pointer. Thread: one caller per stream. Sync: every launch is queued on the
// given stream and returns; a configuration error throws tandem::Error.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "tandem/cuda/util.h"

namespace tandem::gguf {

// y = W·x (or the expert gather) straight from the file's blocks. Batch invariance: up to 16 rows
// (decode, verify) y[r, o] is one warp's dot product of x row r and weight row o, with a lane split,
// per-lane order and reduction tree fixed by k alone: the same bits for every number of rows and for
// the gather. Prefill (gemm) has bits of its own, again independent of n and of the other rows.
struct CudaMatmulArgs {
  const uint8_t* w = nullptr;  // device: m rows of row_bytes (per expert, for the gather)
  int64_t m = 0, k = 0, row_bytes = 0;
  const float* x = nullptr;    // device, rows of k
  float* y = nullptr;          // device, rows of m
  int64_t n = 0;               // matmul: rows of x and y; gather: rows of y
  float scale = 1.0f;          // multiplies every output (the .scale sidecar)
  const void* grid = nullptr;  // the type's lookup grid on the device (i-quants), else null
  // Gather only: row r of y = W[ids[r]] · x[r / per_x]; ids on the device; an id outside
  // [0, n_experts) leaves its row NaN. expert_scale (device, n_experts floats) replaces `scale`.
  const int32_t* ids = nullptr;
  int per_x = 1, n_experts = 0;
  int64_t expert_bytes = 0;
  const float* expert_scale = nullptr;
  // What is stored (weights.h Epilogue): 0 the value, 1 relu(value)², 2 y + value.
  int epilogue = 0;
};

// The epilogue's store of one output (the exact arithmetic of the backend's relu2 and add kernels).
__device__ __forceinline__ void store_out(float* y, float v, int epilogue) {
  if (epilogue == 1) {
    const float r = v < 0.0f ? 0.0f : v;  // NaN stays NaN, as in relu2
    v = r * r;
  } else if (epilogue == 2) {
    v = *y + v;
  }
  *y = v;
}

// out[i] = dequantized row of W (exactly the CPU kernels' values), for rows row0 .. row0+n−1 or, when
// by_id, for rows ids[0..n) (host ids carried in the launch, so a captured graph keeps them).
constexpr int kCudaRowIdsPerLaunch = 64;
struct CudaRowsArgs {
  const uint8_t* w = nullptr;
  int64_t k = 0, row_bytes = 0;
  int64_t n = 0, row0 = 0;
  bool by_id = false;
  int32_t ids[kCudaRowIdsPerLaunch] = {};
  float scale = 1.0f;  // applied after decoding when != 1, as the CPU does
  const void* grid = nullptr;
  float* out = nullptr;  // device, n rows of k
};

// Prefill thresholds: matmuls of at least kCudaGemmMinRows rows and gathers of at least
// kCudaGatherGemmMinItems items (more than a verify pass of 16 tokens × 32 experts has) of at most
// kCudaGatherGemmMaxExperts experts run on `gemm` where the type has one; decode and verify keep the
// GEMVs and their bits.
constexpr int64_t kCudaGemmMinRows = 17;
constexpr int64_t kCudaGatherGemmMinItems = cuda::kGroupedGatherMinItems;
constexpr int kCudaGatherGemmMaxExperts = cuda::kGroupedGatherMaxExperts;

struct CudaQuantOps {
  const char* name;
  // Any number of rows: one GEMV launch for n ≤ 16, the same kernel over slabs of 16 rows above.
  void (*matmul)(const CudaMatmulArgs&, cudaStream_t);
  void (*gather)(const CudaMatmulArgs&, cudaStream_t);
  void (*rows)(const CudaRowsArgs&, cudaStream_t);
  // Optional (null: the type has no tensor-core decoder): the prefill GEMM of matmul (ids null) or
  // the grouped gather (ids set), with a device workspace of gemm_workspace(args) bytes, any contents,
  // owned by the caller until the call's kernels finish (stream order).
  size_t (*gemm_workspace)(const CudaMatmulArgs&);
  void (*gemm)(const CudaMatmulArgs&, void* workspace, cudaStream_t);
};

// The block types with CUDA kernels here (F32/F16/BF16 run on the dense safetensors kernels). The
// same list generates one instance file per type (formats/gguf/CMakeLists.txt).
#define TANDEM_GGUF_CUDA_TYPES(X)                                                       \
  X(Q8_0) X(Q4_K) X(Q5_K) X(Q6_K) X(IQ4_NL) X(IQ4_XS) X(NVFP4) X(IQ2_XXS) X(IQ2_XS) X(IQ2_S) \
  X(IQ3_XXS) X(IQ3_S) X(IQ1_M)

#define TANDEM_GGUF_CUDA_DECLARE(T) const CudaQuantOps& cuda_ops_##T();
TANDEM_GGUF_CUDA_TYPES(TANDEM_GGUF_CUDA_DECLARE)
#undef TANDEM_GGUF_CUDA_DECLARE

}  // namespace tandem::gguf
