// What the dense CUDA tests share (test_dense_cuda.cpp, test_dense_tc_cuda.cpp): a weight as a
// checkpoint stores it, and the error measure the CPU comparisons use.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "device_buffers.h"
#include "tandem/tensor.h"
#include "tandem/weights.h"
#include "test_util.h"

namespace tandem::safetensors::test {

using tandem::test::Dev;
using tandem::test::download;
using tandem::test::poisoned;
using tandem::test::random_vec;
using tandem::test::same_bits;
using tandem::test::upload;

// A weight as a checkpoint would hold it: bytes of one dtype, and the RawTensor that points at them.
struct Stored {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  RawTensor raw() const { return RawTensor{name, dtype, shape, bytes.data(), bytes.size(), "memory"}; }
};

inline Stored make_weight(const std::string& dtype, int64_t m, int64_t k, uint64_t seed, const std::string& name = "w") {
  auto v = random_vec(size_t(m * k), seed, -1.f, 1.f);
  Stored s{name, dtype, {m, k}, {}};
  if (dtype == "F32") {
    s.bytes.resize(v.size() * 4);
    std::memcpy(s.bytes.data(), v.data(), s.bytes.size());
  } else {
    s.bytes.resize(v.size() * 2);
    auto* h = reinterpret_cast<uint16_t*>(s.bytes.data());
    for (size_t i = 0; i < v.size(); ++i) h[i] = dtype == "BF16" ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
  }
  return s;
}

// E random experts [m, k] of one dtype ("e0", "e1", …; seeds from `seed`, which advances) and the
// RawTensor views load_dense_experts_cuda takes. Not copied or moved: the views point into `stored`.
struct Experts {
  Experts(const std::string& dtype, int E, int64_t m, int64_t k, uint64_t& seed) {
    for (int e = 0; e < E; ++e) stored.push_back(make_weight(dtype, m, k, seed++, "e" + std::to_string(e)));
    for (auto& st : stored) raws.push_back(st.raw());
    for (auto& r : raws) ptrs.push_back(&r);
  }
  Experts(const Experts&) = delete;
  Experts& operator=(const Experts&) = delete;
  std::vector<Stored> stored;
  std::vector<RawTensor> raws;
  std::vector<const RawTensor*> ptrs;
};

// Largest |got − want| / Σ_j |x_j·w_j| over the outputs: the error relative to the dot product's
// own magnitude, which bounds any summation order's rounding.
inline double dot_rel_err(const std::vector<float>& got, const std::vector<float>& want, const std::vector<float>& x,
                          const std::vector<float>& w, int64_t n, int64_t m, int64_t k) {
  double worst = 0;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < m; ++o) {
      double mag = 1e-30;
      for (int64_t j = 0; j < k; ++j) mag += std::abs(double(x[r * k + j]) * w[o * k + j]);
      const float g = got[r * m + o];
      if (!std::isfinite(g)) return INFINITY;
      worst = std::max(worst, std::abs(double(g) - want[r * m + o]) / mag);
    }
  return worst;
}

}  // namespace tandem::safetensors::test
