// The EXL3 weight on the CPU: multiplies in the rotated basis, decoding each 16×16 trellis tile on the
// fly (spec/formats.md § 5.3), so the dense matrix never exists outside dequantize().
// Owner: the tensor borrows the checkpoint's trellis bytes (the Model keeps the checkpoint alive).
// Thread: const methods from any thread (no shared scratch). Sync: matmul returns when done.
#pragma once
#include <cstdint>
#include <string>

#include "formats/exl3/trellis.h"
#include "tandem/weights.h"

namespace tandem::exl3 {

// decode_tile with a value table and word-wise state extraction: the same values, bit for bit.
void decode_tile_fast(const uint16_t* words, int K, Codebook cb, float out[256]);

class Exl3Tensor final : public QuantizedTensor {
 public:
  // Parses and validates the group (parse_group's one-line errors name the tensor). Shape
  // [out_features, in_features].
  explicit Exl3Tensor(const TensorGroup& group);

  std::string type_name() const override;  // "EXL3_K4_mul1"
  // Stored bytes of trellis, suh/su, svh/sv and bias: what one full pass reads.
  size_t bytes() const override { return bytes_; }
  // Row o of W = suh ⊙ H_k·Ŵ·H_n·(svh[o]·e_o), trimmed: decodes only the 128 output columns of o's
  // Hadamard block.
  void get_rows(const int32_t* ids, int n, const Tensor& out) const override;
  void dequantize(float* out_host) const override;  // reconstruct(): out_features × in_features
  const Layout& layout() const { return l_; }

 protected:
  // xh = H_k(pad(x) ⊙ suh); z = xh·Ŵ, parallel over tile columns, each tile decoded once and applied
  // to every row; y = trim(H_n z ⊙ svh) + bias. Each z element sums tile rows, then rows within a
  // tile, in ascending order whatever n or the split (batch invariance).
  void matmul_raw(const Tensor& x, const Tensor& y) const override;

 private:
  Layout l_;
  size_t bytes_ = 0;
};

}  // namespace tandem::exl3
