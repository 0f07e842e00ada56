// Helpers for the safetensors tests: temp folders, hand-made (possibly broken) files, error checks,
// the device-only backend, and an independent float64 decoding of BF16/F16/F32.
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

#include "device_only_backend.h"
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

using tandem::test::DeviceOnlyBackend;

}  // namespace tandem::safetensors::test
