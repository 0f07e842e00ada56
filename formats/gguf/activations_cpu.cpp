// Activation rounding for the llama.cpp-compatible products (quant.h quantize_activations): each row
// rounded to the weight type's vec_dot_type as the x86 build of llama.cpp the oracle runs does it.
#include <cmath>
#include <cstring>

#include "kernels_cpu.h"
#include "quant.h"
#include "tandem/error.h"
#include "tandem/tensor.h"

namespace tandem::gguf {
namespace {

// Round half to even, as llama.cpp's nearest_int (a 1.5·2^23 add) and _mm256_round_ps do in the
// default rounding mode; NaN (a NaN activation) becomes 0 rather than an undefined conversion.
inline int round_even_clamped(float v, int lo, int hi) {
  const float r = std::nearbyint(v);
  if (!(r == r)) return 0;
  return r < float(lo) ? lo : r > float(hi) ? hi : int(r);
}

// quantize_row_q8_0 of ggml-cpu on AVX/AVX2 (every x86 variant node-llama-cpp ships but sse42 and x64):
// d = amax/127 stored as fp16, q = round(x·(127/amax)), ties to even. (The portable reference uses
// 1/d and rounds ties away from zero; the two differ in rare last-bit cases.)
void quantize_q8_0(const float* x, ActQ8_0* y, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    y[b].d = half_to_float(f32_to_f16(amax / 127.0f));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    for (int j = 0; j < 32; ++j) y[b].q[j] = int8_t(round_even_clamped(x[j] * id, -128, 127));
  }
}

// quantize_row_q8_K_ref (x86 has no other): the element of largest magnitude (the first one on a
// tie) keeps its sign in iscale = −127/max, so it lands on −127; q = min(127, round(iscale·x)) and
// d = 1/iscale, two roundings that the product q·d inherits.
void quantize_q8_k(const float* x, ActQ8_K* y, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b, x += 256) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 256; ++j)
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    ActQ8_K& o = y[b];
    if (amax == 0.0f) {
      std::memset(&o, 0, sizeof o);
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < 256; ++j) o.q[j] = int8_t(round_even_clamped(iscale * x[j], -128, 127));
    for (int g = 0; g < 16; ++g) {
      int s = 0;
      for (int j = 0; j < 16; ++j) s += o.q[16 * g + j];
      o.bsums[g] = int16_t(s);
    }
    o.d = 1.0f / iscale;
  }
}

}  // namespace

int64_t act_row_bytes(ActFormat f, int64_t n) {
  switch (f) {
    case ActFormat::F32:
    case ActFormat::F16:
    case ActFormat::BF16: return n * int64_t(sizeof(float));
    case ActFormat::Q8_0: return n / 32 * int64_t(sizeof(ActQ8_0));
    case ActFormat::Q8_K: return n / 256 * int64_t(sizeof(ActQ8_K));
  }
  return 0;
}

void quantize_activations(ActFormat f, const float* x, void* out, int64_t n) {
  float* y = static_cast<float*>(out);
  switch (f) {
    case ActFormat::F32: std::memcpy(y, x, size_t(n) * sizeof(float)); return;
    case ActFormat::F16:  // F16C's conversion: round to nearest even
      for (int64_t e = 0; e < n; ++e) y[e] = half_to_float(f32_to_f16(x[e]));
      return;
    case ActFormat::BF16:
      for (int64_t e = 0; e < n; ++e) y[e] = bf16_to_f32(f32_to_bf16(x[e]));
      return;
    case ActFormat::Q8_0:
      check(n % 32 == 0, "quantize_activations: a Q8_0 row of ", n, " elements is not a whole number of blocks (32)");
      quantize_q8_0(x, static_cast<ActQ8_0*>(out), n);
      return;
    case ActFormat::Q8_K:
      check(n % 256 == 0, "quantize_activations: a Q8_K row of ", n, " elements is not a whole number of blocks (256)");
      quantize_q8_k(x, static_cast<ActQ8_K*>(out), n);
      return;
  }
}

float dot_act_f32(const uint8_t* b, const void* xa, int64_t n) { return dot_f32(b, static_cast<const float*>(xa), n); }
float dot_act_f16(const uint8_t* b, const void* xa, int64_t n) { return dot_f16(b, static_cast<const float*>(xa), n); }
float dot_act_bf16(const uint8_t* b, const void* xa, int64_t n) {
  return dot_bf16(b, static_cast<const float*>(xa), n);
}

}  // namespace tandem::gguf
