// Helpers for the safetensors tests: temp folders, hand-made (possibly broken) files, error checks,
// a fake backend, and an independent float64 decoding of BF16/F16/F32.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "tandem/backend.h"
#include "tandem/error.h"
#include "test_util.h"

namespace tandem::safetensors::test {

using tandem::test::TempDir;

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size()));
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline std::string u64_le(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = char(v >> (8 * i));
  return s;
}

// A file with the given header text (not padded) followed by `data_bytes` bytes of 0x11.
inline std::string raw_file(const std::string& json, size_t data_bytes) {
  return u64_le(json.size()) + json + std::string(data_bytes, '\x11');
}

using tandem::test::expect_error;

// Independent decoding from the format definitions (spec/formats.md §3.1).
inline double ref_bf16(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline double ref_f16(uint16_t h) {
  int sign = h >> 15, exp = (h >> 10) & 31, man = h & 1023;
  double v;
  if (exp == 31) v = man ? NAN : INFINITY;
  else if (exp == 0) v = std::ldexp(double(man), -24);
  else v = std::ldexp(1024.0 + man, exp - 25);
  return sign ? -v : v;
}
inline double ref_value(const std::string& dtype, const uint8_t* p) {
  if (dtype == "F32") {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h = uint16_t(p[0] | (p[1] << 8));
  return dtype == "BF16" ? ref_bf16(h) : ref_f16(h);
}

// A backend that only answers device(); the format must not touch anything else.
class FakeBackend final : public Backend {
 public:
  explicit FakeBackend(std::string device) : device_(std::move(device)) {}
  std::string device() const override { return device_; }
  std::unique_ptr<Buffer> alloc(size_t) override { fail("fake backend: alloc"); }
  void upload(void*, const void*, size_t) override { fail("fake backend: upload"); }
  void download(void*, const void*, size_t) override { fail("fake backend: download"); }
  void rms_norm(const Tensor&, const float*, float, const Tensor&) override { fail("fake backend"); }
  void gated_rms_norm(const Tensor&, const Tensor&, const float*, int, float, const Tensor&) override {
    fail("fake backend");
  }
  void add(const Tensor&, const Tensor&, const Tensor&) override { fail("fake backend"); }
  void relu2(const Tensor&) override { fail("fake backend"); }
  void attention(const Tensor&, const Tensor&, const Tensor&, float*, float*, int64_t, int64_t, int, int, int,
                 const Tensor&) override {
    fail("fake backend");
  }
  void moe_route(const Tensor&, const float*, const RouteParams&, int32_t*, float*) override { fail("fake backend"); }
  int32_t sample(const float*, int64_t, const SamplingParams&, Rng&) override { fail("fake backend"); }

 private:
  std::string device_;
};

}  // namespace tandem::safetensors::test
