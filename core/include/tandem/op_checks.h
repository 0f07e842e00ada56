// Argument checks that every backend runs before an op touches memory, so that a bad tensor gets
// the same one-line error on every device.
// Owner: n/a. Thread: any. Sync: none.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tandem/error.h"
#include "tandem/tensor.h"

namespace tandem {

// "rms_norm: y: expected f32 [2, 8], found bf16 [2, 4]"
inline void check_tensor(const char* op, const char* name, const Tensor& t, int64_t rows, int64_t cols) {
  if (t.dtype != DType::F32 || t.rows != rows || t.cols != cols)
    fail(op, ": ", name, ": expected f32 ", shape_str(std::vector<int64_t>{rows, cols}), ", found ",
         dtype_name(t.dtype), " ", shape_str(std::vector<int64_t>{t.rows, t.cols}));
  check(t.data || t.numel() == 0, op, ": ", name, ": data is null");
}

inline void check_ptr(const char* op, const char* name, const void* p) {
  check(p != nullptr, op, ": ", name, " is null");
}

}  // namespace tandem
