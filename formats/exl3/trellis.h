// EXL3 storage, the facts every EXL3 component shares (spec/formats.md § 5): the three codebooks
// (16-bit trellis state → fp16 value), the tile element order, the tail-biting bitstream of a tile,
// the 128-point Hadamard and the layout of one quantized linear's tensor group.
// Owner: Layout points into the checkpoint's bytes and must not outlive it. Thread: all functions are
// pure and may be called from any thread. Sync: none (host code).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tandem/weights.h"

namespace tandem::exl3 {

enum class Codebook { k3Inst = 0, kMcg = 1, kMul1 = 2 };
const char* codebook_name(Codebook cb);           // "3inst", "mcg", "mul1"
constexpr uint32_t kMcgMarker = 0xCBAC1FEDu;     // value of the 0-dim `mcg` tensor
constexpr uint32_t kMul1Marker = 0x83DCD12Du;    // value of the 0-dim `mul1` tensor
constexpr int kMinBits = 1, kMaxBits = 8;         // K, bits per weight
constexpr int kTile = 16;                         // a tile is 16 input rows × 16 output columns
constexpr int kHad = 128;                         // Hadamard block

// The value of trellis state s (low 16 bits used) as fp16 bits, exactly as exllamav3's kernels
// compute it (one rounding to fp16).
uint16_t state_value_f16(uint32_t s, Codebook cb);
float state_value(uint32_t s, Codebook cb);

// Stream position p (0..255) of a tile → element r·16 + c (r: input row in the tile, c: output
// column), the tensor-core fragment order.
int tile_perm(int p);

// The 256 states of one tile from its 16·K stored int16 words (bitstream order, not element order).
void tile_states(const uint16_t* words, int K, uint16_t states[256]);
// The inverse: writes 16·K words from 256 states. The states must satisfy the tail-biting shift
// constraint (state_t = (state_{t−1} << K | sym_t) & 0xFFFF, circularly); only each state's low K bits
// are stored.
void pack_tile(const uint16_t states[256], int K, uint16_t* words);
// The tile decoded: out[r·16 + c] = Ŵ value of input row r, output column c.
void decode_tile(const uint16_t* words, int K, Codebook cb, float out[256]);

// x[0..n) ← x·(H128/√128) in each consecutive block of 128 (n a multiple of 128). Natural-order
// Sylvester matrix, symmetric and orthonormal after scaling: applying it twice is the identity.
void hadamard128(float* x, int64_t n);

// One quantized linear as stored: trellis (k/16, n/16, 16·K) int16, input scales suh (k), output
// scales svh (n), optional bias (n). k and n are the padded dimensions (multiples of 128); in_features
// and out_features are the model's (≤ k, ≤ n), taken from TensorGroup::shape when the caller gave
// one, else k and n.
struct Layout {
  std::string name;              // group prefix, for messages
  int K = 0;
  Codebook codebook = Codebook::k3Inst;
  int64_t k = 0, n = 0;          // padded in × out
  int64_t in_features = 0, out_features = 0;
  const uint16_t* trellis = nullptr;
  std::vector<float> suh, svh;   // length k and n (legacy packed su/sv bits expanded to ±1)
  std::vector<float> bias;       // empty or length out_features
  const uint16_t* tile(int64_t i, int64_t j) const { return trellis + (i * (n / kTile) + j) * kTile * K; }
  size_t trellis_bytes() const { return size_t(k / kTile) * size_t(n / kTile) * kTile * K * 2; }
};

// Whether the group looks like EXL3 storage: a `trellis` member with `suh`/`su` and `svh`/`sv`.
bool is_exl3_group(const TensorGroup& group);
// Reads and validates the group. Errors name the tensor: missing suh/svh, wrong dtype or trellis
// shape, K out of 1..8, unknown codebook marker or both markers, dimensions not multiples of 128,
// scales or bias of the wrong length, an expected shape larger than the storage.
Layout parse_group(const TensorGroup& group);

// Ŵ of the whole tensor in the rotated basis, row-major k × n (tests, the converter).
std::vector<float> decode_rotated(const Layout& l);
// The weight in the model's orientation: out_features × in_features, W[o][i] =
// (diag(suh)·H_k·Ŵ·H_n·diag(svh))[i][o], computed in float.
std::vector<float> reconstruct(const Layout& l);

}  // namespace tandem::exl3
