// MLX ⇄ GGML block transcoders. Work fans out over rows; a row that cannot be transcoded records its
// first bad group in an atomic minimum, so the error names the first one in the tensor whatever the
// thread count (parallel_for does not carry exceptions out of its workers).
#include "mlx_repack.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>

#include "tandem/error.h"
#include "tandem/parallel.h"
#include "tandem/tensor.h"

namespace tandem::mlx {
namespace {

uint16_t load_u16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
void store_u16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
}

float half_value(const uint8_t* p, Half h) {
  const uint16_t bits = load_u16(p);
  return h == Half::F16 ? f16_to_f32(bits) : bf16_to_f32(bits);
}

// The fp16 bits of `v` when fp16 holds it exactly (NaN never does).
bool exact_f16(float v, uint16_t& out) {
  if (std::isnan(v)) return false;
  out = f32_to_f16(v);
  const float back = f16_to_f32(out);
  return back == v && std::signbit(back) == std::signbit(v);
}

std::string fmt(float v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.9g", double(v));
  return b;
}

std::string hex_byte(uint8_t v) {
  char b[8];
  std::snprintf(b, sizeof b, "0x%02X", unsigned(v));
  return b;
}

void rows_parallel(int64_t rows, int64_t k, const std::function<void(int64_t)>& row) {
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 18) / std::max<int64_t>(1, k));
  parallel_for(rows, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) row(r);
  });
}

void note_first(std::atomic<int64_t>& first, int64_t v) {
  int64_t cur = first.load();
  while (v < cur && !first.compare_exchange_weak(cur, v)) {
  }
}

}  // namespace

bool half_type(const std::string& dtype, Half& out) {
  if (dtype == "F16") return out = Half::F16, true;
  if (dtype == "BF16") return out = Half::BF16, true;
  return false;
}

void iq2_xxs_to_gguf(const uint8_t* words, const uint8_t* scales, Half scale_type, int64_t rows, int64_t k,
                     uint8_t* blocks, const std::string& at) {
  const int64_t nb = k / kIq2Block;
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  std::atomic<int64_t> bad{kNone};
  rows_parallel(rows, k, [&](int64_t r) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* out = blocks + (r * nb + b) * kIq2Bytes;
      const uint8_t* s = scales + (r * nb + b) * 2;
      uint16_t d = load_u16(s);
      if (scale_type == Half::BF16 && !exact_f16(bf16_to_f32(d), d)) note_first(bad, r * nb + b);
      store_u16(out, d);
      std::memcpy(out + 2, words + (r * nb + b) * 64, 64);
    }
  });
  if (bad != kNone) {
    const int64_t r = bad / nb, b = bad % nb;
    fail(at, ": block ", b, " of row ", r, " has BF16 scale ", fmt(half_value(scales + bad * 2, scale_type)),
         ", which an IQ2_XXS block's fp16 d cannot hold exactly");
  }
}

void nvfp4_to_gguf(const uint8_t* words, const uint8_t* scales, int64_t rows, int64_t k, uint8_t* blocks,
                   const std::string& at) {
  check(k % kNvfp4Block == 0, at, ": rows of ", k, " elements are not whole NVFP4 blocks of 64");
  const int64_t nb = k / kNvfp4Block;
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  std::atomic<int64_t> nan{kNone};
  rows_parallel(rows, k, [&](int64_t r) {
    const uint8_t* row = words + r * (k / 2);  // element e: byte e/2, low nibble first
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* out = blocks + (r * nb + b) * kNvfp4Bytes;
      for (int s = 0; s < 4; ++s) {
        const int64_t g = r * (k / 16) + b * 4 + s;
        const uint8_t sc = scales[g];
        if ((sc & 0x7F) == 0x7F) note_first(nan, g);
        // E4M3 is sign-magnitude: a negative scale is its magnitude times −1, and flipping every E2M1
        // sign bit (bit 3) negates the 16 values exactly (±0 are both zero).
        const uint8_t flip = (sc & 0x80) ? 0x8 : 0x0;
        out[s] = sc & 0x7F;
        const uint8_t* v = row + (b * 64 + s * 16) / 2;  // the 16 elements: 8 bytes
        for (int j = 0; j < 8; ++j) {
          const uint8_t lo = uint8_t(((v[j / 2] >> (4 * (j % 2))) & 0xF) ^ flip);           // element j
          const uint8_t hi = uint8_t(((v[(j + 8) / 2] >> (4 * (j % 2))) & 0xF) ^ flip);     // element j + 8
          out[4 + 8 * s + j] = uint8_t(lo | (hi << 4));
        }
      }
    }
  });
  if (nan != kNone)
    fail(at, ": scale ", nan % (k / 16), " of row ", nan / (k / 16), " is an E4M3 NaN (", hex_byte(scales[nan]),
         "), which an NVFP4 block cannot hold");
}

void affine8_to_q8_0(const uint8_t* words, const uint8_t* scales, const uint8_t* biases, Half half, int64_t rows,
                     int64_t k, int64_t group, uint8_t* blocks, const std::string& at) {
  check(group > 0 && group % kQ8Block == 0 && k % group == 0, at, ": 8-bit affine groups of ", group,
        " over rows of ", k, " elements are not whole Q8_0 blocks of 32");
  const int64_t ng = k / group, per = group / kQ8Block;
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  std::atomic<int64_t> bad{kNone};
  rows_parallel(rows, k, [&](int64_t r) {
    const uint8_t* u = words + r * k;  // 4 bytes per word, element e in byte e (little-endian)
    for (int64_t g = 0; g < ng; ++g) {
      const int64_t gi = r * ng + g;
      const float s = half_value(scales + gi * 2, half), bias = half_value(biases + gi * 2, half);
      uint16_t d = 0;
      if (!(bias == -128.0f * s) || !exact_f16(s, d)) {
        note_first(bad, gi);
        continue;
      }
      for (int64_t p = 0; p < per; ++p) {
        uint8_t* out = blocks + (r * (k / kQ8Block) + g * per + p) * kQ8Bytes;
        store_u16(out, d);
        for (int j = 0; j < kQ8Block; ++j) out[2 + j] = u[g * group + p * kQ8Block + j] ^ 0x80;  // q = u − 128
      }
    }
  });
  if (bad != kNone) {
    const int64_t r = bad / ng, g = bad % ng;
    const float s = half_value(scales + bad * 2, half), bias = half_value(biases + bad * 2, half);
    fail(at, ": group ", g, " of row ", r, " (elements ", g * group, "..", g * group + group - 1,
         ") is not a Q8_0 transcode: scale ", fmt(s), ", bias ", fmt(bias),
         bias == -128.0f * s ? " (the scale is not an fp16 value)"
                             : ", expected bias = -128 x scale = " + fmt(-128.0f * s));
  }
}

void iq2_xxs_from_gguf(const uint8_t* blocks, int64_t rows, int64_t k, uint8_t* words, uint8_t* scales) {
  const int64_t nb = k / kIq2Block;
  rows_parallel(rows, k, [&](int64_t r) {
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* in = blocks + (r * nb + b) * kIq2Bytes;
      std::memcpy(scales + (r * nb + b) * 2, in, 2);
      std::memcpy(words + (r * nb + b) * 64, in + 2, 64);
    }
  });
}

void nvfp4_from_gguf(const uint8_t* blocks, int64_t rows, int64_t k, uint8_t* words, uint8_t* scales) {
  const int64_t nb = k / kNvfp4Block;
  rows_parallel(rows, k, [&](int64_t r) {
    uint8_t* row = words + r * (k / 2);
    std::memset(row, 0, size_t(k / 2));
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* in = blocks + (r * nb + b) * kNvfp4Bytes;
      for (int s = 0; s < 4; ++s) {
        const uint8_t d = in[s] & 0x7F;
        scales[r * (k / 16) + b * 4 + s] = d == 0x7F ? 0 : d;
        for (int j = 0; j < 8; ++j) {
          const uint8_t q = in[4 + 8 * s + j];
          const int64_t e0 = b * 64 + s * 16 + j, e1 = e0 + 8;
          row[e0 / 2] |= uint8_t((q & 0xF) << (4 * (e0 % 2)));
          row[e1 / 2] |= uint8_t((q >> 4) << (4 * (e1 % 2)));
        }
      }
    }
  });
}

void q8_0_to_affine8(const uint8_t* blocks, int64_t rows, int64_t k, uint8_t* words, uint8_t* scales,
                     uint8_t* biases, const std::string& at) {
  const int64_t nb = k / kQ8Block;
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  std::atomic<int64_t> bad{kNone};
  rows_parallel(rows, k, [&](int64_t r) {
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* in = blocks + (r * nb + b) * kQ8Bytes;
      const uint16_t d = load_u16(in);
      uint16_t bias = 0;
      if (!exact_f16(-128.0f * f16_to_f32(d), bias)) note_first(bad, r * nb + b);
      store_u16(scales + (r * nb + b) * 2, d);
      store_u16(biases + (r * nb + b) * 2, bias);
      for (int j = 0; j < kQ8Block; ++j) words[r * k + b * kQ8Block + j] = in[2 + j] ^ 0x80;  // u = q + 128
    }
  });
  if (bad != kNone)
    fail(at, ": Q8_0 block ", bad % nb, " of row ", bad / nb, " has d = ",
         fmt(f16_to_f32(load_u16(blocks + bad * kQ8Bytes))),
         ", whose MLX bias -128 x d does not fit in fp16");
}

float nvfp4_multiplier(double global_scale) { return float(global_scale / 2688.0); }

bool nvfp4_global_scale_f32(float m, float& out) {
  const float guess = m * 2688.0f;
  float lo = guess, hi = guess;
  if (nvfp4_multiplier(guess) == m) return out = guess, true;
  for (int i = 0; i < 4; ++i) {
    lo = std::nextafter(lo, -std::numeric_limits<float>::infinity());
    hi = std::nextafter(hi, std::numeric_limits<float>::infinity());
    if (nvfp4_multiplier(lo) == m) return out = lo, true;
    if (nvfp4_multiplier(hi) == m) return out = hi, true;
  }
  return false;
}

}  // namespace tandem::mlx
