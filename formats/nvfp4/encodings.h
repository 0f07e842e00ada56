// The element and scale encodings of NVFP4 and FP8 checkpoints (spec/formats.md § 6.1, § 1): FP4 E2M1
// elements, FP8 E4M3 (OCP E4M3FN) block scales and weights.
// Owner: n/a (pure functions). Thread: any. Sync: none.
#pragma once
#include <cmath>
#include <cstdint>

namespace tandem::nvfp4 {

// E2M1: bit 3 the sign, bits 2..0 index {0, 0.5, 1, 1.5, 2, 3, 4, 6}.
inline float e2m1(uint8_t nibble) {
  static constexpr float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float m = kMag[nibble & 7];
  return nibble & 8 ? -m : m;
}

// E4M3FN: bias 7, no infinities; 0x7F and 0xFF are NaN.
inline bool e4m3_is_nan(uint8_t b) { return (b & 0x7F) == 0x7F; }
inline float e4m3(uint8_t b) {
  if (e4m3_is_nan(b)) return NAN;
  const int e = (b >> 3) & 0xF, m = b & 7;
  const float v = e == 0 ? std::ldexp(float(m), -9) : std::ldexp(1.0f + float(m) / 8.0f, e - 7);
  return b & 0x80 ? -v : v;
}

// A block scale the GGUF repack can carry: non-negative (−0 reads as 0) and not NaN, so that
// UE4M3(b & 0x7F) is its exact value (spec § 6.4).
inline bool e4m3_is_valid_scale(uint8_t b) { return !e4m3_is_nan(b) && (!(b & 0x80) || b == 0x80); }

}  // namespace tandem::nvfp4
