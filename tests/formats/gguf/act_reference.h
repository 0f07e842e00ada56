// An independent reference for the llama.cpp-compatible products (quant.h dot_act), shared by the
// k-quant and i-quant tests: the activation rounding written from llama.cpp's rules, and the product
// as Σ w_e·q_e·d_block in float64, which is llama.cpp's integer sums times float scales without the
// float rounding. Also checks quantize_activations against the rules bit for bit.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "formats/gguf/kernels_cpu.h"
#include "formats/gguf/quant.h"
#include "tandem/tensor.h"

namespace tandem::gguf::act_test {

// One activation row as llama.cpp rounds it: value e is q[e]·scale[e] (scale is per element so that
// every format reads the same way; it is constant over a block).
struct RoundedRow {
  std::vector<int> q;
  std::vector<double> scale;
  double value(size_t e) const { return q[e] * scale[e]; }
};

// Round half to even, written out (not std::nearbyint) so the reference shares nothing with the kernel.
inline int round_half_even(double v) {
  const double f = std::floor(v), r = v - f;
  int i = int(f);
  if (r > 0.5 || (r == 0.5 && (i & 1))) ++i;
  return i;
}

// Q8_0 (x86 AVX2 quantize_row_q8_0): d = amax/127 in fp32, stored fp16; q = round_even(x·(127/amax)).
inline RoundedRow round_q8_0(const std::vector<float>& x) {
  RoundedRow r{std::vector<int>(x.size()), std::vector<double>(x.size())};
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0;
    for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[32 * b + j]));
    const double d = f16_to_f32(f32_to_f16(amax / 127.0f));
    const float id = amax != 0 ? 127.0f / amax : 0.0f;
    for (size_t j = 0; j < 32; ++j) {
      const float v = x[32 * b + j] * id;  // one fp32 product, as the kernel's vmulps
      r.q[32 * b + j] = std::min(127, std::max(-128, round_half_even(v)));
      r.scale[32 * b + j] = d;
    }
  }
  return r;
}

// Q8_K (quantize_row_q8_K_ref): max = the first element of largest |x| with its sign, iscale = −127/max,
// q = min(127, round_even(iscale·x)), d = 1/iscale, all in fp32.
inline RoundedRow round_q8_k(const std::vector<float>& x) {
  RoundedRow r{std::vector<int>(x.size()), std::vector<double>(x.size())};
  for (size_t b = 0; b < x.size() / 256; ++b) {
    float amax = 0, max = 0;
    for (size_t j = 0; j < 256; ++j)
      if (std::fabs(x[256 * b + j]) > amax) amax = std::fabs(x[256 * b + j]), max = x[256 * b + j];
    const float iscale = amax != 0 ? -127.0f / max : 0.0f;
    const float d = amax != 0 ? 1.0f / iscale : 0.0f;
    for (size_t j = 0; j < 256; ++j) {
      const float v = iscale * x[256 * b + j];
      r.q[256 * b + j] = std::min(127, round_half_even(v));
      r.scale[256 * b + j] = d;
    }
  }
  return r;
}

// Value e of x after llama.cpp's rounding to f.
inline std::vector<double> rounded_values(ActFormat f, const std::vector<float>& x) {
  std::vector<double> v(x.size());
  if (f == ActFormat::Q8_0 || f == ActFormat::Q8_K) {
    const RoundedRow r = f == ActFormat::Q8_0 ? round_q8_0(x) : round_q8_k(x);
    for (size_t e = 0; e < x.size(); ++e) v[e] = r.value(e);
    return v;
  }
  for (size_t e = 0; e < x.size(); ++e)
    v[e] = f == ActFormat::F16    ? f16_to_f32(f32_to_f16(x[e]))
           : f == ActFormat::BF16 ? bf16_to_f32(f32_to_bf16(x[e]))
                                  : x[e];
  return v;
}

// Activations that exercise the rules: mostly unit normals, some tiny blocks, an all-zero block, and
// a block whose largest magnitude is negative.
inline std::vector<float> random_activations(int64_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = nd(g);
  if (n >= 512) {
    for (int64_t e = 256; e < 288; ++e) x[size_t(e)] *= 1e-3f;
    for (int64_t e = 0; e < 32; ++e) x[size_t(e)] = 0.0f;
    x[40] = -9.0f;
  }
  return x;
}

// quantize_activations must equal the rules above bit for bit (Q8 blocks), or the rounded floats.
inline void expect_quantized_as_llama(ActFormat f, const std::vector<float>& x, const void* xa) {
  const int64_t n = int64_t(x.size());
  if (f == ActFormat::Q8_0 || f == ActFormat::Q8_K) {
    const RoundedRow r = f == ActFormat::Q8_0 ? round_q8_0(x) : round_q8_k(x);
    const int block = f == ActFormat::Q8_0 ? 32 : 256;
    for (int64_t e = 0; e < n; ++e) {
      const int b = int(e / block), j = int(e % block);
      const auto* b0 = static_cast<const ActQ8_0*>(xa) + b;
      const auto* bk = static_cast<const ActQ8_K*>(xa) + b;
      const int q = f == ActFormat::Q8_0 ? b0->q[j] : bk->q[j];
      const double d = f == ActFormat::Q8_0 ? b0->d : bk->d;
      ASSERT_EQ(q, r.q[size_t(e)]) << "element " << e;
      ASSERT_EQ(d, r.scale[size_t(e)]) << "element " << e;
    }
    if (f == ActFormat::Q8_K)
      for (int64_t g = 0; g < n / 16; ++g) {
        int s = 0;
        for (int j = 0; j < 16; ++j) s += r.q[size_t(16 * g + j)];
        ASSERT_EQ(static_cast<const ActQ8_K*>(xa)[g / 16].bsums[g % 16], s) << "group " << g;
      }
    return;
  }
  const float* y = static_cast<const float*>(xa);
  const std::vector<double> want = rounded_values(f, x);
  for (int64_t e = 0; e < n; ++e) ASSERT_EQ(double(y[e]), want[size_t(e)]) << "element " << e;
}

// dot_act of `row` (n elements of type t, element e decoded by w(e) in float64) against x, checked
// against Σ w_e·value_e in float64. The kernel's float roundings (one per block scale product and
// per accumulation step) stay within `rel` of Σ|w_e·value_e|.
template <typename W>
void expect_dot_act_matches(const QuantType& t, const std::vector<uint8_t>& row, int64_t n, const std::vector<float>& x,
                            const W& w, double rel = 4e-6) {
  std::vector<uint8_t> xa(size_t(act_row_bytes(t.act, n)));
  quantize_activations(t.act, x.data(), xa.data(), n);
  expect_quantized_as_llama(t.act, x, xa.data());
  const std::vector<double> v = rounded_values(t.act, x);
  double sum = 0, mag = 0;
  for (int64_t e = 0; e < n; ++e) {
    const double p = w(e) * v[size_t(e)];
    sum += p;
    mag += std::fabs(p);
  }
  const float got = t.dot_act(row.data(), xa.data(), n);
  EXPECT_NEAR(got, sum, rel * mag + 1e-30) << t.name;
  EXPECT_EQ(t.dot_act(row.data(), xa.data(), n), got) << t.name << ": not deterministic";
}

}  // namespace tandem::gguf::act_test
