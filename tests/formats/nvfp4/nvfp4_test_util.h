// Helpers for the NVFP4/ModelOpt tests: an independent decoder (the E2M1 table and the E4M3 rules
// written out here from spec/formats.md § 6.1 and § 1, not the plugin's code), a simple reference
// quantizer in ModelOpt's recipe (§ 6.1), and the tensors of a ModelOpt-layout linear (§ 6.2).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "formats/safetensors/safetensors_writer.h"
#include "tandem/weights.h"

namespace tandem::nvfp4::test {

namespace st = tandem::safetensors;

// E2M1 codes 0..15: sign bit 3, magnitudes {0, .5, 1, 1.5, 2, 3, 4, 6}.
constexpr double kE2M1[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6};

// OCP E4M3FN, by the rules: S EEEE MMM, bias 7; E = 0 subnormal m/8·2^-6; 0x7F/0xFF NaN.
inline double ref_e4m3(uint8_t b) {
  const int sign = b >> 7, e = (b >> 3) & 15, m = b & 7;
  if (e == 15 && m == 7) return NAN;
  const double mag = e == 0 ? (m / 8.0) * std::pow(2.0, -6) : (1.0 + m / 8.0) * std::pow(2.0, e - 7);
  return sign ? -mag : mag;
}

// Nearest non-negative E4M3 code to v ≥ 0 (ties to the even code), by search over all codes.
inline uint8_t round_e4m3(double v) {
  uint8_t best = 0;
  double err = INFINITY;
  for (int c = 0; c < 0x7F; ++c) {
    const double e = std::abs(ref_e4m3(uint8_t(c)) - v);
    if (e < err || (e == err && (c & 1) == 0)) err = e, best = uint8_t(c);
  }
  return best;
}

inline uint8_t round_e2m1(double v) {
  uint8_t best = 0;
  double err = INFINITY;
  for (int c = 0; c < 8; ++c) {
    const double e = std::abs(kE2M1[c] - std::abs(v));
    if (e < err) err = e, best = uint8_t(c);
  }
  return uint8_t(best | (v < 0 && best ? 8 : 0));
}

// A ModelOpt NVFP4 linear [out, in] quantized from float values.
struct Nvfp4Linear {
  int64_t out = 0, in = 0;
  std::vector<uint8_t> q;       // one code per element (unpacked), row-major
  std::vector<uint8_t> scales;  // [out, in/16] E4M3
  float scale2 = 1, input_scale = 0.02f;

  // The reference value of element (r, k): e2m1·e4m3·scale2, in double and rounded once to f32.
  float value(int64_t r, int64_t k) const {
    return float(kE2M1[q[size_t(r * in + k)]] * ref_e4m3(scales[size_t(r * (in / 16) + k / 16)]) * double(scale2));
  }
  std::vector<float> values() const {
    std::vector<float> v(size_t(out * in));
    for (int64_t r = 0; r < out; ++r)
      for (int64_t k = 0; k < in; ++k) v[size_t(r * in + k)] = value(r, k);
    return v;
  }
  std::vector<uint8_t> packed() const {  // [out, in/2]: element 2b low nibble of byte b
    std::vector<uint8_t> p(size_t(out * in / 2));
    for (size_t b = 0; b < p.size(); ++b) p[b] = uint8_t(q[2 * b] | q[2 * b + 1] << 4);
    return p;
  }
};

// ModelOpt's recipe: scale2 = amax/(6·448); block scale e4m3(block_amax/(6·scale2)), zero → 1;
// q = round_e2m1(w/(scale·scale2)).
inline Nvfp4Linear quantize_nvfp4(const std::vector<float>& w, int64_t out, int64_t in) {
  Nvfp4Linear l;
  l.out = out, l.in = in;
  double amax = 0;
  for (float v : w) amax = std::max(amax, std::abs(double(v)));
  l.scale2 = float(amax / (6 * 448));
  l.q.resize(w.size());
  l.scales.resize(size_t(out * in / 16));
  for (int64_t r = 0; r < out; ++r)
    for (int64_t b = 0; b < in / 16; ++b) {
      double bmax = 0;
      for (int j = 0; j < 16; ++j) bmax = std::max(bmax, std::abs(double(w[size_t(r * in + b * 16 + j)])));
      uint8_t s = round_e4m3(bmax / (6 * double(l.scale2)));
      if (s == 0) s = 0x38;  // 1.0
      l.scales[size_t(r * (in / 16) + b)] = s;
      const double d = ref_e4m3(s) * double(l.scale2);
      for (int j = 0; j < 16; ++j) {
        const size_t i = size_t(r * in + b * 16 + j);
        l.q[i] = round_e2m1(double(w[i]) / d);
      }
    }
  return l;
}

inline std::vector<float> random_weights(int64_t out, int64_t in, uint64_t seed, double sd) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> d(0, sd);
  std::vector<float> w(size_t(out * in));
  for (auto& v : w) v = float(d(g));
  return w;
}

inline st::WriteTensor bytes_tensor(const std::string& name, const char* dtype, std::vector<int64_t> shape,
                                    const void* p, size_t n) {
  st::WriteTensor t{name, dtype, std::move(shape), std::vector<uint8_t>(n)};
  std::memcpy(t.data.data(), p, n);
  return t;
}

// The ModelOpt tensors of an NVFP4 linear `name` (weight, weight_scale, weight_scale_2, input_scale).
inline void add_nvfp4(std::vector<st::WriteTensor>& out, const std::string& name, const Nvfp4Linear& l) {
  const auto p = l.packed();
  out.push_back(bytes_tensor(name + ".weight", "U8", {l.out, l.in / 2}, p.data(), p.size()));
  out.push_back(bytes_tensor(name + ".weight_scale", "F8_E4M3", {l.out, l.in / 16}, l.scales.data(), l.scales.size()));
  out.push_back(bytes_tensor(name + ".weight_scale_2", "F32", {}, &l.scale2, 4));
  out.push_back(bytes_tensor(name + ".input_scale", "F32", {}, &l.input_scale, 4));
}

// An FP8 linear: per-tensor scale amax/448, codes round_e4m3(|w|/s) with the sign.
struct Fp8Linear {
  int64_t out = 0, in = 0;
  std::vector<uint8_t> q;
  float scale = 1;
  float value(size_t i) const { return float(ref_e4m3(q[i]) * double(scale)); }
  std::vector<float> values() const {
    std::vector<float> v(q.size());
    for (size_t i = 0; i < q.size(); ++i) v[i] = value(i);
    return v;
  }
};
inline Fp8Linear quantize_fp8(const std::vector<float>& w, int64_t out, int64_t in) {
  Fp8Linear l;
  l.out = out, l.in = in;
  double amax = 0;
  for (float v : w) amax = std::max(amax, std::abs(double(v)));
  l.scale = float(amax / 448);
  l.q.resize(w.size());
  for (size_t i = 0; i < w.size(); ++i)
    l.q[i] = uint8_t(round_e4m3(std::abs(double(w[i])) / double(l.scale)) | (w[i] < 0 ? 0x80 : 0));
  return l;
}
inline void add_fp8(std::vector<st::WriteTensor>& out, const std::string& name, const Fp8Linear& l) {
  out.push_back(bytes_tensor(name + ".weight", "F8_E4M3", {l.out, l.in}, l.q.data(), l.q.size()));
  out.push_back(bytes_tensor(name + ".weight_scale", "F32", {}, &l.scale, 4));
  const float is = 0.05f;
  out.push_back(bytes_tensor(name + ".input_scale", "F32", {}, &is, 4));
}

// The group of `prefix` in a checkpoint, as the model loader builds it.
inline TensorGroup group_of(const Checkpoint& c, const std::string& prefix, std::vector<int64_t> shape = {}) {
  TensorGroup g;
  g.prefix = prefix;
  g.shape = std::move(shape);
  for (const RawTensor& t : c.tensors())
    if (t.name.compare(0, prefix.size(), prefix) == 0 && (t.name.size() == prefix.size() || t.name[prefix.size()] == '.'))
      g.members.push_back(&t);
  return g;
}

}  // namespace tandem::nvfp4::test
