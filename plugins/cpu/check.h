// Validation and fixed-order reductions shared by the CPU kernels.
// Owner: n/a. Thread: any. Sync: none.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "tandem/error.h"
#include "tandem/tensor.h"

namespace tandem::cpu {

inline std::string shape_of(int64_t rows, int64_t cols) {
  return shape_str(std::vector<int64_t>{rows, cols});
}

// "rms_norm: y: expected f32 [2, 8], found bf16 [2, 4]"
inline void check_tensor(const char* op, const char* name, const Tensor& t, int64_t rows,
                         int64_t cols) {
  if (t.dtype != DType::F32 || t.rows != rows || t.cols != cols)
    fail(op, ": ", name, ": expected f32 ", shape_of(rows, cols), ", found ", dtype_name(t.dtype), " ",
         shape_of(t.rows, t.cols));
  check(t.data || t.numel() == 0, op, ": ", name, ": data is null");
}

inline void check_ptr(const char* op, const char* name, const void* p) {
  check(p != nullptr, op, ": ", name, " is null");
}

// Grain for parallel_for over rows of `cols` elements: enough work per chunk to pay for a wake-up.
inline int64_t row_grain(int64_t cols) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)); }

// Reductions in a fixed order of 8 interleaved partial sums: vectorizable without -ffast-math, and
// the order depends only on n, never on the batch or the thread.
inline float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float tail = 0;
  for (; i < n; ++i) tail += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
}
inline float sum_sq(const float* a, int64_t n) { return dot(a, a, n); }

}  // namespace tandem::cpu
