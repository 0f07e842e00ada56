// Bit-manipulation intrinsics the quantized-format kernels share, callable on the host too (emulated
// exactly) so that CPU-only tests can check their decoders bit for bit.
// Owner: n/a. Thread: any. Sync: none.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

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

// A group's power-of-two scale: up = 2^(T − E') puts its largest magnitude mx in [2^T, 2^(T+1)) (E'
// the exponent of mx), down = 1 / up. The biased exponent is clamped so that both factors stay
// normal (an all-zero group scales by 2^(126)). The tensor-core GEMVs' fp16 hi + lo split takes
// T = 14, the EXL3 int8 limbs T = 6.
struct Pow2Scale {
  float up, down;
};
template <int T>
TANDEM_BITS_HD Pow2Scale pow2_scale(float mx) {
  static_assert(T >= 0 && T < 127, "the scale's target exponent");
  uint32_t b;
  std::memcpy(&b, &mx, 4);
  int E = int((b >> 23) & 0xFF);
  E = E < T + 1 ? T + 1 : E > 254 ? 254 : E;
  const uint32_t u = uint32_t(254 + T - E) << 23, d = uint32_t(E - T) << 23;
  Pow2Scale s;
  std::memcpy(&s.up, &u, 4), std::memcpy(&s.down, &d, 4);
  return s;
}

#undef TANDEM_BITS_HD

}  // namespace tandem::cuda
