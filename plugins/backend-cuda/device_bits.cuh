// Bit-manipulation intrinsics the quantized-format kernels share, callable on the host too (emulated
// exactly) so that CPU-only tests can check their decoders bit for bit.
// Owner: n/a. Thread: any. Sync: none.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::cuda {

#define TANDEM_BITS_HD __host__ __device__ __forceinline__

// Bytes of (y:x) picked by the low 3 bits of each selector nibble (CUDA's __byte_perm).
TANDEM_BITS_HD uint32_t prmt(uint32_t x, uint32_t y, uint32_t s) {
#ifdef __CUDA_ARCH__
  return __byte_perm(x, y, s);
#else
  const uint64_t v = uint64_t(y) << 32 | x;
  uint32_t r = 0;
  for (int n = 0; n < 4; ++n) r |= uint32_t((v >> (8 * ((s >> (4 * n)) & 7))) & 0xFF) << (8 * n);
  return r;
#endif
}
// Low word of (hi:lo) >> shift, shift mod 32.
TANDEM_BITS_HD uint32_t funnel_r(uint32_t lo, uint32_t hi, uint32_t shift) {
#ifdef __CUDA_ARCH__
  return __funnelshift_r(lo, hi, shift);
#else
  return uint32_t((uint64_t(hi) << 32 | lo) >> (shift & 31));
#endif
}
// High word of (hi:lo) << shift, shift mod 32.
TANDEM_BITS_HD uint32_t funnel_l(uint32_t lo, uint32_t hi, uint32_t shift) {
#ifdef __CUDA_ARCH__
  return __funnelshift_l(lo, hi, shift);
#else
  return uint32_t(((uint64_t(hi) << 32 | lo) << (shift & 31)) >> 32);
#endif
}

#undef TANDEM_BITS_HD

}  // namespace tandem::cuda
