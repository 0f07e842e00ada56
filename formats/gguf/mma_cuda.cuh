// The tensor-core decoders of every GGUF CUDA type (Mma<Q>: lane-wise for IQ2_XXS, NVFP4, Q8_0, Q6_K,
// Q4_K/Q5_K, IQ4_NL/IQ4_XS, IQ2_XS/IQ2_S, IQ3_XXS/IQ3_S, IQ1_M; MmaFromDec, the generic adapter of a
// rows decoder, for a new type's first version), which the prefill GEMM (gemm_cuda.cuh) uses,
// and a tensor-core GEMV for 1–16 activation rows on them (not Q4_K/Q5_K): weights are decoded to
// their exact small values in fp16 and multiplied
// on mma.sync m16n8k16 with fp32 accumulation, so extra rows cost little (the fp32 GEMV of
// kernels_cuda.cuh pays one FMA per weight per row). Opt-in (TANDEM_GGUF_MMA=1): see matmul_entry.
// Owner: callers own every pointer. Thread: one caller per stream. Sync: launches are queued.
//
// Numbers. Each 32-element group of a weight row is s·q (s the group's scale, or one per 16 for
// NVFP4; q integers, exact in fp16). Each 32-element group of an activation row is scaled by a
// power of two 2^−e so that its largest magnitude lies in [2^14, 2^15), then split x' = hi + lo with
// hi = fp16(x'), lo = fp16(x' − hi): about 22 significant bits, as exact as the products need. Per
// group the tensor cores sum q·hi + q·lo (each product exact in fp32) and the warp folds the group in
// as acc = fma(s·2^e, t, acc), groups in k order. Nothing depends on the number of rows: every mma
// column is computed on its own, and a row's scaling is its own. A row has the same bits whatever n.
//
// Layout. A warp owns 16 weight rows (an m16 tile); lane (g = lane / 4, q = lane % 4) decodes rows g
// and g + 8, and within each group the eight elements that Mma<Q>::place maps to it. The k order
// inside a group is permuted (a dot product does not care) so that those eight are what the A
// fragment wants: k-step j, pair h (k = 2q + 8h + t) holds element P(q, j, h, t). Activations are
// staged in shared memory in the same order, hi and lo halves side by side per lane, so the B
// fragment is two 16-byte loads.
#pragma once
#include <cuda_fp16.h>

#include <cstdlib>
#include <type_traits>

#include "formats/gguf/iquants_cuda.cuh"
#include "formats/gguf/kquants_cuda.cuh"
#include "tandem/cuda/tensor_core.cuh"

namespace tandem::gguf::kcuda {

constexpr int kMmaWarps = 8;        // one block: 16 weight rows, k split over the warps
constexpr int kMmaThreads = 32 * kMmaWarps;
constexpr int kMmaStages = 2;
constexpr int kMmaChunk = 256;      // elements per ring stage (one IQ2_XXS block, 4 NVFP4, 8 Q8_0)
constexpr int kMmaXElems = 16384;   // staged activation elements per block (all rows together)
constexpr int kMmaMaxRows = 16;     // activation rows per launch item (two n8 tiles)
constexpr int kStageUnroll = 4;     // float4 activation loads in flight per thread while staging

// fp16 bits of v (exact for the decoders' small values: GgufCudaMmaDecoders in test_decode_host.cu).
TANDEM_HD uint32_t h16(float v) { return uint32_t(__half_as_ushort(__float2half_rn(v))); }

// Bytes b (each 128 + v) at byte selectors `sel` (two bytes) to the half2 (v0, v1), exactly.
TANDEM_HD uint32_t h2_of_biased(uint32_t b, uint32_t sel) {
  const uint32_t r = prmt(b, 0x64646464u, sel);  // 0x64bb: 1024 + bb in fp16
#ifdef __CUDA_ARCH__
  uint32_t out;
  asm("sub.f16x2 %0, %1, %2;" : "=r"(out) : "r"(r), "r"(0x64806480u));  // − (1024 + 128)
  return out;
#else
  return h16(float(int(r & 0xFF) - 128)) | h16(float(int((r >> 16) & 0xFF) - 128)) << 16;
#endif
}

// The four 4-bit codes of the 16 bits v (b0 lo, b0 hi, b1 lo, b1 hi) through a 16-entry int8 table
// (t0..t3, four entries a word, in code order) as four bytes, each xored with 0x80 (h2_of_biased's
// input): two byte permutes on the code's low three bits, then a select on its top bit.
TANDEM_HD uint32_t lut16_biased(uint32_t v, uint32_t t0, uint32_t t1, uint32_t t2, uint32_t t3) {
  const uint32_t l = prmt(t0, t1, v), h = prmt(t2, t3, v);
  return prmt(l, h, 0x3210u | ((v >> 1) & 0x4444u)) ^ 0x80808080u;
}

// The four half2 of eight consecutive biased bytes lo (elements 0–3), hi (4–7), in element order.
TANDEM_HD void h2_run8(uint32_t lo, uint32_t hi, uint32_t (&w)[4]) {
  w[0] = h2_of_biased(lo, 0x4140), w[1] = h2_of_biased(lo, 0x4342);
  w[2] = h2_of_biased(hi, 0x4140), w[3] = h2_of_biased(hi, 0x4342);
}

template <class Q>
struct Mma;

// The placement of every decoder whose lane holds one run of eight elements: lane q takes elements
// 8q … 8q + 7 of the group in order (Q8_0, IQ2_XXS, IQ3_XXS/IQ3_S, Q4_K/Q5_K).
struct PlaceRunsOf8 {
  TANDEM_HD static void place(int e, int& q, int& slot) { q = e >> 3, slot = e & 7; }
};

// IQ2_XXS: a 32-element group is one unit (8 bytes: four grid indices, then four 7-bit signs and the
// 4-bit scale); lane q takes grid entry q = elements 8q .. 8q + 7.
template <>
struct Mma<DecIQ2_XXS> : PlaceRunsOf8 {
  static constexpr bool kScalePerStep = false;
  static constexpr bool kHasMin = false;
  static constexpr bool kTileByTile = false;
  __device__ static void group(const uint8_t* c, int u, int q, const Tables& t, uint32_t (&w)[4], float (&s)[2]) {
    const uint8_t* blk = c + (u >> 3) * DecIQ2_XXS::kBytes;
    const uint8_t* unit = blk + 2 + 8 * (u & 7);
    const uint32_t idx = ld8(unit + q);
    const uint32_t a1 = ld16x2(unit + 4);
    const uint64_t gr = at64(t.g64, idx << 3);
    const uint32_t sel = at32(t.sgn, ((a1 >> (7 * q)) & 127u) << 2);
    h2_run8(signed4_biased(uint32_t(gr), sel & 0xFFFF), signed4_biased(uint32_t(gr >> 32), sel >> 16), w);
    s[0] = s[1] = iq2_scale(f16_bits(ld16(blk)), a1 >> 28);
  }
};

// Q8_0: a group is one block (fp16 d, 32 int8); lane q takes bytes 8q .. 8q + 7.
template <>
struct Mma<DecQ8_0> : PlaceRunsOf8 {
  static constexpr bool kScalePerStep = false;
  static constexpr bool kHasMin = false;
  static constexpr bool kTileByTile = false;
  __device__ static void group(const uint8_t* c, int u, int q, const Tables&, uint32_t (&w)[4], float (&s)[2]) {
    const uint8_t* blk = c + u * DecQ8_0::kBytes;
    const uint8_t* v = blk + 2 + 8 * q;
    h2_run8(ld16x2(v) ^ 0x80808080u, ld16x2(v + 4) ^ 0x80808080u, w);
    s[0] = s[1] = f16_bits(ld16(blk));
  }
};

// NVFP4: a group is half a 64-element block, two sub-blocks of 16 with a UE4M3 scale each; k-step j
// is sub-block j. Lane q takes bytes 2q, 2q + 1 of each sub-block: their low nibbles are elements
// 2q, 2q + 1 (pair h = 0), their high nibbles 8 + 2q, 9 + 2q (h = 1).
template <>
struct Mma<DecNVFP4> {
  static constexpr bool kScalePerStep = true;
  static constexpr bool kHasMin = false;
  static constexpr bool kTileByTile = false;
  __device__ static void place(int e, int& q, int& slot) {
    const int j = e >> 4, r = e & 15, h = r >> 3, v = r & 7;
    q = v >> 1, slot = 4 * j + 2 * h + (v & 1);
  }
  __device__ static void group(const uint8_t* c, int u, int q, const Tables& t, uint32_t (&w)[4], float (&s)[2]) {
    const uint8_t* blk = c + (u >> 1) * DecNVFP4::kBytes;
    const int hh = u & 1;
    const uint32_t sc = ld16(blk + 2 * hh);
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      // Nibbles (b0 lo, b0 hi, b1 lo, b1 hi) through the 16-entry int8 table 2·E2M1, as four bytes.
      const uint32_t vals =
          lut16_biased(ld16(blk + 4 + 16 * hh + 8 * j + 2 * q), 0x03020100u, 0x0C080604u, 0xFDFEFF00u, 0xF4F8FAFCu);
      w[2 * j] = h2_of_biased(vals, 0x4240);      // elements 2q, 2q + 1
      w[2 * j + 1] = h2_of_biased(vals, 0x4341);  // elements 8 + 2q, 9 + 2q
      s[j] = atf(t.e4, ((sc >> (8 * j)) & 0xFFu) << 2);
    }
  }
};

// Every other type whose rows decoder yields small exact values and a scale per 16 elements
// (kExact false; Q6_K's placement), through that decoder:
// k-step j is half j of the 32-element unit (the decoders give one scale a half), pair h its group h
// of 8 (at Q::off(j, h)), lane q its elements 2q, 2q + 1. Each lane decodes the whole unit and picks
// its eight (4× the work of a lane-wise decoder): the prefill GEMM spends it once per 128 activation
// rows, far below its tensor-core time per group; the opt-in GEMV (TANDEM_GGUF_MMA) pays it per 16.
template <class Q>
struct MmaFromDec {
  static_assert(!Q::kExact, "MmaFromDec: the decoder must yield scale and small exact values");
  static constexpr bool kScalePerStep = true;
  static constexpr bool kHasMin = false;
  static constexpr bool kTileByTile = true;
  TANDEM_HD static void place(int e, int& q, int& slot) {
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int v = e - Q::off(j, h);
        if (v >= 0 && v < 8) q = v >> 1, slot = 4 * j + 2 * h + (v & 1);
      }
  }
  template <int P>
  TANDEM_HD static void half_regs(const typename Q::Unit& un, int q, const Tables& t, uint32_t (&w)[4], float (&s)[2]) {
    float v[16], sc[2];
    Q::template half<P>(un, t, v, sc);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float a = v[8 * h], b = v[8 * h + 1];
#pragma unroll
      for (int qq = 1; qq < 4; ++qq)
        if (q == qq) a = v[8 * h + 2 * qq], b = v[8 * h + 2 * qq + 1];
      w[2 * P + h] = h16(a) | h16(b) << 16;
    }
    s[P] = sc[0];
  }
  TANDEM_HD static void group(const uint8_t* c, int u, int q, const Tables& t, uint32_t (&w)[4], float (&s)[2]) {
    constexpr int UPB = Q::kElems / 32;
    const typename Q::Unit un = Q::load(c + (u / UPB) * Q::kBytes, u % UPB);
    half_regs<0>(un, q, t, w, s);
    half_regs<1>(un, q, t, w, s);
  }
};
// Q6_K lane-wise (through its whole unit the GEMM spilled 288 bytes): lane q's elements 2q + 8m, 2q + 8m + 1 (m = 0 … 3) are two
// bytes of ql (the nibble of r / 2) and of qh (bits 2r, 2r + 1) at offset 2q + 8m of the unit's runs;
// MmaFromDec's placement, the decoder's values q − 32 and scales d·sc per 16.
template <>
struct Mma<DecQ6_K> : MmaFromDec<DecQ6_K> {
  static constexpr bool kTileByTile = true;
  TANDEM_HD static void group(const uint8_t* c, int u, int q, const Tables&, uint32_t (&w)[4], float (&s)[2]) {
    const uint8_t* b = c + (u >> 3) * DecQ6_K::kBytes;
    const int ib = u & 7, n = ib / 4, r = ib % 4;
    const uint8_t* ql = b + 64 * n + 32 * (r & 1) + 2 * q;
    const uint8_t* qh = b + 128 + 32 * n + 2 * q;
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const uint32_t v = ((ld16(ql + 8 * m) >> (4 * (r >> 1))) & 0x0F0Fu) | (((ld16(qh + 8 * m) >> (2 * r)) & 0x0303u) << 4);
      w[m] = h2_of_biased(v + 0x6060u, 0x4140);  // bytes q + 96 = (q − 32) + 128, no carry (q ≤ 63)
    }
    const float d = f16_bits(ld16(b + 208));
    s[0] = d * float(int(int8_t(ld8(b + 192 + 8 * n + 2 * r))));
    s[1] = d * float(int(int8_t(ld8(b + 193 + 8 * n + 2 * r))));
  }
};
// IQ4_NL / IQ4_XS lane-wise: a 32-element group is 16 bytes, byte i holding element i (low nibble) and
// 16 + i (high), each code an index into kvalues_iq4nl (int8, exact in fp16), one scale a group (d,
// or d·(ls − 32)). Lane q takes bytes 2q, 2q + 1 (k-step 0) and 8 + 2q, 9 + 2q (k-step 1): their low
// nibbles are pair h = 0, their high nibbles pair h = 1; the codes go through lut16_biased.
struct MmaIQ4 {
  static constexpr bool kScalePerStep = false;
  static constexpr bool kHasMin = false;
  static constexpr bool kTileByTile = false;
  TANDEM_HD static void place(int e, int& q, int& slot) {
    const int h = e >> 4, r = e & 15, j = r >> 3, v = r & 7;
    q = v >> 1, slot = 4 * j + 2 * h + (v & 1);
  }
  TANDEM_HD static void lanes(const uint8_t* qs, int q, uint32_t (&w)[4]) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const uint32_t vals = lut16_biased(ld16(qs + 8 * j + 2 * q), 0xBFAD9881u, 0xF6EADDCFu, 0x26190D01u, 0x71594535u);
      w[2 * j] = h2_of_biased(vals, 0x4240);      // elements 8j + 2q, 8j + 2q + 1 (low nibbles)
      w[2 * j + 1] = h2_of_biased(vals, 0x4341);  // elements 16 + 8j + 2q, … + 1 (high nibbles)
    }
  }
};
template <>
struct Mma<DecIQ4_NL> : MmaIQ4 {
  TANDEM_HD static void group(const uint8_t* c, int u, int q, const Tables&, uint32_t (&w)[4], float (&s)[2]) {
    const uint8_t* blk = c + u * DecIQ4_NL::kBytes;
    lanes(blk + 2, q, w);
    s[0] = s[1] = f16_bits(ld16(blk));
  }
};
template <>
struct Mma<DecIQ4_XS> : MmaIQ4 {
  TANDEM_HD static void group(const uint8_t* c, int u, int q, const Tables&, uint32_t (&w)[4], float (&s)[2]) {
    const uint8_t* blk = c + (u >> 3) * DecIQ4_XS::kBytes;
    const int ib = u & 7;
    lanes(blk + 8 + 16 * ib, q, w);
    s[0] = s[1] = iq4xs_scale(blk, ib);
  }
};
// The grid i-quants lane-wise. A group of 8 elements is one grid entry (IQ2_XS, IQ2_S: a u64 of 8
// bytes; IQ3: two u32 of 4) and a sign pattern, its words turned into biased signed bytes by
// signed4_biased (kernels_cuda.cuh).

// IQ3_XXS / IQ3_S: one scale a group of 32, lane q takes group q (elements 8q … 8q + 7), as IQ2_XXS.
// These and IQ2_XS / IQ2_S run tile by tile: both m16 tiles' fragments at once spilled 8–104 bytes at
// the 128-register bound (ptxas), one at a time none.
struct MmaIQ3Place : PlaceRunsOf8 {
  static constexpr bool kScalePerStep = false;
  static constexpr bool kHasMin = false;
  static constexpr bool kTileByTile = true;
};
template <>
struct Mma<DecIQ3_XXS> : MmaIQ3Place {
  TANDEM_HD static void group(const uint8_t* c, int u, int q, const Tables& t, uint32_t (&w)[4], float (&s)[2]) {
    const uint8_t* blk = c + (u >> 3) * DecIQ3_XXS::kBytes;
    const int ib = u & 7;
    const uint32_t ix = ld16(blk + 2 + 8 * ib + 2 * q), a = ld16x2(blk + 66 + 4 * ib);
    const uint32_t sel = at32(t.sgn, ((a >> (7 * q)) & 127u) << 2);
    h2_run8(signed4_biased(at32(t.g32, (ix & 0xFF) << 2), sel & 0xFFFF),
            signed4_biased(at32(t.g32, (ix >> 8) << 2), sel >> 16), w);
    s[0] = s[1] = iq3xxs_scale(blk, a);
  }
};
template <>
struct Mma<DecIQ3_S> : MmaIQ3Place {
  TANDEM_HD static void group(const uint8_t* c, int u, int q, const Tables& t, uint32_t (&w)[4], float (&s)[2]) {
    const uint8_t* blk = c + (u >> 3) * DecIQ3_S::kBytes;
    const int ib = u & 7;
    const uint32_t ix = ld16(blk + 2 + 8 * ib + 2 * q), qh = ld8(blk + 66 + ib) >> (2 * q);
    const uint32_t sel = at32(t.sgn, ld8(blk + 74 + 4 * ib + q) << 2);
    const uint32_t o1 = ((ix & 0xFF) | (qh & 1) << 8) << 2, o2 = ((ix >> 8) | (qh & 2) << 7) << 2;
    h2_run8(signed4_biased(at32(t.g32, o1), sel & 0xFFFF), signed4_biased(at32(t.g32, o2), sel >> 16), w);
    s[0] = s[1] = iq3s_scale(blk, ib);
  }
};

// IQ2_XS / IQ2_S: a scale a half of 16 (k-step j = half j); lane q takes elements 4q … 4q + 3 of each
// half, i.e. the low (q even) or high (q odd) word of grid entry 2j + q / 2.
struct MmaIQ2Half {
  static constexpr bool kScalePerStep = true;
  static constexpr bool kHasMin = false;
  static constexpr bool kTileByTile = true;
  TANDEM_HD static void place(int e, int& q, int& slot) {
    const int j = e >> 4, r = e & 15;
    q = r >> 2, slot = 4 * j + (r & 3);
  }
  // Half j's four values of lane q from its grid entry (offset into Tables::g64) and sign selectors.
  TANDEM_HD static void half(const Tables& t, uint32_t grid_off, uint32_t sel, int q, int j, uint32_t (&w)[4]) {
    const uint64_t g = at64(t.g64, grid_off);
    const uint32_t vals =
        (q & 1) ? signed4_biased(uint32_t(g >> 32), sel >> 16) : signed4_biased(uint32_t(g), sel & 0xFFFF);
    w[2 * j] = h2_of_biased(vals, 0x4140), w[2 * j + 1] = h2_of_biased(vals, 0x4342);
  }
};
template <>
struct Mma<DecIQ2_XS> : MmaIQ2Half {
  TANDEM_HD static void group(const uint8_t* c, int u, int q, const Tables& t, uint32_t (&w)[4], float (&s)[2]) {
    const uint8_t* blk = c + (u >> 3) * DecIQ2_XS::kBytes;
    const int ib = u & 7;
    const float d = f16_bits(ld16(blk));
    const uint32_t sc = ld8(blk + 66 + ib);
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const uint32_t e = ld16(blk + 2 + 8 * ib + 2 * (2 * j + (q >> 1)));  // 9-bit index | 7-bit signs
      half(t, (e & 511u) << 3, at32(t.sgn, (e >> 9) << 2), q, j, w);
      s[j] = iq2_scale(d, (sc >> (4 * j)) & 15);
    }
  }
};
template <>
struct Mma<DecIQ2_S> : MmaIQ2Half {
  TANDEM_HD static void group(const uint8_t* c, int u, int q, const Tables& t, uint32_t (&w)[4], float (&s)[2]) {
    const uint8_t* blk = c + (u >> 3) * DecIQ2_S::kBytes;
    const int ib = u & 7;
    const float d = f16_bits(ld16(blk));
    const uint32_t sc = ld8(blk + 74 + ib), qh = ld8(blk + 66 + ib);
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int l = 2 * j + (q >> 1);
      const uint32_t idx = ld8(blk + 2 + 4 * ib + l) | ((qh >> (2 * l)) & 3) << 8;
      half(t, idx << 3, at32(t.sgn, ld8(blk + 34 + 4 * ib + l) << 2), q, j, w);
      s[j] = iq2_scale(d, (sc >> (4 * j)) & 15);
    }
  }
};
// IQ1_M lane-wise: MmaIQ2Half's placement (a 3-bit sub-scale a half of 16; lane q the low or high
// word of grid entry 2j + q / 2). Grid bytes are int8 −1, 0, 1; each group of 8 adds its shift ±1/8,
// exact in fp16, after the biased-byte conversion.
TANDEM_HD uint32_t h2_plus(uint32_t h2, float delta) {
#ifdef __CUDA_ARCH__
  const __half2 r = __hadd2(*reinterpret_cast<const __half2*>(&h2), __float2half2_rn(delta));
  return *reinterpret_cast<const uint32_t*>(&r);
#else
  return h16(f16_bits(h2 & 0xFFFF) + delta) | h16(f16_bits(h2 >> 16) + delta) << 16;
#endif
}
template <>
struct Mma<DecIQ1_M> : MmaIQ2Half {
  TANDEM_HD static void group(const uint8_t* c, int u, int q, const Tables& t, uint32_t (&w)[4], float (&s)[2]) {
    const uint8_t* blk = c + (u >> 3) * DecIQ1_M::kBytes;
    const int ib = u & 7;
    const DecIQ1_M::Unit un = DecIQ1_M::load(blk, ib);  // d, the unit's sub-scale bits, qs, qh
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      float delta;
      const uint64_t e = DecIQ1_M::entry(un, t, j, q >> 1, delta);  // group 2j + q / 2
      const uint32_t vals = ((q & 1) ? uint32_t(e >> 32) : uint32_t(e)) ^ 0x80808080u;
      w[2 * j] = h2_plus(h2_of_biased(vals, 0x4140), delta);
      w[2 * j + 1] = h2_plus(h2_of_biased(vals, 0x4342), delta);
      s[j] = DecIQ1_M::half_scale(un, j);
    }
  }
};

// Q4_K / Q5_K: a weight is scale·q − min (scale = d·sc and min = dmin·m per 32, both exact in fp32;
// q in 0 … 15 or 0 … 31), so a group's dot product is scale·Σ q·x − min·Σ x: the GEMM takes Σ x per
// activation row and group from its split kernel and folds both (kHasMin). Lane q takes elements 8q … 8q + 7
// of the unit (qs bytes 8q … 8q + 7 of its 32-byte chunk, the nibble of its parity, Q5_K's bit of qh).
template <bool kHigh5>
struct Mma<DecK45<kHigh5>> : PlaceRunsOf8 {
  static constexpr bool kScalePerStep = false;
  static constexpr bool kHasMin = true;
  static constexpr bool kTileByTile = false;
  TANDEM_HD static void group(const uint8_t* c, int u, int q, const Tables&, uint32_t (&w)[4], float (&s)[2],
                              float (&o)[2]) {
    using D = DecK45<kHigh5>;
    const uint8_t* blk = c + (u >> 3) * D::kBytes;
    const int ib = u & 7;
    float scale, min;
    k4_scale_min(blk, ib, scale, min);
    const uint8_t* qs = blk + (kHigh5 ? 48 : 16) + 32 * (ib / 2) + 8 * q;
    const int shift = 4 * (ib & 1);
    uint32_t v[2] = {(ld32(qs) >> shift) & 0x0F0F0F0Fu, (ld32(qs + 4) >> shift) & 0x0F0F0F0Fu};
    if constexpr (kHigh5) {
      v[0] |= ((ld32(blk + 16 + 8 * q) >> ib) & 0x01010101u) << 4;
      v[1] |= ((ld32(blk + 20 + 8 * q) >> ib) & 0x01010101u) << 4;
    }
    h2_run8(v[0] | 0x80808080u, v[1] | 0x80808080u, w);  // bytes q + 128 (q ≤ 31), as Q8_0's
    s[0] = s[1] = scale;
    o[0] = o[1] = min;
  }
};

// One group of one m16 × n8 tile: the A fragments wa (rows g) and wb (rows g + 8) times the
// activations' hi and lo B fragments, on the tensor cores (exact products), then acc[i] = fma(s, t[i],
// acc[i]) with s = sc[j][i] for k-step j (kScalePerStep; else sc[0][i] for the whole group): the
// fold of the prefill GEMM (one scale a weight row) and of the GEMV (times each column's exponent).
template <bool kScalePerStep>
__device__ __forceinline__ void mma_tile_step(float* ac, const uint32_t (&wa)[4], const uint32_t (&wb)[4],
                                              const float (&sc)[2][4], const uint4& hi, const uint4& lo) {
  if constexpr (kScalePerStep) {
#pragma unroll
    for (int js = 0; js < 2; ++js) {
      float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      const uint32_t a0 = wa[2 * js], a1 = wb[2 * js], a2 = wa[2 * js + 1], a3 = wb[2 * js + 1];
      cuda::mma16816(t, a0, a1, a2, a3, js ? hi.z : hi.x, js ? hi.w : hi.y);
      cuda::mma16816(t, a0, a1, a2, a3, js ? lo.z : lo.x, js ? lo.w : lo.y);
#pragma unroll
      for (int i = 0; i < 4; ++i) ac[i] = fmaf(sc[js][i], t[i], ac[i]);
    }
  } else {
    float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    cuda::mma16816(t, wa[0], wb[0], wa[1], wb[1], hi.x, hi.y);
    cuda::mma16816(t, wa[0], wb[0], wa[1], wb[1], lo.x, lo.y);
    cuda::mma16816(t, wa[2], wb[2], wa[3], wb[3], hi.z, hi.w);
    cuda::mma16816(t, wa[2], wb[2], wa[3], wb[3], lo.z, lo.w);
#pragma unroll
    for (int i = 0; i < 4; ++i) ac[i] = fmaf(sc[0][i], t[i], ac[i]);
  }
}
// The scales of mma_tile_step for weight rows g (sa) and g + 8 (sb), per k-step.
struct TileScales {
  float v[2][4];
};
__device__ __forceinline__ TileScales row_scales_of(const float (&sa)[2], const float (&sb)[2], float e0 = 1.0f,
                                                    float e1 = 1.0f) {
  TileScales s;
#pragma unroll
  for (int js = 0; js < 2; ++js) s.v[js][0] = sa[js] * e0, s.v[js][1] = sa[js] * e1, s.v[js][2] = sb[js] * e0, s.v[js][3] = sb[js] * e1;
  return s;
}

template <class Q>
__host__ __device__ constexpr int mma_chunk_bytes() {
  return kMmaChunk / Q::kElems * Q::kBytes;
}
template <class Q>
__host__ __device__ constexpr int mma_stage_bytes() {
  return (mma_chunk_bytes<Q>() + 32 + 15) / 16 * 16;
}
// Activation rows held per launch item: n rounded up to a power of two (the staging size only).
inline int mma_slots(int64_t n) { return n <= 1 ? 1 : n <= 2 ? 2 : n <= 4 ? 4 : n <= 8 ? 8 : 16; }
inline int64_t mma_x_chunk(int slots, int64_t k) {
  return std::min<int64_t>(kMmaXElems / slots / kMmaChunk * kMmaChunk, (k + kMmaChunk - 1) / kMmaChunk * kMmaChunk);
}
// Shared memory: tables | activations (slots rows of xc/32 groups × 128 bytes + 16 of padding) |
// group exponents (xc/32 × slots floats) | the warps' rings | the warps' partial sums.
__host__ __device__ inline size_t mma_x_row_bytes(int64_t xc) { return size_t(xc / 32) * 128 + 16; }
__host__ __device__ inline size_t mma_x_bytes(int slots, int64_t xc) {
  return (size_t(slots) * mma_x_row_bytes(xc) + size_t(xc / 32) * size_t(slots) * 4 + 15) / 16 * 16;
}
constexpr size_t kMmaPartBytes = size_t(kMmaWarps) * 32 * 8 * 4;
template <class Q>
inline size_t mma_smem_bytes(int slots, int64_t xc) {
  return size_t(table_bytes<Q>()) + mma_x_bytes(slots, xc) + size_t(kMmaWarps) * kMmaStages * 16 * mma_stage_bytes<Q>() +
         kMmaPartBytes;
}

// One launch: blockIdx.x picks 16 weight rows (an m16 tile), blockIdx.y (striding by gridDim.y) a
// slab of up to 16 activation rows. The k dimension is cut in chunks of kMmaChunk; chunk c belongs
// to warp c mod kMmaWarps, which streams its chunks through a ring of kMmaStages (the first
// requested before the tables and the activations are loaded) and sums them in increasing c. The
// warps' partial sums are added in warp order at the end. None of it depends on n or on how the
// activations are staged, so a row has the same bits in any batch.
template <class Q>
__global__ void __launch_bounds__(kMmaThreads) mma_gemv_kernel(CudaMatmulArgs p, int64_t xc, int slots) {
  using M = Mma<Q>;
  constexpr int GPC = kMmaChunk / 32;
  constexpr int CB = mma_chunk_bytes<Q>(), SB = mma_stage_bytes<Q>(), S = kMmaStages, W = kMmaWarps;
  extern __shared__ __align__(16) unsigned char smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const int xg = int(xc / 32);
  const size_t xrow = mma_x_row_bytes(xc);
  unsigned char* xs = smem + table_bytes<Q>();
  float* xexp = reinterpret_cast<float*>(xs + size_t(slots) * xrow);
  unsigned char* ring = xs + mma_x_bytes(slots, xc) + size_t(warp) * S * 16 * SB;
  float* part = reinterpret_cast<float*>(xs + mma_x_bytes(slots, xc) + size_t(W) * S * 16 * SB);

  const int64_t o0 = int64_t(blockIdx.x) * 16;
  const int64_t row_bytes = p.row_bytes;
  const int groups = int(p.k / 32);
  const int nch = int((p.k + kMmaChunk - 1) / kMmaChunk), cpx = int(xc / kMmaChunk);
  const int64_t items = (p.n + kMmaMaxRows - 1) / kMmaMaxRows;
  auto row_ptr = [&](int i) { return p.w + min(o0 + i, p.m - 1) * row_bytes; };  // rows past m repeat the last
  auto misalign = [&](int i, int c) {
    return int((uint32_t(reinterpret_cast<uintptr_t>(row_ptr(i))) + uint32_t(c) * uint32_t(CB)) & 15);
  };
  // The warp's j-th chunk (c = warp + j·W) into ring slot j mod S; an empty commit group past its end.
  auto issue = [&](int j) {
    const int c = warp + j * W;
    if (c < nch) {
      const int64_t b0 = int64_t(c) * CB;
      const int len = int(min(int64_t(CB), row_bytes - b0));
      for (int i = 0; i < 16; ++i) {
        const int mis = misalign(i, c);
        const uint8_t* lo = row_ptr(i) + b0 - mis;
        const int pieces = (mis + len + 15) >> 4;
        unsigned char* dst = ring + ((j % S) * 16 + i) * SB;
        for (int pc = lane; pc < pieces; pc += 32) cp_async16(dst + 16 * pc, lo + 16 * pc);
      }
    }
    cp_async_commit();
  };
  auto prologue = [&] {
#pragma unroll
    for (int j = 0; j < S - 1; ++j) issue(j);
  };

  int64_t item = blockIdx.y;
  bool prefetched = false;
  if (item < items) prologue(), prefetched = true;
  const Tables tab = init_tables<Q>(smem, p.grid);
  cuda::pdl_wait();
  cuda::pdl_trigger();

  for (; item < items; item += gridDim.y) {
    const int nr = int(min(int64_t(kMmaMaxRows), p.n - item * kMmaMaxRows));
    const int tiles = nr > 8 ? 2 : 1;
    const float* x = p.x + item * kMmaMaxRows * p.k;
    float* y = p.y + item * kMmaMaxRows * p.m;
    if (!prefetched) prologue();
    prefetched = false;
    float acc[2][4] = {};

    int j = 0;  // the warp's chunks done so far
    for (int cx0 = 0; cx0 < nch; cx0 += cpx) {  // one staged activation chunk: chunks cx0 .. cx0 + cpx − 1
      {  // stage it: 8 lanes per (row, group), a float4 each
        const int g0 = cx0 * GPC, ng = min(xg, groups - g0);
        const int total = nr * ng * 8;  // float4s
        __syncthreads();                // the previous activations are no longer read
        for (int b0 = 0; b0 < total; b0 += kMmaThreads * kStageUnroll) {  // uniform trip count: shuffles below
          float4 v[kStageUnroll];
#pragma unroll
          for (int i = 0; i < kStageUnroll; ++i) {
            const int t = b0 + i * kMmaThreads + int(threadIdx.x);
            v[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (t < total) {
              const int r = t / (ng * 8), rem = t % (ng * 8);
              v[i] = *reinterpret_cast<const float4*>(x + int64_t(r) * p.k + int64_t(g0 + (rem >> 3)) * 32 + (rem & 7) * 4);
            }
          }
#pragma unroll
          for (int i = 0; i < kStageUnroll; ++i) {
            const int t = b0 + i * kMmaThreads + int(threadIdx.x);
            float mx = fmaxf(fmaxf(fabsf(v[i].x), fabsf(v[i].y)), fmaxf(fabsf(v[i].z), fabsf(v[i].w)));
#pragma unroll
            for (int off = 1; off < 8; off <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
            if (t >= total) continue;
            const int r = t / (ng * 8), rem = t % (ng * 8), gi = rem >> 3, pt = rem & 7;
            const cuda::Pow2Scale sc = cuda::pow2_scale<14>(mx);
            const float e4[4] = {v[i].x, v[i].y, v[i].z, v[i].w};
            unsigned char* row = xs + size_t(r) * xrow + size_t(gi) * 128;
#pragma unroll
            for (int m = 0; m < 4; ++m) {
              const float xv = e4[m] * sc.up;
              __half hi, lo;
              cuda::split_hi_lo(xv, hi, lo);
              int qq, sl;
              M::place(pt * 4 + m, qq, sl);
              __half* seg = reinterpret_cast<__half*>(row + size_t(qq) * 32);
              seg[sl] = hi;
              seg[8 + sl] = lo;
            }
            if (pt == 0) xexp[gi * slots + r] = sc.down;
          }
        }
        __syncthreads();
      }
      // The warp's chunks inside this staged chunk, in increasing c.
      for (int c = warp + j * W; c < min(nch, cx0 + cpx); c = warp + j * W) {
        issue(j + S - 1);
        cp_async_wait<S - 1>();
        __syncwarp();
        const unsigned char* st = ring + (j % S) * 16 * SB;
        const uint8_t* cg = st + g * SB + misalign(g, c);
        const uint8_t* cg8 = st + (g + 8) * SB + misalign(g + 8, c);
        for (int u = 0; u < GPC; ++u) {
          if (c * GPC + u >= groups) break;
          uint32_t wa[4], wb[4];
          float sa[2], sb[2];
          M::group(cg, u, q, tab, wa, sa);
          M::group(cg8, u, q, tab, wb, sb);
          const int gx = (c - cx0) * GPC + u;  // group within the staged activations
#pragma unroll
          for (int nt = 0; nt < 2; ++nt) {
            if (nt >= tiles) break;
            const int col = 8 * nt + g, c0 = 8 * nt + 2 * q;
            uint4 hi = make_uint4(0, 0, 0, 0), lo = hi;
            if (col < nr) {
              const unsigned char* seg = xs + size_t(col) * xrow + size_t(gx) * 128 + size_t(q) * 32;
              hi = *reinterpret_cast<const uint4*>(seg);
              lo = *reinterpret_cast<const uint4*>(seg + 16);
            }
            const float e0 = c0 < nr ? xexp[gx * slots + c0] : 0.0f;
            const float e1 = c0 + 1 < nr ? xexp[gx * slots + c0 + 1] : 0.0f;
            mma_tile_step<M::kScalePerStep>(acc[nt], wa, wb, row_scales_of(sa, sb, e0, e1).v, hi, lo);
          }
        }
        __syncwarp();  // the slot is refilled by the next issue
        ++j;
      }
    }
    // The item is done: the warps' sums, added in warp order.
    cp_async_wait<0>();  // only empty groups can be pending; none may outlive the item's ring use
    __syncthreads();
#pragma unroll
    for (int i = 0; i < 8; ++i) part[(warp * 32 + lane) * 8 + i] = acc[i >> 2][i & 3];
    __syncthreads();
    if (warp == 0) {
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int nt = i >> 2;
        if (nt >= tiles) break;
        float v = part[lane * 8 + i];
        for (int w = 1; w < W; ++w) v += part[(w * 32 + lane) * 8 + i];
        const int col = 8 * nt + 2 * q + (i & 1);
        const int64_t row = o0 + g + 8 * ((i >> 1) & 1);
        if (col < nr && row < p.m) store_out(y + int64_t(col) * p.m + row, v * p.scale, p.epilogue);
      }
    }
  }
}

template <class Q>
void launch_mma_gemv(const CudaMatmulArgs& a, cudaStream_t s) {
  const int slots = mma_slots(std::min<int64_t>(a.n, kMmaMaxRows));
  const int64_t xc = mma_x_chunk(slots, a.k);
  const size_t smem = mma_smem_bytes<Q>(slots, xc);
  static bool configured = false;  // the engine thread loads and runs; the attribute is per function
  if (!configured) {
    size_t most = 0;
    for (int sl = 1; sl <= kMmaMaxRows; sl *= 2) most = std::max(most, mma_smem_bytes<Q>(sl, int64_t(kMmaXElems) / sl));
    cuda::check_cuda(cudaFuncSetAttribute(mma_gemv_kernel<Q>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(most)),
                     "gguf mma gemv: shared memory attribute");
    configured = true;
  }
  const int64_t items = (a.n + kMmaMaxRows - 1) / kMmaMaxRows;
  const dim3 grid(unsigned(cuda::ceil_div(a.m, int64_t(16))), unsigned(std::min<int64_t>(items, 65535)));
  cuda::launch(mma_gemv_kernel<Q>, grid, dim3(kMmaThreads), smem, s, "gguf mma gemv", a, xc, slots);
}

template <class Q, class = void>
struct HasMma : std::false_type {};
template <class Q>
struct HasMma<Q, std::void_t<decltype(Mma<Q>::kScalePerStep)>> : std::true_type {};

// matmul for the CudaQuantOps table: the fp32 GEMV, or with TANDEM_GGUF_MMA=1 the tensor-core GEMV
// where the type has one (for every n it serves, so that a row's bits never depend on n; gathers stay
// on the fp32 kernel, so a gathered row then differs from its expert's matmul in the last bits).
// Passes of more than 16 rows go to the prefill GEMM instead (gemm_cuda.cuh), in both modes. Opt-in:
// on the H200 it verifies 8 rows for 2.7 decode steps (fp32: 3.3) but decodes one row 1.4x slower
// (Bolt gguf-iq2 85 vs 122 tok/s, 2026-11-30), which costs more than it gains.
template <class Q>
void matmul_entry(const CudaMatmulArgs& a, cudaStream_t s) {
  if constexpr (HasMma<Q>::value && !Mma<Q>::kHasMin) {
    static const bool on = cuda::env_is_one("TANDEM_GGUF_MMA");
    // Activations are read as float4: rows of k % 32 == 0 floats from a 16-byte aligned start.
    if (on && reinterpret_cast<uintptr_t>(a.x) % 16 == 0) {
      if (a.n == 0 || a.m == 0) return;
      check(a.k % 32 == 0 && a.row_bytes == a.k / Q::kElems * Q::kBytes, "gguf (cuda): bad row geometry");
      return launch_mma_gemv<Q>(a, s);
    }
  }
  matmul_impl<Q>(a, s);
}

}  // namespace tandem::gguf::kcuda
