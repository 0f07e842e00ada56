// GGML block types on the CPU: the contract between the GGUF reader (gguf_*.cpp) and the per-type
// kernels (kquants_cpu.cpp, iquants_cpu.cpp, …). The reader maps a ggml type id to a QuantType and
// never looks inside blocks; a kernel file registers its types in quant_types.cpp.
// Owner: static tables. Thread: any (pure functions). Sync: none.
#pragma once
#include <cstdint>
#include <string>

namespace tandem::gguf {

// The format llama.cpp's CPU path rounds a matmul's activations to before the dot product: the weight
// type's vec_dot_type in ggml-cpu's type traits (spec/formats.md § 3.16). F32/F16/BF16 rows stay
// floats (rounded to that type); Q8_0 and Q8_K rows are the blocks of kernels_cpu.h.
enum class ActFormat : uint8_t { F32, F16, BF16, Q8_0, Q8_K };

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
  // llama.cpp-compatible products (the opt-in mode of gguf_format.h): `act` is llama.cpp's activation
  // format for this type, and dot_act(blocks, xa, n) the product with one activation row already in it
  // (quantize_activations), computed as llama.cpp's vec_dot does: integer sums per sub-block times the
  // float scales. Deterministic, like dot.
  ActFormat act;
  float (*dot_act)(const uint8_t* blocks, const void* xa, int64_t n);
};

// Bytes of one activation row of n elements in format f; n is a multiple of f's block (32 for Q8_0,
// 256 for Q8_K), which every weight type whose `act` is f guarantees.
int64_t act_row_bytes(ActFormat f, int64_t n);
// Rounds x[0, n) to f as llama.cpp's from_float for that type does; `out` holds act_row_bytes(f, n)
// bytes, 4-byte aligned.
void quantize_activations(ActFormat f, const float* x, void* out, int64_t n);

// nullptr when tandem does not support the type.
const QuantType* find_type(int ggml_id);
const QuantType* find_type(const std::string& name);
// Name of any ggml type id, including ones we cannot compute ("Q4_0", "TQ1_0"…), or "type <id>".
std::string ggml_type_name(int ggml_id);

// Bytes of a row of n elements (n % block_elems == 0 is the caller's check).
inline int64_t row_bytes(const QuantType& t, int64_t n) { return n / t.block_elems * t.block_bytes; }

}  // namespace tandem::gguf
