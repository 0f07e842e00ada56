// CPU kernels for the dense, k-quant, IQ4 and NVFP4 GGML types (spec/formats.md § 3). Each type has
// one block decoder whose arithmetic follows llama.cpp's dequantize_row_* operation for operation,
// so dequantization is bit-exact against it; dot products reuse the decoder a few blocks at a time.
#include <array>

#include "kernels_cpu.h"

namespace tandem::gguf {
namespace {

constexpr float kValuesIq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
// 2×E2M1, so the NVFP4 block scale below is halved to compensate.
constexpr float kValuesFp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// 0.5·UE4M3(x). Bit 7 is ignored; 0x00 and 0x7F (the NaN code) decode to 0. Otherwise
// e = 0: m·2^-9·½ = m·2^-10, else (1 + m/8)·2^(e−7)·½ = (8 + m)·2^(e−11); both exact in fp32.
constexpr float ue4m3_half(int x) {
  if (x == 0 || x == 0x7F) return 0.0f;
  const int e = (x >> 3) & 0xF, m = x & 7;
  float v = float(e == 0 ? m : 8 + m);
  for (int p = e == 0 ? -10 : e - 11; p != 0; p += p < 0 ? 1 : -1) v = p < 0 ? v * 0.5f : v * 2.0f;
  return v;
}
constexpr std::array<float, 256> kUe4m3Half = [] {
  std::array<float, 256> t{};
  for (int x = 0; x < 256; ++x) t[x] = ue4m3_half(x);
  return t;
}();

// --- dense types: a "block" is one element, so rows need not fill whole lane groups ---

inline float elem_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}
inline float elem_f16(const uint8_t* p) { return half_to_float(load_u16(p)); }
inline float elem_bf16(const uint8_t* p) {
  const uint32_t u = uint32_t(load_u16(p)) << 16;
  float v;
  std::memcpy(&v, &u, 4);
  return v;
}

template <int kSize, float (*Elem)(const uint8_t*)>
void dequantize_dense(const uint8_t* p, float* out, int64_t n) {
  for (int64_t e = 0; e < n; ++e) out[e] = Elem(p + e * kSize);
}

// Same lane rule as dot_blocks; a tail shorter than kDotLanes goes to the first lanes.
template <int kSize, float (*Elem)(const uint8_t*)>
float dot_dense(const uint8_t* p, const float* x, int64_t n) {
  float acc[kDotLanes] = {};
  alignas(64) float w[kDotLanes];
  int64_t e = 0;
  for (; e + kDotLanes <= n; e += kDotLanes) {
    for (int l = 0; l < kDotLanes; ++l) w[l] = Elem(p + (e + l) * kSize);
    dot_lanes(acc, w, x + e, kDotLanes);
  }
  for (int l = 0; e + l < n; ++l) acc[l] += Elem(p + (e + l) * kSize) * x[e + l];
  return reduce_lanes(acc);
}

// --- block decoders: out receives the block's elements in order ---

// Q8_0: d f16, qs int8[32].
void decode_q8_0(const uint8_t* b, float* y) {
  const float d = half_to_float(load_u16(b));
  const auto* qs = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < 32; ++j) y[j] = float(qs[j]) * d;
}

// Q4_K and Q5_K open with d, dmin and 12 bytes packing a 6-bit scale and min per sub-block of 32
// (llama.cpp get_scale_min_k4). Returns d·sc_j and dmin·m_j, both exact in fp32.
struct ScaleMinInt {
  int scale, min;
};
inline ScaleMinInt k4_scale_min_int(const uint8_t* b, int j) {
  const uint8_t* s = b + 4;
  return {j < 4 ? s[j] & 63 : (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4),
          j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | ((s[j] >> 6) << 4)};
}
struct ScaleMin {
  float scale, min;
};
inline ScaleMin k4_scale_min(const uint8_t* b, int j) {
  const ScaleMinInt sm = k4_scale_min_int(b, j);
  return {half_to_float(load_u16(b)) * float(sm.scale), half_to_float(load_u16(b + 2)) * float(sm.min)};
}

// Q4_K: d, dmin, scales[12], qs[128]. Chunk c of 64 elements: low nibbles of qs[32c..] then high.
void decode_q4_k(const uint8_t* b, float* y) {
  for (int c = 0; c < 4; ++c) {
    const ScaleMin lo = k4_scale_min(b, 2 * c), hi = k4_scale_min(b, 2 * c + 1);
    const uint8_t* q = b + 16 + 32 * c;
    float* yc = y + 64 * c;
    for (int l = 0; l < 32; ++l) yc[l] = lo.scale * float(q[l] & 0xF) - lo.min;
    for (int l = 0; l < 32; ++l) yc[32 + l] = hi.scale * float(q[l] >> 4) - hi.min;
  }
}

// Q5_K: d, dmin, scales[12], qh[32], qs[128]: Q4_K plus a fifth bit, bit 2c / 2c+1 of qh[l].
void decode_q5_k(const uint8_t* b, float* y) {
  const uint8_t* qh = b + 16;
  for (int c = 0; c < 4; ++c) {
    const ScaleMin lo = k4_scale_min(b, 2 * c), hi = k4_scale_min(b, 2 * c + 1);
    const uint8_t* q = b + 48 + 32 * c;
    float* yc = y + 64 * c;
    for (int l = 0; l < 32; ++l) yc[l] = lo.scale * float((q[l] & 0xF) | (((qh[l] >> (2 * c)) & 1) << 4)) - lo.min;
    for (int l = 0; l < 32; ++l)
      yc[32 + l] = hi.scale * float((q[l] >> 4) | (((qh[l] >> (2 * c + 1)) & 1) << 4)) - hi.min;
  }
}

// Q6_K: ql[128], qh[64], scales int8[16], d last. llama.cpp evaluates d·sc·q as (d·sc)·q; d·sc is
// exact, so the one rounding is the final product either way.
void decode_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* scales = reinterpret_cast<const int8_t*>(b + 192);
  const float d = half_to_float(load_u16(b + 208));
  for (int half = 0; half < 2; ++half) {
    const uint8_t* l0 = ql + 64 * half;
    const uint8_t* h0 = qh + 32 * half;
    const int8_t* s0 = scales + 8 * half;
    float* yh = y + 128 * half;
    // Elements l and l+16 of each 32-run use scales is and is+1: two runs of 16 keep the scale fixed.
    for (int is = 0; is < 2; ++is) {
      const float ds1 = d * float(s0[is]), ds2 = d * float(s0[is + 2]);
      const float ds3 = d * float(s0[is + 4]), ds4 = d * float(s0[is + 6]);
      for (int l = 16 * is; l < 16 * is + 16; ++l) {
        const int q1 = ((l0[l] & 0xF) | (((h0[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((l0[l + 32] & 0xF) | (((h0[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((l0[l] >> 4) | (((h0[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((l0[l + 32] >> 4) | (((h0[l] >> 6) & 3) << 4)) - 32;
        yh[l] = ds1 * float(q1);
        yh[l + 32] = ds2 * float(q2);
        yh[l + 64] = ds3 * float(q3);
        yh[l + 96] = ds4 * float(q4);
      }
    }
  }
}

// IQ4_NL: d, qs[16]; low nibbles are elements 0..15, high nibbles 16..31.
void decode_iq4_nl(const uint8_t* b, float* y) {
  const float d = half_to_float(load_u16(b));
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * kValuesIq4nl[qs[j] & 0xF];
    y[j + 16] = d * kValuesIq4nl[qs[j] >> 4];
  }
}

// IQ4_XS: d, u16 scales_h, scales_l[4], qs[128]; eight IQ4_NL-style sub-blocks with 6-bit scales.
void decode_iq4_xs(const uint8_t* b, float* y) {
  const float d = half_to_float(load_u16(b));
  const uint32_t scales_h = load_u16(b + 2);
  const uint8_t* scales_l = b + 4;
  const uint8_t* qs = b + 8;
  for (int ib = 0; ib < 8; ++ib) {
    const int ls = ((scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((scales_h >> (2 * ib)) & 3) << 4);
    const float dl = d * float(ls - 32);
    const uint8_t* q = qs + 16 * ib;
    float* yb = y + 32 * ib;
    for (int j = 0; j < 16; ++j) {
      yb[j] = dl * kValuesIq4nl[q[j] & 0xF];
      yb[j + 16] = dl * kValuesIq4nl[q[j] >> 4];
    }
  }
}

// NVFP4: d[4] (UE4M3 per 16 elements), qs[32]. Sub-block s: low nibble of qs[8s+j] is element
// 16s+j, high nibble is 16s+8+j. The per-tensor .scale sidecar is the caller's.
void decode_nvfp4(const uint8_t* b, float* y) {
  const uint8_t* qs = b + 4;
  for (int s = 0; s < 4; ++s) {
    const float d = kUe4m3Half[b[s]];
    const uint8_t* q = qs + 8 * s;
    float* ys = y + 16 * s;
    for (int j = 0; j < 8; ++j) {
      ys[j] = kValuesFp4[q[j] & 0xF] * d;
      ys[j + 8] = kValuesFp4[q[j] >> 4] * d;
    }
  }
}

// --- llama.cpp-compatible products (quant.h dot_act): the weights' integer codes against Q8_0 / Q8_K
// activations, each integer sum scaled as llama.cpp's vec_dot_<t>_q8_<x> scales it (the reference C
// kernels in ggml-cpu/quants.c; the SIMD ones sum the same floats in another order).

// Q8_0 · Q8_0 per 32: Σ += sumi·(d_w·d_x).
float dot_act_q8_0_rows(const uint8_t* b, const ActQ8_0* y, int64_t nb) {
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; ++i, b += 34) {
    const int32_t s = dot_i8(reinterpret_cast<const int8_t*>(b + 2), y[i].q, 32);
    sum += float(s) * (half_to_float(load_u16(b)) * y[i].d);
  }
  return sum;
}

// IQ4_NL · Q8_0 per 32: Σ += (d_x·d_w)·sumi over the non-linear codes.
float dot_act_iq4_nl_rows(const uint8_t* b, const ActQ8_0* y, int64_t nb) {
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; ++i, b += 18) {
    int8_t w[32];
    for (int j = 0; j < 16; ++j) {
      w[j] = int8_t(kValuesIq4nl[b[2 + j] & 0xF]);
      w[j + 16] = int8_t(kValuesIq4nl[b[2 + j] >> 4]);
    }
    sum += (y[i].d * half_to_float(load_u16(b))) * float(dot_i8(w, y[i].q, 32));
  }
  return sum;
}

// NVFP4 · Q8_0: each 16-element sub-block s is half of Q8_0 block 2i + s/2; Σ += (d_x·d_s)·sumi, d_s
// the halved UE4M3 scale and the codes 2×E2M1 (as llama.cpp's kvalues_mxfp4).
float dot_act_nvfp4_rows(const uint8_t* b, const ActQ8_0* y, int64_t nb) {
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; ++i, b += 36) {
    for (int s = 0; s < 4; ++s) {
      const ActQ8_0& a = y[2 * i + s / 2];
      const uint8_t* q = b + 4 + 8 * s;
      int8_t w[16];
      for (int j = 0; j < 8; ++j) {
        w[j] = int8_t(kValuesFp4[q[j] & 0xF]);
        w[j + 8] = int8_t(kValuesFp4[q[j] >> 4]);
      }
      sum += (a.d * kUe4m3Half[b[s]]) * float(dot_i8(w, a.q + 16 * (s % 2), 16));
    }
  }
  return sum;
}

// Q4_K / Q5_K · Q8_K per 256: Σ_j sc_j·(q·x over sub-block j) scaled by d_w·d_x, and the min terms
// Σ_j m_j·bsums by dmin_w·d_x in a second accumulator, added at the end (as llama.cpp keeps them).
template <bool kFifthBit>
float dot_act_k4_rows(const uint8_t* b, const ActQ8_K* y, int64_t nb) {
  constexpr int kBytes = kFifthBit ? 176 : 144;
  float sum = 0.0f, sum_min = 0.0f;
  for (int64_t i = 0; i < nb; ++i, b += kBytes) {
    const uint8_t* qh = b + 16;
    const uint8_t* qs = b + (kFifthBit ? 48 : 16);
    int8_t w[256];
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l) {
        const int h0 = kFifthBit ? ((qh[l] >> (2 * c)) & 1) << 4 : 0;
        const int h1 = kFifthBit ? ((qh[l] >> (2 * c + 1)) & 1) << 4 : 0;
        w[64 * c + l] = int8_t((qs[32 * c + l] & 0xF) | h0);
        w[64 * c + 32 + l] = int8_t((qs[32 * c + l] >> 4) | h1);
      }
    int32_t isum = 0, msum = 0;
    for (int j = 0; j < 8; ++j) {
      const ScaleMinInt sm = k4_scale_min_int(b, j);
      isum += sm.scale * dot_i8(w + 32 * j, y[i].q + 32 * j, 32);
      msum += sm.min * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
    }
    sum += (half_to_float(load_u16(b)) * y[i].d) * float(isum);
    sum_min -= (half_to_float(load_u16(b + 2)) * y[i].d) * float(msum);
  }
  return sum + sum_min;
}

// Q6_K · Q8_K per 256: codes −32…31, sixteen int8 scales of 16 elements each.
float dot_act_q6_k_rows(const uint8_t* b, const ActQ8_K* y, int64_t nb) {
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; ++i, b += 210) {
    const auto* scales = reinterpret_cast<const int8_t*>(b + 192);
    int8_t w[256];
    for (int half = 0; half < 2; ++half) {
      const uint8_t* l0 = b + 64 * half;
      const uint8_t* h0 = b + 128 + 32 * half;
      int8_t* wh = w + 128 * half;
      for (int l = 0; l < 32; ++l) {
        wh[l] = int8_t(((l0[l] & 0xF) | (((h0[l] >> 0) & 3) << 4)) - 32);
        wh[l + 32] = int8_t(((l0[l + 32] & 0xF) | (((h0[l] >> 2) & 3) << 4)) - 32);
        wh[l + 64] = int8_t(((l0[l] >> 4) | (((h0[l] >> 4) & 3) << 4)) - 32);
        wh[l + 96] = int8_t(((l0[l + 32] >> 4) | (((h0[l] >> 6) & 3) << 4)) - 32);
      }
    }
    int32_t isum = 0;
    for (int j = 0; j < 16; ++j) isum += int32_t(scales[j]) * dot_i8(w + 16 * j, y[i].q + 16 * j, 16);
    sum += (half_to_float(load_u16(b + 208)) * y[i].d) * float(isum);
  }
  return sum;
}

// IQ4_XS · Q8_K: per 32-element sub-block Σ += (d_w·d_x·(ls − 32))·sumi.
float dot_act_iq4_xs_rows(const uint8_t* b, const ActQ8_K* y, int64_t nb) {
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; ++i, b += 136) {
    const float d = half_to_float(load_u16(b)) * y[i].d;
    const uint32_t scales_h = load_u16(b + 2);
    for (int ib = 0; ib < 8; ++ib) {
      const int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((scales_h >> (2 * ib)) & 3) << 4);
      const uint8_t* q = b + 8 + 16 * ib;
      int8_t w[32];
      for (int j = 0; j < 16; ++j) {
        w[j] = int8_t(kValuesIq4nl[q[j] & 0xF]);
        w[j + 16] = int8_t(kValuesIq4nl[q[j] >> 4]);
      }
      sum += (d * float(ls - 32)) * float(dot_i8(w, y[i].q + 32 * ib, 32));
    }
  }
  return sum;
}

}  // namespace

void dequantize_f32(const uint8_t* b, float* out, int64_t n) { std::memcpy(out, b, size_t(n) * 4); }
float dot_f32(const uint8_t* b, const float* x, int64_t n) { return dot_dense<4, elem_f32>(b, x, n); }
void dequantize_f16(const uint8_t* b, float* out, int64_t n) { dequantize_dense<2, elem_f16>(b, out, n); }
float dot_f16(const uint8_t* b, const float* x, int64_t n) { return dot_dense<2, elem_f16>(b, x, n); }
void dequantize_bf16(const uint8_t* b, float* out, int64_t n) { dequantize_dense<2, elem_bf16>(b, out, n); }
float dot_bf16(const uint8_t* b, const float* x, int64_t n) { return dot_dense<2, elem_bf16>(b, x, n); }

void dequantize_q8_0(const uint8_t* b, float* out, int64_t n) { dequantize_blocks<32, 34, decode_q8_0>(b, out, n); }
float dot_q8_0(const uint8_t* b, const float* x, int64_t n) { return dot_blocks<32, 34, decode_q8_0>(b, x, n); }
void dequantize_q4_k(const uint8_t* b, float* out, int64_t n) { dequantize_blocks<256, 144, decode_q4_k>(b, out, n); }
float dot_q4_k(const uint8_t* b, const float* x, int64_t n) { return dot_blocks<256, 144, decode_q4_k>(b, x, n); }
void dequantize_q5_k(const uint8_t* b, float* out, int64_t n) { dequantize_blocks<256, 176, decode_q5_k>(b, out, n); }
float dot_q5_k(const uint8_t* b, const float* x, int64_t n) { return dot_blocks<256, 176, decode_q5_k>(b, x, n); }
void dequantize_q6_k(const uint8_t* b, float* out, int64_t n) { dequantize_blocks<256, 210, decode_q6_k>(b, out, n); }
float dot_q6_k(const uint8_t* b, const float* x, int64_t n) { return dot_blocks<256, 210, decode_q6_k>(b, x, n); }
void dequantize_iq4_nl(const uint8_t* b, float* out, int64_t n) { dequantize_blocks<32, 18, decode_iq4_nl>(b, out, n); }
float dot_iq4_nl(const uint8_t* b, const float* x, int64_t n) { return dot_blocks<32, 18, decode_iq4_nl>(b, x, n); }
void dequantize_iq4_xs(const uint8_t* b, float* out, int64_t n) { dequantize_blocks<256, 136, decode_iq4_xs>(b, out, n); }
float dot_iq4_xs(const uint8_t* b, const float* x, int64_t n) { return dot_blocks<256, 136, decode_iq4_xs>(b, x, n); }
void dequantize_nvfp4(const uint8_t* b, float* out, int64_t n) { dequantize_blocks<64, 36, decode_nvfp4>(b, out, n); }
float dot_nvfp4(const uint8_t* b, const float* x, int64_t n) { return dot_blocks<64, 36, decode_nvfp4>(b, x, n); }


float dot_act_q8_0(const uint8_t* b, const void* xa, int64_t n) {
  return dot_act_q8_0_rows(b, static_cast<const ActQ8_0*>(xa), n / 32);
}
float dot_act_iq4_nl(const uint8_t* b, const void* xa, int64_t n) {
  return dot_act_iq4_nl_rows(b, static_cast<const ActQ8_0*>(xa), n / 32);
}
float dot_act_nvfp4(const uint8_t* b, const void* xa, int64_t n) {
  return dot_act_nvfp4_rows(b, static_cast<const ActQ8_0*>(xa), n / 64);
}
float dot_act_q4_k(const uint8_t* b, const void* xa, int64_t n) {
  return dot_act_k4_rows<false>(b, static_cast<const ActQ8_K*>(xa), n / 256);
}
float dot_act_q5_k(const uint8_t* b, const void* xa, int64_t n) {
  return dot_act_k4_rows<true>(b, static_cast<const ActQ8_K*>(xa), n / 256);
}
float dot_act_q6_k(const uint8_t* b, const void* xa, int64_t n) {
  return dot_act_q6_k_rows(b, static_cast<const ActQ8_K*>(xa), n / 256);
}
float dot_act_iq4_xs(const uint8_t* b, const void* xa, int64_t n) {
  return dot_act_iq4_xs_rows(b, static_cast<const ActQ8_K*>(xa), n / 256);
}

}  // namespace tandem::gguf
