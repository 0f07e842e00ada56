// Asynchronous global → shared copies (cp.async, sm_80+), shared by the kernels that stage tiles
// (formats/gguf GEMV and GEMM, the backend's flash attention, the dense tensor-core kernels), and the
// streaming weight loads that skip L1 (so that the activations a GEMV rereads stay there).
// Owner: n/a. Thread: any. Sync: a copy lands after cp_async_wait of its group and a barrier.
#pragma once
#include <cuda_runtime.h>

namespace tandem::cuda {

// 16 bytes; both addresses 16-byte aligned.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
// 16 bytes of which the first `src_bytes` (0 or 16) come from gmem and the rest are zeroed; gmem must
// be a valid 16-byte-aligned address even when src_bytes is 0.
__device__ __forceinline__ void cp_async16_zfill(void* smem, const void* gmem, unsigned src_bytes) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// 8 bytes of read-only global memory (weights), not allocated in L1; p 8-byte aligned.
__device__ __forceinline__ uint2 ldg_stream64(const void* p) {
  uint2 v;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

}  // namespace tandem::cuda
