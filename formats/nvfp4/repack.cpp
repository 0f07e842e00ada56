// The ModelOpt → GGUF NVFP4 repack and the FP8 → BF16 widening (repack.h).
#include "formats/nvfp4/repack.h"

#include <cstring>

#include "formats/nvfp4/encodings.h"
#include "tandem/error.h"

namespace tandem::nvfp4 {

std::vector<uint8_t> repack_gguf_nvfp4(const Layout& l) {
  check(l.storage == Storage::NVFP4, "nvfp4: tensor '", l.name, "' is not NVFP4");
  if (l.in % kGgufBlock != 0)
    fail("nvfp4: '", l.file, "': tensor '", l.name, ".weight' has ", l.in, " inputs per row; the GGUF NVFP4 kernels ",
         "need a multiple of ", kGgufBlock);
  const int64_t blocks = l.in / kGgufBlock;
  std::vector<uint8_t> out(size_t(l.out * blocks * kGgufBlockBytes));
  for (int64_t r = 0; r < l.out; ++r) {
    const uint8_t* q = l.q + r * (l.in / 2);
    const uint8_t* s = l.scales + r * (l.in / kGroup);
    for (int64_t b = 0; b < blocks; ++b) {
      uint8_t* dst = out.data() + (r * blocks + b) * kGgufBlockBytes;
      for (int t = 0; t < 4; ++t) {
        const uint8_t scale = s[b * 4 + t];
        dst[t] = uint8_t(scale & 0x7F);  // −0 (0x80) becomes 0; other signed or NaN scales never get here
        const uint8_t* src = q + (b * kGgufBlock + t * kGroup) / 2;  // 8 bytes: elements 16t … 16t+15
        for (int j = 0; j < 8; ++j) {
          const int lo = j, hi = 8 + j;  // elements 16t+j and 16t+8+j
          const uint8_t vlo = uint8_t(src[lo / 2] >> (4 * (lo & 1)) & 0xF);
          const uint8_t vhi = uint8_t(src[hi / 2] >> (4 * (hi & 1)) & 0xF);
          dst[4 + 8 * t + j] = uint8_t(vlo | vhi << 4);
        }
      }
    }
  }
  return out;
}

std::vector<uint16_t> fp8_to_bf16(const Layout& l) {
  check(l.storage == Storage::FP8, "nvfp4: tensor '", l.name, "' is not FP8");
  std::vector<uint16_t> out(size_t(l.out * l.in));
  for (size_t i = 0; i < out.size(); ++i) {
    const float v = e4m3(l.q[i]);
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    out[i] = uint16_t(bits >> 16);  // exact: the low 16 bits are zero
  }
  return out;
}

}  // namespace tandem::nvfp4
