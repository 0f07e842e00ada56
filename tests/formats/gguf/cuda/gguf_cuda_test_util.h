// Helpers for the GGUF GPU tests and the GEMV benchmark: fresh random *valid* blocks of every type
// (random bytes with sane fp16 scale fields), weights as a checkpoint would hold them, and device
// buffers.
#pragma once
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "device_buffers.h"
#include "formats/gguf/quant.h"
#include "tandem/backend.h"
#include "tandem/tensor.h"
#include "tandem/weights.h"
#include "test_util.h"

namespace tandem::gguf::test {

inline void put_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

// Where a block keeps its fp16 super-scales (spec/formats.md § 3); IQ1_M spreads its d over the top
// nibbles of four u16, NVFP4 has UE4M3 bytes instead.
inline void set_block_scales(const std::string& type, uint8_t* b, std::mt19937_64& g, float d_mag) {
  std::uniform_real_distribution<float> u(0.75f, 1.25f);
  auto d = [&] { return f32_to_f16((g() & 1 ? -1.f : 1.f) * d_mag * u(g)); };
  if (type == "Q8_0" || type == "IQ4_NL" || type == "IQ4_XS" || type == "IQ2_XXS" || type == "IQ2_XS" ||
      type == "IQ2_S" || type == "IQ3_XXS" || type == "IQ3_S") {
    put_u16(b, d());
  } else if (type == "Q4_K" || type == "Q5_K") {
    put_u16(b, f32_to_f16(d_mag * u(g)));
    put_u16(b + 2, f32_to_f16(d_mag * u(g)));
  } else if (type == "Q6_K") {
    put_u16(b + 208, d());
  } else if (type == "IQ1_M") {
    const uint16_t h = d();
    for (int i = 0; i < 4; ++i) {
      uint16_t sc;
      std::memcpy(&sc, b + 48 + 2 * i, 2);
      sc = uint16_t((sc & 0x0FFF) | (((h >> (4 * i)) & 0xF) << 12));
      put_u16(b + 48 + 2 * i, sc);
    }
  } else if (type == "NVFP4") {
    // UE4M3 exponents 5..8 (about 0.1 … 1.9 after the halving); d_mag comes from the .scale sidecar.
    for (int s = 0; s < 4; ++s) b[s] = uint8_t(((5 + g() % 4) << 3) | (g() & 7));
  }
}

// rows × k elements of `type`: dense types from uniform values, block types from random bytes with
// fp16 scale fields of about d_mag.
inline std::vector<uint8_t> random_weight(const std::string& type, int64_t rows, int64_t k, uint64_t seed,
                                          float d_mag = 0.01f) {
  const QuantType* t = find_type(type);
  std::mt19937_64 g(seed);
  std::vector<uint8_t> bytes(size_t(rows * row_bytes(*t, k)));
  if (type == "F32" || type == "F16" || type == "BF16") {
    auto v = tandem::test::random_vec(size_t(rows * k), seed, -1.f, 1.f);
    for (size_t i = 0; i < v.size(); ++i) {
      if (type == "F32") std::memcpy(bytes.data() + 4 * i, &v[i], 4);
      else put_u16(bytes.data() + 2 * i, type == "F16" ? f32_to_f16(v[i]) : f32_to_bf16(v[i]));
    }
    return bytes;
  }
  for (auto& b : bytes) b = uint8_t(g());
  for (size_t at = 0; at < bytes.size(); at += size_t(t->block_bytes))
    set_block_scales(type, bytes.data() + at, g, d_mag);
  return bytes;
}

// The CPU dequantizer's values of a rows × k weight of type qt held as GGML blocks (row-major).
inline std::vector<float> dequantize_rows(const QuantType& qt, const std::vector<uint8_t>& bytes, int64_t rows,
                                          int64_t k) {
  const int64_t rb = row_bytes(qt, k);
  std::vector<float> w(size_t(rows * k));
  for (int64_t r = 0; r < rows; ++r) qt.dequantize(bytes.data() + r * rb, w.data() + r * k, k);
  return w;
}

// A weight as a checkpoint holds it.
struct Stored {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  RawTensor raw() const { return RawTensor{name, dtype, shape, bytes.data(), bytes.size(), "memory"}; }
};
inline Stored make_stored(const std::string& type, int64_t m, int64_t k, uint64_t seed, const std::string& name = "w") {
  return Stored{name, type, {m, k}, random_weight(type, m, k, seed)};
}

// A one-float `.scale` sidecar.
struct StoredScale {
  float value;
  std::string name = "w.scale";
  RawTensor raw() const {
    return RawTensor{name, "F32", {1}, reinterpret_cast<const uint8_t*>(&value), 4, "memory"};
  }
};

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) setenv(name_, old_.c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

using tandem::test::Dev;
using tandem::test::download;
using tandem::test::poisoned;
using tandem::test::same_bits;
using tandem::test::upload;

}  // namespace tandem::gguf::test
