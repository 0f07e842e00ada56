// The EXL3 quantizer (spec/formats.md § 5.8): a tail-biting Viterbi encoder for one 16×16 tile, and
// the quantization of one linear (random signs, Hadamard rotation, unit-RMS scaling, global scale
// search, LDLQ with a Hessian) into the tensors an EXL3 pack stores. trellis.h is the decode contract.
// Owner: results are plain values. Thread: every function may be called from any thread; encoders keep
// per-thread scratch and quantize_linear fans out over the core's worker pool (call it from one thread
// at a time). Sync: none (host code).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "formats/exl3/trellis.h"
#include "tandem/writer.h"

namespace tandem::exl3 {

// The fp16 values of all 65536 states as floats, computed once per codebook (thread-safe).
const float* codebook_values(Codebook cb);
// The standard deviation of the codebook's values over all states.
double codebook_std(Codebook cb);

// Encodes one tile. target[p] is the value wanted at stream position p (element tile_perm(p)).
// Writes 256 states that satisfy the tail-biting shift constraint and returns Σ (value − target)².
// encode_tile: two Viterbi passes over all 2^16 states (the first, over the tile's last positions,
// picks the wrap-around overlap; the second is constrained to it). encode_tile_greedy: each symbol
// chosen by itself (a reference that the Viterbi encoder must never lose to).
double encode_tile(const float target[256], int K, Codebook cb, uint16_t states[256]);
double encode_tile_greedy(const float target[256], int K, Codebook cb, uint16_t states[256]);
// Whether the states satisfy state_t = (state_{t−1} << K | sym_t) & 0xFFFF circularly.
bool states_consistent(const uint16_t states[256], int K);

struct QuantOptions {
  int bits = 4;                        // K, 1..8
  Codebook codebook = Codebook::kMul1;
  uint64_t seed = 0;                   // signs su/sv
  bool ldlq = true;                    // false: no feedback even with a Hessian (tests)
  double damping = 0.025;              // H += damping · mean(diag H) · I
};

// One quantized linear as an EXL3 pack stores it.
struct QuantizedLinear {
  int K = 0;
  Codebook codebook = Codebook::kMul1;
  int64_t k = 0, n = 0;                  // padded in × out (multiples of 128)
  int64_t in_features = 0, out_features = 0;
  std::vector<uint16_t> trellis;        // (k/16)·(n/16)·16K words, tile [i][j] at (i·n/16 + j)·16K
  std::vector<uint16_t> suh, svh;       // fp16 bits, length k and n
  float global_scale = 1;               // the scale search's choice (relative to unit RMS × codebook std)
};

// Quantizes w (out_features × in_features, row-major, the model's orientation) with the input
// Hessian h (in_features × in_features, e.g. XᵀX/rows; nullptr = identity: no feedback) so that
// reconstruct(parse_group(...)) ≈ w. Errors: bits outside 1..8, empty shapes, non-finite weights.
QuantizedLinear quantize_linear(const float* w, int64_t out_features, int64_t in_features, const float* h,
                                const QuantOptions& options);

// A tensor of the pack with its bytes (little-endian, as a safetensors container stores them).
struct PackTensor : TensorSpec {
  std::vector<uint8_t> data;
};

// The pack's tensors of one linear: <prefix>.trellis (I16), .suh, .svh (F16) and the codebook marker
// (.mul1 / .mcg, 0-dim I32; none for 3inst).
std::vector<PackTensor> linear_tensors(const QuantizedLinear& q, const std::string& prefix);
// The trellis shape [k/16, n/16, 16K] and the members' layouts, without the data (for headers).
std::vector<TensorSpec> linear_layout(int64_t out_features, int64_t in_features, int K, Codebook cb,
                                       const std::string& prefix);

// Codebook by name: "mul1", "mcg", "3inst"; an error lists the names.
Codebook parse_codebook(const std::string& name);

}  // namespace tandem::exl3
