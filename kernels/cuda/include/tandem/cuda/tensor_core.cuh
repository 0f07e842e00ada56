// The pieces the tensor-core GEMVs of the quantized formats share (formats/gguf/mma_cuda.cuh,
// formats/exl3/kernels_cuda.cuh), with the dense BF16/F16 kernels (kernels/cuda/dense_tc.cu): one
// mma.sync.m16n8k16 (fp16 × fp16 → fp32, and bf16 × bf16 → fp32) and the exact
// activation split — a group scaled by a power of two into [2^14, 2^15) (pow2_scale<14>, device_bits.cuh),
// then x' = hi + lo in fp16 —
// (the backend's flash prefill attention splits its scaled operands so too), and for the EXL3 mul1
// GEMV one mma.sync.m16n8k32 (u8 × s8 → s32); for the backend's split-KV attention and the Mamba2
// SSD scan one mma.sync.m16n8k8 (tf32 × tf32 → fp32) and the 3xTF32 split of an fp32 operand.
// Owner: n/a. Thread: any. Sync: none (mma16816 needs the whole warp converged).
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "tandem/cuda/device_bits.cuh"

namespace tandem::cuda {

// d += A·B for the warp's m16n8k16 fragments (A row-major, B column-major).
__device__ __forceinline__ void mma16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The same with bf16 operands (the dense BF16 kernels): A regs a0..a3 hold rows g, g+8, g, g+8 (g =
// lane/4) at k = 2·(lane%4) + 0, 1 (a2, a3: +8); B regs b0, b1 column g at the same k; d0, d1 row g,
// columns 2·(lane%4) + 0, 1; d2, d3 row g+8. Each output is a function of its A row, B column and
// accumulator only (so a B column's results never depend on the other columns).
__device__ __forceinline__ void mma16816_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                              uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// d += A·B for the warp's m16n8k32 fragments, A unsigned and B signed bytes, int32 accumulators: A
// regs a0..a3 hold rows g, g+8, g, g+8 (g = lane/4) at k = 4·(lane%4) + 0..3 (a2, a3: +16); B regs b0,
// b1 column g at the same k; d0, d1 row g, columns 2·(lane%4) + 0, 1; d2, d3 row g+8.
__device__ __forceinline__ void mma16832_u8s8(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                              uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// d += A·B for the warp's m16n8k8 tf32 fragments: A regs a0..a3 hold rows g, g+8, g, g+8 (g = lane/4)
// at k = lane%4 (a2, a3: +4); B regs b0, b1 column g at k = lane%4 and lane%4 + 4; d0, d1 row g,
// columns 2·(lane%4) + 0, 1; d2, d3 row g+8. The tensor core reads only the top 19 bits of each
// operand (the low 13 bits of an fp32 pattern are truncated away).
__device__ __forceinline__ void mma1688_tf32(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                             uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// x = hi + lo for 3xTF32: hi is x rounded to tf32 (half a tf32 ulp added to the bits, then the low
// 13 bits cleared), so |lo| ≤ 2^-11·|x| and lo = x − hi is exact in fp32; lo goes to the tensor core
// as it is, which truncates it to tf32 (a further error ≤ 2^-21·|x|).
__device__ __forceinline__ void split_tf32(float x, uint32_t& hi, uint32_t& lo) {
  hi = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
  lo = __float_as_uint(x - __uint_as_float(hi));
}

// d += A·B to about fp32 accuracy: three tf32 products, the small cross terms first (A_lo·B_hi,
// A_hi·B_lo, then A_hi·B_hi; A_lo·B_lo ≈ 2^-22 relative is dropped).
__device__ __forceinline__ void mma1688_3xtf32(float (&d)[4], const uint32_t (&ah)[4], const uint32_t (&al)[4],
                                               uint32_t bh0, uint32_t bh1, uint32_t bl0, uint32_t bl1) {
  mma1688_tf32(d, al[0], al[1], al[2], al[3], bh0, bh1);
  mma1688_tf32(d, ah[0], ah[1], ah[2], ah[3], bl0, bl1);
  mma1688_tf32(d, ah[0], ah[1], ah[2], ah[3], bh0, bh1);
}

// Four 8 × 8 matrices of 16-bit elements from shared memory: lanes 8m … 8m + 7 give the addresses of
// matrix m's rows 0 … 7 (16 bytes each, 16-byte aligned); r[m] of lane i holds matrix m's row i/4,
// elements 2·(i%4) and +1, which is the B fragment of mma16816 when the matrix rows are B's columns
// (n) and its elements run along k. Rows at a stride ≡ 16 bytes mod 128 hit all 32 banks.
// The same at a shared-memory address (__cvta_generic_to_shared), which a kernel can keep in one register.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], unsigned smem_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem_row) {
  ldmatrix_x4(r, unsigned(__cvta_generic_to_shared(smem_row)));
}

// x = hi + lo with hi = fp16(x), lo = fp16(x − hi): about 22 significant bits.
__device__ __forceinline__ void split_hi_lo(float x, __half& hi, __half& lo) {
  hi = __float2half_rn(x);
  lo = __float2half_rn(x - __half2float(hi));
}

}  // namespace tandem::cuda
