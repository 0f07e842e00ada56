// CPU kernels for the GGUF i-quant blocks (spec/formats.md § 3.8–3.13): IQ2_XXS, IQ2_XS, IQ2_S,
// IQ3_XXS, IQ3_S, IQ1_M. Each type decodes in groups of 8 elements that share one grid entry and one
// sign byte (or shift), so a decoder does a few table loads and 8-wide multiplies per group; dequantize
// and dot both run on one block decoder through the shared drivers in kernels_cpu.h.
#include <cstddef>
#include <cstring>

#include "kernels_cpu.h"

namespace tandem::gguf {

#include "iq_tables.inc"

namespace {

constexpr int kBlock = 256;  // QK_K
constexpr int kSub = 32;     // elements per sub-block (one scale or scale pair)
constexpr int kGroup = 8;    // elements per grid entry + sign byte

// Float copies of the grids and of the sign bytes (±1.0f per bit), built on first use. Loading 8
// floats vectorizes on every target, while converting grid bytes in the inner loop does not (GCC
// scalarizes u8 → f32 on baseline x86-64). Multiplying by ±1 is exact, so it equals the reference's
// conditional negation. About 140 KB; a kernel only touches its own type's grid.
struct FloatGrids {
  alignas(64) float signs[256][kGroup];
  alignas(64) float iq2xxs[256][kGroup];
  alignas(64) float iq2xs[512][kGroup];
  alignas(64) float iq2s[1024][kGroup];
  alignas(64) float iq3xxs[256][4];
  alignas(64) float iq3s[512][4];
  alignas(64) float iq1s[2048][kGroup];

  template <typename T, typename Byte, size_t N, size_t W>
  static void expand(const T (&grid)[N], float (&out)[N][W]) {
    for (size_t i = 0; i < N; ++i)
      for (size_t j = 0; j < W; ++j) out[i][j] = float(Byte(grid[i] >> (8 * j)));
  }

  FloatGrids() {
    for (int m = 0; m < 256; ++m)
      for (int j = 0; j < kGroup; ++j) signs[m][j] = (m >> j) & 1 ? -1.0f : 1.0f;
    expand<uint64_t, uint8_t>(iq2xxs_grid, iq2xxs);
    expand<uint64_t, uint8_t>(iq2xs_grid, iq2xs);
    expand<uint64_t, uint8_t>(iq2s_grid, iq2s);
    expand<uint32_t, uint8_t>(iq3xxs_grid, iq3xxs);
    expand<uint32_t, uint8_t>(iq3s_grid, iq3s);
    expand<uint64_t, int8_t>(iq1s_grid, iq1s);
  }
};

const FloatGrids& float_grids() {
  static const FloatGrids grids;
  return grids;
}

// Groups run as two 4-float GCC/Clang vectors: native SSE and NEON width, and each lane is plain
// IEEE fp32 arithmetic, so every target computes the same bits.
typedef float V4f __attribute__((vector_size(16)));

inline V4f load4(const float* p) {
  V4f v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void store4(float* p, V4f v) { std::memcpy(p, &v, sizeof(v)); }

// y[j] = scale · g[j] · sign[j] for a group whose values 0–3 are lo and 4–7 are hi. Every product is
// exact in fp32 for these formats (the fp16 scale, its small integer factor and the grid value need
// ≤ 22 significant bits together), so the values equal llama.cpp's bit for bit.
inline void put_group(const float* lo, const float* hi, const float* sgn, float scale, float* y) {
  store4(y, scale * (load4(lo) * load4(sgn)));
  store4(y + 4, scale * (load4(hi) * load4(sgn + 4)));
}
inline void put_group(const float* g, const float* sgn, float scale, float* y) { put_group(g, g + 4, sgn, scale, y); }

inline float iq2_scale(float d, uint32_t s4) { return d * (0.5f + float(s4)) * 0.25f; }

// ---- IQ2_XXS: d, then per sub-block two u32 words: four grid indices | four 7-bit signs + scale.
void decode_iq2_xxs(const uint8_t* blk, float* y) {
  const FloatGrids& fg = float_grids();
  const float d = half_to_float(load_u16(blk));
  for (int ib = 0; ib < 8; ++ib) {
    const uint32_t a0 = load_u32(blk + 2 + 8 * ib), a1 = load_u32(blk + 6 + 8 * ib);
    const float db = iq2_scale(d, a1 >> 28);
    for (int l = 0; l < 4; ++l)
      put_group(fg.iq2xxs[(a0 >> 8 * l) & 255], fg.signs[ksigns_iq2xs[(a1 >> 7 * l) & 127]], db,
                y + kSub * ib + kGroup * l);
  }
}

// ---- IQ2_XS: d, u16 qs[32] (9-bit index | 7-bit sign), scales[8] (two 4-bit scales per sub-block).
void decode_iq2_xs(const uint8_t* blk, float* y) {
  const FloatGrids& fg = float_grids();
  const float d = half_to_float(load_u16(blk));
  const uint8_t* qs = blk + 2;
  const uint8_t* scales = blk + 66;
  for (int ib = 0; ib < 8; ++ib) {
    const float db[2] = {iq2_scale(d, scales[ib] & 15), iq2_scale(d, scales[ib] >> 4)};
    for (int l = 0; l < 4; ++l) {
      const uint16_t q = load_u16(qs + 2 * (4 * ib + l));
      put_group(fg.iq2xs[q & 511], fg.signs[ksigns_iq2xs[q >> 9]], db[l / 2], y + kSub * ib + kGroup * l);
    }
  }
}

// ---- IQ2_S: d, qs[32] low index bits, signs[32] (explicit), qh[8] (2 high bits per group), scales[8].
void decode_iq2_s(const uint8_t* blk, float* y) {
  const FloatGrids& fg = float_grids();
  const float d = half_to_float(load_u16(blk));
  const uint8_t* qs = blk + 2;
  const uint8_t* signs = qs + 32;
  const uint8_t* qh = blk + 66;
  const uint8_t* scales = blk + 74;
  for (int ib = 0; ib < 8; ++ib) {
    const float db[2] = {iq2_scale(d, scales[ib] & 15), iq2_scale(d, scales[ib] >> 4)};
    for (int l = 0; l < 4; ++l) {
      const uint32_t index = qs[4 * ib + l] | ((uint32_t(qh[ib]) << (8 - 2 * l)) & 0x300);
      put_group(fg.iq2s[index], fg.signs[signs[4 * ib + l]], db[l / 2], y + kSub * ib + kGroup * l);
    }
  }
}

// ---- IQ3_XXS: d, qs[64] grid indices (two per group), then 8 u32 words: four 7-bit signs + scale.
void decode_iq3_xxs(const uint8_t* blk, float* y) {
  const FloatGrids& fg = float_grids();
  const float d = half_to_float(load_u16(blk));
  const uint8_t* qs = blk + 2;
  for (int ib = 0; ib < 8; ++ib) {
    const uint32_t a = load_u32(qs + 64 + 4 * ib);
    const float db = d * (0.5f + float(a >> 28)) * 0.5f;
    for (int l = 0; l < 4; ++l)
      put_group(fg.iq3xxs[qs[8 * ib + 2 * l]], fg.iq3xxs[qs[8 * ib + 2 * l + 1]],
                fg.signs[ksigns_iq2xs[(a >> 7 * l) & 127]], db, y + kSub * ib + kGroup * l);
  }
}

// ---- IQ3_S: d, qs[64] low index bits, qh[8] (9th index bits), signs[32], scales[4] (4 bits each).
void decode_iq3_s(const uint8_t* blk, float* y) {
  const FloatGrids& fg = float_grids();
  const float d = half_to_float(load_u16(blk));
  const uint8_t* qs = blk + 2;
  const uint8_t* qh = blk + 66;
  const uint8_t* signs = blk + 74;
  const uint8_t* scales = blk + 106;
  for (int ib = 0; ib < 8; ++ib) {
    const float db = d * float(1 + 2 * ((scales[ib / 2] >> 4 * (ib % 2)) & 15));
    for (int l = 0; l < 4; ++l) {
      const uint32_t i1 = qs[8 * ib + 2 * l] | ((uint32_t(qh[ib]) << (8 - 2 * l)) & 256);
      const uint32_t i2 = qs[8 * ib + 2 * l + 1] | ((uint32_t(qh[ib]) << (7 - 2 * l)) & 256);
      put_group(fg.iq3s[i1], fg.iq3s[i2], fg.signs[signs[4 * ib + l]], db, y + kSub * ib + kGroup * l);
    }
  }
}

// ---- IQ1_M: qs[32] low index bits, qh[16] (3 high index bits + shift sign per group), scales[8]
// (3-bit sub-scales, with the fp16 super-scale spread over the top nibble of each u16).
// ±IQ1M_DELTA by the group's shift bit: a load, because a branch on random bits mispredicts.
constexpr float kIq1Delta[2] = {0.125f, -0.125f};

// Reads the four u16 scale words into sc and returns the super-scale d spread over their top nibbles.
inline float iq1_m_scales(const uint8_t* blk, uint16_t (&sc)[4]) {
  std::memcpy(sc, blk + 48, 8);
  return half_to_float(uint16_t((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000)));
}

void decode_iq1_m(const uint8_t* blk, float* y) {
  const FloatGrids& fg = float_grids();
  const uint8_t* qs = blk;
  const uint8_t* qh = blk + 32;
  uint16_t sc[4];
  const float d = iq1_m_scales(blk, sc);
  for (int ib = 0; ib < 8; ++ib) {
    for (int l = 0; l < 4; ++l) {
      // Groups 0–1 take the low 3-bit sub-scale, groups 2–3 the next; odd groups read qh's high nibble.
      const float dl = d * float(2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3 * (l / 2))) & 7) + 1);
      const uint32_t h = qh[2 * ib + l / 2];
      const float delta = kIq1Delta[(h >> (l % 2 ? 7 : 3)) & 1];
      const float* g = fg.iq1s[qs[4 * ib + l] | ((h << (l % 2 ? 4 : 8)) & 0x700)];
      // g + delta is exact (a multiple of 1/8 below 2), and so is its product with dl.
      float* yg = y + kSub * ib + kGroup * l;
      store4(yg, dl * (load4(g) + delta));
      store4(yg + 4, dl * (load4(g + 4) + delta));
    }
  }
}

// ---- llama.cpp-compatible products (quant.h dot_act) against Q8_K activations: the signed grid values
// as int8 codes, integer sums per sub-block times the small odd scales, then one float scale per block
// (llama.cpp's vec_dot_<t>_q8_K; the constant factor 1/8 or 1/4 of the scales comes last).

// Bytes of a grid word as codes, negated where the sign mask has a bit.
template <typename Word>
inline void put_codes(Word grid, uint32_t signs, int count, int8_t* w) {
  for (int j = 0; j < count; ++j) {
    const int v = int((grid >> (8 * j)) & 0xFF);
    w[j] = int8_t((signs >> j) & 1 ? -v : v);
  }
}

// The Q8_K product of the types with an fp16 d in front: Sub(blk, ib, x) is sub-block ib's integer sum,
// codes times x times its odd scales; `factor` is the scales' common 1/8 or 1/4.
template <int kBytes, int32_t (*Sub)(const uint8_t*, int, const int8_t*)>
float dot_act_q8k(const uint8_t* blk, const ActQ8_K* y, int64_t nb, float factor) {
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; ++i, blk += kBytes) {
    int32_t bsum = 0;
    for (int ib = 0; ib < 8; ++ib) bsum += Sub(blk, ib, y[i].q + kSub * ib);
    sum += (half_to_float(load_u16(blk)) * y[i].d) * float(bsum);
  }
  return factor * sum;
}

// IQ2_XS and IQ2_S: groups 0–1 of a sub-block take the low 4-bit scale, groups 2–3 the high one.
inline int32_t two_scale_sum(const int8_t* w, const int8_t* x, uint8_t sc) {
  return (2 * (sc & 15) + 1) * dot_i8(w, x, 16) + (2 * (sc >> 4) + 1) * dot_i8(w + 16, x + 16, 16);
}

int32_t sub_iq2_xxs(const uint8_t* blk, int ib, const int8_t* x) {
  const uint32_t a0 = load_u32(blk + 2 + 8 * ib), a1 = load_u32(blk + 6 + 8 * ib);
  int8_t w[kSub];
  for (int l = 0; l < 4; ++l)
    put_codes(iq2xxs_grid[(a0 >> 8 * l) & 255], ksigns_iq2xs[(a1 >> 7 * l) & 127], kGroup, w + kGroup * l);
  return int32_t(2 * (a1 >> 28) + 1) * dot_i8(w, x, kSub);
}

int32_t sub_iq2_xs(const uint8_t* blk, int ib, const int8_t* x) {
  int8_t w[kSub];
  for (int l = 0; l < 4; ++l) {
    const uint16_t q = load_u16(blk + 2 + 2 * (4 * ib + l));
    put_codes(iq2xs_grid[q & 511], ksigns_iq2xs[q >> 9], kGroup, w + kGroup * l);
  }
  return two_scale_sum(w, x, blk[66 + ib]);
}

int32_t sub_iq2_s(const uint8_t* blk, int ib, const int8_t* x) {
  const uint8_t* qs = blk + 2;
  const uint8_t* signs = qs + 32;
  int8_t w[kSub];
  for (int l = 0; l < 4; ++l) {
    const uint32_t index = qs[4 * ib + l] | ((uint32_t(blk[66 + ib]) << (8 - 2 * l)) & 0x300);
    put_codes(iq2s_grid[index], signs[4 * ib + l], kGroup, w + kGroup * l);
  }
  return two_scale_sum(w, x, blk[74 + ib]);
}

int32_t sub_iq3_xxs(const uint8_t* blk, int ib, const int8_t* x) {
  const uint8_t* qs = blk + 2;
  const uint32_t a = load_u32(qs + 64 + 4 * ib);
  int8_t w[kSub];
  for (int l = 0; l < 4; ++l) {
    const uint32_t mask = ksigns_iq2xs[(a >> 7 * l) & 127];
    put_codes(iq3xxs_grid[qs[8 * ib + 2 * l]], mask, 4, w + kGroup * l);
    put_codes(iq3xxs_grid[qs[8 * ib + 2 * l + 1]], mask >> 4, 4, w + kGroup * l + 4);
  }
  return int32_t(2 * (a >> 28) + 1) * dot_i8(w, x, kSub);
}

int32_t sub_iq3_s(const uint8_t* blk, int ib, const int8_t* x) {
  const uint8_t* qs = blk + 2;
  const uint32_t qh = blk[66 + ib];
  const uint8_t* signs = blk + 74 + 4 * ib;
  int8_t w[kSub];
  for (int l = 0; l < 4; ++l) {
    const uint32_t i1 = qs[8 * ib + 2 * l] | ((qh << (8 - 2 * l)) & 256);
    const uint32_t i2 = qs[8 * ib + 2 * l + 1] | ((qh << (7 - 2 * l)) & 256);
    put_codes(iq3s_grid[i1], signs[l], 4, w + kGroup * l);
    put_codes(iq3s_grid[i2], uint32_t(signs[l]) >> 4, 4, w + kGroup * l + 4);
  }
  return (2 * ((blk[106 + ib / 2] >> 4 * (ib % 2)) & 15) + 1) * dot_i8(w, x, kSub);
}

// IQ1_M: the grid's {−1, 0, 1} against x, and the ±1/8 shift of each group as ±Σx, both weighted by
// the group's 3-bit scale; Σ += d_w·d_x·(sum1 + sum2/8).
float dot_act_iq1_m_rows(const uint8_t* blk, const ActQ8_K* y, int64_t nb) {
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; ++i, blk += 56) {
    const uint8_t* qs = blk;
    const uint8_t* qh = blk + 32;
    uint16_t sc[4];
    const float d = iq1_m_scales(blk, sc);
    int32_t sum1 = 0, sum2 = 0;
    for (int ib = 0; ib < 8; ++ib) {
      for (int l = 0; l < 4; ++l) {
        const uint32_t h = qh[2 * ib + l / 2];
        const int ls = 2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3 * (l / 2))) & 7) + 1;
        const uint64_t grid = iq1s_grid[qs[4 * ib + l] | ((h << (l % 2 ? 4 : 8)) & 0x700)];
        const int8_t* x = y[i].q + kSub * ib + kGroup * l;
        int8_t w[kGroup];
        int32_t xsum = 0;
        for (int j = 0; j < kGroup; ++j) {
          w[j] = int8_t(grid >> (8 * j));
          xsum += x[j];
        }
        sum1 += ls * dot_i8(w, x, kGroup);
        sum2 += ls * ((h >> (l % 2 ? 7 : 3)) & 1 ? -xsum : xsum);
      }
    }
    sum += (d * y[i].d) * (float(sum1) + 0.125f * float(sum2));
  }
  return sum;
}

}  // namespace

// Block sizes from spec/formats.md § 2.4.
void dequantize_iq2_xxs(const uint8_t* blocks, float* out, int64_t n) {
  dequantize_blocks<kBlock, 66, decode_iq2_xxs>(blocks, out, n);
}
float dot_iq2_xxs(const uint8_t* blocks, const float* x, int64_t n) {
  return dot_blocks<kBlock, 66, decode_iq2_xxs>(blocks, x, n);
}

void dequantize_iq2_xs(const uint8_t* blocks, float* out, int64_t n) {
  dequantize_blocks<kBlock, 74, decode_iq2_xs>(blocks, out, n);
}
float dot_iq2_xs(const uint8_t* blocks, const float* x, int64_t n) {
  return dot_blocks<kBlock, 74, decode_iq2_xs>(blocks, x, n);
}

void dequantize_iq2_s(const uint8_t* blocks, float* out, int64_t n) {
  dequantize_blocks<kBlock, 82, decode_iq2_s>(blocks, out, n);
}
float dot_iq2_s(const uint8_t* blocks, const float* x, int64_t n) {
  return dot_blocks<kBlock, 82, decode_iq2_s>(blocks, x, n);
}

void dequantize_iq3_xxs(const uint8_t* blocks, float* out, int64_t n) {
  dequantize_blocks<kBlock, 98, decode_iq3_xxs>(blocks, out, n);
}
float dot_iq3_xxs(const uint8_t* blocks, const float* x, int64_t n) {
  return dot_blocks<kBlock, 98, decode_iq3_xxs>(blocks, x, n);
}

void dequantize_iq3_s(const uint8_t* blocks, float* out, int64_t n) {
  dequantize_blocks<kBlock, 110, decode_iq3_s>(blocks, out, n);
}
float dot_iq3_s(const uint8_t* blocks, const float* x, int64_t n) {
  return dot_blocks<kBlock, 110, decode_iq3_s>(blocks, x, n);
}

void dequantize_iq1_m(const uint8_t* blocks, float* out, int64_t n) {
  dequantize_blocks<kBlock, 56, decode_iq1_m>(blocks, out, n);
}
float dot_iq1_m(const uint8_t* blocks, const float* x, int64_t n) {
  return dot_blocks<kBlock, 56, decode_iq1_m>(blocks, x, n);
}

float dot_act_iq2_xxs(const uint8_t* blocks, const void* xa, int64_t n) {
  return dot_act_q8k<66, sub_iq2_xxs>(blocks, static_cast<const ActQ8_K*>(xa), n / kBlock, 0.125f);
}
float dot_act_iq2_xs(const uint8_t* blocks, const void* xa, int64_t n) {
  return dot_act_q8k<74, sub_iq2_xs>(blocks, static_cast<const ActQ8_K*>(xa), n / kBlock, 0.125f);
}
float dot_act_iq2_s(const uint8_t* blocks, const void* xa, int64_t n) {
  return dot_act_q8k<82, sub_iq2_s>(blocks, static_cast<const ActQ8_K*>(xa), n / kBlock, 0.125f);
}
float dot_act_iq3_xxs(const uint8_t* blocks, const void* xa, int64_t n) {
  return dot_act_q8k<98, sub_iq3_xxs>(blocks, static_cast<const ActQ8_K*>(xa), n / kBlock, 0.25f);
}
float dot_act_iq3_s(const uint8_t* blocks, const void* xa, int64_t n) {
  return dot_act_q8k<110, sub_iq3_s>(blocks, static_cast<const ActQ8_K*>(xa), n / kBlock, 1.0f);
}
float dot_act_iq1_m(const uint8_t* blocks, const void* xa, int64_t n) {
  return dot_act_iq1_m_rows(blocks, static_cast<const ActQ8_K*>(xa), n / kBlock);
}

}  // namespace tandem::gguf
