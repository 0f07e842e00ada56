// Per-type CPU block kernels behind the QuantType table (quant_types.cpp), plus the few helpers the
// kernel files share so every type reads fields and accumulates dot products the same way.
// Owner: stateless functions over caller-owned bytes. Thread: any. Sync: none.
#pragma once
#include <cstdint>
#include <cstring>

namespace tandem::gguf {

// The QuantType functions of each type: dequantize_<t>(blocks, out, n) decodes n elements (a
// multiple of the block size); dot_<t>(blocks, x, n) is Σ w·x over them (see quant.h).
// kquants_cpu.cpp
void dequantize_f32(const uint8_t* blocks, float* out, int64_t n);
float dot_f32(const uint8_t* blocks, const float* x, int64_t n);
void dequantize_f16(const uint8_t* blocks, float* out, int64_t n);
float dot_f16(const uint8_t* blocks, const float* x, int64_t n);
void dequantize_bf16(const uint8_t* blocks, float* out, int64_t n);
float dot_bf16(const uint8_t* blocks, const float* x, int64_t n);
void dequantize_q8_0(const uint8_t* blocks, float* out, int64_t n);
float dot_q8_0(const uint8_t* blocks, const float* x, int64_t n);
void dequantize_q4_k(const uint8_t* blocks, float* out, int64_t n);
float dot_q4_k(const uint8_t* blocks, const float* x, int64_t n);
void dequantize_q5_k(const uint8_t* blocks, float* out, int64_t n);
float dot_q5_k(const uint8_t* blocks, const float* x, int64_t n);
void dequantize_q6_k(const uint8_t* blocks, float* out, int64_t n);
float dot_q6_k(const uint8_t* blocks, const float* x, int64_t n);
void dequantize_iq4_nl(const uint8_t* blocks, float* out, int64_t n);
float dot_iq4_nl(const uint8_t* blocks, const float* x, int64_t n);
void dequantize_iq4_xs(const uint8_t* blocks, float* out, int64_t n);
float dot_iq4_xs(const uint8_t* blocks, const float* x, int64_t n);
void dequantize_nvfp4(const uint8_t* blocks, float* out, int64_t n);
float dot_nvfp4(const uint8_t* blocks, const float* x, int64_t n);
// iquants_cpu.cpp
void dequantize_iq2_xxs(const uint8_t* blocks, float* out, int64_t n);
float dot_iq2_xxs(const uint8_t* blocks, const float* x, int64_t n);
void dequantize_iq2_xs(const uint8_t* blocks, float* out, int64_t n);
float dot_iq2_xs(const uint8_t* blocks, const float* x, int64_t n);
void dequantize_iq2_s(const uint8_t* blocks, float* out, int64_t n);
float dot_iq2_s(const uint8_t* blocks, const float* x, int64_t n);
void dequantize_iq3_xxs(const uint8_t* blocks, float* out, int64_t n);
float dot_iq3_xxs(const uint8_t* blocks, const float* x, int64_t n);
void dequantize_iq3_s(const uint8_t* blocks, float* out, int64_t n);
float dot_iq3_s(const uint8_t* blocks, const float* x, int64_t n);
void dequantize_iq1_m(const uint8_t* blocks, float* out, int64_t n);
float dot_iq1_m(const uint8_t* blocks, const float* x, int64_t n);

// llama.cpp-compatible products (quant.h dot_act): xa is one activation row from quantize_activations
// (activations_cpu.cpp) in the type's `act` format. F32/F16/BF16 rows are floats for dot_<t>.
float dot_act_f32(const uint8_t* blocks, const void* xa, int64_t n);
float dot_act_f16(const uint8_t* blocks, const void* xa, int64_t n);
float dot_act_bf16(const uint8_t* blocks, const void* xa, int64_t n);
// Q8_0 activations (kquants_cpu.cpp)
float dot_act_q8_0(const uint8_t* blocks, const void* xa, int64_t n);
float dot_act_iq4_nl(const uint8_t* blocks, const void* xa, int64_t n);
float dot_act_nvfp4(const uint8_t* blocks, const void* xa, int64_t n);
// Q8_K activations (kquants_cpu.cpp, iquants_cpu.cpp)
float dot_act_q4_k(const uint8_t* blocks, const void* xa, int64_t n);
float dot_act_q5_k(const uint8_t* blocks, const void* xa, int64_t n);
float dot_act_q6_k(const uint8_t* blocks, const void* xa, int64_t n);
float dot_act_iq4_xs(const uint8_t* blocks, const void* xa, int64_t n);
float dot_act_iq2_xxs(const uint8_t* blocks, const void* xa, int64_t n);
float dot_act_iq2_xs(const uint8_t* blocks, const void* xa, int64_t n);
float dot_act_iq2_s(const uint8_t* blocks, const void* xa, int64_t n);
float dot_act_iq3_xxs(const uint8_t* blocks, const void* xa, int64_t n);
float dot_act_iq3_s(const uint8_t* blocks, const void* xa, int64_t n);
float dot_act_iq1_m(const uint8_t* blocks, const void* xa, int64_t n);

// Activation blocks (llama.cpp's block_q8_0 / block_q8_K in value, laid out for us). Q8_0: 32 values
// q·d, d = amax/127 rounded through fp16 and kept as its fp32 value. Q8_K: 256 values q·d, d in fp32,
// bsums the sums of each 16 consecutive q (Q4_K/Q5_K take their min terms from them).
struct ActQ8_0 {
  float d;
  int8_t q[32];
};
struct ActQ8_K {
  float d;
  int16_t bsums[16];
  int8_t q[256];
};

// Σ a[i]·b[i] in int32: |a|, |b| ≤ 128 and n ≤ 256 cannot overflow.
inline int32_t dot_i8(const int8_t* a, const int8_t* b, int n) {
  int32_t s = 0;
  for (int i = 0; i < n; ++i) s += int32_t(a[i]) * int32_t(b[i]);
  return s;
}

// Blocks sit at any byte offset (Q8_0 is 34 bytes), so multi-byte fields are read with memcpy;
// GGUF is little-endian and so are the hosts we build for.
inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// IEEE binary16 → fp32, exact for every input (subnormals, inf, NaN payloads); the core's
// f16_to_f32 is out of line. All three cases are computed and picked with bit masks: a conditional
// expression would become a branch around the float ops (they may trap), and F16 rows would not
// vectorize.
inline float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;
  const float sub = float(int32_t(em)) * 0x1p-24f;  // subnormal or zero: em·2^-24, exact in fp32
  uint32_t sub_bits;
  std::memcpy(&sub_bits, &sub, 4);
  const uint32_t normal = (em << 13) + ((127u - 15u) << 23);  // rebias the exponent
  const uint32_t special = (em << 13) | 0x7f800000u;          // inf / NaN, payload kept
  const uint32_t is_special = 0u - uint32_t(em >= 0x7c00u);
  const uint32_t is_normal = (0u - uint32_t(em >= 0x0400u)) & ~is_special;
  const uint32_t is_sub = ~(is_special | is_normal);
  const uint32_t u = (special & is_special) | (normal & is_normal) | (sub_bits & is_sub) | sign;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The dot-product accumulation every type uses, so a row's sum depends only on its weights and x:
// element e of the row adds w[e]·x[e] into lane e mod kDotLanes, in element order, and the lanes are
// reduced pairwise at the end. A kernel decodes one block (or sub-block) into a small buffer and
// calls dot_lanes on it; the weights it multiplies are bit-for-bit what dequantize_<t> writes.
constexpr int kDotLanes = 32;

// acc[l] += w[e]·x[e] for e ≡ l; count is a multiple of kDotLanes.
inline void dot_lanes(float* acc, const float* w, const float* x, int count) {
  for (int e = 0; e < count; e += kDotLanes)
    for (int l = 0; l < kDotLanes; ++l) acc[l] += w[e + l] * x[e + l];
}

inline float reduce_lanes(float* acc) {
  for (int width = kDotLanes / 2; width >= 1; width /= 2)
    for (int l = 0; l < width; ++l) acc[l] += acc[l + width];
  return acc[0];
}

// Drivers for a type whose block of kElems elements (a multiple of kDotLanes) and kBytes bytes is
// decoded by Decode(block, out). Both use the one decoder, so dot multiplies exactly the values
// dequantize writes; dot never holds more than 256 decoded elements.
template <int kElems, int kBytes, void (*Decode)(const uint8_t*, float*)>
void dequantize_blocks(const uint8_t* blocks, float* out, int64_t n) {
  for (int64_t i = 0; i < n / kElems; ++i) Decode(blocks + i * kBytes, out + i * kElems);
}

// Small blocks are decoded several at a time (up to 256 elements): reading back each 32-element
// block as soon as it is written stalls on store forwarding. The lanes and their order are the same.
template <int kElems, int kBytes, void (*Decode)(const uint8_t*, float*)>
float dot_blocks(const uint8_t* blocks, const float* x, int64_t n) {
  static_assert(kElems % kDotLanes == 0, "a block must fill whole lane groups");
  constexpr int kGroup = kElems >= 256 ? 1 : 256 / kElems;
  float acc[kDotLanes] = {};
  alignas(64) float w[kGroup * kElems];
  const int64_t nb = n / kElems;
  for (int64_t i = 0; i < nb; i += kGroup) {
    const int g = nb - i < kGroup ? int(nb - i) : kGroup;
    for (int j = 0; j < g; ++j) Decode(blocks + (i + j) * kBytes, w + j * kElems);
    dot_lanes(acc, w, x + i * kElems, g * kElems);
  }
  return reduce_lanes(acc);
}

}  // namespace tandem::gguf
