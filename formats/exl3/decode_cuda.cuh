// The EXL3 trellis decode as the CUDA kernels run it, callable on the host too (the few intrinsics
// emulated) so that a CPU-only test (tests/formats/exl3/cuda/test_decode_host.cu) checks it against
// trellis.h: a lane's 8 states straight from the tile's packed 32-bit words, the codebooks'
// state → fp16 value with integer ops and one fp16 rounding, and the int8 GEMV's activation limbs.
// Owner: callers own every pointer. Thread: any. Sync: none.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "tandem/cuda/device_bits.cuh"

namespace tandem::exl3::kcuda {

#define TANDEM_EXL3_HD __host__ __device__ __forceinline__

enum : int { kCb3Inst = 0, kCbMcg = 1, kCbMul1 = 2 };  // trellis.h's Codebook values

using cuda::funnel_l;
using cuda::funnel_r;
using cuda::prmt;
// c + the sum of x's four unsigned bytes.
TANDEM_EXL3_HD uint32_t byte_sum(uint32_t x, uint32_t c) {
#ifdef __CUDA_ARCH__
  return __dp4a(x, 0x01010101u, c);
#else
  return c + (x & 0xFF) + (x >> 8 & 0xFF) + (x >> 16 & 0xFF) + (x >> 24);
#endif
}

// ---- a lane's 8 states (stream positions 8·lane .. 8·lane+7 of a tile, spec/formats.md § 5.5) ----

// Where lane t's bits start: the 16-bit window of its first state begins at stream bit
// B = 8tK + K − 16 (mod 256K). The lane needs stream bits B .. B + 7K + 15 (at most 72), which lie in
// the three words a, a+1, a+2 (mod 8K) for every K ≤ 8; `off` is B's bit within word a.
struct LaneWords {
  int w0, w1, w2;  // word indices in the tile (0 .. 8K−1)
  uint32_t off;
};
template <int K>
TANDEM_EXL3_HD LaneWords lane_words(int lane) {
  const int b = 8 * lane * K + K - 16 + 256 * K;
  const int a = b / 32;
  return {a % (8 * K), (a + 1) % (8 * K), (a + 2) % (8 * K), uint32_t(b % 32)};
}

// The 8 states from the lane's three words: realigned so that stream bit B is bit 31 of v0 (a
// 96-bit big-endian window v0:v1:v2), then state q is the window's bits [qK, qK + 16), all offsets
// compile-time constants.
template <int K>
TANDEM_EXL3_HD void lane_states(uint32_t w0, uint32_t w1, uint32_t w2, uint32_t off, uint32_t (&s)[8]) {
  const uint32_t v0 = funnel_l(w1, w0, off), v1 = funnel_l(w2, w1, off), v2 = w2 << off;
#pragma unroll
  for (int q = 0; q < 8; ++q) {
    const int p = q * K;  // window start, bits from v0's MSB
    uint32_t x;
    if (p + 16 <= 32) x = v0 >> (16 - p);
    else if (p < 32) x = funnel_r(v1, v0, uint32_t(48 - p));
    else if (p + 16 <= 64) x = v1 >> (48 - p);
    else x = funnel_r(v2, v1, uint32_t(80 - p));
    s[q] = x & 0xFFFFu;
  }
}

// Whether some lane's window reaches its third word: off + 7K + 15 ≥ 64 for some lane. Only K ≥ 5
// (K = 4 starts every lane at bit 20 and needs bits 20..63; K ≤ 3 needs at most 7K + 16 ≤ 37 bits from
// an offset that leaves them within two words).
template <int K>
__host__ __device__ constexpr bool lane_needs_word2() {
  for (int lane = 0; lane < 32; ++lane)
    if ((8 * lane * K + K - 16 + 256 * K) % 32 + 7 * K + 15 >= 64) return true;
  return false;
}

// Bits [a, a + 32) of the big-endian 96-bit w0:w1:w2 for a compile-time a in [0, 64].
template <int A>
TANDEM_EXL3_HD uint32_t window32(uint32_t w0, uint32_t w1, uint32_t w2) {
  static_assert(A >= 0 && A <= 64, "window outside the lane's three words");
  if constexpr (A == 0) return w0;
  else if constexpr (A < 32) return funnel_l(w1, w0, uint32_t(A));
  else if constexpr (A == 32) return w1;
  else if constexpr (A < 64) return funnel_l(w2, w1, uint32_t(A - 32));
  else return w2;
}

// K = 4 and 8: every lane's window starts at the same bit of its first word (kOff), and state
// q + 16/K starts 16 bits after state q, so one 32-bit window holds both: q in its high half, q + 16/K
// in its low half. Four windows (one a plain word) give the 8 states: 11 instructions for K = 4
// against 15 for lane_states' one shift-and-mask per state.
template <int K, int Q>
TANDEM_EXL3_HD void paired_states(uint32_t w0, uint32_t w1, uint32_t w2, uint32_t (&s)[8]) {
  if constexpr (Q < 8) {
    constexpr int kOff = (K - 16 + 256 * K) % 32, d = 16 / K;
    if constexpr ((Q / d) % 2 == 0) {
      const uint32_t x = window32<kOff + Q * K>(w0, w1, w2);
      s[Q] = x >> 16;
      s[Q + d] = x & 0xFFFFu;
    }
    paired_states<K, Q + 1>(w0, w1, w2, s);
  }
}

// The lane's 8 states of the tile at t (its 8K words), reading the third word only where some lane
// needs it (one shared-memory load per tile less for K ≤ 4); K = 4 and 8 in pairs (paired_states).
template <int K>
TANDEM_EXL3_HD void tile_lane_states(const uint32_t* t, const LaneWords& lw, uint32_t off, uint32_t (&s)[8]) {
  if constexpr (K == 4) paired_states<K, 0>(t[lw.w0], t[lw.w1], 0u, s);
  else if constexpr (K == 8) paired_states<K, 0>(t[lw.w0], t[lw.w1], t[lw.w2], s);
  else if constexpr (lane_needs_word2<K>()) lane_states<K>(t[lw.w0], t[lw.w1], t[lw.w2], off, s);
  else lane_states<K>(t[lw.w0], t[lw.w1], 0u, off, s);
}

// ---- codebooks: two states → two fp16 values → two floats ----

TANDEM_EXL3_HD float half_bits_to_float(uint32_t h) {
  __half_raw r;
  r.x = uint16_t(h);
  return __half2float(__half(r));
}

// fp16 bits (low, high) of a·h + c with one rounding, for h, a, c packed fp16 pairs.
TANDEM_EXL3_HD uint32_t hfma2_bits(uint32_t h, uint32_t a, uint32_t c) {
#ifdef __CUDA_ARCH__
  __half2 hh, aa, cc;
  std::memcpy(&hh, &h, 4), std::memcpy(&aa, &a, 4), std::memcpy(&cc, &c, 4);
  const __half2 r = __hfma2(hh, aa, cc);
  uint32_t out;
  std::memcpy(&out, &r, 4);
  return out;
#else
  // The exact product-sum needs at most 22 significant bits here (an 11-bit integer times an
  // 11-bit constant plus a constant on the same grid), so float holds it and the conversion rounds once.
  uint32_t out = 0;
  for (int i = 0; i < 2; ++i) {
    const float v = half_bits_to_float(h >> (16 * i)) * half_bits_to_float(a >> (16 * i)) +
                    half_bits_to_float(c >> (16 * i));
    const __half r = __float2half_rn(v);
    out |= uint32_t(__half_raw(r).x) << (16 * i);
  }
  return out;
#endif
}
TANDEM_EXL3_HD uint32_t hadd2_bits(uint32_t a, uint32_t b) {
  __half2 aa, bb;
  std::memcpy(&aa, &a, 4), std::memcpy(&bb, &b, 4);
  const __half2 r = __hadd2(aa, bb);
  uint32_t out;
  std::memcpy(&out, &r, 4);
  return out;
}

// The fp16 values of states s0 and s1 as a packed pair (s0 low), exactly trellis.h's state_value_f16.
template <int CB>
TANDEM_EXL3_HD uint32_t state_pair_f16(uint32_t s0, uint32_t s1) {
  if (CB == kCbMul1) {
    // 0x6400 + byte sum (≤ 1020, so no carry out of the mantissa) is the fp16 1024 + bs exactly; then
    // fma(h, k_inv, k_bias) rounds once.
    const uint32_t h0 = byte_sum(s0 * 0x83DCD12Du, 0x6400u), h1 = byte_sum(s1 * 0x83DCD12Du, 0x6400u);
    return hfma2_bits(prmt(h0, h1, 0x5410), 0x1EEE1EEEu, 0xC931C931u);
  } else {
    uint32_t x0 = CB == kCbMcg ? s0 * 0xCBAC1FEDu : s0 * 89226354u + 64248484u;
    uint32_t x1 = CB == kCbMcg ? s1 * 0xCBAC1FEDu : s1 * 89226354u + 64248484u;
    x0 = (x0 & 0x8FFF8FFFu) ^ 0x3B603B60u;
    x1 = (x1 & 0x8FFF8FFFu) ^ 0x3B603B60u;
    // Low halves + high halves of both at once: one fp16 rounding of an exact sum, as on the CPU.
    return hadd2_bits(prmt(x0, x1, 0x5410), prmt(x0, x1, 0x7632));
  }
}

// ---- the int8 GEMV (kernels_cuda.cuh) without the per-weight rounding ----

// mul1's value of byte sum bs is fp16(k·(1024 + bs) + c) (spec/formats.md § 5.6); unrounded that is
// kMul1Scale·bs + kMul1Bias, both exact in float.
constexpr float kMul1Scale = 0.00676727294921875f;  // fp16 0x1EEE = 1774 · 2^−18
constexpr float kMul1Bias = -3.453125f;             // 1024 · kMul1Scale + fp16 0xC931 (−10.3828125)

// A (row, 128-block) group's activations as two int8 limbs: its scale puts the largest magnitude in
// [64, 128).
TANDEM_EXL3_HD cuda::Pow2Scale i8_scale(float mx) { return cuda::pow2_scale<6>(mx); }
// s (|s| < 128) = q1 + q2/128 + err with q1, q2 in [−127, 127] and |err| ≤ 1/256 (1/128 where q1 clamps).
TANDEM_EXL3_HD void split_i8(float s, int& q1, int& q2) {
  const float f1 = fminf(fmaxf(rintf(s), -127.0f), 127.0f);
  q1 = int(f1);
  q2 = int(fminf(fmaxf(rintf((s - f1) * 128.0f), -127.0f), 127.0f));
}

// A lane's 8 states as its mma.m16n8k16 A fragment of fp16 pairs (spec/formats.md § 5.4): inputs
// 2q, 2q+1 of columns g (x) and g + 8 (y), then inputs 2q+8, 2q+9 of the same (z, w).
template <int CB>
TANDEM_EXL3_HD uint4 a_fragment(const uint32_t (&s)[8]) {
  return make_uint4(state_pair_f16<CB>(s[0], s[1]), state_pair_f16<CB>(s[4], s[5]), state_pair_f16<CB>(s[2], s[3]),
                    state_pair_f16<CB>(s[6], s[7]));
}

// One state's value as fp16 bits (tests; the kernels decode pairs).
template <int CB>
TANDEM_EXL3_HD uint16_t state_f16(uint32_t s) {
  return uint16_t(state_pair_f16<CB>(s & 0xFFFFu, 0) & 0xFFFFu);
}

template <int CB>
TANDEM_EXL3_HD void states_to_floats(const uint32_t (&s)[8], float (&v)[8]) {
#pragma unroll
  for (int q = 0; q < 8; q += 2) {
    const uint32_t h = state_pair_f16<CB>(s[q], s[q + 1]);
    v[q] = half_bits_to_float(h & 0xFFFFu);
    v[q + 1] = half_bits_to_float(h >> 16);
  }
}

}  // namespace tandem::exl3::kcuda
