// Helpers for the EXL3 quantizer tests: Gaussian weights, a quantized linear read back through the
// decoder's own contract (exl3::parse_group + exl3::reconstruct).
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "formats/exl3/quantize.h"

namespace tandem::exl3::test {

inline std::vector<float> gaussian(size_t n, uint64_t seed, float std = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, std);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// The weight (out × in) the pack's tensors decode to.
inline std::vector<float> decode_linear(const QuantizedLinear& q) {
  auto tensors = linear_tensors(q, "layer.proj");
  std::vector<RawTensor> raw;
  for (const auto& t : tensors) raw.push_back({t.name, t.dtype, t.shape, t.data.data(), t.data.size(), "memory"});
  TensorGroup g;
  g.prefix = "layer.proj";
  for (const auto& r : raw) g.members.push_back(&r);
  g.shape = {q.out_features, q.in_features};
  return reconstruct(parse_group(g));
}

inline double mse(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return s / double(a.size());
}

}  // namespace tandem::exl3::test
