// Transcoding between MLX's quantized layouts and GGML blocks, both ways, with no requantization
// (spec/formats.md § 3.2, § 3.8, § 3.14, § 7). Each function handles `rows` rows of `k` elements;
// MLX side: the tensors of one module as stored (uint32 words, little-endian; scales and biases as
// 16-bit floats or E4M3 bytes); GGML side: whole blocks, rows back to back. `at` prefixes errors
// ("mlx: file 'F': tensor 'X'"). The byte mapping is the derivation of § 7.2, marked unverified there;
// docs/formats-mlx.md lists every assumption.
// Owner: callers own every buffer. Thread: any; each call fans out over the core's worker pool.
// Sync: none.
#pragma once
#include <cstdint>
#include <string>

namespace tandem::mlx {

// A 16-bit float as MLX stores scales and biases: IEEE half ("F16") or bfloat16 ("BF16").
enum class Half { F16, BF16 };
// "F16" → F16, "BF16" → BF16; false for any other dtype.
bool half_type(const std::string& dtype, Half& out);

constexpr int64_t kIq2Block = 256, kIq2Bytes = 66;   // IQ2_XXS: d, then 64 qs bytes
constexpr int64_t kNvfp4Block = 64, kNvfp4Bytes = 36;  // NVFP4: 4 UE4M3 bytes, then 32 qs bytes
constexpr int64_t kQ8Block = 32, kQ8Bytes = 34;       // Q8_0: d, then 32 int8

// MLX → GGML.
// iq2_xxs: words [rows, k/16] (block b of a row = words 16b..16b+15 = its 64 qs bytes), scales
// [rows, k/256] (block b's d). A BF16 scale that fp16 cannot hold exactly is an error.
void iq2_xxs_to_gguf(const uint8_t* words, const uint8_t* scales, Half scale_type, int64_t rows, int64_t k,
                     uint8_t* blocks, const std::string& at);
// nvfp4: words [rows, k/8] (element e in bits 4(e%8) of word e/8), E4M3 scales [rows, k/16]. A
// negative scale becomes its magnitude with the 16 elements' signs flipped (exact); a NaN scale is an
// error. k must be a multiple of 64.
void nvfp4_to_gguf(const uint8_t* words, const uint8_t* scales, int64_t rows, int64_t k, uint8_t* blocks,
                   const std::string& at);
// 8-bit affine with groups of `group` (a multiple of 32): words [rows, k/4] (element e in byte e of the
// row), scales and biases [rows, k/group]. Exact when every group has bias == −128·scale and a scale
// fp16 holds: then q = u − 128 and d = scale. Otherwise an error naming the first group that is not
// (row, group, elements, the two values).
void affine8_to_q8_0(const uint8_t* words, const uint8_t* scales, const uint8_t* biases, Half half, int64_t rows,
                     int64_t k, int64_t group, uint8_t* blocks, const std::string& at);

// GGML → MLX (the writer). Scales and biases come out as F16.
void iq2_xxs_from_gguf(const uint8_t* blocks, int64_t rows, int64_t k, uint8_t* words, uint8_t* scales);
// Bit 7 of a GGML NVFP4 scale is ignored by its decoder and 0x7F decodes to 0, so both are written as
// the E4M3 byte of the same value (bit 7 clear; 0x7F → 0x00).
void nvfp4_from_gguf(const uint8_t* blocks, int64_t rows, int64_t k, uint8_t* words, uint8_t* scales);
// Group 32, u = q + 128, scale = d, bias = −128·d. Error: a d whose −128·d overflows fp16.
void q8_0_to_affine8(const uint8_t* blocks, int64_t rows, int64_t k, uint8_t* words, uint8_t* scales,
                     uint8_t* biases, const std::string& at);

// NVFP4 global scale, MLX's amax convention (§ 7.1): the multiplier is global_scale / (6·448), the
// quotient rounded once to f32 (for an f32 global scale the same as f32 division).
float nvfp4_multiplier(double global_scale);
// An f32 global scale whose multiplier is exactly `m`, searched near m·2688. Not every f32 m has one
// (next to some m, consecutive f32 global scales step by 1.5 ulp of m): false then, and the writer
// stores the F64 m·2688, which is exact.
bool nvfp4_global_scale_f32(float m, float& out);

}  // namespace tandem::mlx
