// CUDA decoders of Q8_0, the k-quants, IQ4_NL/IQ4_XS and NVFP4 (spec/formats.md § 3.2–3.7, 3.14), the
// twins of kquants_cpu.cpp: each yields one 32-element unit as small exact values q and a scale per
// group of 8, so that scale·q is the CPU decoder's value bit for bit (Q4_K and Q5_K yield the values
// themselves: their min term makes the product a fused multiply-add). Interface: kernels_cuda.cuh.
#pragma once
#include "kernels_cuda.cuh"

namespace tandem::gguf::kcuda {

// ---- Q8_0: d f16, qs int8[32] ----
struct DecQ8_0 : InOrder {
  static constexpr int kElems = 32, kBytes = 34, kGridBytes = 0, kSigns = 0, kLut = 0;
  static constexpr bool kExact = false;
  struct Unit {
    uint32_t w[8];  // the 32 int8 values, each byte xored with 0x80
    float d;
  };
  TANDEM_HD static Unit load(const uint8_t* b, int) {
    Unit u;
    u.d = f16_bits(ld16(b));
    ld32_run<8>(b + 2, u.w);
#pragma unroll
    for (int i = 0; i < 8; ++i) u.w[i] ^= 0x80808080u;
    return u;
  }
  template <int P>
  TANDEM_HD static void half(const Unit& u, const Tables&, float (&q)[16], float (&s)[2]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t w = u.w[4 * P + i];
      q[4 * i] = byte_s<0>(w), q[4 * i + 1] = byte_s<1>(w), q[4 * i + 2] = byte_s<2>(w), q[4 * i + 3] = byte_s<3>(w);
    }
    s[0] = s[1] = u.d;
  }
};

// ---- Q4_K / Q5_K: d, dmin, scales[12] (6-bit scale and min per 32), [qh[32]], qs[128] ----
// get_scale_min_k4 for sub-block j from the 12 scale bytes (words s0..s2: bytes 0–3, 4–7, 8–11),
// times d and dmin. Bytes are taken from the words by shifts: an array indexed by the runtime j
// would live in local memory (a 16-byte stack frame and its loads in every GEMM group).
TANDEM_HD void k4_scale_min(const uint8_t* b, int j, float& scale, float& min) {
  const uint32_t s0 = ld32(b + 4), s1 = ld32(b + 8), s2 = ld32(b + 12);
  const int sh = 8 * (j & 3);
  const uint32_t b0 = (s0 >> sh) & 0xFF, b1 = (s1 >> sh) & 0xFF, b2 = (s2 >> sh) & 0xFF;
  int sc, m;
  if (j < 4) {
    sc = int(b0 & 63), m = int(b1 & 63);  // s[j], s[j + 4]
  } else {
    sc = int((b2 & 0xF) | ((b0 >> 6) << 4)), m = int((b2 >> 4) | ((b1 >> 6) << 4));  // s[j + 4], s[j − 4], s[j]
  }
  const uint32_t dd = ld32(b);  // d, dmin
  scale = f16_bits(dd & 0xFFFF) * float(sc);
  min = f16_bits(dd >> 16) * float(m);
}

template <bool kHigh5>
struct DecK45 : InOrder {
  static constexpr int kElems = 256, kBytes = kHigh5 ? 176 : 144, kGridBytes = 0, kSigns = 0, kLut = 0;
  static constexpr bool kExact = true;
  struct Unit {
    uint32_t w[8];  // the unit's 32 values as bytes
    float scale, min;
  };
  // Unit ib: chunk c = ib/2 of 64 elements; even units take the low nibbles of qs[32c..], odd the high.
  TANDEM_HD static Unit load(const uint8_t* b, int ib) {
    Unit u;
    k4_scale_min(b, ib, u.scale, u.min);
    const uint8_t* qs = b + (kHigh5 ? 48 : 16) + 32 * (ib / 2);  // 16-byte aligned in every row
    const uint4 q0 = *reinterpret_cast<const uint4*>(qs), q1 = *reinterpret_cast<const uint4*>(qs + 16);
    const uint32_t raw[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
    const int shift = 4 * (ib & 1);
#pragma unroll
    for (int i = 0; i < 8; ++i) u.w[i] = (raw[i] >> shift) & 0x0F0F0F0Fu;
    if constexpr (kHigh5) {
      const uint4 h0 = *reinterpret_cast<const uint4*>(b + 16), h1 = *reinterpret_cast<const uint4*>(b + 32);
      const uint32_t qh[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
#pragma unroll
      for (int i = 0; i < 8; ++i) u.w[i] |= ((qh[i] >> ib) & 0x01010101u) << 4;
    }
    return u;
  }
  // scale·q − min in one rounding: scale·q is exact (≤ 22 significant bits), as in the CPU's
  // multiply-then-subtract.
  template <int P>
  TANDEM_HD static void half(const Unit& u, const Tables&, float (&q)[16], float (&s)[2]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t w = u.w[4 * P + i];
      q[4 * i] = fmaf(u.scale, byte_u<0>(w), -u.min);
      q[4 * i + 1] = fmaf(u.scale, byte_u<1>(w), -u.min);
      q[4 * i + 2] = fmaf(u.scale, byte_u<2>(w), -u.min);
      q[4 * i + 3] = fmaf(u.scale, byte_u<3>(w), -u.min);
    }
    s[0] = s[1] = 1.0f;
  }
};
using DecQ4_K = DecK45<false>;
using DecQ5_K = DecK45<true>;

// ---- Q6_K: ql[128], qh[64], scales int8[16], d last (blocks only 2-byte aligned) ----
struct DecQ6_K : InOrder {
  static constexpr int kElems = 256, kBytes = 210, kGridBytes = 0, kSigns = 0, kLut = 0;
  static constexpr bool kExact = false;
  struct Unit {
    uint32_t w[8];  // the 6-bit values as bytes (q + 32)
    float ds[2];    // d·scale for elements 0–15 and 16–31
  };
  // Unit ib: half n = ib/4 of 128 elements, quarter r = ib%4: low nibbles of ql'[0..31] (r 0) or
  // ql'[32..63] (r 1), high nibbles of those (r 2, 3), with bits 2r..2r+1 of qh'[0..31].
  TANDEM_HD static Unit load(const uint8_t* b, int ib) {
    const int n = ib / 4, r = ib % 4;
    uint32_t ql[8], qh[8];
    ld32_run<8>(b + 64 * n + 32 * (r & 1), ql);
    ld32_run<8>(b + 128 + 32 * n, qh);
    Unit u;
#pragma unroll
    for (int i = 0; i < 8; ++i)
      u.w[i] = ((ql[i] >> (4 * (r >> 1))) & 0x0F0F0F0Fu) | (((qh[i] >> (2 * r)) & 0x03030303u) << 4);
    const float d = f16_bits(ld16(b + 208));
    const int sc0 = int(int8_t(ld8(b + 192 + 8 * n + 2 * r))), sc1 = int(int8_t(ld8(b + 193 + 8 * n + 2 * r)));
    u.ds[0] = d * float(sc0);
    u.ds[1] = d * float(sc1);
    return u;
  }
  template <int P>
  TANDEM_HD static void half(const Unit& u, const Tables&, float (&q)[16], float (&s)[2]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t w = u.w[4 * P + i];
      q[4 * i] = byte_minus<0>(w, 8388640.0f);  // 2^23 + 32
      q[4 * i + 1] = byte_minus<1>(w, 8388640.0f);
      q[4 * i + 2] = byte_minus<2>(w, 8388640.0f);
      q[4 * i + 3] = byte_minus<3>(w, 8388640.0f);
    }
    s[0] = s[1] = u.ds[P];
  }
};

// ---- IQ4_NL (d, qs[16]) and IQ4_XS (d, scales_h, scales_l[4], qs[128]): non-linear 4-bit values ----
// Bytes of words w[2P], w[2P+1] give elements 8P+j of the low-nibble group (q[j]) and of the
// high-nibble group (q[8+j]).
template <int P>
TANDEM_HD void nibble_groups(const uint32_t (&w)[4], const Tables& t, float (&q)[16]) {
  nibbles8(w[2 * P], t.lut, q);
  nibbles8(w[2 * P + 1], t.lut, q + 4);
}

struct DecIQ4_NL : NibbleSplit16 {
  static constexpr int kElems = 32, kBytes = 18, kGridBytes = 0, kSigns = 0, kLut = 1;
  static constexpr bool kExact = false;
  struct Unit {
    uint32_t w[4];
    float d;
  };
  TANDEM_HD static Unit load(const uint8_t* b, int) {
    Unit u;
    u.d = f16_bits(ld16(b));
    ld32_run<4>(b + 2, u.w);
    return u;
  }
  template <int P>
  TANDEM_HD static void half(const Unit& u, const Tables& t, float (&q)[16], float (&s)[2]) {
    nibble_groups<P>(u.w, t, q);
    s[0] = s[1] = u.d;
  }
};

// Sub-block ib's scale d·(ls − 32): its 6-bit ls from scales_l and scales_h (block 8-byte aligned).
TANDEM_HD float iq4xs_scale(const uint8_t* b, int ib) {
  const uint32_t head = ld32(b);  // d, scales_h
  const uint32_t sl = ld8(b + 4 + ib / 2);
  const int ls = int((sl >> (4 * (ib % 2))) & 0xF) | int(((head >> 16 >> (2 * ib)) & 3) << 4);
  return f16_bits(head & 0xFFFF) * float(ls - 32);
}

struct DecIQ4_XS : NibbleSplit16 {
  static constexpr int kElems = 256, kBytes = 136, kGridBytes = 0, kSigns = 0, kLut = 1;
  static constexpr bool kExact = false;
  struct Unit {
    uint32_t w[4];
    float dl;
  };
  TANDEM_HD static Unit load(const uint8_t* b, int ib) {
    Unit u;
    u.dl = iq4xs_scale(b, ib);
    const uint2 a = *reinterpret_cast<const uint2*>(b + 8 + 16 * ib);
    const uint2 c = *reinterpret_cast<const uint2*>(b + 16 + 16 * ib);
    u.w[0] = a.x, u.w[1] = a.y, u.w[2] = c.x, u.w[3] = c.y;
    return u;
  }
  template <int P>
  TANDEM_HD static void half(const Unit& u, const Tables& t, float (&q)[16], float (&s)[2]) {
    nibble_groups<P>(u.w, t, q);
    s[0] = s[1] = u.dl;
  }
};

// ---- NVFP4: d[4] (UE4M3 per 16 elements), qs[32]; byte j of sub-block t holds elements 16t+j (low
// nibble) and 16t+8+j (high nibble) ----
struct DecNVFP4 : InOrder {
  static constexpr int kElems = 64, kBytes = 36, kGridBytes = 0, kSigns = 0, kLut = 2;
  static constexpr bool kExact = false;
  struct Unit {
    uint32_t w[4];  // qs of the unit's two sub-blocks
    uint32_t sc;    // their UE4M3 scale bytes
  };
  TANDEM_HD static Unit load(const uint8_t* b, int h) {  // blocks are 4-byte aligned
    Unit u;
    u.sc = ld32(b) >> (16 * h);
#pragma unroll
    for (int i = 0; i < 4; ++i) u.w[i] = ld32(b + 4 + 16 * h + 4 * i);
    return u;
  }
  // Half P = sub-block P: group 0 the low nibbles, group 1 the high nibbles of its 8 bytes.
  template <int P>
  TANDEM_HD static void half(const Unit& u, const Tables& t, float (&q)[16], float (&s)[2]) {
    nibble_groups<P>(u.w, t, q);
    s[0] = s[1] = atf(t.e4, shr(u.sc, 8 * P - 2) & 0x3FC);
  }
};

}  // namespace tandem::gguf::kcuda
