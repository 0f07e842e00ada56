// GGML block types on the CPU: the contract between the GGUF reader (gguf_*.cpp) and the per-type
// kernels (kquants_cpu.cpp, iquants_cpu.cpp, …). The reader maps a ggml type id to a QuantType and
// never looks inside blocks; a kernel file registers its types in quant_types.cpp.
// Owner: static tables. Thread: any (pure functions). Sync: none.
#pragma once
#include <cstdint>
#include <string>

namespace tandem::gguf {

struct QuantType {
  int id;               // ggml type id (spec/formats.md § 2.4)
  const char* name;     // "Q4_K", "IQ2_XXS", "F32", …
  int block_elems;      // elements per block along ne0
  int block_bytes;      // bytes per block
  // Decodes n elements (a multiple of block_elems) of consecutive blocks into out (fp32).
  void (*dequantize)(const uint8_t* blocks, float* out, int64_t n);
  // Σ_e w[e]·x[e] over n elements (a multiple of block_elems) of one row, fp32 activations, fp32
  // accumulation, without first decoding the whole row. Deterministic: the same inputs give the same
  // bits whatever the caller (batch invariance depends on it).
  float (*dot)(const uint8_t* blocks, const float* x, int64_t n);
};

// nullptr when tandem does not support the type.
const QuantType* find_type(int ggml_id);
const QuantType* find_type(const std::string& name);
// Name of any ggml type id, including ones we cannot compute ("Q4_0", "TQ1_0"…), or "type <id>".
std::string ggml_type_name(int ggml_id);

// Bytes of a row of n elements (n % block_elems == 0 is the caller's check).
inline int64_t row_bytes(const QuantType& t, int64_t n) { return n / t.block_elems * t.block_bytes; }

}  // namespace tandem::gguf
