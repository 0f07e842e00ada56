// Dense BF16/F16/F32 weights on the CPU: a zero-copy view into a checkpoint's mapping that can
// multiply, gather rows and dequantize.
// Owner: the tensor borrows the RawTensor's bytes (the Checkpoint must outlive it); a copy is kept
// only when the bytes are not aligned to the element size. Thread: const methods from any thread.
// Sync: matmul returns when done (CPU).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tandem/weights.h"

namespace tandem::safetensors {

enum class DenseType { BF16, F16, F32 };

// True for the dtype strings DenseTensor reads ("BF16", "F16", "F32").
bool is_dense_dtype(const std::string& dtype);

class DenseTensor final : public QuantizedTensor {
 public:
  // `raw.dtype` must be BF16, F16 or F32.
  explicit DenseTensor(const RawTensor& raw);

  std::string type_name() const override;
  size_t bytes() const override { return nbytes_; }
  void get_rows(const int32_t* ids, int n, const Tensor& out) const override;
  void dequantize(float* out_host) const override;

 protected:
  // Each output element is one dot product computed by the same code for any n and thread split.
  void matmul_raw(const Tensor& x, const Tensor& y) const override;

 private:
  std::string name_;
  DenseType type_;
  const uint8_t* data_ = nullptr;
  std::vector<uint8_t> owned_;  // only for misaligned sources
  size_t nbytes_ = 0;
  int64_t numel_ = 0;
};

}  // namespace tandem::safetensors
