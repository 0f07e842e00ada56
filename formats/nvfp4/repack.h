// ModelOpt NVFP4 → GGUF NVFP4 blocks (spec/formats.md § 6.4, § 3.14), the loss-free repack through
// which the CUDA module reuses the GGUF kernels: per row, four 16-element ModelOpt blocks become one
// 64-element ggml block, d[s] = weight_scale & 0x7F (the scales' sign bit is 0: parse_group refuses
// negative and NaN scales), nibbles re-paired so that qs[8s+j] = v[16s+j] | v[16s+8+j] << 4. The
// per-tensor weight_scale_2 becomes the GGUF `.scale` that multiplies the output.
// Owner: the returned bytes are the caller's. Thread: any. Sync: none.
#pragma once
#include <cstdint>
#include <vector>

#include "formats/nvfp4/nvfp4_cpu.h"

namespace tandem::nvfp4 {

constexpr int kGgufBlock = 64, kGgufBlockBytes = 36;

// [out, in/64] blocks of 36 bytes. `l` must be NVFP4; in % 64 != 0 is an error naming the tensor.
std::vector<uint8_t> repack_gguf_nvfp4(const Layout& l);

// An FP8 weight's codes as BF16 bits: every E4M3 value is exact in BF16 (3 mantissa bits, exponents
// −9…8). The weight_scale stays apart (multiplying it in would round).
std::vector<uint16_t> fp8_to_bf16(const Layout& l);

}  // namespace tandem::nvfp4
