// Asynchronous global → shared copies (cp.async, sm_80+), shared by the kernels that stage tiles
// (formats/gguf GEMV and GEMM, the backend's flash attention).
// Owner: n/a. Thread: any. Sync: a copy lands after cp_async_wait of its group and a barrier.
#pragma once
#include <cuda_runtime.h>

namespace tandem::cuda {

// 16 bytes; both addresses 16-byte aligned.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

}  // namespace tandem::cuda
