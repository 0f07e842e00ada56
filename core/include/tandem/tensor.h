// Activation tensors: a 2-D row-major view of memory owned elsewhere (a Buffer or a state).
// Owner: whoever allocated the Buffer. Thread: any, no internal locking. Sync: data on a device is
// valid in stream order; nothing here synchronizes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "tandem/error.h"

namespace tandem {

// Plain element types of activations and small tensors. Quantized weight types are not here:
// they belong to the format plugin that reads them (see weights.h).
enum class DType : uint8_t { F32, F16, BF16, I32 };

inline size_t dtype_size(DType t) { return t == DType::F32 || t == DType::I32 ? 4 : 2; }
inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::I32: return "i32";
  }
  return "?";
}

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::F32;
  int64_t rows = 0;
  int64_t cols = 0;

  Tensor() = default;
  Tensor(void* d, DType t, int64_t r, int64_t c) : data(d), dtype(t), rows(r), cols(c) {}
  static Tensor f32(float* d, int64_t r, int64_t c) { return Tensor(d, DType::F32, r, c); }

  int64_t numel() const { return rows * cols; }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype); }
  float* f32() const {
    check(dtype == DType::F32, "tensor: expected f32, found ", dtype_name(dtype));
    return static_cast<float*>(data);
  }
  float* row(int64_t r) const { return f32() + r * cols; }
  // Rows [r0, r0+n) as a tensor of their own.
  Tensor slice_rows(int64_t r0, int64_t n) const {
    return Tensor(static_cast<char*>(data) + size_t(r0 * cols) * dtype_size(dtype), dtype, n, cols);
  }
};

// Device memory. The CPU backend hands out host memory.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual void* data() = 0;
  virtual size_t bytes() const = 0;
};

// bf16 and fp16 conversion, used by CPU kernels and tests.
inline float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f32_to_bf16(float f) {  // round to nearest even; NaN stays NaN
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
TANDEM_API float f16_to_f32(uint16_t h);
TANDEM_API uint16_t f32_to_f16(float f);

}  // namespace tandem
