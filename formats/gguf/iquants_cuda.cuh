// CUDA decoders of the GGUF i-quants (spec/formats.md § 3.8–3.13), the twins of iquants_cpu.cpp:
// IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_M. Each 32-element unit is four groups of 8 that share
// a grid entry (a u64 of 8 bytes, or two u32 of 4) and a sign byte or shift; the grid is copied to
// shared memory once per block, and grid bytes become floats through the exponent trick (the signs
// applied to biased bytes first, four at a time). The values scale·q equal the CPU decoder's bit for
// bit (every product there is exact). Interface: kernels_cuda.cuh.
#pragma once
#include "kernels_cuda.cuh"

namespace tandem::gguf::kcuda {

// Grid entry `index` with sign pattern `signs` (an index into Tables::sgn) → 8 values.
TANDEM_HD void grid64_group(const Tables& t, uint32_t grid_off, uint32_t sign_off, float* q) {
  const uint64_t g = at64(t.g64, grid_off);
  grid8_signed(uint32_t(g), uint32_t(g >> 32), at32(t.sgn, sign_off), q);
}

TANDEM_HD float iq2_scale(float d, uint32_t s4) { return d * (0.5f + float(s4)) * 0.25f; }

// ---- IQ2_XXS: d, then per unit two u32: four grid indices | four 7-bit signs and a 4-bit scale ----
struct DecIQ2_XXS : InOrder {
  static constexpr int kElems = 256, kBytes = 66, kGridBytes = 256 * 8, kSigns = 7, kLut = 0;
  static constexpr bool kExact = false;
  struct Unit {
    uint32_t a0, a1;
    float db;
  };
  TANDEM_HD static Unit load(const uint8_t* b, int ib) {
    uint32_t a[2];
    ld32_run<2>(b + 2 + 8 * ib, a);
    return {a[0], a[1], iq2_scale(f16_bits(ld16(b)), a[1] >> 28)};
  }
  template <int P>
  TANDEM_HD static void half(const Unit& u, const Tables& t, float (&q)[16], float (&s)[2]) {
#pragma unroll
    for (int g = 0; g < 2; ++g) {
      const int l = 2 * P + g;
      grid64_group(t, shr(u.a0, 8 * l - 3) & 0x7F8, shr(u.a1, 7 * l - 2) & 0x1FC, q + 8 * g);
    }
    s[0] = s[1] = u.db;
  }
};

// ---- IQ2_XS: d, u16 qs[32] (9-bit index | 7-bit sign), scales[8] (two 4-bit scales per unit) ----
struct DecIQ2_XS : InOrder {
  static constexpr int kElems = 256, kBytes = 74, kGridBytes = 512 * 8, kSigns = 7, kLut = 0;
  static constexpr bool kExact = false;
  struct Unit {
    uint32_t q[2];  // four u16 entries
    float db[2];
  };
  TANDEM_HD static Unit load(const uint8_t* b, int ib) {
    Unit u;
    ld32_run<2>(b + 2 + 8 * ib, u.q);
    const float d = f16_bits(ld16(b));
    const uint32_t sc = ld8(b + 66 + ib);
    u.db[0] = iq2_scale(d, sc & 15);
    u.db[1] = iq2_scale(d, sc >> 4);
    return u;
  }
  template <int P>
  TANDEM_HD static void half(const Unit& u, const Tables& t, float (&q)[16], float (&s)[2]) {
#pragma unroll
    for (int g = 0; g < 2; ++g) {
      grid64_group(t, shr(u.q[P], 16 * g - 3) & 0xFF8, shr(u.q[P], 16 * g + 7) & 0x1FC, q + 8 * g);
    }
    s[0] = s[1] = u.db[P];
  }
};

// ---- IQ2_S: d, qs[32] low index bits, signs[32], qh[8] (2 high bits per group), scales[8] ----
struct DecIQ2_S : InOrder {
  static constexpr int kElems = 256, kBytes = 82, kGridBytes = 1024 * 8, kSigns = 8, kLut = 0;
  static constexpr bool kExact = false;
  struct Unit {
    uint32_t qs, signs, qh;
    float db[2];
  };
  TANDEM_HD static Unit load(const uint8_t* b, int ib) {
    Unit u;
    uint32_t w[1];
    ld32_run<1>(b + 2 + 4 * ib, w);
    u.qs = w[0];
    ld32_run<1>(b + 34 + 4 * ib, w);
    u.signs = w[0];
    u.qh = ld8(b + 66 + ib);
    const float d = f16_bits(ld16(b));
    const uint32_t sc = ld8(b + 74 + ib);
    u.db[0] = iq2_scale(d, sc & 15);
    u.db[1] = iq2_scale(d, sc >> 4);
    return u;
  }
  template <int P>
  TANDEM_HD static void half(const Unit& u, const Tables& t, float (&q)[16], float (&s)[2]) {
#pragma unroll
    for (int g = 0; g < 2; ++g) {
      const int l = 2 * P + g;
      const uint32_t grid_off = (shr(u.qs, 8 * l - 3) & 0x7F8) | (shr(u.qh, 2 * l - 11) & 0x1800);
      grid64_group(t, grid_off, shr(u.signs, 8 * l - 2) & 0x3FC, q + 8 * g);
    }
    s[0] = s[1] = u.db[P];
  }
};

// IQ3_XXS's scale from d and the unit's sign word a (scale in its top 4 bits); IQ3_S's for unit ib.
TANDEM_HD float iq3xxs_scale(const uint8_t* b, uint32_t a) {
  return f16_bits(ld16(b)) * (0.5f + float(a >> 28)) * 0.5f;
}
TANDEM_HD float iq3s_scale(const uint8_t* b, int ib) {
  const uint32_t sc = ld8(b + 106 + ib / 2);
  return f16_bits(ld16(b)) * float(1 + 2 * int((sc >> (4 * (ib % 2))) & 15));
}

// ---- IQ3_XXS: d, qs[64] grid indices (two u32 entries per group), 8 u32: four 7-bit signs + scale ----
struct DecIQ3_XXS : InOrder {
  static constexpr int kElems = 256, kBytes = 98, kGridBytes = 256 * 4, kSigns = 7, kLut = 0;
  static constexpr bool kExact = false;
  struct Unit {
    uint32_t idx[2], a;
    float db;
  };
  TANDEM_HD static Unit load(const uint8_t* b, int ib) {
    Unit u;
    ld32_run<2>(b + 2 + 8 * ib, u.idx);
    uint32_t a[1];
    ld32_run<1>(b + 66 + 4 * ib, a);
    u.a = a[0];
    u.db = iq3xxs_scale(b, u.a);
    return u;
  }
  template <int P>
  TANDEM_HD static void half(const Unit& u, const Tables& t, float (&q)[16], float (&s)[2]) {
#pragma unroll
    for (int g = 0; g < 2; ++g) {
      const int l = 2 * P + g;
      grid8_signed(at32(t.g32, shr(u.idx[P], 16 * g - 2) & 0x3FC), at32(t.g32, shr(u.idx[P], 16 * g + 6) & 0x3FC),
                   at32(t.sgn, shr(u.a, 7 * l - 2) & 0x1FC), q + 8 * g);
    }
    s[0] = s[1] = u.db;
  }
};

// ---- IQ3_S: d, qs[64] low index bits, qh[8] (9th bits), signs[32], scales[4] (4 bits each) ----
struct DecIQ3_S : InOrder {
  static constexpr int kElems = 256, kBytes = 110, kGridBytes = 512 * 4, kSigns = 8, kLut = 0;
  static constexpr bool kExact = false;
  struct Unit {
    uint32_t qs[2], signs, qh;
    float db;
  };
  TANDEM_HD static Unit load(const uint8_t* b, int ib) {
    Unit u;
    ld32_run<2>(b + 2 + 8 * ib, u.qs);
    uint32_t w[1];
    ld32_run<1>(b + 74 + 4 * ib, w);
    u.signs = w[0];
    u.qh = ld8(b + 66 + ib);
    u.db = iq3s_scale(b, ib);
    return u;
  }
  template <int P>
  TANDEM_HD static void half(const Unit& u, const Tables& t, float (&q)[16], float (&s)[2]) {
#pragma unroll
    for (int g = 0; g < 2; ++g) {
      const int l = 2 * P + g;
      const uint32_t o1 = (shr(u.qs[P], 16 * g - 2) & 0x3FC) | (shr(u.qh, 2 * l - 10) & 0x400);
      const uint32_t o2 = (shr(u.qs[P], 16 * g + 6) & 0x3FC) | (shr(u.qh, 2 * l - 9) & 0x400);
      grid8_signed(at32(t.g32, o1), at32(t.g32, o2), at32(t.sgn, shr(u.signs, 8 * l - 2) & 0x3FC), q + 8 * g);
    }
    s[0] = s[1] = u.db;
  }
};

// ---- IQ1_M: qs[32] low index bits, qh[16] (3 high bits + shift sign per group), scales[8] (3-bit
// sub-scales; the fp16 super-scale spread over the top nibble of each u16) ----
struct DecIQ1_M : InOrder {
  static constexpr int kElems = 256, kBytes = 56, kGridBytes = 2048 * 8, kSigns = 0, kLut = 0;
  static constexpr bool kExact = false;
  struct Unit {
    uint32_t qs, qh, sc;  // 4 index bytes, 2 qh bytes, the unit's six bits of sub-scales (low)
    float d;
  };
  TANDEM_HD static Unit load(const uint8_t* b, int ib) {  // blocks are 8-byte aligned
    Unit u;
    const uint2 scw = *reinterpret_cast<const uint2*>(b + 48);
    const uint32_t s0 = scw.x & 0xFFFF, s1 = scw.x >> 16, s2 = scw.y & 0xFFFF, s3 = scw.y >> 16;
    u.d = f16_bits((s0 >> 12) | ((s1 >> 8) & 0x00F0) | ((s2 >> 4) & 0x0F00) | (s3 & 0xF000));
    // sc[ib / 2] of {s0, s1, s2, s3}, by selection (a runtime-indexed array would sit in local memory)
    u.sc = (((ib < 4 ? scw.x : scw.y) >> (16 * ((ib >> 1) & 1))) & 0xFFFF) >> (6 * (ib % 2));
    u.qs = ld32(b + 4 * ib);
    u.qh = ld16(b + 32 + 2 * ib);
    return u;
  }
  // Group g of half P (group 2P + g of the unit): its grid entry, and its shift ±1/8 in delta.
  TANDEM_HD static uint64_t entry(const Unit& u, const Tables& t, int P, int g, float& delta) {
    const uint32_t h = (u.qh >> (8 * P)) & 255;  // groups 2P, 2P+1 share qh byte P
    delta = ((h >> (g ? 7 : 3)) & 1) ? -0.125f : 0.125f;
    return at64(t.g64, (shr(u.qs, 8 * (2 * P + g) - 3) & 0x7F8) | (shr(h, g ? -7 : -11) & 0x3800));
  }
  // Groups 0–1 take the low 3-bit sub-scale of the unit's six bits, groups 2–3 the next three.
  TANDEM_HD static float half_scale(const Unit& u, int P) {
    return u.d * float(2 * int((u.sc >> (3 * P)) & 7) + 1);
  }
  template <int P>
  TANDEM_HD static void half(const Unit& u, const Tables& t, float (&q)[16], float (&s)[2]) {
#pragma unroll
    for (int g = 0; g < 2; ++g) {
      float delta;
      const uint64_t e = entry(u, t, P, g, delta);
      const uint32_t lo = uint32_t(e) ^ 0x80808080u, hi = uint32_t(e >> 32) ^ 0x80808080u;
      float* o = q + 8 * g;
      o[0] = byte_s<0>(lo) + delta, o[1] = byte_s<1>(lo) + delta, o[2] = byte_s<2>(lo) + delta;
      o[3] = byte_s<3>(lo) + delta, o[4] = byte_s<0>(hi) + delta, o[5] = byte_s<1>(hi) + delta;
      o[6] = byte_s<2>(hi) + delta, o[7] = byte_s<3>(hi) + delta;
    }
    s[0] = s[1] = half_scale(u, P);
  }
};

}  // namespace tandem::gguf::kcuda
